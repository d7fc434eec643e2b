use super::decoder::{FrameDecoder, FrameError};
use super::*;
use crate::protocol::ir::{Event, Image, Message as IrMessage, Part, Reasoning, Role, Tool};
use crate::protocol::sse::Fault;
use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use serde_json::json;

/// One event-stream frame as ConverseStream sends it.
fn frame(event: &str, payload: Value) -> Vec<u8> {
    let m = Message::new(serde_json::to_vec(&payload).unwrap())
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String(event.to_string().into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("event".into()),
        ));
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

fn exception(kind: &str) -> Vec<u8> {
    let m = Message::new(&br#"{"message":"Too many requests"}"#[..])
        .add_header(Header::new(
            ":exception-type",
            HeaderValue::String(kind.to_string().into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("exception".into()),
        ));
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

fn stream() -> Vec<u8> {
    [
        frame("messageStart", json!({"role": "assistant", "p": "abc"})),
        frame("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Let me think."}}})),
        frame("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "c2ln"}}})),
        frame("contentBlockStop", json!({"contentBlockIndex": 0})),
        frame("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"text": "Hel"}})),
        frame("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"text": "lo"}})),
        frame("contentBlockStop", json!({"contentBlockIndex": 1})),
        frame("contentBlockStart", json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}})),
        frame("contentBlockDelta", json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"city\":"}}})),
        frame("contentBlockDelta", json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "\"Paris\"}"}}})),
        frame("contentBlockStop", json!({"contentBlockIndex": 2})),
        frame("messageStop", json!({"stopReason": "tool_use"})),
        frame("metadata", json!({"usage": {"inputTokens": 10, "outputTokens": 20, "totalTokens": 75, "cacheReadInputTokens": 40, "cacheWriteInputTokens": 5}, "metrics": {"latencyMs": 100}})),
    ]
    .concat()
}

fn expected() -> Vec<Event> {
    vec![
        Event::Thinking("Let me think.".into()),
        Event::ThinkingSignature("c2ln".into()),
        Event::Text("Hel".into()),
        Event::Text("lo".into()),
        Event::ToolCallStart {
            index: 0,
            id: "tooluse_1".into(),
            name: "get_weather".into(),
            signature: None,
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "{\"city\":".into(),
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "\"Paris\"}".into(),
        },
        Event::Usage(Usage {
            input_tokens: 55,
            output_tokens: 20,
            cached_input_tokens: 40,
            cache_creation_input_tokens: 5,
            ..Usage::default()
        }),
        Event::Finish(FinishReason::ToolCalls),
    ]
}

fn decode(chunks: &[&[u8]]) -> (Vec<Event>, Result<(), ir::StreamBroken>, bool) {
    let mut d = decoder();
    let mut events = Vec::new();
    let mut r = Ok(());
    for c in chunks {
        r = r.and(d.feed(c, &mut events));
    }
    let r = r.and(d.flush(&mut events));
    (events, r, d.complete())
}

#[test]
fn a_stream_decodes_the_same_split_at_every_byte() {
    let bytes = stream();
    let (whole, r, complete) = decode(&[&bytes]);
    assert_eq!(whole, expected());
    assert!(r.is_ok() && complete);
    for at in 0..=bytes.len() {
        let (a, b) = bytes.split_at(at);
        assert_eq!(decode(&[a, b]).0, whole, "split at {at}");
    }
    // One byte at a time.
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode(&singles).0, whole);
}

#[test]
fn frames_come_out_as_soon_as_they_are_whole_and_only_one_is_held() {
    let one = frame(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "x"}}),
    );
    let mut f = FrameDecoder::new();
    let mut out = Vec::new();
    f.feed(&one[..one.len() - 1], &mut out).unwrap();
    assert!(out.is_empty() && f.pending());
    f.feed(&one[one.len() - 1..], &mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert!(!f.pending());
}

#[test]
fn a_bad_checksum_is_refused() {
    let good = frame(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "x"}}),
    );
    // The message CRC (last four bytes), then the prelude CRC (bytes 8..12).
    for at in [good.len() - 1, 9, 20] {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        let mut f = FrameDecoder::new();
        let mut out = Vec::new();
        assert_eq!(
            f.feed(&bad, &mut out),
            Err(FrameError::Invalid),
            "byte {at}"
        );
        assert!(out.is_empty());
        // And it stays refused.
        assert_eq!(f.feed(&good, &mut out), Err(FrameError::Invalid));
    }
    // Through the stream decoder: the client's answer ends at the fault.
    let mut bytes = stream();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let (events, r, complete) = decode(&[&bytes]);
    assert_eq!(r, Err(ir::StreamBroken(Fault::NotJson)));
    assert_eq!(events.last(), Some(&Event::Broken(Fault::NotJson)));
    assert!(!complete);
}

