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
//!
//! On a listener with TLS or the PROXY protocol, the connection is opened first (see
//! [`crate::tls`]): the handshake is done within the header deadline, a plain HTTP
//! request on the TLS port is refused in the clear, and a connection that negotiated
//! HTTP/2 is served by Pingora's HTTP/2 server, with this edge's bounds in its options
//! (streams per connection, header list size, idle time; see [`h2_options`]).

use crate::config::Limits;
use crate::errors::{ErrorShape, GatewayError};
use crate::ids;
use crate::tls::front::{self, Front, Opened};
use async_trait::async_trait;
use bytes::{BufMut, BytesMut};
use parking_lot::Mutex;
use pingora::apps::HttpServerOptions;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::v1::server::HttpSession;
use pingora::protocols::http::v2::server::{default_h2_options, H2Options};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

/// Header fields Pingora's parser takes (`MAX_HEADERS` in pingora-core).
pub const MAX_HEADER_FIELDS: usize = 256;

/// Fields a header read by [`plainly_valid`] may have (its slots are cleared for every
/// request, so they are not [`MAX_HEADER_FIELDS`]); a header with more goes to Pingora's
/// own parser, which takes up to that many.
const PLAIN_FIELDS: usize = 64;

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
    pub max_concurrent_streams: u32,
}

impl From<&Limits> for EdgeLimits {
    fn from(l: &Limits) -> EdgeLimits {
        EdgeLimits {
            header_timeout: l.header_timeout,
            idle_keepalive: l.idle_keepalive,
            max_connections: l.max_client_connections,
            max_header_bytes: l.max_header_bytes,
            max_concurrent_streams: l.max_concurrent_streams,
        }
    }
}

/// What a plain HTTP client on a TLS listener is told.
const PLAIN_ON_TLS: &str =
    "This port speaks HTTPS and the request came as plain HTTP: use an https:// URL.";

/// Pingora's HTTP/2 server options with the edge's bounds: streams at once per connection
/// (a stream past it is refused alone, with `REFUSED_STREAM`), the decoded header list's
/// size.
pub fn h2_options(limits: &EdgeLimits) -> H2Options {
    let mut options = default_h2_options();
    options.max_concurrent_streams(limits.max_concurrent_streams);
    options.max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    options
}

/// Pingora's HTTP server options with the edge's bounds: an HTTP/2 connection with no
/// stream open is closed after the keep-alive idle time (the header deadline when
/// connections are not kept alive).
pub fn server_options(limits: &EdgeLimits) -> HttpServerOptions {
    let mut options = HttpServerOptions::default();
    options.h2_idle_timeout = Some(limits.idle_keepalive.unwrap_or(limits.header_timeout));
    options
}

/// An HTTP/1 application (the proxy) behind the edge.
pub struct Edge<A> {
    app: Arc<A>,
    limits: EdgeLimits,
    /// TLS and the PROXY protocol, when the listener has either.
    front: Option<Front>,
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
            front: None,
            cap_log: Mutex::new((None, 0)),
        }
    }

    /// Connections are opened through `front` (TLS, PROXY protocol) before HTTP.
    pub fn with_front(mut self, front: Front) -> Edge<A> {
        self.front = Some(front);
        self
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
        if let Some(front) = &self.front {
            let deadline = Instant::now() + self.limits.header_timeout;
            stream = match Box::pin(front.open(stream, deadline)).await {
                Opened::Ready(s) => s,
                Opened::Plain(mut s) => {
                    let e = GatewayError::bad_request(None, PLAIN_ON_TLS);
                    Box::pin(refuse(&mut s, &e)).await;
                    return None;
                }
                Opened::Gone => return None,
            };
            if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
                // Pingora's HTTP/2 server, under the options the app was given.
                let stream = front::h2_preface(stream, deadline).await?;
                return self.app.process_new(stream, shutdown).await;
            }
        }
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
    if plainly_valid(head) {
        return Ok(());
    }
    probe(head).await
}

