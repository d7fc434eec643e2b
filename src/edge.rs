//! The client listener's edge: what a connection goes through before the proxy phases
//! see a request.
//!
//! Pingora 0.9 bounds the wait for a request header only per read (60 s, again after
//! every byte), keeps idle connections for 60 s, has no cap on connections, and answers
//! malformed framing (an oversized header, too many fields, a bad `Content-Length`,
//! `CONNECT`, a conflicting absolute-form target) itself, with a bare 400 or 405 and no
//! request id, before any phase of ours runs. So this module reads each request header
//! itself, within a deadline for the whole header and a bound on the idle wait before
//! it, checks it with Pingora's own HTTP/1 parser, answers what it refuses in the
//! spec's envelope (with `x-request-id`), and hands a good header to the proxy as the
//! already-read start of the connection, which Pingora parses without reading again.
//! A semaphore caps the connections served at once.
//!
//! Per request this costs one copy of the header and a second parse of it
//! (microseconds); the body and the answer never pass through here.

use crate::config::Limits;
use crate::errors::{ErrorShape, GatewayError};
use crate::ids;
use async_trait::async_trait;
use bytes::{BufMut, BytesMut};
use parking_lot::Mutex;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::v1::server::HttpSession;
use pingora::protocols::http::ServerSession;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

/// Header fields Pingora's parser takes (`MAX_HEADERS` in pingora-core).
pub const MAX_HEADER_FIELDS: usize = 256;

/// Bytes read per read while waiting for a header: what follows the header in the same
/// read (the start of a body) is passed on with it, and stays small.
const READ_CHUNK: usize = 16 * 1024;

/// After a refusal, what the client still sends is read and dropped for this long, so
/// closing does not reset the connection before the client read the answer.
const DRAIN: Duration = Duration::from_secs(1);
const DRAIN_BYTES: usize = 4 * 1024 * 1024;
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection cap is logged at most this often.
const CAP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The listener's bounds, from `limits`.
#[derive(Debug, Clone)]
pub struct EdgeLimits {
    pub header_timeout: Duration,
    pub idle_keepalive: Option<Duration>,
    pub max_connections: usize,
    pub max_header_bytes: usize,
}

impl From<&Limits> for EdgeLimits {
    fn from(l: &Limits) -> EdgeLimits {
        EdgeLimits {
            header_timeout: l.header_timeout,
            idle_keepalive: l.idle_keepalive,
            max_connections: l.max_client_connections,
            max_header_bytes: l.max_header_bytes,
        }
    }
}

/// An HTTP/1 application (the proxy) behind the edge.
pub struct Edge<A> {
    app: Arc<A>,
    limits: EdgeLimits,
    permits: Arc<Semaphore>,
    /// When the cap was last logged, and the connections refused since.
    cap_log: Mutex<(Option<Instant>, u64)>,
}

impl<A> Edge<A> {
    pub fn new(app: A, limits: EdgeLimits) -> Edge<A> {
        Edge {
            app: Arc::new(app),
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
            cap_log: Mutex::new((None, 0)),
        }
    }

    fn log_cap(&self) {
        let mut log = self.cap_log.lock();
        log.1 += 1;
        if log.0.is_some_and(|t| t.elapsed() < CAP_LOG_INTERVAL) {
            return;
        }
        tracing::warn!(
            refused = log.1,
            "client connection cap of {} reached: new connections get 503 until one closes \
             (limits.max_client_connections)",
            self.limits.max_connections
        );
        *log = (Some(Instant::now()), 0);
    }
}

