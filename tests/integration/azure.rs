//! Azure OpenAI channels against the mock resource of `tests/support/azure.rs`: the four
//! client protocols through the official SDKs, both URL styles, media, images in, a
//! reasoning deployment, errors and a stream cut mid-way, the content filter's two
//! refusals, billing and the cap (authentication: `azure_auth.rs`).

use crate::azure_mock::{self as azure, AzureMock, Options};
use crate::gateway::{StoreKind, TestGateway};
use crate::protocols::{self, Client, CLIENTS};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

pub const KEY_1: &str = "azure-resource-key-1";
pub const KEY_2: &str = "azure-resource-key-2";
/// gpt-4o's first-party prices (per million tokens).
pub const PRICE: &str = "  gpt-4o: { input: 2.5, cached_input: 1.25, output: 10 }\n";
/// The mock's usage priced as gpt-4o on OpenAI: 200 plain input at 2.5, 1,000 cached at
/// 1.25, 50 output at 10 (micro-USD).
const COST: i64 = 500 + 1_250 + 500;

pub async fn mock(lifetime: Duration) -> AzureMock {
    azure::start(Options {
        keys: vec![KEY_1.into(), KEY_2.into()],
        deployments: vec![
            "gpt4o-prod".into(),
            "embed-small".into(),
            "dalle3".into(),
            "tts".into(),
            "whisper".into(),
            "o4-mini-prod".into(),
        ],
        token_lifetime: lifetime,
    })
    .await
}

/// Two channels on the mock: `gpt-4o` by deployment URL with the resource's keys, and
/// `gpt-4o-v1` on the v1 API with the Responses API served natively.
fn config(base: &str) -> String {
    format!(
        "channels:\n\
         \x20 - name: az\n\
         \x20   protocol: azure\n\
         \x20   base_url: \"{base}\"\n\
         \x20   api_version: \"2024-10-21\"\n\
         \x20   api_keys: [{KEY_1}, {KEY_2}]\n\
         \x20   models: [gpt-4o, o4-mini, text-embedding-3-small, dall-e-3, tts-1, whisper-1, rerank-v1, missing]\n\
         \x20   model_map: {{ gpt-4o: gpt4o-prod, o4-mini: o4-mini-prod, text-embedding-3-small: embed-small, dall-e-3: dalle3, tts-1: tts, whisper-1: whisper, missing: no-such-deployment }}\n\
         \x20 - name: az-v1\n\
         \x20   protocol: azure\n\
         \x20   base_url: \"{base}\"\n\
         \x20   api_version: v1\n\
         \x20   api_key: {KEY_1}\n\
         \x20   responses_api: true\n\
         \x20   models: [gpt-4o-v1, o4-mini-v1]\n\
         \x20   model_map: {{ gpt-4o-v1: gpt4o-prod, o4-mini-v1: o4-mini-prod }}\n\
         {}prices:\n{PRICE}\
         \x20 gpt-4o-v1: {{ input: 2.5, cached_input: 1.25, output: 10 }}\n\
         \x20 o4-mini: {{ input: 1.1, cached_input: 0.275, output: 4.4 }}\n\
         \x20 o4-mini-v1: {{ input: 1.1, cached_input: 0.275, output: 4.4 }}\n\
         \x20 missing: {{ input: 1, output: 1 }}\n\
         \x20 rerank-v1: {{ input: 2 }}\n\
         \x20 text-embedding-3-small: {{ input: 100 }}\n\
         \x20 dall-e-3: {{ per_image: {{ \"1024x1024\": 0.04 }} }}\n\
         \x20 tts-1: {{ per_million_chars: 15 }}\n\
         \x20 whisper-1: {{ per_minute: 0.006 }}\n",
        crate::media::FAMILIES
    )
}

async fn setup() -> (AzureMock, TestGateway, String, String) {
    let up = mock(Duration::from_secs(3600)).await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    (up, gw, key, id)
}

/// A request of `client` for `model` whose prompt is `text`.
pub fn ask(
    gw: &TestGateway,
    client: Client,
    model: &str,
    stream: bool,
    key: &str,
    text: &str,
) -> reqwest::RequestBuilder {
    let (path, body) = match client {
        Client::Chat => (
            "/v1/chat/completions".to_string(),
            json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]}),
        ),
        Client::Messages => (
            "/v1/messages".to_string(),
            json!({"model": model, "stream": stream, "max_tokens": 200,
                   "messages": [{"role": "user", "content": text}]}),
        ),
        Client::Gemini => (
            if stream {
                format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
            } else {
                format!("/v1beta/models/{model}:generateContent")
            },
            json!({"contents": [{"role": "user", "parts": [{"text": text}]}]}),
        ),
        Client::Responses => (
            "/v1/responses".to_string(),
            json!({"model": model, "stream": stream, "input": text}),
        ),
    };
    let r = gw.http.post(gw.url(&path)).json(&body);
    match client {
        Client::Messages => r
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01"),
        Client::Gemini => r.header("x-goog-api-key", key),
        _ => r.bearer_auth(key),
    }
}

