//! The PROXY protocol, versions 1 and 2, as HAProxy's specification defines it
//! (`doc/proxy-protocol.txt` in the HAProxy sources): a TCP load balancer writes one
//! header ahead of the client's bytes, naming the client's address. Pure parsing; the
//! edge decides whom to believe (see [`super::front`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The version 2 signature (spec 2.2).
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Version 1 starts with this; its whole line is at most 107 bytes (spec 2.1).
const V1_PREFIX: &[u8] = b"PROXY ";
const V1_MAX: usize = 107;
/// A version 2 header's address block and TLVs: bounded so a header cannot ask the edge
/// to buffer much (the spec allows up to 64 KiB; balancers send far less).
const V2_MAX_BODY: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// The bytes do not start with a PROXY header.
    None,
    /// The start of a header: read more.
    Partial,
    /// A whole header of `len` bytes; `source` is the client's address, or `None` when
    /// the balancer speaks for itself (v2 `LOCAL`, v1 `UNKNOWN`, or a family other than
    /// TCP over IPv4/IPv6).
    Header {
        len: usize,
        source: Option<SocketAddr>,
    },
    /// A header that breaks the specification.
    Invalid(&'static str),
}

/// Reads a PROXY header at the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    if starts_like(buf, V2_SIGNATURE) {
        return if buf.len() < V2_SIGNATURE.len() {
            Parsed::Partial
        } else {
            v2(buf)
        };
    }
    if starts_like(buf, V1_PREFIX) {
        return if buf.len() < V1_PREFIX.len() {
            Parsed::Partial
        } else {
            v1(buf)
        };
    }
    Parsed::None
}

/// `buf` and `sig` agree on their common length (an empty `buf` agrees with anything).
fn starts_like(buf: &[u8], sig: &[u8]) -> bool {
    let n = buf.len().min(sig.len());
    buf[..n] == sig[..n]
}

fn v1(buf: &[u8]) -> Parsed {
    let Some(end) = buf.windows(2).take(V1_MAX).position(|w| w == b"\r\n") else {
        return if buf.len() >= V1_MAX {
            Parsed::Invalid("a version 1 header longer than 107 bytes")
        } else {
            Parsed::Partial
        };
    };
    let len = end + 2;
    let Ok(line) = std::str::from_utf8(&buf[V1_PREFIX.len()..end]) else {
        return Parsed::Invalid("a version 1 header that is not ASCII");
    };
    let mut parts = line.split(' ');
    let family = parts.next().unwrap_or_default();
    if family == "UNKNOWN" {
        return Parsed::Header { len, source: None };
    }
    let fields: Vec<&str> = parts.collect();
    let [src, _dst, sport, _dport] = fields[..] else {
        return Parsed::Invalid("a version 1 header without four address fields");
    };
    let ip: Option<IpAddr> = match family {
        "TCP4" => src.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        "TCP6" => src.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        _ => return Parsed::Invalid("a version 1 header of an unknown family"),
    };
    // Ports are decimal without leading zeros (spec 2.1); `u16` parsing bounds them.
    let port = sport
        .parse::<u16>()
        .ok()
        .filter(|_| !sport.starts_with('0') || sport == "0");
    match (ip, port) {
        (Some(ip), Some(port)) => Parsed::Header {
            len,
            source: Some(SocketAddr::new(ip, port)),
        },
        _ => Parsed::Invalid("a version 1 header with a malformed address"),
    }
}

