use super::super::test_support::{accumulate, parse_sse};
use super::*;
use crate::protocol::ir::FinishReason;

fn ctx() -> StreamContext {
    StreamContext {
        client_model: "claude-sonnet-4-5".into(),
        request_id: "rid42".into(),
        created: 0,
        client_wants_usage: false,
        client_sse: true,
        charge: None,
    }
}

fn encode(events: &[Event], error: Option<&str>) -> Vec<u8> {
    let mut e = Encoder::new(&ctx());
    let mut out = Vec::new();
    for ev in events {
        e.event(ev, &mut out);
    }
    e.finish(error, &mut out);
    // Finish is final: nothing more comes out.
    let len = out.len();
    e.event(&Event::Text("late".into()), &mut out);
    e.finish(None, &mut out);
    assert_eq!(out.len(), len);
    out
}

fn final_message(events: &[Event]) -> Value {
    accumulate(&parse_sse(&encode(events, None)), false).unwrap()
}

fn start(index: usize, id: &str, name: &str) -> Event {
    Event::ToolCallStart {
        index,
        id: id.into(),
        name: name.into(),
        signature: None,
    }
}

fn args(index: usize, fragment: &str) -> Event {
    Event::ToolCallArgs {
        index,
        fragment: fragment.into(),
    }
}

fn usage() -> Event {
    Event::Usage(Usage {
        input_tokens: 100,
        output_tokens: 20,
        cached_input_tokens: 60,
        cache_creation_input_tokens: 10,
        reasoning_tokens: 5,
        ..Usage::default()
    })
}

#[test]
fn a_text_stream_is_byte_exact() {
    let out = encode(
        &[
            Event::Text("Hel".into()),
            Event::Text("lo".into()),
            usage(),
            Event::Finish(FinishReason::Stop),
        ],
        None,
    );
    let expected = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_rid42\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":30,\"output_tokens\":20,\"cache_read_input_tokens\":60,\"cache_creation_input_tokens\":10}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn an_empty_stream_still_opens_and_closes_the_message() {
    let evs = parse_sse(&encode(&[], None));
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "message_delta", "message_stop"]);
    let m = accumulate(&evs, false).unwrap();
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["content"], json!([]));
}

