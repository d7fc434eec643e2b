//! `GET /v1/realtime` (spec 4.20, 5): a real gateway between a hand-written WebSocket
//! client and a hand-written WebSocket upstream, both raw TCP, so every byte is checked.
//!
//! Nothing here waits by sleeping: each step waits for the bytes it expects, the mock
//! upstream reports each connection's end on a channel, and each scenario is bounded
//! by one timeout.

use crate::gateway::{error_of, openai_channel, StoreKind, TestGateway};
use serde_json::{json, Value};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The handshake key of RFC 6455 1.3 and the accept value a server derives from it.
const CLIENT_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const CLIENT_ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// Reads an HTTP head byte by byte (so no frame bytes after it are consumed).
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if s.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn encode(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![0x80 | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(m | n as u8),
        n if n <= 0xFFFF => {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// One whole frame: (opcode, unmasked payload); `None` at the end of the stream.
async fn read_frame<S: AsyncRead + Unpin>(s: &mut S) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).await.ok()?;
    let len = match h[1] & 0x7F {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).await.ok()?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).await.ok()?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mask = if h[1] & 0x80 != 0 {
        let mut k = [0u8; 4];
        s.read_exact(&mut k).await.ok()?;
        Some(k)
    } else {
        None
    };
    let mut p = vec![0u8; len as usize];
    s.read_exact(&mut p).await.ok()?;
    if let Some(k) = mask {
        p.iter_mut().enumerate().for_each(|(i, b)| *b ^= k[i % 4]);
    }
    Some((h[0] & 0x0F, p))
}

async fn send_text<S: AsyncWrite + Unpin>(s: &mut S, v: &Value) {
    s.write_all(&encode(1, v.to_string().as_bytes(), None))
        .await
        .unwrap();
}

/// Tokens each response reports: (input, cached, output).
type Tokens = (u64, u64, u64);

/// How the mock upstream answers a handshake.
#[derive(Clone, Copy)]
enum Answer {
    /// `101` at once, `session.created` in the same write, then a response per client
    /// message, each ending in a `response.done` reporting these tokens.
    Upgrade(Tokens),
    /// This status and a JSON error body naming the upstream key (which must never
    /// reach the client).
    Refuse(u16),
}

/// What the upstream saw on one connection, reported when the connection ends.
#[derive(Debug)]
struct Ended {
    head: String,
    client_messages: Vec<String>,
    /// Close codes received.
    closes: Vec<u16>,
    /// The connection ended without a close frame.
    cut: bool,
}

struct Upstream {
    base: String,
    accepted: Arc<AtomicUsize>,
    ended: mpsc::UnboundedReceiver<Ended>,
}

impl Upstream {
    /// The next connection's report.
    async fn next_ended(&mut self) -> Ended {
        self.ended.recv().await.expect("the mock upstream runs")
    }
}

async fn mock_upstream(answer: Answer) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let (tx, ended) = mpsc::unbounded_channel();
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(serve(sock, answer).await);
            });
        }
    });
    Upstream {
        base,
        accepted,
        ended,
    }
}

fn response_events(turn: usize, (input, cached, output): Tokens) -> Vec<Value> {
    let id = format!("resp_{turn}");
    vec![
        json!({"type": "response.created", "event_id": "event_2", "response": {"id": id, "status": "in_progress"}}),
        json!({"type": "response.audio.delta", "event_id": "event_3", "response_id": id, "delta": "UklGRiQAAABXQVZF".repeat(64)}),
        json!({"type": "response.audio_transcript.delta", "event_id": "event_4", "delta": "Hello!"}),
        json!({"type": "response.done", "event_id": "event_5", "response": {
            "object": "realtime.response", "id": id, "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "audio", "transcript": "Hello!"}]}],
            "usage": {"total_tokens": input + output, "input_tokens": input, "output_tokens": output,
                "input_token_details": {"cached_tokens": cached, "text_tokens": input, "audio_tokens": 0},
                "output_token_details": {"text_tokens": 10, "audio_tokens": output - 10}}}}),
    ]
}

