//! Pivot requests → generate-content upstream requests.

use super::super::super::ir::{
    self, Effort, Image, Message, Part, Reasoning, ResponseFormat, Role, Tool, ToolCall,
    ToolChoice, ToolResult,
};
use super::super::{from_ir, to_ir};
use super::client_request::conversation;
use super::opts;
use serde_json::{json, Value};

fn upstream_body(req: &ir::Request) -> Value {
    serde_json::from_slice(&from_ir(req, &opts("gemini-2.5-flash", false)).unwrap().body).unwrap()
}

fn call(id: &str, name: &str, args: &str, sig: Option<&str>) -> Part {
    Part::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
        signature: sig.map(Into::into),
    })
}

fn result(call_id: &str, name: Option<&str>, text: &str, is_error: bool) -> Part {
    Part::ToolResult(ToolResult {
        call_id: call_id.into(),
        name: name.map(Into::into),
        content: vec![Part::Text(text.into())],
        is_error,
    })
}

#[test]
fn pivot_conversation_to_upstream() {
    let req = ir::Request {
        system: vec!["You are terse.".into()],
        messages: vec![
            Message {
                role: Role::User,
                content: vec![
                    Part::Text("Weather in Paris and Rome? And this photo:".into()),
                    Part::Image(Image::Url("https://example.com/a/photo.PNG?x=1".into())),
                    Part::Image(Image::Base64 {
                        media_type: "image/jpeg".into(),
                        data: "/9j/4AAQ".into(),
                    }),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Thinking {
                        text: "two calls".into(),
                        signature: Some("anthropic-sig".into()),
                    },
                    Part::RedactedThinking("opaque".into()),
                    call(
                        "call_a",
                        "get_weather",
                        r#"{"city":"Paris"}"#,
                        Some("Q2lrQg=="),
                    ),
                    call("call_b", "get_weather", r#"{"city":"Rome"}"#, None),
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    result("call_a", Some("get_weather"), r#"{"temp":18}"#, false),
                    result("call_b", None, "22 degrees", false),
                ],
            },
            // A second user turn in a row joins the one before.
            Message {
                role: Role::User,
                content: vec![Part::Text("Thanks".into())],
            },
            // A turn with nothing this API can carry is dropped.
            Message {
                role: Role::Assistant,
                content: vec![Part::RedactedThinking("x".into())],
            },
        ],
        max_tokens: Some(800),
        temperature: Some(0.5),
        top_p: Some(0.95),
        top_k: Some(20),
        stop: vec!["STOP!".into()],
        seed: Some(3),
        presence_penalty: Some(0.5),
        frequency_penalty: Some(0.25),
        tools: vec![Tool {
            name: "get_weather".into(),
            description: Some("Weather now".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        tool_choice: Some(ToolChoice::Tool("get_weather".into())),
        reasoning: Some(Reasoning {
            effort: Some(Effort::High),
            ..Default::default()
        }),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: json!({"type": "object"}),
            strict: Some(true),
        }),
        ..Default::default()
    };
    let out = from_ir(&req, &opts("gemini-2.5-flash", false)).unwrap();
    assert_eq!(out.path, "/v1beta/models/gemini-2.5-flash:generateContent");
    let body: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(
        body,
        json!({
            "contents": [
                {"role": "user", "parts": [
                    {"text": "Weather in Paris and Rome? And this photo:"},
                    {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/a/photo.PNG?x=1"}},
                    {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}}
                ]},
                {"role": "model", "parts": [
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "Q2lrQg=="},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"temp": 18}}},
                    {"functionResponse": {"name": "get_weather", "response": {"result": "22 degrees"}}},
                    {"text": "Thanks"}
                ]}
            ],
            "systemInstruction": {"parts": [{"text": "You are terse."}]},
            "generationConfig": {
                "temperature": 0.5, "topP": 0.95, "topK": 20, "maxOutputTokens": 800,
                "stopSequences": ["STOP!"], "seed": 3, "presencePenalty": 0.5, "frequencyPenalty": 0.25,
                "responseMimeType": "application/json", "responseJsonSchema": {"type": "object"},
                "thinkingConfig": {"thinkingBudget": 24576, "includeThoughts": true}
            },
            "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Weather now",
                "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
        })
    );
    let streamed = from_ir(&req, &opts("gemini-2.5-flash", true)).unwrap();
    assert_eq!(
        streamed.path,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
}

