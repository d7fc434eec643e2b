use super::super::{compact_to_ir, to_ir};
use crate::protocol::ir::{
    Effort, Image, Message, Part, Reasoning, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
    ToolResult,
};
use serde_json::{json, Value};

fn param(body: Value) -> Option<String> {
    to_ir(body).expect_err("should be a 400").param
}

fn text(s: &str) -> Part {
    Part::Text(s.into())
}

#[test]
fn a_string_input_is_one_user_turn_with_instructions_as_system() {
    let req = to_ir(json!({
        "model": "claude-sonnet-4",
        "instructions": "You are a helpful assistant.",
        "input": "Tell me a three sentence bedtime story about a unicorn.",
        "max_output_tokens": 500,
        "temperature": 0.7,
        "top_p": 0.9,
        "user": "user-1234",
        "store": true,
        "metadata": {"session": "abc"},
        "truncation": "auto",
        "include": ["reasoning.encrypted_content"],
        "service_tier": "auto"
    }))
    .unwrap();
    assert_eq!(req.system, vec!["You are a helpful assistant.".to_string()]);
    assert_eq!(
        req.messages,
        vec![Message {
            role: Role::User,
            content: vec![text(
                "Tell me a three sentence bedtime story about a unicorn."
            )]
        }]
    );
    assert_eq!(req.max_tokens, Some(500));
    assert_eq!(req.temperature, Some(0.7));
    assert_eq!(req.top_p, Some(0.9));
    assert_eq!(req.user.as_deref(), Some("user-1234"));
    assert_eq!(req.reasoning, None);
    assert_eq!(req.tool_choice, None);
}

/// A coding agent's second turn: the model reasoned, called two tools in parallel, and
/// the client sends back the reasoning item, both calls and both outputs.
#[test]
fn an_agent_turn_with_reasoning_parallel_calls_and_results() {
    let sig_id = crate::protocol::ir::join_call_id("call_b", Some("Q2lnU2ln"));
    let req = to_ir(json!({
        "model": "gemini-2.5-pro",
        "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "Work in /repo."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "What's the weather in Paris and Rome?"}]},
            {"type": "reasoning", "id": "rs_req0_0", "summary": [
                {"type": "summary_text", "text": "**Planning**"},
                {"type": "summary_text", "text": "Call the weather tool twice."}
            ], "encrypted_content": "EqQBCkYIBxgCKkA"},
            {"type": "function_call", "id": "fc_req0_1", "call_id": "call_a", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_req0_2", "call_id": sig_id, "name": "get_weather",
             "arguments": "{\"city\":\"Rome\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_a", "output": "{\"temp\":18}"},
            {"type": "function_call_output", "call_id": sig_id, "output": [
                {"type": "input_text", "text": "{\"temp\":24}"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
            ]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]}
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather for a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                   "strict": true}],
        "tool_choice": "required",
        "parallel_tool_calls": true
    }))
    .unwrap();
    assert_eq!(req.system, vec!["Work in /repo.".to_string()]);
    assert_eq!(req.messages.len(), 4, "{:#?}", req.messages);
    assert_eq!(req.messages[0].role, Role::User);
    assert_eq!(
        req.messages[1],
        Message {
            role: Role::Assistant,
            content: vec![
                Part::Thinking {
                    text: "**Planning**\n\nCall the weather tool twice.".into(),
                    signature: Some("EqQBCkYIBxgCKkA".into()),
                },
                Part::ToolCall(ToolCall {
                    id: "call_a".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                    signature: None,
                }),
                Part::ToolCall(ToolCall {
                    id: "call_b".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Rome\"}".into(),
                    signature: Some("Q2lnU2ln".into()),
                }),
            ]
        }
    );
    // Results merge into one user turn; ids lose the signature exactly as the calls
    // did, and the function name is filled in. The user's text is a turn of its own.
    assert_eq!(
        req.messages[2].content,
        vec![
            Part::ToolResult(ToolResult {
                call_id: "call_a".into(),
                name: Some("get_weather".into()),
                content: vec![text("{\"temp\":18}")],
                is_error: false,
            }),
            Part::ToolResult(ToolResult {
                call_id: "call_b".into(),
                name: Some("get_weather".into()),
                content: vec![
                    text("{\"temp\":24}"),
                    Part::Image(Image::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into()
                    })
                ],
                is_error: false,
            }),
        ]
    );
    assert_eq!(req.messages[3].content, vec![text("Thanks!")]);
    assert_eq!(
        req.tools,
        vec![Tool {
            name: "get_weather".into(),
            description: Some("Weather for a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }]
    );
    assert_eq!(req.tool_choice, Some(ToolChoice::Required));
    assert_eq!(req.parallel_tool_calls, Some(true));
}

#[test]
fn a_result_after_user_text_goes_first_in_that_turn() {
    let req = to_ir(json!({"model": "m", "input": [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "toolu_01", "name": "ls", "arguments": "{}"},
        {"role": "user", "content": "here it is"},
        {"type": "function_call_output", "call_id": "toolu_01", "output": "a.txt"}
    ]}))
    .unwrap();
    assert_eq!(req.messages.len(), 3);
    assert!(matches!(req.messages[2].content[0], Part::ToolResult(_)));
    assert_eq!(req.messages[2].content[1], text("here it is"));
}

#[test]
fn images_by_url_and_data_url_and_assistant_history() {
    let req = to_ir(json!({"model": "m", "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "Compare"},
            {"type": "input_image", "image_url": "https://upload.wikimedia.org/a.jpg", "detail": "high"},
            {"type": "input_image", "image_url": "data:image/webp;base64,UklGRg=="}
        ]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "content": [
            {"type": "output_text", "text": "The first ", "annotations": []},
            {"type": "refusal", "refusal": "I can't identify people."}
        ]},
        {"role": "system", "content": "Answer in French."}
    ]}))
    .unwrap();
    assert_eq!(
        req.messages[0].content,
        vec![
            text("Compare"),
            Part::Image(Image::Url("https://upload.wikimedia.org/a.jpg".into())),
            Part::Image(Image::Base64 {
                media_type: "image/webp".into(),
                data: "UklGRg==".into()
            }),
        ]
    );
    assert_eq!(
        req.messages[1],
        Message {
            role: Role::Assistant,
            content: vec![text("The first "), text("I can't identify people.")]
        }
    );
    assert_eq!(req.system, vec!["Answer in French.".to_string()]);
}

