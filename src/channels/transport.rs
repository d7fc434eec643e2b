//! How the relay's connections to a channel's upstream are made beyond its address:
//! HTTP/2 offered by ALPN (`http2`, `http2_max_streams`) and the CAs its certificate is
//! verified against (`ca_file`). Read and checked at configuration load; applied to each
//! peer the channel makes.

use super::raw::{invalid, Invalid, RawChannel};
use pingora::upstreams::peer::HttpPeer;
use pingora::utils::tls::WrappedX509;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

/// Streams one HTTP/2 connection carries at once unless `http2_max_streams` says
/// otherwise: what most servers advertise (`SETTINGS_MAX_CONCURRENT_STREAMS`). The
/// connector takes the smaller of this and the server's own limit.
pub const DEFAULT_H2_STREAMS: u32 = 100;

/// A channel's connection options, as its peers carry them.
#[derive(Clone, Default)]
pub struct Transport {
    /// Streams per HTTP/2 connection; `None`: HTTP/1.1 only.
    pub h2_streams: Option<usize>,
    /// The channel's own CA certificates, in place of the system roots.
    ca: Option<Arc<[WrappedX509]>>,
    /// The pool group of connections verified against `ca`. Pingora's pool key leaves
    /// the CAs out, so without a group of their own a connection verified against one
    /// channel's CAs could be handed to another channel to the same address that trusts
    /// only the system roots (or other CAs).
    ca_group: u64,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("h2_streams", &self.h2_streams)
            .field("ca_certificates", &self.ca.as_ref().map(|c| c.len()))
            .finish()
    }
}

impl Transport {
    /// Checks `http2`, `http2_max_streams` and `ca_file` of a channel whose `base_url`
    /// is `https://` when `tls`. The CA file is read here, so a bad one fails the load
    /// (and `check-config`), never a request.
    pub(super) fn from_raw(c: &RawChannel, tls: bool) -> Result<Transport, Invalid> {
        if c.http2 && !tls {
            // h2c (HTTP/2 without TLS) would need prior knowledge of the upstream;
            // offering h2 by ALPN is what falls back cleanly to HTTP/1.1.
            return Err(invalid(
                "http2",
                "HTTP/2 toward an upstream is negotiated in TLS (ALPN): it needs an https:// base_url",
            ));
        }
        let h2_streams = match (c.http2, c.http2_max_streams) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(invalid(
                    "http2_max_streams",
                    "is set only with `http2: true`",
                ))
            }
            (true, Some(0)) => return Err(invalid("http2_max_streams", "must be at least 1")),
            (true, n) => Some(n.unwrap_or(DEFAULT_H2_STREAMS) as usize),
        };
        let Some(file) = c.ca_file.as_deref() else {
            return Ok(Transport {
                h2_streams,
                ..Transport::default()
            });
        };
        if !tls {
            return Err(invalid(
                "ca_file",
                "verifies an https upstream's certificate, but the base_url is http://",
            ));
        }
        if file.trim().is_empty() {
            return Err(invalid("ca_file", "must not be empty"));
        }
        let ders = crate::tls::upstream_roots("ca_file", Path::new(file))
            .map_err(|e| invalid("ca_file", e.message))?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut ca = Vec::with_capacity(ders.len());
        for der in ders {
            der.as_ref().hash(&mut hasher);
            // Parsed again by the same parser that accepted it above; `try_new` instead
            // of Pingora's `parse_x509`, which panics where this returns the error.
            let wrapped = WrappedX509::try_new(der.to_vec(), |raw| {
                x509_parser::parse_x509_certificate(raw).map(|(_, cert)| cert)
            })
            .map_err(|e| invalid("ca_file", format!("{file}: not an X.509 certificate: {e}")))?;
            ca.push(wrapped);
        }
        Ok(Transport {
            h2_streams,
            ca: Some(ca.into()),
            ca_group: hasher.finish(),
        })
    }

    /// Sets the peer's ALPN offer and streams per connection, and its CAs.
    pub(super) fn apply(&self, peer: &mut HttpPeer) {
        if let Some(streams) = self.h2_streams {
            // `h2` first, `http/1.1` as well: an upstream without HTTP/2 picks it, and
            // the connector speaks HTTP/1.1 on that connection.
            peer.options.set_http_version(2, 1);
            peer.options.max_h2_streams = streams;
        }
        if let Some(ca) = &self.ca {
            peer.options.ca = Some(ca.clone());
            peer.group_key = self.ca_group;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(http2: bool, streams: Option<u32>, ca_file: Option<&str>) -> RawChannel {
        RawChannel {
            http2,
            http2_max_streams: streams,
            ca_file: ca_file.map(String::from),
            ..RawChannel::default()
        }
    }

    fn field(r: RawChannel, tls: bool) -> String {
        Transport::from_raw(&r, tls).unwrap_err().field
    }

    #[test]
    fn http2_needs_tls_and_streams_need_http2() {
        assert_eq!(field(raw(true, None, None), false), "http2");
        assert_eq!(field(raw(false, Some(8), None), true), "http2_max_streams");
        assert_eq!(field(raw(true, Some(0), None), true), "http2_max_streams");
        let t = Transport::from_raw(&raw(true, None, None), true).unwrap();
        assert_eq!(t.h2_streams, Some(DEFAULT_H2_STREAMS as usize));
        let t = Transport::from_raw(&raw(true, Some(8), None), true).unwrap();
        assert_eq!(t.h2_streams, Some(8));
        assert_eq!(
            Transport::from_raw(&raw(false, None, None), true)
                .unwrap()
                .h2_streams,
            None
        );
    }

    #[test]
    fn the_peer_offers_h2_and_http1_with_its_streams() {
        let t = Transport::from_raw(&raw(true, Some(7), None), true).unwrap();
        let mut peer = HttpPeer::new(("127.0.0.1", 443), true, "up.test".into());
        t.apply(&mut peer);
        assert_eq!(peer.options.alpn, pingora::protocols::ALPN::H2H1);
        assert_eq!(peer.options.max_h2_streams, 7);
        assert!(peer.options.ca.is_none());
        let mut plain = HttpPeer::new(("127.0.0.1", 443), true, "up.test".into());
        Transport::default().apply(&mut plain);
        assert_eq!(plain.options.alpn, pingora::protocols::ALPN::H1);
        assert_eq!(plain.options.max_h2_streams, 1);
    }

    #[test]
    fn a_bad_ca_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "just text\n").unwrap();
        let bad_der = dir.path().join("bad.pem");
        std::fs::write(
            &bad_der,
            "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (path, says) in [
            (&missing, "cannot read"),
            (&not_pem, "no PEM"),
            (&bad_der, "not an X.509 certificate"),
        ] {
            let e = Transport::from_raw(&raw(false, None, path.to_str()), true).unwrap_err();
            assert_eq!(e.field, "ca_file");
            assert!(e.message.contains(says), "{}", e.message);
        }
        assert_eq!(field(raw(false, None, Some(" ")), true), "ca_file");
        assert_eq!(
            field(raw(false, None, missing.to_str()), false),
            "ca_file",
            "no CAs for an http:// upstream"
        );
    }
}
