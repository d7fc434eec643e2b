//! `bedrock` channels end to end: a real gateway in front of the Bedrock Runtime mock
//! (`tests/support/bedrock_mock.py`, written from AWS's references), which recomputes
//! every request's SigV4 signature with botocore and streams real event-stream frames.
//! The four client protocols through the official SDKs (`tests/support/bedrock_sdk.py`),
//! the errors a client sees, the signature a wrong secret makes, the bill, and the cap
//! (against an over-reporting Bedrock and the cap tests' greedy model's Bedrock face).

use crate::gateway::{error_of, StoreKind, TestGateway};
use crate::greedy_upstream::{Behaviour, Face, GreedyUpstream, BEDROCK_API_KEY};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ACCESS_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const SESSION_TOKEN: &str = "IQoJb3JpZ2luX2VjEXAMPLETOKEN";
const API_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl";
const REGION: &str = "eu-west-3";
/// The Bedrock model id behind the gateway's `claude-bedrock`.
const MODEL_ID: &str = "anthropic.claude-3-7-sonnet-20250219-v1:0";

fn python() -> String {
    std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The mock as a process, on the ephemeral port it prints first.
struct BedrockMock {
    child: Child,
    port: u16,
}

impl BedrockMock {
    fn start(extra: &[&str]) -> BedrockMock {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/bedrock_mock.py");
        let mut child = Command::new(python())
            .arg(script)
            .args([
                "--region",
                REGION,
                "--access-key",
                ACCESS_KEY,
                "--secret-key",
                SECRET_KEY,
            ])
            .args(["--session-token", SESSION_TOKEN, "--api-key", API_KEY])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the Bedrock mock starts (MG_PYTHON names a python with botocore)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the Bedrock mock printed no port: {line:?}")
        });
        BedrockMock { child, port }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What each request the mock got was: `path`, `maxTokens`, `error` (its type).
    async fn seen(&self) -> Vec<Value> {
        let r = reqwest::get(format!("{}/__requests", self.base_url()))
            .await
            .unwrap();
        r.json().await.unwrap()
    }
}

impl Drop for BedrockMock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Anthropic's first-party prices for the model (USD per million tokens): a token
/// served through Bedrock is priced as one served by the vendor itself.
const PRICES: &str =
    "prices:\n  claude-bedrock: { input: 3, cached_input: 0.3, cache_write: 3.75, output: 15 }\n";

/// A gateway with one `bedrock` channel to `mock`; `auth`: the channel's credentials.
fn config(mock: &BedrockMock, auth: &str) -> String {
    format!(
        "channels:\n  - name: bedrock\n    protocol: bedrock\n    base_url: {}\n    region: {REGION}\n{auth}    models: [claude-bedrock]\n    model_map: {{ claude-bedrock: \"{MODEL_ID}\" }}\n{PRICES}",
        mock.base_url()
    )
}

fn sigv4(secret: &str) -> String {
    format!("    access_key: {ACCESS_KEY}\n    secret_key: \"{secret}\"\n    session_token: {SESSION_TOKEN}\n")
}

async fn gateway(mock: &BedrockMock, auth: &str) -> (TestGateway, String, String) {
    let gw = TestGateway::start(&config(mock, auth), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 5})).await;
    (gw, key, id)
}

