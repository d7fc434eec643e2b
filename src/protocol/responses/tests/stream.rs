//! The encoder, alone and behind the composite stream translator, fed by a scripted
//! upstream decoder (SSE whose data lines name pivot events) so that byte splits, cuts
//! and upstream errors are exercised the way the relay drives them.

use super::super::{encoder, error_event, render_response};
use super::{events, random_pieces, rctx, sctx};
use crate::protocol::ir::{
    Event, FinishReason, Part, Response, StreamBroken, StreamDecoder, ToolCall,
};
use crate::protocol::sse;
use crate::protocol::translate::Translated;
use crate::protocol::{StreamTranslator, Usage};
use serde_json::{json, Value};

/// Upstream SSE whose data are JSON arrays naming pivot events: `["text", "Hi"]`,
/// `["start", 0, "id", "name", null]`, `["end"]` (the upstream's end marker)...
struct Scripted {
    sse: sse::Decoder,
    complete: bool,
}

fn scripted() -> Box<dyn StreamDecoder> {
    Box::new(Scripted {
        sse: sse::Decoder::new(),
        complete: false,
    })
}

impl Scripted {
    fn decode(&mut self, raw: Vec<sse::Event>, events: &mut Vec<Event>) {
        for e in raw.into_iter().filter(|e| e.fault.is_none()) {
            let v: Value = serde_json::from_str(&e.data).unwrap();
            let s = |i: usize| v[i].as_str().unwrap_or_default().to_string();
            let n = |i: usize| v[i].as_u64().unwrap_or_default();
            events.push(match s(0).as_str() {
                "text" => Event::Text(s(1)),
                "thinking" => Event::Thinking(s(1)),
                "sig" => Event::ThinkingSignature(s(1)),
                "redacted" => Event::RedactedThinking(s(1)),
                "start" => Event::ToolCallStart {
                    index: n(1) as usize,
                    id: s(2),
                    name: s(3),
                    signature: v[4].as_str().map(str::to_string),
                },
                "args" => Event::ToolCallArgs {
                    index: n(1) as usize,
                    fragment: s(2),
                },
                "usage" => Event::Usage(Usage {
                    input_tokens: n(1),
                    output_tokens: n(2),
                    cached_input_tokens: n(3),
                    cache_creation_input_tokens: 0,
                    reasoning_tokens: n(4),
                    ..Usage::default()
                }),
                "finish" => Event::Finish(match s(1).as_str() {
                    "length" => FinishReason::Length,
                    "tool_calls" => FinishReason::ToolCalls,
                    "content_filter" => FinishReason::ContentFilter,
                    _ => FinishReason::Stop,
                }),
                "error" => Event::Error,
                _ => {
                    self.complete = true;
                    continue;
                }
            });
        }
    }
}

impl StreamDecoder for Scripted {
    fn feed(&mut self, chunk: &[u8], events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        let mut raw = Vec::new();
        self.sse.feed(chunk, &mut raw);
        let fault = raw.iter().find_map(|e| e.fault);
        self.decode(raw, events);
        StreamBroken::check(fault)
    }
    fn flush(&mut self, events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        let mut raw = Vec::new();
        self.sse.flush(&mut raw);
        let fault = raw.iter().find_map(|e| e.fault);
        self.decode(raw, events);
        StreamBroken::check(fault)
    }
    fn complete(&self) -> bool {
        self.complete
    }
}

fn upstream(steps: &[Value]) -> String {
    steps.iter().map(|s| format!("data: {s}\n\n")).collect()
}

fn run_pieces(pieces: Vec<&[u8]>) -> Vec<u8> {
    let mut t = Translated::new(scripted(), encoder(&sctx()), "req123".into());
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(None, &mut out);
    out
}

/// The client stream for an upstream stream, checked identical whether it arrives
/// whole, a byte at a time or in random pieces.
fn run(input: &str) -> Vec<(String, Value)> {
    let whole = run_pieces(vec![input.as_bytes()]);
    let bytes = run_pieces(input.as_bytes().chunks(1).collect());
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(&whole)
    );
    for seed in 0..4 {
        let random = run_pieces(random_pieces(input.as_bytes(), seed, 23));
        assert_eq!(random, whole, "seed {seed}");
    }
    let evs = events(&whole);
    for (i, (_, v)) in evs.iter().enumerate() {
        assert_eq!(v["sequence_number"], i, "{v}");
    }
    evs
}

