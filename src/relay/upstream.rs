//! One HTTP exchange with an upstream over Pingora's pooled connector.
//!
//! Pingora re-sends a body read in `request_filter` only from its 64 KiB retry buffer,
//! so body-routed requests are sent from here instead: header, whole body, then the
//! response is read as it arrives (README, "Architecture": why the relay drives the upstream itself).

use super::head;
pub use super::head::Outgoing;
use crate::channels::cloud::{AuthError, Cloud, Outbound, Target, TokenAnswer, TokenClient};
use crate::channels::{Channel, ErrorKind};
use crate::errors::{GatewayError, UpstreamFailure};
use crate::gateway::Gateway;
use bytes::{Bytes, BytesMut};
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::protocols::http::v1::client as v1;
use pingora::protocols::Stream;
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::{Error, ErrorType, OrErr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// An exchange whose request was sent and whose response header has arrived.
pub struct Exchange {
    pub channel: Arc<Channel>,
    http: HttpSession,
    peer: Arc<HttpPeer>,
    pub timing: Timing,
}

/// When an exchange started, had its connection, and had the upstream's response header.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub start: Instant,
    pub connected: Instant,
    pub header: Instant,
}

/// Why opening an exchange failed: only `NotSent` may move on to the next channel.
pub enum OpenError {
    NotSent(GatewayError),
    Sent(GatewayError),
}

impl Exchange {
    pub async fn open(
        gw: &Gateway,
        channel: Arc<Channel>,
        out: &Outgoing<'_>,
    ) -> Result<Exchange, OpenError> {
        let start = Instant::now();
        // Every way this can fail is the channel's health too (the circuit, the metrics).
        let failed = |kind: ErrorKind| channel.health.failure(&channel.circuit, kind, None);
        let unreachable = || {
            failed(ErrorKind::Connect);
            OpenError::NotSent(GatewayError::Upstream(UpstreamFailure::Connect))
        };
        let peer = channel.shared_peer().await.map_err(|e| {
            tracing::warn!(channel = %channel.name, error = %e, "upstream address lookup failed");
            unreachable()
        })?;
        let key = channel.keys.pick();
        let key_index = key.index;
        let clouded = match &channel.cloud {
            Some(cloud) => Some(
                prepare(gw, &channel, cloud.as_ref(), out, key.secret)
                    .await
                    .map_err(|e| match e {
                        // The request, not the channel: the next channel may take it.
                        Unprepared::Refused(invalid) => {
                            OpenError::NotSent(GatewayError::from(invalid))
                        }
                        Unprepared::Auth(e) => {
                            tracing::warn!(channel = %channel.name, error = %crate::store::chain(&e),
                                "upstream authentication failed");
                            failed(ErrorKind::Connect);
                            OpenError::NotSent(GatewayError::Upstream(UpstreamFailure::Connect))
                        }
                    })?,
            ),
            None => None,
        };
        let (out, auth) = match &clouded {
            Some((o, auth)) => (&o.outgoing(out), auth.as_slice()),
            None => (out, &[][..]),
        };
        let h1_only = peer
            .get_peer_options()
            .is_none_or(|o| o.alpn.get_max_http_version() == 1);
        let wire = head::wire_ready(&channel, out, h1_only);
        // A pooled connection the upstream closed while idle fails on the first write;
        // nothing reached the upstream then, so one fresh connection is tried.
        let mut attempts = 0;
        loop {
            attempts += 1;
            // Built for each attempt: a second one rarely comes, so nothing is kept for it.
            // Logged here as well: the next channel may answer, and this failure with it
            // would never reach the client's 500.
            let header = if wire {
                let room = if in_one_write(&out.body) {
                    out.body.len()
                } else {
                    0
                };
                head::wire_header(&channel, out, key.secret, room).map(Head::Wire)
            } else {
                head::request_header(&channel, out, key.secret, auth)
                    .map(|h| Head::Pingora(Box::new(h)))
            };
            let header = header.map_err(|e| {
                tracing::error!(channel = %channel.name, error = %e, "cannot build upstream request");
                let doing = format!("building the request for channel {}", channel.name);
                OpenError::NotSent(GatewayError::internal_from(doing, e))
            })?;
            let (http, reused) = gw.connector.get_http_session(&*peer).await.map_err(|e| {
                tracing::warn!(channel = %channel.name, error = %e, "upstream connect failed");
                unreachable()
            })?;
            let connected = Instant::now();
            let (mut http, sent) = send(http, header, out, &peer, channel.read_timeout).await;
            match sent {
                Ok(()) => {}
                Err(e) if reused && attempts == 1 => {
                    tracing::debug!(channel = %channel.name, error = %e, "stale pooled connection");
                    abandon(gw, http, &peer).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(channel = %channel.name, error = %e, "upstream write failed");
                    failed(kind(&e, ErrorKind::Connect));
                    abandon(gw, http, &peer).await;
                    return Err(OpenError::Sent(failure(&e)));
                }
            }
            if let Err(e) = http.read_response_header().await {
                tracing::warn!(channel = %channel.name, error = %e, "upstream response header failed");
                failed(kind(&e, ErrorKind::Connect));
                abandon(gw, http, &peer).await;
                return Err(OpenError::Sent(failure(&e)));
            }
            let ex = Exchange {
                channel,
                http,
                peer,
                timing: Timing {
                    start,
                    connected,
                    header: Instant::now(),
                },
            };
            ex.answered(key_index);
            return Ok(ex);
        }
    }

