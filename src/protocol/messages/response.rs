//! Whole answers: a neutral response rendered as a messages response (client side), and
//! a messages upstream's response parsed into a neutral one (upstream side).

use super::wire::answer::{ContentBlock, Message};
use super::{finish_reason, stop_reason, WireUsage};
use crate::protocol::ir::{self, Part};
use crate::protocol::lenient::{Member, Text};
use crate::protocol::{ResponseContext, TranslateError};
use serde_json::{json, Value};

pub fn render(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    let mut ids = CallIds::new(ctx.request_id);
    let content: Vec<Value> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) if t.is_empty() => None,
            Part::Text(t) => Some(json!({"type": "text", "text": t})),
            // A thinking block always has a signature field; unsigned reasoning from
            // another protocol gets an empty one (and is left out if sent back upstream).
            Part::Thinking { text, signature } => Some(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature.as_deref().unwrap_or(""),
            })),
            Part::RedactedThinking(data) => {
                Some(json!({"type": "redacted_thinking", "data": data}))
            }
            Part::ToolCall(c) => Some(json!({
                "type": "tool_use",
                "id": ids.client_id(&c.id, c.signature.as_deref()),
                "name": c.name,
                "input": ir::arguments_object(&c.arguments),
            })),
            // An assistant answer holds neither; no messages block could carry them.
            Part::Image(_) | Part::ToolResult(_) => None,
        })
        .collect();
    let has_calls = resp.content.iter().any(|p| matches!(p, Part::ToolCall(_)));
    let (reason, sequence) = stop_reason(resp.finish.as_ref(), has_calls);
    let u = WireUsage::from_usage(&resp.usage);
    let mut usage = serde_json::Map::new();
    usage.insert("input_tokens".into(), u.input.into());
    usage.insert("output_tokens".into(), u.output.into());
    usage.insert(
        "cache_creation_input_tokens".into(),
        u.cache_creation.into(),
    );
    usage.insert("cache_read_input_tokens".into(), u.cache_read.into());
    u.add_details(&mut usage);
    let body = json!({
        "id": format!("msg_{}", ctx.request_id),
        "type": "message",
        "role": "assistant",
        "model": ctx.client_model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Client-facing tool call ids: the upstream's id with its signature joined in
/// ([`ir::join_call_id`]), or, when the upstream gave none, one made from the request id
/// and the call's position, so the same answer always gets the same ids.
pub(super) struct CallIds {
    prefix: String,
    made: usize,
}

impl CallIds {
    pub(super) fn new(request_id: &str) -> CallIds {
        CallIds {
            prefix: format!("toolu_{}", super::sanitize_id(request_id)),
            made: 0,
        }
    }

    pub(super) fn client_id(&mut self, id: &str, signature: Option<&str>) -> String {
        let n = self.made;
        self.made += 1;
        if id.is_empty() {
            ir::join_call_id(&format!("{}_{n}", self.prefix), signature)
        } else {
            ir::join_call_id(id, signature)
        }
    }
}

pub fn parse(body: &[u8]) -> Result<ir::Response, TranslateError> {
    let v: Member<Message<'_>> = serde_json::from_slice(body)?;
    let v = v.object().ok_or(TranslateError::Shape("not an object"))?;
    if v.kind.as_str() != Some("message") {
        return Err(TranslateError::Shape("not a message"));
    }
    let blocks = v
        .content
        .0
        .as_deref()
        .ok_or(TranslateError::Shape("no content"))?;
    let content = blocks.iter().filter_map(block_part).collect();
    let finish = v
        .stop_reason
        .as_str()
        .map(|r| finish_reason(r, v.stop_sequence.as_str()));
    Ok(ir::Response {
        content,
        finish,
        usage: WireUsage::of(&v.usage).to_usage(),
    })
}

/// A content block of an answer as a pivot part; `None` for the kinds the pivot has no
/// part for.
fn block_part(b: &ContentBlock<'_>) -> Option<Part> {
    let str_of = |t: &Text<'_>| t.or_empty().to_string();
    Some(match b.kind.as_str()? {
        "text" => Part::Text(str_of(&b.text)),
        "thinking" => Part::Thinking {
            text: str_of(&b.thinking),
            signature: b
                .signature
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        },
        "redacted_thinking" => Part::RedactedThinking(str_of(&b.data)),
        "tool_use" => Part::ToolCall(ir::ToolCall {
            id: str_of(&b.id),
            name: str_of(&b.name),
            arguments: match &b.input {
                Value::Null => "{}".to_string(),
                input => input.to_string(),
            },
            signature: None,
        }),
        // Server tool blocks only come from server tools, which are never sent.
        _ => return None,
    })
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
