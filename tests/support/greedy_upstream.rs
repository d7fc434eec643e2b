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
        let limits = ["max_completion_tokens", "max_tokens"]
            .iter()
            .filter(|f| b.get(**f).is_some_and(|v| !v.is_null()))
            .map(|f| (f.to_string(), b[*f].as_u64()))
            .collect();
        Asked {
            path: r.path.clone(),
            limits,
            n: b["n"].as_u64().unwrap_or(1),
            stream: b["stream"].as_bool().unwrap_or(false),
        }
    }
}

pub struct GreedyUpstream {
    pub mock: MockUpstream,
}

impl GreedyUpstream {
    pub async fn start(b: Behaviour) -> GreedyUpstream {
        GreedyUpstream {
            mock: MockUpstream::start(move |r| answer(&b, r)).await,
        }
    }

    pub fn base_url(&self) -> String {
        self.mock.base_url()
    }

    /// What every request that reached this upstream asked for, in arrival order.
    pub fn asked(&self) -> Vec<Asked> {
        self.mock.requests().iter().map(Asked::of).collect()
    }
}

fn prompt_tokens(body: &Value) -> u64 {
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

fn error(status: u16, message: &str, param: Option<&str>) -> Reply {
    Reply::json(
        status,
        json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}}),
    )
}

fn answer(b: &Behaviour, r: &Recorded) -> Reply {
    if r.method != "POST" || !r.path.ends_with("/chat/completions") {
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
    let limit = asked.limit();
    let per_choice = b.ignore_limit.unwrap_or(limit.unwrap_or(OWN_MAX));
    let finish = if limit.is_some_and(|l| per_choice >= l) {
        "length"
    } else {
        "stop"
    };
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
