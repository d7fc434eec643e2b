//! A scripted model behind each upstream protocol (chat, messages, generate-content,
//! native responses), for protocol and SDK tests.
//!
//! The script: a request with tools whose conversation does not yet hold a tool result
//! gets a call to `get_weather({"city":"Paris"})` (after a short text); a request whose
//! last turn holds the tool result gets `The weather in Paris is sunny.`; anything else
//! gets `Hello from <protocol>.`. Usage is fixed (10 prompt tokens of which 2 cached,
//! 5 output tokens), so tests can check billing exactly.
//!
//! Each provider also checks what only a faithful gateway sends back on the second turn:
//! the tool call id it issued (chat, messages) or the `thoughtSignature` it attached to
//! the call (generate-content). A mismatch answers 400, so a broken round trip fails the
//! client's test.
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::time::Duration;

pub const CALL_ID: &str = "call_up_1";
pub const TOOLU_ID: &str = "toolu_up_1";
pub const SIGNATURE: &str = "c2lnbmF0dXJlLTE=";
pub const ANSWER: &str = "The weather in Paris is sunny.";
pub const PROMPT_TOKENS: u64 = 10;
pub const CACHED_TOKENS: u64 = 2;
pub const OUTPUT_TOKENS: u64 = 5;

/// One mock serving every protocol, chosen by path.
pub async fn start() -> MockUpstream {
    MockUpstream::start(reply).await
}

fn reply(r: &Recorded) -> Reply {
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return Reply::json(400, json!({"error": {"message": "not json"}}));
    };
    let path = r.path.split('?').next().unwrap_or("");
    let result = if path.ends_with("/chat/completions") {
        chat(&body)
    } else if path.ends_with("/messages") {
        messages(&body)
    } else if path.contains(":generateContent") || path.contains(":streamGenerateContent") {
        let stream = path.contains(":streamGenerateContent");
        let model = path
            .rsplit('/')
            .next()
            .and_then(|m| m.split(':').next())
            .unwrap_or("")
            .to_string();
        gemini(&body, &model, stream)
    } else if path.ends_with("/responses") {
        responses(&body)
    } else {
        Err(format!("unexpected path {path}"))
    };
    result.unwrap_or_else(|m| {
        Reply::json(
            400,
            json!({"error": {"message": m, "type": "invalid_request_error"}}),
        )
    })
}

fn sse_named(events: Vec<(&str, Value)>) -> Reply {
    Reply::Chunked {
        status: 200,
        content_type: "text/event-stream".into(),
        pieces: events
            .into_iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n").into_bytes())
            .collect(),
        interval: Duration::from_millis(2),
        end: End::Clean,
    }
}

fn sse(datas: Vec<String>) -> Reply {
    Reply::sse(&datas, Duration::from_millis(2), End::Clean)
}

enum Turn {
    Hello,
    CallTool,
    Answer,
}

// ---- chat ----