    /// Records the answer's status in the channel's health; a key the upstream refused is
    /// set aside.
    fn answered(&self, key: usize) {
        let c = &self.channel;
        let latency = self.timing.header - self.timing.start;
        match ErrorKind::of_status(self.status()) {
            None => c.health.success(latency),
            Some(kind) => {
                c.health.failure(&c.circuit, kind, Some(latency));
                if let (ErrorKind::Auth, Some(cloud)) = (kind, &c.cloud) {
                    cloud.refused(self.status());
                }
                if kind == ErrorKind::Auth && c.keys.set_aside(key, self.status()) {
                    tracing::warn!(
                        channel = %c.name, key = key, status = self.status(),
                        usable = c.keys.usable(),
                        "the upstream refused this key; it is set aside until the next reload"
                    );
                }
            }
        }
    }

    pub fn status(&self) -> u16 {
        self.http.response_header().map_or(0, |h| h.status.as_u16())
    }

    pub fn content_type(&self) -> &str {
        self.http
            .response_header()
            .and_then(|h| h.headers.get(http::header::CONTENT_TYPE))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The answer's `content-length`, when it declares one.
    pub fn content_length(&self) -> Option<usize> {
        self.http
            .response_header()
            .and_then(|h| h.headers.get(http::header::CONTENT_LENGTH))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
    }

    /// The next piece of the body as it arrives; `None` at the end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, GatewayError> {
        self.http.read_response_body().await.map_err(|e| {
            tracing::warn!(channel = %self.channel.name, error = %e, "upstream body read failed");
            let c = &self.channel;
            c.health
                .failure(&c.circuit, kind(&e, ErrorKind::CutStream), None);
            failure(&e)
        })
    }