/// The official SDKs, one Python run: text, tools, images and cache tokens of the four
/// client protocols, streamed and not, reasoning (chat's effort, the Responses API's
/// summary), a vendor error, a throttled answer, the content filter's refusals and a
/// stream Azure cuts, each in the client's own terms.
const SDK_SCRIPT: &str = include_str!("azure_sdk.py");
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_reach_azure_through_every_client_protocol() {
    if std::env::var("MG_SKIP_SDK_TESTS").is_ok() {
        eprintln!("MG_SKIP_SDK_TESTS set: SDK tests not run");
        return;
    }
    let (up, gw, key, _) = setup().await;
    let python = std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = tokio::process::Command::new(python)
        .args(["-c", SDK_SCRIPT])
        .env("GATEWAY_BASE_URL", &gw.base)
        .env("GATEWAY_KEY", &key)
        .output()
        .await
        .expect("python runs (MG_PYTHON: a venv with the SDKs)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "SDK run failed:\n{text}");
    // Both URL styles were used, with the resource's keys in turn and no other credential.
    let reqs = up.up.requests();
    let paths: std::collections::BTreeSet<_> = reqs.iter().map(|r| r.path.clone()).collect();
    assert!(
        paths.contains("/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"),
        "{paths:?}"
    );
    assert!(paths.contains("/openai/v1/chat/completions"), "{paths:?}");
    assert!(paths.contains("/openai/v1/responses"), "{paths:?}");
    let keys: std::collections::BTreeSet<_> =
        reqs.iter().filter_map(|r| r.header("api-key")).collect();
    assert_eq!(keys, [KEY_1, KEY_2].into_iter().collect());
    assert!(reqs.iter().all(|r| r.header("authorization").is_none()));
    assert_eq!(up.state.unauthorized.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_urls_and_the_v1_api_carry_what_azure_expects() {
    let (up, gw, key, _) = setup().await;
    let r = ask(&gw, Client::Chat, "gpt-4o", false, &key, "hi")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let last = up.up.last();
    assert_eq!(
        last.path,
        "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
    );
    assert!([KEY_1, KEY_2].contains(&last.header("api-key").unwrap()));
    let r = ask(&gw, Client::Chat, "gpt-4o-v1", false, &key, "hi")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let last = up.up.last();
    assert_eq!(last.path, "/openai/v1/chat/completions");
    assert_eq!(
        last.json()["model"],
        "gpt4o-prod",
        "v1: the deployment in the body"
    );
    assert_eq!(last.header("api-key"), Some(KEY_1));
    // A model mapped to a deployment the resource lacks: Azure's 404, sanitized.
    let (s, _, body) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &crate::gateway::chat("missing", false),
        )
        .await;
    assert_eq!(s, 404, "{body}");
    let e = crate::gateway::error_of(&body);
    assert_eq!(e["type"], "upstream_error");
    assert!(!body.contains("DeploymentNotFound"), "{body}");
    // An endpoint Azure does not serve is refused cleanly, before anything is sent.
    let before = up.up.requests().len();
    let (s, _, body) = gw
        .post(
            "/v1/rerank",
            &key,
            &json!({"model": "rerank-v1", "query": "q", "documents": ["a"]}),
        )
        .await;
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("not served by Azure OpenAI"), "{body}");
    assert_eq!(up.up.requests().len(), before);
    // The refusal is not the channel's failure.
    let (_, channels) = gw.admin_get("/admin/channels").await;
    let az = channels["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "az")
        .unwrap();
    assert_eq!(az["state"], "closed", "{az}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_images_and_audio_go_to_their_deployments() {
    let (up, gw, key, _) = setup().await;
    let v = "?api-version=2024-10-21";
    let (s, _, body) = gw
        .post(
            "/v1/embeddings",
            &key,
            &json!({"model": "text-embedding-3-small", "input": "hello"}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["data"][0]["embedding"][0],
        0.25
    );
    assert_eq!(
        up.up.last().path,
        format!("/openai/deployments/embed-small/embeddings{v}")
    );
    let (s, _, body) = gw
        .post(
            "/v1/images/generations",
            &key,
            &json!({"model": "dall-e-3", "prompt": "a cat", "size": "1024x1024"}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        up.up.last().path,
        format!("/openai/deployments/dalle3/images/generations{v}")
    );
    let r = gw
        .http
        .post(gw.url("/v1/audio/speech"))
        .bearer_auth(&key)
        .json(&json!({"model": "tts-1", "input": "hello", "voice": "alloy"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(&r.bytes().await.unwrap()[..3], b"ID3");
    assert_eq!(
        up.up.last().path,
        format!("/openai/deployments/tts/audio/speech{v}")
    );
    let boundary = "azure-boundary";
    let mut form = Vec::new();
    form.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
        )
        .as_bytes(),
    );
    form.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n").as_bytes(),
    );
    form.extend_from_slice(&[7u8; 16_000]);
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = gw
        .http
        .post(gw.url("/v1/audio/transcriptions"))
        .bearer_auth(&key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("hello from the recording"), "{body}");
    assert_eq!(
        up.up.last().path,
        format!("/openai/deployments/whisper/audio/transcriptions{v}")
    );
}

/// Whether `body` (whole or streamed) is the client protocol's own refusal.
fn refused(client: Client, stream: bool, body: &str) -> bool {
    let last_json = |pred: &dyn Fn(&Value) -> bool| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .any(|v| pred(&v))
    };
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        return match client {
            Client::Chat => v["choices"][0]["finish_reason"] == "content_filter",
            Client::Messages => v["stop_reason"] == "refusal",
            Client::Gemini => v["candidates"][0]["finishReason"] == "SAFETY",
            Client::Responses => {
                v["status"] == "incomplete" && v["incomplete_details"]["reason"] == "content_filter"
            }
        };
    }
    match client {
        Client::Chat => last_json(&|v| v["choices"][0]["finish_reason"] == "content_filter"),
        Client::Messages => last_json(&|v| v["delta"]["stop_reason"] == "refusal"),
        Client::Gemini => last_json(&|v| v["candidates"][0]["finishReason"] == "SAFETY"),
        Client::Responses => last_json(&|v| {
            v["type"] == "response.incomplete"
                && v["response"]["incomplete_details"]["reason"] == "content_filter"
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_content_filter_reaches_each_client_as_its_own_refusal() {
    let (_up, gw, key, id) = setup().await;
    for client in CLIENTS {
        for stream in [false, true] {
            // The prompt refused (Azure's 400): chat keeps OpenAI's 400 `content_filter`.
            let r = ask(&gw, client, "gpt-4o", stream, &key, "FILTER_PROMPT")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap();
            if client == Client::Chat {
                assert_eq!(status, 400, "{body}");
                let e = crate::gateway::error_of(&body);
                assert_eq!(
                    (e["code"].as_str(), e["param"].as_str()),
                    (Some("content_filter"), Some("prompt"))
                );
                assert!(!body.contains("ResponsibleAIPolicyViolation"), "{body}");
            } else {
                assert_eq!(status, 200, "{client:?} {stream}: {body}");
                assert!(
                    refused(client, stream, &body),
                    "{client:?} {stream}: {body}"
                );
            }
            // The completion cut by the filter (`finish_reason: content_filter`).
            let r = ask(&gw, client, "gpt-4o", stream, &key, "FILTER_OUTPUT")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let body = r.text().await.unwrap();
            assert!(
                refused(client, stream, &body),
                "{client:?} {stream} cut: {body}"
            );
            if stream {
                assert!(!body.contains("(request id: "), "no error event: {body}");
            }
        }
    }
    // Refused prompts cost nothing; the eight cut completions are billed their usage.
    assert_eq!(gw.used_micros(&id).await, 8 * COST);
    let (_, channels) = gw.admin_get("/admin/channels").await;
    let az = channels["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "az")
        .unwrap();
    assert_eq!(az["state"], "closed", "refusals are not failures: {az}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_priced_like_the_same_model_on_openai() {
    let (_up, gw, key, id) = setup().await;
    let mut spent = 0;
    for client in CLIENTS {
        for stream in [false, true] {
            for model in ["gpt-4o", "gpt-4o-v1"] {
                let r = protocols::request(&gw, client, model, stream, &key)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{client:?} {model} {stream}");
                let _ = r.bytes().await.unwrap();
                spent += COST;
                assert_eq!(
                    gw.used_micros(&id).await,
                    spent,
                    "{client:?} {model} {stream}"
                );
            }
        }
    }
    let (s, log) = gw.get("/api/log/token?limit=1", &key).await;
    assert_eq!(s, 200);
    let rec = &log["data"][0];
    assert_eq!(rec["channel"], "az-v1", "{rec}");
    assert!(!rec["estimated"].as_bool().unwrap_or(false), "{rec}");
}

/// One reasoning request of `client`, asked in its own terms (chat `reasoning_effort`,
/// messages `thinking`, generate-content `thinkingConfig`, responses `reasoning`).
fn reasoning_request(
    gw: &TestGateway,
    client: Client,
    model: &str,
    stream: bool,
    key: &str,
) -> reqwest::RequestBuilder {
    let mut body = match client {
        Client::Chat => json!({"model": model, "stream": stream, "reasoning_effort": "low",
            "max_completion_tokens": 4000, "messages": [{"role": "user", "content": "hi"}]}),
        Client::Messages => json!({"model": model, "stream": stream, "max_tokens": 4000,
            "thinking": {"type": "enabled", "budget_tokens": 2000},
            "messages": [{"role": "user", "content": "hi"}]}),
        Client::Gemini => json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"maxOutputTokens": 4000, "thinkingConfig": {"thinkingBudget": 2000}}}),
        Client::Responses => json!({"model": model, "stream": stream, "input": "hi",
            "max_output_tokens": 4000, "reasoning": {"effort": "low", "summary": "auto"}}),
    };
    if client == Client::Chat && stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    ask(gw, client, model, stream, key, "hi").json(&body)
}

/// The reasoning tokens the client's answer reports, where its protocol has a place for
/// them (messages counts them in `output_tokens`).
fn reasoning_reported(client: Client, stream: bool, body: &str) -> Option<u64> {
    let whole: Vec<Value> = if stream {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        vec![serde_json::from_str(body).unwrap()]
    };
    whole.iter().rev().find_map(|v| match client {
        Client::Chat => v["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64(),
        Client::Messages => v["usage"]["output_tokens"]
            .as_u64()
            .or(v["message"]["usage"]["output_tokens"].as_u64())
            .filter(|n| *n > 1),
        Client::Gemini => v["usageMetadata"]["thoughtsTokenCount"].as_u64(),
        Client::Responses => v["usage"]["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .or(v["response"]["usage"]["output_tokens_details"]["reasoning_tokens"].as_u64()),
    })
}

/// A reasoning deployment (o4-mini) from every client protocol, streamed and not, on
/// both URL styles: each client's reasoning ask reaches Azure as `reasoning_effort` (or
/// the Responses API's `reasoning`) with `max_completion_tokens`, never the `max_tokens`
/// reasoning models refuse; the hidden reasoning tokens come back where the client's
/// protocol reports them and are billed as output at o4-mini's first-party price:
/// 200 × 1.1 + 1,000 × 0.275 + 114 × 4.4 = 220 + 275 + 501.6 µUSD, 997 rounded up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_deployment_gets_each_clients_reasoning_ask_and_bills_its_tokens() {
    let (up, gw, key, id) = setup().await;
    let mut spent = 0;
    for model in ["o4-mini", "o4-mini-v1"] {
        for client in CLIENTS {
            for stream in [false, true] {
                let what = format!("{model} {client:?} stream {stream}");
                let r = reasoning_request(&gw, client, model, stream, &key)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let body = r.text().await.unwrap();
                assert_eq!(status, 200, "{what}: {body}");
                let sent = up.up.last().json();
                let native = model == "o4-mini-v1" && client == Client::Responses;
                if native {
                    assert_eq!(sent["reasoning"]["effort"], "low", "{what}: {sent}");
                    assert_eq!(sent["max_output_tokens"], 4000, "{what}: {sent}");
                } else {
                    assert!(sent["reasoning_effort"].is_string(), "{what}: {sent}");
                    assert!(sent["max_completion_tokens"].is_u64(), "{what}: {sent}");
                }
                assert!(sent.get("max_tokens").is_none(), "{what}: {sent}");
                let expected = match client {
                    Client::Messages => azure::COMPLETION_TOKENS + azure::REASONING_TOKENS,
                    _ => azure::REASONING_TOKENS,
                };
                assert_eq!(
                    reasoning_reported(client, stream, &body),
                    Some(expected),
                    "{what}: {body}"
                );
                if native {
                    assert!(body.contains(azure::REASONING_SUMMARY), "{what}: {body}");
                }
                spent += 997;
                assert_eq!(gw.used_micros(&id).await, spent, "{what}");
            }
        }
    }
}

/// A stream Azure cuts after its first text (an `error` data event on chat completions,
/// the Responses API's `error` event) ends every client's stream with its protocol's
/// error event after the text already sent, on both URL styles, without Azure's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_azure_cuts_ends_each_clients_stream_with_its_error() {
    let (_up, gw, key, _) = setup().await;
    for model in ["gpt-4o", "gpt-4o-v1"] {
        cut_streams_end_with_each_clients_error(
            &gw,
            &key,
            (model, "STREAM_ERROR"),
            "Hello from Azure",
            &["Sorry about that"],
        )
        .await;
    }
}

/// `model` asked `prompt`, streamed, from every client protocol: a stream the vendor cuts
/// after some text ends with the client protocol's error event (with the request id),
/// after text that begins `said`, without the vendor's `words`.
pub async fn cut_streams_end_with_each_clients_error(
    gw: &TestGateway,
    key: &str,
    (model, prompt): (&str, &str),
    said: &str,
    words: &[&str],
) {
    use crate::protocols::{ended_with_error, events, stream_text};
    for client in CLIENTS {
        let what = format!("{model} {client:?}");
        let r = ask(gw, client, model, true, key, prompt)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{what}");
        let evs = events(r).await;
        let text = stream_text(client, &evs);
        assert!(
            !text.is_empty() && said.starts_with(&text),
            "{what}: {evs:?}"
        );
        assert!(ended_with_error(client, &evs), "{what}: {evs:?}");
        let shown = format!("{evs:?}");
        for w in words {
            assert!(!shown.contains(w), "{what}: {w} shown: {shown}");
        }
    }
}

/// An image Azure cannot read is the client's 400, without Azure's words (images it
/// reads: the SDK run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_azure_cannot_read_is_the_clients_400() {
    let (up, gw, key, _) = setup().await;
    let url = "data:image/tiff;base64,SUkqAA==";
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url}}]}]});
    let (s, _, b) = gw.post("/v1/chat/completions", &key, &body).await;
    assert_eq!(s, 400, "{b}");
    assert!(!b.contains("Invalid image data"), "{b}");
    let sent = up.up.last().json();
    assert_eq!(sent["messages"][0]["content"][1]["image_url"]["url"], url);
}

