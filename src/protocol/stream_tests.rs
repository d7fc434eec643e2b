//! Every stream translator (each upstream protocol to each client protocol, translated
//! or passed through) against upstream streams that break, the output bytes each one
//! counts, and the cost each one shows on its usage event.

use super::sse::{Fault, MAX_EVENT_BYTES};
use super::{stream_translator, Protocol, StreamContext};
use serde_json::{json, Value};

const CLIENTS: [Protocol; 4] = [
    Protocol::Chat,
    Protocol::Messages,
    Protocol::Gemini,
    Protocol::Responses,
];

/// Every (upstream, client) pair a stream can take: responses upstreams only serve
/// responses clients (natively, passed through).
fn pairs() -> Vec<(Protocol, Protocol)> {
    let mut v = Vec::new();
    for up in [Protocol::Chat, Protocol::Messages, Protocol::Gemini] {
        for c in CLIENTS {
            v.push((up, c));
        }
    }
    v.push((Protocol::Responses, Protocol::Responses));
    v
}

fn ctx() -> StreamContext {
    StreamContext {
        client_model: "alias".into(),
        request_id: "req_e".into(),
        created: 1,
        client_wants_usage: true,
        client_sse: true,
        charge: None,
    }
}

/// One upstream event in its protocol's framing.
enum Piece<'a> {
    Thinking(&'a str),
    Text(&'a str),
    /// A tool call with these argument pieces.
    Call(&'a [&'a str]),
    /// The end: finish reason, usage, end marker.
    End,
}

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

fn named(name: &str, v: Value) -> String {
    format!("event: {name}\ndata: {v}\n\n")
}

/// `piece` as upstream `up` streams it; `seq` numbers responses events.
fn upstream(up: Protocol, piece: &Piece, seq: &mut u64) -> String {
    let chunk = |delta: Value| {
        data(
            json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
        )
    };
    let gem = |parts: Value| {
        data(json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}]}))
    };
    let mut resp = |kind: &str, mut v: Value| {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(*seq);
        *seq += 1;
        named(kind, v)
    };
    let block = |i: u64, d: Value| {
        named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": d}),
        )
    };
    match (up, piece) {
        (Protocol::Chat, Piece::Thinking(t)) => chunk(json!({"reasoning_content": t})),
        (Protocol::Chat, Piece::Text(t)) => chunk(json!({"content": t})),
        (Protocol::Chat, Piece::Call(args)) => {
            let mut s = chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "f", "arguments": ""}}]}),
            );
            for a in *args {
                s += &chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}));
            }
            s
        }
        (Protocol::Chat, Piece::End) => {
            data(
                json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            ) + "data: [DONE]\n\n"
        }
        (Protocol::Messages, Piece::Thinking(t)) => {
            named(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""}}),
            ) + &block(0, json!({"type": "thinking_delta", "thinking": t}))
        }
        (Protocol::Messages, Piece::Text(t)) => block(1, json!({"type": "text_delta", "text": t})),
        (Protocol::Messages, Piece::Call(args)) => {
            let mut s = named(
                "content_block_start",
                json!({"type": "content_block_start", "index": 2,
                    "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
            );
            for a in *args {
                s += &block(2, json!({"type": "input_json_delta", "partial_json": a}));
            }
            s
        }
        (Protocol::Messages, Piece::End) => {
            named(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 4}}),
            ) + &named("message_stop", json!({"type": "message_stop"}))
        }
        (Protocol::Gemini, Piece::Thinking(t)) => gem(json!([{"text": t, "thought": true}])),
        (Protocol::Gemini, Piece::Text(t)) => gem(json!([{"text": t}])),
        (Protocol::Gemini, Piece::Call(args)) => {
            let args: Value = serde_json::from_str(&args.concat()).unwrap_or(Value::Null);
            gem(json!([{"functionCall": {"name": "f", "args": args}}]))
        }
        (Protocol::Gemini, Piece::End) => data(json!({"candidates": [{"content": {"role": "model",
            "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4}})),
        (Protocol::Responses, Piece::Thinking(t)) => resp(
            "response.reasoning_summary_text.delta",
            json!({"item_id": "rs", "output_index": 0, "summary_index": 0, "delta": t}),
        ),
        (Protocol::Responses, Piece::Text(t)) => resp(
            "response.output_text.delta",
            json!({"item_id": "msg", "output_index": 1, "content_index": 0, "delta": t}),
        ),
        (Protocol::Responses, Piece::Call(args)) => {
            let mut s = String::new();
            for a in *args {
                s += &resp(
                    "response.function_call_arguments.delta",
                    json!({"item_id": "fc", "output_index": 2, "delta": a}),
                );
            }
            s
        }
        (Protocol::Responses, Piece::End) => resp(
            "response.completed",
            json!({"response": {"id": "r", "object": "response", "status": "completed",
                "model": "m", "output": [], "usage": {"input_tokens": 3, "output_tokens": 4}}}),
        ), // Binary event-stream framing, not text: converse/tests.rs has its streams.
        (Protocol::Converse, _) => String::new(),
    }
}

fn stream_of(up: Protocol, pieces: &[Piece]) -> Vec<u8> {
    let mut seq = 0;
    let mut s = String::new();
    if up == Protocol::Messages {
        s += &named(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": "m", "content": [],
                "usage": {"input_tokens": 3, "output_tokens": 1}}}),
        );
        s += &named(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "text", "text": ""}}),
        );
    }
    for p in pieces {
        s += &upstream(up, p, &mut seq);
    }
    s.into_bytes()
}

