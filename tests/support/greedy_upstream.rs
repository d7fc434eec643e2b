//! A chat-completions upstream that is honest about usage but writes as much as it is
//! allowed, as real models do: their own output maximum is far above what a gateway
//! reserves when a request names no limit.
//!
//! Written from OpenAI's published API reference, "Create chat completion"
//! (platform.openai.com/docs/api-reference/chat/create) and its chunk object:
//! - `max_completion_tokens` is the upper bound on generated tokens; `max_tokens` is its
//!   deprecated older name. Either bounds each choice; `finish_reason` is `length` when
//!   the bound cut the answer.
//! - `n` asks for that many choices; `usage.completion_tokens` counts all of them.
//! - Streams are server-sent events, `data: {chunk}` each, ended by `data: [DONE]`.
//!   With `stream_options.include_usage`, every chunk carries `"usage": null` and one more
//!   chunk with empty `choices` and the whole request's `usage` comes before `[DONE]`.
//!
//! Token convention (so the gateway's own counting is checkable): the model writes one
//! token as the 4-byte word `"tok "`; prompt tokens are the bytes of the messages' text
//! divided by 4, rounded up.
//!
//! The same model has two cloud faces ([`Face`]), each from its vendor's reference:
//! - Amazon Bedrock Runtime ("Amazon Bedrock API Reference": Converse, ConverseStream,
//!   InferenceConfiguration, TokenUsage, ConverseStreamOutput; the AWS event stream
//!   encoding): `POST /model/{modelId}/converse` and `/converse-stream`, the output limit
//!   `inferenceConfig.maxTokens`, `stopReason` `max_tokens` when it cut the answer, usage
//!   `inputTokens`/`outputTokens`/`totalTokens` (in the stream's `metadata` event);
//!   streams are binary frames (prelude with total and headers length and its CRC32,
//!   headers `:event-type`, `:content-type`, `:message-type`, the JSON payload, the
//!   message CRC32). Authenticated with a Bedrock API key as a bearer token.
//! - Vertex AI ("Vertex AI API: projects.locations.publishers.models", and "Use
//!   Anthropic's Claude models on Vertex AI"): Gemini's `:generateContent` and
//!   `:streamGenerateContent?alt=sse` with `generationConfig.maxOutputTokens` and
//!   `candidateCount`, `finishReason` `MAX_TOKENS`, `usageMetadata`; Claude's
//!   `:rawPredict` and `:streamRawPredict` with the Messages API's required `max_tokens`,
//!   `stop_reason` `max_tokens`, and its stream events. Requests need an OAuth 2.0 access
//!   token (`Bearer ya29.…`), which the Vertex mock's token endpoint issues after
//!   verifying the service account's JWT.
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::time::Duration;

/// One output token, as written by this model.
pub const TOKEN: &str = "tok ";

/// Output tokens per choice when a request names no limit: the model's own maximum.
pub const OWN_MAX: u64 = 50_000;

/// Per-test switches.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// Report `usage` (whole answers always; streams when `include_usage` asks). Off:
    /// never, whatever the request asks.
    pub usage: bool,
    /// Write this many tokens per choice whatever limit the request names.
    pub ignore_limit: Option<u64>,
    /// Pause between stream chunks.
    pub interval: Duration,
    /// Tokens per content chunk of a stream.
    pub tokens_per_chunk: u64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            usage: true,
            ignore_limit: None,
            interval: Duration::ZERO,
            tokens_per_chunk: 500,
        }
    }
}

/// The API the greedy model is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    /// OpenAI's chat completions.
    Chat,
    /// Amazon Bedrock Runtime's Converse API.
    Bedrock,
    /// Vertex AI: Gemini's generateContent and Claude's rawPredict.
    Vertex,
}

/// The Bedrock API key the Bedrock face accepts.
pub const BEDROCK_API_KEY: &str = "ABSKZ3JlZWR5LWJlZHJvY2sta2V5";

/// What one request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub path: String,
    /// The output limit fields present, with their values (`max_completion_tokens`,
    /// `max_tokens`).
    pub limits: Vec<(String, Option<u64>)>,
    pub n: u64,
    pub stream: bool,
}

impl Asked {
    /// The effective output limit per choice: the smaller of the fields given.
    pub fn limit(&self) -> Option<u64> {
        self.limits.iter().filter_map(|(_, v)| *v).min()
    }

