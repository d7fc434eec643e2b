//! The members of a responses request the gateway reads or changes, typed: the model and the
//! output limit (`max_output_tokens`). Everything else rides in `rest`. The answer's views
//! (usage, stream events) are in [`answer`].

pub mod answer;

use super::super::limit::{self, Limit};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

pub const LIMIT_FIELD: &str = "max_output_tokens";

/// A responses request, typed where the gateway acts on it.
#[derive(Debug, Deserialize, Serialize)]
pub struct Request<'a> {
    #[serde(borrow, default, deserialize_with = "limit::borrowed")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<Limit>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Request<'_> {
    pub fn output_limit(&self) -> Option<u64> {
        limit::tokens(&self.max_output_tokens)
    }

    /// Lowers (never raises) the limit to `cap`, adding it when absent.
    pub fn set_output_limit(&mut self, cap: u64) {
        limit::lower(&mut self.max_output_tokens, cap);
    }
}

/// The output limit of a parsed body (read in place, nothing copied).
pub fn output_limit(body: &Map<String, Value>) -> Option<u64> {
    body.get(LIMIT_FIELD).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::limit::testing::{relayed, same_except, same_text_except};
    use serde_json::json;

    /// A request naming every member the gateway acts on (model, `max_output_tokens`,
    /// `stream`, tools and the tool choice): through the typed view, every member but the
    /// limit keeps its text byte for byte; on the relay's path the whole body is the
    /// client's text with only the limit lowered.
    #[test]
    fn every_member_the_gateway_acts_on_round_trips_as_written() {
        let text = r#"{"model":"gpt-x","max_output_tokens":4000,"stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"hi é"}]}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"}],"tool_choice":"auto","reasoning":{"effort":"low","summary":"auto"},"store":false,"previous_response_id":null}"#;
        let mut r: Request<'_> = serde_json::from_str(text).unwrap();
        assert!(matches!(r.model, Some(Cow::Borrowed("gpt-x"))));
        assert_eq!(r.output_limit(), Some(4000));
        r.set_output_limit(100);
        let out = serde_json::to_string(&r).unwrap();
        same_text_except(text, &out, &[LIMIT_FIELD]);
        let p = crate::protocol::Protocol::Responses;
        assert_eq!(
            relayed(p, text, 100, ""),
            text.replace(r#""max_output_tokens":4000"#, r#""max_output_tokens":100"#)
        );
        assert_eq!(relayed(p, text, 5000, ""), text);
    }

    fn capped(body: &Value, cap: u64) -> Value {
        let text = body.to_string();
        let mut r: Request<'_> = serde_json::from_str(&text).unwrap();
        assert_eq!(r.output_limit(), output_limit(body.as_object().unwrap()));
        r.set_output_limit(cap);
        let typed = serde_json::to_value(&r).unwrap();
        // The relay's path: the same view over a parsed body, members kept in order.
        let mut v = body.clone();
        crate::protocol::set_output_limit(crate::protocol::Protocol::Responses, &mut v, cap, "")
            .unwrap();
        assert_eq!(v, typed);
        v
    }

    #[test]
    fn lowered_never_raised_added_when_absent() {
        let m = capped(&json!({"max_output_tokens": 1000}), 10);
        assert_eq!(output_limit(m.as_object().unwrap()), Some(10));
        assert_eq!(
            capped(&json!({"max_output_tokens": 5}), 10),
            json!({"max_output_tokens": 5})
        );
        assert_eq!(capped(&json!({}), 3), json!({"max_output_tokens": 3}));
        assert_eq!(
            capped(&json!({"max_output_tokens": null}), 3),
            json!({"max_output_tokens": 3})
        );
    }

    #[test]
    fn round_trip_changes_only_the_limit() {
        let body = json!({
            "model": "m-1",
            "max_output_tokens": 4000,
            "stream": true,
            "input": [{"role": "user", "content": [{"type": "text", "text": "hi \u{e9}"}]}],
            "metadata": {"user_id": "u", "nested": {"a": [1, 2.5, null]}},
            "a_future_member": {"deep": [{"k": null}, 1e3]}
        });
        let out = capped(&body, 100);
        same_except(&body, &out, &[LIMIT_FIELD], "body");
        assert_eq!(out[LIMIT_FIELD], 100);
        same_except(&body, &capped(&body, 5000), &[], "body");
    }
}