fn chat(text: &str, stream: bool) -> Value {
    let mut b = json!({"model": "claude-bedrock", "stream": stream,
                       "messages": [{"role": "user", "content": text}]});
    if stream {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

/// The SSE `data:` payloads of a chat stream.
fn chat_events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_client_protocols_through_the_official_sdks() {
    if std::env::var("MG_SKIP_SDK_TESTS").is_ok() {
        eprintln!("MG_SKIP_SDK_TESTS set: SDK tests not run");
        return;
    }
    let mock = BedrockMock::start(&[]);
    let (gw, key, _) = gateway(&mock, &sigv4(SECRET_KEY)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/bedrock_sdk.py");
    let out = tokio::process::Command::new(python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", script])
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_streamed_and_not_with_an_api_key() {
    let mock = BedrockMock::start(&[]);
    let (gw, key, _) = gateway(&mock, &format!("    api_key: {API_KEY}\n")).await;
    let (s, _, body) = gw
        .post("/v1/chat/completions", &key, &chat("hi", false))
        .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("Hello from Bedrock."));
    assert_eq!(v["usage"]["prompt_tokens"], 25);

    let (s, h, body) = gw
        .post("/v1/chat/completions", &key, &chat("hi", true))
        .await;
    assert_eq!(s, 200, "{body}");
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    let events = chat_events(&body);
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(text.starts_with("Hello from Bedrock."), "{body}");
    assert_eq!(events.last().unwrap()["usage"]["completion_tokens"], 12);

    let (s, v) = gw.admin_get("/admin/channels").await;
    assert_eq!(s, 200);
    let shown = v.to_string();
    assert!(shown.contains("api_key"), "{shown}");
    assert!(!shown.contains(API_KEY), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vendor_errors_and_throttling_reach_the_client_sanitized() {
    let mock = BedrockMock::start(&[]);
    let (gw, key, _) = gateway(&mock, &sigv4(SECRET_KEY)).await;
    for stream in [false, true] {
        let (s, _, body) = gw
            .post("/v1/chat/completions", &key, &chat("VENDOR_ERROR", stream))
            .await;
        assert_eq!(s, 400, "{body}");
        assert_eq!(error_of(&body)["type"], "upstream_error");
        assert!(
            !body.contains("temperature"),
            "the vendor's text stays in the log: {body}"
        );
        let (s, _, body) = gw
            .post("/v1/chat/completions", &key, &chat("THROTTLE", stream))
            .await;
        assert_eq!(s, 429, "{body}");
        assert!(!body.contains("Too many requests"), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_with_an_exception_ends_the_clients_stream_with_an_error() {
    let mock = BedrockMock::start(&[]);
    let (gw, key, _) = gateway(&mock, &sigv4(SECRET_KEY)).await;
    // Chat: the text before the exception, then the error chunk, and no [DONE].
    let (s, _, body) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &chat("STREAM_EXCEPTION", true),
        )
        .await;
    assert_eq!(s, 200);
    assert!(body.contains("Hello"), "{body}");
    assert!(body.contains("\"error\""), "{body}");
    assert!(body.contains("mid-stream"), "{body}");
    assert!(!body.contains("[DONE]"), "{body}");
    assert!(!body.contains("received 500 from the model"), "{body}");
    // Messages: `event: error`, no `message_stop`.
    let r = gw
        .http
        .post(gw.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .json(
            &json!({"model": "claude-bedrock", "max_tokens": 100, "stream": true,
                      "messages": [{"role": "user", "content": "STREAM_EXCEPTION"}]}),
        )
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    assert!(body.contains("event: error"), "{body}");
    assert!(!body.contains("message_stop"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_signed_with_a_wrong_secret_is_refused_upstream_and_sanitized() {
    let mock = BedrockMock::start(&[]);
    let wrong = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYWRONGKEY";
    let (gw, key, _) = gateway(&mock, &sigv4(wrong)).await;
    for stream in [false, true] {
        let (s, _, body) = gw
            .post("/v1/chat/completions", &key, &chat("hi", stream))
            .await;
        // The channel's own credentials: not the caller's to fix.
        assert_eq!(s, 500, "{body}");
        assert_eq!(error_of(&body)["type"], "upstream_error");
        assert!(!body.contains("signature"), "{body}");
        assert!(
            !body.contains(wrong) && !body.contains(ACCESS_KEY),
            "{body}"
        );
    }
    // Refused by the mock's own signature check, not lost on the way.
    let seen = mock.seen().await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    for s in &seen {
        assert_eq!(s["error"], "InvalidSignatureException", "{seen:?}");
    }
}

/// The key's newest usage record, once it has `count` of them.
pub async fn records(gw: &TestGateway, key: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, log) = gw.get("/api/log/token?limit=100", key).await;
        assert_eq!(s, 200, "{log}");
        let data = log["data"].as_array().cloned().unwrap_or_default();
        if data.len() >= count {
            return data;
        }
        assert!(
            Instant::now() < deadline,
            "{} records, {count} expected",
            data.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The key's charge is within `cap` and its `answered` records add up to it.
async fn charged_within(gw: &TestGateway, key: &str, id: &str, cap: i64, answered: usize) {
    let recs = records(gw, key, answered).await;
    let logged: i64 = recs
        .iter()
        .map(|r| r["cost_micro_usd"].as_i64().unwrap())
        .sum();
    let used = gw.used_micros(id).await;
    assert!(used <= cap, "charged {used} µUSD on a cap of {cap}");
    assert_eq!(logged, used, "the records add up to the charge");
}

/// Worked out by hand from `PRICES`: 25 input at 3, 1,000 cache reads at 0.3, 200
/// cache writes at 3.75, 12 output at 15 (micro-USD per token = USD per million).
const CACHED_MICROS: i64 = 75 + 300 + 750 + 180;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_priced_like_the_first_party_model_cache_included() {
    let mock = BedrockMock::start(&[]);
    let (gw, key, id) = gateway(&mock, &sigv4(SECRET_KEY)).await;
    let body = |stream: bool| {
        json!({"model": "claude-bedrock", "max_tokens": 100, "stream": stream,
               "system": [{"type": "text", "text": "shared", "cache_control": {"type": "ephemeral"}}],
               "messages": [{"role": "user", "content": "hi"}]})
    };
    for (n, stream) in [(1, false), (2, true)] {
        let r = gw
            .http
            .post(gw.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&body(stream))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.contains("cachePoints=1."), "{text}");
        let rec = &records(&gw, &key, n).await[0];
        assert_eq!(rec["cost_micro_usd"], CACHED_MICROS, "{rec}");
        let kinds: std::collections::BTreeMap<String, u64> = rec["usage_by_kind"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["kind"].as_str().unwrap().to_string(),
                    l["units"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(kinds.get("input"), Some(&25), "{rec}");
        assert_eq!(kinds.get("output"), Some(&12), "{rec}");
        assert!(
            kinds.values().any(|&u| u == 1000) && kinds.values().any(|&u| u == 200),
            "{rec}"
        );
    }
    assert_eq!(gw.used_micros(&id).await, 2 * CACHED_MICROS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_when_bedrock_over_reports() {
    // Every answer claims a million output tokens (15 USD); the key may spend 0.05.
    let mock = BedrockMock::start(&["--over-report", "1000000"]);
    let gw = TestGateway::start(&config(&mock, &sigv4(SECRET_KEY)), StoreKind::Embedded).await;
    let cap = 50_000;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.05})).await;
    let mut answered = 0;
    for stream in [false, true, false, true] {
        let (s, _, body) = gw
            .post("/v1/chat/completions", &key, &chat("hi", stream))
            .await;
        match s {
            200 => answered += 1,
            403 => assert_eq!(error_of(&body)["code"], "insufficient_quota", "{body}"),
            s => panic!("unexpected {s}: {body}"),
        }
    }
    assert!(answered >= 1);
    charged_within(&gw, &key, &id, cap, answered).await;
    // Every request that reached Bedrock named an output limit the key could pay for.
    let seen = mock.seen().await;
    assert_eq!(seen.len(), answered, "{seen:?}");
    for s in &seen {
        let limit = s["maxTokens"].as_i64().expect("maxTokens sent");
        assert!(limit * 15 <= cap, "{seen:?}");
    }
}

/// `check-config` names each bedrock option that is wrong by its path, and reads the
/// credentials from the environment (`${VAR}`).
#[test]
fn check_config_names_the_bedrock_options_and_reads_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let check = |channel: &str| {
        let path = dir.path().join("gateway.yaml");
        let text = format!(
            "listen: 127.0.0.1:0\nstore: {{ embedded: {{ path: {} }} }}\nchannels:\n  - name: bedrock\n    protocol: bedrock\n    base_url: https://bedrock-runtime.us-east-1.amazonaws.com\n    models: [claude-bedrock]\n{channel}{PRICES}",
            dir.path().display()
        );
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_model-gateway"))
            .args(["check-config", "--config"])
            .arg(&path)
            .env("TEST_AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("TEST_AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("TEST_AWS_SESSION_TOKEN", SESSION_TOKEN)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !said.contains(SECRET_KEY) && !said.contains(SESSION_TOKEN),
            "{said}"
        );
        (out.status.success(), said)
    };
    let env = "    access_key: ${TEST_AWS_ACCESS_KEY_ID}\n    secret_key: ${TEST_AWS_SECRET_ACCESS_KEY}\n    session_token: ${TEST_AWS_SESSION_TOKEN}\n";
    let (ok, said) = check(&format!("    region: us-east-1\n{env}"));
    assert!(ok, "{said}");
    for (channel, path) in [
        (env.to_string(), "channels[0].region"),
        (
            "    region: us-east-1\n    access_key: ${TEST_AWS_ACCESS_KEY_ID}\n".to_string(),
            "channels[0].secret_key",
        ),
        (
            "    region: us-east-1\n    session_token: ${TEST_AWS_SESSION_TOKEN}\n    api_key: k\n"
                .to_string(),
            "channels[0].session_token",
        ),
        (
            "    region: us-east-1\n".to_string(),
            "channels[0].access_key",
        ),
    ] {
        let (ok, said) = check(&channel);
        assert!(!ok && said.contains(path), "{path}: {said}");
    }
}

/// The cap tests' greedy model (it writes its own maximum, 50,000 tokens, when a request
/// names no output limit) behind the channel of `cfg`, serving `models`: a burst of
/// every client protocol, streamed and not, none naming a limit where its protocol lets
/// it leave one out, on a key with a $0.05 cap. Input 1 and output 2 µUSD per token:
/// one unbounded answer (100,000 µUSD) would be twice the cap. Afterwards the charge is
/// within the cap, the records add up to it, and every request that reached the model
/// carried an output limit the key could pay for.
pub async fn the_cap_holds_against(up: &GreedyUpstream, channel: &str, models: &[&str]) {
    use crate::protocols::{Client, CLIENTS};
    let cfg = format!("channels:\n{channel}prices:\n");
    let cfg = models.iter().fold(cfg, |c, m| {
        c + &format!("  {m}: {{ input: 1.0, output: 2.0 }}\n")
    });
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let cap = 50_000;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.05})).await;
    let mut sends = Vec::new();
    for model in models {
        for client in CLIENTS {
            for stream in [false, true] {
                let mut req = crate::azure::ask(&gw, client, model, stream, &key, "hi");
                if client == Client::Messages {
                    // Messages requires a limit: the model's own maximum.
                    req = req.json(
                        &json!({"model": model, "stream": stream, "max_tokens": 50_000,
                        "messages": [{"role": "user", "content": "hi"}]}),
                    );
                }
                sends.push(async move {
                    let r = req.send().await.unwrap();
                    let status = r.status().as_u16();
                    (status, r.text().await.unwrap())
                });
            }
        }
    }
    let answers = futures_util::future::join_all(sends).await;
    let mut answered = 0;
    for (status, body) in &answers {
        match status {
            200 => answered += 1,
            // insufficient_quota (messages: a permission_error saying so)
            403 => assert!(body.contains("quota"), "{body}"),
            s => panic!("unexpected {s}: {body}"),
        }
    }
    assert!(answered >= 1, "{answers:?}");
    charged_within(&gw, &key, &id, cap, answered).await;
    let asked = up.asked();
    assert_eq!(asked.len(), answered, "{asked:?}");
    for a in &asked {
        let limit = a
            .limit()
            .unwrap_or_else(|| panic!("no output limit: {a:?}"));
        assert!(limit as i64 * 2 <= cap, "{a:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_against_the_greedy_model_on_bedrock() {
    let up = GreedyUpstream::start_as(Face::Bedrock, Behaviour::default()).await;
    let channel = format!(
        "  - {{ name: greedy, protocol: bedrock, base_url: \"{}\", region: {REGION}, api_key: {BEDROCK_API_KEY}, models: [m], model_map: {{ m: \"{MODEL_ID}\" }} }}\n",
        up.base_url()
    );
    the_cap_holds_against(&up, &channel, &["m"]).await;
}

/// The burst above may spend the cap on unstreamed answers first; a stream alone on a
/// fresh capped key reaches the greedy model's event-stream face and stays in the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_alone_on_a_capped_key_stays_under_the_cap_on_bedrock() {
    use crate::protocols::Client;
    let up = GreedyUpstream::start_as(Face::Bedrock, Behaviour::default()).await;
    let cfg = format!(
        "channels:\n  - {{ name: greedy, protocol: bedrock, base_url: \"{}\", region: {REGION}, api_key: {BEDROCK_API_KEY}, models: [m], model_map: {{ m: \"{MODEL_ID}\" }} }}\nprices:\n  m: {{ input: 1.0, output: 2.0 }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let cap = 50_000;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.05})).await;
    let r = crate::azure::ask(&gw, Client::Chat, "m", true, &key, "hi")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    charged_within(&gw, &key, &id, cap, 1).await;
    let asked = up.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].stream, "{asked:?}");
    let limit = asked[0].limit().expect("an output limit");
    assert!(limit as i64 * 2 <= cap, "{asked:?}");
}

/// Bedrock's ValidationException and ThrottlingException reach every client protocol,
/// streamed and not; a ConverseStream that ends with `modelStreamErrorException` ends
/// every client's stream with its protocol's error event after the text already sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_a_failed_stream_reach_every_client_protocol() {
    let mock = BedrockMock::start(&[]);
    let (gw, key, _) = gateway(&mock, &sigv4(SECRET_KEY)).await;
    crate::azure::errors_reach_every_client(
        &gw,
        &key,
        "claude-bedrock",
        ("VENDOR_ERROR", "THROTTLE"),
        &["temperature", "Too many requests", "ValidationException"],
    )
    .await;
    crate::azure::cut_streams_end_with_each_clients_error(
        &gw,
        &key,
        ("claude-bedrock", "STREAM_EXCEPTION"),
        "Hello from Bedrock.",
        &["received 500", "modelStreamErrorException"],
    )
    .await;
}