#[test]
fn redacted_and_signature_only_reasoning_round_trip() {
    let req = to_ir(json!({"model": "m", "input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "summary": [], "encrypted_content": "redacted_thinking:EmwKAhgB"},
        {"type": "reasoning", "summary": [], "encrypted_content": "c2lnbmF0dXJl"},
        {"type": "reasoning", "summary": []},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "raw thoughts"}]},
        {"role": "assistant", "content": "Hello"}
    ]}))
    .unwrap();
    assert_eq!(
        req.messages[1].content,
        vec![
            Part::RedactedThinking("EmwKAhgB".into()),
            Part::Thinking {
                text: String::new(),
                signature: Some("c2lnbmF0dXJl".into())
            },
            Part::Thinking {
                text: "raw thoughts".into(),
                signature: None
            },
            text("Hello"),
        ]
    );
}

#[test]
fn tool_choice_reasoning_and_text_format() {
    let req = to_ir(json!({"model": "m", "input": "x",
        "tools": [{"type": "function", "name": "f"}],
        "tool_choice": {"type": "function", "name": "f"},
        "reasoning": {"effort": "high", "summary": "detailed"},
        "text": {"format": {"type": "json_schema", "name": "person", "strict": true,
                            "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}
    }))
    .unwrap();
    assert_eq!(req.tool_choice, Some(ToolChoice::Tool("f".into())));
    assert_eq!(
        req.tools[0].parameters,
        json!({"type": "object", "properties": {}})
    );
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
            name: "person".into(),
            schema: json!({"type": "object", "properties": {"name": {"type": "string"}}}),
            strict: Some(true)
        })
    );
    let r = |v: Value| {
        to_ir(json!({"model": "m", "input": "x", "reasoning": v}))
            .unwrap()
            .reasoning
    };
    assert_eq!(r(json!({"effort": "none"})).map(|r| r.budget()), Some(0));
    assert_eq!(
        r(json!({"effort": "xhigh"})).and_then(|r| r.effort),
        Some(Effort::High)
    );
    assert_eq!(r(json!({"summary": "auto"})), Some(Reasoning::default()));
    assert_eq!(r(json!({})), None);
    let f = |v: Value| {
        to_ir(json!({"model": "m", "input": "x", "text": {"format": v}}))
            .unwrap()
            .response_format
    };
    assert_eq!(
        f(json!({"type": "json_object"})),
        Some(ResponseFormat::JsonObject)
    );
    assert_eq!(f(json!({"type": "text"})), Some(ResponseFormat::Text));
    for (choice, want) in [("auto", ToolChoice::Auto), ("none", ToolChoice::None)] {
        let req = to_ir(json!({"model": "m", "input": "x", "tool_choice": choice})).unwrap();
        assert_eq!(req.tool_choice, Some(want));
    }
}

