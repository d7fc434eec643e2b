//! Response objects (spec 2.5, 2.6, 4.5) built from [`ir`]: the whole answer, the
//! compaction answer, and the pieces the stream encoder shares so that the object in
//! `response.completed` is exactly the one a non-streamed request gets.

use super::REDACTED_PREFIX;
use crate::protocol::ir::{self, FinishReason, Part};
use crate::protocol::{ResponseContext, Usage};
use serde_json::{json, Map, Value};

/// What names a response: the gateway's ids and the client's model, never the upstream's.
pub(super) struct Meta<'a> {
    pub request_id: &'a str,
    pub model: &'a str,
    pub created: i64,
}

/// A response object's lifecycle state.
pub(super) enum Status<'a> {
    InProgress,
    Completed,
    /// `incomplete_details.reason`.
    Incomplete(&'static str),
    Failed(&'a str),
}

impl Status<'_> {
    /// How an answer that ended for `finish` is reported.
    pub fn of(finish: Option<&FinishReason>) -> Status<'static> {
        match finish {
            Some(FinishReason::Length) => Status::Incomplete("max_output_tokens"),
            Some(FinishReason::ContentFilter) => Status::Incomplete("content_filter"),
            _ => Status::Completed,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Incomplete(_) => "incomplete",
            Status::Failed(_) => "failed",
        }
    }
}

pub fn render_response(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    let meta = Meta {
        request_id: ctx.request_id,
        model: ctx.client_model,
        created: ctx.created,
    };
    let output = output_items(ctx.request_id, &resp.content);
    let v = response_object(
        &meta,
        &Status::of(resp.finish.as_ref()),
        output,
        Some(&resp.usage),
    );
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Spec 4.5: the summary the model wrote, as one assistant message.
pub fn render_compaction(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    let summary: String = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let item = message_item(
        &item_id("msg", ctx.request_id, 0),
        "completed",
        vec![output_text_part(&summary)],
    );
    let v = json!({
        "id": format!("cmp_{}", ctx.request_id),
        "object": "response.compaction",
        "created_at": ctx.created,
        "output": [item],
        "usage": usage_json(&resp.usage),
        "error": null,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The full response object. `usage` is `None` while the answer is in progress.
pub(super) fn response_object(
    meta: &Meta,
    status: &Status,
    output: Vec<Value>,
    usage: Option<&Usage>,
) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), format!("resp_{}", meta.request_id).into());
    o.insert("object".into(), "response".into());
    o.insert("created_at".into(), meta.created.into());
    o.insert("status".into(), status.name().into());
    o.insert("model".into(), meta.model.into());
    let text = output_text(&output);
    o.insert("output".into(), Value::Array(output));
    if let Some(text) = text {
        o.insert("output_text".into(), text.into());
    }
    o.insert("usage".into(), usage.map_or(Value::Null, usage_json));
    let error = match status {
        Status::Failed(message) => json!({"code": "upstream_error", "message": message}),
        _ => Value::Null,
    };
    o.insert("error".into(), error);
    let incomplete = match status {
        Status::Incomplete(reason) => json!({ "reason": reason }),
        _ => Value::Null,
    };
    o.insert("incomplete_details".into(), incomplete);
    o.insert("instructions".into(), Value::Null);
    o.insert("metadata".into(), json!({}));
    o.insert("parallel_tool_calls".into(), true.into());
    o.insert("temperature".into(), Value::Null);
    o.insert("top_p".into(), Value::Null);
    o.insert("tool_choice".into(), "auto".into());
    o.insert("tools".into(), json!([]));
    o.insert("text".into(), json!({"format": {"type": "text"}}));
    Value::Object(o)
}

/// The SDKs' `output_text` convenience, for clients that read the raw JSON: all output
/// text in order; absent when there is no message.
fn output_text(output: &[Value]) -> Option<String> {
    let mut any = false;
    let mut text = String::new();
    for item in output.iter().filter(|i| i["type"] == "message") {
        any = true;
        for part in item["content"].as_array().into_iter().flatten() {
            if part["type"] == "output_text" {
                text.push_str(part["text"].as_str().unwrap_or(""));
            }
        }
    }
    any.then_some(text)
}

/// Spec 2.6 names and the Responses API names, both: clients of either find theirs.
/// The chat-style details split the tokens by kind (text is what is neither audio, image
/// nor reasoning).
pub(super) fn usage_json(u: &Usage) -> Value {
    let text_in = u
        .input_tokens
        .saturating_sub(u.audio_input_tokens)
        .saturating_sub(u.image_input_tokens);
    let text_out = u
        .output_tokens
        .saturating_sub(u.reasoning_tokens)
        .saturating_sub(u.audio_output_tokens)
        .saturating_sub(u.image_output_tokens);
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": u.cached_input_tokens,
            "text_tokens": text_in,
            "audio_tokens": u.audio_input_tokens,
            "image_tokens": u.image_input_tokens,
        },
        "completion_tokens_details": {
            "text_tokens": text_out,
            "audio_tokens": u.audio_output_tokens,
            "reasoning_tokens": u.reasoning_tokens,
        },
    })
}