/// Client stream bytes as (event name, data) pairs.
fn client_events(out: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8(out.to_vec()).expect("the client gets UTF-8");
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Vec::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push(d);
                }
            }
            (name, data.join("\n"))
        })
        .collect()
}

fn ends_with_the_error_event(client: Protocol, evs: &[(String, String)]) -> bool {
    let Some((name, data)) = evs.last() else {
        return false;
    };
    let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    data.contains("(request id: req_e)")
        && match client {
            Protocol::Chat | Protocol::Gemini => v["error"]["message"].is_string(),
            Protocol::Messages | Protocol::Responses => name == "error",
            Protocol::Converse => false,
        }
}

fn claims_complete(client: Protocol, evs: &[(String, String)]) -> bool {
    evs.iter().any(|(name, data)| {
        let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        match client {
            Protocol::Chat => data == "[DONE]" || v["choices"][0]["finish_reason"].is_string(),
            Protocol::Messages => name == "message_stop",
            Protocol::Gemini => v["candidates"][0]["finishReason"].is_string(),
            Protocol::Responses => name == "response.completed",
            Protocol::Converse => false,
        }
    })
}

/// The stream's bytes with `fault` between `before` and the rest; `None` for a stream
/// cut before its end.
fn broken(up: Protocol, fault: Option<Fault>) -> Vec<u8> {
    let mut s = stream_of(up, &[Piece::Text("Hel"), Piece::Text("lo ")]);
    let spoiled = upstream(up, &Piece::Text("SPOILED"), &mut 0);
    let half = &spoiled.as_bytes()[..spoiled.len() / 2];
    match fault {
        Some(Fault::NotJson) => {
            s.extend_from_slice(half);
            s.extend_from_slice(b"\n\n");
        }
        // The stream ends inside an event.
        Some(Fault::Cut) => {
            s.extend_from_slice(half);
            return s;
        }
        Some(Fault::BadUtf8) => {
            s.extend_from_slice(b"data: {\"text\":\"\xff\xfe\"}\n\n");
        }
        Some(Fault::TooLarge) => {
            s.extend_from_slice(b"data: \"");
            s.extend(std::iter::repeat_n(b'x', MAX_EVENT_BYTES));
            s.extend_from_slice(b"\"\n\n");
        }
        None => return s,
    }
    let mut seq = 100;
    for p in [Piece::Text("world"), Piece::End] {
        s.extend_from_slice(upstream(up, &p, &mut seq).as_bytes());
    }
    s
}

#[test]
fn a_broken_upstream_stream_ends_every_client_stream_with_its_error_event() {
    for (up, client) in pairs() {
        for fault in [
            Some(Fault::NotJson),
            Some(Fault::BadUtf8),
            Some(Fault::TooLarge),
            Some(Fault::Cut),
            None,
        ] {
            let input = broken(up, fault);
            let steps: &[usize] = if fault == Some(Fault::TooLarge) {
                &[usize::MAX, 1 << 20]
            } else {
                &[usize::MAX, 1, 7]
            };
            for &step in steps {
                let what = format!("{up:?} -> {client:?}, {fault:?}, step {step}");
                let mut t = stream_translator(up, client, ctx());
                let mut out = Vec::new();
                for piece in input.chunks(step.min(input.len())) {
                    t.feed(piece, &mut out);
                }
                t.finish(None, &mut out);
                let evs = client_events(&out);
                assert!(ends_with_the_error_event(client, &evs), "{what}: {evs:?}");
                assert!(!claims_complete(client, &evs), "{what}: {evs:?}");
                let text = String::from_utf8_lossy(&out);
                assert!(!text.contains("world"), "{what}: nothing after the fault");
                assert!(!text.contains("SPOILED"), "{what}");
                assert_eq!(t.delivered_bytes(), 6, "{what}: `Hello `");
                if fault.is_some_and(|f| f != Fault::Cut) {
                    // The usage reported after the fault still counts for the bill.
                    assert_eq!(t.usage().output_tokens, 4, "{what}");
                }
            }
        }
    }
}

