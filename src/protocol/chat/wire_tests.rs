use super::*;
use crate::protocol::limit::testing::{relayed, same_except, same_text_except};
use serde_json::json;

const F: &str = MAX_COMPLETION_TOKENS;

/// parse → set_output_limit → serialize.
fn capped(body: &Value, cap: u64, chat_field: &str) -> Value {
    let text = body.to_string();
    let mut r: Request<'_> = serde_json::from_str(&text).unwrap();
    r.set_output_limit(cap, chat_field);
    let typed = serde_json::to_value(&r).unwrap();
    // The relay's path: the same view over a parsed body, members kept in order.
    let mut v = body.clone();
    crate::protocol::set_output_limit(crate::protocol::Protocol::Chat, &mut v, cap, chat_field)
        .unwrap();
    assert_eq!(v, typed);
    v
}

#[test]
fn chat_fields() {
    let b = json!({"max_tokens": 500});
    assert_eq!(output_limit(&b), Some(500));
    assert_eq!(capped(&b, 100, F), json!({"max_tokens": 100}));
    assert_eq!(
        capped(&json!({}), 7, F),
        json!({"max_completion_tokens": 7})
    );
    let b = json!({"max_completion_tokens": 5});
    assert_eq!(capped(&b, 7, F), b, "never raised");
    let b = json!({"max_completion_tokens": 50});
    assert_eq!(
        capped(&b, 7, MAX_TOKENS),
        json!({"max_completion_tokens": 7, "max_tokens": 7})
    );
    let b = json!({"max_tokens": 3});
    assert_eq!(capped(&b, 7, F), b, "never raised");
}

#[test]
fn the_smaller_of_the_two_members() {
    let b = json!({"max_tokens": 2048, "max_completion_tokens": 1024});
    assert_eq!(output_limit(&b), Some(1024));
    let r = Request::deserialize(b).unwrap();
    assert_eq!(r.output_limit(), Some(1024));
    assert_eq!(output_limit(&json!({"max_tokens": null})), None);
}

#[test]
fn limit_plan_lowers_what_was_written() {
    assert_eq!(limit_plan(|_| None, 9, F), vec![(F, 9)]);
    let mt = |f: &str| (f == "max_tokens").then_some(20);
    assert_eq!(limit_plan(mt, 9, F), vec![("max_tokens", 9)]);
    let small = |f: &str| (f == "max_tokens").then_some(5);
    assert_eq!(limit_plan(small, 9, F), vec![], "never raised");
    let mct = |f: &str| (f == F).then_some(5);
    assert_eq!(
        limit_plan(mct, 9, "max_tokens"),
        vec![("max_tokens", 5)],
        "a max_tokens channel is told the client's own smaller limit"
    );
}

#[test]
fn choices_of_n() {
    assert_eq!(choices(&json!({"n": 4})), 4);
    assert_eq!(choices(&json!({"n": 0})), 1);
    assert_eq!(choices(&json!({})), 1);
    let r = Request::deserialize(json!({"n": 3})).unwrap();
    assert_eq!(r.choices(), 3);
}

#[test]
fn round_trip_changes_only_the_limit() {
    let body = json!({
        "model": "gpt-x",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi \u{e9}"}]}],
        "max_tokens": null,
        "max_completion_tokens": 900,
        "n": 2,
        "stream": true,
        "stream_options": {"include_usage": false, "nested": {"a": [1, 2.5, "x"]}},
        "temperature": 0.25,
        "a_future_member": {"deep": [{"k": null}, 1e3]}
    });
    for field in LIMIT_FIELDS {
        let out = capped(&body, 100, field);
        let changed: &[&str] = if field == MAX_TOKENS {
            &LIMIT_FIELDS
        } else {
            &[MAX_COMPLETION_TOKENS]
        };
        same_except(&body, &out, changed, "body");
        assert_eq!(out[MAX_COMPLETION_TOKENS], 100);
    }
    let out = capped(&body, 1000, F);
    same_except(&body, &out, &[], "body");
}

/// A request naming every member the gateway acts on (model, both limits, `n`, `stream`,
/// `stream_options`, tools and the tool choice): through the typed view, every member
/// but the limits keeps its text byte for byte; on the relay's path the whole body is
/// the client's text with only the limits lowered.
#[test]
fn every_member_the_gateway_acts_on_round_trips_as_written() {
    let text = r#"{"model":"gpt-x","messages":[{"role":"user","content":"hi é \"q\""}],"max_completion_tokens":900,"max_tokens":2000,"n":2,"stream":true,"stream_options":{"include_usage":false,"x":[1,2.5,null]},"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"temperature":0.25,"a_future_member":{"deep":[{"k":null}]}}"#;
    let mut r: Request<'_> = serde_json::from_str(text).unwrap();
    assert!(matches!(r.model, Some(Cow::Borrowed("gpt-x"))));
    assert_eq!((r.output_limit(), r.choices()), (Some(900), 2));
    assert!(r.stream());
    assert!(!r.client_wants_usage());
    r.set_output_limit(100, F);
    let out = serde_json::to_string(&r).unwrap();
    same_text_except(text, &out, &LIMIT_FIELDS);
    let relayed = relayed(crate::protocol::Protocol::Chat, text, 100, F);
    let want = text
        .replace(
            r#""max_completion_tokens":900"#,
            r#""max_completion_tokens":100"#,
        )
        .replace(r#""max_tokens":2000"#, r#""max_tokens":100"#);
    assert_eq!(relayed, want);
    // Nothing to lower: the body is the client's text.
    assert_eq!(relayed_unchanged(text), text);
}

fn relayed_unchanged(text: &str) -> String {
    relayed(crate::protocol::Protocol::Chat, text, 5000, F)
}

/// `stream_options.include_usage`, read where the client wrote it.
#[test]
fn the_client_asks_for_usage_in_stream_options() {
    let asks = |body: Value| {
        let r = Request::deserialize(&body).unwrap();
        assert_eq!(r.client_wants_usage(), wants_usage(&body), "{body}");
        r.client_wants_usage()
    };
    assert!(asks(json!({"stream_options": {"include_usage": true}})));
    assert!(!asks(json!({"stream_options": {"include_usage": false}})));
    assert!(!asks(json!({"stream_options": {"include_usage": "yes"}})));
    assert!(!asks(json!({"stream_options": null})));
    assert!(!asks(json!({"stream": true})));
}
