use super::*;
use crate::protocol::ir::ToolCall;

fn ctx() -> ResponseContext<'static> {
    ResponseContext {
        client_model: "my-alias",
        request_id: "req_7f3a",
        created: 1_735_689_600,
        compact: false,
    }
}

fn render(resp: &ir::Response) -> Value {
    serde_json::from_slice(&render_response(resp, &ctx())).unwrap()
}

fn id_ok(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An OpenAI answer with two parallel calls and cached prompt tokens.
const TOOL_ANSWER: &str = r#"{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant",
      "content": null,
      "tool_calls": [
        {"id": "call_IFWZ2xBZ6nVHRhKJbCRZ9sTN", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}},
        {"id": "call_aBXHMBxQT4Ij4kQ8Vc6LbNVo", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Berlin\"}"}}
      ],
      "refusal": null,
      "annotations": []
    },
    "logprobs": null,
    "finish_reason": "tool_calls"
  }],
  "usage": {
    "prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
    "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;

#[test]
fn parses_parallel_tool_calls_and_cached_usage() {
    let r = parse_response(TOOL_ANSWER.as_bytes()).unwrap();
    let call = |id: &str, city: &str| {
        Part::ToolCall(ToolCall {
            id: id.into(),
            name: "get_weather".into(),
            arguments: format!("{{\"location\":\"{city}\"}}"),
            signature: None,
        })
    };
    assert_eq!(
        r,
        ir::Response {
            content: vec![
                call("call_IFWZ2xBZ6nVHRhKJbCRZ9sTN", "Paris"),
                call("call_aBXHMBxQT4Ij4kQ8Vc6LbNVo", "Berlin"),
            ],
            finish: Some(FinishReason::ToolCalls),
            usage: Usage {
                input_tokens: 1117,
                output_tokens: 46,
                cached_input_tokens: 1024,
                cache_creation_input_tokens: 0,
                reasoning_tokens: 0,
                ..Usage::default()
            },
        }
    );
}

#[test]
fn parses_deepseek_reasoning_before_the_text() {
    let body = json!({
        "id": "e4f1", "object": "chat.completion", "created": 1738000000, "model": "deepseek-reasoner",
        "choices": [{"index": 0, "message": {"role": "assistant", "reasoning_content": "9.11 < 9.9", "content": "9.9 is larger."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 60, "total_tokens": 80, "prompt_cache_hit_tokens": 0,
                  "completion_tokens_details": {"reasoning_tokens": 48}}
    });
    let r = parse_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(
        r.content,
        vec![
            Part::Thinking {
                text: "9.11 < 9.9".into(),
                signature: None
            },
            Part::Text("9.9 is larger.".into())
        ]
    );
    assert_eq!(r.finish, Some(FinishReason::Stop));
    assert_eq!(r.usage.reasoning_tokens, 48);
    // `reasoning` is the other spelling compatible servers use.
    let body = json!({"choices": [{"message": {"role": "assistant", "reasoning": "r", "content": "t"}, "finish_reason": "length"}]});
    let r = parse_response(body.to_string().as_bytes()).unwrap();
    assert!(matches!(&r.content[0], Part::Thinking { text, .. } if text == "r"));
    assert_eq!(r.finish, Some(FinishReason::Length));
}

#[test]
fn missing_call_ids_are_synthesized_deterministically() {
    let body = json!({
        "id": "cmpl-1", "created": 5,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "", "type": "function", "function": {"name": "a", "arguments": {"x": 1}}}
        ]}, "finish_reason": "tool_calls"}]
    })
    .to_string();
    let ids = |r: &ir::Response| -> Vec<(String, String)> {
        r.content
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall(c) => Some((c.id.clone(), c.arguments.clone())),
                _ => None,
            })
            .collect()
    };
    let first = ids(&parse_response(body.as_bytes()).unwrap());
    assert_eq!(first, ids(&parse_response(body.as_bytes()).unwrap()));
    assert_eq!(first.len(), 2);
    assert_ne!(first[0].0, first[1].0);
    assert!(first.iter().all(|(id, _)| id_ok(id)), "{first:?}");
    assert_eq!(first[1].1, "{\"x\":1}");
}

#[test]
fn finish_reasons_from_upstream() {
    for (wire, ir) in [
        ("stop", FinishReason::Stop),
        ("length", FinishReason::Length),
        ("tool_calls", FinishReason::ToolCalls),
        ("function_call", FinishReason::ToolCalls),
        ("content_filter", FinishReason::ContentFilter),
        (
            "insufficient_system_resource",
            FinishReason::Other("insufficient_system_resource".into()),
        ),
    ] {
        let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": wire}]});
        assert_eq!(
            parse_response(body.to_string().as_bytes()).unwrap().finish,
            Some(ir)
        );
    }
}