#[test]
fn upstream_minimal_request_and_choices() {
    let user = |t: &str| Message {
        role: Role::User,
        content: vec![Part::Text(t.into())],
    };
    let mut req = ir::Request {
        messages: vec![user("hi")],
        ..Default::default()
    };
    // No limit is added: the API needs none.
    assert_eq!(
        upstream_body(&req),
        json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    );
    req.reasoning = Some(Reasoning {
        disabled: true,
        ..Default::default()
    });
    req.response_format = Some(ResponseFormat::JsonObject);
    req.tools = vec![Tool {
        name: "f".into(),
        description: None,
        parameters: Value::Null,
    }];
    for (choice, expected) in [
        (ToolChoice::Auto, json!({"mode": "AUTO"})),
        (ToolChoice::None, json!({"mode": "NONE"})),
        (ToolChoice::Required, json!({"mode": "ANY"})),
    ] {
        req.tool_choice = Some(choice);
        let body = upstream_body(&req);
        assert_eq!(body["toolConfig"]["functionCallingConfig"], expected);
        assert_eq!(
            body["generationConfig"],
            json!({"responseMimeType": "application/json", "thinkingConfig": {"thinkingBudget": 0}})
        );
        assert_eq!(
            body["tools"],
            json!([{"functionDeclarations": [{"name": "f"}]}])
        );
    }
    // Resource names are used as they are.
    let out = from_ir(&req, &opts("tunedModels/my-tune", false)).unwrap();
    assert_eq!(out.path, "/v1beta/tunedModels/my-tune:generateContent");
    let out = from_ir(&req, &opts("models/gemini-2.0-flash", true)).unwrap();
    assert_eq!(
        out.path,
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
    );
}

#[test]
fn upstream_tool_results_errors_images_and_orphans() {
    let req = ir::Request {
        messages: vec![
            Message {
                role: Role::Assistant,
                content: vec![call("c1", "read_file", "not json", None)],
            },
            Message {
                role: Role::User,
                content: vec![Part::ToolResult(ToolResult {
                    call_id: "c1".into(),
                    name: None,
                    content: vec![
                        Part::Text("permission denied".into()),
                        Part::Image(Image::Base64 {
                            media_type: "image/png".into(),
                            data: "AAAA".into(),
                        }),
                    ],
                    is_error: true,
                })],
            },
        ],
        ..Default::default()
    };
    assert_eq!(
        upstream_body(&req)["contents"],
        json!([
            {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}},
                "thoughtSignature": "skip_thought_signature_validator"}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "read_file", "response": {"error": "permission denied"}}},
                {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}
            ]}
        ])
    );
    let orphan = ir::Request {
        messages: vec![Message {
            role: Role::User,
            content: vec![result("ghost", None, "x", false)],
        }],
        ..Default::default()
    };
    let err = from_ir(&orphan, &opts("m", false)).err().unwrap();
    assert!(err.message.contains("`ghost`"), "{}", err.message);
    let empty = ir::Request {
        messages: vec![Message {
            role: Role::User,
            content: vec![Part::Text(String::new())],
        }],
        ..Default::default()
    };
    assert!(from_ir(&empty, &opts("m", false)).is_err());
}

#[test]
fn round_trip_through_the_pivot_keeps_calls_paired() {
    // A generate-content client's history, through the pivot and back to the API.
    let req = to_ir(conversation()).unwrap();
    let body = upstream_body(&req);
    assert_eq!(
        body["contents"][1]["parts"],
        json!([
            // The client's history had no signature: the first call is marked unsigned
            // on purpose, as the API documents for history it did not write.
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": "skip_thought_signature_validator"},
            {"functionCall": {"name": "get_weather", "args": {"city": "London"}}}
        ])
    );
    assert_eq!(
        body["contents"][2]["parts"],
        json!([
            {"functionResponse": {"name": "get_weather", "response": {"result": "18°C, sunny"}}},
            {"functionResponse": {"name": "get_weather", "response": {"temp_c": 12, "sky": "rain"}}}
        ])
    );
    assert_eq!(
        body["generationConfig"]["responseJsonSchema"],
        json!({"type": "object", "properties": {"summary": {"type": "string"}}})
    );
}
