//! Reading the client's request body whole, within the configured size and time.

use crate::config::Limits;
use crate::errors::GatewayError;
use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

/// The body, at most `limits.max_body_bytes` (413), arrived whole within
/// `limits.body_timeout` (408; Pingora's own timeout bounds each read, not the whole).
pub async fn read(session: &mut Session, limits: &Limits) -> Result<Bytes, GatewayError> {
    match tokio::time::timeout(limits.body_timeout, whole(session, limits.max_body_bytes)).await {
        Ok(read) => read,
        Err(_) => {
            session.set_keepalive(None);
            Err(GatewayError::BodyTimeout)
        }
    }
}

async fn whole(session: &mut Session, limit: usize) -> Result<Bytes, GatewayError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        // The rest of the body is never read: the connection cannot be reused.
        session.set_keepalive(None);
        return Err(GatewayError::BodyTooLarge(limit));
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(8 * 1024).min(limit));
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > limit {
                    session.set_keepalive(None);
                    return Err(GatewayError::BodyTooLarge(limit));
                }
                // The first chunk of a body that fits one read is kept without a copy.
                if buf.is_empty() && declared.is_some_and(|n| n == chunk.len()) {
                    return Ok(chunk);
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(e) => {
                tracing::debug!(error = %e, "reading the request body failed");
                session.set_keepalive(None);
                return Err(GatewayError::bad_request(
                    None,
                    "The request body could not be read.",
                ));
            }
        }
    }
}