#[async_trait]
impl<A> ServerApp for Edge<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let Ok(_permit) = self.permits.clone().try_acquire_owned() else {
            self.log_cap();
            Box::pin(refuse(&mut stream, &GatewayError::TooManyConnections)).await;
            return None;
        };
        let mut shutdown = shutdown.clone();
        let mut persistent: Option<HttpPersistentSettings> = None;
        let mut first = true;
        loop {
            let wait = if first {
                Wait::New(self.limits.header_timeout)
            } else {
                Wait::Idle(self.limits.idle_keepalive?, self.limits.header_timeout)
            };
            let head = match read_head(&mut stream, wait, &self.limits, &mut shutdown).await {
                Head::Request(head) => head,
                Head::Gone => return None,
                Head::Refused(e) => {
                    Box::pin(refuse(&mut stream, &e)).await;
                    return None;
                }
            };
            let mut session = ServerSession::new_http1(stream);
            match persistent.take() {
                Some(settings) => settings.apply_to_session(&mut session),
                None => {
                    session.set_keepalive(self.limits.idle_keepalive.map(|d| d.as_secs().max(1)))
                }
            }
            session.set_pipelined_prefix(head);
            let reused = self.app.process_new_http(session, &shutdown).await?;
            let (next, settings) = reused.consume();
            stream = next;
            persistent = settings;
            first = false;
        }
    }

    async fn cleanup(&self) {
        self.app.http_cleanup().await;
    }
}

/// How long to wait for a header.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// A new connection: its first header must be whole within this.
    New(Duration),
    /// A kept-alive connection: the next request may start within the first bound, and
    /// its header must be whole within the second from its first byte.
    Idle(Duration, Duration),
}

enum Head {
    /// A header Pingora will take, with any bytes read after it.
    Request(BytesMut),
    /// The client left, went quiet between requests, or the server is stopping:
    /// nothing to answer.
    Gone,
    Refused(GatewayError),
}

async fn read_head(
    stream: &mut Stream,
    wait: Wait,
    limits: &EdgeLimits,
    shutdown: &mut ShutdownWatch,
) -> Head {
    if *shutdown.borrow() {
        return Head::Gone;
    }
    let mut buf = BytesMut::with_capacity(4096);
    let mut scan = 0;
    let (mut deadline, idle) = match wait {
        Wait::New(d) => (Some(Instant::now() + d), None),
        Wait::Idle(idle, _) => (None, Some(idle)),
    };
    loop {
        let left = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => idle.unwrap_or_default(),
        };
        let read = tokio::select! {
            r = tokio::time::timeout(left, read_some(stream, &mut buf)) => r,
            _ = shutdown.changed() => return Head::Gone,
        };
        match read {
            // Nothing of a request yet: a quiet connection is closed without a word.
            Err(_) if buf.is_empty() => return Head::Gone,
            Err(_) => return Head::Refused(GatewayError::HeaderTimeout),
            Ok(0) => return Head::Gone,
            Ok(_) => {}
        }
        // Empty lines before a request line are allowed (RFC 9112 2.2).
        let blank = buf
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        if blank > 0 {
            let _ = buf.split_to(blank);
            scan = 0;
        }
        if buf.is_empty() {
            continue;
        }
        if deadline.is_none() {
            if let Wait::Idle(_, header) = wait {
                deadline = Some(Instant::now() + header);
            }
        }
        match header_end(&buf, scan) {
            Some(end) if end > limits.max_header_bytes => {
                return Head::Refused(GatewayError::HeaderTooLarge(limits.max_header_bytes))
            }
            Some(end) => {
                // Boxed: the probe's state is held only while it runs, not for as long
                // as the connection's future lives.
                return match Box::pin(check(&buf[..end])).await {
                    Ok(()) => Head::Request(buf),
                    Err(e) => Head::Refused(e),
                };
            }
            None if buf.len() > limits.max_header_bytes => {
                return Head::Refused(GatewayError::HeaderTooLarge(limits.max_header_bytes))
            }
            None => scan = buf.len().saturating_sub(2),
        }
    }
}

/// Reads straight into `buf`, at most [`READ_CHUNK`] bytes: no buffer on the way (a
/// buffer in this future would be held, with the connection's, for the connection's
/// whole life).
async fn read_some(stream: &mut Stream, buf: &mut BytesMut) -> usize {
    if buf.capacity() == buf.len() {
        buf.reserve(buf.len().clamp(1024, READ_CHUNK));
    }
    let room = (buf.capacity() - buf.len()).min(READ_CHUNK);
    let mut limited = buf.limit(room);
    stream.read_buf(&mut limited).await.unwrap_or(0)
}

