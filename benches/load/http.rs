//! A tiny HTTP/1.1 client and the message parsing the mock upstream shares with it.
//!
//! Hand-written so that the load generator costs as little CPU as possible (requests are
//! pre-built bytes, buffers are reused, nothing is allocated per request) and so that a
//! body piece's arrival time is the time of the read that delivered it: a client library
//! could buffer pieces and hide coalescing. A connection is plain TCP or TLS over it
//! ([`Dial`]); the parsing is the same for both.

use rustls::pki_types::{CertificateDer, ServerName};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

const BUF: usize = 64 * 1024;

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Length(usize),
    Chunked,
}

/// A parsed message head (request or response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The status of a response; 0 for a request.
    pub status: u16,
    /// The request target of a request; empty for a response.
    pub path: String,
    pub body: BodyKind,
    /// Bytes of the head, blank line included.
    pub len: usize,
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Parses a head when the buffer holds all of it; `Ok(None)` asks for more bytes.
pub fn parse_head(buf: &[u8]) -> io::Result<Option<Head>> {
    let Some(end) = memchr::memmem::find(buf, b"\r\n\r\n") else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| bad("head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut words = first.split(' ');
    let (status, path) = match (words.next(), words.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") => (
            code.parse::<u16>().map_err(|_| bad("bad status code"))?,
            String::new(),
        ),
        (Some(_method), Some(target)) => (0, target.to_string()),
        _ => return Err(bad("bad start line")),
    };
    let mut body = BodyKind::Length(0);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(bad("header line without a colon"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            body = BodyKind::Length(value.parse().map_err(|_| bad("bad content-length"))?);
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().contains("chunked")
        {
            body = BodyKind::Chunked;
        }
    }
    Ok(Some(Head {
        status,
        path,
        body,
        len: end + 4,
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size { value: usize, digits: usize },
    Extension { value: usize },
    SizeLf { value: usize },
    Data(usize),
    DataCr,
    DataLf,
    Trailer { line_start: bool },
    Done,
}

/// Decodes a chunked body incrementally: any split of the input gives the same data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunked(Chunk);

impl Default for Chunked {
    fn default() -> Self {
        Chunked(Chunk::Size {
            value: 0,
            digits: 0,
        })
    }
}

impl Chunked {
    pub fn done(&self) -> bool {
        self.0 == Chunk::Done
    }

    /// Consumes from `input` (up to the end of the body), handing each data piece to
    /// `data`; returns the bytes consumed.
    pub fn feed(&mut self, input: &[u8], data: &mut impl FnMut(&[u8])) -> io::Result<usize> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.0 = match self.0 {
                Chunk::Size { value, digits } => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits >= 15 {
                            return Err(bad("chunk size too large"));
                        }
                        let d = (b as char).to_digit(16).unwrap_or(0) as usize;
                        Chunk::Size {
                            value: value * 16 + d,
                            digits: digits + 1,
                        }
                    }
                    b';' if digits > 0 => Chunk::Extension { value },
                    b'\r' if digits > 0 => Chunk::SizeLf { value },
                    b'\n' if digits > 0 => size_done(value),
                    _ => return Err(bad("bad chunk size line")),
                },
                Chunk::Extension { value } => match b {
                    b'\n' => size_done(value),
                    _ => Chunk::Extension { value },
                },
                Chunk::SizeLf { value } => match b {
                    b'\n' => size_done(value),
                    _ => return Err(bad("chunk size line without LF")),
                },
                Chunk::Data(n) => {
                    let take = n.min(input.len() - i);
                    data(&input[i..i + take]);
                    i += take;
                    self.0 = if take == n {
                        Chunk::DataCr
                    } else {
                        Chunk::Data(n - take)
                    };
                    continue;
                }
                Chunk::DataCr => match b {
                    b'\r' => Chunk::DataLf,
                    b'\n' => Chunk::Size {
                        value: 0,
                        digits: 0,
                    },
                    _ => return Err(bad("chunk data longer than its size")),
                },
                Chunk::DataLf => match b {
                    b'\n' => Chunk::Size {
                        value: 0,
                        digits: 0,
                    },
                    _ => return Err(bad("chunk data without CRLF")),
                },
                Chunk::Trailer { line_start } => match b {
                    b'\r' => Chunk::Trailer { line_start },
                    b'\n' if line_start => Chunk::Done,
                    b'\n' => Chunk::Trailer { line_start: true },
                    _ => Chunk::Trailer { line_start: false },
                },
                Chunk::Done => return Ok(i),
            };
            i += 1;
            if self.0 == Chunk::Done {
                return Ok(i);
            }
        }
        Ok(i)
    }
}