    fn of(r: &Recorded) -> Asked {
        let b: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        let path = r.path.split('?').next().unwrap_or("");
        // (where the limit lives, its name, where `n` lives, whether the path streams)
        let (holder, fields, n, stream): (&Value, &[&str], &Value, bool) =
            if path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent") {
                let config = &b["generationConfig"];
                (
                    config,
                    &["maxOutputTokens"],
                    &config["candidateCount"],
                    path.ends_with(":streamGenerateContent"),
                )
            } else if path.ends_with(":rawPredict") || path.ends_with(":streamRawPredict") {
                (
                    &b,
                    &["max_tokens"],
                    &Value::Null,
                    path.ends_with(":streamRawPredict"),
                )
            } else if path.ends_with("/converse") || path.ends_with("/converse-stream") {
                (
                    &b["inferenceConfig"],
                    &["maxTokens"],
                    &Value::Null,
                    path.ends_with("/converse-stream"),
                )
            } else {
                (
                    &b,
                    &["max_completion_tokens", "max_tokens"],
                    &b["n"],
                    b["stream"].as_bool().unwrap_or(false),
                )
            };
        let limits = fields
            .iter()
            .filter(|f| holder.get(**f).is_some_and(|v| !v.is_null()))
            .map(|f| (f.to_string(), holder[*f].as_u64()))
            .collect();
        Asked {
            path: r.path.clone(),
            limits,
            n: n.as_u64().unwrap_or(1),
            stream,
        }
    }
}

pub struct GreedyUpstream {
    pub mock: MockUpstream,
}

impl GreedyUpstream {
    pub async fn start(b: Behaviour) -> GreedyUpstream {
        GreedyUpstream::start_as(Face::Chat, b).await
    }

    /// The model behind `face`.
    pub async fn start_as(face: Face, b: Behaviour) -> GreedyUpstream {
        let mock = match face {
            Face::Chat => MockUpstream::start(move |r| answer(&b, r)).await,
            Face::Bedrock => MockUpstream::start(move |r| bedrock(&b, r)).await,
            Face::Vertex => MockUpstream::start(move |r| vertex(&b, r)).await,
        };
        GreedyUpstream { mock }
    }

    pub fn base_url(&self) -> String {
        self.mock.base_url()
    }

    /// What every request that reached this upstream asked for, in arrival order.
    pub fn asked(&self) -> Vec<Asked> {
        self.mock.requests().iter().map(Asked::of).collect()
    }
}

pub fn prompt_tokens(body: &Value) -> u64 {
    let mut bytes = 0;
    for m in body["messages"].as_array().into_iter().flatten() {
        match &m["content"] {
            Value::String(s) => bytes += s.len(),
            Value::Array(parts) => {
                for p in parts {
                    bytes += p["text"].as_str().map_or(0, str::len);
                }
            }
            _ => {}
        }
    }
    (bytes as u64).div_ceil(4).max(1)
}

/// The model's answer to a request that named `limit` (`None`: its own maximum):
/// tokens per choice, and whether the limit cut it.
pub fn written(b: &Behaviour, limit: Option<u64>) -> (u64, bool) {
    let per_choice = b.ignore_limit.unwrap_or(limit.unwrap_or(OWN_MAX));
    (per_choice, limit.is_some_and(|l| per_choice >= l))
}

fn error(status: u16, message: &str, param: Option<&str>) -> Reply {
    Reply::json(
        status,
        json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}}),
    )
}

fn answer(b: &Behaviour, r: &Recorded) -> Reply {
    // Azure OpenAI serves the same API under `/openai/deployments/{d}/…?api-version=`.
    let path = r.path.split('?').next().unwrap_or("");
    if r.method != "POST" || !path.ends_with("/chat/completions") {
        return error(404, "Unknown endpoint.", None);
    }
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return error(
            400,
            "We could not parse the JSON body of your request.",
            None,
        );
    };
    let asked = Asked::of(r);
    if asked.limits.iter().any(|(_, v)| v.is_none()) {
        return error(
            400,
            "Invalid type for output limit: expected an integer.",
            None,
        );
    }
    if asked.n == 0 {
        return error(400, "n must be at least 1.", Some("n"));
    }
    let (per_choice, cut) = written(b, asked.limit());
    let finish = if cut { "length" } else { "stop" };
    let model = body["model"].as_str().unwrap_or("unknown").to_string();
    let prompt = prompt_tokens(&body);
    let usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": per_choice * asked.n,
        "total_tokens": prompt + per_choice * asked.n,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0}
    });
    if !asked.stream {
        let choices: Vec<Value> = (0..asked.n)
            .map(|i| json!({"index": i, "message": {"role": "assistant", "content": TOKEN.repeat(per_choice as usize), "refusal": null}, "logprobs": null, "finish_reason": finish}))
            .collect();
        let mut v = json!({
            "id": "chatcmpl-greedy", "object": "chat.completion", "created": 1_700_000_000,
            "model": model, "system_fingerprint": "fp_greedy", "choices": choices
        });
        if b.usage {
            v["usage"] = usage;
        }
        return Reply::json(200, v);
    }
    let include_usage = b.usage && body["stream_options"]["include_usage"] == json!(true);
    let chunk = |choices: Value| {
        let mut c = json!({"id": "chatcmpl-greedy", "object": "chat.completion.chunk",
            "created": 1_700_000_000, "model": model, "system_fingerprint": "fp_greedy",
            "choices": choices});
        if include_usage {
            c["usage"] = Value::Null;
        }
        c.to_string()
    };
    let mut events = Vec::new();
    for i in 0..asked.n {
        events.push(chunk(json!([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}])));
    }
    let step = b.tokens_per_chunk.max(1);
    let mut written = 0;
    while written < per_choice {
        let k = step.min(per_choice - written);
        for i in 0..asked.n {
            events.push(chunk(json!([{"index": i, "delta": {"content": TOKEN.repeat(k as usize)}, "logprobs": null, "finish_reason": null}])));
        }
        written += k;
    }
    for i in 0..asked.n {
        events.push(chunk(
            json!([{"index": i, "delta": {}, "logprobs": null, "finish_reason": finish}]),
        ));
    }
    if include_usage {
        let mut last: Value = serde_json::from_str(&chunk(json!([]))).unwrap();
        last["usage"] = usage;
        events.push(last.to_string());
    }
    events.push("[DONE]".into());
    Reply::sse(&events, b.interval, End::Clean)
}

