use super::*;
use crate::protocol::ir::{FinishReason, ToolCall};
use crate::protocol::Usage;

fn ctx() -> ResponseContext<'static> {
    ResponseContext {
        client_model: "claude-sonnet-4-5",
        request_id: "0192f3a4b5c6d7e8f9a0b1c2",
        created: 1_700_000_000,
        compact: false,
    }
}

fn call(id: &str, args: &str, signature: Option<&str>) -> Part {
    Part::ToolCall(ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: args.into(),
        signature: signature.map(str::to_string),
    })
}

fn rendered(resp: &ir::Response) -> Value {
    serde_json::from_slice(&render(resp, &ctx())).unwrap()
}

#[test]
fn a_text_answer_is_byte_exact() {
    let resp = ir::Response {
        content: vec![Part::Text("Hello!".into())],
        finish: Some(FinishReason::Stop),
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            cached_input_tokens: 2,
            cache_creation_input_tokens: 3,
            reasoning_tokens: 0,
            ..Usage::default()
        },
    };
    assert_eq!(
        String::from_utf8(render(&resp, &ctx())).unwrap(),
        concat!(
            r#"{"id":"msg_0192f3a4b5c6d7e8f9a0b1c2","type":"message","role":"assistant","#,
            r#""model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello!"}],"#,
            r#""stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"#,
            r#""output_tokens":5,"cache_creation_input_tokens":3,"cache_read_input_tokens":2}}"#
        )
    );
}

#[test]
fn thinking_tool_calls_and_ids_render_as_blocks() {
    let resp = ir::Response {
        content: vec![
            Part::Thinking {
                text: "Signed reasoning.".into(),
                signature: Some("EqQBCkYIBxgC".into()),
            },
            Part::Thinking {
                text: "Reasoning from a chat upstream.".into(),
                signature: None,
            },
            Part::RedactedThinking("EmwKAhgBEgy3va".into()),
            Part::Text(String::new()),
            Part::Text("Checking both.".into()),
            call("call_a", r#"{"city":"Paris"}"#, Some("c2lnbmF0dXJlLTE=")),
            call("", r#"{"city": "Rome"}"#, None),
            call("call_c", "{broken", None),
        ],
        finish: Some(FinishReason::Stop),
        usage: Usage::default(),
    };
    let v = rendered(&resp);
    assert_eq!(
        v["content"],
        json!([
            {"type": "thinking", "thinking": "Signed reasoning.", "signature": "EqQBCkYIBxgC"},
            {"type": "thinking", "thinking": "Reasoning from a chat upstream.", "signature": ""},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "call_a__sig__c2lnbmF0dXJlLTE=", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_0192f3a4b5c6d7e8f9a0b1c2_1", "name": "get_weather", "input": {"city": "Rome"}},
            {"type": "tool_use", "id": "call_c", "name": "get_weather", "input": {}}
        ])
    );
    // A natural stop after tool calls is what tells the agent loop to run them.
    assert_eq!(v["stop_reason"], "tool_use");
    // The signature comes back on the next turn through the id.
    assert_eq!(
        ir::split_call_id(v["content"][4]["id"].as_str().unwrap()),
        ("call_a", Some("c2lnbmF0dXJlLTE="))
    );
}

#[test]
fn finish_reasons_map_to_stop_reasons() {
    let cases = [
        (Some(FinishReason::Stop), "end_turn", Value::Null),
        (None, "end_turn", Value::Null),
        (Some(FinishReason::Length), "max_tokens", Value::Null),
        (Some(FinishReason::ToolCalls), "tool_use", Value::Null),
        (
            Some(FinishReason::StopSequence(Some("END".into()))),
            "stop_sequence",
            json!("END"),
        ),
        (
            Some(FinishReason::StopSequence(None)),
            "stop_sequence",
            Value::Null,
        ),
        (Some(FinishReason::ContentFilter), "refusal", Value::Null),
        (
            Some(FinishReason::Other("RECITATION".into())),
            "end_turn",
            Value::Null,
        ),
    ];
    for (finish, reason, sequence) in cases {
        let v = rendered(&ir::Response {
            content: vec![Part::Text("x".into())],
            finish: finish.clone(),
            usage: Usage::default(),
        });
        assert_eq!(v["stop_reason"], reason, "{finish:?}");
        assert_eq!(v["stop_sequence"], sequence, "{finish:?}");
    }
}

const UPSTREAM: &str = r#"{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQBCkYIBxgCKkC"},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
    {"type": "text", "text": "I'll check.", "citations": null},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"city": "Paris", "unit": "c"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 472, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2048,
            "output_tokens": 89, "service_tier": "standard"}
}"#;

#[test]
fn an_upstream_answer_parses_block_by_block() {
    let r = parse(UPSTREAM.as_bytes()).unwrap();
    assert_eq!(
        r.content,
        vec![
            Part::Thinking {
                text: "The user wants the weather.".into(),
                signature: Some("EqQBCkYIBxgCKkC".into())
            },
            Part::RedactedThinking("EmwKAhgBEgy3va".into()),
            Part::Text("I'll check.".into()),
            Part::ToolCall(ToolCall {
                id: "toolu_01A09q90qw90lq917835lq9".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris","unit":"c"}"#.into(),
                signature: None,
            }),
        ]
    );
    assert_eq!(r.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 472 + 100 + 2048,
            output_tokens: 89,
            cached_input_tokens: 2048,
            cache_creation_input_tokens: 100,
            reasoning_tokens: 0,
            ..Usage::default()
        }
    );
    // Back out to a messages client: the same blocks and the same usage figures.
    let v = rendered(&r);
    let up: Value = serde_json::from_str(UPSTREAM).unwrap();
    assert_eq!(v["content"][3], up["content"][3]);
    assert_eq!(v["usage"]["input_tokens"], 472);
    assert_eq!(v["usage"]["cache_read_input_tokens"], 2048);
    assert_eq!(v["usage"]["cache_creation_input_tokens"], 100);
    assert_eq!(v["model"], "claude-sonnet-4-5");
}

#[test]
fn stop_reasons_parse() {
    let with = |reason: Value, seq: Value| {
        let body = json!({"type": "message", "content": [], "stop_reason": reason,
            "stop_sequence": seq, "usage": {"input_tokens": 1, "output_tokens": 1}});
        parse(body.to_string().as_bytes()).unwrap().finish
    };
    assert_eq!(
        with(json!("end_turn"), Value::Null),
        Some(FinishReason::Stop)
    );
    assert_eq!(
        with(json!("max_tokens"), Value::Null),
        Some(FinishReason::Length)
    );
    assert_eq!(
        with(json!("stop_sequence"), json!("###")),
        Some(FinishReason::StopSequence(Some("###".into())))
    );
    assert_eq!(
        with(json!("refusal"), Value::Null),
        Some(FinishReason::ContentFilter)
    );
    assert_eq!(
        with(json!("pause_turn"), Value::Null),
        Some(FinishReason::Other("pause_turn".into()))
    );
    assert_eq!(with(Value::Null, Value::Null), None);
}

#[test]
fn what_is_not_a_message_is_an_error() {
    let error = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(parse(error), Err(TranslateError::Shape("not a message")));
    assert!(matches!(parse(b"<html>"), Err(TranslateError::NotJson(_))));
    assert_eq!(parse(b"[1]"), Err(TranslateError::Shape("not an object")));
    assert_eq!(
        parse(br#"{"type":"message"}"#),
        Err(TranslateError::Shape("no content"))
    );
}
