//! A Converse answer (Amazon Bedrock API Reference: Converse, response elements) parsed
//! into a neutral one.

use super::wire::{ContentBlock, Response};
use super::{finish_reason, usage};
use crate::protocol::ir::{self, Part, ToolCall};
use crate::protocol::TranslateError;

pub fn parse(body: &[u8]) -> Result<ir::Response, TranslateError> {
    let r: Response = serde_json::from_slice(body)?;
    let message = r
        .output
        .message
        .ok_or(TranslateError::Shape("no output.message"))?;
    let content = message.content.into_iter().filter_map(part).collect();
    Ok(ir::Response {
        content,
        finish: r.stop_reason.as_deref().map(finish_reason),
        usage: r.usage.as_ref().map(usage).unwrap_or_default(),
    })
}

/// One content block of the answer: text, a tool call, reasoning; what an answer does
/// not hold (images, documents, cache points) is left out.
fn part(b: ContentBlock) -> Option<Part> {
    if let Some(t) = b.text {
        return Some(Part::Text(t));
    }
    if let Some(u) = b.tool_use {
        return Some(Part::ToolCall(ToolCall {
            id: u.tool_use_id,
            name: u.name,
            arguments: serde_json::to_string(&u.input).unwrap_or_else(|_| "{}".into()),
            signature: None,
        }));
    }
    if let Some(r) = b.reasoning_content {
        if let Some(t) = r.reasoning_text {
            return Some(Part::Thinking {
                text: t.text,
                signature: t.signature,
            });
        }
        if let Some(data) = r.redacted_content {
            return Some(Part::RedactedThinking(data));
        }
    }
    None
}
