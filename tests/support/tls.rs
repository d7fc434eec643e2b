//! A certificate authority made at test time, the certificates it signs written to files,
//! and TLS clients that report what the server presented (serial, ALPN).
#![allow(dead_code)]

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Upper-case hex.
    pub serial: String,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        TestCa { cert, key }
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Writes the CA certificate to `dir/<file>`.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let p = dir.join(file);
        std::fs::write(&p, self.pem()).unwrap();
        p
    }

    /// A server certificate for `names` (DNS names or IP addresses) with `serial`,
    /// written to `dir/<stem>.crt` and `dir/<stem>.key`.
    pub fn server(&self, dir: &Path, stem: &str, names: &[&str], serial: u64) -> Issued {
        self.issue(
            dir,
            stem,
            names,
            serial,
            ExtendedKeyUsagePurpose::ServerAuth,
            false,
        )
    }

    /// A client certificate (mTLS).
    pub fn client(&self, dir: &Path, stem: &str, serial: u64) -> Issued {
        self.issue(
            dir,
            stem,
            &[],
            serial,
            ExtendedKeyUsagePurpose::ClientAuth,
            false,
        )
    }

    /// A server certificate whose validity ended in 2001.
    pub fn expired(&self, dir: &Path, stem: &str, names: &[&str]) -> Issued {
        self.issue(
            dir,
            stem,
            names,
            9,
            ExtendedKeyUsagePurpose::ServerAuth,
            true,
        )
    }

    fn issue(
        &self,
        dir: &Path,
        stem: &str,
        names: &[&str],
        serial: u64,
        usage: ExtendedKeyUsagePurpose,
        expired: bool,
    ) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, stem);
        params.serial_number = Some(SerialNumber::from(serial));
        params.extended_key_usages = vec![usage];
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (c, k) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        Issued {
            cert: c,
            key: k,
            serial: format!("{serial:X}"),
        }
    }
}

/// What a handshake gave the client.
pub struct Handshake {
    pub stream: TlsStream<TcpStream>,
    /// The serial of the certificate the server presented (upper-case hex).
    pub serial: String,
    pub alpn: Option<Vec<u8>>,
}

/// How a test client connects.
#[derive(Default)]
pub struct ClientOptions<'a> {
    /// The name sent by SNI and verified; `None`: no SNI is sent and `verify_as` is
    /// checked instead.
    pub sni: Option<&'a str>,
    pub verify_as: &'a str,
    pub alpn: &'a [&'a str],
    /// A client certificate (mTLS).
    pub identity: Option<&'a Issued>,
    /// Offer TLS 1.2 only.
    pub tls12_only: bool,
    /// Bytes written before the handshake (a PROXY protocol header).
    pub preamble: Option<&'a [u8]>,
}

/// Connects to `addr` trusting `ca_pem`, and completes the handshake.
pub async fn connect(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    o: ClientOptions<'_>,
) -> std::io::Result<Handshake> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let versions: &[&'static rustls::SupportedProtocolVersion] = if o.tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let builder = rustls::ClientConfig::builder_with_protocol_versions(versions)
        .with_root_certificates(roots);
    let mut config = match o.identity {
        Some(id) => {
            let chain = vec![CertificateDer::from_pem_file(&id.cert).unwrap()];
            let key = PrivateKeyDer::from_pem_file(&id.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = o.alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    config.enable_sni = o.sni.is_some();
    let name = ServerName::try_from(o.sni.unwrap_or(o.verify_as).to_string()).unwrap();
    let mut tcp = TcpStream::connect(addr).await?;
    if let Some(p) = o.preamble {
        tokio::io::AsyncWriteExt::write_all(&mut tcp, p).await?;
    }
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let (_, conn) = stream.get_ref();
    let leaf = conn.peer_certificates().unwrap()[0].clone();
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let serial = format!("{:X}", parsed.serial);
    let alpn = conn.alpn_protocol().map(|a| a.to_vec());
    Ok(Handshake {
        stream,
        serial,
        alpn,
    })
}
