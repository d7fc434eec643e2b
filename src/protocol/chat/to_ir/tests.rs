use super::*;
use crate::protocol::ir::{Image, Message, Tool, ToolCall, ToolResult};
use serde_json::json;

fn param(body: Value) -> Option<String> {
    to_ir(body).unwrap_err().param
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[test]
fn a_full_agent_conversation() {
    let body = json!({
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "developer", "content": [{"type": "text", "text": "Answer in Celsius."}, {"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris and Berlin? See the photo."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/sky.jpg"}}
            ]},
            {"role": "assistant", "reasoning_content": "Two cities: two calls.", "content": "", "tool_calls": [
                {"id": "call_a__sig__c2lnQQ==", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Berlin\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_a__sig__c2lnQQ==", "content": "18C sunny"},
            {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "12C"}, {"type": "text", "text": "rain"}]},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Tomorrow: "}, {"type": "refusal", "refusal": "I cannot forecast."}]},
            {"role": "user", "content": "ok", "name": "bob"}
        ],
        "max_tokens": 2048,
        "max_completion_tokens": 1024,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": "END",
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": true}}],
        "tool_choice": "required",
        "parallel_tool_calls": true,
        "reasoning_effort": "high",
        "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": {"type": "object"}, "strict": true}},
        "user": "user-42",
        "stream": true,
        "stream_options": {"include_usage": true},
        "logit_bias": {"50256": -100},
        "store": false,
        "metadata": {"k": "v"}
    });
    let req = to_ir(body).unwrap();
    assert_eq!(
        req.system,
        vec!["You are a weather bot.", "Answer in Celsius.", "Be brief."]
    );
    let call = |id: &str, sig: Option<&str>, city: &str| {
        Part::ToolCall(ToolCall {
            id: id.into(),
            name: "get_weather".into(),
            arguments: format!("{{\"city\":\"{city}\"}}"),
            signature: sig.map(str::to_string),
        })
    };
    let result = |id: &str, texts: &[&str]| {
        Part::ToolResult(ToolResult {
            call_id: id.into(),
            name: None,
            content: texts.iter().map(|t| Part::Text(t.to_string())).collect(),
            is_error: false,
        })
    };
    assert_eq!(
        req.messages,
        vec![
            Message {
                role: Role::User,
                content: vec![
                    Part::Text("Weather in Paris and Berlin? See the photo.".into()),
                    Part::Image(Image::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into()
                    }),
                    Part::Image(Image::Url("https://example.com/sky.jpg".into())),
                ]
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Thinking {
                        text: "Two cities: two calls.".into(),
                        signature: None
                    },
                    call("call_a", Some("c2lnQQ=="), "Paris"),
                    call("call_b", None, "Berlin"),
                ]
            },
            // Both results and the user message after them: one turn, results first.
            Message {
                role: Role::User,
                content: vec![
                    result("call_a", &["18C sunny"]),
                    result("call_b", &["12C", "rain"]),
                    Part::Text("And tomorrow?".into()),
                ]
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Text("Tomorrow: ".into()),
                    Part::Text("I cannot forecast.".into())
                ]
            },
            Message {
                role: Role::User,
                content: vec![Part::Text("ok".into())]
            },
        ]
    );
    assert_eq!(req.max_tokens, Some(1024));
    assert_eq!(req.temperature, Some(0.2));
    assert_eq!(req.top_p, Some(0.9));
    assert_eq!(req.stop, vec!["END"]);
    assert_eq!(req.seed, Some(7));
    assert_eq!(req.presence_penalty, Some(0.5));
    assert_eq!(req.frequency_penalty, Some(-0.5));
    assert_eq!(
        req.tools,
        vec![Tool {
            name: "get_weather".into(),
            description: Some("Current weather".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }]
    );
    assert_eq!(req.tool_choice, Some(ToolChoice::Required));
    assert_eq!(req.parallel_tool_calls, Some(true));
    assert_eq!(
        req.reasoning,
        Some(Reasoning {
            effort: Some(Effort::High),
            ..Default::default()
        })
    );
    assert_eq!(
        req.response_format,
        Some(ResponseFormat::JsonSchema {
            name: "weather".into(),
            schema: json!({"type": "object"}),
            strict: Some(true)
        })
    );
    assert_eq!(req.user.as_deref(), Some("user-42"));
    assert_eq!(req.top_k, None);
}

#[test]
fn a_minimal_request_sets_nothing_else() {
    let req = to_ir(json!({"model": "m", "messages": [user("hi")]})).unwrap();
    assert_eq!(
        req,
        ir::Request {
            messages: vec![Message {
                role: Role::User,
                content: vec![Part::Text("hi".into())]
            }],
            ..Default::default()
        }
    );
}

#[test]
fn either_token_limit_alone_is_kept() {
    let with = |f: &str| {
        to_ir(json!({"model": "m", "messages": [user("x")], f: 300}))
            .unwrap()
            .max_tokens
    };
    assert_eq!(with("max_tokens"), Some(300));
    assert_eq!(with("max_completion_tokens"), Some(300));
}

