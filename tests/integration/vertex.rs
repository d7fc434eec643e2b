//! `vertex` channels against the Vertex AI mock (tests/support/vertex_mock.py), which
//! verifies the service account's JWT with its public key, issues expiring tokens and
//! refuses a request without a live one: the four client protocols through the official
//! SDKs (images, reasoning and cache tokens included), errors and a stream cut mid-way in
//! every client protocol, token renewal, a token endpoint that fails, billing with cache
//! reads and writes, and the cap (against an over-reporting Vertex and the cap tests'
//! greedy model's Vertex face).

use crate::gateway::{StoreKind, TestGateway};
use crate::vertex_mock::{python, Options, VertexMock};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The Claude model's name on Vertex AI (`model_map`), which picks the messages protocol.
const CLAUDE_ON_VERTEX: &str = "claude-sonnet-4-5@20250929";

/// Gemini 2.5 Flash and Claude Sonnet 4.5 at their first-party prices (USD per million
/// tokens): Google's Gemini API pricing and Anthropic's pricing pages.
const PRICES: &str = "prices:
  gemini-2.5-flash: { input: 0.30, cached_input: 0.03, output: 2.50 }
  claude-on-vertex: { input: 3, cached_input: 0.30, cache_write: 3.75, output: 15 }
";

fn config(channels: &str) -> String {
    format!("channels:\n{channels}{PRICES}")
}

fn both(mock: &VertexMock, name: &str, extra: &str) -> String {
    let claude_map = format!(", model_map: {{ claude-on-vertex: \"{CLAUDE_ON_VERTEX}\" }}");
    mock.channel(
        name,
        "gemini-2.5-flash, claude-on-vertex",
        &format!("{claude_map}{extra}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_client_protocols_reach_gemini_and_claude_on_vertex_through_the_sdks() {
    if std::env::var("MG_SKIP_SDK_TESTS").is_ok() {
        eprintln!("MG_SKIP_SDK_TESTS set: SDK tests not run");
        return;
    }
    let mock = VertexMock::start(Options::default()).await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/vertex_clients.py"
    );
    let out = tokio::process::Command::new(python())
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--durations=6",
            script,
        ])
        .env("GATEWAY_BASE_URL", &gw.base)
        .env("GATEWAY_KEY", &key)
        .output()
        .await
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "SDK tests failed:\n{text}");
    let stats = mock.stats().await;
    assert_eq!(
        stats["grants"], 1,
        "one token served every request: {stats}"
    );
    let paths: Vec<&str> = stats["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for method in [
        "/publishers/google/models/gemini-2.5-flash:generateContent",
        "/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        "/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict",
        "/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict",
    ] {
        assert!(
            paths.iter().any(|p| p.ends_with(method)),
            "{method} never called: {paths:?}"
        );
    }
}

async fn ask(gw: &TestGateway, key: &str, model: &str, stream: bool, text: &str) -> (u16, String) {
    let body = json!({"model": model, "stream": stream,
                      "messages": [{"role": "user", "content": text}]});
    let (s, _, b) = gw.post("/v1/chat/completions", key, &body).await;
    (s, b)
}

/// Tokens that live three seconds: requests keep succeeding across several renewals,
/// none is refused upstream for an expired token, and requests that start together share
/// one grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_expires_mid_run_is_renewed_and_requests_keep_succeeding() {
    let mock = VertexMock::start(Options {
        token_lifetime: 3,
        ..Options::default()
    })
    .await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let first: Vec<_> = (0..12)
        .map(|i| {
            let (gw, key) = (&gw, &key);
            async move { ask(gw, key, "gemini-2.5-flash", i % 2 == 0, "hi").await }
        })
        .collect();
    for (s, b) in futures_util::future::join_all(first).await {
        assert_eq!(s, 200, "{b}");
    }
    assert_eq!(mock.stats().await["grants"], 1, "one grant for the burst");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent = 0;
    loop {
        let model = ["gemini-2.5-flash", "claude-on-vertex"][sent % 2];
        let (s, b) = ask(&gw, &key, model, sent % 3 == 0, "hi").await;
        assert_eq!(s, 200, "request {sent}: {b}");
        sent += 1;
        let stats = mock.stats().await;
        if stats["grants"].as_u64().unwrap() >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no renewal: {stats}");
        // Pacing only: the loop ends on the mock's count, not on time.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = mock.stats().await;
    assert_eq!(stats["grants_refused"], 0, "{stats}");
    assert_eq!(stats["refused_expired"], 0, "{stats}");
    assert_eq!(stats["refused_unknown"], 0, "{stats}");
    assert_eq!(stats["refused_missing"], 0, "{stats}");
    // The mock does refuse a token it did not issue, as Google does.
    let r = reqwest::Client::new()
        .post(format!(
            "{}/v1/projects/{}/locations/{}/publishers/google/models/gemini-2.5-flash:generateContent",
            mock.base_url(),
            crate::vertex_mock::PROJECT,
            crate::vertex_mock::LOCATION
        ))
        .bearer_auth("ya29.forged")
        .json(&json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["status"], "UNAUTHENTICATED");
}