#[test]
fn what_needs_a_native_channel_is_a_400_naming_the_field() {
    let base = |extra: Value| {
        let mut b = json!({"model": "m", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    assert_eq!(
        param(base(json!({"previous_response_id": "resp_abc"}))),
        Some("previous_response_id".into())
    );
    let e = to_ir(base(json!({"previous_response_id": "resp_abc"}))).unwrap_err();
    assert!(e.message.contains("storage is turned off"), "{}", e.message);
    assert!(e.message.contains("natively"), "{}", e.message);
    assert_eq!(
        param(base(json!({"tools": [
            {"type": "function", "name": "f"},
            {"type": "web_search_preview"}
        ]}))),
        Some("tools[1]".into())
    );
    for t in [
        "file_search",
        "computer_use_preview",
        "code_interpreter",
        "mcp",
    ] {
        assert_eq!(
            param(base(json!({"tools": [{"type": t}]}))),
            Some("tools[0]".into())
        );
    }
    assert_eq!(
        param(base(json!({"tools": [{"type": "function"}]}))),
        Some("tools[0].name".into())
    );
    assert_eq!(
        param(base(json!({"tool_choice": {"type": "web_search_preview"}}))),
        Some("tool_choice".into())
    );
    assert_eq!(
        param(base(json!({"tool_choice": "sometimes"}))),
        Some("tool_choice".into())
    );
    assert_eq!(
        param(base(json!({"conversation": "conv_1"}))),
        Some("conversation".into())
    );
    assert_eq!(
        param(base(json!({"prompt": {"id": "pmpt_1"}}))),
        Some("prompt".into())
    );
    assert_eq!(
        param(base(json!({"background": true}))),
        Some("background".into())
    );
    assert_eq!(
        param(base(
            json!({"text": {"format": {"type": "json_schema", "name": "x"}}})
        )),
        Some("text.format.schema".into())
    );
    assert_eq!(
        param(base(json!({"text": {"format": {"type": "yaml"}}}))),
        Some("text.format".into())
    );
    assert_eq!(param(json!({"model": "m"})), Some("input".into()));
    assert_eq!(
        param(json!({"model": "m", "input": []})),
        Some("input".into())
    );
}

#[test]
fn unsupported_items_and_parts_are_400s_with_their_path() {
    let with =
        |item: Value| json!({"model": "m", "input": [{"role": "user", "content": "a"}, item]});
    assert_eq!(
        param(with(json!({"type": "item_reference", "id": "msg_1"}))),
        Some("input[1]".into())
    );
    assert_eq!(
        param(with(
            json!({"type": "web_search_call", "id": "ws_1", "status": "completed"})
        )),
        Some("input[1]".into())
    );
    assert_eq!(
        param(with(
            json!({"role": "user", "content": [{"type": "input_image", "file_id": "file-abc"}]})
        )),
        Some("input[1].content[0]".into())
    );
    assert_eq!(
        param(with(json!({"role": "user", "content": [
            {"type": "input_text", "text": "see"},
            {"type": "input_file", "file_id": "file-abc"}
        ]}))),
        Some("input[1].content[1]".into())
    );
    assert_eq!(
        param(with(
            json!({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]})
        )),
        Some("input[1].content[0]".into())
    );
    assert_eq!(
        param(with(
            json!({"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file", "file_id": "f"}]})
        )),
        Some("input[1].output[0]".into())
    );
    assert_eq!(
        param(with(
            json!({"role": "system", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]})
        )),
        Some("input[1].content[0]".into())
    );
}

#[test]
fn compaction_asks_for_a_summary_after_the_conversation() {
    let req = compact_to_ir(json!({
        "model": "claude-sonnet-4",
        "instructions": "You are a coding agent.",
        "input": [
            {"role": "user", "content": "Refactor the parser."},
            {"type": "function_call", "call_id": "toolu_1", "name": "read_file", "arguments": "{\"path\":\"src/parser.rs\"}"},
            {"type": "function_call_output", "call_id": "toolu_1", "output": "fn parse() {}"},
            {"role": "assistant", "content": "Done: parse() now returns Result."}
        ],
        "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object"}},
                  {"type": "web_search"}]
    }))
    .unwrap();
    assert_eq!(req.system, vec!["You are a coding agent.".to_string()]);
    assert_eq!(req.messages.len(), 5);
    let last = req.messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    let Part::Text(prompt) = &last.content[0] else {
        panic!("{last:?}")
    };
    for needle in [
        "decisions",
        "tool",
        "open tasks",
        "preferences",
        "summary alone",
    ] {
        assert!(prompt.contains(needle), "{needle}: {prompt}");
    }
    assert_eq!(req.tool_choice, Some(ToolChoice::None));
    assert_eq!(req.tools.len(), 1);
    assert_eq!(req.tools[0].name, "read_file");
    assert_eq!(
        compact_to_ir(json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}))
            .unwrap_err()
            .param,
        Some("previous_response_id".into())
    );
    assert_eq!(
        compact_to_ir(json!({"model": "m"})).unwrap_err().param,
        Some("input".into())
    );
}
