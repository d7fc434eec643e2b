//! The members of a chat request the gateway reads or changes, typed: the model, the
//! output limit (two members), the number of choices, `stream` and its options.
//! Everything else rides in `rest`.
//! The answer's views are in [`answer`] (choices, tool calls, stream chunks, errors)
//! and [`usage`].
//!
//! The rules live once, over a lookup of a member's count, so the typed view and the
//! relay's shallow read of a chat body ([`super::super::shallow::Shallow`]) apply the
//! same one.

pub mod answer;
pub mod usage;

use super::super::limit::{self, Limit};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

pub const MAX_COMPLETION_TOKENS: &str = "max_completion_tokens";
pub const MAX_TOKENS: &str = "max_tokens";
/// The members a chat request names its output limit in.
pub const LIMIT_FIELDS: [&str; 2] = [MAX_COMPLETION_TOKENS, MAX_TOKENS];
pub const CHOICES: &str = "n";

/// A chat request, typed where the gateway acts on it.
#[derive(Debug, Deserialize, Serialize)]
pub struct Request<'a> {
    #[serde(borrow, default, deserialize_with = "limit::borrowed")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<Limit>,
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Limit>,
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<Limit>,
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<Switch>,
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A boolean member as the client wrote it: a boolean, or anything else (`null`, which
/// validation lets through) kept as it came.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Switch {
    Is(bool),
    Other(Value),
}

/// `stream_options` as sent: an object, or anything else (`null`) kept as it came.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum StreamOptions {
    Object(StreamOptionsObject),
    Other(Value),
}

/// The options of a stream (OpenAI API reference, Chat Completions, `stream_options`):
/// `include_usage` asks for the usage chunk the gateway also needs for the bill.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct StreamOptionsObject {
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<Switch>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Request<'_> {
    fn count(&self, name: &str) -> Option<u64> {
        match name {
            MAX_COMPLETION_TOKENS => limit::tokens(&self.max_completion_tokens),
            MAX_TOKENS => limit::tokens(&self.max_tokens),
            CHOICES => limit::tokens(&self.n),
            _ => None,
        }
    }

    pub fn output_limit(&self) -> Option<u64> {
        output_limit_in(|f| self.count(f))
    }

    pub fn choices(&self) -> u64 {
        choices_in(|f| self.count(f))
    }

    /// Whether the answer is to be streamed.
    pub fn stream(&self) -> bool {
        self.stream == Some(Switch::Is(true))
    }

    /// Whether the client itself asked for the usage chunk.
    pub fn client_wants_usage(&self) -> bool {
        match &self.stream_options {
            Some(StreamOptions::Object(o)) => o.include_usage == Some(Switch::Is(true)),
            _ => false,
        }
    }

    /// Lowers the limit to `cap` (see [`limit_plan`]).
    pub fn set_output_limit(&mut self, cap: u64, chat_field: &str) {
        for (f, v) in limit_plan(|f| self.count(f), cap, chat_field) {
            let slot = match f {
                MAX_TOKENS => &mut self.max_tokens,
                _ => &mut self.max_completion_tokens,
            };
            *slot = Some(Limit::Tokens(v));
        }
    }
}

/// The client's output limit: the smaller of the two members when both are set (the
/// reservation is sized from it; a limit is never raised). `count`: a member's value
/// when it is a non-negative integer.
pub fn output_limit_in(count: impl Fn(&str) -> Option<u64>) -> Option<u64> {
    match (count(MAX_COMPLETION_TOKENS), count(MAX_TOKENS)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How many answers the request asks for: `n` (absent, null or 0: one). Each is billed,
/// so each is reserved.
pub fn choices_in(count: impl Fn(&str) -> Option<u64>) -> u64 {
    count(CHOICES).unwrap_or(1).max(1)
}

/// The members to write so that a request carries at most `cap`: the limits the client
/// wrote are lowered in place; when it wrote none, `chat_field` (the member the channel
/// reads) is added. A channel that reads only `max_tokens` always gets `max_tokens`.
pub fn limit_plan(
    count: impl Fn(&str) -> Option<u64>,
    cap: u64,
    chat_field: &str,
) -> Vec<(&'static str, u64)> {
    let written: Vec<u64> = LIMIT_FIELDS.iter().filter_map(|f| count(f)).collect();
    let mut out = Vec::new();
    for f in LIMIT_FIELDS {
        match count(f) {
            Some(cur) if cur > cap => out.push((f, cap)),
            Some(_) => {}
            None if f == chat_field && (written.is_empty() || chat_field == MAX_TOKENS) => {
                let v = written.iter().copied().min().unwrap_or(cap).min(cap);
                out.push((f, v));
            }
            None => {}
        }
    }
    out
}

/// The output limit of a parsed chat body (the members read in place, nothing copied).
pub fn output_limit(body: &Value) -> Option<u64> {
    output_limit_in(|f| body.get(f).and_then(Value::as_u64))
}

pub fn choices(body: &Value) -> u64 {
    choices_in(|f| body.get(f).and_then(Value::as_u64))
}

/// Whether a parsed chat body asks for the usage chunk (`stream_options.include_usage`),
/// read in place as [`Request::client_wants_usage`] reads it.
pub fn wants_usage(body: &Value) -> bool {
    body["stream_options"]["include_usage"].as_bool() == Some(true)
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