/// A token endpoint that fails is the channel's failure: the next channel of the model
/// answers, the circuit opens after its failures (no more grants tried), and
/// `/admin/channels` shows the error and the good channel's expiry, never a secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_token_endpoint_opens_the_circuit_and_the_next_channel_answers() {
    let broken = VertexMock::start(Options {
        token_fail: true,
        ..Options::default()
    })
    .await;
    let good = VertexMock::start(Options::default()).await;
    let channels = both(
        &broken,
        "vx-broken",
        ", priority: 0, circuit: { failures: 2, cooldown_secs: 300 }",
    ) + &both(&good, "vx-good", ", priority: 1");
    let gw = TestGateway::start(&config(&channels), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for i in 0..5 {
        let model = ["gemini-2.5-flash", "claude-on-vertex"][i % 2];
        let (s, b) = ask(&gw, &key, model, i % 2 == 1, "hi").await;
        assert_eq!(s, 200, "{b}");
        let (_, log) = gw.get("/api/log/token?limit=1", &key).await;
        assert_eq!(log["data"][0]["channel"], "vx-good", "{log}");
    }
    assert_eq!(
        broken.stats().await["grants"],
        2,
        "the open circuit stops the tries"
    );
    assert_eq!(broken.stats().await["calls"], 0);
    let (s, channels) = gw.admin_get("/admin/channels").await;
    assert_eq!(s, 200);
    let row = |name: &str| {
        channels["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap()
    };
    let b = row("vx-broken");
    assert_eq!(b["protocol"], "vertex");
    assert_eq!(b["state"], "open", "{b}");
    assert_eq!(b["auth"]["kind"], "service_account");
    assert_eq!(b["auth"]["client_email"], crate::vertex_mock::CLIENT_EMAIL);
    assert_eq!(b["auth"]["valid_until"], Value::Null);
    let error = b["auth"]["last_refresh_error"].as_str().unwrap();
    assert!(error.contains("HTTP 503"), "{error}");
    let g = row("vx-good");
    assert_eq!(g["state"], "closed", "{g}");
    let until = g["auth"]["valid_until"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now + 3500..=now + 3600).contains(&until), "{g}");
    assert_eq!(g["auth"]["last_refresh_error"], Value::Null);
    let shown = channels.to_string();
    for secret in ["PRIVATE KEY", "ya29.", "private_key"] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
}

/// The newest record of the key.
async fn last_record(gw: &TestGateway, key: &str) -> Value {
    let (s, log) = gw.get("/api/log/token?limit=1", key).await;
    assert_eq!(s, 200);
    log["data"][0].clone()
}

/// Usage on Vertex AI is priced like the same model on its first-party API, cache reads
/// and writes at their own rates, whole and streamed. By hand from `PRICES` and the
/// mock's usage (1,000 uncached input tokens, 2,000 cache reads, for Claude 500 cache
/// writes, 5 output tokens):
/// - Gemini 2.5 Flash: 1,000 × 0.30 + 2,000 × 0.03 + 5 × 2.50 = 300 + 60 + 12.5 µUSD,
///   372.5 rounded up to 373;
/// - Claude Sonnet 4.5: 1,000 × 3 + 2,000 × 0.30 + 500 × 3.75 + 5 × 15
///   = 3,000 + 600 + 1,875 + 75 µUSD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vertex_usage_is_priced_like_the_first_party_api_with_cache_reads_and_writes() {
    let mock = VertexMock::start(Options::default()).await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let pico = |usd_per_m: f64| (usd_per_m * 1_000_000.0).round() as u64;
    let mut spent = 0;
    for (model, prompt, micros, rates) in [
        ("gemini-2.5-flash", "[cache] hi", 373, (0.30, 0.03, 2.50)),
        (
            "claude-on-vertex",
            "[cache][cache-write] hi",
            5_550,
            (3.0, 0.30, 15.0),
        ),
    ] {
        for stream in [false, true] {
            let (s, b) = ask(&gw, &key, model, stream, prompt).await;
            assert_eq!(s, 200, "{b}");
            let rec = last_record(&gw, &key).await;
            assert_eq!(rec["channel"], "vx");
            assert_eq!(
                rec["cost_micro_usd"], micros,
                "{model} stream {stream}: {rec}"
            );
            assert_eq!(rec["cost_estimated"], false);
            let lines: std::collections::BTreeMap<String, (u64, u64)> = rec["usage_by_kind"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    let kind = l["kind"].as_str().unwrap().to_string();
                    let units = l["units"].as_u64().unwrap();
                    (kind, (units, l["pico_usd_per_unit"].as_u64().unwrap()))
                })
                .collect();
            assert_eq!(lines["input"], (1000, pico(rates.0)), "{rec}");
            assert_eq!(lines["cached_input"], (2000, pico(rates.1)), "{rec}");
            assert_eq!(lines["output"], (5, pico(rates.2)), "{rec}");
            if model == "claude-on-vertex" {
                assert_eq!(lines["cache_write"], (500, pico(3.75)), "{rec}");
            } else {
                assert!(!lines.contains_key("cache_write"), "{rec}");
            }
            spent += micros;
        }
    }
    assert_eq!(gw.used_micros(&id).await, spent);
}

