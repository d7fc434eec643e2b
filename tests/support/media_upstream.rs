//! An OpenAI-style upstream for the non-chat endpoints: images (generations, and edits as
//! multipart), speech, transcription, translation, embeddings, rerank and moderation,
//! with fixed, checkable answers.
//!
//! Rerank answers in two vendors' shapes, both at `POST /v1/rerank` with `{model, query,
//! documents, top_n, return_documents}`: Jina AI's Reranker API (jina.ai/reranker,
//! `usage.total_tokens`) by default, and Cohere's v1 rerank (docs.cohere.com/v1/reference/rerank:
//! `{id, results: [{index, relevance_score, document?}], meta: {api_version: {version},
//! billed_units: {search_units}}}`, no tokens) for the models in [`COHERE_RERANK`]. Cohere's
//! pricing FAQ: "a single search unit is defined as one query with up to 100 documents to
//! be ranked", so the mock bills `ceil(documents / 100)` (its documents are short: no chunks).
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::time::Duration;

/// The speech audio, sent in five pieces.
pub const AUDIO: &[u8] = b"ID3\x04\x00fake-mpeg-frames-0123456789-fake-mpeg-frames-9876543210";
pub const EMBEDDING_TOKENS: u64 = 8;
pub const RERANK_TOKENS: u64 = 30;
/// Models answered in Cohere's rerank shape (search units, no tokens).
pub const COHERE_RERANK: &[&str] = &["rerank-english-v3.0", "rerank-v3.5"];
/// The embeddings model whose answers carry no `usage`: OpenAI's embedding list with the
/// member left out, as OpenAI-compatible servers that count nothing send it.
pub const EMBEDDINGS_WITHOUT_USAGE: &str = "embed-no-usage";
/// Seconds the transcription answers report.
pub const SECONDS: f64 = 90.0;

pub async fn start() -> MockUpstream {
    MockUpstream::start(reply).await
}

/// The value of a text field in a multipart body (enough for the tests' own bodies).
pub fn form_field(body: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let marker = format!("name=\"{name}\"\r\n\r\n");
    let start = text.find(&marker)? + marker.len();
    let end = text[start..].find("\r\n")? + start;
    Some(text[start..end].to_string())
}

/// The model every endpoint of this upstream fails for.
pub const BROKEN: &str = "broken-model";

fn reply(r: &Recorded) -> Reply {
    let path = r.path.split('?').next().unwrap_or("");
    let named = |m: &str| {
        form_field(&r.body, "model").as_deref() == Some(m)
            || serde_json::from_slice::<Value>(&r.body).is_ok_and(|b| b["model"] == m)
    };
    if named(BROKEN) {
        return Reply::json(
            503,
            json!({"error": {"message": "overloaded at gpu-node-12.internal", "type": "server_error"}}),
        );
    }
    match path {
        "/v1/audio/speech" => Reply::Chunked {
            status: 200,
            content_type: "audio/mpeg".into(),
            pieces: AUDIO
                .chunks(AUDIO.len().div_ceil(5))
                .map(<[u8]>::to_vec)
                .collect(),
            interval: Duration::from_millis(2),
            end: End::Clean,
        },
        "/v1/audio/transcriptions" | "/v1/audio/translations" => transcription(r),
        "/v1/images/edits" => edit(r),
        _ => {
            let Ok(b) = serde_json::from_slice::<Value>(&r.body) else {
                return Reply::json(400, json!({"error": {"message": "not json"}}));
            };
            if b["model"] == "fail-upstream" || b["prompt"] == "fail" {
                return Reply::json(
                    400,
                    json!({"error": {"message": "rejected by internal-host-7 for key sk-upstream", "type": "invalid_request_error"}}),
                );
            }
            match path {
                "/v1/images/generations" => images(&b),
                "/v1/embeddings" => {
                    let n = b["input"].as_array().map_or(1, Vec::len);
                    let data: Vec<Value> = (0..n)
                        .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.1, -0.2, 0.3]}))
                        .collect();
                    let mut v = json!({"object": "list", "data": data, "model": b["model"]});
                    if b["model"] != EMBEDDINGS_WITHOUT_USAGE {
                        v["usage"] = json!({"prompt_tokens": EMBEDDING_TOKENS, "total_tokens": EMBEDDING_TOKENS});
                    }
                    Reply::json(200, v)
                }
                "/v1/rerank" if COHERE_RERANK.iter().any(|m| b["model"] == *m) => cohere_rerank(&b),
                "/v1/rerank" => Reply::json(
                    200,
                    json!({"id": "rr-1", "results": [{"index": 1, "relevance_score": 0.9, "document": {"text": "b"}},
                                                    {"index": 0, "relevance_score": 0.1, "document": {"text": "a"}}],
                           "meta": {"api_version": "2"}, "usage": {"total_tokens": RERANK_TOKENS}}),
                ),
                "/v1/moderations" => Reply::json(
                    200,
                    json!({"id": "modr-1", "model": b["model"], "results": [{"flagged": false,
                        "categories": {"violence": false}, "category_scores": {"violence": 0.001}}]}),
                ),
                _ => Reply::json(404, json!({"error": {"message": "no such path"}})),
            }
        }
    }
}