/// Pingora's own reading of a header, on a copy.
async fn probe(head: &[u8]) -> Result<(), GatewayError> {
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

/// A header in the plainest form, which Pingora's reading takes whole: one pass of the
/// HTTP/1 parser Pingora uses, a common method, an origin-form target of plain
/// characters, field names of letters, digits, `-` and `_`, at most one `Host` (without
/// userinfo), at most one `Content-Length` of digits, no `Transfer-Encoding`. Every
/// other header (rare: hostile or unusual clients) is read by Pingora's own parser in
/// [`check`], which costs about as much as the request's later reading itself.
fn plainly_valid(head: &[u8]) -> bool {
    // Room for a plain header's fields: one with more is read by Pingora's parser.
    let mut fields = [httparse::EMPTY_HEADER; PLAIN_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    if !matches!(req.parse(head), Ok(httparse::Status::Complete(n)) if n == head.len()) {
        return false;
    }
    let common = matches!(
        req.method,
        Some("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS")
    );
    let plain_target = req.path.is_some_and(|p| {
        p.starts_with('/')
            && p.len() <= 8 * 1024
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b))
    });
    if !common || !plain_target {
        return false;
    }
    let (mut hosts, mut lengths) = (0, 0);
    req.headers.iter().all(|f| {
        let name = f.name.as_bytes();
        let plain_name = !name.is_empty()
            && name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
        if !plain_name || f.name.eq_ignore_ascii_case("transfer-encoding") {
            return false;
        }
        if f.name.eq_ignore_ascii_case("host") {
            hosts += 1;
            return hosts == 1 && !f.value.contains(&b'@');
        }
        if f.name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            let v = f.value;
            return lengths == 1 && (1..=18).contains(&v.len()) && v.iter().all(u8::is_ascii_digit);
        }
        true
    })
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
        let fields = |n: usize| -> String { (0..n).map(|i| format!("X-{i}: v\r\n")).collect() };
        // More fields than the plain path has room for, fewer than the limit: Pingora's
        // parser reads them, and the header is good.
        let past_plain = format!(
            "GET / HTTP/1.1\r\nHost: x\r\n{}\r\n",
            fields(PLAIN_FIELDS + 36)
        );
        assert!(!plainly_valid(past_plain.as_bytes()));
        assert_eq!(check(past_plain.as_bytes()).await, Ok(()));
        let many = fields(300);
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(
            check(many.as_bytes()).await,
            Err(GatewayError::TooManyHeaders(MAX_HEADER_FIELDS))
        );
    }

    /// Real clients' headers take the plain path: the official SDKs' (through their
    /// HTTP stacks), curl's, a browser's console call.
    #[test]
    fn common_headers_are_plainly_valid() {
        let heads: [&[u8]; 4] = [
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\nUser-Agent: OpenAI/Python 1.54.0\r\nX-Stainless-Lang: python\r\nAuthorization: Bearer sk-abc\r\nContent-Length: 95\r\n\r\n",
            b"POST /v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse HTTP/1.1\r\nhost: localhost\r\nx-goog-api-key: sk-abc\r\ncontent-length: 10\r\n\r\n",
            b"GET /v1/models HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
            b"GET /console/ HTTP/1.1\nHost: gw.example\nsec-ch-ua: \"Chromium\";v=\"156\"\n\n",
        ];
        for h in heads {
            assert!(plainly_valid(h), "{}", String::from_utf8_lossy(h));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// What the plain path takes, Pingora's parser takes too: headers built from
        /// methods, targets, names and values among which are every shape it refuses.
        #[test]
        fn what_the_plain_path_takes_pingora_takes(
            method in proptest::sample::select(vec![
                "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "CONNECT", "TRACE",
                "get", "BREW", "P\u{f6}ST", "",
            ]),
            target in proptest::sample::select(vec![
                "/", "/v1/chat/completions", "/v1/models?x=1&y=%20", "/a:b@c/(d)*+,;=~!$'",
                "*", "http://h/x", "http://a@h/x", "//h/x", "/a b", "/a\"b", "/a{b}", "/a#f",
                "/%zz", "/a\\b", "h:443", "/\u{e9}", "",
            ]),
            version in proptest::sample::select(vec!["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 "]),
            fields in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "Host", "host", "HOST", "Content-Length", "content-length",
                        "Transfer-Encoding", "transfer-encoding", "X-A", "x_b", "Accept",
                        "X A", "X:A", "", "X\u{e9}", "Te",
                    ]),
                    proptest::sample::select(vec![
                        "", "0", "12", "007", "1, 1", "1,2", "-5", "+5", "abc", "h", "h:80",
                        "u@h", "chunked", "gzip, chunked", "99999999999999999999", " 3",
                        "a\u{e9}b", "a\tb",
                    ]),
                ),
                0..6,
            ),
            bare_lf in proptest::bool::ANY,
        ) {
            let nl = if bare_lf { "\n" } else { "\r\n" };
            let mut head = format!("{method} {target} {version}{nl}");
            for (name, value) in &fields {
                head.push_str(&format!("{name}: {value}{nl}"));
            }
            head.push_str(nl);
            if plainly_valid(head.as_bytes()) {
                let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let probed = rt.block_on(probe(head.as_bytes()));
                proptest::prop_assert_eq!(probed, Ok(()), "{}", head);
            }
        }
    }
}
