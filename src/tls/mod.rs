//! TLS at the edge: the certificates a listener serves (chosen by SNI), its protocol
//! versions and ALPN (`h2`, `http/1.1`), client certificates (mTLS), and the PROXY
//! protocol from a trusted load balancer in front of it.
//!
//! Pingora's TLS listener does the handshake before the application sees the
//! connection, with its own fixed 60 s bound, ahead of any connection cap, and drops a
//! client that spoke plain HTTP without a word. So the listeners stay plain TCP and the
//! edge ([`crate::edge`]) opens each connection through [`front`]: the connection cap
//! first, then a PROXY header from a trusted balancer, then the handshake (Pingora's own
//! `Acceptor` and `TlsStream`, so sessions carry the TLS digest as usual) within the
//! header deadline; a plain HTTP request is answered in the clear with a 400.
//!
//! Rotation: the rustls `ServerConfig` is part of the validated configuration, and every
//! handshake takes the running configuration's. A reload (`SIGHUP`, `POST
//! /admin/reload`) that read new certificate files serves them from the next handshake
//! on; connections already open keep the session they have. A reload whose files do not
//! load keeps the running configuration, certificates included.

mod certs;
pub mod front;
mod prefixed;
pub mod proxy_protocol;

pub use certs::{upstream_roots, CertInfo};

use rustls::server::WebPkiClientVerifier;
use rustls::version::{TLS12, TLS13};
use rustls::ServerConfig;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// ALPN identifiers (RFC 7301 registry).
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// A listener's TLS: `tls` (the client listener) or `admin.tls`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// Certificate chains with their keys (PEM files); the first is served to clients
    /// that send no server name (SNI) or one no certificate has.
    pub certificates: Vec<RawCertificate>,
    /// Offer HTTP/2 by ALPN beside HTTP/1.1 (client listener; default true).
    pub http2: Option<bool>,
    /// `"1.2"` (the default: TLS 1.2 and 1.3) or `"1.3"`.
    pub min_version: Option<String>,
    /// PEM file of the CAs whose client certificates are required (mTLS); none asked
    /// for when absent.
    pub client_ca: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertificate {
    /// The certificate chain, leaf first.
    pub cert: String,
    pub key: String,
}

/// A TLS setting that does not hold: the configuration path of the field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    pub field: String,
    pub message: String,
}

fn fail(field: impl Into<String>, message: impl Into<String>) -> TlsError {
    TlsError {
        field: field.into(),
        message: message.into(),
    }
}

/// A listener's TLS, validated: its certificate files were read and checked.
#[derive(Clone)]
pub struct TlsConfig {
    /// What every handshake on the listener runs with.
    pub server: Arc<ServerConfig>,
    /// In the configured order; the first is the default.
    pub certificates: Vec<CertInfo>,
    pub http2: bool,
    pub tls13_only: bool,
    pub client_ca: Option<PathBuf>,
}

impl TlsConfig {
    /// Validates `raw` (at the configuration path `at`, e.g. `tls` or `admin.tls`);
    /// relative file names are taken from `base`. `admin`: the admin listener, which
    /// speaks HTTP/1.1 only.
    pub fn from_raw(
        raw: RawTls,
        at: &str,
        base: &Path,
        admin: bool,
    ) -> Result<TlsConfig, TlsError> {
        let now = chrono::Utc::now().timestamp();
        if raw.certificates.is_empty() {
            return Err(fail(
                format!("{at}.certificates"),
                "must name at least one certificate (`cert` and `key` files)",
            ));
        }
        let file = |name: &str| {
            let p = Path::new(name);
            if p.is_relative() {
                base.join(p)
            } else {
                p.to_path_buf()
            }
        };
        let mut loaded = Vec::new();
        for (i, c) in raw.certificates.iter().enumerate() {
            let l = certs::load(&file(&c.cert), &file(&c.key), now)
                .map_err(|e| fail(format!("{at}.certificates[{i}].{}", e.field), e.message))?;
            loaded.push(l);
        }
        let tls13_only = match raw.min_version.as_deref() {
            None | Some("1.2") => false,
            Some("1.3") => true,
            Some(_) => {
                return Err(fail(
                    format!("{at}.min_version"),
                    "must be \"1.2\" or \"1.3\" (older versions are not offered)",
                ))
            }
        };
        let http2 = match raw.http2 {
            Some(true) if admin => {
                return Err(fail(
                    format!("{at}.http2"),
                    "the admin listener speaks HTTP/1.1 only",
                ))
            }
            Some(on) => on,
            None => !admin,
        };
        let versions: &[&'static rustls::SupportedProtocolVersion] = if tls13_only {
            &[&TLS13]
        } else {
            &[&TLS12, &TLS13]
        };
        let provider = certs::provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| fail(format!("{at}.min_version"), e.to_string()))?;
        let client_ca = raw.client_ca.as_deref().map(file);
        let builder = match &client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let roots = certs::client_roots(path)
                    .map_err(|e| fail(format!("{at}.client_ca"), e.message))?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| fail(format!("{at}.client_ca"), e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let Some(resolver) = certs::BySni::new(&loaded) else {
            return Err(fail(
                format!("{at}.certificates"),
                "must name at least one certificate",
            ));
        };
        let mut server = builder.with_cert_resolver(Arc::new(resolver));
        server.alpn_protocols = if http2 {
            vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()]
        } else {
            vec![ALPN_HTTP11.to_vec()]
        };
        Ok(TlsConfig {
            server: Arc::new(server),
            certificates: loaded.into_iter().map(|l| l.info).collect(),
            http2,
            tls13_only,
            client_ca,
        })
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("certificates", &self.certificates)
            .field("http2", &self.http2)
            .field("tls13_only", &self.tls13_only)
            .field("client_ca", &self.client_ca)
            .finish()
    }
}

/// Two configurations are the same when they serve the same files with the same
/// certificates and options (the built `ServerConfig` is not compared).
impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        self.certificates == other.certificates
            && self.http2 == other.http2
            && self.tls13_only == other.tls13_only
            && self.client_ca == other.client_ca
    }
}

impl Eq for TlsConfig {}