/// A Vertex AI upstream that reports far more output than it was allowed (a million
/// tokens, 2.5 or 15 USD) cannot take a key past its cap: the charge stays within what
/// was reserved, and the records add up to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_on_a_vertex_channel_that_over_reports_usage() {
    let mock = VertexMock::start(Options {
        over_report: 1_000_000,
        ..Options::default()
    })
    .await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let cap = 50_000;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.05})).await;
    let mut answered = 0;
    for (model, stream) in [
        ("gemini-2.5-flash", false),
        ("gemini-2.5-flash", true),
        ("claude-on-vertex", false),
        ("claude-on-vertex", true),
        ("gemini-2.5-flash", false),
        ("claude-on-vertex", true),
    ] {
        let (s, b) = ask(&gw, &key, model, stream, "hi").await;
        match s {
            200 => answered += 1,
            403 => assert!(b.contains("insufficient_quota"), "{b}"),
            other => panic!("unexpected {other}: {b}"),
        }
    }
    assert!(answered >= 1, "at least the first request is answered");
    let used = gw.used_micros(&id).await;
    assert!(used <= cap, "charged {used} µUSD on a cap of {cap}");
    let (_, log) = gw.get("/api/log/token?limit=100", &key).await;
    let logged: i64 = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cost_micro_usd"].as_i64().unwrap())
        .sum();
    assert_eq!(logged, used, "the records add up to the charge");
}

