//! Certificate and key files: read, checked against each other and the clock, and served
//! by SNI.

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A certificate file's first certificate, as logged and compared across reloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// DNS names it is served for (its subject alternative names, else its common name);
    /// `*.example.com` serves one label under `example.com`.
    pub names: Vec<String>,
    /// Upper-case hex, as `openssl x509 -serial` prints it.
    pub serial: String,
    /// Seconds since the epoch.
    pub not_after: i64,
}

/// A certificate chain with its key, ready to serve.
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    pub info: CertInfo,
}

/// What went wrong with one file, and which one (`cert` or `key`).
#[derive(Debug)]
pub struct FileError {
    pub field: &'static str,
    pub message: String,
}

fn fail(field: &'static str, message: impl Into<String>) -> FileError {
    FileError {
        field,
        message: message.into(),
    }
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, FileError> {
    std::fs::read(path).map_err(|e| fail(field, format!("cannot read {}: {e}", path.display())))
}

/// Reads the PEM certificates of `path` (a chain, or a CA bundle).
pub fn read_certs(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, FileError> {
    let bytes = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(field, format!("{} is not PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(fail(
            field,
            format!("{} holds no PEM `CERTIFICATE` block", path.display()),
        ));
    }
    Ok(certs)
}

/// Reads and checks one certificate chain and its key: the key must be the
/// certificate's, and the certificate valid at `now` (seconds since the epoch).
pub fn load(cert_file: &Path, key_file: &Path, now: i64) -> Result<Loaded, FileError> {
    let chain = read_certs("cert", cert_file)?;
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| {
        fail(
            "cert",
            format!("{}: not an X.509 certificate: {e}", cert_file.display()),
        )
    })?;
    let validity = leaf.validity();
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    if now > not_after {
        return Err(fail(
            "cert",
            format!(
                "the certificate in {} expired on {}",
                cert_file.display(),
                validity.not_after
            ),
        ));
    }
    if now < not_before {
        return Err(fail(
            "cert",
            format!(
                "the certificate in {} is not valid before {}",
                cert_file.display(),
                validity.not_before
            ),
        ));
    }
    let mut names: Vec<String> = match leaf.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        names.extend(
            leaf.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_ascii_lowercase),
        );
    }
    let serial = leaf.raw_serial();
    let skip = serial
        .iter()
        .take_while(|b| **b == 0)
        .count()
        .min(serial.len().saturating_sub(1));
    let serial = hex::encode_upper(&serial[skip..]);
    let key_bytes = read("key", key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| {
        fail(
            "key",
            format!("{} holds no PEM private key: {e}", key_file.display()),
        )
    })?;
    let provider = provider();
    let signer = provider.key_provider.load_private_key(key).map_err(|e| {
        fail(
            "key",
            format!("{}: not a usable private key: {e}", key_file.display()),
        )
    })?;
    let certified = CertifiedKey::new(chain, signer);
    // `Unknown`: the key cannot tell its public half; the handshake will show a mismatch.
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        certified.keys_match()
    {
        return Err(fail(
            "key",
            format!(
                "the key in {} does not match the certificate in {}",
                key_file.display(),
                cert_file.display()
            ),
        ));
    }
    Ok(Loaded {
        key: Arc::new(certified),
        info: CertInfo {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            names,
            serial,
            not_after,
        },
    })
}

/// The process's rustls provider (ring, as Pingora installs it).
pub fn provider() -> Arc<CryptoProvider> {
    pingora::tls::install_default_crypto_provider();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The CAs whose client certificates a listener accepts.
pub fn client_roots(path: &Path) -> Result<RootCertStore, FileError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs("client_ca", path)? {
        roots.add(cert).map_err(|e| {
            fail(
                "client_ca",
                format!("{}: not a usable CA certificate: {e}", path.display()),
            )
        })?;
    }
    Ok(roots)
}

/// The CA certificates an upstream's certificate is verified against instead of the
/// system roots (a channel's `ca_file`): each one parsed as X.509 and usable as a trust
/// anchor, so the connector, which panics on a certificate it cannot parse, is never
/// handed one.
pub fn upstream_roots(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, FileError> {
    let certs = read_certs(field, path)?;
    let mut roots = RootCertStore::empty();
    for (i, cert) in certs.iter().enumerate() {
        x509_parser::parse_x509_certificate(cert).map_err(|e| {
            fail(
                field,
                format!(
                    "{}: certificate {} is not an X.509 certificate: {e}",
                    path.display(),
                    i + 1
                ),
            )
        })?;
        roots.add(cert.clone()).map_err(|e| {
            fail(
                field,
                format!(
                    "{}: certificate {} is not a usable CA certificate: {e}",
                    path.display(),
                    i + 1
                ),
            )
        })?;
    }
    Ok(certs)
}

/// Chooses the certificate by the name the client asked for (SNI): an exact name, then a
/// wildcard one label up; the first configured certificate for a client that named none,
/// or a name no certificate has.
pub struct BySni {
    default: Arc<CertifiedKey>,
    exact: HashMap<String, Arc<CertifiedKey>>,
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl BySni {
    /// `loaded` is not empty (the configuration requires one certificate).
    pub fn new(loaded: &[Loaded]) -> Option<BySni> {
        let default = loaded.first()?.key.clone();
        let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
        // The first certificate naming a name serves it.
        for l in loaded {
            for name in &l.info.names {
                let name = name.trim_end_matches('.');
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_string()),
                    None => exact.entry(name.to_string()),
                }
                .or_insert_with(|| l.key.clone());
            }
        }
        Some(BySni {
            default,
            exact,
            wildcard,
        })
    }

    fn lookup(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(name) = name else {
            return &self.default;
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.exact
            .get(&name)
            .or_else(|| {
                name.split_once('.')
                    .and_then(|(_, parent)| self.wildcard.get(parent))
            })
            .unwrap_or(&self.default)
    }
}

impl fmt::Debug for BySni {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.exact.keys().collect();
        names.sort();
        f.debug_struct("BySni").field("names", &names).finish()
    }
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.lookup(hello.server_name()).clone())
    }
}
