//! What embeddings, rerank and moderation cost when the answer reports no tokens (spec
//! 4.19, 4.20, 4.22; README, "Images, audio, embeddings, rerank, moderation"): four
//! bytes a token of the text members the endpoint bills, one token per token id, 3,000
//! tokens per omni-moderation image part; Cohere's search units at the model's
//! `per_search_unit`. Every figure below is worked out by hand from the prices here.

use crate::gateway::{StoreKind, TestGateway};
use crate::media_upstream;
use serde_json::Value;
use std::time::{Duration, Instant};

/// 100 USD per 1M tokens: one token is 100 micro-USD. Cohere's rerank at 2 USD per 1,000
/// searches: 2,000 micro-USD a search unit.
const PRICES: &str = "prices:\n\
    \x20 omni-moderation-latest: { input: 100 }\n\
    \x20 embed-no-usage: { input: 100 }\n\
    \x20 rerank-english-v3.0: { input: 100 }\n\
    \x20 rerank-v3.5: { per_search_unit: 0.002 }\n";

async fn setup() -> (crate::mock_upstream::MockUpstream, TestGateway) {
    let up = media_upstream::start().await;
    let cfg = format!(
        "channels:\n\
         \x20 - name: media\n\
         \x20   protocol: openai\n\
         \x20   base_url: \"{}\"\n\
         \x20   models: [omni-moderation-latest, embed-no-usage, rerank-english-v3.0, rerank-v3.5]\n\
         {PRICES}",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    (up, gw)
}

/// POST a body byte for byte, as an SDK sent it.
async fn post_raw(gw: &TestGateway, key: &str, path: &str, body: &str) -> (u16, String) {
    let r = gw
        .http
        .post(gw.url(path))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The key's usage records, newest first, once there are `n`.
async fn records(gw: &TestGateway, id: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = gw.admin_get(&format!("/admin/usage?key={id}")).await;
        assert_eq!(s, 200, "{v}");
        let data = v["data"].as_array().unwrap().clone();
        if data.len() >= n {
            return data;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} records: {v}",
            data.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// Row 1: `client.moderations.create(...)` twice; OpenAI's moderation answer reports no
// usage. Measured before: 45,600 micro-USD (one token per body byte, plus 64, each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moderation_without_usage_is_four_bytes_a_token_of_its_input() {
    let (_up, gw) = setup().await;
    let (key, id) = gw.create_key(serde_json::json!({})).await;
    // The SDK's separators; 217 and 15 bytes of input.
    let long = format!(
        "{{\"input\": \"{}\", \"model\": \"omni-moderation-latest\"}}",
        &"Is this sentence fine to post in a public forum? ".repeat(5)[..217]
    );
    let short = "{\"input\": \"is this fine?  \", \"model\": \"omni-moderation-latest\"}";
    assert_eq!((long.len(), short.len()), (265, 63));
    for body in [long.as_str(), short] {
        let (s, text) = post_raw(&gw, &key, "/v1/moderations", body).await;
        assert_eq!(s, 200, "{text}");
    }
    // ceil(217 / 4) = 55 tokens, ceil(15 / 4) = 4 tokens, at 100 micro-USD each.
    assert_eq!(gw.used_micros(&id).await, 5_500 + 400);
    let recs = records(&gw, &id, 2).await;
    assert_eq!(recs[0]["prompt_tokens"], 4, "{}", recs[0]);
    assert_eq!(recs[1]["prompt_tokens"], 55, "{}", recs[1]);
    assert!(recs.iter().all(|r| r["cost_estimated"] == true), "{recs:?}");
}

// Row 2: the word `image` in a moderation input is text. Measured before: 913,700
// micro-USD reserved (9,137 tokens), so a key capped at 0.50 USD got 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_word_image_in_a_moderation_input_is_text() {
    let (up, gw) = setup().await;
    let (key, id) = gw.create_key(serde_json::json!({"quota_usd": 0.5})).await;
    let body = r#"{"input":"an image, an image, an image","model":"omni-moderation-latest"}"#;
    assert_eq!(body.len(), 73);
    let (s, text) = post_raw(&gw, &key, "/v1/moderations", body).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(up.requests().len(), 1);
    // 28 bytes of input: ceil(28 / 4) = 7 tokens.
    assert_eq!(gw.used_micros(&id).await, 700);
    let recs = records(&gw, &id, 1).await;
    assert_eq!(recs[0]["prompt_tokens"], 7);
    assert_eq!(recs[0]["cost_estimated"], true);
}

// omni-moderation's image parts are the only images a moderation takes: 3,000 tokens each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_omni_moderation_image_part_gets_the_image_allowance() {
    let (_up, gw) = setup().await;
    let (key, id) = gw.create_key(serde_json::json!({})).await;
    let body = r#"{"model":"omni-moderation-latest","input":[{"type":"text","text":"an image of a cat"},{"type":"image_url","image_url":{"url":"https://img.example/cat.png"}}]}"#;
    let (s, text) = post_raw(&gw, &key, "/v1/moderations", body).await;
    assert_eq!(s, 200, "{text}");
    // "an image of a cat": 17 bytes, ceil(17 / 4) = 5 tokens; one image part: 3,000.
    assert_eq!(gw.used_micros(&id).await, 300_500);
    for (bad, param) in [
        (r#"{"input":[{"type":"text"}]}"#, "input[0].text"),
        (
            r#"{"input":[{"type":"text","text":"a"},{"type":"audio","audio":"x"}]}"#,
            "input[1].type",
        ),
        (
            r#"{"input":[{"type":"image_url","image_url":"https://x/y.png"}]}"#,
            "input[0].image_url",
        ),
    ] {
        let (s, text) = post_raw(&gw, &key, "/v1/moderations", bad).await;
        assert_eq!(s, 400, "{bad}: {text}");
        let e = crate::gateway::error_of(&text);
        assert_eq!(e["param"], param, "{text}");
        assert_eq!(e["type"], "gateway_error", "{text}");
    }
    assert_eq!(gw.used_micros(&id).await, 300_500);
}

// Row 3: a rerank answered in Cohere's shape (search units, no tokens). Measured before:
// 24,000 micro-USD for a 176-byte body (176 + 64 tokens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cohere_rerank_is_priced_by_search_units_or_else_four_bytes_a_token() {
    let (up, gw) = setup().await;
    let (key, id) = gw.create_key(serde_json::json!({})).await;
    let body = r#"{"model":"rerank-english-v3.0","query":"What is the capital of the country?","documents":["Carson City is the capital of Nevada.","Washington, D.C. is the capital of the US."]}"#;
    assert_eq!(body.len(), 176);
    let (s, text) = post_raw(&gw, &key, "/v1/rerank", body).await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["meta"]["billed_units"]["search_units"], 1, "{text}");
    // A model priced by the token only: 35 + 37 + 42 = 114 bytes, ceil(114 / 4) = 29.
    assert_eq!(gw.used_micros(&id).await, 2_900);
    let recs = records(&gw, &id, 1).await;
    assert_eq!(recs[0]["prompt_tokens"], 29);
    assert_eq!(recs[0]["cost_estimated"], true);

    // A model priced by the search unit: 150 documents are two searches, exactly.
    let docs: Vec<String> = (0..150).map(|i| format!("document {i}")).collect();
    let body =
        serde_json::json!({"model": "rerank-v3.5", "query": "q", "documents": docs, "top_n": 3});
    let (s, text) = post_raw(&gw, &key, "/v1/rerank", &body.to_string()).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(up.last().json()["documents"].as_array().unwrap().len(), 150);
    assert_eq!(gw.used_micros(&id).await, 2_900 + 2 * 2_000);
    let recs = records(&gw, &id, 2).await;
    assert_eq!(recs[0]["cost_micro_usd"], 4_000, "{}", recs[0]);
    assert_eq!(recs[0]["cost_estimated"], false, "{}", recs[0]);

    // Cohere's v1 `max_chunks_per_doc` sizes the reservation; it must be a count.
    let bad = r#"{"model":"rerank-v3.5","query":"q","documents":["a"],"max_chunks_per_doc":0}"#;
    let (s, text) = post_raw(&gw, &key, "/v1/rerank", bad).await;
    assert_eq!(s, 400, "{text}");
    assert_eq!(
        crate::gateway::error_of(&text)["param"],
        "max_chunks_per_doc"
    );
}