#[test]
fn reasoning_text_and_a_tool_call_accumulate_into_the_final_message() {
    let m = final_message(&[
        Event::Thinking("Let me ".into()),
        Event::Thinking("think.".into()),
        Event::ThinkingSignature("EqQBCkYIBxgC".into()),
        Event::RedactedThinking("EmwKAhgB".into()),
        Event::Text("Checking.".into()),
        Event::ToolCallStart {
            index: 0,
            id: "call_1".into(),
            name: "get_weather".into(),
            signature: Some("c2lnbmF0dXJlLTE=".into()),
        },
        args(0, "{\"ci"),
        args(0, "ty\": \"Pa"),
        args(0, "ris\"}"),
        usage(),
        Event::Finish(FinishReason::ToolCalls),
    ]);
    assert_eq!(
        m["content"],
        json!([
            {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBCkYIBxgC"},
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_1__sig__c2lnbmF0dXJlLTE=", "name": "get_weather", "input": {"city": "Paris"}}
        ])
    );
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(m["id"], "msg_rid42");
    assert_eq!(
        m["usage"],
        json!({"input_tokens": 30, "output_tokens": 20, "cache_read_input_tokens": 60, "cache_creation_input_tokens": 10})
    );
}

#[test]
fn sequential_parallel_calls_stream_live() {
    let out = encode(
        &[
            start(0, "call_a", "get_weather"),
            args(0, "{\"city\":"),
            args(0, "\"Paris\"}"),
            start(1, "call_b", "get_time"),
            args(1, "{\"tz\":"),
            args(1, "\"CET\"}"),
        ],
        None,
    );
    let evs = parse_sse(&out);
    // Each fragment is its own delta, in the order it came: nothing was held.
    let deltas: Vec<(u64, &str)> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, v)| {
            (
                v["index"].as_u64().unwrap(),
                v["delta"]["partial_json"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        deltas,
        [
            (0, "{\"city\":"),
            (0, "\"Paris\"}"),
            (1, "{\"tz\":"),
            (1, "\"CET\"}")
        ]
    );
    let m = accumulate(&evs, false).unwrap();
    assert_eq!(m["content"][0]["input"], json!({"city": "Paris"}));
    assert_eq!(m["content"][1]["input"], json!({"tz": "CET"}));
    // No finish reason came, but tools were called.
    assert_eq!(m["stop_reason"], "tool_use");
}

#[test]
fn interleaved_parallel_calls_lose_no_arguments() {
    let m = final_message(&[
        Event::Text("Both cities.".into()),
        start(0, "call_a", "get_weather"),
        start(1, "call_b", "get_weather"),
        start(2, "call_c", "get_time"),
        args(1, "{\"city\""),
        args(0, "{\"city\""),
        args(0, ":\"Paris\"}"),
        args(2, "{}"),
        args(1, ":\"Rome\"}"),
        Event::Finish(FinishReason::ToolCalls),
    ]);
    assert_eq!(
        m["content"],
        json!([
            {"type": "text", "text": "Both cities."},
            {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {"city": "Rome"}},
            {"type": "tool_use", "id": "call_c", "name": "get_time", "input": {}}
        ])
    );
}

#[test]
fn a_call_that_never_gets_arguments_does_not_block_the_others() {
    let m = final_message(&[
        start(0, "call_a", "list_files"),
        start(1, "call_b", "get_weather"),
        args(1, "{\"city\":\"Rome\"}"),
        Event::Text("Done.".into()),
    ]);
    assert_eq!(m["content"][0]["input"], json!({}));
    assert_eq!(m["content"][1]["input"], json!({"city": "Rome"}));
    assert_eq!(m["content"][2]["text"], "Done.");
}

#[test]
fn arguments_resumed_after_other_content_still_reach_their_block() {
    let evs = parse_sse(&encode(
        &[
            start(0, "call_a", "get_weather"),
            args(0, "{\"city\":"),
            Event::Text("Hmm.".into()),
            args(0, "\"Oslo\"}"),
            args(0, "  "),
        ],
        None,
    ));
    let m = accumulate(&evs, true).unwrap();
    assert_eq!(m["content"][0]["input"], json!({"city": "Oslo"}));
    // Fragments before their call's start are kept too.
    let m = final_message(&[args(0, "{\"a\":1}"), start(0, "call_a", "f")]);
    assert_eq!(m["content"][0]["input"], json!({"a": 1}));
}

#[test]
fn tool_ids_are_made_when_missing_and_unique() {
    let m = final_message(&[
        start(0, "", "f"),
        args(0, "{}"),
        start(1, "", "f"),
        args(1, "{}"),
        start(1, "dup", "f"),
    ]);
    assert_eq!(m["content"][0]["id"], "toolu_rid42_0");
    assert_eq!(m["content"][1]["id"], "toolu_rid42_1");
    assert_eq!(m["content"].as_array().unwrap().len(), 2);
}

#[test]
fn a_lone_signature_is_kept_in_a_thinking_block() {
    let m = final_message(&[
        Event::Text("Hi".into()),
        Event::ThinkingSignature("Q2lnbg==".into()),
        Event::Thinking("more".into()),
    ]);
    assert_eq!(
        m["content"],
        json!([
            {"type": "text", "text": "Hi"},
            {"type": "thinking", "thinking": "", "signature": "Q2lnbg=="},
            {"type": "thinking", "thinking": "more", "signature": ""}
        ])
    );
}

#[test]
fn finish_reasons_become_stop_reasons() {
    let reason = |evs: &[Event]| {
        let m = final_message(evs);
        (m["stop_reason"].clone(), m["stop_sequence"].clone())
    };
    let text = Event::Text("x".into());
    assert_eq!(
        reason(&[text.clone(), Event::Finish(FinishReason::Length)]),
        (json!("max_tokens"), Value::Null)
    );
    assert_eq!(
        reason(&[
            text.clone(),
            Event::Finish(FinishReason::StopSequence(Some("END".into())))
        ]),
        (json!("stop_sequence"), json!("END"))
    );
    assert_eq!(
        reason(&[text.clone(), Event::Finish(FinishReason::ContentFilter)]),
        (json!("refusal"), Value::Null)
    );
    assert_eq!(
        reason(&[start(0, "c", "f"), Event::Finish(FinishReason::Stop)]),
        (json!("tool_use"), Value::Null)
    );
    assert_eq!(reason(&[text]), (json!("end_turn"), Value::Null));
}

#[test]
fn a_broken_stream_closes_the_open_block_and_ends_with_an_error() {
    let out = encode(
        &[Event::Text("Hel".into())],
        Some("The upstream provider reported an error mid-stream. (request id: rid42)"),
    );
    let evs = parse_sse(&out);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "error"
        ]
    );
    assert_eq!(
        accumulate(&evs, false),
        Err("The upstream provider reported an error mid-stream. (request id: rid42)".into())
    );
    // With nothing streamed yet: still a message_start, then the error.
    let evs = parse_sse(&encode(&[], Some("boom (request id: rid42)")));
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[1].1["error"]["message"], "boom (request id: rid42)");
}

#[test]
fn json_end_tracks_whole_values() {
    let done = |pieces: &[&str]| {
        let mut j = JsonEnd::default();
        for p in pieces {
            j.feed(p);
        }
        j.complete()
    };
    assert!(done(&["{\"a\":", "\"}{[\\\"\"", "}"]));
    assert!(!done(&["{\"a\":", "\"}"]));
    assert!(done(&[" [1, {\"b\": [2]}] ", "\n"]));
    assert!(!done(&[""]));
    assert!(!done(&["{}", "{}"]));
    assert!(!done(&["42"]));
    assert!(done(&["{\"k\":\"é\\\\\"}"]));
}

/// Text and thinking deltas are written straight, byte for byte as the general event
/// writer writes them.
#[test]
fn deltas_written_straight_are_the_general_event() {
    for t in [
        "plain",
        "line\nbreak \"quoted\" back\\slash tab\t",
        "caf\u{e9} \u{1f600} \u{1} \u{7f}",
    ] {
        for (index, kind, key) in [
            (0, "text_delta", "text"),
            (12, "thinking_delta", "thinking"),
        ] {
            let mut general = Vec::new();
            Encoder::delta(
                index,
                serde_json::json!({"type": kind, key: t}),
                &mut general,
            );
            let mut straight = Vec::new();
            Encoder::text_delta(index, kind, key, t, &mut straight);
            assert_eq!(
                String::from_utf8(straight).unwrap(),
                String::from_utf8(general).unwrap()
            );
        }
    }
}
