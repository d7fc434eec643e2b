use super::super::test_support::{accumulate, parse_sse, splits};
use super::*;
use crate::protocol::ir::FinishReason;
use crate::protocol::{StreamContext, StreamTranslator, Usage};
use serde_json::{json, Value};

/// A real-shaped stream: interleaved thinking, text, two parallel tool calls whose
/// arguments come in pieces, keep-alive pings, cumulative usage.
fn upstream_stream() -> String {
    let events: Vec<(&str, Value)> = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_01Up", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 472, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2048, "output_tokens": 3}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Two cities, "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "two calls. ✓"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCkYIBxgCKkC"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "both — é."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "ris\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Rome\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 3}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 89}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    events
        .into_iter()
        .map(|(n, d)| format!("event: {n}\r\ndata: {d}\r\n\r\n"))
        .collect()
}

fn usage(output: u64) -> Usage {
    Usage {
        input_tokens: 472 + 100 + 2048,
        output_tokens: output,
        cached_input_tokens: 2048,
        cache_creation_input_tokens: 100,
        reasoning_tokens: 0,
        ..Usage::default()
    }
}

fn decode(pieces: &[&[u8]]) -> (Vec<Event>, bool) {
    let mut d = Decoder::new();
    let mut events = Vec::new();
    for p in pieces {
        d.feed(p, &mut events).unwrap();
    }
    d.flush(&mut events).unwrap();
    (events, d.complete())
}

fn text(s: &str) -> Event {
    Event::Text(s.into())
}

#[test]
fn a_full_stream_decodes_the_same_in_any_split() {
    let input = upstream_stream();
    let expected = vec![
        Event::Usage(usage(3)),
        Event::Thinking("Two cities, ".into()),
        Event::Thinking("two calls. ✓".into()),
        Event::ThinkingSignature("EqQBCkYIBxgCKkC".into()),
        text("Checking "),
        text("both — é."),
        Event::ToolCallStart {
            index: 0,
            id: "toolu_01A".into(),
            name: "get_weather".into(),
            signature: None,
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "{\"city\": \"Pa".into(),
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "ris\"}".into(),
        },
        Event::ToolCallStart {
            index: 1,
            id: "toolu_01B".into(),
            name: "get_weather".into(),
            signature: None,
        },
        Event::ToolCallArgs {
            index: 1,
            fragment: "{\"city\": \"Rome\"}".into(),
        },
        Event::Usage(usage(89)),
        Event::Finish(FinishReason::ToolCalls),
    ];
    for pieces in splits(input.as_bytes()) {
        let (events, complete) = decode(&pieces);
        assert_eq!(events, expected, "{} pieces", pieces.len());
        assert!(complete);
    }
}

#[test]
fn a_stream_cut_before_message_stop_is_not_complete() {
    let input = upstream_stream();
    let cut = &input[..input.find("event: message_delta").unwrap()];
    for pieces in splits(cut.as_bytes()) {
        let (events, complete) = decode(&pieces);
        assert!(!complete);
        assert_eq!(events.len(), 11);
    }
    // The end marker without its blank line still counts once the body ends.
    let unterminated = input.trim_end();
    assert!(decode(&[unterminated.as_bytes()]).1);
}

#[test]
fn an_error_event_mid_stream_is_reported() {
    let input = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"Hi\"}}\n\n",
        "event: error\n",
        "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    for pieces in splits(input.as_bytes()) {
        let (events, complete) = decode(&pieces);
        assert!(!complete);
        assert_eq!(
            events,
            vec![
                Event::Usage(Usage {
                    input_tokens: 12,
                    output_tokens: 1,
                    ..Default::default()
                }),
                // Initial text in the start event is kept.
                text("Hi"),
                Event::Error,
            ]
        );
    }
}

#[test]
fn events_without_names_redacted_thinking_and_final_usage_fields() {
    let input = concat!(
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n",
        ": keep-alive comment\n\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgB\"}}\n\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"f\",\"input\":{\"x\":1}}}\n\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"},\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":3,\"output_tokens\":9}}\n\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );
    let (events, complete) = decode(&[input.as_bytes()]);
    assert!(complete);
    assert_eq!(
        events,
        vec![
            Event::Usage(Usage {
                input_tokens: 5,
                ..Default::default()
            }),
            Event::RedactedThinking("EmwKAhgB".into()),
            Event::ToolCallStart {
                index: 0,
                id: "toolu_9".into(),
                name: "f".into(),
                signature: None
            },
            Event::ToolCallArgs {
                index: 0,
                fragment: "{\"x\":1}".into()
            },
            Event::Usage(Usage {
                input_tokens: 10,
                output_tokens: 9,
                cached_input_tokens: 3,
                ..Default::default()
            }),
            Event::Finish(FinishReason::StopSequence(Some("END".into()))),
        ]
    );
}

#[test]
fn an_oversized_event_breaks_the_stream() {
    let mut d = Decoder::new();
    let mut events = Vec::new();
    let big = vec![b'x'; crate::protocol::sse::MAX_EVENT_BYTES + 1];
    assert!(d.feed(b"data: ", &mut events).is_ok());
    assert_eq!(
        d.feed(&big, &mut events),
        Err(StreamBroken(Fault::TooLarge))
    );
    assert!(!d.complete());
}

fn ctx() -> StreamContext {
    StreamContext {
        client_model: "my-claude".into(),
        request_id: "rid7".into(),
        created: 0,
        client_wants_usage: false,
        client_sse: true,
        charge: None,
    }
}

/// Through the decoder and the encoder (the path a messages client takes to a messages
/// upstream when it is not passed through): any split, the same bytes out, and the SDK's
/// final message equals the upstream's.
#[test]
fn decoder_and_encoder_round_trip_in_any_split() {
    let input = upstream_stream();
    let run = |pieces: &[&[u8]]| {
        let mut t = crate::protocol::translate::Translated::new(
            Box::new(Decoder::new()),
            super::super::encoder(&ctx()),
            "rid7".into(),
        );
        let mut out = Vec::new();
        for p in pieces {
            t.feed(p, &mut out);
        }
        t.finish(None, &mut out);
        (out, t.usage())
    };
    let (whole, usage_seen) = run(&[input.as_bytes()]);
    assert_eq!(usage_seen, usage(89));
    for pieces in splits(input.as_bytes()) {
        assert_eq!(run(&pieces).0, whole);
    }
    let m = accumulate(&parse_sse(&whole), false).unwrap();
    assert_eq!(m["model"], "my-claude");
    assert_eq!(m["id"], "msg_rid7");
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(
        m["content"],
        json!([
            {"type": "thinking", "thinking": "Two cities, two calls. ✓", "signature": "EqQBCkYIBxgCKkC"},
            {"type": "text", "text": "Checking both — é."},
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "Rome"}}
        ])
    );
    assert_eq!(
        m["usage"],
        json!({"input_tokens": 472, "output_tokens": 89, "cache_read_input_tokens": 2048, "cache_creation_input_tokens": 100})
    );
    // Cut before its end: the client gets an error event, never a hang.
    let cut = &input[..input.find("event: message_delta").unwrap()];
    let (out, _) = run(&[cut.as_bytes()]);
    let err = accumulate(&parse_sse(&out), false).unwrap_err();
    assert!(err.contains("request id: rid7"), "{err}");
}
