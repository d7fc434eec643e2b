//! The neutral request → a request to a messages upstream. The messages API is strict
//! about shapes other protocols leave loose (alternating roles, non-empty text blocks,
//! signed thinking, tool id syntax, thinking budgets), so this is where a request from
//! another protocol is made acceptable without changing what it asks for.

use super::{sanitize_id, PATH};
use crate::protocol::ir::{self, Part, Role, ToolChoice};
use crate::protocol::{Invalid, RequestOptions, UpstreamRequest};
use serde_json::{json, Map, Value};

/// The messages API refuses smaller thinking budgets.
const MIN_THINKING_BUDGET: u64 = 1024;
/// With thinking on, the messages API only accepts `top_p` from here to 1.
const MIN_TOP_P_WITH_THINKING: f64 = 0.95;

pub fn from_ir(req: &ir::Request, opts: &RequestOptions) -> Result<UpstreamRequest, Invalid> {
    // Reservation safety: the client's limit (or the one the reservation was sized
    // for) is sent as it is, never raised.
    let max_tokens = req.max_tokens.unwrap_or(opts.default_max_tokens);
    let messages = messages(&req.messages);
    let thinking = thinking_budget(req, max_tokens, &messages);

    let mut body = Map::new();
    body.insert("model".into(), json!(opts.upstream_model));
    body.insert("max_tokens".into(), json!(max_tokens));
    if opts.stream {
        body.insert("stream".into(), json!(true));
    }
    let system: Vec<&str> = req
        .system
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(messages));
    // With thinking on, the messages API refuses changed sampling: the reasoning the
    // client asked for is kept and the sampling it cannot have is left out.
    if let Some(t) = req.temperature {
        let t = t.clamp(0.0, 1.0);
        if thinking.is_none() || t == 1.0 {
            body.insert("temperature".into(), json!(t));
        }
    }
    if let Some(p) = req.top_p {
        if thinking.is_none() || p >= MIN_TOP_P_WITH_THINKING {
            body.insert("top_p".into(), json!(p));
        }
    }
    if let Some(k) = req.top_k.filter(|_| thinking.is_none()) {
        body.insert("top_k".into(), json!(k));
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop));
    }
    if !req.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(req.tools.iter().map(tool).collect()),
        );
        if let Some(choice) = tool_choice(req) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(budget) = thinking {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    if let Some(user) = &req.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    // `response_format`, `seed` and the penalties have no messages equivalent.
    Ok(UpstreamRequest {
        body: serde_json::to_vec(&Value::Object(body)).unwrap_or_default(),
        path: PATH.into(),
        client_wants_usage: false,
    })
}

/// Turns as the messages API wants them: no empty turns, consecutive turns of one role
/// merged (it requires alternation), tool results first in a user turn.
fn messages(msgs: &[ir::Message]) -> Vec<Value> {
    let mut turns: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in msgs {
        let blocks: Vec<Value> = m.content.iter().filter_map(block).collect();
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((role, b)) if *role == m.role => b.extend(blocks),
            _ => turns.push((m.role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            let role = match role {
                Role::User => "user",
                Role::Assistant => {
                    return json!({"role": "assistant", "content": blocks});
                }
            };
            // Stable: the order among results and among the rest is kept.
            blocks.sort_by_key(|b| b["type"] != "tool_result");
            json!({"role": role, "content": blocks})
        })
        .collect()
}

fn block(part: &Part) -> Option<Value> {
    Some(match part {
        // The messages API refuses empty text blocks.
        Part::Text(t) if t.is_empty() => return None,
        Part::Text(t) => json!({"type": "text", "text": t}),
        Part::Image(i) => image(i),
        Part::ToolCall(c) => json!({
            "type": "tool_use",
            "id": sanitize_id(&c.id),
            "name": c.name,
            "input": ir::arguments_object(&c.arguments),
        }),
        Part::ToolResult(r) => tool_result(r),
        // Unsigned thinking is another protocol's visible reasoning: the messages API
        // refuses thinking it did not sign, so it stays out of the history.
        Part::Thinking { text, signature } => match signature.as_deref() {
            Some(s) if !s.is_empty() => {
                json!({"type": "thinking", "thinking": text, "signature": s})
            }
            _ => return None,
        },
        Part::RedactedThinking(data) => json!({"type": "redacted_thinking", "data": data}),
    })
}

fn image(i: &ir::Image) -> Value {
    match i {
        ir::Image::Base64 { media_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
        ir::Image::Url(url) => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

fn tool_result(r: &ir::ToolResult) -> Value {
    let mut v = json!({"type": "tool_result", "tool_use_id": sanitize_id(&r.call_id)});
    let blocks: Vec<Value> = r
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(_) | Part::Image(_) => block(p),
            _ => None,
        })
        .collect();
    match blocks.as_slice() {
        [] => {}
        [only] if only["type"] == "text" => v["content"] = only["text"].clone(),
        _ => v["content"] = Value::Array(blocks),
    }
    if r.is_error {
        v["is_error"] = json!(true);
    }
    v
}

fn tool(t: &ir::Tool) -> Value {
    // The messages API requires an object schema; one without `type` is read as one.
    let mut schema = match &t.parameters {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    if !schema.contains_key("type") {
        schema.insert("type".into(), json!("object"));
    }
    let mut v = json!({"name": t.name});
    if let Some(d) = t.description.as_deref().filter(|d| !d.is_empty()) {
        v["description"] = json!(d);
    }
    v["input_schema"] = Value::Object(schema);
    v
}

fn tool_choice(req: &ir::Request) -> Option<Value> {
    let serial = req.parallel_tool_calls == Some(false);
    let mut choice = match &req.tool_choice {
        None if !serial => return None,
        None | Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Tool(name)) => json!({"type": "tool", "name": name}),
        // `none` has no parallelism to disable.
        Some(ToolChoice::None) => return Some(json!({"type": "none"})),
    };
    if serial {
        choice["disable_parallel_tool_use"] = json!(true);
    }
    Some(choice)
}

/// The thinking budget to send, if any. The messages API needs 1024 <= budget <
/// max_tokens; the budget is lowered to fit, never max_tokens raised (reservation
/// safety). Thinking is also left out where the messages API would refuse the request:
/// with a forced tool call, and when the last assistant turn calls tools without the
/// signed thinking that must open it (history from a protocol that does not keep it).
fn thinking_budget(req: &ir::Request, max_tokens: u64, messages: &[Value]) -> Option<u64> {
    let r = req.reasoning.as_ref().filter(|r| !r.disabled)?;
    let budget = r.budget().min(max_tokens.saturating_sub(1));
    if budget < MIN_THINKING_BUDGET {
        return None;
    }
    if !req.tools.is_empty()
        && matches!(
            req.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Tool(_))
        )
    {
        return None;
    }
    let last_assistant = messages.iter().rev().find(|m| m["role"] == "assistant");
    if let Some(Value::Array(content)) = last_assistant.map(|m| &m["content"]) {
        let calls_tools = content.iter().any(|b| b["type"] == "tool_use");
        let opens_with_thinking = content
            .first()
            .is_some_and(|b| b["type"] == "thinking" || b["type"] == "redacted_thinking");
        if calls_tools && !opens_with_thinking {
            return None;
        }
    }
    Some(budget)
}

#[cfg(test)]
#[path = "from_ir_tests.rs"]
mod tests;