// Row 4: embeddings whose answer has no `usage`. Measured before: one token per body byte
// plus 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_without_usage_are_four_bytes_a_token_or_one_per_token_id() {
    let (_up, gw) = setup().await;
    let (key, id) = gw.create_key(serde_json::json!({})).await;
    let texts = r#"{"model":"embed-no-usage","input":["hello world","the image of a cat"]}"#;
    let (s, text) = post_raw(&gw, &key, "/v1/embeddings", texts).await;
    assert_eq!(s, 200, "{text}");
    // 11 + 18 = 29 bytes: ceil(29 / 4) = 8 tokens (the word `image` is text).
    assert_eq!(gw.used_micros(&id).await, 800);
    let ids = r#"{"model":"embed-no-usage","input":[[1,2,3],[40000,5]]}"#;
    let (s, text) = post_raw(&gw, &key, "/v1/embeddings", ids).await;
    assert_eq!(s, 200, "{text}");
    // Five token ids: five tokens, exactly as sent.
    assert_eq!(gw.used_micros(&id).await, 800 + 500);
    let one = r#"{"model":"embed-no-usage","input":"abcde"}"#;
    let (s, text) = post_raw(&gw, &key, "/v1/embeddings", one).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(gw.used_micros(&id).await, 800 + 500 + 200);
    let recs = records(&gw, &id, 3).await;
    let tokens: Vec<&Value> = recs.iter().map(|r| &r["prompt_tokens"]).collect();
    assert_eq!(tokens, [2, 5, 8]);
    assert!(recs.iter().all(|r| r["cost_estimated"] == true), "{recs:?}");
}
