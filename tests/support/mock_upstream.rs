//! A programmable upstream provider for tests: plain HTTP/1.1 on an ephemeral port,
//! written by hand so a test controls every byte and every pause (chunk timing,
//! mid-stream disconnects, slow first bytes). Each request is recorded, and a closure
//! chosen by the test decides the reply.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("upstream got JSON")
    }
}

/// How a stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The terminating chunk; the connection stays open for reuse.
    Clean,
    /// The socket is closed without the terminating chunk.
    Disconnect,
}

#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response with a Content-Length.
    Full {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// A chunked response: one chunk per piece, `interval` apart.
    Chunked {
        status: u16,
        content_type: String,
        pieces: Vec<Vec<u8>>,
        interval: Duration,
        end: End,
    },
    /// Sends the first `before` pieces of a chunked reply, then waits for the gate to
    /// open before sending the rest.
    Gated {
        reply: Box<Reply>,
        before: usize,
        gate: Arc<Notify>,
    },
    /// Waits, then replies.
    Delayed(Duration, Box<Reply>),
    /// Closes the connection without answering.
    Hangup,
}

impl Reply {
    pub fn json(status: u16, v: serde_json::Value) -> Reply {
        Reply::Full {
            status,
            content_type: "application/json".into(),
            body: serde_json::to_vec(&v).unwrap(),
        }
    }

    /// Server-sent events, one `data:` event per item (raw JSON text or `[DONE]`).
    pub fn sse(events: &[String], interval: Duration, end: End) -> Reply {
        Reply::Chunked {
            status: 200,
            content_type: "text/event-stream".into(),
            pieces: events
                .iter()
                .map(|e| format!("data: {e}\n\n").into_bytes())
                .collect(),
            interval,
            end,
        }
    }
}

type Handler = dyn Fn(&Recorded) -> Reply + Send + Sync;

pub struct MockUpstream {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<Notify>,
    connections: Arc<Mutex<usize>>,
}

impl MockUpstream {
    pub async fn start(
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> MockUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let stop = Arc::new(Notify::new());
        let handler: Arc<Handler> = Arc::new(handler);
        let (reqs, conns, stop2) = (requests.clone(), connections.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop2.notified() => return,
                    acc = listener.accept() => {
                        let Ok((sock, _)) = acc else { continue };
                        *conns.lock().unwrap() += 1;
                        tokio::spawn(serve(sock, handler.clone(), reqs.clone()));
                    }
                }
            }
        });
        MockUpstream {
            addr,
            requests,
            stop,
            connections,
        }
    }

    /// An OpenAI chat upstream that answers every request whole, with `text` and `usage`,
    /// for the model the request named.
    pub async fn completing(text: &'static str, usage: serde_json::Value) -> MockUpstream {
        MockUpstream::start(move |r| {
            let model = r.json()["model"].as_str().unwrap().to_string();
            Reply::json(200, openai::completion(&model, text, usage.clone()))
        })
        .await
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn last(&self) -> Recorded {
        self.requests()
            .last()
            .cloned()
            .expect("the upstream saw a request")
    }

    /// TCP connections accepted so far (to prove connection reuse).
    pub fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

async fn serve(sock: TcpStream, handler: Arc<Handler>, requests: Arc<Mutex<Vec<Recorded>>>) {
    let mut r = BufReader::new(sock);
    loop {
        let Some(req) = read_request(&mut r).await else {
            return;
        };
        requests.lock().unwrap().push(req.clone());
        let reply = handler(&req);
        if !write_reply(r.get_mut(), reply).await {
            return;
        }
    }
}

async fn read_request(r: &mut BufReader<TcpStream>) -> Option<Recorded> {
    let mut head = Vec::new();
    loop {
        let b = r.read_u8().await.ok()?;
        head.push(b);
        if head.ends_with(b"\r\n\r\n") {
            break;
        }
        if head.len() > 1 << 20 {
            return None;
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).await.ok()?;
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

/// Returns whether the connection can serve another request.
async fn write_reply(w: &mut TcpStream, reply: Reply) -> bool {
    match reply {
        Reply::Full {
            status,
            content_type,
            body,
        } => {
            let head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                reason(status),
                body.len()
            );
            w.write_all(head.as_bytes()).await.is_ok() && w.write_all(&body).await.is_ok()
        }
        Reply::Gated {
            reply,
            before,
            gate,
        } => match *reply {
            Reply::Chunked {
                status,
                content_type,
                pieces,
                interval,
                end,
            } => {
                write_chunked(
                    w,
                    status,
                    &content_type,
                    &pieces,
                    interval,
                    end,
                    Some((before, gate)),
                )
                .await
            }
            other => Box::pin(write_reply(w, other)).await,
        },
        Reply::Chunked {
            status,
            content_type,
            pieces,
            interval,
            end,
        } => write_chunked(w, status, &content_type, &pieces, interval, end, None).await,
        Reply::Delayed(d, inner) => {
            tokio::time::sleep(d).await;
            Box::pin(write_reply(w, *inner)).await
        }
        Reply::Hangup => false,
    }
}

async fn write_chunked(
    w: &mut TcpStream,
    status: u16,
    content_type: &str,
    pieces: &[Vec<u8>],
    interval: Duration,
    end: End,
    gate: Option<(usize, Arc<Notify>)>,
) -> bool {
    let head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n",
                reason(status)
            );
    if w.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    for (i, p) in pieces.iter().enumerate() {
        if let Some((before, g)) = &gate {
            if i == *before {
                g.notified().await;
            }
        }
        if i > 0 && !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
        let chunk = [format!("{:x}\r\n", p.len()).as_bytes(), p, b"\r\n"].concat();
        if w.write_all(&chunk).await.is_err() || w.flush().await.is_err() {
            return false;
        }
    }
    match end {
        End::Clean => w.write_all(b"0\r\n\r\n").await.is_ok(),
        End::Disconnect => {
            let _ = w.shutdown().await;
            false
        }
    }
}

/// OpenAI-style fixtures.
pub mod openai {
    use serde_json::{json, Value};

    pub fn usage(prompt: u64, completion: u64, cached: u64) -> Value {
        json!({
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}
        })
    }

    pub fn completion(model: &str, text: &str, usage: Value) -> Value {
        json!({
            "id": "chatcmpl-upstream1", "object": "chat.completion", "created": 1_700_000_000,
            "model": model, "system_fingerprint": "fp_x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": "stop"}],
            "usage": usage
        })
    }

    /// The SSE data items of a streamed completion: role, one chunk per piece, the
    /// finish chunk, the usage chunk (if any), then `[DONE]`.
    pub fn stream(model: &str, pieces: &[&str], usage: Option<Value>) -> Vec<String> {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-upstream1", "object": "chat.completion.chunk", "created": 1_700_000_000,
                   "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string()
        };
        let mut v = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        for p in pieces {
            v.push(chunk(json!({"content": p}), Value::Null));
        }
        v.push(chunk(json!({}), json!("stop")));
        if let Some(u) = usage {
            v.push(
                json!({"id": "chatcmpl-upstream1", "object": "chat.completion.chunk", "created": 1_700_000_000,
                       "model": model, "choices": [], "usage": u})
                .to_string(),
            );
        }
        v.push("[DONE]".to_string());
        v
    }
}
