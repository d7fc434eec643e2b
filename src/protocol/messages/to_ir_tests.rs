use super::*;
use crate::protocol::ir::{Image, ToolCall, ToolResult};
use serde_json::json;

fn base(messages: Value) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages})
}

fn param(body: Value) -> String {
    let e = to_ir(&body).unwrap_err();
    let p = e.param.clone().unwrap();
    assert!(e.message.contains(&p), "{e:?}");
    p
}

#[test]
fn a_realistic_tool_conversation_converts_block_by_block() {
    let body = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": [
            {"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Answer in French."}
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture, and the weather in Paris?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants weather.", "signature": "EqQBCkYIBxgCKkC"},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_7__sig__c2lnbmF0dXJlLTE=", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_01A", "name": "get_time", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_7__sig__c2lnbmF0dXJlLTE=", "content": [
                    {"type": "text", "text": "sunny, 22C"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}
                ]},
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "no clock", "is_error": true}
            ]}
        ],
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["\n\nHuman:"],
        "tools": [
            {"name": "get_weather", "description": "Weather of a city",
             "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
             "cache_control": {"type": "ephemeral"}},
            {"type": "custom", "name": "get_time"}
        ],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "metadata": {"user_id": "user-42"},
        "service_tier": "auto"
    });
    let r = to_ir(&body).unwrap();
    assert_eq!(
        r.system,
        vec!["You are a weather bot.", "Answer in French."]
    );
    assert_eq!(r.max_tokens, Some(4096));
    assert_eq!(r.temperature, Some(0.3));
    assert_eq!(r.top_p, Some(0.9));
    assert_eq!(r.top_k, Some(40));
    assert_eq!(r.stop, vec!["\n\nHuman:"]);
    assert_eq!(r.user.as_deref(), Some("user-42"));
    assert_eq!(r.parallel_tool_calls, Some(false));
    assert_eq!(r.tool_choice, Some(ToolChoice::Tool("get_weather".into())));
    assert_eq!(
        r.reasoning,
        Some(Reasoning {
            budget_tokens: Some(2048),
            ..Default::default()
        })
    );
    assert_eq!(r.tools.len(), 2);
    assert_eq!(r.tools[0].description.as_deref(), Some("Weather of a city"));
    assert_eq!(r.tools[0].parameters["required"], json!(["city"]));
    assert_eq!(r.tools[1].parameters, json!({"type": "object"}));

    assert_eq!(r.messages.len(), 3);
    assert_eq!(r.messages[0].role, Role::User);
    assert_eq!(
        r.messages[0].content,
        vec![
            Part::Text("What is in this picture, and the weather in Paris?".into()),
            Part::Image(Image::Base64 {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into()
            }),
            Part::Image(Image::Url("https://example.com/cat.jpg".into())),
        ]
    );
    assert_eq!(r.messages[1].role, Role::Assistant);
    assert_eq!(
        r.messages[1].content,
        vec![
            Part::Thinking {
                text: "The user wants weather.".into(),
                signature: Some("EqQBCkYIBxgCKkC".into())
            },
            Part::RedactedThinking("EmwKAhgBEgy3va".into()),
            Part::Text("Let me check.".into()),
            Part::ToolCall(ToolCall {
                id: "call_7".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
                signature: Some("c2lnbmF0dXJlLTE=".into()),
            }),
            Part::ToolCall(ToolCall {
                id: "toolu_01A".into(),
                name: "get_time".into(),
                arguments: "{}".into(),
                signature: None,
            }),
        ]
    );
    assert_eq!(
        r.messages[2].content,
        vec![
            Part::ToolResult(ToolResult {
                call_id: "call_7".into(),
                name: None,
                content: vec![
                    Part::Text("sunny, 22C".into()),
                    Part::Image(Image::Base64 {
                        media_type: "image/jpeg".into(),
                        data: "/9j/4AAQ".into()
                    }),
                ],
                is_error: false,
            }),
            Part::ToolResult(ToolResult {
                call_id: "toolu_01A".into(),
                name: None,
                content: vec![Part::Text("no clock".into())],
                is_error: true,
            }),
        ]
    );
}

