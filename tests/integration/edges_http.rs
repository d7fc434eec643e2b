//! The client listener at its edge, over raw sockets: clients that send their header
//! slowly or not at all, idle keep-alive connections, the connection cap, and malformed
//! HTTP framing. Every refusal is the spec's envelope with a request id, and a normal
//! request on a new connection is served right after.

use crate::gateway::{StoreKind, TestGateway};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The gateway with these `limits` (YAML flow mapping) and one chat channel.
async fn gateway(limits: &str) -> (TestGateway, String) {
    let text = format!(
        "limits: {limits}\nchannels:\n  - {{ name: oa, protocol: openai, base_url: \"http://127.0.0.1:9\", models: [m] }}\n\
         prices:\n  m: {{ input: 1.0, output: 2.0 }}\n"
    );
    let gw = TestGateway::start(&text, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    (gw, key)
}

fn addr(gw: &TestGateway) -> String {
    gw.base.trim_start_matches("http://").to_string()
}

/// A response read off a raw socket.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One response (Content-Length framed) at the start of `buf`, if it is all there.
fn parse_answer(buf: &[u8]) -> Option<Answer> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body = buf.get(end + 4..end + 4 + len)?;
    Some(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(body).to_string(),
    })
}

/// Reads one response within `wait`; `None` when the connection closed before a whole
/// response (or none came in time).
async fn read_answer(sock: &mut TcpStream, wait: Duration) -> Option<Answer> {
    let mut buf = Vec::new();
    let deadline = Instant::now() + wait;
    loop {
        if let Some(a) = parse_answer(&buf) {
            return Some(a);
        }
        let mut chunk = [0u8; 65536];
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, sock.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Whether the server closed the connection within `wait` (reads until end of file,
/// ignoring any response before it).
async fn closed_within(sock: &mut TcpStream, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut chunk = [0u8; 4096];
    loop {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return false;
        };
        match tokio::time::timeout(left, sock.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// The spec's default envelope with the request id the `x-request-id` header names.
fn assert_envelope(a: &Answer, status: u16, what: &str) {
    assert_eq!(a.status, status, "{what}: {a:?}");
    let rid = a
        .header("x-request-id")
        .unwrap_or_else(|| panic!("{what}: no x-request-id: {a:?}"));
    let v: Value =
        serde_json::from_str(&a.body).unwrap_or_else(|_| panic!("{what}: not JSON: {a:?}"));
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.ends_with(&format!("(request id: {rid})")),
        "{what}: {a:?}"
    );
    assert_eq!(v["error"]["type"], "gateway_error", "{what}: {a:?}");
    assert!(v["error"]["code"].is_string(), "{what}: {a:?}");
}

/// A normal request on a new connection is served.
async fn served(gw: &TestGateway, key: &str) {
    let r = gw
        .http
        .get(gw.url("/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

async fn raw(gw: &TestGateway, bytes: &[u8]) -> Option<Answer> {
    let mut sock = TcpStream::connect(addr(gw)).await.unwrap();
    // A server that answers before reading everything may reset the connection
    // mid-write; the answer is still read.
    let _ = sock.write_all(bytes).await;
    read_answer(&mut sock, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_framing_is_refused_in_the_envelope() {
    let (gw, key) = gateway("{}").await;
    let huge = format!(
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    // 50 KB: under the size bound, far over the number of fields.
    let many = format!(
        "GET /v1/models HTTP/1.1\r\nHost: x\r\n{}\r\n",
        "a:b\r\n".repeat(10_000)
    );
    let post = |cl: &str| {
        format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n{{}}")
    };
    let cases: Vec<(&str, String, u16)> = vec![
        ("a 1 MiB header", huge, 431),
        ("10,000 headers", many, 431),
        ("Content-Length: abc", post("abc"), 400),
        ("Content-Length: -5", post("-5"), 400),
        (
            "two different Content-Length values",
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".into(),
            400,
        ),
        (
            "CONNECT",
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".into(),
            405,
        ),
        (
            "an absolute-form target naming another host",
            "GET http://example.com/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".into(),
            400,
        ),
        ("a request line that is not HTTP", "GET / FTP/9\r\n\r\n".into(), 400),
        (
            "a final transfer coding that is not chunked",
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}".into(),
            400,
        ),
        (
            "a chunked body with a chunk size that is not a number",
            format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n"),
            400,
        ),
    ];
    for (what, bytes, status) in cases {
        let a = raw(&gw, bytes.as_bytes())
            .await
            .unwrap_or_else(|| panic!("{what}: no answer"));
        assert_envelope(&a, status, what);
        assert_eq!(a.header("connection"), Some("close"), "{what}");
        if what == "10,000 headers" {
            assert!(a.body.contains("more than 256 header fields"), "{a:?}");
        }
        if what == "a 1 MiB header" {
            assert!(
                a.body.contains("larger than the limit of 65536 bytes"),
                "{a:?}"
            );
        }
        served(&gw, &key).await;
    }
}

/// A client that sends half a header, then nothing or a byte every 100 ms, is cut off
/// once the header deadline passes (with a 408 in the envelope); the connection is
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off_at_the_deadline() {
    let (gw, key) = gateway("{ header_timeout_secs: 1 }").await;
    let started = Instant::now();
    let mut clients = Vec::new();
    for i in 0..8 {
        let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
        s.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        let drips = i % 2 == 0;
        clients.push(tokio::spawn(async move {
            // Until the answer came: read what arrives, and drip a byte every 100 ms.
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(8);
            while Instant::now() < deadline && parse_answer(&got).is_none() {
                let mut chunk = [0u8; 4096];
                tokio::select! {
                    r = s.read(&mut chunk) => match r {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&chunk[..n]),
                    },
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {
                        if drips {
                            let _ = s.write_all(b"x").await;
                        }
                    }
                }
            }
            (drips, parse_answer(&got), s)
        }));
    }
    for c in clients {
        let (drips, answer, mut s) = c.await.unwrap();
        let a = answer.unwrap_or_else(|| panic!("no 408 (dripping: {drips})"));
        assert_envelope(&a, 408, "slow header");
        assert!(closed_within(&mut s, Duration::from_secs(3)).await);
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // A connection that never sends a byte is closed too.
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);
    served(&gw, &key).await;
}

/// A body trickled a byte every 100 ms (each read well within Pingora's per-read
/// timeout) is cut off once the whole-body deadline passes: 408 in the envelope, the
/// connection closed, and the gateway serves the next client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_off_at_the_body_deadline() {
    let (gw, key) = gateway("{ body_timeout_secs: 1 }").await;
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{{\"model\":\"m\","
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    while started.elapsed() < Duration::from_secs(8) && parse_answer(&got).is_none() {
        let mut chunk = [0u8; 4096];
        tokio::select! {
            r = s.read(&mut chunk) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            },
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                let _ = s.write_all(b" ").await;
            }
        }
    }
    let a = parse_answer(&got).expect("a 408 before the connection closes");
    assert_envelope(&a, 408, "trickled body");
    assert!(
        a.body.contains("request body did not arrive in time"),
        "{a:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cut at the deadline"
    );
    assert!(closed_within(&mut s, Duration::from_secs(3)).await);
    served(&gw, &key).await;
}

/// An idle keep-alive connection is closed after the configured bound, and one that is
/// still in use is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    let (gw, key) = gateway("{ idle_keepalive_secs: 1 }").await;
    let req = format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n");
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    for i in 0..3 {
        if i > 0 {
            // Well inside the bound: the connection is reused.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        s.write_all(req.as_bytes()).await.unwrap();
        let a = read_answer(&mut s, Duration::from_secs(5)).await.unwrap();
        assert_eq!(a.status, 200, "{a:?}");
    }
    let idle = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);
    assert!(
        idle.elapsed() >= Duration::from_millis(900),
        "{:?}",
        idle.elapsed()
    );
    served(&gw, &key).await;
}

/// Past the cap, a new connection gets a 503 in the envelope and the log says why; once
/// a connection closes, new ones are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_refuses_with_a_log_line() {
    let log = crate::edges::captured_log();
    let (gw, key) = gateway("{ max_client_connections: 4 }").await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
        s.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    // The four are counted once the gateway accepted them: poll for the refusal.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
        let _ = s
            .write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        if let Some(a) = read_answer(&mut s, Duration::from_secs(5)).await {
            if a.status == 503 {
                break a;
            }
        }
        assert!(Instant::now() < deadline, "the cap never applied");
    };
    assert_envelope(&refused, 503, "over the cap");
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert!(
        text.contains("client connection cap of 4 reached"),
        "no log line"
    );
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = gw
            .http
            .get(gw.url("/v1/models"))
            .bearer_auth(&key)
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection served after one closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The admin listener stands behind the same edge: a header that never completes is cut
/// off at the deadline with a 408 in the envelope, and the admin API answers right after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_cuts_off_slow_headers_too() {
    let (gw, _) = gateway("{ header_timeout_secs: 1 }").await;
    let admin = gw.admin.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&admin).await.unwrap();
    s.write_all(b"GET /admin/keys HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let a = read_answer(&mut s, Duration::from_secs(5))
        .await
        .expect("a 408 before the connection closes");
    assert_envelope(&a, 408, "slow admin header");
    assert!(closed_within(&mut s, Duration::from_secs(3)).await);
    let (status, _) = gw.admin_get("/admin/keys").await;
    assert_eq!(status, 200);
}