#[test]
fn refusals_and_legacy_calls_are_kept() {
    let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]});
    let r = parse_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(
        r.content,
        vec![Part::Text("I can't help with that.".into())]
    );
    let body = json!({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}}, "finish_reason": "function_call"}]});
    let r = parse_response(body.to_string().as_bytes()).unwrap();
    assert!(matches!(&r.content[0], Part::ToolCall(c) if c.name == "f" && id_ok(&c.id)));
}

#[test]
fn not_a_completion_is_an_error() {
    assert!(matches!(
        parse_response(b"<html>502</html>"),
        Err(TranslateError::NotJson(_))
    ));
    assert_eq!(
        parse_response(br#"{"error": {"message": "overloaded", "type": "server_error"}}"#),
        Err(TranslateError::Shape("no choices"))
    );
    // Empty choices (a prompt filtered upstream): an empty answer, usage still counted.
    let r = parse_response(
        br#"{"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 0}}"#,
    )
    .unwrap();
    assert!(r.content.is_empty());
    assert_eq!(r.usage.input_tokens, 9);
}

#[test]
fn only_the_first_choice_is_followed() {
    let body = json!({"choices": [
        {"index": 1, "message": {"role": "assistant", "content": "second"}, "finish_reason": "stop"},
        {"index": 0, "message": {"role": "assistant", "content": "first"}, "finish_reason": "stop"}
    ]});
    let r = parse_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(r.content, vec![Part::Text("first".into())]);
}

#[test]
fn renders_a_full_answer() {
    let resp = ir::Response {
        content: vec![
            Part::Thinking {
                text: "The user wants ".into(),
                signature: None,
            },
            Part::Thinking {
                text: "weather.".into(),
                signature: Some("EqQBCkgIARAB".into()),
            },
            Part::RedactedThinking("EmwKAhgB".into()),
            Part::Text("Checking ".into()),
            Part::Text("both.".into()),
            Part::ToolCall(ToolCall {
                id: "toolu_01".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
                signature: None,
            }),
            Part::ToolCall(ToolCall {
                id: "fc_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Berlin\"}".into(),
                signature: Some("CiQBVKhc7".into()),
            }),
        ],
        // The messages protocol ends a turn with calls as `end_turn`... or `tool_use`.
        finish: Some(FinishReason::Stop),
        usage: Usage {
            input_tokens: 2100,
            output_tokens: 300,
            cached_input_tokens: 1800,
            cache_creation_input_tokens: 200,
            reasoning_tokens: 120,
            ..Usage::default()
        },
    };
    let out = render_response(&resp, &ctx());
    assert_eq!(
        String::from_utf8(out).unwrap(),
        concat!(
            r#"{"id":"chatcmpl-req_7f3a","object":"chat.completion","created":1735689600,"model":"my-alias","#,
            r#""choices":[{"index":0,"message":{"role":"assistant","content":"Checking both.","reasoning_content":"The user wants weather.","#,
            r#""tool_calls":[{"id":"toolu_01","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},"#,
            r#"{"id":"fc_1__sig__CiQBVKhc7","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Berlin\"}"}}]},"#,
            r#""logprobs":null,"finish_reason":"tool_calls"}],"#,
            r#""usage":{"prompt_tokens":2100,"completion_tokens":300,"total_tokens":2400,"#,
            r#""prompt_tokens_details":{"cached_tokens":1800},"completion_tokens_details":{"reasoning_tokens":120}}}"#
        )
    );
}

#[test]
fn renders_null_content_and_omits_empty_fields() {
    let v = render(&ir::Response {
        finish: Some(FinishReason::Length),
        ..Default::default()
    });
    let m = &v["choices"][0]["message"];
    assert_eq!(m, &json!({"role": "assistant", "content": null}));
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["total_tokens"], 0);
}

#[test]
fn finish_reasons_to_the_client() {
    let f = |r: Option<FinishReason>| -> String {
        render(&ir::Response {
            content: vec![Part::Text("x".into())],
            finish: r,
            ..Default::default()
        })["choices"][0]["finish_reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(f(Some(FinishReason::Stop)), "stop");
    assert_eq!(f(None), "stop");
    assert_eq!(f(Some(FinishReason::Length)), "length");
    assert_eq!(f(Some(FinishReason::ToolCalls)), "tool_calls");
    assert_eq!(
        f(Some(FinishReason::StopSequence(Some("END".into())))),
        "stop"
    );
    assert_eq!(f(Some(FinishReason::ContentFilter)), "content_filter");
    assert_eq!(f(Some(FinishReason::Other("RECITATION".into()))), "stop");
}

#[test]
fn parse_then_render_keeps_the_answer() {
    let r = parse_response(TOOL_ANSWER.as_bytes()).unwrap();
    let v = render(&r);
    let upstream: Value = serde_json::from_str(TOOL_ANSWER).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"],
        upstream["choices"][0]["message"]["tool_calls"]
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 1024);
    assert_eq!(v["model"], "my-alias");
    assert!(!v.to_string().contains("gpt-4o"));
}