/// A vendor's refusal (`vendor_error`'s prompt) and its throttling (`throttle`'s) reach
/// every client protocol, streamed and not, as that client's 400 and 429 with the
/// request id, without the vendor's `words`.
pub async fn errors_reach_every_client(
    gw: &TestGateway,
    key: &str,
    model: &str,
    (vendor_error, throttle): (&str, &str),
    words: &[&str],
) {
    for client in CLIENTS {
        for stream in [false, true] {
            for (prompt, status) in [(vendor_error, 400), (throttle, 429)] {
                let what = format!("{model} {client:?} stream {stream} {prompt}");
                let r = ask(gw, client, model, stream, key, prompt)
                    .send()
                    .await
                    .unwrap();
                let got = r.status().as_u16();
                let body = r.text().await.unwrap();
                assert_eq!(got, status, "{what}: {body}");
                assert!(body.contains("(request id: "), "{what}: {body}");
                for w in words {
                    assert!(!body.contains(w), "{what}: {w} shown: {body}");
                }
                // A 429 counts toward the channel's circuit (consecutive failures): one
                // answered request between them keeps it closed, as traffic would.
                let r = ask(gw, client, model, false, key, "hi")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{what}: the channel still serves");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_errors_and_throttling_reach_every_client_streamed_and_not() {
    let (_up, gw, key, _) = setup().await;
    for model in ["gpt-4o", "gpt-4o-v1"] {
        errors_reach_every_client(
            &gw,
            &key,
            model,
            ("VENDOR_ERROR", "THROTTLE"),
            &["internal-host", "token rate limit", "S0 pricing tier"],
        )
        .await;
    }
}

/// The cap tests' greedy model behind an Azure deployment (the same chat completions
/// API, at the deployment's URL): the burst of `bedrock::the_cap_holds_against` cannot
/// take the key past its cap, and every request went to the deployment with the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_against_the_greedy_model_on_azure() {
    use crate::greedy_upstream::{Behaviour, GreedyUpstream};
    let up = GreedyUpstream::start(Behaviour::default()).await;
    let channel = format!(
        "  - {{ name: greedy, protocol: azure, base_url: \"{}\", api_version: \"2024-10-21\", api_key: {KEY_1}, models: [m], model_map: {{ m: greedy-prod }} }}\n",
        up.base_url()
    );
    crate::bedrock::the_cap_holds_against(&up, &channel, &["m"]).await;
    for r in up.mock.requests() {
        assert_eq!(
            r.path,
            "/openai/deployments/greedy-prod/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(r.header("api-key"), Some(KEY_1));
    }
}
