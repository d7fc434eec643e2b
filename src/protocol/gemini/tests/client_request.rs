//! Client requests: validation and conversion to the pivot.

use super::super::super::ir::{
    self, Effort, Image, Message, Part, Reasoning, ResponseFormat, Role, Tool, ToolCall,
    ToolChoice, ToolResult,
};
use super::super::{to_ir, validate};
use serde_json::{json, Value};

fn param_of(body: Value) -> Option<String> {
    validate(&body).unwrap_err().param
}

fn to_ir_param(body: Value) -> Option<String> {
    to_ir(body).unwrap_err().param
}

const USER_HI: &str = r#"{"role": "user", "parts": [{"text": "hi"}]}"#;

#[test]
fn validation_names_the_field() {
    let hi: Value = serde_json::from_str(USER_HI).unwrap();
    assert_eq!(param_of(json!({})), Some("contents".into()));
    assert_eq!(param_of(json!({"contents": {}})), Some("contents".into()));
    assert_eq!(param_of(json!({"contents": []})), Some("contents".into()));
    assert_eq!(
        param_of(json!({"contents": [hi, "text"]})),
        Some("contents[1]".into())
    );
    assert_eq!(
        param_of(json!({"contents": [hi, {"role": "assistant", "parts": []}]})),
        Some("contents[1].role".into())
    );
    assert_eq!(
        param_of(json!({"contents": [hi, {"role": "user", "parts": {"text": "x"}}]})),
        Some("contents[1].parts".into())
    );
    assert_eq!(
        param_of(json!({"contents": [hi, {"role": "user", "parts": ["x"]}]})),
        Some("contents[1].parts[0]".into())
    );
    let with = |k: &str, v: Value| {
        let mut b = json!({"contents": [hi.clone()]});
        b[k] = v;
        param_of(b)
    };
    assert_eq!(
        with("systemInstruction", json!("be brief")),
        Some("systemInstruction".into())
    );
    assert_eq!(
        with("generationConfig", json!([])),
        Some("generationConfig".into())
    );
    assert_eq!(with("tools", json!({})), Some("tools".into()));
    assert_eq!(with("tools", json!(["x"])), Some("tools".into()));
    assert_eq!(with("toolConfig", json!("AUTO")), Some("toolConfig".into()));
    assert_eq!(
        with("safetySettings", json!({})),
        Some("safetySettings".into())
    );
    let config = |g: Value| with("generationConfig", g);
    assert_eq!(
        config(json!({"temperature": "0.5"})),
        Some("generationConfig.temperature".into())
    );
    assert_eq!(
        config(json!({"topP": true})),
        Some("generationConfig.topP".into())
    );
    assert_eq!(
        config(json!({"topK": 2.5})),
        Some("generationConfig.topK".into())
    );
    assert_eq!(
        config(json!({"maxOutputTokens": -1})),
        Some("generationConfig.maxOutputTokens".into())
    );
    assert_eq!(
        config(json!({"candidateCount": "1"})),
        Some("generationConfig.candidateCount".into())
    );
    assert_eq!(
        config(json!({"candidateCount": 1_000_000_000})),
        Some("generationConfig.candidateCount".into()),
        "each candidate is reserved: the count is bounded"
    );
    let mut eight = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    eight["generationConfig"] = json!({"candidateCount": 8});
    assert!(validate(&eight).is_ok());
    assert_eq!(
        config(json!({"stopSequences": ["a", 1]})),
        Some("generationConfig.stopSequences".into())
    );
    assert_eq!(
        config(json!({"responseModalities": "TEXT"})),
        Some("generationConfig.responseModalities".into())
    );
    // The proto spelling is checked as well.
    assert_eq!(
        with("generation_config", json!({"max_output_tokens": "9"})),
        Some("generationConfig.maxOutputTokens".into())
    );
    let msg = validate(&json!({"contents": [hi, {"parts": 3}]})).unwrap_err();
    assert!(msg.message.contains("contents[1].parts"), "{}", msg.message);
}

#[test]
fn validation_accepts_real_requests() {
    // The spec's speech example, and a full text request.
    validate(&json!({
        "contents": [{"parts": [{"text": "Say cheerfully: Have a wonderful day!"}]}],
        "generationConfig": {
            "responseModalities": ["AUDIO"],
            "speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}}
        }
    }))
    .unwrap();
    validate(&conversation()).unwrap();
}

