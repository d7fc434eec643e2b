//! End-to-end: the official Python SDKs against a real gateway and a mock upstream.
//! The SDK tests live in `tests/e2e/`; this test starts what they talk to and runs them.

use crate::gateway::{StoreKind, TestGateway};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use crate::video_upstream::{VideoUpstream, API_KEY as VIDEO_KEY};
use crate::{media, media_upstream, protocols, providers};
use serde_json::json;
use std::time::Duration;

async fn openai_upstream() -> MockUpstream {
    MockUpstream::start(|r| {
        let b = r.json();
        let model = b["model"].as_str().unwrap_or("m").to_string();
        let text = b["messages"][0]["content"].as_str().unwrap_or("").to_string();
        if text == "please fail" {
            return Reply::json(400, json!({"error": {"message": "bad things at internal-host", "type": "invalid_request_error"}}));
        }
        if b["stream"] == true {
            let events = openai::stream(&model, &["Hello", ", ", "world"], Some(openai::usage(5, 3, 0)));
            return Reply::sse(&events, Duration::from_millis(5), End::Clean);
        }
        Reply::json(200, openai::completion(&model, "Hello, world", openai::usage(5, 3, 0)))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdks() {
    if std::env::var("MG_SKIP_SDK_TESTS").is_ok() {
        eprintln!("MG_SKIP_SDK_TESTS set: SDK tests not run");
        return;
    }
    let up = openai_upstream().await;
    let scripted = providers::start().await;
    let media_up = media_upstream::start().await;
    let video_up = VideoUpstream::start().await;
    // The protocol matrix's channels, plus one for the openai-only tests.
    let cfg = protocols::config(&scripted.base_url()).replacen(
        "channels:\n",
        &format!(
            "channels:\n  - {{ name: sdk, protocol: openai, base_url: \"{}\", models: [gpt-4o-mini] }}\n",
            up.base_url()
        ),
        1,
    )
    .replacen("channels:\n", &format!("channels:\n{}", media::channel(&media_up.base_url())), 1)
        + "  gpt-4o-mini: { input: 0.15, output: 0.60 }\n"
        + media::PRICES
        + "  sora-2: { per_second: 0.01 }\n"
        + media::FAMILIES;
    let cfg = cfg.replacen(
        "channels:\n",
        &format!(
            "channels:\n  - {{ name: sdk-video, protocol: openai, base_url: \"{}\", api_key: {VIDEO_KEY}, models: [sora-2] }}\n",
            video_up.base_url()
        ),
        1,
    ) + "video: { poll_interval_ms: 20, max_poll_interval_ms: 100 }\n";
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw
        .create_key(json!({"quota_usd": 1, "models": ["gpt-4o-mini"]}))
        .await;
    let (key_all, _) = gw.create_key(json!({"quota_usd": 1})).await;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e");
    let python = std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = tokio::process::Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", dir])
        .env("GATEWAY_BASE_URL", &gw.base)
        .env("GATEWAY_KEY", &key)
        .env("GATEWAY_KEY_ALL", &key_all)
        .output()
        .await
        .expect("python3 runs (the test command installs the SDKs)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "SDK tests failed:\n{text}");
}
