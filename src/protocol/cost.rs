//! The cost on a stream's usage object. When the relay prices usage for the key
//! ([`StreamContext::charge`]), the usage object of the stream's usage event carries
//! `cost_usd`: what the key is charged for the usage that event reports. Without a
//! charge nothing is added, and a stream is byte for byte what it was.

use super::shallow::Shallow;
use super::{usd_json, ChargeOf, StreamContext, Usage};
use serde_json::value::RawValue;
use serde_json::Value;

/// The member a usage object carries the cost in, in every protocol.
pub(crate) const MEMBER: &str = "cost_usd";

impl StreamContext {
    /// `cost_usd` for a usage report; `None` when the stream shows no cost.
    pub fn cost_of(&self, u: &Usage) -> Option<Value> {
        self.charge.as_ref().map(|c| c.usd(u))
    }
}

impl ChargeOf {
    /// What a usage report is charged, as `cost_usd` shows it.
    pub fn usd(&self, u: &Usage) -> Value {
        usd_json(self.of(u))
    }
}

/// `cost_usd` for the usage an upstream reported: `None` when the stream shows no cost,
/// and when the upstream reported none (the bill is an estimate then, not shown here).
pub(crate) fn of_reported(charge: Option<&ChargeOf>, usage: Option<&Usage>) -> Option<Value> {
    Some(charge?.usd(usage?))
}

/// A usage object the gateway writes, with `cost` added when there is one.
pub(crate) fn add(usage: &mut Value, cost: Option<Value>) {
    if let (Some(obj), Some(cost)) = (usage.as_object_mut(), cost) {
        obj.insert(MEMBER.into(), cost);
    }
}

/// An upstream's usage object with `cost` as its `cost_usd` (replacing one the upstream
/// wrote), every other member copied as it came; `None` when it is not an object.
pub(crate) fn add_raw(usage: &RawValue, cost: &Value) -> Option<String> {
    let obj = Shallow::object(usage)?;
    String::from_utf8(obj.write(&[(MEMBER, &cost.to_string())], 0)).ok()
}

/// A charge that weighs every kind of usage differently (micro-USD per unit), so a cost
/// shows which figures it was computed from.
#[cfg(test)]
pub(crate) fn test_charge() -> ChargeOf {
    ChargeOf(std::sync::Arc::new(|u: &Usage| {
        let weighted = u.input_tokens * 3
            + u.cached_input_tokens
            + u.cache_creation_input_tokens * 5
            + u.cache_write_1h_tokens * 7
            + u.output_tokens * 11
            + u.reasoning_tokens * 13
            + u.audio_input_tokens * 17
            + u.audio_output_tokens * 19
            + u.image_input_tokens * 23
            + u.image_output_tokens * 29
            + u.web_search_requests * 10_000;
        weighted as i64
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn a_raw_usage_object_keeps_its_members_and_takes_the_cost_last() {
        let raw: Box<RawValue> =
            serde_json::from_str(r#"{"b": 2, "a":{"x" : [1]},"cost_usd":9}"#).unwrap();
        let out = add_raw(&raw, &usd_json(1_500)).unwrap();
        assert_eq!(out, r#"{"b":2,"a":{"x" : [1]},"cost_usd":0.0015}"#);
        let raw: Box<RawValue> = serde_json::from_str(r#"{"n":1}"#).unwrap();
        let out = add_raw(&raw, &usd_json(2)).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v, json!({"n": 1, "cost_usd": 0.000002}));
        let not_object: Box<RawValue> = serde_json::from_str("[1]").unwrap();
        assert_eq!(add_raw(&not_object, &usd_json(1)), None);
    }

    #[test]
    fn the_cost_is_the_charge_of_the_usage_as_usd() {
        let mut ctx = StreamContext {
            client_model: "m".into(),
            request_id: "r".into(),
            created: 0,
            client_wants_usage: false,
            client_sse: true,
            charge: None,
        };
        let u = Usage {
            input_tokens: 7,
            output_tokens: 5,
            ..Usage::default()
        };
        assert_eq!(ctx.cost_of(&u), None);
        let mut v = json!({"n": 1});
        add(&mut v, ctx.cost_of(&u));
        assert_eq!(v, json!({"n": 1}));
        ctx.charge = Some(ChargeOf(Arc::new(|u: &Usage| {
            (u.input_tokens * 100 + u.output_tokens) as i64
        })));
        assert_eq!(ctx.cost_of(&u), Some(json!(0.000705)));
        add(&mut v, ctx.cost_of(&u));
        assert_eq!(v, json!({"n": 1, "cost_usd": 0.000705}));
    }
}
