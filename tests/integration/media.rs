//! Images, audio, embeddings, rerank and moderation: validated, relayed and billed
//! (issue: the non-chat endpoints; spec 4.6, 4.7, 4.19–4.22, 8).

use crate::gateway::{error_of, StoreKind, TestGateway};
use crate::media_upstream::{self, AUDIO};
use futures_util::StreamExt;
use serde_json::{json, Value};

// The token-billed endpoints' answers that report no tokens (its own file: this one is long).
#[path = "media_estimates.rs"]
mod estimates;

pub const FAMILIES: &str =
    "image_families: { smallest: [dall-e-2], middle: [dall-e-3], newest: [gpt-image-1] }\n";

/// The media channel, as an entry of `channels:`.
pub fn channel(base: &str) -> String {
    format!(
        "  - name: media\n\
         \x20   protocol: openai\n\
         \x20   base_url: \"{base}\"\n\
         \x20   models: [dall-e-2, dall-e-3, gpt-image-1, tts-1, whisper-1, text-embedding-3-small, rerank-v1, omni-moderation-latest, broken-model]\n\
         \x20   model_map: {{ whisper-1: whisper-large-v3 }}\n"
    )
}

/// The media models' prices, as entries of `prices:`.
pub const PRICES: &str = concat!(
    "  dall-e-2: { per_image: { \"256x256\": 0.016, \"512x512\": 0.018, \"1024x1024\": 0.02 } }\n",
    "  dall-e-3: { per_image: { \"1024x1024\": 0.04, \"1024x1024/hd\": 0.08, \"1792x1024\": 0.08, \"1024x1792\": 0.08 } }\n",
    "  gpt-image-1: { input: 5, output: 40, per_image: { \"*\": 0.25 } }\n",
    "  qwen-image-edit: { per_image: { \"*\": 0.03 } }\n",
    "  tts-1: { per_million_chars: 15 }\n",
    "  whisper-1: { per_minute: 0.006 }\n",
    "  text-embedding-3-small: { input: 100 }\n",
    "  rerank-v1: { input: 2 }\n",
    "  omni-moderation-latest: { input: 1 }\n",
    "  broken-model: { input: 1, output: 1, per_image: { \"*\": 0.01 }, per_million_chars: 1, per_minute: 0.01 }\n",
);

pub fn config(base: &str) -> String {
    format!("{FAMILIES}channels:\n{}prices:\n{PRICES}", channel(base))
}