#[test]
fn string_content_system_and_choices() {
    let mut body = base(json!([{"role": "user", "content": "Hi"}]));
    body["system"] = json!("Be brief.");
    body["thinking"] = json!({"type": "disabled"});
    body["tool_choice"] = json!({"type": "any"});
    let r = to_ir(&body).unwrap();
    assert_eq!(r.system, vec!["Be brief."]);
    assert_eq!(r.messages[0].content, vec![Part::Text("Hi".into())]);
    assert_eq!(r.tool_choice, Some(ToolChoice::Required));
    assert_eq!(r.parallel_tool_calls, None);
    assert!(r.reasoning.unwrap().disabled);
    body["tool_choice"] = json!({"type": "none"});
    assert_eq!(to_ir(&body).unwrap().tool_choice, Some(ToolChoice::None));
    body["tool_choice"] = json!({"type": "auto", "disable_parallel_tool_use": false});
    let r = to_ir(&body).unwrap();
    assert_eq!(r.tool_choice, Some(ToolChoice::Auto));
    assert_eq!(r.parallel_tool_calls, None);
    // A data URL in a url source is inline data.
    let r = to_ir(&base(json!([{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "data:image/webp;base64,UklGR"}}
    ]}])))
    .unwrap();
    assert_eq!(
        r.messages[0].content,
        vec![Part::Image(Image::Base64 {
            media_type: "image/webp".into(),
            data: "UklGR".into()
        })]
    );
}

#[test]
fn structured_output_becomes_a_json_schema_format() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let mut body = base(json!([{"role": "user", "content": "Hi"}]));
    body["output_config"] = json!({"format": {"type": "json_schema", "schema": schema}});
    let r = to_ir(&body).unwrap();
    assert_eq!(
        r.response_format,
        Some(ResponseFormat::JsonSchema {
            name: "response".into(),
            schema: schema.clone(),
            strict: None
        })
    );
    let mut body = base(json!([{"role": "user", "content": "Hi"}]));
    body["output_format"] = json!({"type": "json_schema", "schema": schema});
    assert!(to_ir(&body).unwrap().response_format.is_some());
}

#[test]
fn what_cannot_be_carried_is_a_400_naming_it() {
    let user = |content: Value| base(json!([{"role": "user", "content": content}]));
    assert_eq!(
        param(user(json!([
            {"type": "text", "text": "Summarise"},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0"}}
        ]))),
        "messages[0].content[1].type"
    );
    assert_eq!(
        param(user(json!([
            {"type": "image", "source": {"type": "file", "file_id": "file_011C"}}
        ]))),
        "messages[0].content[0].source.type"
    );
    assert_eq!(
        param(user(json!([
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "search_result", "source": "https://x", "title": "t", "content": []}
            ]}
        ]))),
        "messages[0].content[0].content[0].type"
    );
    assert_eq!(
        param(user(
            json!([{"type": "tool_use", "name": "w", "input": {}}])
        )),
        "messages[0].content[0].id"
    );
    assert_eq!(
        param(user(json!([{"type": "text"}]))),
        "messages[0].content[0].text"
    );
    let mut body = user(json!("Hi"));
    body["tools"] = json!([
        {"name": "get_weather", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    ]);
    assert_eq!(param(body), "tools[1].type");
    let mut body = user(json!("Hi"));
    body["mcp_servers"] =
        json!([{"type": "url", "url": "https://mcp.example.com/sse", "name": "x"}]);
    assert_eq!(param(body), "mcp_servers");
    let mut body = user(json!("Hi"));
    body["system"] = json!([{"type": "image", "source": {}}]);
    assert_eq!(param(body), "system[0]");
}