/// The mock's token endpoint checks the grant's signature: a key file whose key is not
/// the service account's (another pair) gets no token, and the client sees a sanitized
/// upstream error, never the token endpoint's words or the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_signed_with_another_key_is_refused() {
    let mock = VertexMock::start(Options::default()).await;
    let stranger = VertexMock::start(Options::default()).await;
    let mut file: Value =
        serde_json::from_slice(&std::fs::read(&stranger.key_file).unwrap()).unwrap();
    file["token_uri"] = json!(format!("{}/token", mock.base_url()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let channel = format!(
        "  - {{ name: vx, protocol: vertex, base_url: \"{}\", project: {}, location: {}, credentials_file: \"{}\", models: [gemini-2.5-flash] }}\n",
        mock.base_url(),
        crate::vertex_mock::PROJECT,
        crate::vertex_mock::LOCATION,
        path.display()
    );
    let gw = TestGateway::start(&config(&channel), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let (s, b) = ask(&gw, &key, "gemini-2.5-flash", false, "hi").await;
    assert!(s >= 500, "{s}: {b}");
    for leak in ["invalid_grant", "JWT", "token", "127.0.0.1", "other.json"] {
        assert!(!b.contains(leak), "{leak} leaked: {b}");
    }
    let stats = mock.stats().await;
    assert_eq!(
        (stats["grants"].as_u64(), stats["grants_refused"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(stats["calls"], 0);
    assert_eq!(gw.used_micros(&id).await, 0);
}

/// A token the API stops taking (revoked) is refused once; the channel drops it and the
/// next request runs on a new grant instead of failing until the old token would lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_replaced_after_one_refusal() {
    let mock = VertexMock::start(Options::default()).await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let (s, b) = ask(&gw, &key, "claude-on-vertex", false, "hi").await;
    assert_eq!(s, 200, "{b}");
    let r = reqwest::Client::new()
        .post(format!("{}/revoke-all", mock.base_url()))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (s, b) = ask(&gw, &key, "gemini-2.5-flash", false, "hi").await;
    assert!(s >= 500, "the refused request fails: {s} {b}");
    for (model, stream) in [("gemini-2.5-flash", true), ("claude-on-vertex", false)] {
        let (s, b) = ask(&gw, &key, model, stream, "hi").await;
        assert_eq!(s, 200, "{b}");
    }
    let stats = mock.stats().await;
    assert_eq!(stats["grants"], 2, "{stats}");
    assert_eq!(stats["refused_unknown"], 1, "{stats}");
}

/// A stream Vertex AI cuts after its first text (Google's `{"error": ...}` event on the
/// Gemini stream, Anthropic's `event: error` on Claude's) ends each client's stream with
/// that client protocol's own error event, after the text already sent, with the
/// request id and without the vendor's words; the circuit does not count it against
/// the request that follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_fails_midway_ends_each_clients_stream_with_its_error() {
    let mock = VertexMock::start(Options::default()).await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for (model, said) in [
        ("gemini-2.5-flash", "Hello from Vertex Gemini."),
        ("claude-on-vertex", "Hello from Vertex Claude."),
    ] {
        crate::azure::cut_streams_end_with_each_clients_error(
            &gw,
            &key,
            (model, "[stream-error] hi"),
            said,
            &["Overloaded", "Internal error"],
        )
        .await;
    }
    let (s, b) = ask(&gw, &key, "gemini-2.5-flash", true, "hi").await;
    assert_eq!(s, 200, "{b}");
}

/// An image in each client protocol's own form reaches Gemini as `inlineData` and
/// Claude as a base64 image block (the mock decodes it and says what it saw); one Gemini
/// does not read (TIFF) is the client's 400, without Vertex's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_in_reaches_gemini_and_claude_and_a_refused_one_is_the_clients_400() {
    let mock = VertexMock::start(Options::default()).await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let image = |mime: &str| {
        json!({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:{mime};base64,iVBORw0KGgo=")}}]}]})
    };
    let (s, _, b) = gw
        .post("/v1/chat/completions", &key, &image("image/png"))
        .await;
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("I see image/png:8."), "{b}");
    let (s, _, b) = gw
        .post("/v1/chat/completions", &key, &image("image/tiff"))
        .await;
    assert_eq!(s, 400, "{b}");
    assert!(!b.contains("Unsupported MIME type"), "{b}");
}

/// The cap tests' greedy model behind a Vertex AI face, as Gemini and as Claude (tokens
/// from the Vertex mock, which verifies the service account's JWT): the burst of
/// `bedrock::the_cap_holds_against` cannot take the key past its cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_against_the_greedy_model_on_vertex() {
    use crate::greedy_upstream::{Behaviour, Face, GreedyUpstream};
    let tokens = VertexMock::start(Options::default()).await;
    let claude_map = format!(", model_map: {{ claude-greedy: \"{CLAUDE_ON_VERTEX}\" }}");
    for (model, map, publisher) in [
        (
            "gemini-greedy",
            "",
            "/publishers/google/models/gemini-greedy:".to_string(),
        ),
        (
            "claude-greedy",
            claude_map.as_str(),
            format!("/publishers/anthropic/models/{CLAUDE_ON_VERTEX}:"),
        ),
    ] {
        let up = GreedyUpstream::start_as(Face::Vertex, Behaviour::default()).await;
        let channel = format!(
            "  - {{ name: greedy, protocol: vertex, base_url: \"{}\", project: {}, location: {}, credentials_file: \"{}\", models: [{model}]{map} }}\n",
            up.base_url(),
            crate::vertex_mock::PROJECT,
            crate::vertex_mock::LOCATION,
            tokens.key_file.display()
        );
        crate::bedrock::the_cap_holds_against(&up, &channel, &[model]).await;
        let asked = up.asked();
        assert!(
            asked.iter().all(|a| a.path.contains(&publisher)),
            "{asked:?}"
        );
    }
}

/// Vertex AI's `INVALID_ARGUMENT` and `RESOURCE_EXHAUSTED` reach every client protocol,
/// streamed and not, for Gemini and Claude, as the client's 400 and 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vertex_errors_and_throttling_reach_every_client_streamed_and_not() {
    let mock = VertexMock::start(Options::default()).await;
    let gw = TestGateway::start(&config(&both(&mock, "vx", "")), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for model in ["gemini-2.5-flash", "claude-on-vertex"] {
        crate::azure::errors_reach_every_client(
            &gw,
            &key,
            model,
            ("[vendor-error] hi", "[throttle] hi"),
            &["Resource exhausted", "error-code-429", "invalid argument"],
        )
        .await;
    }
}
