//! `GET /v1/realtime` (spec 4.20, 5): a real gateway between a hand-written WebSocket
//! client and a hand-written WebSocket upstream, both raw TCP, so every byte is checked.

use crate::gateway::{error_of, openai_channel, StoreKind, TestGateway};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const CLIENT_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn base64(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// RFC 6455 4.2.2: base64(SHA-1(key + GUID)).
fn accept_for(key: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}{GUID}").as_bytes(),
    );
    base64(d.as_ref())
}

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

#[derive(Default)]
struct Seen {
    heads: Vec<String>,
    client_messages: Vec<String>,
    /// The gateway ended the connection without a close frame.
    cut: bool,
}

/// Tokens each response reports: (input, cached, output).
type Tokens = (u64, u64, u64);

/// A realtime upstream: answers the handshake, greets with `session.created`, answers
/// each client text message with a short response ending in `response.done` reporting
/// `tokens`, and echoes a close.
async fn mock_upstream(tokens: Tokens) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let seen = s2.clone();
            tokio::spawn(async move { serve(sock, seen, tokens).await });
        }
    });
    (base, seen)
}

async fn serve(mut sock: TcpStream, seen: Arc<Mutex<Seen>>, (input, cached, output): Tokens) {
    let head = read_head(&mut sock).await;
    seen.lock().unwrap().heads.push(head.clone());
    let key = header(&head, "sec-websocket-key").unwrap_or_default();
    let mut resp = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
        accept_for(key)
    );
    if header(&head, "sec-websocket-protocol").is_some_and(|p| p.contains("realtime")) {
        resp.push_str("Sec-WebSocket-Protocol: realtime\r\n");
    }
    resp.push_str("\r\n");
    // Pingora 0.9 tears an upgraded tunnel down when it reads the 101 before it has
    // drained the handshake's empty request body (cloudflare/pingora#946); a real
    // upstream is at least a round trip away, so answer as one would.
    tokio::time::sleep(Duration::from_millis(50)).await;
    sock.write_all(resp.as_bytes()).await.unwrap();
    send_text(
        &mut sock,
        &json!({"type": "session.created", "event_id": "event_1", "session": {"id": "sess_1", "model": "gpt-realtime"}}),
    )
    .await;
    while let Some((op, payload)) = read_frame(&mut sock).await {
        match op {
            1 => {
                seen.lock()
                    .unwrap()
                    .client_messages
                    .push(String::from_utf8(payload).unwrap());
                let events = [
                    json!({"type": "response.created", "event_id": "event_2", "response": {"id": "resp_1", "status": "in_progress"}}),
                    json!({"type": "response.audio.delta", "event_id": "event_3", "response_id": "resp_1", "delta": "UklGRiQAAABXQVZF".repeat(64)}),
                    json!({"type": "response.audio_transcript.delta", "event_id": "event_4", "delta": "Hello!"}),
                    json!({"type": "response.done", "event_id": "event_5", "response": {
                        "object": "realtime.response", "id": "resp_1", "status": "completed",
                        "output": [{"type": "message", "role": "assistant", "content": [{"type": "audio", "transcript": "Hello!"}]}],
                        "usage": {"total_tokens": input + output, "input_tokens": input, "output_tokens": output,
                            "input_token_details": {"cached_tokens": cached, "text_tokens": input, "audio_tokens": 0},
                            "output_token_details": {"text_tokens": 10, "audio_tokens": output - 10}}}}),
                ];
                for e in events {
                    send_text(&mut sock, &e).await;
                }
            }
            8 => {
                let _ = sock.write_all(&encode(8, &payload, None)).await;
                let _ = sock.shutdown().await;
                return;
            }
            9 => {
                let _ = sock.write_all(&encode(10, &payload, None)).await;
            }
            _ => {}
        }
    }
    seen.lock().unwrap().cut = true;
}