/// A multi-turn conversation as the google-genai SDK sends it, with parallel calls.
pub(super) fn conversation() -> Value {
    json!({
        "contents": [
            {"role": "user", "parts": [
                {"text": "What's the weather in Paris and London? Here is a map."},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/map.jpg"}}
            ]},
            {"role": "model", "parts": [
                {"text": "The user wants weather for two cities.", "thought": true},
                {"text": " I'll call the tool twice.", "thought": true, "thoughtSignature": "RXFRQkNrZ0lB-_"},
                {"functionCall": {"id": "toolu_01", "name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "get_weather", "args": {"city": "London"}}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "toolu_01", "name": "get_weather", "response": {"result": "18°C, sunny"}}},
                {"functionResponse": {"name": "get_weather", "response": {"temp_c": 12, "sky": "rain"}}}
            ]}
        ],
        "systemInstruction": {"parts": [{"text": "You are a weather bot."}, {"text": "Be brief."}]},
        "generationConfig": {
            "temperature": 0.4, "topP": 0.9, "topK": 40, "maxOutputTokens": 1024,
            "stopSequences": ["END"], "seed": 7, "presencePenalty": 0.1, "frequencyPenalty": 0.2,
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"summary": {"type": "STRING"}}},
            "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": true}
        },
        "tools": [{"functionDeclarations": [
            {"name": "get_weather", "description": "Current weather",
             "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"},
                 "days": {"type": "ARRAY", "items": {"type": "INTEGER"}}}, "required": ["city"]}},
            {"name": "get_time", "parametersJsonSchema": {"type": "object", "properties": {"tz": {"type": "string"}}}}
        ]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    })
}

#[test]
fn client_conversation_to_ir() {
    let req = to_ir(conversation()).unwrap();
    assert_eq!(req.system, vec!["You are a weather bot.", "Be brief."]);
    assert_eq!(req.messages.len(), 3);
    assert_eq!(
        req.messages[0],
        Message {
            role: Role::User,
            content: vec![
                Part::Text("What's the weather in Paris and London? Here is a map.".into()),
                Part::Image(Image::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into()
                }),
                Part::Image(Image::Url("https://example.com/map.jpg".into())),
            ]
        }
    );
    assert_eq!(
        req.messages[1],
        Message {
            role: Role::Assistant,
            content: vec![
                // Two streamed thought parts are one block; the SDK's URL-safe signature
                // is back in the standard alphabet.
                Part::Thinking {
                    text: "The user wants weather for two cities. I'll call the tool twice.".into(),
                    signature: Some("RXFRQkNrZ0lB+/==".into()),
                },
                Part::ToolCall(ToolCall {
                    id: "toolu_01".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                    signature: None,
                }),
                Part::ToolCall(ToolCall {
                    id: "call_1_3".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"London"}"#.into(),
                    signature: None,
                }),
            ]
        }
    );
    assert_eq!(
        req.messages[2].content,
        vec![
            Part::ToolResult(ToolResult {
                call_id: "toolu_01".into(),
                name: Some("get_weather".into()),
                content: vec![Part::Text("18°C, sunny".into())],
                is_error: false,
            }),
            // No id: paired by name with the call not answered yet.
            Part::ToolResult(ToolResult {
                call_id: "call_1_3".into(),
                name: Some("get_weather".into()),
                content: vec![Part::Text(r#"{"temp_c":12,"sky":"rain"}"#.into())],
                is_error: false,
            }),
        ]
    );
    assert_eq!(req.temperature, Some(0.4));
    assert_eq!(req.top_p, Some(0.9));
    assert_eq!(req.top_k, Some(40));
    assert_eq!(req.max_tokens, Some(1024));
    assert_eq!(req.stop, vec!["END"]);
    assert_eq!(req.seed, Some(7));
    assert_eq!(req.presence_penalty, Some(0.1));
    assert_eq!(req.frequency_penalty, Some(0.2));
    assert_eq!(
        req.response_format,
        Some(ResponseFormat::JsonSchema {
            name: "response".into(),
            schema: json!({"type": "object", "properties": {"summary": {"type": "string"}}}),
            strict: None,
        })
    );
    assert_eq!(
        req.reasoning,
        Some(Reasoning {
            budget_tokens: Some(2048),
            ..Default::default()
        })
    );
    assert_eq!(
        req.tools,
        vec![
            Tool {
                name: "get_weather".into(),
                description: Some("Current weather".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"},
                    "days": {"type": "array", "items": {"type": "integer"}}}, "required": ["city"]}),
            },
            Tool {
                name: "get_time".into(),
                description: None,
                parameters: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
            },
        ]
    );
    assert_eq!(
        req.tool_choice,
        Some(ToolChoice::Tool("get_weather".into()))
    );
}

