use super::*;
use crate::protocol::ir::{
    Effort, Image, Message, Reasoning, ResponseFormat, Tool, ToolCall, ToolResult,
};

fn opts(stream: bool) -> RequestOptions<'static> {
    RequestOptions {
        upstream_model: "claude-sonnet-4-5-20250929",
        stream,
        default_max_tokens: 8192,
        chat_limit_field: "max_completion_tokens",
        compact: false,
    }
}

fn body(req: &ir::Request, stream: bool) -> Value {
    let out = from_ir(req, &opts(stream)).unwrap();
    assert_eq!(out.path, "/v1/messages");
    assert!(!out.client_wants_usage);
    serde_json::from_slice(&out.body).unwrap()
}

fn user(parts: Vec<Part>) -> Message {
    Message {
        role: Role::User,
        content: parts,
    }
}

fn assistant(parts: Vec<Part>) -> Message {
    Message {
        role: Role::Assistant,
        content: parts,
    }
}

fn call(id: &str, args: &str) -> Part {
    Part::ToolCall(ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: args.into(),
        signature: Some("c2ln".into()),
    })
}

fn result(id: &str, text: &str) -> Part {
    Part::ToolResult(ToolResult {
        call_id: id.into(),
        name: Some("get_weather".into()),
        content: vec![Part::Text(text.into())],
        is_error: false,
    })
}

fn weather_tool(parameters: Value) -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("Weather of a city".into()),
        parameters,
    }
}

#[test]
fn a_simple_request_is_byte_exact() {
    let req = ir::Request {
        system: vec!["Be brief.".into()],
        messages: vec![user(vec![Part::Text("Hi".into())])],
        max_tokens: Some(200),
        ..Default::default()
    };
    let out = from_ir(&req, &opts(true)).unwrap();
    assert_eq!(
        String::from_utf8(out.body).unwrap(),
        r#"{"model":"claude-sonnet-4-5-20250929","max_tokens":200,"stream":true,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}"#
    );
}

#[test]
fn a_chat_style_tool_conversation_is_made_acceptable() {
    let req = ir::Request {
        system: vec![
            "You are a weather bot.".into(),
            String::new(),
            "Answer in French.".into(),
        ],
        messages: vec![
            user(vec![Part::Text("Weather in Paris and Rome?".into())]),
            user(vec![
                Part::Image(Image::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                }),
                Part::Image(Image::Url("https://example.com/map.jpg".into())),
            ]),
            assistant(vec![
                Part::Thinking {
                    text: "visible reasoning from another protocol".into(),
                    signature: None,
                },
                Part::Text(String::new()),
                call("call.Paris/1", r#"{"city":"Paris"}"#),
                call("call_rome", "not json"),
            ]),
            // Chat sends one `tool` message per result, and the user may add text.
            user(vec![Part::Text("Also hurry.".into())]),
            user(vec![result("call.Paris/1", "sunny")]),
            user(vec![Part::ToolResult(ToolResult {
                call_id: "call_rome".into(),
                name: None,
                content: vec![
                    Part::Text("rain".into()),
                    Part::Image(Image::Url("https://example.com/radar.png".into())),
                ],
                is_error: true,
            })]),
        ],
        temperature: Some(1.7),
        top_p: Some(0.5),
        top_k: Some(20),
        stop: vec!["END".into()],
        seed: Some(7),
        presence_penalty: Some(0.5),
        tools: vec![weather_tool(
            json!({"properties": {"city": {"type": "string"}}, "required": ["city"]}),
        )],
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        response_format: Some(ResponseFormat::JsonObject),
        user: Some("user-42".into()),
        ..Default::default()
    };
    let v = body(&req, false);
    assert_eq!(
        v,
        json!({
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 8192,
            "system": "You are a weather bot.\n\nAnswer in French.",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather in Paris and Rome?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/map.jpg"}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_Paris_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_rome", "name": "get_weather", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_Paris_1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "call_rome", "content": [
                        {"type": "text", "text": "rain"},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/radar.png"}}
                    ], "is_error": true},
                    {"type": "text", "text": "Also hurry."}
                ]}
            ],
            "temperature": 1.0,
            "top_p": 0.5,
            "top_k": 20,
            "stop_sequences": ["END"],
            "tools": [{"name": "get_weather", "description": "Weather of a city", "input_schema": {
                "properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "metadata": {"user_id": "user-42"}
        })
    );
}