#[test]
fn tool_choice_and_formats_and_stops() {
    let req = |extra: Value| {
        let mut b = json!({"model": "m", "messages": [user("x")]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        to_ir(b).unwrap()
    };
    assert_eq!(
        req(json!({"tool_choice": "none"})).tool_choice,
        Some(ToolChoice::None)
    );
    assert_eq!(
        req(json!({"tool_choice": "auto"})).tool_choice,
        Some(ToolChoice::Auto)
    );
    assert_eq!(
        req(json!({"tool_choice": {"type": "function", "function": {"name": "f"}}})).tool_choice,
        Some(ToolChoice::Tool("f".into()))
    );
    assert_eq!(
        req(json!({"response_format": {"type": "json_object"}})).response_format,
        Some(ResponseFormat::JsonObject)
    );
    assert_eq!(
        req(json!({"response_format": {"type": "text"}})).response_format,
        Some(ResponseFormat::Text)
    );
    assert_eq!(
        req(json!({"stop": ["a", "b"]})).stop,
        vec!["a".to_string(), "b".to_string()]
    );
    assert_eq!(
        req(json!({"reasoning_effort": "none"})).reasoning,
        Some(Reasoning {
            disabled: true,
            ..Default::default()
        })
    );
    assert_eq!(
        req(json!({"reasoning_effort": "minimal"}))
            .reasoning
            .and_then(|r| r.effort),
        Some(Effort::Minimal)
    );
    // A tool without parameters still gets a schema other protocols accept.
    assert_eq!(
        req(json!({"tools": [{"type": "function", "function": {"name": "now"}}]})).tools[0]
            .parameters,
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(
        req(json!({"safety_identifier": "h1"})).user.as_deref(),
        Some("h1")
    );
}

#[test]
fn tool_messages_open_a_user_turn_of_their_own() {
    let req = to_ir(json!({"model": "m", "messages": [
        user("go"),
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "late"},
    ]}))
    .unwrap();
    let roles: Vec<Role> = req.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::User
        ]
    );
    assert_eq!(
        req.messages[1].content.len(),
        1,
        "null content adds nothing"
    );
    assert!(matches!(&req.messages[4].content[0], Part::ToolResult(r) if r.call_id == "c2"));
}

#[test]
fn untranslatable_requests_name_the_field() {
    let base = |extra: Value| {
        let mut b = json!({"model": "m", "messages": [user("x")]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        param(b)
    };
    assert_eq!(base(json!({"n": 2})), Some("n".into()));
    assert!(to_ir(json!({"model": "m", "messages": [user("x")], "n": 1})).is_ok());
    assert_eq!(base(json!({"logprobs": true})), Some("logprobs".into()));
    assert_eq!(
        base(json!({"modalities": ["text", "audio"]})),
        Some("modalities".into())
    );
    assert_eq!(
        base(json!({"audio": {"voice": "alloy", "format": "wav"}})),
        Some("audio".into())
    );
    assert_eq!(
        base(json!({"functions": [{"name": "f"}]})),
        Some("functions".into())
    );
    assert_eq!(
        base(json!({"function_call": "auto"})),
        Some("function_call".into())
    );
    assert_eq!(
        base(json!({"web_search_options": {}})),
        Some("web_search_options".into())
    );
    assert_eq!(
        base(
            json!({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "custom", "custom": {"name": "g"}}]})
        ),
        Some("tools[1].type".into())
    );
    assert_eq!(
        base(json!({"tools": [{"type": "function", "function": {"description": "no name"}}]})),
        Some("tools[0].function.name".into())
    );
    assert_eq!(
        base(json!({"tool_choice": "sometimes"})),
        Some("tool_choice".into())
    );
    assert_eq!(
        base(json!({"tool_choice": {"type": "allowed_tools", "allowed_tools": {}}})),
        Some("tool_choice".into())
    );
    assert_eq!(
        base(json!({"reasoning_effort": "extreme"})),
        Some("reasoning_effort".into())
    );
    assert_eq!(
        base(json!({"response_format": {"type": "grammar"}})),
        Some("response_format.type".into())
    );
    assert_eq!(
        base(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})),
        Some("response_format.json_schema.schema".into())
    );
}

#[test]
fn untranslatable_messages_name_the_part() {
    let msgs = |m: Value| param(json!({"model": "m", "messages": [m]}));
    assert_eq!(
        msgs(
            json!({"role": "user", "content": [{"type": "text", "text": "hear"}, {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}]})
        ),
        Some("messages[0].content[1]".into())
    );
    assert_eq!(
        msgs(
            json!({"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]})
        ),
        Some("messages[0].content[0]".into())
    );
    assert_eq!(
        msgs(json!({"role": "function", "name": "f", "content": "x"})),
        Some("messages[0].role".into())
    );
    assert_eq!(
        msgs(
            json!({"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}})
        ),
        Some("messages[0].function_call".into())
    );
    assert_eq!(
        msgs(json!({"role": "tool", "content": "x"})),
        Some("messages[0].tool_call_id".into())
    );
    assert_eq!(
        msgs(
            json!({"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]})
        ),
        Some("messages[0].content[0]".into())
    );
    assert_eq!(
        msgs(
            json!({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]})
        ),
        Some("messages[0].content[0]".into())
    );
    assert_eq!(
        msgs(json!({"role": "critic", "content": "x"})),
        Some("messages[0].role".into())
    );
    assert_eq!(
        msgs(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "g", "input": "x"}}]})
        ),
        Some("messages[0].tool_calls[0].type".into())
    );
    assert_eq!(
        msgs(json!({"role": "assistant", "content": null, "audio": {"id": "audio_abc"}})),
        Some("messages[0].audio".into())
    );
}

#[test]
fn an_empty_assistant_turn_is_left_out() {
    let req = to_ir(json!({"model": "m", "messages": [
        user("a"),
        {"role": "assistant", "content": ""},
        user("b"),
    ]}))
    .unwrap();
    assert_eq!(req.messages.len(), 2);
    assert!(req.messages.iter().all(|m| m.role == Role::User));
}