// ---- the cloud faces ----

/// CRC-32 (IEEE 802.3, the one the AWS event stream encoding names), bit by bit.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One event stream message: prelude (total length, headers length, prelude CRC),
/// string headers (type 7), the payload, the message CRC.
pub fn event_frame(event_type: &str, payload: &Value) -> Vec<u8> {
    let mut headers = Vec::new();
    for (name, value) in [
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ] {
        headers.push(name.len() as u8);
        headers.extend_from_slice(name.as_bytes());
        headers.push(7);
        headers.extend_from_slice(&(value.len() as u16).to_be_bytes());
        headers.extend_from_slice(value.as_bytes());
    }
    let payload = payload.to_string().into_bytes();
    let total = 12 + headers.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&headers);
    out.extend_from_slice(&payload);
    let message_crc = crc32(&out);
    out.extend_from_slice(&message_crc.to_be_bytes());
    out
}

/// Bedrock's error answer: the `x-amzn-ErrorType` is in the body's `__type` here (the
/// mock's replies carry no custom headers), with the message.
fn aws_error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, json!({"__type": kind, "message": message}))
}

/// Amazon Bedrock Runtime's Converse and ConverseStream.
fn bedrock(b: &Behaviour, r: &Recorded) -> Reply {
    if r.header("authorization") != Some(&format!("Bearer {BEDROCK_API_KEY}")) {
        return aws_error(403, "AccessDeniedException", "Authentication failed");
    }
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return aws_error(400, "ValidationException", "Malformed input request");
    };
    let asked = Asked::of(r);
    if !r.path.starts_with("/model/") || !(r.path.ends_with("/converse") || asked.stream) {
        return aws_error(404, "UnknownOperationException", "Unknown operation");
    }
    if asked.limits.iter().any(|(_, v)| v.is_none()) {
        return aws_error(
            400,
            "ValidationException",
            "inferenceConfig.maxTokens: expected an integer",
        );
    }
    let (out, cut) = written(b, asked.limit());
    let prompt = prompt_tokens(&body);
    let stop = if cut { "max_tokens" } else { "end_turn" };
    let usage = json!({"inputTokens": prompt, "outputTokens": out, "totalTokens": prompt + out});
    if !asked.stream {
        let mut v = json!({
            "output": {"message": {"role": "assistant", "content": [{"text": TOKEN.repeat(out as usize)}]}},
            "stopReason": stop, "metrics": {"latencyMs": 1}
        });
        if b.usage {
            v["usage"] = usage;
        }
        return Reply::json(200, v);
    }
    let mut frames = vec![event_frame("messageStart", &json!({"role": "assistant"}))];
    let step = b.tokens_per_chunk.max(1);
    let mut sent = 0;
    while sent < out {
        let k = step.min(out - sent);
        frames.push(event_frame(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"text": TOKEN.repeat(k as usize)}}),
        ));
        sent += k;
    }
    frames.push(event_frame(
        "contentBlockStop",
        &json!({"contentBlockIndex": 0}),
    ));
    frames.push(event_frame("messageStop", &json!({"stopReason": stop})));
    if b.usage {
        frames.push(event_frame(
            "metadata",
            &json!({"usage": usage, "metrics": {"latencyMs": 1}}),
        ));
    }
    Reply::Chunked {
        status: 200,
        content_type: "application/vnd.amazon.eventstream".into(),
        pieces: frames,
        interval: b.interval,
        end: End::Clean,
    }
}