#[test]
fn signed_thinking_and_redacted_thinking_stay_in_history() {
    let req = ir::Request {
        messages: vec![
            user(vec![Part::Text("Weather?".into())]),
            assistant(vec![
                Part::Thinking {
                    text: "Need the tool.".into(),
                    signature: Some("EqQBCkYIBxgC".into()),
                },
                Part::RedactedThinking("EmwKAhgBEgy3va".into()),
                call("toolu_01", r#"{"city":"Paris"}"#),
            ]),
            user(vec![result("toolu_01", "sunny")]),
        ],
        max_tokens: Some(16000),
        reasoning: Some(Reasoning {
            budget_tokens: Some(4000),
            ..Default::default()
        }),
        tools: vec![weather_tool(json!({"type": "object"}))],
        ..Default::default()
    };
    let v = body(&req, true);
    assert_eq!(
        v["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "Need the tool.", "signature": "EqQBCkYIBxgC"})
    );
    assert_eq!(
        v["messages"][1]["content"][1],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"})
    );
    assert_eq!(
        v["thinking"],
        json!({"type": "enabled", "budget_tokens": 4000})
    );
    assert_eq!(v["stream"], true);
    assert!(v.get("tool_choice").is_none());
}

fn thinking_of(req: ir::Request) -> Value {
    body(&req, false)["thinking"].clone()
}

fn reasoning(budget: Option<u64>, effort: Option<Effort>) -> Option<Reasoning> {
    Some(Reasoning {
        budget_tokens: budget,
        effort,
        disabled: false,
    })
}

#[test]
fn thinking_budget_fits_under_max_tokens_and_never_raises_it() {
    let hi = vec![user(vec![Part::Text("Hi".into())])];
    let req = |max: Option<u64>, r: Option<Reasoning>| ir::Request {
        messages: hi.clone(),
        max_tokens: max,
        reasoning: r,
        ..Default::default()
    };
    // Effort high (24576) under a 4096 limit: lowered to 4095, max_tokens kept.
    let v = body(&req(Some(4096), reasoning(None, Some(Effort::High))), false);
    assert_eq!(v["max_tokens"], 4096);
    assert_eq!(v["thinking"]["budget_tokens"], 4095);
    // No client limit: the default one, budget as asked.
    let v = body(&req(None, reasoning(Some(2048), None)), false);
    assert_eq!(v["max_tokens"], 8192);
    assert_eq!(v["thinking"]["budget_tokens"], 2048);
    // Too small to fit the minimum: thinking left out, limit untouched.
    let v = body(&req(Some(1024), reasoning(Some(2048), None)), false);
    assert_eq!(v["max_tokens"], 1024);
    assert!(v.get("thinking").is_none());
    assert!(thinking_of(req(Some(4096), reasoning(Some(500), None))).is_null());
    assert!(thinking_of(req(Some(4096), None)).is_null());
    let off = Some(Reasoning {
        disabled: true,
        budget_tokens: Some(4000),
        effort: None,
    });
    assert!(thinking_of(req(Some(8192), off)).is_null());
}

#[test]
fn thinking_is_left_out_where_the_upstream_would_refuse_it() {
    let tools = vec![weather_tool(json!({"type": "object"}))];
    let forced = ir::Request {
        messages: vec![user(vec![Part::Text("Hi".into())])],
        max_tokens: Some(8000),
        reasoning: reasoning(Some(2000), None),
        tools: tools.clone(),
        tool_choice: Some(ToolChoice::Tool("get_weather".into())),
        ..Default::default()
    };
    let v = body(&forced, false);
    assert!(v.get("thinking").is_none());
    assert_eq!(
        v["tool_choice"],
        json!({"type": "tool", "name": "get_weather"})
    );
    // The last assistant turn calls a tool with no signed thinking before it.
    let unsigned_loop = ir::Request {
        messages: vec![
            user(vec![Part::Text("Weather?".into())]),
            assistant(vec![call("call_1", "{}")]),
            user(vec![result("call_1", "sunny")]),
        ],
        max_tokens: Some(8000),
        reasoning: reasoning(Some(2000), None),
        tools,
        ..Default::default()
    };
    assert!(body(&unsigned_loop, false).get("thinking").is_none());
}

#[test]
fn sampling_the_upstream_refuses_with_thinking_is_left_out() {
    let req = ir::Request {
        messages: vec![user(vec![Part::Text("Hi".into())])],
        max_tokens: Some(8000),
        reasoning: reasoning(Some(2000), None),
        temperature: Some(0.2),
        top_p: Some(0.5),
        top_k: Some(5),
        ..Default::default()
    };
    let v = body(&req, false);
    assert!(v["thinking"].is_object());
    for k in ["temperature", "top_p", "top_k"] {
        assert!(v.get(k).is_none(), "{k}");
    }
    let req = ir::Request {
        temperature: Some(1.0),
        top_p: Some(0.97),
        ..req
    };
    let v = body(&req, false);
    assert_eq!(v["temperature"], 1.0);
    assert_eq!(v["top_p"], 0.97);
}

#[test]
fn tool_choice_variants() {
    let base = ir::Request {
        messages: vec![user(vec![Part::Text("Hi".into())])],
        tools: vec![weather_tool(Value::Null)],
        ..Default::default()
    };
    let choice = |c: Option<ToolChoice>, parallel: Option<bool>| {
        body(
            &ir::Request {
                tool_choice: c,
                parallel_tool_calls: parallel,
                ..base.clone()
            },
            false,
        )["tool_choice"]
            .clone()
    };
    assert!(choice(None, None).is_null());
    assert_eq!(
        choice(None, Some(false)),
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        choice(Some(ToolChoice::Auto), None),
        json!({"type": "auto"})
    );
    assert_eq!(
        choice(Some(ToolChoice::None), Some(false)),
        json!({"type": "none"})
    );
    assert_eq!(
        body(&base, false)["tools"][0]["input_schema"],
        json!({"type": "object"})
    );
    // No tools: no tool_choice either (the messages API refuses one alone).
    let v = body(
        &ir::Request {
            tools: vec![],
            tool_choice: Some(ToolChoice::Auto),
            ..base
        },
        false,
    );
    assert!(v.get("tool_choice").is_none() && v.get("tools").is_none());
}