    /// The whole body, refusing more than `limit` bytes.
    pub async fn body(&mut self, limit: usize) -> Result<Bytes, GatewayError> {
        let mut buf = BytesMut::new();
        while let Some(chunk) = self.chunk().await? {
            if buf.len() + chunk.len() > limit {
                tracing::warn!(channel = %self.channel.name, limit, "upstream response too large");
                return Err(GatewayError::Upstream(UpstreamFailure::BadResponse));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    }

    /// Returns the connection to the pool if the response was read to its end;
    /// otherwise the exchange is abandoned ([`abandon`]).
    pub async fn finish(mut self, gw: &Gateway) {
        if self.http.response_done() {
            gw.connector
                .release_http_session(self.http, &*self.peer, Some(POOL_IDLE))
                .await;
        } else {
            abandon(gw, self.http, &self.peer).await;
        }
    }
}

/// How long a connection with nothing in flight is kept in the pool.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// Gives up an exchange before the end of its answer. An HTTP/1.1 connection is closed.
/// An HTTP/2 stream is reset alone, and its connection, which other exchanges may share,
/// is given back: with one stream per connection, or every stream in use, it is in no
/// pool until then, and would be lost to the next request (Pingora keeps a connection
/// that has closed out of the pool).
async fn abandon(gw: &Gateway, mut http: HttpSession, peer: &HttpPeer) {
    http.shutdown().await;
    if matches!(http, HttpSession::H2(_)) {
        gw.connector
            .release_http_session(http, peer, Some(POOL_IDLE))
            .await;
    }
}

/// A request as a cloud channel sends it: its own path and body, and the headers that
/// authenticate it.
struct Clouded {
    path: String,
    body: Bytes,
}

impl Clouded {
    fn outgoing<'a>(&'a self, out: &Outgoing<'a>) -> Outgoing<'a> {
        Outgoing {
            method: out.method,
            path: &self.path,
            body: self.body.clone(),
            content_type: out.content_type,
            stream: out.stream,
            model: out.model,
            wire: out.wire,
            client_headers: out.client_headers,
        }
    }
}

/// Why a cloud channel did not send a request.
enum Unprepared {
    /// The cloud does not serve this request (a path it has no counterpart for): the
    /// client's 400 unless another channel takes it; the channel's health is untouched.
    Refused(crate::protocol::Invalid),
    /// Its authentication failed: the channel's failure.
    Auth(AuthError),
}

/// Asks a cloud channel where `out` goes and how it is authenticated (which may mint a
/// token through the gateway's connector). `key`: the channel's key picked for this
/// request (empty when it has none).
async fn prepare(
    gw: &Gateway,
    channel: &Channel,
    cloud: &dyn Cloud,
    out: &Outgoing<'_>,
    key: &str,
) -> Result<(Clouded, Vec<(&'static str, String)>), Unprepared> {
    let mut t = Target {
        path: out.path.to_string(),
        body: out.body.clone(),
        wire: out.wire,
        model: out.model.to_string(),
        stream: out.stream,
    };
    cloud.target(&mut t).map_err(Unprepared::Refused)?;
    let full = format!("{}{}", channel.path_prefix, t.path);
    let req = Outbound {
        method: out.method,
        path: &full,
        host: channel.authority(),
        content_type: (out.method != "GET").then_some(out.content_type),
        body: &t.body,
        key,
    };
    let client = TokenHttp { gw };
    let auth = cloud
        .authenticate(&client, &req, crate::ids::now_secs())
        .await
        .map_err(Unprepared::Auth)?;
    Ok((
        Clouded {
            path: t.path,
            body: t.body,
        },
        auth,
    ))
}

/// The client a cloud mints its tokens with: one exchange over the gateway's connector
/// with the token endpoint, as its own short-lived channel.
struct TokenHttp<'a> {
    gw: &'a Gateway,
}

/// Longest token endpoint answer read.
const TOKEN_BODY_LIMIT: usize = 64 * 1024;

#[async_trait::async_trait]
impl TokenClient for TokenHttp<'_> {
    async fn post_form(&self, url: &str, form: &str) -> Result<TokenAnswer, AuthError> {
        let u = url::Url::parse(url)
            .map_err(|e| AuthError::caused(format!("token endpoint `{url}`"), e))?;
        let host = u
            .host_str()
            .ok_or_else(|| AuthError::new(format!("token endpoint `{url}` has no host")))?;
        let port = u.port_or_known_default().unwrap_or(443);
        let raw = crate::channels::RawChannel {
            name: format!("token endpoint {host}"),
            protocol: "openai".into(),
            base_url: format!("{}://{host}:{port}", u.scheme()),
            models: vec![String::from("-")],
            connect_timeout_secs: 10,
            read_timeout_secs: 30,
            ..Default::default()
        };
        let channel = Channel::from_raw(raw, &Default::default()).map_err(|e| {
            AuthError::new(format!(
                "token endpoint `{url}`: {}: {}",
                e.field, e.message
            ))
        })?;
        let mut path = u.path().to_string();
        if let Some(q) = u.query() {
            path.push('?');
            path.push_str(q);
        }
        let out = Outgoing {
            method: "POST",
            path: &path,
            body: Bytes::copy_from_slice(form.as_bytes()),
            content_type: "application/x-www-form-urlencoded",
            stream: false,
            model: "",
            wire: None,
            client_headers: &http::HeaderMap::new(),
        };
        let mut ex = match Exchange::open(self.gw, Arc::new(channel), &out).await {
            Ok(ex) => ex,
            Err(OpenError::NotSent(e) | OpenError::Sent(e)) => {
                return Err(AuthError::new(format!(
                    "token endpoint `{url}` could not be reached ({e:?})"
                )))
            }
        };
        let status = ex.status();
        let body = ex.body(TOKEN_BODY_LIMIT).await.map_err(|e| {
            AuthError::new(format!(
                "reading the answer of token endpoint `{url}` ({e:?})"
            ))
        })?;
        ex.finish(self.gw).await;
        Ok(TokenAnswer { status, body })
    }
}

/// An upstream request's header, as built for the way it goes out ([`head`]).
enum Head {
    /// HTTP/1.1 bytes, for a `POST` to an upstream that speaks only HTTP/1.
    Wire(head::Wire),
    /// Boxed as Pingora's session takes it.
    Pingora(Box<RequestHeader>),
}

/// Sends the request; gives the session back (with the channel's timeouts set, which a
/// pooled session does not take from the peer's options) to read the answer from.
///
/// On HTTP/1 a POST (with a body up to [`ONE_WRITE_BYTES`]) goes out as one write of
/// header and body together:
/// Pingora's session writes and flushes the header on its own, so the body would follow
/// in a second segment (the upstream waking for each), or both would need `TCP_CORK` set
/// and cleared around them, two more system calls. The header's bytes are written as
/// they are built ([`head::Wire`]) or are Pingora's own serialization, checks included;
/// the session is then made again on the same connection to read the answer, as the
/// pool makes one for every reuse.
async fn send(
    http: HttpSession,
    header: Head,
    out: &Outgoing<'_>,
    peer: &HttpPeer,
    timeout: Duration,
) -> (HttpSession, pingora::Result<()>) {
    let (mut http, header) = match (http, header) {
        // Only a POST: a HEAD's answer has no body, which a session that did not write
        // the request would not know.
        (HttpSession::H1(h1), header) if out.method == "POST" => {
            let mut stream = h1.into_inner();
            let sent = match wire_bytes(header) {
                Ok(wire) => write_whole(&mut stream, wire, &out.body, timeout).await,
                Err(e) => Err(e),
            };
            let mut h1 = v1::HttpSession::new_with_options(stream, peer);
            h1.read_timeout = Some(timeout);
            h1.write_timeout = Some(timeout);
            return (HttpSession::H1(h1), sent);
        }
        (other, Head::Pingora(header)) => (other, header),
        (other, Head::Wire(_)) => {
            let e = Error::explain(
                ErrorType::InternalError,
                "an HTTP/1 request header for a session of another version",
            );
            return (other, Err(e));
        }
    };
    http.set_read_timeout(Some(timeout));
    http.set_write_timeout(Some(timeout));
    let sent = async {
        http.write_request_header(header).await?;
        if out.method != "GET" {
            http.write_request_body(out.body.clone(), true).await?;
        }
        http.finish_request_body().await
    }
    .await;
    (http, sent)
}

/// The header's bytes, ended: as built, or Pingora's serialization of its header.
fn wire_bytes(header: Head) -> pingora::Result<Vec<u8>> {
    match header {
        Head::Wire(w) => Ok(w.finish()),
        Head::Pingora(h) => v1::http_req_header_to_wire(&h)
            .map(Vec::from)
            .ok_or_else(|| {
                Error::explain(
                    ErrorType::InvalidHTTPHeader,
                    "the upstream request line holds a forbidden byte",
                )
            }),
    }
}

/// The largest body sent in the same write as its header ([`write_whole`]).
const ONE_WRITE_BYTES: usize = 64 * 1024;

/// Whether `body` goes out in the same write as its header: up to this size it is copied
/// after the header; a larger one (a long conversation, an image) is written from where
/// it is, after the header.
fn in_one_write(body: &[u8]) -> bool {
    body.len() <= ONE_WRITE_BYTES
}

/// Writes an HTTP/1 request's header and body, in one write up to [`ONE_WRITE_BYTES`] of
/// body, within `timeout`.
async fn write_whole(
    stream: &mut Stream,
    mut wire: Vec<u8>,
    body: &[u8],
    timeout: Duration,
) -> pingora::Result<()> {
    let whole = in_one_write(body);
    if whole {
        wire.extend_from_slice(body);
    }
    let write = async {
        stream.write_all(&wire).await?;
        if !whole {
            stream.write_all(body).await?;
        }
        stream.flush().await
    };
    match pingora::prelude::timeout(timeout, write).await {
        Ok(r) => r.or_err(ErrorType::WriteError, "while writing the upstream request"),
        Err(_) => Error::e_explain(
            ErrorType::WriteTimedout,
            "while writing the upstream request (timeout)",
        ),
    }
}

/// The health kind of a transport error; `other` for a broken connection.
fn kind(e: &Error, other: ErrorKind) -> ErrorKind {
    match e.etype() {
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            ErrorKind::Timeout
        }
        ErrorType::InvalidHTTPHeader | ErrorType::H1Error | ErrorType::H2Error => {
            ErrorKind::BadResponse
        }
        _ => other,
    }
}

/// Maps a transport error to the failure kind shown to the client.
pub fn failure(e: &Error) -> GatewayError {
    let kind = match e.etype() {
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            UpstreamFailure::Timeout
        }
        ErrorType::InvalidHTTPHeader | ErrorType::H1Error | ErrorType::H2Error => {
            UpstreamFailure::BadResponse
        }
        _ => UpstreamFailure::Broken,
    };
    GatewayError::Upstream(kind)
}
