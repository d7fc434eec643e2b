//! Upstreams that answer with every usage detail their vendor documents, whole and
//! streamed, for the pricing tests. Each shape follows the vendor's API reference:
//! - OpenAI: API reference, "The chat completion object" and "The chat completion chunk
//!   object" (`usage.prompt_tokens_details.{cached_tokens, audio_tokens}`,
//!   `usage.completion_tokens_details.{reasoning_tokens, audio_tokens}`; the usage chunk
//!   with empty `choices` when `stream_options.include_usage` is set).
//! - Anthropic: Messages API reference, "Usage" (`input_tokens` excluding cache reads and
//!   writes, `cache_read_input_tokens`, `cache_creation_input_tokens`, `cache_creation.
//!   {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}`, `server_tool_use.
//!   web_search_requests`), and "Streaming messages" (`message_start` carries the input
//!   usage, `message_delta` the cumulative usage).
//! - Gemini: API reference, `GenerateContentResponse.UsageMetadata` (`promptTokenCount`
//!   includes `cachedContentTokenCount`; `thoughtsTokenCount` is outside
//!   `candidatesTokenCount`), streamed with `alt=sse` as `data:` events.
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::time::Duration;

/// OpenAI chat usage with every detail.
pub fn openai_usage() -> Value {
    json!({
        "prompt_tokens": 2000, "completion_tokens": 900, "total_tokens": 2900,
        "prompt_tokens_details": {"cached_tokens": 500, "audio_tokens": 300},
        "completion_tokens_details": {"reasoning_tokens": 400, "audio_tokens": 200,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    })
}

/// Anthropic usage with every detail (cumulative, as `message_delta` and whole answers
/// report it); `searches`: the web searches run (3 when the request offered the tool).
pub fn anthropic_usage(searches: u64) -> Value {
    json!({
        "input_tokens": 1000,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 1500,
        "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 1000},
        "output_tokens": 700,
        "server_tool_use": {"web_search_requests": searches},
        "service_tier": "standard"
    })
}

/// Gemini usage metadata of a prompt of `prompt` tokens.
pub fn gemini_usage(prompt: u64) -> Value {
    json!({
        "promptTokenCount": prompt,
        "cachedContentTokenCount": 100_000.min(prompt / 2),
        "candidatesTokenCount": 1000,
        "thoughtsTokenCount": 2000,
        "totalTokenCount": prompt + 3000,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]
    })
}

/// One mock for the three vendors, chosen by path. A Gemini request of more than 200,000
/// bytes reports a 250,000-token prompt, any other 1,000.
pub async fn start() -> MockUpstream {
    MockUpstream::start(reply).await
}

fn reply(r: &Recorded) -> Reply {
    let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let path = r.path.split('?').next().unwrap_or("");
    let stream = body["stream"] == json!(true) || path.contains(":streamGenerateContent");
    if path.ends_with("/chat/completions") {
        openai(&body, stream)
    } else if path.ends_with("/messages") {
        anthropic(&body, stream)
    } else if path.contains("GenerateContent") || path.contains("generateContent") {
        let long = r.body.len() > 200_000;
        gemini(if long { 250_000 } else { 1000 }, stream)
    } else {
        Reply::json(404, json!({"error": {"message": "no such path"}}))
    }
}

fn openai(body: &Value, stream: bool) -> Reply {
    let model = body["model"].as_str().unwrap_or("").to_string();
    if !stream {
        return Reply::json(
            200,
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                             "logprobs": null, "finish_reason": "stop"}],
                "usage": openai_usage()
            }),
        );
    }
    let chunk = |choices: Value, usage: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": model, "choices": choices, "usage": usage})
        .to_string()
    };
    let wants_usage = body["stream_options"]["include_usage"] == json!(true);
    let mut events = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": null}]),
            Value::Null,
        ),
        chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            Value::Null,
        ),
    ];
    if wants_usage {
        events.push(chunk(json!([]), openai_usage()));
    }
    events.push("[DONE]".into());
    Reply::sse(&events, Duration::ZERO, End::Clean)
}

fn named(events: Vec<(&str, Value)>) -> Reply {
    Reply::Chunked {
        status: 200,
        content_type: "text/event-stream".into(),
        pieces: events
            .into_iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n").into_bytes())
            .collect(),
        interval: Duration::ZERO,
        end: End::Clean,
    }
}

fn anthropic(body: &Value, stream: bool) -> Reply {
    let model = body["model"].as_str().unwrap_or("").to_string();
    let offered = body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == "web_search"));
    let searches = if offered { 3 } else { 0 };
    if !stream {
        return Reply::json(
            200,
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": "Hi"}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": anthropic_usage(searches)
            }),
        );
    }
    let mut start_usage = anthropic_usage(searches);
    start_usage["output_tokens"] = json!(1);
    start_usage["server_tool_use"] = json!({"web_search_requests": 0});
    named(vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": start_usage}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                   "usage": anthropic_usage(searches)}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

fn gemini(prompt: u64, stream: bool) -> Reply {
    let candidate = |text: &str, finish: Option<&str>| {
        let mut c = json!({"content": {"role": "model", "parts": [{"text": text}]}, "index": 0});
        if let Some(f) = finish {
            c["finishReason"] = json!(f);
        }
        c
    };
    if !stream {
        return Reply::json(
            200,
            json!({"candidates": [candidate("Hi", Some("STOP"))],
                   "usageMetadata": gemini_usage(prompt), "modelVersion": "gemini-x"}),
        );
    }
    let events = [
        json!({"candidates": [candidate("H", None)], "modelVersion": "gemini-x"}).to_string(),
        json!({"candidates": [candidate("i", Some("STOP"))],
               "usageMetadata": gemini_usage(prompt), "modelVersion": "gemini-x"})
        .to_string(),
    ];
    Reply::Chunked {
        status: 200,
        content_type: "text/event-stream".into(),
        pieces: events
            .iter()
            .map(|e| format!("data: {e}\r\n\r\n").into_bytes())
            .collect(),
        interval: Duration::ZERO,
        end: End::Clean,
    }
}
