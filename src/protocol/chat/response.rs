//! Whole answers: a chat upstream's completion → the pivot, and the pivot → a chat
//! client's completion. Also the pieces streams share with them (finish reasons, the
//! usage object, synthesized tool call ids).

use super::wire::answer::{reasoning, Completion, Content, Function, Message};
use super::wire::usage::CompletionUsage;
use crate::protocol::ir::{self, FinishReason, Part};
use crate::protocol::{ResponseContext, TranslateError, Usage};
use serde_json::{json, Map, Value};

/// The `finish_reason` a chat client sees. Tool calls win over a plain stop: an
/// upstream that ends its turn with calls reports `end_turn`/`STOP`, but chat clients
/// loop on `tool_calls`.
pub(super) fn finish_reason_str(reason: Option<&FinishReason>, has_calls: bool) -> &'static str {
    match reason {
        Some(FinishReason::Length) => "length",
        Some(FinishReason::ContentFilter) => "content_filter",
        Some(FinishReason::ToolCalls) => "tool_calls",
        Some(FinishReason::Stop) | None if has_calls => "tool_calls",
        Some(FinishReason::Stop | FinishReason::StopSequence(_) | FinishReason::Other(_))
        | None => "stop",
    }
}

/// An upstream's `finish_reason`.
pub(super) fn parse_finish(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// The usage object of a completion and of the usage chunk. Cache writes have no chat
/// field: they stay inside `prompt_tokens`, as chat counts them. The audio shares are
/// written only when there are some (answers without audio keep their old shape).
pub(super) fn usage_json(u: &Usage) -> Value {
    let mut prompt = Map::new();
    prompt.insert("cached_tokens".into(), u.cached_input_tokens.into());
    if u.audio_input_tokens > 0 {
        prompt.insert("audio_tokens".into(), u.audio_input_tokens.into());
    }
    let mut completion = Map::new();
    completion.insert("reasoning_tokens".into(), u.reasoning_tokens.into());
    if u.audio_output_tokens > 0 {
        completion.insert("audio_tokens".into(), u.audio_output_tokens.into());
    }
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": prompt,
        "completion_tokens_details": completion,
    })
}

/// A tool call id for an upstream call that came without one: a deterministic function
/// of the answer's id and creation time (`id`, `created` as the upstream wrote them), the
/// call's position and its name (so replays give the same bytes), unique within the
/// answer, and `[a-zA-Z0-9_-]` only.
pub(super) fn synth_call_id(id: &Value, created: &Value, index: usize, name: &str) -> String {
    // FNV-1a: tiny, stable across builds and platforms, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let seed = format!("{id}\u{0}{created}\u{0}{name}");
    for b in seed.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("call_{h:016x}_{index}")
}

pub fn parse_response(body: &[u8]) -> Result<ir::Response, TranslateError> {
    let answer: Completion<'_> = serde_json::from_slice(body)?;
    let choices = answer
        .choices
        .0
        .as_deref()
        .ok_or(TranslateError::Shape("no choices"))?;
    let usage = answer
        .usage
        .object()
        .map(CompletionUsage::to_usage)
        .unwrap_or_default();
    // Only the first choice is followed: the client asked for one (n > 1 is refused).
    let Some(choice) = choices
        .iter()
        .find(|c| c.index.0 == Some(0))
        .or(choices.first())
    else {
        return Ok(ir::Response {
            usage,
            ..Default::default()
        });
    };
    let none = Message::default();
    let msg = choice.message.object().unwrap_or(&none);
    Ok(ir::Response {
        content: message_parts(&answer, msg),
        finish: choice.finish_reason.as_str().map(parse_finish),
        usage,
    })
}

/// A message's thinking, text, refusal and tool calls, in that order.
fn message_parts(answer: &Completion<'_>, msg: &Message<'_>) -> Vec<Part> {
    let mut content = Vec::new();
    if let Some(r) = reasoning(&msg.reasoning_content, &msg.reasoning).filter(|r| !r.is_empty()) {
        content.push(Part::Thinking {
            text: r.to_string(),
            signature: None,
        });
    }
    match &msg.content {
        Content::Text(s) if !s.is_empty() => content.push(Part::Text(s.to_string())),
        // Some compatible servers answer with text parts.
        Content::Parts(parts) => content.extend(
            parts
                .iter()
                .filter_map(|p| p.text.as_str())
                .filter(|t| !t.is_empty())
                .map(|t| Part::Text(t.to_string())),
        ),
        _ => {}
    }
    if let Some(r) = msg.refusal.as_str().filter(|r| !r.is_empty()) {
        content.push(Part::Text(r.to_string()));
    }
    let mut index = 0;
    for c in msg.tool_calls.items() {
        let call = call(answer, index, c.id.as_str(), c.function.object());
        content.push(Part::ToolCall(call));
        index += 1;
    }
    // The legacy single call, still answered by some compatible servers.
    if let Some(f) = msg.function_call.object() {
        content.push(Part::ToolCall(call(answer, index, None, Some(f))));
    }
    content
}

fn call(
    answer: &Completion<'_>,
    index: usize,
    id: Option<&str>,
    f: Option<&Function<'_>>,
) -> ir::ToolCall {
    let name = f
        .and_then(|f| f.name.as_str())
        .unwrap_or_default()
        .to_string();
    let id = match id {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => synth_call_id(&answer.id, &answer.created, index, &name),
    };
    ir::ToolCall {
        id,
        arguments: match f.map(|f| &f.arguments) {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => "{}".to_string(),
            // A server that sends an object instead of JSON text.
            Some(other) => other.to_string(),
        },
        name,
        signature: None,
    }
}

pub fn render_response(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    let mut text = String::new();
    let mut has_text = false;
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for p in &resp.content {
        match p {
            Part::Text(t) => {
                has_text = true;
                text.push_str(t);
            }
            // Chat clients cannot send thinking back, so its signature has no use here.
            Part::Thinking { text: t, .. } => thinking.push_str(t),
            Part::ToolCall(c) => calls.push(json!({
                "id": ir::join_call_id(&c.id, c.signature.as_deref()),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })),
            Part::RedactedThinking(_) | Part::Image(_) | Part::ToolResult(_) => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert(
        "content".into(),
        if has_text { text.into() } else { Value::Null },
    );
    if !thinking.is_empty() {
        message.insert("reasoning_content".into(), thinking.into());
    }
    let finish = finish_reason_str(resp.finish.as_ref(), !calls.is_empty());
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let v = json!({
        "id": format!("chatcmpl-{}", ctx.request_id),
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.client_model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": usage_json(&resp.usage),
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

#[cfg(test)]
mod tests;