/// Where the header ends (just past the blank line), searching from `from`: a line end
/// (`\n`, or `\r\n`) right after another. `None` until it arrived.
pub fn header_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(at) = memchr::memchr(b'\n', &buf[i..]) {
        let nl = i + at;
        match (buf.get(nl + 1), buf.get(nl + 2)) {
            (Some(b'\n'), _) => return Some(nl + 2),
            (Some(b'\r'), Some(b'\n')) => return Some(nl + 3),
            (None, _) | (Some(b'\r'), None) => return None,
            _ => i = nl + 1,
        }
    }
    None
}

/// A whole header, checked as Pingora will read it: what its parser refuses, and
/// `CONNECT`, are answered here in the envelope instead of bare.
async fn check(head: &[u8]) -> Result<(), GatewayError> {
    // A field per line, less the request line and the blank line.
    let lines = memchr::memchr_iter(b'\n', head).count();
    if lines.saturating_sub(2) > MAX_HEADER_FIELDS {
        return Err(GatewayError::TooManyHeaders(MAX_HEADER_FIELDS));
    }
    let mut probe = HttpSession::new(Box::new(std::io::Cursor::new(head.to_vec())));
    match probe.read_request().await {
        Ok(Some(_)) if probe.req_header().method == http::Method::CONNECT => {
            Err(GatewayError::MethodNotAllowed)
        }
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(malformed(None)),
        Err(e) => Err(malformed(e.context.as_ref().map(|c| c.as_str()))),
    }
}

/// Pingora's reason, unless it is a dump of the raw bytes.
fn malformed(reason: Option<&str>) -> GatewayError {
    let message = match reason.filter(|r| !r.starts_with("buf:") && r.len() < 200) {
        Some(r) => format!("The request is not valid HTTP/1.1: {r}."),
        None => "The request is not valid HTTP/1.1.".to_string(),
    };
    GatewayError::bad_request(None, message)
}

/// Answers in the spec's envelope, closes the connection.
async fn refuse(stream: &mut Stream, e: &GatewayError) {
    let rid = ids::request_id();
    tracing::debug!(request_id = %rid, code = e.code(), "refused at the listener");
    let body = e.body(ErrorShape::Default, &rid);
    let status = e.status();
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         x-request-id: {rid}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    let written = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&out).await?;
        stream.flush().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    // Half-close, then read what the client still sends until it closes too.
    let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.shutdown()).await;
    let _ = tokio::time::timeout(DRAIN, async {
        // On the heap: this future is part of every connection's, for its whole life.
        let mut chunk = vec![0u8; READ_CHUNK];
        let mut drained = 0;
        while drained < DRAIN_BYTES {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_ends_at_its_blank_line_in_any_split() {
        let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody";
        assert_eq!(header_end(req, 0), Some(27));
        assert_eq!(header_end(b"GET / HTTP/1.1\nHost: x\n\nbody", 0), Some(24));
        for cut in 0..req.len() {
            let found = header_end(&req[..cut], 0);
            assert!(found.is_none() || found == Some(27), "{cut}");
            // Not found yet: resuming two bytes back finds it once the rest came.
            if found.is_none() {
                assert_eq!(header_end(req, cut.saturating_sub(2)), Some(27), "{cut}");
            }
        }
        assert_eq!(header_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r", 0), None);
    }

    #[tokio::test]
    async fn pingoras_refusals_are_found_before_pingora_sees_them() {
        let ok = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(check(ok).await, Ok(()));
        let cl = |v: &str| format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {v}\r\n\r\n");
        for bad in [cl("abc"), cl("-5"), cl("1, 2")] {
            let e = check(bad.as_bytes()).await.unwrap_err();
            assert_eq!(e.status(), 400, "{bad}");
        }
        let connect = b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n";
        assert_eq!(check(connect).await, Err(GatewayError::MethodNotAllowed));
        let many: String = (0..300).map(|i| format!("X-{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(
            check(many.as_bytes()).await,
            Err(GatewayError::TooManyHeaders(MAX_HEADER_FIELDS))
        );
    }
}
