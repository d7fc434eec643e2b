//! The upstream leg of a session: a fresh HTTP/1.1 connection from Pingora's connector,
//! the handshake written on it, and the upstream's answer read.

use crate::channels::Channel;
use crate::errors::{GatewayError, UpstreamFailure};
use crate::gateway::Gateway;
use bytes::{Bytes, BytesMut};
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::protocols::ALPN;
use pingora::{Error, ErrorType};

/// The pool group of upgraded connections. An upgraded connection never goes back to
/// the pool, so nothing is ever pooled under this group: every session gets a fresh
/// connection, never one another exchange left idle (which the upstream may be closing
/// at that very moment, and whose failure could not be told from a refused upgrade).
const UPGRADE_POOL_GROUP: u64 = u64::from_be_bytes(*b"realtime");

/// Informational answers (`100`, `103`) skipped before the real one.
const MAX_INTERIM: usize = 4;

/// Connects to the channel and sends the handshake; returns once the upstream's
/// (final) response header has arrived. The connection is closed on any failure.
pub async fn open(
    gw: &Gateway,
    channel: &Channel,
    req: RequestHeader,
) -> Result<HttpSession, GatewayError> {
    let unreachable = GatewayError::Upstream(UpstreamFailure::Connect);
    let mut peer = channel.peer().await.map_err(|e| {
        tracing::warn!(channel = %channel.name, error = %e, "upstream address lookup failed");
        unreachable.clone()
    })?;
    peer.group_key = UPGRADE_POOL_GROUP;
    // RFC 6455 is an HTTP/1.1 upgrade; an h2 connection could not carry it.
    peer.options.alpn = ALPN::H1;
    let (mut http, reused) = gw.connector.get_http_session(&peer).await.map_err(|e| {
        tracing::warn!(channel = %channel.name, error = %e, "upstream connect failed");
        unreachable
    })?;
    if reused {
        // Not expected (see UPGRADE_POOL_GROUP); HTTP/1.1 still allows an upgrade on a
        // persistent connection, so it is used.
        tracing::debug!(channel = %channel.name, "realtime handshake on a pooled connection");
    }
    // The pooled session does not take these from the peer's options.
    http.set_read_timeout(Some(channel.read_timeout));
    http.set_write_timeout(Some(channel.read_timeout));
    match handshake(&mut http, req).await {
        Ok(()) => Ok(http),
        Err(e) => {
            tracing::warn!(channel = %channel.name, error = %e, "realtime upstream handshake failed");
            http.shutdown().await;
            Err(crate::relay::upstream::failure(&e))
        }
    }
}

async fn handshake(http: &mut HttpSession, req: RequestHeader) -> pingora::Result<()> {
    http.write_request_header(Box::new(req)).await?;
    for _ in 0..=MAX_INTERIM {
        http.read_response_header().await?;
        if !matches!(status(http), 100 | 102..=199) {
            return Ok(());
        }
    }
    Error::e_explain(
        ErrorType::InvalidHTTPHeader,
        "too many informational answers",
    )
}

pub fn status(http: &HttpSession) -> u16 {
    http.response_header().map_or(0, |h| h.status.as_u16())
}

/// True when the upstream switched protocols; its request half then carries raw bytes
/// (Pingora sizes it from the handshake's headers, zero, until told otherwise).
pub fn upgraded(http: &mut HttpSession) -> bool {
    match http {
        HttpSession::H1(h1) if h1.was_upgraded() => {
            h1.maybe_upgrade_body_writer();
            true
        }
        _ => false,
    }
}

/// The body of a refused upgrade, at most `limit` bytes (for the operator's log only:
/// the client gets a sanitized error). A read failure ends it early.
pub async fn refusal_body(http: &mut HttpSession, limit: usize) -> Bytes {
    let mut buf = BytesMut::new();
    while let Ok(Some(chunk)) = http.read_response_body().await {
        let room = limit - buf.len();
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if buf.len() == limit {
            break;
        }
    }
    buf.freeze()
}

/// The error the client gets when the upstream answered the handshake with `status`:
/// its class is kept (a 4xx stays a client error), its words are not (spec 7.2).
pub fn refused(status: u16) -> GatewayError {
    match status {
        400..=599 => GatewayError::Upstream(UpstreamFailure::Status(status)),
        // A success or a redirect is not a WebSocket: nothing the client can act on.
        _ => GatewayError::Upstream(UpstreamFailure::BadResponse),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_its_class_only() {
        for (status, want) in [(401, 500), (403, 500), (404, 404), (429, 429), (400, 400)] {
            assert_eq!(refused(status).status(), want, "{status}");
        }
        assert!(matches!(
            refused(503),
            GatewayError::Upstream(UpstreamFailure::Status(503))
        ));
        for status in [200, 204, 301, 0] {
            assert!(
                matches!(
                    refused(status),
                    GatewayError::Upstream(UpstreamFailure::BadResponse)
                ),
                "{status}"
            );
        }
    }
}