/// An output item's id: `<prefix>_<request id>_<output index>`, deterministic and unique
/// within the response.
pub(super) fn item_id(prefix: &str, request_id: &str, n: usize) -> String {
    format!("{prefix}_{request_id}_{n}")
}

pub(super) fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

pub(super) fn output_text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// A reasoning item; thinking text is its one summary part, the upstream's signature its
/// `encrypted_content` (returned verbatim by clients on the next turn).
pub(super) fn reasoning_item(id: &str, text: &str, encrypted: Option<&str>) -> Value {
    let summary: Vec<Value> = if text.is_empty() {
        Vec::new()
    } else {
        vec![summary_part(text)]
    };
    let mut v = json!({"type": "reasoning", "id": id, "summary": summary});
    if let Some(e) = encrypted.filter(|e| !e.is_empty()) {
        v["encrypted_content"] = e.into();
    }
    v
}

pub(super) fn summary_part(text: &str) -> Value {
    json!({"type": "summary_text", "text": text})
}

/// Redacted thinking has no text, only opaque data; the prefix tells it apart from a
/// signature when the client sends it back.
pub(super) fn redacted_encrypted(data: &str) -> String {
    format!("{REDACTED_PREFIX}{data}")
}

/// The `call_id` a client sees: the upstream's id with the signature riding inside it
/// (the responses protocol has no field for it), or, when the upstream gave none, one
/// derived from the request id and the call's index.
pub(super) fn client_call_id(
    request_id: &str,
    index: usize,
    id: &str,
    signature: Option<&str>,
) -> String {
    if id.is_empty() {
        return ir::join_call_id(&format!("call_{request_id}_{index}"), signature);
    }
    ir::join_call_id(id, signature)
}

pub(super) fn function_call_item(
    id: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
    status: &str,
) -> Value {
    json!({
        "type": "function_call",
        "id": id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    })
}

/// Output items in content order: consecutive text is one message; each thinking part,
/// redacted thinking part and tool call is an item of its own. Images and tool results
/// have no output item here and are left out.
pub(super) fn output_items(request_id: &str, content: &[Part]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut calls = 0;
    let mut text: Option<String> = None;
    let flush = |text: &mut Option<String>, out: &mut Vec<Value>| {
        if let Some(t) = text.take() {
            let id = item_id("msg", request_id, out.len());
            out.push(message_item(&id, "completed", vec![output_text_part(&t)]));
        }
    };
    for part in content {
        match part {
            Part::Text(t) if t.is_empty() => {}
            Part::Text(t) => text.get_or_insert_with(String::new).push_str(t),
            Part::Thinking {
                text: th,
                signature,
            } => {
                if th.is_empty() && signature.as_deref().is_none_or(str::is_empty) {
                    continue;
                }
                flush(&mut text, &mut out);
                let id = item_id("rs", request_id, out.len());
                out.push(reasoning_item(&id, th, signature.as_deref()));
            }
            Part::RedactedThinking(data) => {
                flush(&mut text, &mut out);
                let id = item_id("rs", request_id, out.len());
                out.push(reasoning_item(&id, "", Some(&redacted_encrypted(data))));
            }
            Part::ToolCall(c) => {
                flush(&mut text, &mut out);
                let id = item_id("fc", request_id, out.len());
                let call_id = client_call_id(request_id, calls, &c.id, c.signature.as_deref());
                calls += 1;
                out.push(function_call_item(
                    &id,
                    &call_id,
                    &c.name,
                    &c.arguments,
                    "completed",
                ));
            }
            Part::Image(_) | Part::ToolResult(_) => {}
        }
    }
    flush(&mut text, &mut out);
    out
}
