//! Opening a connection on a listener before HTTP is spoken on it: a PROXY header from
//! a trusted balancer sets the client's address, then TLS is negotiated when the
//! listener has it. The edge calls [`Front::open`] once per connection, after it took
//! one of the listener's connection permits.

use super::prefixed::Prefixed;
use super::proxy_protocol::{self, Parsed};
use bytes::{Buf, BytesMut};
use ipnet::IpNet;
use pingora::listeners::tls::Acceptor;
use pingora::protocols::l4::socket::SocketAddr as PingoraAddr;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, SocketDigest, Stream};
use rustls::ServerConfig;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::AsyncReadExt;

/// A TLS record of the handshake type starts every ClientHello (RFC 8446 5.1).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// The HTTP/2 connection preface (RFC 9113 3.4).
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Which listener a connection came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Admin,
}

/// How a connection opened.
pub enum Opened {
    /// Ready for HTTP (over TLS when the listener has it).
    Ready(Stream),
    /// Plain HTTP (or anything but TLS) on a TLS listener: to be refused in the clear.
    Plain(Stream),
    /// Closed, timed out, refused in the handshake, or a PROXY header from an address not
    /// trusted to send one: nothing to answer.
    Gone,
}

/// A listener's TLS and PROXY protocol settings as they run when a connection opens (a
/// reload may change them between two connections).
pub struct Listening {
    /// What the handshake runs with; `None`: plain HTTP.
    pub tls: Option<Arc<ServerConfig>>,
    /// The balancers trusted to send a PROXY header.
    pub trusted: Arc<[IpNet]>,
}

/// Where a front reads its listener's running settings (the running configuration).
pub trait Settings: Send + Sync {
    fn listening(&self, side: Side) -> Listening;
}

/// The running configuration's TLS and PROXY protocol for one listener.
pub struct Front {
    settings: Arc<dyn Settings>,
    side: Side,
}

impl Front {
    pub fn new(settings: Arc<dyn Settings>, side: Side) -> Front {
        Front { settings, side }
    }

    /// Reads a PROXY header (when trusted addresses are configured) and negotiates TLS
    /// (when the listener has it), all before `deadline`.
    pub async fn open(&self, stream: Stream, deadline: Instant) -> Opened {
        let Listening { tls, trusted } = self.settings.listening(self.side);
        if tls.is_none() && trusted.is_empty() {
            return Opened::Ready(stream);
        }
        // The listeners are TCP: their connections are Pingora's L4 streams.
        let mut l4 = match stream.into_any().downcast::<L4Stream>() {
            Ok(l4) => *l4,
            Err(_) => {
                tracing::error!("a connection that is not TCP on a TCP listener");
                return Opened::Gone;
            }
        };
        let mut buf = BytesMut::with_capacity(512);
        if !trusted.is_empty() {
            match proxy_header(&mut l4, &mut buf, &trusted, deadline).await {
                Ok(()) => {}
                Err(reason) => {
                    tracing::debug!(reason, "connection refused before TLS");
                    return Opened::Gone;
                }
            }
        }
        let Some(tls) = tls else {
            l4.rewind(&buf);
            return Opened::Ready(Box::new(l4));
        };
        if buf.is_empty() && !read_until(&mut l4, &mut buf, deadline).await {
            return Opened::Gone;
        }
        l4.rewind(&buf);
        if buf[0] != TLS_HANDSHAKE_RECORD {
            return Opened::Plain(Box::new(l4));
        }
        let acceptor = Acceptor::from_server_config(tls);
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, acceptor.tls_handshake(l4)).await {
            Ok(Ok(s)) => Opened::Ready(Box::new(s)),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "TLS handshake refused");
                Opened::Gone
            }
            Err(_) => {
                tracing::debug!("TLS handshake not done within the header deadline");
                Opened::Gone
            }
        }
    }
}

/// Reads more into `buf` before `deadline`; false when the client closed or the deadline
/// passed.
async fn read_until(l4: &mut L4Stream, buf: &mut BytesMut, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    matches!(
        tokio::time::timeout(left, l4.read_buf(buf)).await,
        Ok(Ok(n)) if n > 0
    )
}

/// Takes a PROXY header off the start of the connection, if there is one: believed from
/// a `trusted` peer (its source becomes the connection's client address), refused from
/// any other. What was read after it stays in `buf`.
async fn proxy_header(
    l4: &mut L4Stream,
    buf: &mut BytesMut,
    trusted: &[IpNet],
    deadline: Instant,
) -> Result<(), &'static str> {
    loop {
        match proxy_protocol::parse(buf) {
            Parsed::None => return Ok(()),
            Parsed::Partial => {
                if !read_until(l4, buf, deadline).await {
                    return Err("closed or timed out before a whole PROXY header");
                }
            }
            Parsed::Invalid(reason) => return Err(reason),
            Parsed::Header { len, source } => {
                let digest = l4.get_socket_digest();
                let peer = digest
                    .as_ref()
                    .and_then(|d| d.peer_addr())
                    .and_then(|a| a.as_inet())
                    .map(|a| a.ip().to_canonical());
                if !peer.is_some_and(|ip| trusted.iter().any(|n| n.contains(&ip))) {
                    return Err("a PROXY header from an address not in proxy_protocol.trusted");
                }
                buf.advance(len);
                if let Some(source) = source {
                    let d = SocketDigest::from_raw_fd(l4.as_raw_fd());
                    let _ = d.peer_addr.set(Some(PingoraAddr::Inet(source)));
                    if let Some(local) = digest.as_ref().and_then(|d| d.local_addr()) {
                        let _ = d.local_addr.set(Some(local.clone()));
                    }
                    l4.set_socket_digest(d);
                }
                return Ok(());
            }
        }
    }
}

/// Reads an HTTP/2 client's connection preface before `deadline` and puts it back: a
/// connection that negotiated `h2` and then says nothing is closed at the header
/// deadline, as an HTTP/1 one is.
pub async fn h2_preface(mut stream: Stream, deadline: Instant) -> Option<Stream> {
    let mut preface = [0u8; H2_PREFACE.len()];
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, stream.read_exact(&mut preface)).await {
        Ok(Ok(_)) if &preface == H2_PREFACE => Some(Box::new(Prefixed::new(
            bytes::Bytes::copy_from_slice(&preface),
            stream,
        ))),
        _ => None,
    }
}
