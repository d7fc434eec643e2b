//! The mock model provider: an OpenAI-style chat upstream, HTTP/1.1 keep-alive, written
//! on raw Tokio so that it costs little and every byte and pause is ours.
//!
//! The reply is chosen by the model named in the request body:
//! - `bench-sse`: a stream of [`UpstreamConfig::sse_events`] events, one chunked write
//!   each, `sse_interval` apart (the role event leaves with the header);
//! - `bench-fast`: the same stream with no pause between the writes (a fast upstream:
//!   what streaming throughput is measured with);
//! - `bench-idle`: the header and the role event, then nothing until
//!   [`Upstream::release_idle`], then the rest of the stream at once;
//! - `bench-long`: a chat stream of [`LONG_PIECES`] content events (a real answer's
//!   length), one write each, without pause;
//! - `bench-anthropic`: the same answer as a messages-protocol stream (text deltas), the
//!   way an Anthropic upstream writes it, one write each, without pause;
//! - anything else: a fixed chat completion with usage, with a Content-Length.
//!
//! `latency` delays every reply's header (0 in the budget runs: the proxies' own cost is
//! what is measured).

use super::http::{Parser, Part, ReadBuf};
use serde_json::json;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Marks the content events of a stream, so the client can time them.
pub const PIECE_MARK: &[u8] = b"piece-";
/// Content events in a `bench-long` or `bench-anthropic` stream.
pub const LONG_PIECES: usize = 200;
/// Read buffer per upstream connection: heads fit; bodies stream through.
const READ_BUF: usize = 8 * 1024;

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub latency: Duration,
    /// Events in a `bench-sse` stream, role and `[DONE]` included.
    pub sse_events: usize,
    pub sse_interval: Duration,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub body_bytes: AtomicU64,
    pub connections: AtomicU64,
}

struct Shared {
    cfg: UpstreamConfig,
    json_reply: Vec<u8>,
    sse_head: Vec<u8>,
    sse_head_close: Vec<u8>,
    /// Each event as one HTTP chunk, in order.
    sse_chunks: Vec<Vec<u8>>,
    long_chat: Vec<Vec<u8>>,
    long_messages: Vec<Vec<u8>>,
    release: watch::Receiver<u64>,
    stats: Arc<Stats>,
}

pub struct Upstream {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    release: watch::Sender<u64>,
}

impl Upstream {
    /// Listens on an ephemeral loopback port; serves on the current Tokio runtime.
    pub async fn start(cfg: UpstreamConfig) -> io::Result<Upstream> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (release, release_rx) = watch::channel(0u64);
        let stats = Arc::new(Stats::default());
        let events = stream_events(cfg.sse_events);
        let shared = Arc::new(Shared {
            json_reply: json_reply(),
            sse_head: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            sse_head_close: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            sse_chunks: events.iter().map(|e| chunk(e)).collect(),
            long_chat: stream_events(LONG_PIECES + 4).iter().map(|e| chunk(e)).collect(),
            long_messages: messages_events(LONG_PIECES).iter().map(|e| chunk(e)).collect(),
            cfg,
            release: release_rx,
            stats: stats.clone(),
        });
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    // Out of descriptors: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                shared.stats.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(sock, shared.clone()));
            }
        });
        Ok(Upstream {
            addr,
            stats,
            release,
        })
    }

    /// Lets every held `bench-idle` stream finish.
    pub fn release_idle(&self) {
        self.release.send_modify(|g| *g += 1);
    }
}

/// The SSE data lines of a streamed chat completion: role, pieces, finish, usage, `[DONE]`.
pub fn stream_events(n: usize) -> Vec<String> {
    let n = n.max(5);
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": "bench-sse", "system_fingerprint": "fp_bench",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        .to_string()
    };
    let mut v = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        json!(null),
    )];
    for i in 0..n - 4 {
        v.push(chunk(
            json!({"content": format!("piece-{i:03} ")}),
            json!(null),
        ));
    }
    v.push(chunk(json!({}), json!("stop")));
    v.push(
        json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": "bench-sse", "choices": [],
               "usage": {"prompt_tokens": 24, "completion_tokens": n - 4, "total_tokens": 24 + n - 4}})
        .to_string(),
    );
    v.push("[DONE]".to_string());
    v.into_iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// A messages-protocol stream of `pieces` text deltas, as the Messages API reference
/// (Anthropic, "Streaming Messages") shows it: `message_start`, `content_block_start`, a
/// `ping`, the `content_block_delta`s, `content_block_stop`, `message_delta` (stop reason
/// and output usage), `message_stop`. Each event named, one `data:` line.
pub fn messages_events(pieces: usize) -> Vec<String> {
    let ev = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    let mut v = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {
            "id": "msg_bench", "type": "message", "role": "assistant", "content": [],
            "model": "bench-anthropic", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 24, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 1}}}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        ev("ping", json!({"type": "ping"})),
    ];
    for i in 0..pieces {
        v.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": format!("piece-{i:03} ")}}),
        ));
    }
    v.push(ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    v.push(ev(
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": null},
        "usage": {"output_tokens": pieces}}),
    ));
    v.push(ev("message_stop", json!({"type": "message_stop"})));
    v
}