fn names(evs: &[(String, Value)]) -> Vec<&str> {
    evs.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn a_text_stream_has_every_event_the_sdk_expects_and_ends_with_the_full_response() {
    let evs = run(&upstream(&[
        json!(["text", "Hello"]),
        json!(["text", ", wörld"]),
        json!(["usage", 12, 3, 8, 0]),
        json!(["finish", "stop"]),
        json!(["end"]),
    ]));
    assert_eq!(
        names(&evs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &evs[0].1["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["output"], json!([]));
    assert_eq!(created["model"], "my-model");
    assert_eq!(created["id"], "resp_req123");
    assert_eq!(
        evs[2].1["item"],
        json!({"type": "message", "id": "msg_req123_0", "status": "in_progress", "role": "assistant", "content": []})
    );
    assert_eq!(
        evs[4].1,
        json!({"type": "response.output_text.delta", "sequence_number": 4, "item_id": "msg_req123_0",
               "output_index": 0, "content_index": 0, "delta": "Hello", "logprobs": []})
    );
    assert_eq!(evs[6].1["text"], "Hello, wörld");
    assert_eq!(evs[8].1["item"]["status"], "completed");
    let expected: Value = serde_json::from_slice(&render_response(
        &Response {
            content: vec![Part::Text("Hello, wörld".into())],
            finish: Some(FinishReason::Stop),
            usage: Usage {
                input_tokens: 12,
                output_tokens: 3,
                cached_input_tokens: 8,
                cache_creation_input_tokens: 0,
                reasoning_tokens: 0,
                ..Usage::default()
            },
        },
        &rctx(),
    ))
    .unwrap();
    assert_eq!(evs[9].1["response"], expected);
}

#[test]
fn reasoning_then_text_then_tool_calls() {
    let evs = run(&upstream(&[
        json!(["thinking", "The user wants "]),
        json!(["thinking", "the weather."]),
        json!(["sig", "EqQBCkYIBxgCKkA"]),
        json!(["text", "Let me check."]),
        json!(["start", 0, "toolu_01", "get_weather", null]),
        json!(["args", 0, "{\"city\":"]),
        json!(["args", 0, "\"Paris\"}"]),
        json!(["start", 1, "fc_2", "get_time", "Q2lnU2ln"]),
        json!(["args", 1, "{}"]),
        json!(["usage", 100, 60, 0, 20]),
        json!(["finish", "tool_calls"]),
        json!(["end"]),
    ]));
    assert_eq!(
        names(&evs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(
        evs[8].1["item"],
        json!({"type": "reasoning", "id": "rs_req123_0",
               "summary": [{"type": "summary_text", "text": "The user wants the weather."}],
               "encrypted_content": "EqQBCkYIBxgCKkA"})
    );
    assert_eq!(
        evs[15].1["item"],
        json!({"type": "function_call", "id": "fc_req123_2", "call_id": "toolu_01", "name": "get_weather",
               "arguments": "", "status": "in_progress"})
    );
    assert_eq!(evs[18].1["item"]["call_id"], "fc_2__sig__Q2lnU2ln");
    assert_eq!(evs[20].1["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(evs[20].1["output_index"], 2);
    assert_eq!(evs[22].1["arguments"], "{}");
    let expected: Value = serde_json::from_slice(&render_response(
        &Response {
            content: vec![
                Part::Thinking {
                    text: "The user wants the weather.".into(),
                    signature: Some("EqQBCkYIBxgCKkA".into()),
                },
                Part::Text("Let me check.".into()),
                Part::ToolCall(ToolCall {
                    id: "toolu_01".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                    signature: None,
                }),
                Part::ToolCall(ToolCall {
                    id: "fc_2".into(),
                    name: "get_time".into(),
                    arguments: "{}".into(),
                    signature: Some("Q2lnU2ln".into()),
                }),
            ],
            finish: Some(FinishReason::ToolCalls),
            usage: Usage {
                input_tokens: 100,
                output_tokens: 60,
                cached_input_tokens: 0,
                cache_creation_input_tokens: 0,
                reasoning_tokens: 20,
                ..Usage::default()
            },
        },
        &rctx(),
    ))
    .unwrap();
    assert_eq!(evs[24].1["response"], expected);
}

#[test]
fn interleaved_parallel_call_fragments_each_reach_their_call() {
    let evs = run(&upstream(&[
        json!(["start", 0, "call_a", "read", null]),
        json!(["start", 1, "call_b", "read", null]),
        json!(["args", 1, "{\"path\":"]),
        json!(["args", 0, "{\"path\":"]),
        json!(["args", 0, "\"a.rs\"}"]),
        json!(["args", 1, "\"b.rs\"}"]),
        json!(["args", 7, "{\"stray\":1}"]),
        json!(["finish", "tool_calls"]),
        json!(["end"]),
    ]));
    let deltas: Vec<(u64, &str)> = evs
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, v)| {
            (
                v["output_index"].as_u64().unwrap(),
                v["delta"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        deltas,
        [
            (1, "{\"path\":"),
            (0, "{\"path\":"),
            (0, "\"a.rs\"}"),
            (1, "\"b.rs\"}")
        ]
    );
    let out = &evs.last().unwrap().1["response"]["output"];
    assert_eq!(out[0]["arguments"], "{\"path\":\"a.rs\"}");
    assert_eq!(out[1]["arguments"], "{\"path\":\"b.rs\"}");
    assert_eq!(out[1]["id"], "fc_req123_1");
    assert_eq!(out.as_array().unwrap().len(), 2);
}

#[test]
fn length_ends_with_response_incomplete() {
    let evs = run(&upstream(&[
        json!(["text", "Once upon a"]),
        json!(["finish", "length"]),
        json!(["usage", 5, 16, 0, 0]),
        json!(["end"]),
    ]));
    let (name, last) = evs.last().unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(last["response"]["usage"]["output_tokens"], 16);
}

#[test]
fn an_upstream_error_mid_stream_fails_the_response_and_raises() {
    let evs = run(&upstream(&[
        json!(["text", "Partial"]),
        json!(["usage", 7, 1, 0, 0]),
        json!(["error"]),
        json!(["text", "never shown"]),
        json!(["end"]),
    ]));
    assert_eq!(
        names(&evs)[evs.len() - 4..],
        [
            "response.content_part.added",
            "response.output_text.delta",
            "response.failed",
            "error"
        ]
    );
    let failed = &evs[evs.len() - 2].1["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "upstream_error");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("reported an error mid-stream"),
        "{message}"
    );
    assert!(message.contains("(request id: req123)"), "{message}");
    assert_eq!(failed["output"][0]["content"][0]["text"], "Partial");
    assert_eq!(failed["usage"]["input_tokens"], 7);
    let error = &evs.last().unwrap().1;
    assert_eq!(error["message"], message);
    assert_eq!(error["code"], "upstream_error");
    assert_eq!(error["param"], Value::Null);
    assert_eq!(
        error["error"],
        json!({"type": "upstream_error", "code": "upstream_error", "message": message})
    );
}

#[test]
fn a_cut_stream_ends_with_an_error_never_a_hang() {
    let evs = run(&upstream(&[
        json!(["start", 0, "call_1", "search", null]),
        json!(["args", 0, "{\"q\":\"ru"]),
    ]));
    let (name, err) = evs.last().unwrap();
    assert_eq!(name, "error");
    assert!(err["message"]
        .as_str()
        .unwrap()
        .contains("ended the stream before it was complete"));
    assert_eq!(evs[evs.len() - 2].0, "response.failed");
    // Nothing was closed: the SDK is told the stream failed, not that the call is done.
    assert!(!names(&evs).contains(&"response.output_item.done"));
}

#[test]
fn an_empty_stream_still_opens_and_completes() {
    let mut enc = encoder(&sctx());
    let mut out = Vec::new();
    enc.finish(None, &mut out);
    enc.finish(None, &mut out);
    enc.event(&Event::Text("late".into()), &mut out);
    let evs = events(&out);
    assert_eq!(
        names(&evs),
        [
            "response.created",
            "response.in_progress",
            "response.completed"
        ]
    );
    assert_eq!(evs[2].1["response"]["output"], json!([]));
    assert_eq!(evs[2].1["response"]["usage"]["total_tokens"], 0);

    let mut enc = encoder(&sctx());
    let mut out = Vec::new();
    enc.finish(Some("boom (request id: req123)"), &mut out);
    assert_eq!(
        names(&events(&out)),
        [
            "response.created",
            "response.in_progress",
            "response.failed",
            "error"
        ]
    );
}

#[test]
fn signature_only_and_redacted_reasoning_are_closed_items() {
    let evs = run(&upstream(&[
        json!(["redacted", "EmwKAhgBEgy"]),
        json!(["sig", "c2lnLW9ubHk="]),
        json!(["thinking", ""]),
        json!(["text", ""]),
        json!(["text", "Hi"]),
        json!(["end"]),
    ]));
    let out = &evs.last().unwrap().1["response"]["output"];
    assert_eq!(
        *out,
        json!([
            {"type": "reasoning", "id": "rs_req123_0", "summary": [], "encrypted_content": "redacted_thinking:EmwKAhgBEgy"},
            {"type": "reasoning", "id": "rs_req123_1", "summary": [], "encrypted_content": "c2lnLW9ubHk="},
            {"type": "message", "id": "msg_req123_2", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Hi", "annotations": []}]}
        ])
    );
    assert!(!names(&evs).contains(&"response.reasoning_summary_part.added"));
}

#[test]
fn the_error_event_alone() {
    let evs = events(&error_event("The upstream failed. (request id: r1)"));
    assert_eq!(
        evs,
        vec![(
            "error".to_string(),
            json!({"type": "error", "sequence_number": 0, "code": "upstream_error",
                   "message": "The upstream failed. (request id: r1)", "param": null,
                   "error": {"type": "upstream_error", "code": "upstream_error",
                             "message": "The upstream failed. (request id: r1)"}})
        )]
    );
}
