use super::super::{render_compaction, render_response, to_ir};
use super::rctx;
use crate::protocol::ir::{FinishReason, Part, Response, ToolCall};
use crate::protocol::{ResponseContext, Usage};
use serde_json::{json, Value};

fn render(resp: &Response) -> Value {
    serde_json::from_slice(&render_response(resp, &rctx())).unwrap()
}

fn usage() -> Usage {
    Usage {
        input_tokens: 1200,
        output_tokens: 300,
        cached_input_tokens: 1000,
        cache_creation_input_tokens: 50,
        reasoning_tokens: 120,
        ..Usage::default()
    }
}

#[test]
fn a_text_answer_is_one_message_with_both_usage_vocabularies() {
    let v = render(&Response {
        content: vec![Part::Text("Hello".into()), Part::Text(", world".into())],
        finish: Some(FinishReason::Stop),
        usage: usage(),
    });
    assert_eq!(
        v,
        json!({
            "id": "resp_req123",
            "object": "response",
            "created_at": 1_741_476_542,
            "status": "completed",
            "model": "my-model",
            "output": [{
                "type": "message", "id": "msg_req123_0", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello, world", "annotations": []}]
            }],
            "output_text": "Hello, world",
            "usage": {
                "input_tokens": 1200, "output_tokens": 300, "total_tokens": 1500,
                "input_tokens_details": {"cached_tokens": 1000},
                "output_tokens_details": {"reasoning_tokens": 120},
                "prompt_tokens": 1200, "completion_tokens": 300,
                "prompt_tokens_details": {"cached_tokens": 1000, "text_tokens": 1200, "audio_tokens": 0, "image_tokens": 0},
                "completion_tokens_details": {"text_tokens": 180, "audio_tokens": 0, "reasoning_tokens": 120}
            },
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "metadata": {},
            "parallel_tool_calls": true,
            "temperature": null,
            "top_p": null,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}}
        })
    );
}

#[test]
fn thinking_text_and_parallel_calls_become_items_in_order() {
    let v = render(&Response {
        content: vec![
            Part::Thinking {
                text: "The user wants weather for two cities.".into(),
                signature: Some("EqQBCkYIBxgCKkAsig".into()),
            },
            Part::Text("Checking both.".into()),
            Part::ToolCall(ToolCall {
                id: "toolu_01A".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
                signature: None,
            }),
            Part::ToolCall(ToolCall {
                id: "call_x".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Rome\"}".into(),
                signature: Some("CiQBsig".into()),
            }),
            Part::ToolCall(ToolCall {
                id: String::new(),
                name: "now".into(),
                arguments: "{}".into(),
                signature: None,
            }),
            Part::RedactedThinking("EmwKAhgBEgy".into()),
        ],
        finish: Some(FinishReason::ToolCalls),
        usage: Usage::default(),
    });
    assert_eq!(v["status"], "completed");
    assert_eq!(
        v["output"],
        json!([
            {"type": "reasoning", "id": "rs_req123_0",
             "summary": [{"type": "summary_text", "text": "The user wants weather for two cities."}],
             "encrypted_content": "EqQBCkYIBxgCKkAsig"},
            {"type": "message", "id": "msg_req123_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking both.", "annotations": []}]},
            {"type": "function_call", "id": "fc_req123_2", "call_id": "toolu_01A", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_req123_3", "call_id": "call_x__sig__CiQBsig", "name": "get_weather",
             "arguments": "{\"city\":\"Rome\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_req123_4", "call_id": "call_req123_2", "name": "now",
             "arguments": "{}", "status": "completed"},
            {"type": "reasoning", "id": "rs_req123_5", "summary": [],
             "encrypted_content": "redacted_thinking:EmwKAhgBEgy"}
        ])
    );
    assert_eq!(v["output_text"], "Checking both.");
}

/// What the client sends back on its next turn (the output items, as the SDKs append
/// them to `input`) reaches the pivot as the upstream produced it.
#[test]
fn output_items_sent_back_as_input_round_trip_through_the_pivot() {
    let content = vec![
        Part::Thinking {
            text: "Plan: call ls.".into(),
            signature: Some("sig-1".into()),
        },
        Part::RedactedThinking("opaque".into()),
        Part::Text("Listing.".into()),
        Part::ToolCall(ToolCall {
            id: "fn_1".into(),
            name: "ls".into(),
            arguments: "{\"dir\":\".\"}".into(),
            signature: Some("thought-sig".into()),
        }),
    ];
    let v = render(&Response {
        content: content.clone(),
        finish: Some(FinishReason::ToolCalls),
        usage: Usage::default(),
    });
    let mut input = vec![json!({"role": "user", "content": "list files"})];
    input.extend(v["output"].as_array().unwrap().iter().cloned());
    let req = to_ir(json!({"model": "m", "input": input})).unwrap();
    assert_eq!(req.messages[1].content, content);
}

#[test]
fn length_and_content_filter_are_incomplete() {
    for (finish, reason) in [
        (FinishReason::Length, "max_output_tokens"),
        (FinishReason::ContentFilter, "content_filter"),
    ] {
        let v = render(&Response {
            content: vec![Part::Text("Once upon a".into())],
            finish: Some(finish),
            usage: Usage::default(),
        });
        assert_eq!(v["status"], "incomplete");
        assert_eq!(v["incomplete_details"], json!({ "reason": reason }));
    }
    for finish in [
        None,
        Some(FinishReason::StopSequence(Some("END".into()))),
        Some(FinishReason::Other("RECITATION".into())),
    ] {
        let v = render(&Response {
            content: vec![],
            finish,
            usage: Usage::default(),
        });
        assert_eq!(v["status"], "completed");
        assert_eq!(v["output"], json!([]));
        assert!(v.get("output_text").is_none());
    }
}

#[test]
fn compaction_is_one_assistant_message_with_usage() {
    let ctx = ResponseContext {
        compact: true,
        ..rctx()
    };
    let resp = Response {
        content: vec![
            Part::Thinking {
                text: "What matters?".into(),
                signature: None,
            },
            Part::Text("The user is refactoring the parser; ".into()),
            Part::Text("parse() now returns Result.".into()),
        ],
        finish: Some(FinishReason::Stop),
        usage: usage(),
    };
    let v: Value = serde_json::from_slice(&render_compaction(&resp, &ctx)).unwrap();
    assert_eq!(v["id"], "cmp_req123");
    assert_eq!(v["object"], "response.compaction");
    assert_eq!(v["created_at"], 1_741_476_542);
    assert_eq!(v["error"], Value::Null);
    assert_eq!(
        v["output"],
        json!([{"type": "message", "id": "msg_req123_0", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text",
                             "text": "The user is refactoring the parser; parse() now returns Result.",
                             "annotations": []}]}])
    );
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 1000);
    assert_eq!(v["usage"]["completion_tokens"], 300);
    assert_eq!(v["usage"]["total_tokens"], 1500);
}
