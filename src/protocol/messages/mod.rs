//! The messages protocol (`/v1/messages`, spec 4.17): validation, conversion to and
//! from [`ir`], streams, and same-protocol passthrough with usage capture.
//!
//! Client side: [`validate`], [`to_ir`], [`render_response`], [`encoder`],
//! [`error_event`]. Upstream side: [`from_ir`], [`parse_response`], [`decoder`].
//! Same protocol: [`passthrough_request`], [`passthrough_response`],
//! [`passthrough_stream`].

mod decoder;
mod encoder;
mod from_ir;
mod passthrough;
mod response;
mod to_ir;
mod validate;
pub mod wire;

#[cfg(test)]
mod test_support;
#[cfg(test)]
#[path = "usage_tests.rs"]
mod usage_tests;

use super::ir::{self, FinishReason, StreamDecoder, StreamEncoder};
use super::lenient::{Count, Member};
use super::{
    Invalid, RequestOptions, ResponseContext, StreamContext, StreamTranslator, TranslateError,
    UpstreamRequest, Usage,
};
use serde_json::{json, Value};
use wire::usage::MessageUsage;

/// The one upstream path of the protocol.
const PATH: &str = "/v1/messages";

// ---- client side ----

/// Spec 4.17 and 8: `model`, `messages`, `max_tokens` >= 1 required; roles
/// `user|assistant`; `temperature` in 0..=1; field types. `param` names the field.
pub fn validate(body: &Value) -> Result<(), Invalid> {
    validate::validate(body)
}

/// A client's messages request as the neutral request (cross-protocol only). Content
/// and tools the other protocols cannot carry are refused with a 400 naming them.
pub fn to_ir(body: Value) -> Result<ir::Request, Invalid> {
    to_ir::to_ir(&body)
}

/// A neutral answer as a messages response body, under the client's model name.
pub fn render_response(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    response::render(resp, ctx)
}

/// Neutral stream events → the messages event stream the anthropic SDKs accumulate.
pub fn encoder(ctx: &StreamContext) -> Box<dyn StreamEncoder> {
    Box::new(encoder::Encoder::new(ctx))
}

/// The terminal error event of a messages stream (`event: error`).
pub fn error_event(message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_event(
        &mut out,
        "error",
        &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
    );
    out
}

// ---- upstream side ----

/// A neutral request as a request to a messages upstream.
pub fn from_ir(req: &ir::Request, opts: &RequestOptions) -> Result<UpstreamRequest, Invalid> {
    from_ir::from_ir(req, opts)
}

/// A messages upstream's whole answer as a neutral response.
pub fn parse_response(body: &[u8]) -> Result<ir::Response, TranslateError> {
    response::parse(body)
}

/// A messages upstream's event stream → neutral events.
pub fn decoder() -> Box<dyn StreamDecoder> {
    Box::new(decoder::Decoder::new())
}

// ---- same protocol ----

/// The body as the client sent it (unknown fields included), with only the model
/// replaced by the upstream's.
pub fn passthrough_request(body: Value, opts: &RequestOptions) -> UpstreamRequest {
    passthrough::request(body, opts)
}

/// An upstream answer with the client's model name, and its usage.
pub fn passthrough_response(
    body: &[u8],
    client_model: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    passthrough::response(body, client_model)
}

/// A messages stream forwarded event by event, with the client's model name.
pub fn passthrough_stream(ctx: StreamContext) -> Box<dyn StreamTranslator> {
    Box::new(passthrough::Stream::new(ctx))
}

// ---- shared by the files of this module ----

use super::invalid;

/// Usage as the messages protocol counts it, summed over a stream's events (the wire
/// object is [`MessageUsage`]): `input` EXCLUDES cache reads and cache writes, unlike
/// [`Usage::input_tokens`] which counts every prompt token.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct WireUsage {
    input: u64,
    cache_read: u64,
    cache_creation: u64,
    /// The writes by lifetime, once the upstream broke them down: their sum is then the
    /// write total.
    by_lifetime: Option<Lifetimes>,
    output: u64,
    web_searches: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Lifetimes {
    five_minutes: u64,
    one_hour: u64,
}

impl WireUsage {
    /// Overwrites the figures `u` states. Stream events carry totals, not increments:
    /// `message_start` the input figures, `message_delta` the cumulative output (and,
    /// from newer upstreams, final input figures too).
    fn merge(&mut self, u: &MessageUsage) {
        let set = |field: &mut u64, n: Count| {
            if let Some(n) = n.0 {
                *field = n;
            }
        };
        set(&mut self.input, u.input_tokens);
        set(&mut self.cache_read, u.cache_read_input_tokens);
        set(&mut self.cache_creation, u.cache_creation_input_tokens);
        set(&mut self.output, u.output_tokens);
        if let Some(c) = u.cache_creation.object() {
            let l = self.by_lifetime.get_or_insert_with(Lifetimes::default);
            set(&mut l.five_minutes, c.ephemeral_5m_input_tokens);
            set(&mut l.one_hour, c.ephemeral_1h_input_tokens);
        }
        if let Some(s) = u.server_tool_use.object() {
            set(&mut self.web_searches, s.web_search_requests);
        }
    }

