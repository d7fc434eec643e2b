//! The official openai SDK and httpx (HTTP/2 offered) over https://, run from Python.

use crate::gateway::{openai_channel, StoreKind, TestGateway};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use crate::tls::{addr_of, tls_section};
use crate::tls_ca::TestCa;
use serde_json::json;
use std::time::Duration;

const SCRIPT: &str = include_str!("tls_sdk.py");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_and_httpx_over_https_with_http2() {
    if std::env::var("MG_SKIP_SDK_TESTS").is_ok() {
        eprintln!("MG_SKIP_SDK_TESTS set: SDK tests not run");
        return;
    }
    let up = MockUpstream::start(|r| {
        let b = r.json();
        let usage = Some(openai::usage(5, 3, 0));
        let slow = b["messages"][0]["content"] == "slow";
        if b["stream"] == true {
            let events = openai::stream("gpt-4o-mini", &["Hello", ", ", "world"], usage);
            let gap = Duration::from_millis(if slow { 300 } else { 5 });
            return Reply::sse(&events, gap, End::Clean);
        }
        Reply::json(
            200,
            openai::completion("gpt-4o-mini", "Hello, world", openai::usage(5, 3, 0)),
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("sdk test CA");
    let cert = ca.server(dir.path(), "gw", &["127.0.0.1", "gw.test"], 0x51);
    let ca_file = ca.write(dir.path(), "ca.pem");
    let cfg = openai_channel(&up.base_url(), &["gpt-4o-mini"]) + &tls_section(&[&cert], "");
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"name": "tls-sdk"})).await;
    let python = std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = tokio::process::Command::new(python)
        .args(["-c", SCRIPT])
        .env("GATEWAY_BASE_URL", format!("https://{}", addr_of(&gw)))
        .env("GATEWAY_KEY", &key)
        .env("GATEWAY_CA", &ca_file)
        .output()
        .await
        .expect("python runs (MG_PYTHON: a venv with the SDKs and httpx[http2])");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "SDK run failed:\n{text}");
    // Two SDK rounds of two chats each, the messages call and the slow stream.
    let chats = up
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .count();
    assert_eq!(chats, 6);
    // Each billed once, at the test prices (1.0 and 2.0 USD per million input and output
    // tokens): 5 × 1 + 3 × 2 = 11 micro-USD a request.
    assert_eq!(gw.used_micros(&id).await, 6 * 11);
}