#[test]
fn an_oversized_frame_is_refused_before_it_is_read() {
    let mut f = FrameDecoder::new();
    let mut out = Vec::new();
    let huge = ((decoder::MAX_FRAME_BYTES + 1) as u32).to_be_bytes();
    let prelude = [&huge[..], &[0u8; 8][..]].concat();
    assert_eq!(f.feed(&prelude, &mut out), Err(FrameError::BadLength));
}

#[test]
fn an_exception_ends_the_stream_with_an_error_and_a_cut_is_not_complete() {
    let bytes = [
        frame("messageStart", json!({"role": "assistant"})),
        frame(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
        ),
        exception("modelStreamErrorException"),
    ]
    .concat();
    let (events, r, complete) = decode(&[&bytes]);
    assert_eq!(events, vec![Event::Text("Hi".into()), Event::Error]);
    assert!(r.is_ok());
    assert!(!complete);

    let cut = &bytes[..bytes.len() - 3];
    let (events, r, complete) = decode(&[cut]);
    assert_eq!(events.last(), Some(&Event::Broken(Fault::Cut)));
    assert!(r.is_err() && !complete);
}

#[test]
fn whole_answers_parse_with_usage_reasoning_and_tools() {
    let body = json!({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig"}}},
            {"text": "Sunny."},
            {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}},
        ]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 17, "cacheReadInputTokens": 8, "cacheWriteInputTokens": 2},
        "metrics": {"latencyMs": 5},
    });
    let r = parse_response(&serde_json::to_vec(&body).unwrap()).unwrap();
    assert_eq!(r.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 13,
            output_tokens: 4,
            cached_input_tokens: 8,
            cache_creation_input_tokens: 2,
            ..Usage::default()
        }
    );
    assert_eq!(r.content.len(), 3);
    assert_eq!(
        r.content[0],
        Part::Thinking {
            text: "hmm".into(),
            signature: Some("sig".into())
        }
    );
    assert!(
        matches!(&r.content[2], Part::ToolCall(c) if c.arguments == r#"{"a":1}"# && c.id == "t1")
    );
    assert!(parse_response(b"{\"output\":{}}").is_err());
    assert!(parse_response(b"nope").is_err());
}

fn opts(model: &str, stream: bool) -> RequestOptions<'_> {
    RequestOptions {
        upstream_model: model,
        stream,
        default_max_tokens: 4096,
        chat_limit_field: "max_completion_tokens",
        compact: false,
    }
}

#[test]
fn requests_are_written_as_converse_wants_them() {
    let req = ir::Request {
        system: vec!["Be brief.".into()],
        messages: vec![
            IrMessage {
                role: Role::User,
                content: vec![
                    Part::Text("What is this?".into()),
                    Part::Image(Image::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    }),
                ],
            },
            IrMessage {
                role: Role::User,
                content: vec![Part::Text("  ".into())],
            },
            IrMessage {
                role: Role::Assistant,
                content: vec![
                    Part::Thinking {
                        text: "t".into(),
                        signature: Some("s".into()),
                    },
                    Part::ToolCall(ir::ToolCall {
                        id: "call:1".into(),
                        name: "f".into(),
                        arguments: "{\"a\":1}".into(),
                        signature: None,
                    }),
                ],
            },
            IrMessage {
                role: Role::User,
                content: vec![
                    Part::Text("and?".into()),
                    Part::ToolResult(ir::ToolResult {
                        call_id: "call:1".into(),
                        name: None,
                        content: vec![Part::Text("42".into())],
                        is_error: true,
                    }),
                ],
            },
        ],
        max_tokens: Some(2048),
        temperature: Some(0.5),
        stop: vec!["END".into()],
        tools: vec![Tool {
            name: "f".into(),
            description: Some("d".into()),
            parameters: json!({"properties": {}}),
        }],
        tool_choice: Some(ir::ToolChoice::Required),
        reasoning: Some(Reasoning {
            budget_tokens: Some(1500),
            ..Default::default()
        }),
        ..Default::default()
    };
    let marks = CacheMarks {
        system: true,
        tools: true,
        messages: [0].into(),
    };
    let out = from_ir(
        &req,
        &opts("anthropic.claude-3-7-sonnet-20250219-v1:0", true),
        &marks,
    )
    .unwrap();
    assert_eq!(
        out.path,
        "/model/anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream"
    );
    let v: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(
        v["system"],
        json!([{"text": "Be brief."}, {"cachePoint": {"type": "default"}}])
    );
    assert_eq!(
        v["inferenceConfig"],
        json!({"maxTokens": 2048, "temperature": 0.5, "stopSequences": ["END"]})
    );
    assert_eq!(
        v["messages"][0]["content"],
        json!([
            {"text": "What is this?"},
            {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}},
            {"cachePoint": {"type": "default"}},
        ])
    );
    assert_eq!(
        v["messages"][1]["content"],
        json!([
            {"reasoningContent": {"reasoningText": {"text": "t", "signature": "s"}}},
            {"toolUse": {"toolUseId": "call_1", "name": "f", "input": {"a": 1}}},
        ])
    );
    assert_eq!(
        v["messages"][2]["content"],
        json!([
            {"toolResult": {"toolUseId": "call_1", "content": [{"text": "42"}], "status": "error"}},
            {"text": "and?"},
        ])
    );
    assert_eq!(
        v["toolConfig"],
        json!({
            "tools": [
                {"toolSpec": {"name": "f", "description": "d", "inputSchema": {"json": {"properties": {}, "type": "object"}}}},
                {"cachePoint": {"type": "default"}},
            ],
            "toolChoice": {"any": {}},
        })
    );
    // A forced tool call: no thinking.
    assert!(v.get("additionalModelRequestFields").is_none());

    let free = ir::Request {
        tool_choice: None,
        ..req.clone()
    };
    let v: Value = serde_json::from_slice(
        &from_ir(
            &free,
            &opts("us.anthropic.claude-x", false),
            &CacheMarks::default(),
        )
        .unwrap()
        .body,
    )
    .unwrap();
    assert_eq!(
        v["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 1500}})
    );
    // With thinking on, a changed temperature is left out.
    assert!(v["inferenceConfig"].get("temperature").is_none());
    assert!(v.get("system").unwrap().as_array().unwrap().len() == 1);
    // Other models get no Claude fields.
    let v: Value = serde_json::from_slice(
        &from_ir(
            &free,
            &opts("amazon.nova-pro-v1:0", false),
            &CacheMarks::default(),
        )
        .unwrap()
        .body,
    )
    .unwrap();
    assert!(v.get("additionalModelRequestFields").is_none());
}