    /// The usage a member states; none when it is not an object.
    fn of(u: &Member<MessageUsage>) -> WireUsage {
        let mut w = WireUsage::default();
        if let Some(u) = u.object() {
            w.merge(u);
        }
        w
    }

    fn from_usage(u: &Usage) -> WireUsage {
        let one_hour = u.cache_write_1h_tokens.min(u.cache_creation_input_tokens);
        WireUsage {
            input: u
                .input_tokens
                .saturating_sub(u.cached_input_tokens)
                .saturating_sub(u.cache_creation_input_tokens),
            cache_read: u.cached_input_tokens,
            cache_creation: u.cache_creation_input_tokens,
            by_lifetime: Some(Lifetimes {
                five_minutes: u.cache_creation_input_tokens - one_hour,
                one_hour,
            }),
            output: u.output_tokens,
            web_searches: u.web_search_requests,
        }
    }

    /// The cache writes: the sum by lifetime when the upstream broke them down.
    fn written(&self) -> u64 {
        self.by_lifetime.map_or(self.cache_creation, |l| {
            l.five_minutes.saturating_add(l.one_hour)
        })
    }

    fn to_usage(self) -> Usage {
        let written = self.written();
        Usage {
            input_tokens: self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(written),
            output_tokens: self.output,
            cached_input_tokens: self.cache_read,
            cache_creation_input_tokens: written,
            cache_write_1h_tokens: self.by_lifetime.map_or(0, |l| l.one_hour),
            // The messages protocol does not report the thinking share separately.
            reasoning_tokens: 0,
            web_search_requests: self.web_searches,
            ..Usage::default()
        }
    }

    /// The members of a usage object the gateway writes beyond the four counts, each
    /// only when it has something to say (answers without them keep their old shape):
    /// the writes by lifetime when some are kept an hour (otherwise all are 5-minute
    /// ones, the API's default), and the web searches when there were some.
    fn add_details(&self, usage: &mut serde_json::Map<String, Value>) {
        if let Some(l) = self.by_lifetime.filter(|l| l.one_hour > 0) {
            usage.insert(
                "cache_creation".into(),
                json!({
                    "ephemeral_5m_input_tokens": l.five_minutes,
                    "ephemeral_1h_input_tokens": l.one_hour,
                }),
            );
        }
        if self.web_searches > 0 {
            usage.insert(
                "server_tool_use".into(),
                json!({"web_search_requests": self.web_searches}),
            );
        }
    }
}

/// `stop_reason` and `stop_sequence` for a finish reason. A natural stop after tool
/// calls is `tool_use`: that is what tells an agent loop to run the tools.
fn stop_reason(finish: Option<&FinishReason>, has_tool_calls: bool) -> (&'static str, Value) {
    let natural = if has_tool_calls {
        "tool_use"
    } else {
        "end_turn"
    };
    match finish {
        None | Some(FinishReason::Stop) | Some(FinishReason::Other(_)) => (natural, Value::Null),
        Some(FinishReason::Length) => ("max_tokens", Value::Null),
        Some(FinishReason::ToolCalls) => ("tool_use", Value::Null),
        Some(FinishReason::StopSequence(s)) => (
            "stop_sequence",
            s.as_ref().map_or(Value::Null, |s| Value::String(s.clone())),
        ),
        Some(FinishReason::ContentFilter) => ("refusal", Value::Null),
    }
}

/// The inverse of [`stop_reason`], for upstream answers.
fn finish_reason(stop_reason: &str, stop_sequence: Option<&str>) -> FinishReason {
    match stop_reason {
        "end_turn" => FinishReason::Stop,
        // The context window filled up: the answer was cut, as with the output limit.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "stop_sequence" => FinishReason::StopSequence(stop_sequence.map(str::to_string)),
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// One server-sent event as the messages protocol writes them.
fn write_event(out: &mut Vec<u8>, name: &str, data: &Value) {
    super::sse::write_event(out, Some(name), &data.to_string());
}

/// A tool call id the messages protocol accepts (`^[a-zA-Z0-9_-]+$`). Deterministic, so
/// a `tool_use` id and the `tool_result` naming it map to the same string.
fn sanitize_id(id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "toolu_".to_string()
    } else {
        clean
    }
}