/// Pieces (content events) in a stream of `n` events.
pub fn pieces_in(n: usize) -> usize {
    n.max(5) - 4
}

fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

fn json_reply() -> Vec<u8> {
    let body = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000,
        "model": "bench-chat", "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "message": {"role": "assistant",
            "content": "Packets cross the wire;\nthe proxy adds a breath;\nthe answer arrives.",
            "refusal": null}, "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 24, "completion_tokens": 18, "total_tokens": 42,
                  "prompt_tokens_details": {"cached_tokens": 0}}
    })
    .to_string();
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Json,
    Sse,
    Fast,
    Idle,
    LongChat,
    LongMessages,
}

/// Which reply a request body asks for.
pub fn kind_of(body: &[u8]) -> Kind {
    if memchr::memmem::find(body, b"bench-long").is_some() {
        Kind::LongChat
    } else if memchr::memmem::find(body, b"bench-anthropic").is_some() {
        Kind::LongMessages
    } else if memchr::memmem::find(body, b"bench-idle").is_some() {
        Kind::Idle
    } else if memchr::memmem::find(body, b"bench-sse").is_some() {
        Kind::Sse
    } else if memchr::memmem::find(body, b"bench-fast").is_some() {
        Kind::Fast
    } else {
        Kind::Json
    }
}

async fn serve(mut sock: TcpStream, shared: Arc<Shared>) {
    let _ = sock.set_nodelay(true);
    let mut rb = ReadBuf::new(READ_BUF);
    let mut body = Vec::new();
    loop {
        body.clear();
        let mut p = Parser::default();
        loop {
            let used = match p.feed(rb.pending(), &mut |part| {
                if let Part::Body(d) = part {
                    body.extend_from_slice(d);
                }
            }) {
                Ok(n) => n,
                Err(_) => return,
            };
            rb.consume(used);
            if p.done() {
                break;
            }
            let Ok(space) = rb.space() else { return };
            match sock.read(space).await {
                Ok(0) | Err(_) => return,
                Ok(n) => rb.filled(n),
            }
        }
        let stats = &shared.stats;
        stats.requests.fetch_add(1, Ordering::Relaxed);
        stats
            .body_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        if !shared.cfg.latency.is_zero() {
            tokio::time::sleep(shared.cfg.latency).await;
        }
        let ok = match kind_of(&body) {
            Kind::Json => sock.write_all(&shared.json_reply).await.is_ok(),
            Kind::Sse => {
                write_stream(
                    &mut sock,
                    &shared,
                    &shared.sse_chunks,
                    shared.cfg.sse_interval,
                )
                .await
            }
            Kind::Fast => {
                write_stream(&mut sock, &shared, &shared.sse_chunks, Duration::ZERO).await
            }
            Kind::LongChat => {
                write_stream(&mut sock, &shared, &shared.long_chat, Duration::ZERO).await
            }
            Kind::LongMessages => {
                write_stream(&mut sock, &shared, &shared.long_messages, Duration::ZERO).await
            }
            Kind::Idle => write_idle(&mut sock, &shared).await,
        };
        if !ok {
            return;
        }
    }
}

/// The stream's head with its first event, then each event in a write of its own,
/// `interval` apart.
async fn write_stream(
    sock: &mut TcpStream,
    sh: &Shared,
    chunks: &[Vec<u8>],
    interval: Duration,
) -> bool {
    let Some((first, rest)) = chunks.split_first() else {
        return false;
    };
    let head = [sh.sse_head.as_slice(), first].concat();
    if sock.write_all(&head).await.is_err() {
        return false;
    }
    for c in rest {
        if !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
        if sock.write_all(c).await.is_err() {
            return false;
        }
    }
    sock.write_all(b"0\r\n\r\n").await.is_ok()
}

/// An idle stream's connection is closed after it ends (`Connection: close`): proxies
/// then drop their side too, instead of pooling thousands of connections that would
/// hold descriptors through the next target's run.
async fn write_idle(sock: &mut TcpStream, sh: &Shared) -> bool {
    let mut release = sh.release.clone();
    let seen = *release.borrow_and_update();
    let Some((first, rest)) = sh.sse_chunks.split_first() else {
        return false;
    };
    let head = [sh.sse_head_close.as_slice(), first].concat();
    if sock.write_all(&head).await.is_err() {
        return false;
    }
    // Held open, silent, until the scenario releases it (or the bench ends).
    if release.wait_for(|g| *g > seen).await.is_err() {
        return false;
    }
    let mut tail = rest.concat();
    tail.extend_from_slice(b"0\r\n\r\n");
    let _ = sock.write_all(&tail).await;
    let _ = sock.shutdown().await;
    false
}
