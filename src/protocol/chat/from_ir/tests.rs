use super::*;
use crate::protocol::ir::{Effort, Image, Message, Reasoning, Tool, ToolCall, ToolResult};

fn opts(stream: bool) -> RequestOptions<'static> {
    RequestOptions {
        upstream_model: "gpt-4.1-2025-04-14",
        stream,
        default_max_tokens: 4096,
        chat_limit_field: "max_completion_tokens",
        compact: false,
    }
}

fn body(req: &ir::Request, stream: bool) -> Value {
    let out = from_ir(req, &opts(stream)).unwrap();
    assert_eq!(out.path, "/v1/chat/completions");
    assert!(!out.client_wants_usage);
    serde_json::from_slice(&out.body).unwrap()
}

fn text(t: &str) -> Part {
    Part::Text(t.into())
}

/// A conversation as a messages client sends it: system blocks, thinking with a
/// signature, parallel calls, results (one with a screenshot) beside new user text.
fn agent_request() -> ir::Request {
    ir::Request {
        system: vec!["You are terse.".into(), "Use tools.".into()],
        messages: vec![
            Message {
                role: Role::User,
                content: vec![text("What is on screen?")],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Thinking {
                        text: "Take a screenshot.".into(),
                        signature: Some("EqQBCkgIARABGAIiQ".into()),
                    },
                    Part::RedactedThinking("EmwKAhgBEgy3va3pzix".into()),
                    text("Looking."),
                    Part::ToolCall(ToolCall {
                        id: "toolu_01A".into(),
                        name: "screenshot".into(),
                        arguments: "{}".into(),
                        signature: None,
                    }),
                    Part::ToolCall(ToolCall {
                        id: "toolu_01B".into(),
                        name: "clock".into(),
                        arguments: "{\"tz\":\"UTC\"}".into(),
                        signature: Some("sig".into()),
                    }),
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    Part::ToolResult(ToolResult {
                        call_id: "toolu_01A".into(),
                        name: None,
                        content: vec![
                            text("captured"),
                            Part::Image(Image::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo=".into(),
                            }),
                        ],
                        is_error: false,
                    }),
                    Part::ToolResult(ToolResult {
                        call_id: "toolu_01B".into(),
                        name: Some("clock".into()),
                        content: vec![text("12:00"), text("UTC")],
                        is_error: true,
                    }),
                    text("Describe it."),
                ],
            },
        ],
        max_tokens: Some(1000),
        temperature: Some(0.5),
        top_p: Some(0.95),
        top_k: Some(40),
        stop: vec!["\n\nHuman:".into()],
        seed: Some(3),
        presence_penalty: Some(0.1),
        frequency_penalty: Some(0.2),
        tools: vec![Tool {
            name: "screenshot".into(),
            description: Some("Capture the screen".into()),
            parameters: json!({"type": "object", "properties": {}}),
        }],
        tool_choice: Some(ToolChoice::Tool("screenshot".into())),
        parallel_tool_calls: Some(false),
        reasoning: Some(Reasoning {
            budget_tokens: Some(20000),
            ..Default::default()
        }),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: json!({"type": "object"}),
            strict: Some(true),
        }),
        user: Some("u-1".into()),
    }
}

