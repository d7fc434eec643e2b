//! Certificate rotation without a restart, in the binary as an operator runs it: new
//! files and `SIGHUP`, a stream opened before it finishing whole and billed once, new
//! handshakes on the new certificate; a broken rotation keeping the running one.

use crate::gateway::{metric, ADMIN_TOKEN};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use crate::process::{hand_sockets, wait_json, GatewayProcess};
use crate::tls::read_to_close;
use crate::tls_ca::{connect, ClientOptions, Issued, TestCa};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config(
    dir: &Path,
    listen: SocketAddr,
    admin: SocketAddr,
    upstream: &str,
    cert: &Issued,
) -> String {
    format!(
        "listen: {listen}\nadmin: {{ listen: {admin}, token: \"${{GATEWAY_ADMIN_TOKEN}}\" }}\n\
         store: {{ embedded: {{ path: {store} }} }}\nthreads: 1\nupgrade_sock: {sock}\n\
         tls:\n  certificates:\n    - {{ cert: {cert}, key: {key} }}\n\
         channels:\n  - {{ name: c, protocol: openai, base_url: \"{upstream}\", models: [m] }}\n\
         prices:\n  m: {{ input: 1.0, output: 2.0 }}\n",
        store = dir.join("data").display(),
        sock = dir.join("upgrade.sock").display(),
        cert = cert.cert.display(),
        key = cert.key.display(),
    )
}

async fn serial_now(addr: SocketAddr, ca: &str) -> String {
    let o = ClientOptions {
        sni: Some("gw.test"),
        ..Default::default()
    };
    connect(addr, ca, o).await.unwrap().serial
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_the_certificate_while_an_open_stream_finishes_billed_once() {
    // 40 pieces, 50 ms apart: two seconds, its usage at the very end.
    let up = MockUpstream::start(|_| {
        let pieces = vec!["w"; 40];
        let events = openai::stream("m", &pieces, Some(openai::usage(10, 40, 0)));
        Reply::sse(&events, Duration::from_millis(50), End::Clean)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("rotation CA");
    let ca_pem = ca.pem();
    let v1 = ca.server(dir.path(), "gw", &["gw.test"], 0x1001);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").unwrap();
    let (base, admin_addr) = (listener.local_addr().unwrap(), admin.local_addr().unwrap());
    let path = dir.path().join("gateway.yaml");
    std::fs::write(
        &path,
        config(dir.path(), base, admin_addr, &up.base_url(), &v1),
    )
    .unwrap();
    let env = [("GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN.to_string())];
    let gw = GatewayProcess::start(&path, &env);
    hand_sockets(&dir.path().join("upgrade.sock"), vec![listener, admin]).await;
    let admin_url = format!("http://{admin_addr}");
    wait_json(&format!("{admin_url}/readyz"), |v| v["status"] == "ready").await;
    let http = reqwest::Client::new();
    let admin_json = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = http
            .request(method, format!("{admin_url}{path}"))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move { r.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let k = admin_json(
        reqwest::Method::POST,
        "/admin/keys",
        Some(json!({"quota_usd": 1.0})),
    )
    .await;
    let (key, id) = (k["key"].as_str().unwrap(), k["id"].as_str().unwrap());

    // A stream over TLS, on the first certificate.
    let mut h = connect(
        base,
        &ca_pem,
        ClientOptions {
            sni: Some("gw.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(h.serial, v1.serial);
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]})
            .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw.test\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    h.stream.write_all(request.as_bytes()).await.unwrap();
    let mut started = Vec::new();
    while !String::from_utf8_lossy(&started).contains("\"w\"") {
        let mut buf = [0u8; 1024];
        let n = h.stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream started");
        started.extend_from_slice(&buf[..n]);
    }

    // New files in place, then SIGHUP.
    let v2 = ca.server(dir.path(), "gw", &["gw.test"], 0x2002);
    gw.signal(libc::SIGHUP);
    wait_json(&format!("{admin_url}/readyz"), |v| {
        v["config_generation"] == 2
    })
    .await;
    assert_eq!(
        serial_now(base, &ca_pem).await,
        v2.serial,
        "new handshakes: the new certificate"
    );

    // The stream opened before it ends whole, on its connection.
    let rest = read_to_close(&mut h.stream, Duration::from_secs(30)).await;
    let text = String::from_utf8_lossy(&started).into_owned() + &rest;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(text.matches("\"w\"").count(), 40, "{text}");
    assert!(text.contains("[DONE]"), "{text}");
    // Billed once: 10 input and 40 output tokens at 1 and 2 USD per million.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let k = admin_json(reqwest::Method::GET, &format!("/admin/keys/{id}"), None).await;
        if k["used_usd"].as_f64() == Some(90e-6) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "settled once at 90 micro-USD: {k}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A broken rotation (the key file replaced by another certificate's key) is refused:
    // the running certificate stays, and the reason is told three ways.
    let other = ca.server(dir.path(), "other", &["gw.test"], 0x3003);
    std::fs::copy(&other.key, &v2.key).unwrap();
    let r = http
        .post(format!("{admin_url}/admin/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("tls.certificates[0].key"), "{message}");
    let ready = wait_json(&format!("{admin_url}/readyz"), |v| {
        v["last_reload_error"].is_string()
    })
    .await;
    assert!(
        ready["last_reload_error"]
            .as_str()
            .unwrap()
            .contains("does not match"),
        "{ready}"
    );
    assert_eq!(ready["config_generation"], 2);
    let metrics = http
        .get(format!("{admin_url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(
            &metrics,
            "mg_config_reloads_total",
            &[("result", "invalid")]
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        serial_now(base, &ca_pem).await,
        v2.serial,
        "the running certificate stays"
    );
    assert!(
        gw.log()
            .iter()
            .any(|l| l.contains("reload refused") && l.contains("does not match")),
        "{:#?}",
        gw.log()
    );
}