fn chat(b: &Value) -> Result<Reply, String> {
    let msgs = b["messages"].as_array().ok_or("no messages")?;
    let model = b["model"].as_str().unwrap_or("");
    let last = msgs.last().ok_or("empty messages")?;
    let turn = if last["role"] == "tool" {
        if last["tool_call_id"] != CALL_ID {
            return Err(format!(
                "tool_call_id {} is not {CALL_ID}",
                last["tool_call_id"]
            ));
        }
        Turn::Answer
    } else if b["tools"].as_array().is_some_and(|t| !t.is_empty()) {
        Turn::CallTool
    } else {
        Turn::Hello
    };
    let usage = json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": PROMPT_TOKENS + OUTPUT_TOKENS, "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS}});
    let (text, call) = match turn {
        Turn::Hello => ("Hello from chat.", false),
        Turn::CallTool => ("", true),
        Turn::Answer => (ANSWER, false),
    };
    let finish = if call { "tool_calls" } else { "stop" };
    if b["stream"] != true {
        let mut message =
            json!({"role": "assistant", "content": if call { Value::Null } else { json!(text) }});
        if call {
            message["tool_calls"] = json!([{"id": CALL_ID, "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]);
        }
        return Ok(Reply::json(
            200,
            json!({"id": "chatcmpl-up", "object": "chat.completion",
            "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
        ));
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let mut v = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if call {
        v.push(chunk(
            json!({"tool_calls": [{"index": 0, "id": CALL_ID, "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in ["{\"city\":", "\"Paris\"}"] {
            v.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    } else {
        for piece in split3(text) {
            v.push(chunk(json!({"content": piece}), Value::Null));
        }
    }
    v.push(chunk(json!({}), json!(finish)));
    if b["stream_options"]["include_usage"] == true {
        v.push(json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": [], "usage": usage}).to_string());
    }
    v.push("[DONE]".into());
    Ok(sse(v))
}

/// A text in three pieces, to stream.
fn split3(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len().div_ceil(3).max(1);
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

// ---- messages ----

fn messages(b: &Value) -> Result<Reply, String> {
    let msgs = b["messages"].as_array().ok_or("no messages")?;
    if b["max_tokens"].as_u64().is_none() {
        return Err("max_tokens is required".into());
    }
    let model = b["model"].as_str().unwrap_or("");
    let last = msgs.last().ok_or("empty messages")?;
    let result = last["content"]
        .as_array()
        .and_then(|c| c.iter().find(|p| p["type"] == "tool_result"));
    let turn = if let Some(r) = result {
        if r["tool_use_id"] != TOOLU_ID {
            return Err(format!(
                "tool_use_id {} is not {TOOLU_ID}",
                r["tool_use_id"]
            ));
        }
        Turn::Answer
    } else if b["tools"].as_array().is_some_and(|t| !t.is_empty()) {
        Turn::CallTool
    } else {
        Turn::Hello
    };
    let usage = json!({"input_tokens": PROMPT_TOKENS - CACHED_TOKENS, "output_tokens": OUTPUT_TOKENS,
        "cache_read_input_tokens": CACHED_TOKENS, "cache_creation_input_tokens": 0});
    let (text, call) = match turn {
        Turn::Hello => ("Hello from messages.", false),
        Turn::CallTool => ("Let me check.", true),
        Turn::Answer => (ANSWER, false),
    };
    let stop = if call { "tool_use" } else { "end_turn" };
    if b["stream"] != true {
        let mut content = vec![json!({"type": "text", "text": text})];
        if call {
            content.push(json!({"type": "tool_use", "id": TOOLU_ID, "name": "get_weather", "input": {"city": "Paris"}}));
        }
        return Ok(Reply::json(
            200,
            json!({"id": "msg_up", "type": "message", "role": "assistant",
            "model": model, "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage}),
        ));
    }
    let mut ev = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_up", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": PROMPT_TOKENS - CACHED_TOKENS, "output_tokens": 1,
                      "cache_read_input_tokens": CACHED_TOKENS, "cache_creation_input_tokens": 0}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
    ];
    for piece in split3(text) {
        ev.push(("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})));
    }
    ev.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    if call {
        ev.push(("content_block_start", json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": TOOLU_ID, "name": "get_weather", "input": {}}})));
        for piece in ["{\"city\":", " \"Paris\"}"] {
            ev.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        ev.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ));
    }
    ev.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": OUTPUT_TOKENS}}),
    ));
    ev.push(("message_stop", json!({"type": "message_stop"})));
    Ok(sse_named(ev))
}

// ---- generate-content ----

fn gemini(b: &Value, model: &str, stream: bool) -> Result<Reply, String> {
    let contents = b["contents"].as_array().ok_or("no contents")?;
    for c in contents {
        for p in c["parts"].as_array().into_iter().flatten() {
            if p.get("functionCall").is_some() && !same_signature(&p["thoughtSignature"]) {
                return Err("function call sent back without its thought signature".into());
            }
        }
    }
    if b["generationConfig"]["responseModalities"][0] == "AUDIO" {
        // Spec 4.18: speech comes back as inline PCM audio.
        return Ok(Reply::json(
            200,
            json!({"candidates": [{"content": {"role": "model", "parts": [
            {"inlineData": {"mimeType": "audio/L16;codec=pcm;rate=24000", "data": "AAECAw=="}}]},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": PROMPT_TOKENS, "candidatesTokenCount": OUTPUT_TOKENS,
                "totalTokenCount": PROMPT_TOKENS + OUTPUT_TOKENS, "cachedContentTokenCount": CACHED_TOKENS},
            "modelVersion": model}),
        ));
    }
    let last = contents.last().ok_or("empty contents")?;
    let answered = last["parts"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p.get("functionResponse").is_some()));
    let has_tools = b["tools"].as_array().is_some_and(|t| !t.is_empty());
    let turn = if answered {
        Turn::Answer
    } else if has_tools {
        Turn::CallTool
    } else {
        Turn::Hello
    };
    let usage = json!({"promptTokenCount": PROMPT_TOKENS, "candidatesTokenCount": OUTPUT_TOKENS,
        "totalTokenCount": PROMPT_TOKENS + OUTPUT_TOKENS, "cachedContentTokenCount": CACHED_TOKENS});
    let call_part = json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE});
    let text = match turn {
        Turn::Hello => "Hello from gemini.",
        Turn::CallTool => "",
        Turn::Answer => ANSWER,
    };
    let candidate = |parts: Value, finish: Option<&str>| {
        let mut c = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            c["finishReason"] = json!(f);
        }
        c
    };
    if !stream {
        let parts = if text.is_empty() {
            json!([call_part])
        } else {
            json!([{"text": text}])
        };
        return Ok(Reply::json(
            200,
            json!({"candidates": [candidate(parts, Some("STOP"))],
            "usageMetadata": usage, "modelVersion": model, "responseId": "resp-up"}),
        ));
    }
    let mut v = Vec::new();
    if text.is_empty() {
        v.push(json!({"candidates": [candidate(json!([call_part]), Some("STOP"))], "usageMetadata": usage,
            "modelVersion": model}).to_string());
    } else {
        let pieces = split3(text);
        let last = pieces.len() - 1;
        for (i, piece) in pieces.into_iter().enumerate() {
            let mut chunk = json!({"candidates": [candidate(json!([{"text": piece}]), (i == last).then_some("STOP"))],
                "modelVersion": model});
            if i == last {
                chunk["usageMetadata"] = usage.clone();
            }
            v.push(chunk.to_string());
        }
    }
    Ok(sse(v))
}

/// Bytes fields in the API's JSON accept standard or URL-safe base64, padded or not.
fn same_signature(v: &Value) -> bool {
    let norm = |s: &str| {
        s.replace('-', "+")
            .replace('_', "/")
            .trim_end_matches('=')
            .to_string()
    };
    v.as_str().is_some_and(|s| norm(s) == norm(SIGNATURE))
}

// ---- native responses ----

fn responses(b: &Value) -> Result<Reply, String> {
    let model = b["model"].as_str().unwrap_or("");
    let usage = json!({"input_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS, "total_tokens": PROMPT_TOKENS + OUTPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": CACHED_TOKENS}, "output_tokens_details": {"reasoning_tokens": 0}});
    let text = "Hello from responses.";
    let item = json!({"type": "message", "id": "msg_up", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "resp_up", "object": "response",
        "created_at": 1_700_000_000, "status": status, "model": model, "output": output, "usage": usage,
        "error": null, "incomplete_details": null, "instructions": null, "metadata": {}, "parallel_tool_calls": true,
        "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": [], "upstream_only": "kept"})
    };
    if b["stream"] != true {
        return Ok(Reply::json(
            200,
            response("completed", json!([item]), usage),
        ));
    }
    let mut seq = 0;
    let mut ev = |name: &'static str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        (name, data)
    };
    let events = vec![
        ev(
            "response.created",
            json!({"response": response("in_progress", json!([]), Value::Null)}),
        ),
        ev(
            "response.output_item.added",
            json!({"output_index": 0, "item": {"type": "message", "id": "msg_up",
            "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        ev(
            "response.content_part.added",
            json!({"item_id": "msg_up", "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
        ev(
            "response.output_text.delta",
            json!({"item_id": "msg_up", "output_index": 0, "content_index": 0, "delta": text}),
        ),
        ev(
            "response.output_text.done",
            json!({"item_id": "msg_up", "output_index": 0, "content_index": 0, "text": text}),
        ),
        ev(
            "response.content_part.done",
            json!({"item_id": "msg_up", "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": text, "annotations": []}}),
        ),
        ev(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ),
        ev(
            "response.completed",
            json!({"response": response("completed", json!([item]), usage)}),
        ),
    ];
    Ok(sse_named(events))
}