fn size_done(value: usize) -> Chunk {
    if value == 0 {
        Chunk::Trailer { line_start: true }
    } else {
        Chunk::Data(value)
    }
}

/// What a message parser hands out, in order: the head, then body pieces.
pub enum Part<'a> {
    Head(&'a Head),
    Body(&'a [u8]),
}

/// One message, head then body, fed whatever the reads deliver.
#[derive(Debug, Default)]
pub struct Parser {
    head: Option<Head>,
    left: usize,
    chunked: Option<Chunked>,
    done: bool,
}

impl Parser {
    pub fn done(&self) -> bool {
        self.done
    }

    pub fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    /// Consumes what it can of `input`; returns the bytes consumed. Bytes past the end
    /// of the message are left alone (the next message on a keep-alive connection).
    pub fn feed(&mut self, input: &[u8], on: &mut impl FnMut(Part)) -> io::Result<usize> {
        let mut used = 0;
        if self.head.is_none() {
            let Some(h) = parse_head(input)? else {
                return Ok(0);
            };
            used = h.len;
            on(Part::Head(&h));
            match h.body {
                BodyKind::Length(n) => {
                    self.left = n;
                    self.done = n == 0;
                }
                BodyKind::Chunked => self.chunked = Some(Chunked::default()),
            }
            self.head = Some(h);
        }
        let rest = &input[used..];
        if self.done {
            return Ok(used);
        }
        if let Some(c) = self.chunked.as_mut() {
            let n = c.feed(rest, &mut |d| on(Part::Body(d)))?;
            self.done = c.done();
            return Ok(used + n);
        }
        let take = self.left.min(rest.len());
        if take > 0 {
            on(Part::Body(&rest[..take]));
        }
        self.left -= take;
        self.done = self.left == 0;
        Ok(used + take)
    }
}

/// A read buffer that keeps the bytes of the next message between exchanges.
pub struct ReadBuf {
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
}

impl ReadBuf {
    /// `size` bounds a message head; bodies stream through it.
    pub fn new(size: usize) -> ReadBuf {
        ReadBuf {
            buf: vec![0; size],
            pos: 0,
            filled: 0,
        }
    }

    pub fn pending(&self) -> &[u8] {
        &self.buf[self.pos..self.filled]
    }

    pub fn consume(&mut self, n: usize) {
        self.pos += n;
    }

    pub fn filled(&mut self, n: usize) {
        self.filled += n;
    }

    /// Room to read into, after moving unconsumed bytes to the front.
    pub fn space(&mut self) -> io::Result<&mut [u8]> {
        if self.pos == self.filled {
            self.pos = 0;
            self.filled = 0;
        } else if self.filled == self.buf.len() {
            if self.pos == 0 {
                return Err(bad("message head does not fit the read buffer"));
            }
            self.buf.copy_within(self.pos..self.filled, 0);
            self.filled -= self.pos;
            self.pos = 0;
        }
        Ok(&mut self.buf[self.filled..])
    }
}

/// A keep-alive client connection on Tokio, over the stream a [`Dial`] opened.
pub struct Conn<S = TcpStream> {
    stream: S,
    rb: ReadBuf,
}

async fn tcp(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

impl Conn<TcpStream> {
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        Conn::connect_with(addr, BUF).await
    }

    /// With a read buffer of `size` bytes (small for the thousands of idle streams).
    pub async fn connect_with(addr: SocketAddr, size: usize) -> io::Result<Conn> {
        Ok(Conn {
            stream: tcp(addr).await?,
            rb: ReadBuf::new(size),
        })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Sends a pre-built request and reads its whole response; `on` sees the head and
    /// every body piece as it is read. Returns the status.
    pub async fn exchange(&mut self, req: &[u8], mut on: impl FnMut(Part)) -> io::Result<u16> {
        self.stream.write_all(req).await?;
        // A TLS stream may keep the last record it sealed until flushed (TCP: no-op).
        self.stream.flush().await?;
        let mut p = Parser::default();
        loop {
            let used = p.feed(self.rb.pending(), &mut on)?;
            self.rb.pos += used;
            if p.done() {
                return Ok(p.head().map_or(0, |h| h.status));
            }
            let space = self.rb.space()?;
            let n = self.stream.read(space).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.rb.filled += n;
        }
    }
}

/// Where the load generator connects, and how: a [`SocketAddr`] is plain TCP,
/// [`TlsDial`] is TLS over it.
pub trait Dial: Clone + Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    fn dial(&self) -> impl Future<Output = io::Result<Conn<Self::Stream>>> + Send;
}

impl Dial for SocketAddr {
    type Stream = TcpStream;

    fn dial(&self) -> impl Future<Output = io::Result<Conn>> + Send {
        Conn::connect(*self)
    }
}

/// TLS to one address, trusting one certificate (the bench's own, made at start), with
/// ALPN `http/1.1`: one handshake per connection, then requests on it (keep-alive).
#[derive(Clone)]
pub struct TlsDial {
    addr: SocketAddr,
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl TlsDial {
    /// `name`: the certificate's DNS name, sent by SNI and verified.
    pub fn new(addr: SocketAddr, cert: CertificateDer<'static>, name: &str) -> io::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).map_err(io::Error::other)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(name.to_string()).map_err(io::Error::other)?;
        Ok(TlsDial {
            addr,
            connector: TlsConnector::from(Arc::new(config)),
            name,
        })
    }
}

impl Dial for TlsDial {
    type Stream = TlsStream<TcpStream>;

    fn dial(&self) -> impl Future<Output = io::Result<Conn<Self::Stream>>> + Send {
        let me = self.clone();
        async move {
            let stream = me.connector.connect(me.name, tcp(me.addr).await?).await?;
            Ok(Conn {
                stream,
                rb: ReadBuf::new(BUF),
            })
        }
    }
}

/// A keep-alive client connection on blocking sockets (the open-loop pacer's threads).
pub struct BlockingConn {
    stream: std::net::TcpStream,
    rb: ReadBuf,
}

impl BlockingConn {
    pub fn connect(addr: std::net::SocketAddr) -> io::Result<BlockingConn> {
        let stream = std::net::TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(BlockingConn {
            stream,
            rb: ReadBuf::new(BUF),
        })
    }

    pub fn exchange(&mut self, req: &[u8], mut on: impl FnMut(Part)) -> io::Result<u16> {
        use std::io::{Read, Write};
        self.stream.write_all(req)?;
        let mut p = Parser::default();
        loop {
            let used = p.feed(self.rb.pending(), &mut on)?;
            self.rb.pos += used;
            if p.done() {
                return Ok(p.head().map_or(0, |h| h.status));
            }
            let space = self.rb.space()?;
            let n = self.stream.read(space)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.rb.filled += n;
        }
    }
}

/// A POST request, head and body, ready to write.
pub fn post(path: &str, host: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Splits a server-sent-events body into events as bytes arrive, whatever the read
/// boundaries; `on_event` gets each complete event's text.
#[derive(Debug, Default)]
pub struct SseSplitter {
    pending: Vec<u8>,
}

impl SseSplitter {
    pub fn feed(&mut self, bytes: &[u8], mut on_event: impl FnMut(&[u8])) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(i) = memchr::memmem::find(&self.pending[start..], b"\n\n") {
            on_event(&self.pending[start..start + i]);
            start += i + 2;
        }
        self.pending.drain(..start);
    }
}