#[test]
fn ids_carrying_signatures_are_split_on_calls_and_results() {
    let joined = ir::join_call_id("call_abc", Some("c2lnbmF0dXJl"));
    let req = to_ir(json!({"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"id": joined, "name": "f", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": joined, "name": "f",
            "response": {"output": "done"}}}]}
    ]}))
    .unwrap();
    let Part::ToolCall(call) = &req.messages[1].content[0] else {
        panic!("{:?}", req.messages[1])
    };
    assert_eq!(call.id, "call_abc");
    assert_eq!(call.signature.as_deref(), Some("c2lnbmF0dXJl"));
    let Part::ToolResult(result) = &req.messages[2].content[0] else {
        panic!("{:?}", req.messages[2])
    };
    assert_eq!(result.call_id, "call_abc");
    assert_eq!(result.content, vec![Part::Text("done".into())]);
    // A part's own signature wins over one carried in the id.
    let req = to_ir(json!({"contents": [{"role": "model", "parts": [
        {"functionCall": {"id": "call_x__sig__aWQ", "name": "f", "args": {}}, "thoughtSignature": "cGFydA=="}
    ]}]}))
    .unwrap();
    let Part::ToolCall(call) = &req.messages[0].content[0] else {
        panic!()
    };
    assert_eq!(
        (call.id.as_str(), call.signature.as_deref()),
        ("call_x", Some("cGFydA=="))
    );
}

