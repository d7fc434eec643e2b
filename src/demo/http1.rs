//! The demo server's HTTP/1.1: keep-alive connections, bodies by `Content-Length`, whole
//! answers with a length and streams in chunked encoding, written as they are paced.

use super::answer::{self, End, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest request header and body the demo server reads.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One request as read off the connection.
struct Incoming {
    method: String,
    path: String,
    body: Vec<u8>,
    close: bool,
}

pub async fn connection(mut s: TcpStream) {
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    loop {
        let req = match read_request(&mut s, &mut buf).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(status) => {
                let body =
                    answer::error_body(status, "The demo upstream could not read the request.");
                let _ = write_whole(&mut s, status, &body, true).await;
                return;
            }
        };
        let reply = answer::handle(&req.method, &req.path, &req.body);
        let ok = match reply {
            Reply::Whole { status, body } => {
                write_whole(&mut s, status, &body, req.close).await.is_ok()
            }
            Reply::Stream {
                events,
                interval,
                end,
            } => write_stream(&mut s, &events, interval, end).await.is_ok() && end == End::Done,
            Reply::Hang => {
                until_closed(&mut s).await;
                false
            }
        };
        if !ok || req.close {
            return;
        }
    }
}

/// Reads one request; `None` when the peer closed between requests; `Err(status)` for
/// what cannot be read.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Option<Incoming>, u16> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut r = httparse::Request::new(&mut headers);
        match r.parse(buf) {
            Ok(httparse::Status::Complete(head)) => {
                let method = r.method.unwrap_or("GET").to_string();
                let path = r.path.unwrap_or("/").to_string();
                let mut length = 0usize;
                let mut close = r.version == Some(0);
                for h in r.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        length = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| v.trim().parse().ok())
                            .ok_or(400u16)?;
                    } else if h.name.eq_ignore_ascii_case("connection") {
                        close = h.value.eq_ignore_ascii_case(b"close");
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        // The gateway sends whole bodies with a length.
                        return Err(411);
                    }
                }
                if length > MAX_BODY {
                    return Err(413);
                }
                while buf.len() < head + length {
                    if read_more(s, buf).await? == 0 {
                        return Err(400);
                    }
                }
                let body = buf[head..head + length].to_vec();
                buf.drain(..head + length);
                return Ok(Some(Incoming {
                    method,
                    path,
                    body,
                    close,
                }));
            }
            Ok(httparse::Status::Partial) => {
                if buf.len() > MAX_HEAD {
                    return Err(431);
                }
                if read_more(s, buf).await? == 0 {
                    return if buf.is_empty() { Ok(None) } else { Err(400) };
                }
            }
            Err(_) => return Err(400),
        }
    }
}

async fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<usize, u16> {
    let mut chunk = [0u8; 8192];
    let n = s.read(&mut chunk).await.map_err(|_| 400u16)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

async fn write_whole(
    s: &mut TcpStream,
    status: u16,
    body: &[u8],
    close: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}\r\n",
        reason(status),
        body.len(),
        if close { "connection: close\r\n" } else { "" }
    );
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
    s.write_all(&out).await
}

/// Each event as its own chunk, `interval` apart. A cut stream stops without its last
/// chunk; a stalled one keeps the connection open, silent, until the peer leaves.
async fn write_stream(
    s: &mut TcpStream,
    events: &[String],
    interval: std::time::Duration,
    end: End,
) -> std::io::Result<()> {
    s.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await?;
    let stop_after = match end {
        End::Done => events.len(),
        End::Cut | End::Stall => events.len().min(2),
    };
    for (i, e) in events.iter().take(stop_after).enumerate() {
        if i > 0 && !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
        let chunk = format!("{:x}\r\n{e}\r\n", e.len());
        s.write_all(chunk.as_bytes()).await?;
    }
    match end {
        End::Done => s.write_all(b"0\r\n\r\n").await,
        End::Cut => s.shutdown().await,
        End::Stall => {
            until_closed(s).await;
            Ok(())
        }
    }
}

/// Waits until the peer closes the connection (what it sends meanwhile is dropped).
async fn until_closed(s: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    }
}
