use super::super::validate;
use serde_json::{json, Value};

fn param(v: Value) -> Option<String> {
    validate(&v).expect_err("should be a 400").param
}

#[test]
fn a_minimal_and_a_full_request_pass() {
    assert!(validate(&json!({"model": "gpt-5"})).is_ok());
    let full = json!({
        "model": "gpt-5",
        "instructions": "Be terse.",
        "input": [
            {"role": "developer", "content": "Use metric units."},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is in this image?"},
                {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"}
            ]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look"}], "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {"type": "item_reference", "id": "msg_9"}
        ],
        "max_output_tokens": 1024,
        "temperature": 0.2,
        "top_p": 1,
        "stream": true,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "reasoning": {"effort": "xhigh", "summary": "auto"},
        "previous_response_id": "resp_1",
        "truncation": "disabled",
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "store": false,
        "metadata": {"k": "v"},
        "future_field": {"anything": true}
    });
    assert!(validate(&full).is_ok());
    // `null` optional fields mean "not set".
    assert!(
        validate(&json!({"model": "m", "instructions": null, "max_output_tokens": null})).is_ok()
    );
}

#[test]
fn model_is_required_and_non_empty() {
    assert_eq!(param(json!({"input": "hi"})), Some("model".into()));
    assert_eq!(param(json!({"model": ""})), Some("model".into()));
    assert_eq!(param(json!({"model": 4})), Some("model".into()));
    assert_eq!(validate(&json!([1])).unwrap_err().param, None);
}

#[test]
fn field_types_name_the_field() {
    let cases = [
        (json!({"model": "m", "input": 3}), "input"),
        (json!({"model": "m", "instructions": ["x"]}), "instructions"),
        (
            json!({"model": "m", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
        (
            json!({"model": "m", "max_output_tokens": 1.5}),
            "max_output_tokens",
        ),
        (
            json!({"model": "m", "max_output_tokens": -3}),
            "max_output_tokens",
        ),
        (json!({"model": "m", "temperature": "hot"}), "temperature"),
        (json!({"model": "m", "top_p": true}), "top_p"),
        (json!({"model": "m", "stream": "yes"}), "stream"),
        (json!({"model": "m", "tools": {}}), "tools"),
        (
            json!({"model": "m", "tools": [{"type": "function"}, 3]}),
            "tools[1]",
        ),
        (json!({"model": "m", "tool_choice": 1}), "tool_choice"),
        (json!({"model": "m", "reasoning": "high"}), "reasoning"),
        (
            json!({"model": "m", "reasoning": {"effort": "max"}}),
            "reasoning.effort",
        ),
        (
            json!({"model": "m", "reasoning": {"summary": 1}}),
            "reasoning.summary",
        ),
        (
            json!({"model": "m", "previous_response_id": 5}),
            "previous_response_id",
        ),
        (json!({"model": "m", "truncation": "middle"}), "truncation"),
        (json!({"model": "m", "text": "json"}), "text"),
    ];
    for (body, field) in cases {
        assert_eq!(param(body.clone()), Some(field.into()), "{body}");
    }
    for effort in ["none", "minimal", "low", "medium", "high", "xhigh"] {
        assert!(validate(&json!({"model": "m", "reasoning": {"effort": effort}})).is_ok());
    }
}

#[test]
fn input_items_are_checked_by_index() {
    let with = |item: Value| {
        json!({"model": "m", "input": [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "three"},
            item
        ]})
    };
    assert_eq!(param(with(json!("text"))), Some("input[3]".into()));
    assert_eq!(
        param(with(json!({"role": "user", "content": 7}))),
        Some("input[3].content".into())
    );
    assert_eq!(
        param(with(json!({"role": "user"}))),
        Some("input[3].content".into())
    );
    assert_eq!(
        param(with(json!({"role": "tool", "content": "x"}))),
        Some("input[3].role".into())
    );
    assert_eq!(
        param(with(
            json!({"role": "user", "content": [{"text": "no type"}]})
        )),
        Some("input[3].content[0]".into())
    );
    assert_eq!(
        param(with(json!({"content": "no role, no type"}))),
        Some("input[3].type".into())
    );
    assert_eq!(
        param(with(
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}})
        )),
        Some("input[3].arguments".into())
    );
    assert_eq!(
        param(with(json!({"type": "function_call_output", "output": "x"}))),
        Some("input[3].call_id".into())
    );
    assert_eq!(
        param(with(
            json!({"type": "function_call_output", "call_id": "c", "output": 1})
        )),
        Some("input[3].output".into())
    );
    assert_eq!(
        param(with(json!({"type": "reasoning", "summary": "x"}))),
        Some("input[3].summary".into())
    );
}