fn v2(buf: &[u8]) -> Parsed {
    if buf.len() < 16 {
        return Parsed::Partial;
    }
    let (ver_cmd, family) = (buf[12], buf[13]);
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if ver_cmd >> 4 != 2 {
        return Parsed::Invalid("a version 2 header of another version");
    }
    if body > V2_MAX_BODY {
        return Parsed::Invalid("a version 2 header longer than the edge takes");
    }
    let len = 16 + body;
    if buf.len() < len {
        return Parsed::Partial;
    }
    let addr = &buf[16..len];
    match ver_cmd & 0x0f {
        // LOCAL: the balancer's own connection (a health check).
        0 => return Parsed::Header { len, source: None },
        1 => {}
        _ => return Parsed::Invalid("a version 2 header with an unknown command"),
    }
    let port = |at: usize| u16::from_be_bytes([addr[at], addr[at + 1]]);
    let source = match family {
        // TCP over IPv4: source, destination, source port, destination port.
        0x11 if addr.len() >= 12 => {
            let ip = Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]);
            Some(SocketAddr::new(IpAddr::V4(ip), port(8)))
        }
        0x21 if addr.len() >= 36 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&addr[..16]);
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(octets)),
                port(32),
            ))
        }
        0x11 | 0x21 => return Parsed::Invalid("a version 2 header shorter than its addresses"),
        // UNSPEC, UDP, UNIX: no TCP client address to take.
        _ => None,
    };
    Parsed::Header { len, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 2 header for `source` → `destination` (TCP), as a balancer writes it.
    fn v2_header(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(0x21);
        match (source.ip(), destination.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.push(0x11);
                out.extend_from_slice(&12u16.to_be_bytes());
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            (s, d) => {
                let six = |ip: IpAddr| match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                    IpAddr::V6(v6) => v6.octets(),
                };
                out.push(0x21);
                out.extend_from_slice(&36u16.to_be_bytes());
                out.extend_from_slice(&six(s));
                out.extend_from_slice(&six(d));
            }
        }
        out.extend_from_slice(&source.port().to_be_bytes());
        out.extend_from_slice(&destination.port().to_be_bytes());
        out
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn version_1_in_every_split() {
        let line = b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 443\r\nGET / HTTP/1.1\r\n";
        let header_len = 43;
        for cut in 0..line.len() {
            let got = parse(&line[..cut]);
            if cut < header_len {
                assert_eq!(got, Parsed::Partial, "{cut}");
            } else {
                assert_eq!(
                    got,
                    Parsed::Header {
                        len: header_len,
                        source: Some(addr("203.0.113.7:51234"))
                    },
                    "{cut}"
                );
            }
        }
        assert_eq!(
            parse(b"PROXY TCP6 2001:db8::1 2001:db8::2 7 443\r\n"),
            Parsed::Header {
                len: 42,
                source: Some(addr("[2001:db8::1]:7"))
            }
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Parsed::Header {
                len: 15,
                source: None
            }
        );
    }

    #[test]
    fn version_1_refusals() {
        for bad in [
            &b"PROXY TCP4 300.1.1.1 10.0.0.1 1 2\r\n"[..],
            b"PROXY TCP4 1.1.1.1 10.0.0.1 99999 2\r\n",
            b"PROXY TCP4 1.1.1.1 10.0.0.1 012 2\r\n",
            b"PROXY TCP4 2001:db8::1 10.0.0.1 1 2\r\n",
            b"PROXY UDP4 1.1.1.1 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 1.1.1.1\r\n",
        ] {
            assert!(
                matches!(parse(bad), Parsed::Invalid(_)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat();
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
    }

    #[test]
    fn version_2_in_every_split() {
        let h = v2_header(addr("198.51.100.9:40000"), addr("10.0.0.1:443"));
        assert_eq!(h.len(), 28);
        let mut stream = h.clone();
        stream.extend_from_slice(b"\x16\x03\x01");
        for cut in 0..stream.len() {
            let got = parse(&stream[..cut]);
            if cut < h.len() {
                assert_eq!(got, Parsed::Partial, "{cut}");
            } else {
                assert_eq!(
                    got,
                    Parsed::Header {
                        len: 28,
                        source: Some(addr("198.51.100.9:40000"))
                    }
                );
            }
        }
        let six = v2_header(addr("[2001:db8::9]:1"), addr("[2001:db8::1]:443"));
        assert_eq!(
            parse(&six),
            Parsed::Header {
                len: 52,
                source: Some(addr("[2001:db8::9]:1"))
            }
        );
        // LOCAL (a balancer's health check): no client address.
        let mut local = h.clone();
        local[12] = 0x20;
        assert_eq!(
            parse(&local),
            Parsed::Header {
                len: 28,
                source: None
            }
        );
        let mut v3 = h.clone();
        v3[12] = 0x31;
        assert!(matches!(parse(&v3), Parsed::Invalid(_)));
        let mut short = h;
        short[15] = 4;
        assert!(matches!(parse(&short[..20]), Parsed::Invalid(_)));
    }

    #[test]
    fn other_protocols_are_not_headers() {
        for other in [
            &b"\x16\x03\x01\x02\x00"[..],
            b"GET / HTTP/1.1\r\n",
            b"POST /v1",
            b"PRI * HTTP/2.0",
            b"PROXZ",
            b"\r\n\r\nX",
        ] {
            assert_eq!(
                parse(other),
                Parsed::None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        assert_eq!(parse(b""), Parsed::Partial);
    }
}