#[test]
fn a_full_conversation_in_chat_shape() {
    let v = body(&agent_request(), false);
    assert_eq!(
        v,
        json!({
            "model": "gpt-4.1-2025-04-14",
            "messages": [
                {"role": "system", "content": "You are terse.\n\nUse tools."},
                {"role": "user", "content": "What is on screen?"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "toolu_01A", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}},
                    {"id": "toolu_01B", "type": "function", "function": {"name": "clock", "arguments": "{\"tz\":\"UTC\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "toolu_01A", "content": "captured"},
                {"role": "tool", "tool_call_id": "toolu_01B", "content": "12:00\n\nUTC"},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "text", "text": "Describe it."}
                ]}
            ],
            "max_completion_tokens": 1000,
            "temperature": 0.5,
            "top_p": 0.95,
            "stop": ["\n\nHuman:"],
            "seed": 3,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.2,
            "tools": [{"type": "function", "function": {"name": "screenshot", "description": "Capture the screen", "parameters": {"type": "object", "properties": {}}}}],
            "tool_choice": {"type": "function", "function": {"name": "screenshot"}},
            "parallel_tool_calls": false,
            "reasoning_effort": "high",
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": true}},
            "user": "u-1"
        })
    );
    // No stream fields on a whole-answer request, and top_k has no chat field.
    assert!(v.get("stream").is_none() && v.get("top_k").is_none());
}

#[test]
fn streams_always_ask_for_usage() {
    let req = ir::Request {
        messages: vec![Message {
            role: Role::User,
            content: vec![text("hi")],
        }],
        ..Default::default()
    };
    let v = body(&req, true);
    assert_eq!(v["stream"], true);
    assert_eq!(v["stream_options"], json!({"include_usage": true}));
    // Nothing the request did not set: no limit, no system message.
    assert_eq!(
        v,
        json!({"model": "gpt-4.1-2025-04-14", "messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": {"include_usage": true}})
    );
}

#[test]
fn user_images_by_url_and_inline() {
    let req = ir::Request {
        messages: vec![Message {
            role: Role::User,
            content: vec![
                text("Compare"),
                Part::Image(Image::Url("https://example.com/a.png".into())),
                Part::Image(Image::Base64 {
                    media_type: "image/jpeg".into(),
                    data: "/9j/4AAQ".into(),
                }),
            ],
        }],
        ..Default::default()
    };
    assert_eq!(
        body(&req, false)["messages"][0]["content"],
        json!([
            {"type": "text", "text": "Compare"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}
        ])
    );
}

#[test]
fn reasoning_settings() {
    let effort = |r: Reasoning| {
        let req = ir::Request {
            reasoning: Some(r),
            ..Default::default()
        };
        body(&req, false).get("reasoning_effort").cloned()
    };
    assert_eq!(
        effort(Reasoning {
            effort: Some(Effort::Low),
            ..Default::default()
        }),
        Some(json!("low"))
    );
    assert_eq!(
        effort(Reasoning {
            disabled: true,
            ..Default::default()
        }),
        None
    );
    let choice = |tc: ToolChoice| {
        let req = ir::Request {
            tool_choice: Some(tc),
            ..Default::default()
        };
        body(&req, false)["tool_choice"].clone()
    };
    assert_eq!(choice(ToolChoice::Auto), json!("auto"));
    assert_eq!(choice(ToolChoice::None), json!("none"));
    assert_eq!(choice(ToolChoice::Required), json!("required"));
}

#[test]
fn a_turn_of_only_thinking_keeps_an_empty_content() {
    let req = ir::Request {
        messages: vec![
            Message {
                role: Role::Assistant,
                content: vec![Part::Thinking {
                    text: "hmm".into(),
                    signature: None,
                }],
            },
            Message {
                role: Role::User,
                content: vec![Part::ToolResult(ToolResult {
                    call_id: "c".into(),
                    name: None,
                    content: vec![],
                    is_error: false,
                })],
            },
        ],
        ..Default::default()
    };
    assert_eq!(
        body(&req, false)["messages"],
        json!([
            {"role": "assistant", "content": ""},
            {"role": "tool", "tool_call_id": "c", "content": ""}
        ])
    );
}

#[test]
fn chat_request_round_trips_through_the_pivot() {
    let client = json!({
        "model": "alias",
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "R"}
        ],
        "max_completion_tokens": 50,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto"
    });
    let req = super::super::to_ir(client.clone()).unwrap();
    let mut v = body(&req, false);
    v["model"] = json!("alias");
    assert_eq!(v, client);
}