#[test]
fn images_by_url_are_refused_cleanly() {
    let req = ir::Request {
        messages: vec![IrMessage {
            role: Role::User,
            content: vec![Part::Image(Image::Url("https://x/y.png".into()))],
        }],
        ..Default::default()
    };
    let Err(e) = from_ir(&req, &opts("m", false), &CacheMarks::default()) else {
        panic!("an image by URL was accepted");
    };
    assert_eq!(e.param.as_deref(), Some("messages[0].content"));
}

#[test]
fn cache_marks_are_read_from_a_messages_body() {
    let body = json!({
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "f", "input_schema": {}}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            {"role": "user", "content": [{"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}]},
        ],
    });
    let m = cache_marks(&body);
    assert!(m.system && !m.tools);
    assert_eq!(m.messages.into_iter().collect::<Vec<_>>(), vec![2]);
}

#[test]
fn no_client_speaks_converse() {
    use crate::protocol::{
        parse_request, stream_translator, translate_request, Protocol, StreamContext,
    };
    assert!(parse_request(Protocol::Converse, b"{}").is_err());
    assert!(translate_request(
        Protocol::Converse,
        Protocol::Chat,
        json!({}),
        &opts("m", false)
    )
    .is_err());
    assert!(translate_request(
        Protocol::Converse,
        Protocol::Converse,
        json!({}),
        &opts("m", false)
    )
    .is_err());
    let ctx = StreamContext {
        client_model: "m".into(),
        request_id: "r".into(),
        created: 0,
        client_wants_usage: false,
        client_sse: true,
        charge: None,
    };
    let mut t = stream_translator(Protocol::Converse, Protocol::Converse, ctx);
    let mut out = Vec::new();
    t.feed(b"x", &mut out);
    t.finish(None, &mut out);
    assert!(String::from_utf8_lossy(&out).contains("error"));
}

fn stream_ctx() -> crate::protocol::StreamContext {
    crate::protocol::StreamContext {
        client_model: "alias".into(),
        request_id: "req_b".into(),
        created: 1,
        client_wants_usage: true,
        client_sse: true,
        charge: None,
    }
}

/// Every client protocol gets the ConverseStream answer whole, with its usage, and an
/// exception frame as its own terminal error event.
#[test]
fn every_client_protocol_reads_a_converse_stream() {
    use crate::protocol::{stream_translator, Protocol};
    let clients = [
        Protocol::Chat,
        Protocol::Messages,
        Protocol::Gemini,
        Protocol::Responses,
    ];
    for client in clients {
        let mut t = stream_translator(Protocol::Converse, client, stream_ctx());
        let mut out = Vec::new();
        for piece in stream().chunks(5) {
            t.feed(piece, &mut out);
        }
        t.finish(None, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Hel") && text.contains("lo"),
            "{client:?}: {text}"
        );
        assert!(text.contains("get_weather"), "{client:?}: {text}");
        assert!(
            !text.contains("request id"),
            "{client:?} ended with an error: {text}"
        );
        assert_eq!(t.usage().cache_creation_input_tokens, 5, "{client:?}");

        let bytes = [
            frame(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
            ),
            exception("throttlingException"),
        ]
        .concat();
        let mut t = stream_translator(Protocol::Converse, client, stream_ctx());
        let mut out = Vec::new();
        t.feed(&bytes, &mut out);
        t.finish(None, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("mid-stream. (request id: req_b)"),
            "{client:?}: {text}"
        );
        assert!(!text.contains("Too many requests"), "{client:?}: {text}");
    }
}