async fn setup() -> (
    crate::mock_upstream::MockUpstream,
    TestGateway,
    String,
    String,
) {
    let up = media_upstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    (up, gw, key, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_generations_follow_section_8_and_bill_per_image_or_token() {
    let (up, gw, key, id) = setup().await;
    let mut spent = 0;
    let cases = [
        // (body, the model the upstream sees, images, cost in micro-USD)
        (
            json!({"model": "dall-e-3", "prompt": "a cat", "size": "1024x1024", "quality": "hd"}),
            "dall-e-3",
            1,
            80_000,
        ),
        (
            json!({"model": "dall-e-2", "prompt": "a cat", "n": 3, "size": "512x512"}),
            "dall-e-2",
            3,
            54_000,
        ),
        // No model: the smallest family, unless a newest-only parameter is present.
        (json!({"prompt": "a cat"}), "dall-e-2", 1, 20_000),
        // Token-billed from the answer's usage: 50 input at 5, 1050 output at 40.
        (
            json!({"prompt": "a cat", "background": "transparent"}),
            "gpt-image-1",
            1,
            250 + 42_000,
        ),
    ];
    for (body, model, n, cost) in cases {
        let (s, _, text) = gw.post("/v1/images/generations/", &key, &body).await;
        assert_eq!(s, 200, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), n, "{text}");
        assert_eq!(up.last().json()["model"], model);
        spent += cost;
        assert_eq!(gw.used_micros(&id).await, spent, "{body}");
    }
    let calls = up.requests().len();
    let long = |n: usize| "x".repeat(n);
    let rejected = [
        (json!({"model": "dall-e-2", "prompt": long(1001)}), "prompt"),
        (json!({"model": "dall-e-3", "prompt": long(4001)}), "prompt"),
        (
            json!({"model": "gpt-image-1", "prompt": long(32001)}),
            "prompt",
        ),
        (json!({"model": "dall-e-3", "prompt": "p", "n": 2}), "n"),
        (json!({"model": "dall-e-2", "prompt": "p", "n": 11}), "n"),
        (json!({"model": "dall-e-2", "prompt": "p", "n": 0}), "n"),
        (
            json!({"model": "dall-e-2", "prompt": "p", "size": "1792x1024"}),
            "size",
        ),
        (
            json!({"model": "dall-e-3", "prompt": "p", "size": "256x256"}),
            "size",
        ),
        (
            json!({"model": "gpt-image-1", "prompt": "p", "size": "512x512"}),
            "size",
        ),
        (
            json!({"model": "dall-e-3", "prompt": "p", "background": "transparent"}),
            "background",
        ),
        (
            json!({"model": "dall-e-2", "prompt": "p", "moderation": "low"}),
            "moderation",
        ),
        (
            json!({"model": "gpt-image-1", "prompt": "p", "background": "transparent", "output_format": "jpeg"}),
            "output_format",
        ),
        (
            json!({"model": "gpt-image-1", "prompt": "p", "moderation": "high"}),
            "moderation",
        ),
        (json!({"model": "dall-e-2", "n": 1}), "prompt"),
        (json!({"model": "dall-e-2", "prompt": 5}), "prompt"),
    ];
    for (body, param) in rejected {
        let (s, _, text) = gw.post("/v1/images/generations", &key, &body).await;
        assert_eq!(s, 400, "{param}: {text}");
        assert_eq!(error_of(&text)["param"], param, "{text}");
    }
    assert_eq!(
        up.requests().len(),
        calls,
        "no rejected request reached the upstream"
    );
    assert_eq!(gw.used_micros(&id).await, spent, "and none cost anything");

    // An upstream refusal keeps its status, loses its details, and is refunded.
    let (s, _, text) = gw
        .post(
            "/v1/images/generations",
            &key,
            &json!({"model": "dall-e-2", "prompt": "fail"}),
        )
        .await;
    assert_eq!(s, 400);
    let e = error_of(&text);
    assert_eq!(e["type"], "upstream_error");
    assert!(
        !text.contains("internal-host") && !text.contains("sk-upstream"),
        "{text}"
    );
    assert_eq!(gw.used_micros(&id).await, spent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_streams_audio_and_bills_characters() {
    let (up, gw, key, id) = setup().await;
    let body = json!({"model": "tts-1", "input": "Hello world", "voice": "alloy"});
    let r = gw
        .http
        .post(gw.url("/v1/audio/speech"))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/mpeg");
    let mut got = Vec::new();
    let mut s = r.bytes_stream();
    while let Some(c) = s.next().await {
        got.extend_from_slice(&c.unwrap());
    }
    assert_eq!(got, AUDIO);
    // 11 characters at 15 USD per 1M.
    assert_eq!(gw.used_micros(&id).await, 165);
    let (s, _, text) = gw
        .post(
            "/v1/audio/speech",
            &key,
            &json!({"model": "tts-1", "input": "x"}),
        )
        .await;
    assert_eq!(s, 400);
    assert_eq!(error_of(&text)["param"], "voice");
    assert_eq!(up.requests().len(), 1);
}

/// A multipart body as SDKs send it.
fn form(boundary: &str, fields: &[(&str, &str)], file: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    for (k, v) in fields {
        b.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    b.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"talk.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n")
            .as_bytes(),
    );
    b.extend_from_slice(file);
    b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    b
}

async fn upload(gw: &TestGateway, key: &str, path: &str, body: Vec<u8>) -> (u16, String) {
    let r = gw
        .http
        .post(gw.url(path))
        .bearer_auth(key)
        .header("content-type", "multipart/form-data; boundary=b0und4ry")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mib_upload_is_forwarded_byte_exact_and_billed_by_the_minute() {
    let (up, gw, key, id) = setup().await;
    let file: Vec<u8> = (0..20 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let sent = form(
        "b0und4ry",
        &[("model", "whisper-1"), ("language", "en")],
        &file,
    );
    let (s, text) = upload(&gw, &key, "/v1/audio/transcriptions", sent.clone()).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["text"],
        "Hello from the audio."
    );
    let seen = up.last();
    // Byte-exact apart from the mapped model name.
    let expected = form(
        "b0und4ry",
        &[("model", "whisper-large-v3"), ("language", "en")],
        &file,
    );
    assert_eq!(seen.body.len(), expected.len());
    assert!(seen.body == expected, "the upload changed on the way");
    // 90 seconds at 0.006 USD a minute.
    assert_eq!(gw.used_micros(&id).await, 9_000);

    // srt: the last cue ends at 1:30; translations take the same form.
    // Room for 100 seconds at the lowest speech bitrate: the 90 the answer reports fit.
    let small = vec![7u8; 100_000];
    let (s, text) = upload(
        &gw,
        &key,
        "/v1/audio/translations",
        form(
            "b0und4ry",
            &[("model", "whisper-1"), ("response_format", "srt")],
            &small,
        ),
    )
    .await;
    assert_eq!(s, 200);
    assert!(text.contains("00:01:30,000"), "{text}");
    assert_eq!(gw.used_micros(&id).await, 18_000);

    let (s, text) = upload(&gw, &key, "/v1/audio/transcriptions", {
        let mut b = Vec::new();
        b.extend_from_slice(b"--b0und4ry\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--b0und4ry--\r\n");
        b
    })
    .await;
    assert_eq!(s, 400);
    assert_eq!(error_of(&text)["param"], "file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_rerank_and_moderation_bill_tokens() {
    let (up, gw, key, id) = setup().await;
    let (s, _, text) = gw
        .post(
            "/v1/embeddings",
            &key,
            &json!({"model": "text-embedding-3-small", "input": ["a", "b"]}),
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(gw.used_micros(&id).await, 800, "8 tokens at 100 USD per 1M");

    // spec 4.19: the model in the path.
    let (s, _, text) = gw
        .post(
            "/v1/engines/text-embedding-3-small/embeddings",
            &key,
            &json!({"input": "a"}),
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let seen = up.last();
    assert_eq!(seen.path, "/v1/embeddings");
    assert_eq!(seen.json()["model"], "text-embedding-3-small");
    assert_eq!(gw.used_micros(&id).await, 1_600);

    let (s, _, text) = gw
        .post("/v1/rerank", &key, &json!({"model": "rerank-v1", "query": "q", "documents": ["a", "b"], "top_n": 2, "return_documents": true}))
        .await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["results"][0]["index"], 1);
    assert!(v["results"][0]["relevance_score"].is_number() && v["meta"].is_object());
    assert_eq!(
        gw.used_micros(&id).await,
        1_660,
        "30 tokens at 2 USD per 1M"
    );

    let body = json!({"input": "is this fine?"});
    let (s, _, text) = gw.post("/v1/moderations", &key, &body).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(up.last().json()["model"], "omni-moderation-latest");
    // No usage in moderation answers: four bytes a token of the input, 13 bytes rounded
    // up to 4 tokens at 1 USD per 1M (media_estimates.rs has the other cases).
    assert_eq!(gw.used_micros(&id).await, 1_660 + 4);

    let calls = up.requests().len();
    for (path, body, param) in [
        (
            "/v1/embeddings",
            json!({"model": "text-embedding-3-small"}),
            "input",
        ),
        (
            "/v1/rerank",
            json!({"model": "rerank-v1", "query": "q"}),
            "documents",
        ),
        ("/v1/moderations", json!({"input": 5}), "input"),
    ] {
        let (s, _, text) = gw.post(path, &key, &body).await;
        assert_eq!(s, 400, "{path}: {text}");
        assert_eq!(error_of(&text)["param"], param);
    }
    assert_eq!(up.requests().len(), calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_media_bodies_are_413() {
    let up = media_upstream::start().await;
    let cfg = format!(
        "limits: {{ max_body_bytes: 65536 }}\n{}",
        config(&up.base_url())
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let big = json!({"model": "text-embedding-3-small", "input": "x".repeat(70_000)});
    let (s, _, text) = gw.post("/v1/embeddings", &key, &big).await;
    assert_eq!(s, 413, "{text}");
    let (s, _) = upload(
        &gw,
        &key,
        "/v1/audio/transcriptions",
        form("b0und4ry", &[("model", "whisper-1")], &[0u8; 70_000]),
    )
    .await;
    assert_eq!(s, 413);
    assert!(up.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_cannot_afford_the_worst_case_is_refused_before_the_upstream() {
    let (up, gw, _, _) = setup().await;
    let (key, id) = gw.create_key(json!({"quota_usd": 0.05})).await;
    // Four images cost 0.08 USD at worst: more than the key has.
    let body = json!({"model": "dall-e-2", "prompt": "p", "n": 4, "size": "1024x1024"});
    let (s, _, text) = gw.post("/v1/images/generations", &key, &body).await;
    assert_eq!(s, 403, "{text}");
    assert_eq!(error_of(&text)["code"], "insufficient_quota");
    assert!(up.requests().is_empty());
    assert_eq!(gw.used_micros(&id).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_media_endpoint_sanitizes_upstream_failures_and_refunds() {
    let up = media_upstream::start().await;
    // Eight failures in a row would open the channel's circuit after five and skip it;
    // this test is about what each endpoint answers, so the circuit never opens here.
    let body = format!("circuit: {{ failures: 0 }}\n{}", config(&up.base_url()));
    let gw = TestGateway::start(&body, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    // The upstream answers 503; spec 7 has the client see 500.
    let m = media_upstream::BROKEN;
    let json_cases = [
        ("/v1/images/generations", json!({"model": m, "prompt": "p"})),
        (
            "/v1/audio/speech",
            json!({"model": m, "input": "hi", "voice": "alloy"}),
        ),
        ("/v1/embeddings", json!({"model": m, "input": "hi"})),
        (
            "/v1/rerank",
            json!({"model": m, "query": "q", "documents": ["a"]}),
        ),
        ("/v1/moderations", json!({"model": m, "input": "hi"})),
    ];
    for (path, body) in json_cases {
        let (s, _, text) = gw.post(path, &key, &body).await;
        assert_eq!(s, 500, "{path}: {text}");
        let e = error_of(&text);
        assert_eq!(e["type"], "upstream_error", "{path}");
        assert!(!text.contains("gpu-node"), "{path}: {text}");
    }
    let (ct, edit) = crate::media_edits::edit_form(
        &[("model", m), ("prompt", "p")],
        &[("image", b"img".to_vec())],
    );
    let r = gw
        .http
        .post(gw.url("/v1/images/edits"))
        .bearer_auth(&key)
        .header("content-type", ct)
        .body(edit)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500, "multipart edit");
    assert!(!r.text().await.unwrap().contains("gpu-node"));
    for path in ["/v1/audio/transcriptions", "/v1/audio/translations"] {
        let (s, text) = upload(
            &gw,
            &key,
            path,
            form("b0und4ry", &[("model", m)], &[1u8; 4000]),
        )
        .await;
        assert_eq!(s, 500, "{path}: {text}");
        assert!(!text.contains("gpu-node"), "{text}");
    }
    assert_eq!(up.requests().len(), 8, "each reached the upstream once");
    assert_eq!(gw.used_micros(&id).await, 0, "and each was refunded");
}