fn google_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"error": {"code": status, "message": message, "status": code}}),
    )
}

/// Vertex AI: Gemini (`publishers/google`) and Claude (`publishers/anthropic`).
fn vertex(b: &Behaviour, r: &Recorded) -> Reply {
    if !r
        .header("authorization")
        .is_some_and(|a| a.starts_with("Bearer ya29."))
    {
        return google_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials.",
        );
    }
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    };
    let asked = Asked::of(r);
    if asked.limits.iter().any(|(_, v)| v.is_none()) {
        return google_error(
            400,
            "INVALID_ARGUMENT",
            "Invalid value for the output limit.",
        );
    }
    let path = r.path.split('?').next().unwrap_or("");
    if path.contains("/publishers/google/models/") {
        return gemini(b, &asked, &body);
    }
    if path.contains("/publishers/anthropic/models/") && asked.limit().is_some() {
        return claude(b, &asked, &body);
    }
    google_error(400, "INVALID_ARGUMENT", "max_tokens: Field required")
}

fn gemini(b: &Behaviour, asked: &Asked, body: &Value) -> Reply {
    let mut bytes = 0;
    for c in body["contents"].as_array().into_iter().flatten() {
        for p in c["parts"].as_array().into_iter().flatten() {
            bytes += p["text"].as_str().map_or(0, str::len);
        }
    }
    let prompt = (bytes as u64).div_ceil(4).max(1);
    let (per, cut) = written(b, asked.limit());
    let finish = if cut { "MAX_TOKENS" } else { "STOP" };
    let usage = json!({"promptTokenCount": prompt, "candidatesTokenCount": per * asked.n,
                       "totalTokenCount": prompt + per * asked.n});
    let candidates = |text: &str, finish: Option<&str>| -> Value {
        (0..asked.n)
            .map(|i| {
                let mut c =
                    json!({"index": i, "content": {"role": "model", "parts": [{"text": text}]}});
                if let Some(f) = finish {
                    c["finishReason"] = json!(f);
                }
                c
            })
            .collect()
    };
    if !asked.stream {
        let mut v = json!({"candidates": candidates(&TOKEN.repeat(per as usize), Some(finish)),
                           "modelVersion": "gemini-greedy"});
        if b.usage {
            v["usageMetadata"] = usage;
        }
        return Reply::json(200, v);
    }
    let mut events = Vec::new();
    let step = b.tokens_per_chunk.max(1);
    let mut sent = 0;
    while sent < per {
        let k = step.min(per - sent);
        sent += k;
        let last = sent == per;
        let mut v = json!({"candidates": candidates(&TOKEN.repeat(k as usize), last.then_some(finish)),
                           "modelVersion": "gemini-greedy"});
        if last && b.usage {
            v["usageMetadata"] = usage.clone();
        }
        events.push(v.to_string());
    }
    Reply::sse(&events, b.interval, End::Clean)
}

fn claude(b: &Behaviour, asked: &Asked, body: &Value) -> Reply {
    let prompt = prompt_tokens(body);
    let (out, cut) = written(b, asked.limit());
    let stop = if cut { "max_tokens" } else { "end_turn" };
    let usage = json!({"input_tokens": prompt, "output_tokens": out,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let message = |content: Value, stop: Value, usage: Value| {
        json!({"id": "msg_greedy", "type": "message", "role": "assistant", "model": "claude-greedy",
               "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
    };
    if !asked.stream {
        let text = json!([{"type": "text", "text": TOKEN.repeat(out as usize)}]);
        return Reply::json(200, message(text, json!(stop), usage));
    }
    let start_usage = json!({"input_tokens": prompt, "output_tokens": 1});
    let mut events = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": message(json!([]), Value::Null, start_usage)}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    let step = b.tokens_per_chunk.max(1);
    let mut sent = 0;
    while sent < out {
        let k = step.min(out - sent);
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": TOKEN.repeat(k as usize)}}),
        ));
        sent += k;
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    let final_usage = if b.usage {
        json!({"output_tokens": out})
    } else {
        json!({})
    };
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": final_usage}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    Reply::Chunked {
        status: 200,
        content_type: "text/event-stream".into(),
        pieces: events
            .iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n").into_bytes())
            .collect(),
        interval: b.interval,
        end: End::Clean,
    }
}

#[cfg(test)]
mod tests {
    /// The check value of CRC-32/ISO-HDLC ("123456789" → 0xCBF43926), as catalogued in
    /// the CRC RevEng catalogue.
    #[test]
    fn crc32_matches_the_catalogued_check_value() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
    }
}