async fn serve(mut sock: TcpStream, answer: Answer) -> Ended {
    let head = read_head(&mut sock).await;
    let mut ended = Ended {
        head: head.clone(),
        client_messages: Vec::new(),
        closes: Vec::new(),
        cut: false,
    };
    let tokens = match answer {
        Answer::Refuse(status) => {
            let body = r#"{"error":{"message":"Incorrect API key provided: upstream-secret-key. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
            let resp = format!(
                "HTTP/1.1 {status} Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
            return ended;
        }
        Answer::Upgrade(tokens) => tokens,
    };
    // The right accept only for the client's own key, passed through by the gateway.
    let accept = match header(&head, "sec-websocket-key") {
        Some(CLIENT_KEY) => CLIENT_ACCEPT,
        _ => "not-the-clients-key",
    };
    let mut resp = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if header(&head, "sec-websocket-protocol").is_some_and(|p| p.contains("realtime")) {
        resp.push_str("Sec-WebSocket-Protocol: realtime\r\n");
    }
    resp.push_str("\r\n");
    // The 101 and the first event in one write, at once: the ordering that made
    // Pingora's own upgrade path tear the tunnel down (cloudflare/pingora#946).
    let mut first = resp.into_bytes();
    let created = json!({"type": "session.created", "event_id": "event_1", "session": {"id": "sess_1", "model": "gpt-realtime"}});
    first.extend(encode(1, created.to_string().as_bytes(), None));
    sock.write_all(&first).await.unwrap();
    while let Some((op, payload)) = read_frame(&mut sock).await {
        match op {
            1 => {
                let turn = ended.client_messages.len();
                ended
                    .client_messages
                    .push(String::from_utf8(payload).unwrap());
                for e in response_events(turn, tokens) {
                    send_text(&mut sock, &e).await;
                }
            }
            8 => {
                ended
                    .closes
                    .push(u16::from_be_bytes([payload[0], payload[1]]));
                let _ = sock.write_all(&encode(8, &payload, None)).await;
                let _ = sock.shutdown().await;
                return ended;
            }
            9 => {
                let _ = sock.write_all(&encode(10, &payload, None)).await;
            }
            _ => {}
        }
    }
    ended.cut = true;
    ended
}

/// Opens a WebSocket through the gateway; returns the socket and the response head.
async fn connect(gw: &TestGateway, model: &str, protocols: &str) -> (TcpStream, String) {
    let addr = gw.base.trim_start_matches("http://");
    let mut sock = TcpStream::connect(addr).await.unwrap();
    sock.set_nodelay(true).unwrap();
    let req = format!(
        "GET /v1/realtime?model={model} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {CLIENT_KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocols}\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\nOpenAI-Beta: realtime=v1\r\nOrigin: https://app.example\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut sock).await;
    (sock, head)
}

/// Reads an HTTP error answer's body.
async fn error_body(sock: &mut TcpStream, head: &str) -> Value {
    let len: usize = header(head, "content-length").unwrap().parse().unwrap();
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body).await.unwrap();
    error_of(&String::from_utf8(body).unwrap())
}

/// Reads text messages until one of type `ty`; returns all of them.
async fn read_until(sock: &mut TcpStream, ty: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let (op, p) = read_frame(sock).await.expect("the stream went on");
        assert_ne!(op, 8, "closed early: {:?}", String::from_utf8_lossy(&p));
        if op != 1 {
            continue;
        }
        let v: Value = serde_json::from_slice(&p).unwrap();
        let done = v["type"] == ty;
        out.push(v);
        if done {
            return out;
        }
    }
}

/// Reads the next frame: it must be a close with this code and reason.
async fn expect_close(sock: &mut TcpStream, code: u16, reason: &str) {
    let (op, p) = read_frame(sock).await.expect("a close frame");
    assert_eq!(op, 8, "{:?}", String::from_utf8_lossy(&p));
    assert_eq!(&p[..2], &code.to_be_bytes());
    assert_eq!(&p[2..], reason.as_bytes());
}

/// Answers the gateway's close, then waits for the connection to end; nothing else
/// may come.
async fn answer_close_and_see_the_end(sock: &mut TcpStream, code: u16) {
    sock.write_all(&encode(8, &code.to_be_bytes(), Some([9, 9, 9, 9])))
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = sock.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "nothing after the close: {rest:?}");
}

fn gateway_config(base: &str) -> String {
    // 1 micro-USD per input token, 0.5 per cached, 2 per output; 16_384 output tokens
    // per block: a block is 4_096 + 32_768 = 36_864.
    openai_channel(base, &["gpt-realtime", "gpt-4o-mini"])
}

const BLOCK: i64 = 36_864;

/// 80 plain input tokens at 1, 40 cached at 0.5, 60 output at 2 micro-USD.
const TOKENS: Tokens = (120, 40, 60);
const RESPONSE_COST: i64 = 80 + 20 + 120;

/// Sends one masked `response.create`, in two writes.
async fn ask(sock: &mut TcpStream, turn: usize) {
    let ask = json!({"type": "response.create", "event_id": format!("c{turn}"), "response": {"modalities": ["audio", "text"]}});
    let frame = encode(
        1,
        ask.to_string().as_bytes(),
        Some([0x12, 0x34, 0x56, 0x78]),
    );
    // Two segments (no delay on the socket): the gateway must not care where TCP cuts.
    sock.write_all(&frame[..5]).await.unwrap();
    sock.write_all(&frame[5..]).await.unwrap();
}