/// Text, reasoning and tool-call arguments, counted once, whichever way the stream
/// goes: 5 (`think`) + 8 (`Hi there`) + 7 (`{"a":1}`) bytes.
#[test]
fn every_translator_counts_the_output_bytes_it_carried() {
    let pieces = [
        Piece::Thinking("think"),
        Piece::Text("Hi "),
        Piece::Text("there"),
        Piece::Call(&["{\"a\"", ":1}"]),
        Piece::End,
    ];
    for (up, client) in pairs() {
        let input = stream_of(up, &pieces);
        for step in [input.len(), 1, 5] {
            let mut t = stream_translator(up, client, ctx());
            let mut out = Vec::new();
            for piece in input.chunks(step) {
                t.feed(piece, &mut out);
                assert!(t.delivered_bytes() <= 20);
            }
            t.finish(None, &mut out);
            let what = format!("{up:?} -> {client:?}, step {step}");
            assert_eq!(t.delivered_bytes(), 20, "{what}");
            assert!(
                !ends_with_the_error_event(client, &client_events(&out)),
                "{what}: a whole stream ends cleanly: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}

/// A fault as the very first event, then a usage report in the same read: the client
/// sees the same bytes whether the two arrive together or one byte at a time (the usage
/// that follows the fault must not open the client's stream before its error).
#[test]
fn a_fault_first_gives_the_same_client_stream_whole_or_in_pieces() {
    for (up, client) in pairs() {
        let mut input = b"data: : keep-alive\n\n".to_vec();
        input.extend_from_slice(upstream(up, &Piece::End, &mut 100).as_bytes());
        let run = |step: usize| {
            let mut t = stream_translator(up, client, ctx());
            let mut out = Vec::new();
            for piece in input.chunks(step) {
                t.feed(piece, &mut out);
            }
            t.finish(None, &mut out);
            (out, t.usage().output_tokens)
        };
        let what = format!("{up:?} -> {client:?}");
        let (whole, tokens) = run(input.len());
        let (bytes, _) = run(1);
        assert_eq!(
            String::from_utf8_lossy(&whole),
            String::from_utf8_lossy(&bytes),
            "{what}"
        );
        assert!(
            ends_with_the_error_event(client, &client_events(&whole)),
            "{what}"
        );
        assert_eq!(tokens, 4, "{what}: the usage after the fault is billed");
    }
}

/// The usage object of a client stream's usage event: chat's last chunk with usage,
/// messages' `message_delta`, generate-content's last `usageMetadata`, the responses
/// `response.completed`.
fn usage_object(client: Protocol, evs: &[(String, String)]) -> Option<Value> {
    evs.iter().rev().find_map(|(name, data)| {
        let v: Value = serde_json::from_str(data).ok()?;
        let u = match client {
            Protocol::Chat => v.get("usage"),
            Protocol::Messages if name == "message_delta" => v.get("usage"),
            Protocol::Gemini => v.get("usageMetadata"),
            Protocol::Responses if name == "response.completed" => v["response"].get("usage"),
            _ => None,
        };
        u.filter(|u| u.is_object()).cloned()
    })
}

/// With a charge, every stream's usage event carries the cost of the stream's final
/// usage, whatever the pair and the reads; that member is the only difference from the
/// stream without a charge.
#[test]
fn every_client_stream_shows_the_cost_of_its_final_usage_in_its_usage_event() {
    let pieces = [Piece::Thinking("hm"), Piece::Text("Hi"), Piece::End];
    for (up, client) in pairs() {
        let input = stream_of(up, &pieces);
        let run = |charge: bool, step: usize| {
            let ctx = StreamContext {
                charge: charge.then(super::cost::test_charge),
                ..ctx()
            };
            let mut t = stream_translator(up, client, ctx);
            let mut out = Vec::new();
            for piece in input.chunks(step) {
                t.feed(piece, &mut out);
            }
            t.finish(None, &mut out);
            (out, t.usage())
        };
        let what = format!("{up:?} -> {client:?}");
        let (out, usage) = run(true, input.len());
        assert_eq!(usage.output_tokens, 4, "{what}");
        let evs = client_events(&out);
        let u = usage_object(client, &evs).unwrap_or_else(|| panic!("{what}: {evs:?}"));
        let cost = super::usd_json(super::cost::test_charge().of(&usage));
        assert_eq!(u["cost_usd"], cost, "{what}");
        for step in [1, 9] {
            assert_eq!(run(true, step).0, out, "{what}, step {step}");
        }
        let (plain, _) = run(false, input.len());
        assert!(
            !String::from_utf8_lossy(&plain).contains("cost_usd"),
            "{what}"
        );
        let strip = |evs: Vec<(String, String)>| {
            evs.into_iter()
                .map(|(name, data)| {
                    let v = serde_json::from_str::<Value>(&data).map(|mut v| {
                        for path in ["/usage", "/usageMetadata", "/response/usage"] {
                            if let Some(u) = v.pointer_mut(path).and_then(Value::as_object_mut) {
                                u.shift_remove("cost_usd");
                            }
                        }
                        v
                    });
                    (name, v.map_err(|_| data))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(evs), strip(client_events(&plain)), "{what}");
    }
}
