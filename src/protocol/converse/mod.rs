//! Amazon Bedrock's Converse API (Amazon Bedrock API Reference, Bedrock Runtime:
//! Converse and ConverseStream), upstream only: one request and answer shape for every
//! model Bedrock hosts (Claude, Llama, Nova, Mistral), reached from every client
//! protocol through [`ir`]. A stream is AWS's binary event-stream framing, not
//! server-sent events ([`decoder`]).
//!
//! Upstream side: [`from_ir`], [`parse_response`], [`decoder`]. No client speaks it: the
//! client-side entry points of [`super`] refuse it with an error.

mod decoder;
mod from_ir;
mod response;
pub mod wire;

#[cfg(test)]
mod tests;

use super::ir::{self, FinishReason, StreamDecoder};
use super::{Invalid, RequestOptions, TranslateError, UpstreamRequest, Usage};
use serde_json::Value;
use std::collections::BTreeSet;

pub use decoder::{FrameDecoder, FrameError};

/// Where the client asked for a prompt cache (the messages protocol's `cache_control`
/// marks): a Converse `cachePoint` goes after each of these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheMarks {
    pub system: bool,
    pub tools: bool,
    /// Indices of the request's messages whose content ends a cached prefix.
    pub messages: BTreeSet<usize>,
}

/// The cache marks of a messages-protocol request body: a block of `system`, a tool, or
/// a block of a message that carries `cache_control`.
pub fn cache_marks(messages_body: &Value) -> CacheMarks {
    let marked = |v: &Value| v.get("cache_control").is_some_and(|c| !c.is_null());
    let any = |v: Option<&Value>| {
        v.and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(marked))
    };
    let mut marks = CacheMarks {
        system: any(messages_body.get("system")),
        tools: any(messages_body.get("tools")),
        messages: BTreeSet::new(),
    };
    if let Some(msgs) = messages_body.get("messages").and_then(Value::as_array) {
        for (i, m) in msgs.iter().enumerate() {
            if any(m.get("content")) {
                marks.messages.insert(i);
            }
        }
    }
    marks
}

/// A neutral request as a Converse (or ConverseStream) request.
pub fn from_ir(
    req: &ir::Request,
    opts: &RequestOptions,
    marks: &CacheMarks,
) -> Result<UpstreamRequest, Invalid> {
    from_ir::from_ir(req, opts, marks)
}

/// A Converse answer as a neutral response.
pub fn parse_response(body: &[u8]) -> Result<ir::Response, TranslateError> {
    response::parse(body)
}

/// A ConverseStream answer (event-stream frames) → neutral events.
pub fn decoder() -> Box<dyn StreamDecoder> {
    Box::new(decoder::Decoder::new())
}

/// The path of a model's Converse API: `/model/{modelId}/converse` or
/// `/converse-stream`, the model id percent-encoded (a `:` in a version, the `/` of an
/// ARN).
pub fn path(model: &str, stream: bool) -> String {
    let mut p = String::from("/model/");
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            p.push(b as char);
        } else {
            p.push_str(&format!("%{b:02X}"));
        }
    }
    p.push_str(if stream {
        "/converse-stream"
    } else {
        "/converse"
    });
    p
}

/// A Converse `stopReason` as a neutral finish reason (Amazon Bedrock API Reference:
/// Converse, `stopReason`).
fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "stop_sequence" => FinishReason::StopSequence(None),
        "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// Converse usage as the gateway counts it: every prompt token in `input_tokens`
/// (Converse's `inputTokens` leaves out the cache reads and writes).
fn usage(u: &wire::TokenUsage) -> Usage {
    Usage {
        input_tokens: u
            .input_tokens
            .saturating_add(u.cache_read_input_tokens)
            .saturating_add(u.cache_write_input_tokens),
        output_tokens: u.output_tokens,
        cached_input_tokens: u.cache_read_input_tokens,
        cache_creation_input_tokens: u.cache_write_input_tokens,
        ..Usage::default()
    }
}