/// Runs `scenario` within a generous bound: a hang fails the test instead of stalling it.
async fn bounded<F: Future>(scenario: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), scenario)
        .await
        .expect("the scenario completes")
}

/// One whole session: key in the subprotocol, two responses, the client's close.
async fn basic_session(gw: &TestGateway, key: &str) {
    let protocols = format!("realtime, openai-insecure-api-key.{key}, openai-beta.realtime-v1");
    let (mut sock, head) = connect(gw, "gpt-realtime", &protocols).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(header(&head, "sec-websocket-accept"), Some(CLIENT_ACCEPT));
    assert_eq!(header(&head, "sec-websocket-protocol"), Some("realtime"));
    assert!(header(&head, "sec-websocket-extensions").is_none());
    assert!(header(&head, "x-request-id").is_some());

    let hello = read_until(&mut sock, "session.created").await;
    assert_eq!(hello[0]["session"]["id"], "sess_1");

    for turn in 0..2 {
        ask(&mut sock, turn).await;
        let events = read_until(&mut sock, "response.done").await;
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.audio.delta",
                "response.audio_transcript.delta",
                "response.done"
            ]
        );
        assert_eq!(events[0]["response"]["id"], format!("resp_{turn}"));
        assert_eq!(events[3]["response"]["usage"]["output_tokens"], 60);
    }

    // The client closes; the upstream's answer comes back, then the connection ends.
    sock.write_all(&encode(8, &1000u16.to_be_bytes(), Some([1, 2, 3, 4])))
        .await
        .unwrap();
    let (op, p) = read_frame(&mut sock).await.expect("the close is answered");
    assert_eq!(op, 8);
    assert_eq!(p, 1000u16.to_be_bytes());
    let mut rest = Vec::new();
    let _ = sock.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_relay_both_ways_and_bill_their_usage() {
    let mut up = mock_upstream(Answer::Upgrade(TOKENS)).await;
    let gw = TestGateway::start(&gateway_config(&up.base), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;

    // The upstream answers at once every time: the tunnel must never tear down.
    for round in 1..=20 {
        bounded(basic_session(&gw, &key)).await;
        // Settled before the connection ended: no waiting.
        assert_eq!(
            gw.used_micros(&id).await,
            round * 2 * RESPONSE_COST,
            "round {round}"
        );

        let seen = bounded(up.next_ended()).await;
        let head = &seen.head;
        assert!(
            head.starts_with("GET /v1/realtime?model=gpt-realtime HTTP/1.1"),
            "{head}"
        );
        assert_eq!(
            header(head, "authorization"),
            Some("Bearer upstream-secret-key")
        );
        assert!(
            !head.contains(&key),
            "the client's key reached the upstream: {head}"
        );
        assert_eq!(
            header(head, "sec-websocket-protocol"),
            Some("realtime, openai-beta.realtime-v1")
        );
        assert_eq!(header(head, "sec-websocket-key"), Some(CLIENT_KEY));
        assert!(header(head, "sec-websocket-extensions").is_none());
        assert!(header(head, "origin").is_none());
        assert_eq!(header(head, "openai-beta"), Some("realtime=v1"));
        assert_eq!(seen.client_messages.len(), 2);
        let first: Value = serde_json::from_str(&seen.client_messages[0]).unwrap();
        assert_eq!(first["type"], "response.create");
        assert_eq!(first["event_id"], "c0");
        assert_eq!(seen.closes, [1000], "the client's close went up");
        assert!(!seen.cut);
    }
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        20,
        "one connection each"
    );

    let (s, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(s, 200);
    assert_eq!(log["data"].as_array().unwrap().len(), 20);
    let rec = &log["data"][0];
    assert_eq!(rec["endpoint"], "/v1/realtime");
    assert_eq!(rec["model"], "gpt-realtime");
    assert_eq!(rec["channel"], "mock-openai");
    assert_eq!(rec["prompt_tokens"], 240);
    assert_eq!(rec["cached_tokens"], 80);
    assert_eq!(rec["completion_tokens"], 120);
    assert_eq!(rec["cost_micro_usd"], 2 * RESPONSE_COST);
    assert_eq!(rec["status"], 101);
    assert_eq!(rec["stream"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_come_before_any_upgrade() {
    let up = mock_upstream(Answer::Upgrade(TOKENS)).await;
    let gw = TestGateway::start(&gateway_config(&up.base), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"models": ["gpt-4o-mini"]})).await;

    bounded(async {
        // A model outside the key's whitelist: 403, in the error envelope.
        let protocols = format!("realtime, openai-insecure-api-key.{key}");
        let (mut sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        assert!(head.starts_with("HTTP/1.1 403"), "{head}");
        let e = error_body(&mut sock, &head).await;
        assert!(
            e["message"].as_str().unwrap().contains("gpt-realtime"),
            "{e}"
        );

        // No key at all: 401.
        let (_, head) = connect(&gw, "gpt-4o-mini", "realtime").await;
        assert!(head.starts_with("HTTP/1.1 401"), "{head}");

        // Not a WebSocket handshake: 400 naming the header.
        let r = gw
            .http
            .get(gw.url("/v1/realtime?model=gpt-4o-mini"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        assert_eq!(error_of(&r.text().await.unwrap())["param"], "upgrade");

        // No model: 400 naming it.
        let (mut sock, head) = connect(&gw, "", &protocols).await;
        assert!(head.starts_with("HTTP/1.1 400"), "{head}");
        assert_eq!(error_body(&mut sock, &head).await["param"], "model");
    })
    .await;

    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        0,
        "the upstream was never called"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_its_quota_is_closed_after_the_response_that_exhausted_it() {
    // Each response costs 20_040 micro-USD; the cap is one block and 1_000. After the
    // first response the session takes the 1_000 left (it still holds more than the
    // smallest response), the second outspends everything it holds, and the store
    // cannot cover the overrun: the session ends right after that response.
    let mut up = mock_upstream(Answer::Upgrade((20_000, 0, 20))).await;
    let gw = TestGateway::start(&gateway_config(&up.base), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.037864})).await;

    bounded(async {
        let (mut sock, head) = connect(
            &gw,
            "gpt-realtime",
            &format!("openai-insecure-api-key.{key}"),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(header(&head, "sec-websocket-protocol").is_none());
        read_until(&mut sock, "session.created").await;

        ask(&mut sock, 0).await;
        read_until(&mut sock, "response.done").await;
        ask(&mut sock, 1).await;
        read_until(&mut sock, "response.done").await;
        expect_close(&mut sock, 1008, "quota exhausted").await;
        answer_close_and_see_the_end(&mut sock, 1008).await;
    })
    .await;

    assert_eq!(
        gw.used_micros(&id).await,
        BLOCK + 1_000,
        "billed up to the cap, never past it"
    );
    let seen = bounded(up.next_ended()).await;
    assert_eq!(seen.client_messages.len(), 2);
    assert_eq!(
        seen.closes,
        [1000],
        "the gateway closed the upstream; the client's close was not forwarded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_larger_than_everything_held_ends_the_session_at_once() {
    // One response (40_040) outspends the whole first block (36_864); the 1_000 left
    // cannot cover the overrun, which is the one response's worth the gateway cannot
    // bill.
    let mut up = mock_upstream(Answer::Upgrade((40_000, 0, 20))).await;
    let gw = TestGateway::start(&gateway_config(&up.base), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.037864})).await;

    bounded(async {
        let protocols = format!("realtime, openai-insecure-api-key.{key}");
        let (mut sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        read_until(&mut sock, "session.created").await;
        ask(&mut sock, 0).await;
        read_until(&mut sock, "response.done").await;
        expect_close(&mut sock, 1008, "quota exhausted").await;
        answer_close_and_see_the_end(&mut sock, 1008).await;
    })
    .await;

    assert_eq!(gw.used_micros(&id).await, BLOCK);
    let seen = bounded(up.next_ended()).await;
    assert_eq!(seen.client_messages.len(), 1);
    assert_eq!(seen.closes, [1000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_refusing_the_upgrade_gives_a_sanitized_error_and_no_charge() {
    let mut up = mock_upstream(Answer::Refuse(401)).await;
    let gw = TestGateway::start(&gateway_config(&up.base), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;

    bounded(async {
        let protocols = format!("realtime, openai-insecure-api-key.{key}");
        let (mut sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        // The channel's own credentials were refused: not the caller's to fix (spec 7).
        assert!(head.starts_with("HTTP/1.1 500"), "{head}");
        assert!(header(&head, "x-request-id").is_some());
        let e = error_body(&mut sock, &head).await;
        assert_eq!(e["type"], "upstream_error");
        let message = e["message"].as_str().unwrap();
        for leak in ["Incorrect", "upstream-secret-key", "platform.openai.com"] {
            assert!(!message.contains(leak), "{message}");
        }
    })
    .await;

    let seen = bounded(up.next_ended()).await;
    assert!(seen.head.starts_with("GET /v1/realtime?model=gpt-realtime"));
    assert_eq!(gw.used_micros(&id).await, 0, "nothing charged");
    let (_, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(log["data"][0]["status"], 500);
    assert_eq!(log["data"][0]["cost_micro_usd"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_session_is_closed_at_the_channels_read_timeout() {
    let mut up = mock_upstream(Answer::Upgrade(TOKENS)).await;
    let config = format!(
        "channels:\n  - name: mock-openai\n    protocol: openai\n    base_url: {}\n    api_key: upstream-secret-key\n    models: [gpt-realtime]\n    read_timeout_secs: 1\nprices:\n  gpt-realtime: {{ input: 1.0, output: 2.0, cached_input: 0.5 }}\n",
        up.base
    );
    let gw = TestGateway::start(&config, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;

    bounded(async {
        let protocols = format!("realtime, openai-insecure-api-key.{key}");
        let (mut sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        read_until(&mut sock, "session.created").await;
        ask(&mut sock, 0).await;
        read_until(&mut sock, "response.done").await;
        // Then neither side says anything: the next thing is the gateway's close.
        expect_close(&mut sock, 1001, "idle timeout").await;
        answer_close_and_see_the_end(&mut sock, 1001).await;
    })
    .await;

    assert_eq!(gw.used_micros(&id).await, RESPONSE_COST);
    let seen = bounded(up.next_ended()).await;
    assert_eq!(seen.closes, [1001], "the upstream was told too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_closes_a_running_session_after_the_grace_period_and_settles_it() {
    let mut up = mock_upstream(Answer::Upgrade(TOKENS)).await;
    let config = format!(
        "limits: {{ shutdown_grace_secs: 1 }}\n{}",
        gateway_config(&up.base)
    );
    let gw = TestGateway::start(&config, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;
    bounded(async {
        let protocols = format!("realtime, openai-insecure-api-key.{key}");
        let (mut sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        read_until(&mut sock, "session.created").await;
        ask(&mut sock, 0).await;
        read_until(&mut sock, "response.done").await;
        let stopped = std::time::Instant::now();
        gw.running.shutdown();
        // The session stays open through the grace period, then is closed as going away.
        expect_close(&mut sock, 1001, "gateway stopping").await;
        assert!(stopped.elapsed() >= Duration::from_millis(900));
        answer_close_and_see_the_end(&mut sock, 1001).await;
        let seen = up.next_ended().await;
        assert_eq!(
            seen.closes,
            [1001],
            "the upstream is told the gateway went away"
        );
    })
    .await;
    let store = gw.running.gateway.store.clone();
    let used = store.get_key(&id).await.unwrap().unwrap().quota_used;
    assert_eq!(
        used, RESPONSE_COST,
        "the session is settled for what it used"
    );
}

/// A channel that failed enough to open its circuit is skipped by the next session, which
/// goes to the next channel serving the model; the handshake's outcome is the channel's
/// health, as an exchange's answer is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_skips_a_channel_whose_circuit_is_open() {
    let bad = mock_upstream(Answer::Refuse(503)).await;
    let good = mock_upstream(Answer::Upgrade(TOKENS)).await;
    let channel = |name: &str, base: &str, priority: u32| {
        format!("  - {{ name: {name}, protocol: openai, base_url: \"{base}\", api_key: upstream-secret-key, models: [gpt-realtime], priority: {priority} }}\n")
    };
    let cfg = format!(
        "circuit: {{ failures: 1, cooldown_secs: 600 }}\nchannels:\n{}{}prices:\n  gpt-realtime: {{ input: 1.0, output: 2.0, cached_input: 0.5 }}\n",
        channel("bad", &bad.base, 0),
        channel("good", &good.base, 1)
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"quota_usd": 1})).await;
    let protocols = format!("realtime, openai-insecure-api-key.{key}");
    bounded(async {
        let (_sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        assert!(
            head.starts_with("HTTP/1.1 500"),
            "the first channel failed: {head}"
        );
        let (_sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        assert!(
            head.starts_with("HTTP/1.1 101"),
            "the next session went on: {head}"
        );
    })
    .await;
    assert_eq!(
        bad.accepted.load(Ordering::SeqCst),
        1,
        "the open circuit was not tried"
    );
    assert_eq!(good.accepted.load(Ordering::SeqCst), 1);
    let (_, channels) = gw.admin_get("/admin/channels").await;
    let state = |name: &str| {
        channels["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["state"].clone())
    };
    assert_eq!(state("bad"), Some(json!("open")), "{channels}");
    assert_eq!(state("good"), Some(json!("closed")), "{channels}");
}
