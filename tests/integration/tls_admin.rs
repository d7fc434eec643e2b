//! The admin listener behind TLS with client certificates (mTLS) from a configured CA,
//! on top of the admin token.

use crate::gateway::ADMIN_TOKEN;
use crate::tls::read_to_close;
use crate::tls_ca::{connect, ClientOptions, Issued, TestCa};
use model_gateway::config::Config;
use model_gateway::gateway::open_store_waiting;
use model_gateway::server::{spawn, Running};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

struct Admin {
    addr: SocketAddr,
    server_ca: TestCa,
    ops: Issued,
    rogue: Issued,
    _running: Running,
    _dir: tempfile::TempDir,
}

async fn start() -> Admin {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = TestCa::new("server CA");
    let ops_ca = TestCa::new("operators CA");
    let other_ca = TestCa::new("another CA");
    let cert = server_ca.server(dir.path(), "admin", &["admin.test"], 0xAD);
    let ops = ops_ca.client(dir.path(), "ops", 1);
    let rogue = other_ca.client(dir.path(), "rogue", 2);
    let client_ca = ops_ca.write(dir.path(), "ops-ca.pem");
    let text = format!(
        "listen: 127.0.0.1:0\nstore: {{ embedded: {{ path: {} }} }}\n\
         admin:\n  listen: 127.0.0.1:0\n  token: {ADMIN_TOKEN}\n  tls:\n    certificates: [{{ cert: {}, key: {} }}]\n    client_ca: {}\n",
        dir.path().join("data").display(),
        cert.cert.display(),
        cert.key.display(),
        client_ca.display()
    );
    let config = Config::parse(&text, dir.path()).unwrap();
    let store = open_store_waiting(&config.store, true, Duration::from_secs(20))
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = admin.local_addr().unwrap();
    let running = spawn(config, store, listener, Some(admin)).unwrap();
    Admin {
        addr,
        server_ca,
        ops,
        rogue,
        _running: running,
        _dir: dir,
    }
}

/// `GET /admin/keys` over TLS with `identity`, with the token when `token`: the answer's
/// text, or what the connection gave before it closed (nothing, when refused).
async fn ask(a: &Admin, identity: Option<&Issued>, token: bool) -> String {
    let o = ClientOptions {
        sni: Some("admin.test"),
        identity,
        ..Default::default()
    };
    // TLS 1.3: the client's part of the handshake ends before the server has checked the
    // client's certificate, so a refusal may come as the first read's alert.
    let Ok(mut h) = connect(a.addr, &a.server_ca.pem(), o).await else {
        return String::new();
    };
    let auth = if token {
        format!("Authorization: Bearer {ADMIN_TOKEN}\r\n")
    } else {
        String::new()
    };
    let req =
        format!("GET /admin/keys HTTP/1.1\r\nHost: admin.test\r\n{auth}Connection: close\r\n\r\n");
    if h.stream.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    read_to_close(&mut h.stream, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_requires_a_client_certificate_from_its_ca_and_the_token() {
    let a = start().await;
    assert_eq!(
        ask(&a, None, true).await,
        "",
        "no client certificate: refused in the handshake"
    );
    assert_eq!(
        ask(&a, Some(&a.rogue), true).await,
        "",
        "another CA's certificate: refused"
    );
    let no_token = ask(&a, Some(&a.ops), false).await;
    assert!(no_token.starts_with("HTTP/1.1 401"), "{no_token}");
    let served = ask(&a, Some(&a.ops), true).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    // Plain HTTP on it is told to use TLS.
    let mut plain = tokio::net::TcpStream::connect(a.addr).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut plain, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}