#[test]
fn function_results_and_errors() {
    let result = |response: Value| {
        let req = to_ir(json!({"contents": [
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": response}}]}
        ]}))
        .unwrap();
        let Part::ToolResult(r) = req.messages[1].content[0].clone() else {
            panic!()
        };
        assert_eq!(r.call_id, "call_0_0");
        let Part::Text(t) = &r.content[0] else {
            panic!()
        };
        (t.clone(), r.is_error)
    };
    assert_eq!(result(json!({"result": "42"})), ("42".into(), false));
    assert_eq!(result(json!({"output": "ok"})), ("ok".into(), false));
    assert_eq!(result(json!({"error": "boom"})), ("boom".into(), true));
    assert_eq!(
        result(json!({"result": 42})),
        (r#"{"result":42}"#.into(), false)
    );
    assert_eq!(
        result(json!({"result": "a", "extra": 1})),
        (r#"{"result":"a","extra":1}"#.into(), false)
    );
    // A response that answers nothing.
    assert_eq!(
        to_ir_param(json!({"contents": [
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}
        ]})),
        Some("contents[0].parts[0].functionResponse".into())
    );
}

#[test]
fn multimodal_function_response_keeps_its_images() {
    let req = to_ir(json!({"contents": [
        {"role": "model", "parts": [{"functionCall": {"name": "shot", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "shot", "response": {"result": "taken"},
            "parts": [{"inlineData": {"mimeType": "image/webp", "data": "UklGRg=="}}]}}]}
    ]}))
    .unwrap();
    let Part::ToolResult(r) = &req.messages[1].content[0] else {
        panic!()
    };
    assert_eq!(
        r.content,
        vec![
            Part::Text("taken".into()),
            Part::Image(Image::Base64 {
                media_type: "image/webp".into(),
                data: "UklGRg==".into()
            })
        ]
    );
}

#[test]
fn what_other_protocols_cannot_carry_is_refused() {
    let user = |parts: Value| json!({"contents": [{"role": "user", "parts": parts}]});
    assert_eq!(
        to_ir_param(user(json!([{"text": "listen"},
            {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}}]))),
        Some("contents[0].parts[1].inlineData".into())
    );
    assert_eq!(
        to_ir_param(user(
            json!([{"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}}])
        )),
        Some("contents[0].parts[0].inlineData".into())
    );
    assert_eq!(
        to_ir_param(user(json!([{"fileData": {"mimeType": "video/mp4",
            "fileUri": "https://www.youtube.com/watch?v=9hE5-98ZeCg"}}]))),
        Some("contents[0].parts[0].fileData".into())
    );
    assert_eq!(
        to_ir_param(user(
            json!([{"fileData": {"fileUri": "https://www.youtube.com/watch?v=x"}}])
        )),
        Some("contents[0].parts[0].fileData".into())
    );
    assert_eq!(
        to_ir_param(json!({"contents": [{"role": "model", "parts": [
            {"executableCode": {"language": "PYTHON", "code": "print(1)"}}]}]})),
        Some("contents[0].parts[0].executableCode".into())
    );
    let with = |k: &str, v: Value| {
        let mut b = user(json!([{"text": "hi"}]));
        b[k] = v;
        to_ir_param(b)
    };
    assert_eq!(
        with("generationConfig", json!({"candidateCount": 2})),
        Some("generationConfig.candidateCount".into())
    );
    assert_eq!(
        with(
            "generationConfig",
            json!({"responseModalities": ["TEXT", "AUDIO"]})
        ),
        Some("generationConfig.responseModalities".into())
    );
    assert_eq!(
        with("generationConfig", json!({"responseModalities": ["image"]})),
        Some("generationConfig.responseModalities".into())
    );
    assert_eq!(
        with(
            "generationConfig",
            json!({"speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}}})
        ),
        Some("generationConfig.speechConfig".into())
    );
    assert_eq!(
        with(
            "generationConfig",
            json!({"responseMimeType": "text/x.enum"})
        ),
        Some("generationConfig.responseMimeType".into())
    );
    assert_eq!(
        with("tools", json!([{"googleSearch": {}}])),
        Some("tools[0].googleSearch".into())
    );
    assert_eq!(
        with(
            "tools",
            json!([{"functionDeclarations": []}, {"code_execution": {}}])
        ),
        Some("tools[1].code_execution".into())
    );
    assert_eq!(
        with("cachedContent", json!("cachedContents/abc")),
        Some("cachedContent".into())
    );
    // Nothing left to send once empty parts are dropped.
    assert_eq!(
        to_ir_param(user(json!([{"text": ""}]))),
        Some("contents".into())
    );
    // Harmless settings pass.
    assert!(to_ir({
        let mut b = user(json!([{"text": "hi"}]));
        b["safetySettings"] = json!([{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}]);
        b["generationConfig"] = json!({"candidateCount": 1, "responseModalities": ["TEXT"], "mediaResolution": "MEDIA_RESOLUTION_LOW"});
        b
    })
    .is_ok());
}

#[test]
fn proto_spellings_are_read_and_the_relays_limit_wins() {
    let req = to_ir(json!({
        "system_instruction": {"parts": [{"text": "sys"}]},
        "contents": [{"role": "user", "parts": [
            {"text": "see"}, {"inline_data": {"mime_type": "image/jpeg", "data": "/9j/4A=="}}]}],
        "generation_config": {"temperature": 0.2, "max_output_tokens": 5000,
            "thinking_config": {"thinking_budget": 0}},
        // What the relay adds when it lowers the limit.
        "generationConfig": {"maxOutputTokens": 300},
        "tools": [{"function_declarations": [{"name": "f", "parameters_json_schema": {"type": "object"}}]}],
        "tool_config": {"function_calling_config": {"mode": "none"}}
    }))
    .unwrap();
    assert_eq!(req.system, vec!["sys"]);
    assert_eq!(
        req.messages[0].content[1],
        Part::Image(Image::Base64 {
            media_type: "image/jpeg".into(),
            data: "/9j/4A==".into()
        })
    );
    assert_eq!(req.temperature, Some(0.2));
    assert_eq!(req.max_tokens, Some(300));
    assert_eq!(
        req.reasoning,
        Some(Reasoning {
            disabled: true,
            ..Default::default()
        })
    );
    assert_eq!(req.tools[0].parameters, json!({"type": "object"}));
    assert_eq!(req.tool_choice, Some(ToolChoice::None));
}

#[test]
fn thinking_and_tool_choice_settings() {
    let with = |g: Value, tc: Value| {
        to_ir(json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": g,
            "toolConfig": tc, "tools": [{"functionDeclarations": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}]}))
        .unwrap()
    };
    let r = |budget: Value| {
        with(
            json!({"thinkingConfig": {"thinkingBudget": budget}}),
            json!({}),
        )
        .reasoning
    };
    assert_eq!(r(json!(-1)).unwrap().effort, Some(Effort::Medium));
    assert!(r(json!(0)).unwrap().disabled);
    assert_eq!(r(json!(512)).unwrap().budget_tokens, Some(512));
    let level = with(
        json!({"thinkingConfig": {"thinkingLevel": "HIGH"}}),
        json!({}),
    );
    assert_eq!(level.reasoning.unwrap().effort, Some(Effort::High));
    let level = with(
        json!({"thinkingConfig": {"thinkingLevel": "low"}}),
        json!({}),
    );
    assert_eq!(level.reasoning.unwrap().effort, Some(Effort::Low));
    let plain = with(json!({"responseMimeType": "application/json"}), json!({}));
    assert_eq!(plain.response_format, Some(ResponseFormat::JsonObject));
    assert_eq!(plain.reasoning, None);
    assert_eq!(
        plain.tools[0].parameters,
        json!({"type": "object", "properties": {}})
    );
    let choice = |mode: &str, allowed: Value| {
        with(
            json!({}),
            json!({"functionCallingConfig": {"mode": mode, "allowedFunctionNames": allowed}}),
        )
    };
    assert_eq!(
        choice("AUTO", json!([])).tool_choice,
        Some(ToolChoice::Auto)
    );
    assert_eq!(
        choice("ANY", json!([])).tool_choice,
        Some(ToolChoice::Required)
    );
    let two = choice("ANY", json!(["a", "c"]));
    assert_eq!(two.tool_choice, Some(ToolChoice::Required));
    let names: Vec<&str> = two.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["a", "c"]);
}
