//! TLS on the client listener: certificates by SNI with a default, TLS 1.2 and 1.3,
//! ALPN, plain HTTP refused in the clear, `check-config`'s checks of the files.

use crate::gateway::{StoreKind, TestGateway};
use crate::tls_ca::{connect, ClientOptions, Issued, TestCa};
use model_gateway::config::Config;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `tls:` section serving `certs` in order (the first is the default).
pub fn tls_section(certs: &[&Issued], extra: &str) -> String {
    let list: String = certs
        .iter()
        .map(|c| {
            format!(
                "    - {{ cert: \"{}\", key: \"{}\" }}\n",
                c.cert.display(),
                c.key.display()
            )
        })
        .collect();
    format!("tls:\n  certificates:\n{list}{extra}")
}

pub fn addr_of(gw: &TestGateway) -> SocketAddr {
    gw.base.trim_start_matches("http://").parse().unwrap()
}

/// Reads what the server sends until it closes (or `within` passes: then the test
/// fails, the server hung).
pub async fn read_to_close<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server closed the connection instead of hanging");
    String::from_utf8_lossy(&out).into_owned()
}

struct Setup {
    ca: TestCa,
    a: Issued,
    b: Issued,
    gw: TestGateway,
    _dir: tempfile::TempDir,
}

async fn setup(extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("model-gateway test CA");
    let a = ca.server(dir.path(), "a", &["gw.test", "127.0.0.1"], 0xA1);
    let b = ca.server(dir.path(), "b", &["b.test", "*.wild.test"], 0xB2);
    let gw = TestGateway::start(&tls_section(&[&a, &b], extra), StoreKind::Embedded).await;
    Setup {
        ca,
        a,
        b,
        gw,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_chooses_the_certificate_and_a_client_without_sni_gets_the_default() {
    let s = setup("").await;
    let addr = addr_of(&s.gw);
    let ca = s.ca.pem();
    let by = |sni: Option<&'static str>, verify_as: &'static str| {
        let ca = ca.clone();
        async move {
            connect(
                addr,
                &ca,
                ClientOptions {
                    sni,
                    verify_as,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .serial
        }
    };
    assert_eq!(by(Some("b.test"), "").await, s.b.serial);
    assert_eq!(by(Some("x.wild.test"), "").await, s.b.serial);
    assert_eq!(by(Some("gw.test"), "").await, s.a.serial);
    assert_eq!(by(Some("GW.TEST"), "").await, s.a.serial);
    assert_eq!(by(None, "gw.test").await, s.a.serial, "no SNI: the default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_12_and_13_with_alpn_and_http_over_it() {
    let s = setup("").await;
    let addr = addr_of(&s.gw);
    let ca = s.ca.pem();
    for tls12_only in [true, false] {
        for (offer, want) in [
            (&["h2", "http/1.1"][..], "h2"),
            (&["http/1.1"][..], "http/1.1"),
        ] {
            let h = connect(
                addr,
                &ca,
                ClientOptions {
                    sni: Some("gw.test"),
                    alpn: offer,
                    tls12_only,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            assert_eq!(h.alpn.as_deref(), Some(want.as_bytes()), "{offer:?}");
            let version = h.stream.get_ref().1.protocol_version().unwrap();
            let want_version = if tls12_only {
                rustls::ProtocolVersion::TLSv1_2
            } else {
                rustls::ProtocolVersion::TLSv1_3
            };
            assert_eq!(version, want_version);
        }
    }
    // HTTP/1.1 over TLS: the gateway answers (401 without a key), in its envelope.
    let mut h = connect(
        addr,
        &ca,
        ClientOptions {
            sni: Some("gw.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    h.stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut h.stream, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("x-request-id"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_on_the_tls_port_is_refused_in_the_clear_and_silence_is_closed() {
    let s = setup("limits: { header_timeout_secs: 1 }\n").await;
    let addr = addr_of(&s.gw);
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut plain, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("https://"), "{answer}");
    assert!(answer.contains("(request id: "), "{answer}");
    // A connection that never starts its handshake is closed at the header deadline.
    let mut quiet = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_eq!(read_to_close(&mut quiet, Duration::from_secs(10)).await, "");
    // One that starts it and stops half way, too.
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x00, 0x80, 0x01])
        .await
        .unwrap();
    assert_eq!(read_to_close(&mut half, Duration::from_secs(10)).await, "");
}

fn parse_with(dir: &Path, tls: &str) -> Result<Config, model_gateway::config::ConfigError> {
    let text = format!(
        "listen: 127.0.0.1:0\nstore: {{ embedded: {{ path: {} }} }}\n{tls}",
        dir.join("data").display()
    );
    Config::parse(&text, dir)
}

#[test]
fn check_config_reads_and_checks_the_files_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let a = ca.server(dir.path(), "a", &["a.test"], 1);
    let b = ca.server(dir.path(), "b", &["b.test"], 2);
    let old = ca.expired(dir.path(), "old", &["old.test"]);
    let good = parse_with(dir.path(), &tls_section(&[&a, &b], "")).unwrap();
    let tls = good.tls.unwrap();
    assert_eq!(tls.certificates[0].names, ["a.test"]);
    assert_eq!(tls.certificates[1].serial, "02", "as openssl prints it");
    let missing = Issued {
        cert: dir.path().join("nope.crt"),
        ..a.clone()
    };
    let e = parse_with(dir.path(), &tls_section(&[&a, &missing], "")).unwrap_err();
    assert_eq!(e.path, "tls.certificates[1].cert", "{e}");
    assert!(e.message.contains("nope.crt"), "{e}");
    let swapped = Issued {
        key: b.key.clone(),
        ..a.clone()
    };
    let e = parse_with(dir.path(), &tls_section(&[&swapped], "")).unwrap_err();
    assert_eq!(e.path, "tls.certificates[0].key", "{e}");
    assert!(e.message.contains("does not match"), "{e}");
    let e = parse_with(dir.path(), &tls_section(&[&a, &old], "")).unwrap_err();
    assert_eq!(e.path, "tls.certificates[1].cert", "{e}");
    assert!(e.message.contains("expired"), "{e}");
    let not_a_key = Issued {
        key: a.cert.clone(),
        ..a.clone()
    };
    let e = parse_with(dir.path(), &tls_section(&[&not_a_key], "")).unwrap_err();
    assert_eq!(e.path, "tls.certificates[0].key", "{e}");
    let e = parse_with(dir.path(), &tls_section(&[&a], "  min_version: \"1.1\"\n")).unwrap_err();
    assert_eq!(e.path, "tls.min_version", "{e}");
    let e = parse_with(dir.path(), "tls: { certificates: [] }\n").unwrap_err();
    assert_eq!(e.path, "tls.certificates", "{e}");
    // Relative names are read from the configuration's folder.
    let rel = "tls: { certificates: [{ cert: a.crt, key: a.key }] }\n";
    assert!(parse_with(dir.path(), rel).is_ok());
    // The admin listener: HTTP/1.1 only, and its own paths.
    let admin = |tls: &str| {
        format!("admin: {{ listen: 127.0.0.1:0, token: 0123456789abcdef0123, tls: {tls} }}\n")
    };
    let e = parse_with(
        dir.path(),
        &admin("{ certificates: [{ cert: a.crt, key: a.key }], http2: true }"),
    )
    .unwrap_err();
    assert_eq!(e.path, "admin.tls.http2", "{e}");
    let e = parse_with(
        dir.path(),
        &admin("{ certificates: [{ cert: a.crt, key: a.key }], client_ca: none.pem }"),
    )
    .unwrap_err();
    assert_eq!(e.path, "admin.tls.client_ca", "{e}");
    let e = parse_with(dir.path(), "proxy_protocol: { trusted: [10.0.0.0/33] }\n").unwrap_err();
    assert_eq!(e.path, "proxy_protocol.trusted[0]", "{e}");
}

/// The `check-config` command says the same, and fails.
#[test]
fn the_check_config_command_fails_on_an_expired_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let old = ca.expired(dir.path(), "old", &["old.test"]);
    let path = dir.path().join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: 127.0.0.1:0\nstore: {{ embedded: {{ path: {} }} }}\n{}",
            dir.path().join("data").display(),
            tls_section(&[&old], "")
        ),
    )
    .unwrap();
    let (passed, text) = crate::process::check_config(&path, &[]);
    assert!(!passed, "{text}");
    assert!(text.contains("tls.certificates[0].cert"), "{text}");
    assert!(text.contains("expired"), "{text}");
}

/// The deploy files mount the certificate files where the configuration's commented
/// `tls:` section reads them, and that section, uncommented, is what the gateway takes.
#[test]
fn the_deploy_files_mount_the_certificates_where_the_configuration_reads_them() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let read = |f: &str| std::fs::read_to_string(deploy.join(f)).unwrap();
    let config = read("gateway.yaml");
    let section: String = config
        .lines()
        .skip_while(|l| !l.starts_with("# tls:"))
        .take_while(|l| l.starts_with("# "))
        .map(|l| format!("{}\n", &l[2..]))
        .collect();
    let v: serde_yaml::Value = serde_yaml::from_str(&section).unwrap();
    let dir = "/etc/model-gateway/tls";
    let first = &v["tls"]["certificates"][0];
    for file in ["cert", "key"] {
        assert!(first[file].as_str().unwrap().starts_with(dir), "{section}");
    }
    assert!(read("docker-compose.yml").contains(&format!("./tls:{dir}:ro")));
    let k8s = read("k8s/deployment.yaml");
    assert!(k8s.contains(&format!(
        "{{ name: tls, mountPath: {dir}, readOnly: true }}"
    )));
    assert!(k8s.contains("secretName: model-gateway-tls"));
}

/// One HTTP/1.1 exchange over TLS to the gateway, with the key; the status and body.
async fn https_json(
    s: &Setup,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut h = connect(
        addr_of(&s.gw),
        &s.ca.pem(),
        ClientOptions {
            sni: Some("gw.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: gw.test\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    h.stream.write_all(req.as_bytes()).await.unwrap();
    let answer = read_to_close(&mut h.stream, Duration::from_secs(10)).await;
    let status = answer[9..12].parse().unwrap();
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap();
    // A short JSON answer comes with its length; a chunked one in one chunk.
    let json = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        rest.split_once("\r\n")
            .unwrap()
            .1
            .rsplit_once("\r\n0\r\n")
            .unwrap()
            .0
            .trim_end()
    } else {
        rest
    };
    (
        status,
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn video_download_urls_say_https_behind_the_gateways_own_tls() {
    let up = crate::video_upstream::VideoUpstream::start().await;
    let s = setup(&crate::video::config(&up.base_url())).await;
    let (key, _) = s.gw.create_key(serde_json::json!({"quota_usd": 10})).await;
    let body = serde_json::json!({"model": "kling-v1", "prompt": "waves at dusk", "duration": 5});
    let (status, v) = https_json(&s, "POST", "/v1/video/generations", &key, Some(&body)).await;
    assert_eq!(status, 200, "{v}");
    let id = v["task_id"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let rec = loop {
        let (status, rec) = https_json(
            &s,
            "GET",
            &format!("/v1/video/generations/{id}"),
            &key,
            None,
        )
        .await;
        assert_eq!(status, 200, "{rec}");
        if rec["status"] == "completed" {
            break rec;
        }
        assert!(std::time::Instant::now() < deadline, "{rec}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let url = rec["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://gw.test") && url.ends_with(&format!("/v1/videos/{id}/content")),
        "no `X-Forwarded-Proto`, yet the listener is HTTPS: {url}"
    );
}
