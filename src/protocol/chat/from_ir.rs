//! The pivot → a request for an OpenAI-style upstream, for a client of another protocol.
//!
//! Lossy by necessity, each loss harmless to the answer: thinking blocks are not sent
//! back (chat has no field for them, and their signatures only matter to the messages
//! protocol), `top_k` has no chat field, and a tool result's error flag has none either
//! (its text says what went wrong).

use crate::protocol::ir::{self, Part, ResponseFormat, Role, ToolChoice};
use crate::protocol::{Invalid, RequestOptions, UpstreamRequest};
use serde_json::{json, Map, Value};

/// Separator for text parts that chat must carry as one string.
const JOIN: &str = "\n\n";

pub fn from_ir(req: &ir::Request, opts: &RequestOptions) -> Result<UpstreamRequest, Invalid> {
    let mut b = Map::new();
    b.insert("model".into(), opts.upstream_model.into());
    b.insert("messages".into(), Value::Array(messages(req)));
    if let Some(n) = req.max_tokens {
        b.insert(opts.chat_limit_field.into(), n.into());
    }
    put(&mut b, "temperature", req.temperature);
    put(&mut b, "top_p", req.top_p);
    if !req.stop.is_empty() {
        b.insert("stop".into(), json!(req.stop));
    }
    put(&mut b, "seed", req.seed);
    put(&mut b, "presence_penalty", req.presence_penalty);
    put(&mut b, "frequency_penalty", req.frequency_penalty);
    if !req.tools.is_empty() {
        let tools = req.tools.iter().map(tool).collect();
        b.insert("tools".into(), Value::Array(tools));
    }
    if let Some(tc) = &req.tool_choice {
        b.insert("tool_choice".into(), tool_choice(tc));
    }
    put(&mut b, "parallel_tool_calls", req.parallel_tool_calls);
    if let Some(r) = req.reasoning.filter(|r| !r.disabled) {
        b.insert("reasoning_effort".into(), r.effort().as_str().into());
    }
    if let Some(rf) = &req.response_format {
        b.insert("response_format".into(), response_format(rf));
    }
    if let Some(u) = &req.user {
        b.insert("user".into(), u.as_str().into());
    }
    if opts.stream {
        b.insert("stream".into(), true.into());
        // Billing needs the usage chunk whatever the client asked for.
        b.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(UpstreamRequest {
        body: serde_json::to_vec(&Value::Object(b)).unwrap_or_default(),
        path: "/v1/chat/completions".into(),
        client_wants_usage: false,
    })
}

fn put<T: Into<Value>>(b: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        b.insert(key.into(), v.into());
    }
}

fn messages(req: &ir::Request) -> Vec<Value> {
    let mut out = Vec::new();
    if !req.system.is_empty() {
        out.push(json!({"role": "system", "content": req.system.join(JOIN)}));
    }
    for m in &req.messages {
        match m.role {
            Role::User => user_turn(&m.content, &mut out),
            Role::Assistant => out.push(assistant_turn(&m.content)),
        }
    }
    out
}

/// A User turn: its tool results become `tool` messages first (chat wants them right
/// after the assistant's calls), then the rest becomes one `user` message.
fn user_turn(content: &[Part], out: &mut Vec<Value>) {
    // Chat tool messages carry text only: a result's images follow in the user message
    // so the model still sees them.
    let mut moved_images = Vec::new();
    let mut rest = Vec::new();
    for p in content {
        match p {
            Part::ToolResult(r) => {
                let mut texts = Vec::new();
                for c in &r.content {
                    match c {
                        Part::Text(t) => texts.push(t.as_str()),
                        Part::Image(_) => moved_images.push(c),
                        _ => {}
                    }
                }
                out.push(json!({
                    "role": "tool",
                    "tool_call_id": r.call_id,
                    "content": texts.join(JOIN),
                }));
            }
            Part::Text(_) | Part::Image(_) => rest.push(p),
            // Calls and thinking do not belong in a user turn; nothing to carry.
            Part::ToolCall(_) | Part::Thinking { .. } | Part::RedactedThinking(_) => {}
        }
    }
    let parts: Vec<&Part> = moved_images.into_iter().chain(rest).collect();
    if parts.is_empty() {
        return;
    }
    let content = if parts.iter().all(|p| matches!(p, Part::Text(_))) {
        Value::String(joined_text(parts.iter().copied()))
    } else {
        Value::Array(parts.iter().filter_map(|p| user_part(p)).collect())
    };
    out.push(json!({"role": "user", "content": content}));
}

fn user_part(p: &Part) -> Option<Value> {
    match p {
        Part::Text(t) => Some(json!({"type": "text", "text": t})),
        Part::Image(i) => Some(json!({"type": "image_url", "image_url": {"url": i.to_url()}})),
        _ => None,
    }
}

fn joined_text<'a>(parts: impl Iterator<Item = &'a Part>) -> String {
    let texts: Vec<&str> = parts
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    texts.join(JOIN)
}

fn assistant_turn(content: &[Part]) -> Value {
    let calls: Vec<Value> = content
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall(c) => Some(json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })),
            _ => None,
        })
        .collect();
    let has_text = content.iter().any(|p| matches!(p, Part::Text(_)));
    let text = if has_text {
        Value::String(joined_text(content.iter()))
    } else if calls.is_empty() {
        // Chat requires content on an assistant message without tool calls (a turn that
        // held only thinking).
        Value::String(String::new())
    } else {
        Value::Null
    };
    let mut m = Map::new();
    m.insert("role".into(), "assistant".into());
    m.insert("content".into(), text);
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(m)
}

fn tool(t: &ir::Tool) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), t.name.as_str().into());
    if let Some(d) = &t.description {
        f.insert("description".into(), d.as_str().into());
    }
    f.insert("parameters".into(), t.parameters.clone());
    json!({"type": "function", "function": f})
}

fn tool_choice(tc: &ToolChoice) -> Value {
    match tc {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::None => "none".into(),
        ToolChoice::Required => "required".into(),
        ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

fn response_format(rf: &ResponseFormat) -> Value {
    match rf {
        ResponseFormat::Text => json!({"type": "text"}),
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => {
            let mut js = Map::new();
            js.insert("name".into(), name.as_str().into());
            js.insert("schema".into(), schema.clone());
            if let Some(s) = strict {
                js.insert("strict".into(), (*s).into());
            }
            json!({"type": "json_schema", "json_schema": js})
        }
    }
}

#[cfg(test)]
mod tests;
