use super::*;
use crate::protocol::limit::testing::same_except;
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