/// Opens a WebSocket through the gateway; returns the socket and the response head.
async fn connect(gw: &TestGateway, model: &str, protocols: &str) -> (TcpStream, String) {
    let addr = gw.base.trim_start_matches("http://");
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /v1/realtime?model={model} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {CLIENT_KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocols}\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\nOpenAI-Beta: realtime=v1\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut sock).await;
    (sock, head)
}

/// Reads text messages until one of type `ty`; returns all of them.
async fn read_until(sock: &mut TcpStream, ty: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let (op, p) = read_frame(sock).await.expect("the stream went on");
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

fn gateway_config(base: &str) -> String {
    // 1 micro-USD per input token, 0.5 per cached, 2 per output.
    openai_channel(base, &["gpt-realtime", "gpt-4o-mini"])
}

/// 80 plain input tokens at 1, 40 cached at 0.5, 60 output at 2 micro-USD.
const TOKENS: Tokens = (120, 40, 60);
const RESPONSE_COST: i64 = 80 + 20 + 120;

/// Sends one masked `response.create`, cut across two writes.
async fn ask(sock: &mut TcpStream, turn: usize) {
    let ask = json!({"type": "response.create", "event_id": format!("c{turn}"), "response": {"modalities": ["audio", "text"]}});
    let frame = encode(
        1,
        ask.to_string().as_bytes(),
        Some([0x12, 0x34, 0x56, 0x78]),
    );
    // The gateway must not care where TCP cuts.
    sock.write_all(&frame[..5]).await.unwrap();
    sock.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    sock.write_all(&frame[5..]).await.unwrap();
}

/// The key's spend once the session's logging phase has settled it.
async fn settled_spend(gw: &TestGateway, id: &str) -> i64 {
    for _ in 0..100 {
        let used = gw.used_micros(id).await;
        if used != 0 {
            return used;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_relays_both_ways_and_bills_its_usage() {
    let (up, seen) = mock_upstream(TOKENS).await;
    let gw = TestGateway::start(&gateway_config(&up), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;

    let session = async {
        let protocols = format!("realtime, openai-insecure-api-key.{key}, openai-beta.realtime-v1");
        let (mut sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert_eq!(
            header(&head, "sec-websocket-accept"),
            Some(accept_for(CLIENT_KEY).as_str())
        );
        assert_eq!(header(&head, "sec-websocket-protocol"), Some("realtime"));
        assert!(header(&head, "sec-websocket-extensions").is_none());

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
            assert_eq!(events[3]["response"]["usage"]["output_tokens"], 60);
        }

        sock.write_all(&encode(8, &1000u16.to_be_bytes(), Some([1, 2, 3, 4])))
            .await
            .unwrap();
        let (op, p) = read_frame(&mut sock).await.expect("the close is answered");
        assert_eq!(op, 8);
        assert_eq!(p, 1000u16.to_be_bytes());
        let mut rest = Vec::new();
        let _ = sock.read_to_end(&mut rest).await;
        assert!(rest.is_empty());
    };
    tokio::time::timeout(Duration::from_secs(20), session)
        .await
        .expect("the session completes");

    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.heads.len(), 1);
        let head = &seen.heads[0];
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
        assert!(header(head, "sec-websocket-extensions").is_none());
        assert_eq!(header(head, "openai-beta"), Some("realtime=v1"));
        assert_eq!(seen.client_messages.len(), 2);
        let first: Value = serde_json::from_str(&seen.client_messages[0]).unwrap();
        assert_eq!(first["type"], "response.create");
    }

    assert_eq!(settled_spend(&gw, &id).await, 2 * RESPONSE_COST);
    let (s, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(s, 200);
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
    let (up, seen) = mock_upstream(TOKENS).await;
    let gw = TestGateway::start(&gateway_config(&up), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"models": ["gpt-4o-mini"]})).await;

    // A model outside the key's whitelist: 403, in the error envelope.
    let protocols = format!("realtime, openai-insecure-api-key.{key}");
    let (mut sock, head) = connect(&gw, "gpt-realtime", &protocols).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let len: usize = header(&head, "content-length").unwrap().parse().unwrap();
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body).await.unwrap();
    let e = error_of(&String::from_utf8(body).unwrap());
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
    let len: usize = header(&head, "content-length").unwrap().parse().unwrap();
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body).await.unwrap();
    assert_eq!(
        error_of(&String::from_utf8(body).unwrap())["param"],
        "model"
    );

    assert!(
        seen.lock().unwrap().heads.is_empty(),
        "the upstream was never called"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_its_quota_is_closed_after_the_response() {
    // Each response costs 20_000 micro-USD. The first block is 4_096 input and 16_384
    // output tokens (36_864); the 1_000 left after it is below the floor of an extension.
    let (up, seen) = mock_upstream((20_000, 0, 20)).await;
    let gw = TestGateway::start(&gateway_config(&up), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.037864})).await;

    let session = async {
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
        // The refused extension is answered well within this pause.
        tokio::time::sleep(Duration::from_millis(300)).await;
        ask(&mut sock, 1).await;
        read_until(&mut sock, "response.done").await;
        let (op, p) = read_frame(&mut sock).await.expect("a close frame follows");
        assert_eq!(op, 8);
        assert_eq!(&p[..2], &1008u16.to_be_bytes());
        assert_eq!(&p[2..], b"quota exhausted");

        // The close is answered; the gateway then ends both sides.
        sock.write_all(&encode(8, &1008u16.to_be_bytes(), Some([9, 9, 9, 9])))
            .await
            .unwrap();
        let mut rest = Vec::new();
        let _ = sock.read_to_end(&mut rest).await;
        assert!(rest.is_empty(), "nothing after the close");
    };
    tokio::time::timeout(Duration::from_secs(20), session)
        .await
        .expect("the session is closed");

    let used = settled_spend(&gw, &id).await;
    assert_eq!(used, 36_864, "billed what was reserved");
    assert!(used <= 37_864, "the cap holds");
    for _ in 0..100 {
        if seen.lock().unwrap().cut {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = seen.lock().unwrap();
    assert!(
        seen.cut,
        "the upstream connection was ended, and the client's close not forwarded"
    );
    assert_eq!(seen.client_messages.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_landing_while_idle_closes_through_the_upstream() {
    // One response (40_000 micro-USD) outspends the whole first block (36_864) at once;
    // the extension then asked for is refused while the session sits idle.
    let (up, seen) = mock_upstream((40_000, 0, 20)).await;
    let gw = TestGateway::start(&gateway_config(&up), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.037864})).await;

    let session = async {
        let (mut sock, head) = connect(
            &gw,
            "gpt-realtime",
            &format!("openai-insecure-api-key.{key}"),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        read_until(&mut sock, "session.created").await;
        ask(&mut sock, 0).await;
        read_until(&mut sock, "response.done").await;
        tokio::time::sleep(Duration::from_millis(300)).await;

        // The next request goes up as a close instead; the upstream's close reply comes
        // back as the quota close, and the gateway then ends the connection.
        ask(&mut sock, 1).await;
        let (op, p) = read_frame(&mut sock).await.expect("a close frame");
        assert_eq!(op, 8);
        assert_eq!(&p[..2], &1008u16.to_be_bytes());
        assert_eq!(&p[2..], b"quota exhausted");
        let mut rest = Vec::new();
        let _ = sock.read_to_end(&mut rest).await;
        assert!(rest.is_empty());
    };
    tokio::time::timeout(Duration::from_secs(20), session)
        .await
        .expect("the session is closed");

    assert_eq!(settled_spend(&gw, &id).await, 36_864);
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.client_messages.len(),
        1,
        "the second request never went up"
    );
    assert!(!seen.cut, "the upstream got a close frame");
}
