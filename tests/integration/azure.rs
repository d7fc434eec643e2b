//! Azure OpenAI channels against the mock resource of `tests/support/azure.rs`: the four
//! client protocols through the official SDKs, both URL styles, media, the content
//! filter's two refusals and billing (authentication: `azure_auth.rs`).

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
         \x20   models: [gpt-4o, text-embedding-3-small, dall-e-3, tts-1, whisper-1, rerank-v1, missing]\n\
         \x20   model_map: {{ gpt-4o: gpt4o-prod, text-embedding-3-small: embed-small, dall-e-3: dalle3, tts-1: tts, whisper-1: whisper, missing: no-such-deployment }}\n\
         \x20 - name: az-v1\n\
         \x20   protocol: azure\n\
         \x20   base_url: \"{base}\"\n\
         \x20   api_version: v1\n\
         \x20   api_key: {KEY_1}\n\
         \x20   responses_api: true\n\
         \x20   models: [gpt-4o-v1]\n\
         \x20   model_map: {{ gpt-4o-v1: gpt4o-prod }}\n\
         {}prices:\n{PRICE}\
         \x20 gpt-4o-v1: {{ input: 2.5, cached_input: 1.25, output: 10 }}\n\
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

/// The official SDKs, one Python run: text, tools and cache tokens of the four client
/// protocols, streamed and not, a vendor error, a throttled answer and the content
/// filter's refusals, each in the client's own terms.
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
