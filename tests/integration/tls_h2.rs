//! HTTP/2 on the client listener, frame by frame (RFC 9113): a stream past the cap is
//! refused alone while the connection's other streams carry on; a stream whose request
//! stalls does not hold up the others; idle and silent connections are closed.

use crate::gateway::{openai_channel, StoreKind, TestGateway};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use crate::tls::{addr_of, read_to_close, tls_section};
use crate::tls_ca::{connect, ClientOptions, TestCa};
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const ACK: u8 = 1;
const REFUSED_STREAM: u32 = 7;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 3;

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

struct H2 {
    s: TlsStream<TcpStream>,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK block of literal fields without indexing, new names, no Huffman (RFC 7541
/// 6.2.2); every name and value here is shorter than 127 bytes.
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// A TLS connection that negotiated `h2`, nothing sent on it yet.
async fn tls_h2(addr: std::net::SocketAddr, ca: &str) -> crate::tls_ca::Handshake {
    let o = ClientOptions {
        sni: Some("gw.test"),
        alpn: &["h2"],
        ..Default::default()
    };
    connect(addr, ca, o).await.unwrap()
}

impl H2 {
    /// Connects with ALPN `h2`, sends the preface and empty settings, and acknowledges
    /// the server's; returns the server's advertised concurrent-stream cap.
    async fn open(addr: std::net::SocketAddr, ca: &str) -> (H2, Option<u32>) {
        let h = tls_h2(addr, ca).await;
        assert_eq!(h.alpn.as_deref(), Some(&b"h2"[..]));
        let mut c = H2 { s: h.stream };
        c.send(&[PREFACE.to_vec(), frame(SETTINGS, 0, 0, &[])].concat())
            .await;
        loop {
            let f = c.next().await.expect("server settings");
            if f.kind == SETTINGS && f.flags & ACK == 0 {
                c.send(&frame(SETTINGS, ACK, 0, &[])).await;
                let cap = f.payload.chunks(6).find_map(|p| {
                    (u16::from_be_bytes([p[0], p[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS)
                        .then(|| u32::from_be_bytes([p[2], p[3], p[4], p[5]]))
                });
                return (c, cap);
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.unwrap();
        self.s.flush().await.unwrap();
    }

    async fn request(&mut self, stream: u32, fields: &[(&str, &str)], end: bool) {
        let flags = END_HEADERS | if end { END_STREAM } else { 0 };
        self.send(&frame(HEADERS, flags, stream, &block(fields)))
            .await;
    }

    /// The next frame, or `None` when the connection closed; fails the test when nothing
    /// comes for 10 s.
    async fn next(&mut self) -> Option<Frame> {
        tokio::time::timeout(Duration::from_secs(10), async {
            let mut head = [0u8; 9];
            self.s.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            self.s.read_exact(&mut payload).await.ok()?;
            Some(Frame {
                kind: head[3],
                flags: head[4],
                stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
                payload,
            })
        })
        .await
        .expect("a frame within 10 s")
    }

    /// Reads until stream `id` is answered (a HEADERS frame: true) or refused
    /// (RST_STREAM REFUSED_STREAM: false); a GOAWAY fails the test.
    async fn outcome(&mut self, id: u32) -> bool {
        loop {
            let f = self.next().await.expect("the connection stays open");
            assert_ne!(f.kind, GOAWAY, "the connection was closed");
            if f.stream != id {
                continue;
            }
            match f.kind {
                HEADERS => return true,
                RST_STREAM => {
                    let code = u32::from_be_bytes(f.payload[..4].try_into().unwrap());
                    assert_eq!(code, REFUSED_STREAM, "stream {id} reset with {code}");
                    return false;
                }
                _ => {}
            }
        }
    }

    /// Reads until stream `id` ends (END_STREAM from the server).
    async fn until_end(&mut self, id: u32) {
        loop {
            let f = self.next().await.expect("the connection stays open");
            assert_ne!(f.kind, GOAWAY);
            if f.stream == id && (f.flags & END_STREAM != 0 || f.kind == RST_STREAM) {
                return;
            }
        }
    }
}

fn chat_head<'a>(auth: &'a str, len: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/v1/chat/completions"),
        (":authority", "gw.test"),
        ("authorization", auth),
        ("content-type", "application/json"),
        ("content-length", len),
    ]
}

fn models_head(auth: &str) -> Vec<(&str, &str)> {
    vec![
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/v1/models"),
        (":authority", "gw.test"),
        ("authorization", auth),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_past_the_cap_is_refused_alone_and_a_stalled_one_holds_up_no_other() {
    let up = MockUpstream::start(|_| {
        Reply::json(
            200,
            openai::completion("gpt-4o-mini", "hi", openai::usage(1, 1, 0)),
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("h2 test CA");
    let cert = ca.server(dir.path(), "gw", &["gw.test"], 7);
    let cfg = openai_channel(&up.base_url(), &["gpt-4o-mini"])
        + &tls_section(&[&cert], "")
        + "limits: { max_concurrent_streams: 2 }\n";
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"name": "h2"})).await;
    let auth = format!("Bearer {key}");
    let body =
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}).to_string();
    let len = body.len().to_string();
    let (mut c, cap) = H2::open(addr_of(&gw), &ca.pem()).await;
    assert_eq!(cap, Some(2), "the cap is advertised in SETTINGS");
    // Streams 1 and 3: headers sent, bodies not yet (a slow client).
    c.request(1, &chat_head(&auth, &len), false).await;
    c.request(3, &chat_head(&auth, &len), false).await;
    // Stream 5 is one too many: refused on its own.
    c.request(5, &models_head(&auth), true).await;
    assert!(!c.outcome(5).await, "stream 5 past the cap is refused");
    // Stream 1's body comes; it is answered while stream 3 still waits for its own.
    c.send(&frame(DATA, END_STREAM, 1, body.as_bytes())).await;
    assert!(c.outcome(1).await);
    c.until_end(1).await;
    // A new stream is served in the freed place (a refused stream may be retried, RFC
    // 9113 8.7: the place frees once the server has closed stream 1 on its side).
    let mut id = 7;
    loop {
        c.request(id, &models_head(&auth), true).await;
        if c.outcome(id).await {
            break;
        }
        id += 2;
        assert!(id < 60, "no stream was served after stream 1 ended");
    }
    c.until_end(id).await;
    // Stream 3, stalled all along, is still served once its body comes.
    c.send(&frame(DATA, END_STREAM, 3, body.as_bytes())).await;
    assert!(c.outcome(3).await);
    c.until_end(3).await;
    let served = up
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .count();
    assert_eq!(served, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_silent_http2_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("h2 test CA");
    let cert = ca.server(dir.path(), "gw", &["gw.test"], 8);
    let cfg =
        tls_section(&[&cert], "") + "limits: { idle_keepalive_secs: 1, header_timeout_secs: 1 }\n";
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    // Settings exchanged, then no stream: closed after the idle bound.
    let (mut c, _) = H2::open(addr_of(&gw), &ca.pem()).await;
    read_to_close(&mut c.s, Duration::from_secs(10)).await;
    // HTTP/2 negotiated, then not even the preface: closed at the header deadline.
    let mut h = tls_h2(addr_of(&gw), &ca.pem()).await;
    assert_eq!(
        read_to_close(&mut h.stream, Duration::from_secs(10)).await,
        ""
    );
}