/// Cohere's v1 rerank answer (see the top of this file): every document scored, in
/// descending order, and the search units billed.
fn cohere_rerank(b: &Value) -> Reply {
    let docs = b["documents"].as_array().map_or(0, Vec::len);
    let top = b["top_n"].as_u64().map_or(docs, |n| (n as usize).min(docs));
    let results: Vec<Value> = (0..top)
        .map(|i| json!({"index": i, "relevance_score": 1.0 / (i as f64 + 2.0)}))
        .collect();
    Reply::json(
        200,
        json!({"id": "07734bd2-2473-4f07-94e1-0d9f0e6843cf", "results": results,
               "meta": {"api_version": {"version": "1"},
                        "billed_units": {"search_units": docs.div_ceil(100)}}}),
    )
}

/// `POST /v1/images/edits` as the OpenAI API reference describes it ("Create image
/// edit"): multipart/form-data with `image` (or `image[]`) files, `prompt`, optional
/// `model` (default `dall-e-2`), `n`, `size`, `mask`; the answer of the generations
/// endpoint. A JSON body is refused as the API refuses it.
fn edit(r: &Recorded) -> Reply {
    let multipart = r
        .header("content-type")
        .is_some_and(|c| c.starts_with("multipart/form-data"));
    if !multipart {
        return Reply::json(
            400,
            json!({"error": {"message": "Expected multipart/form-data.", "type": "invalid_request_error"}}),
        );
    }
    let text = String::from_utf8_lossy(&r.body);
    let has_image =
        text.contains("name=\"image\"; filename=") || text.contains("name=\"image[]\"; filename=");
    let Some(prompt) = form_field(&r.body, "prompt") else {
        return Reply::json(
            400,
            json!({"error": {"message": "Missing required parameter: 'prompt'."}}),
        );
    };
    if !has_image {
        return Reply::json(
            400,
            json!({"error": {"message": "Missing required parameter: 'image'."}}),
        );
    }
    if prompt == "fail" {
        return Reply::json(
            400,
            json!({"error": {"message": "rejected by internal-host-7 for key sk-upstream", "type": "invalid_request_error"}}),
        );
    }
    let model = form_field(&r.body, "model").unwrap_or_else(|| "dall-e-2".into());
    let n = form_field(&r.body, "n")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    images(&json!({"model": model, "n": n}))
}

fn images(b: &Value) -> Reply {
    let n = b["n"].as_u64().unwrap_or(1);
    let token_priced = b["model"] == "gpt-image-1";
    let item = if token_priced {
        json!({"b64_json": "iVBORw0KGgo="})
    } else {
        json!({"url": "https://img.example/1.png", "revised_prompt": "a cat"})
    };
    let mut v = json!({"created": 1_700_000_000, "data": vec![item; n as usize]});
    if token_priced {
        v["usage"] = json!({"total_tokens": 1100, "input_tokens": 50, "output_tokens": 1050,
            "input_tokens_details": {"text_tokens": 50, "image_tokens": 0}});
        v["size"] = json!("1024x1024");
        v["quality"] = json!("high");
    }
    Reply::json(200, v)
}

fn transcription(r: &Recorded) -> Reply {
    let format = form_field(&r.body, "response_format").unwrap_or_else(|| "json".into());
    let text = |ct: &str, body: &str| Reply::Full {
        status: 200,
        content_type: ct.into(),
        body: body.as_bytes().to_vec(),
    };
    match format.as_str() {
        "text" => text("text/plain; charset=utf-8", "Hello from the audio.\n"),
        "srt" => text(
            "text/plain; charset=utf-8",
            "1\n00:00:00,000 --> 00:00:45,000\nHello\n\n2\n00:00:45,000 --> 00:01:30,000\nworld\n",
        ),
        "verbose_json" => Reply::json(
            200,
            json!({"task": "transcribe", "language": "english", "duration": SECONDS, "text": "Hello from the audio.", "segments": []}),
        ),
        _ => Reply::json(
            200,
            json!({"text": "Hello from the audio.", "usage": {"type": "duration", "seconds": SECONDS}}),
        ),
    }
}
