//! An upstream whose streams break in one scripted way, in every upstream protocol
//! (chat, messages, generate-content, native responses), for the edge tests.
//!
//! Every stream says [`BEFORE`] then [`AFTER`] in small events. The fault sits between
//! the two: an event cut in half (then the stream goes on to its end marker), an event
//! with bytes that are not UTF-8 (then on to the end), an event larger than the
//! gateway's bound (then on to the end), or the end of the stream with no end marker.
//! Usage is reported early (10 prompt tokens, 1 output token so far, where the protocol
//! has a place for it) and in full at the end (10 prompt, 5 output tokens).
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::time::Duration;

pub const BEFORE: &str = "Hello, wor";
pub const AFTER: &str = "ld. The rest of the answer.";
pub const PROMPT_TOKENS: u64 = 10;
pub const EARLY_OUTPUT_TOKENS: u64 = 1;
pub const OUTPUT_TOKENS: u64 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first half of an event, then the rest of the stream.
    HalfEvent,
    /// An event whose text holds bytes that are not UTF-8, then the rest of the stream.
    BadUtf8,
    /// An event one byte over the bound, then the rest of the stream.
    Oversized,
    /// The stream stops (the connection closes) before its end marker.
    NoEndMarker,
}

pub const FAULTS: [Fault; 4] = [
    Fault::HalfEvent,
    Fault::BadUtf8,
    Fault::Oversized,
    Fault::NoEndMarker,
];

impl Fault {
    /// Whether the upstream's final usage report reaches the gateway.
    pub fn final_usage_sent(self) -> bool {
        self != Fault::NoEndMarker
    }
}

/// One mock serving every protocol, chosen by path, every stream broken by `fault`.
pub async fn start(fault: Fault) -> MockUpstream {
    MockUpstream::start(move |r| reply(r, fault)).await
}

fn reply(r: &Recorded, fault: Fault) -> Reply {
    let path = r.path.split('?').next().unwrap_or("").to_string();
    let model = r
        .json()
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("m")
        .to_string();
    let stream = if path.ends_with("/chat/completions") {
        chat(&model)
    } else if path.ends_with("/messages") {
        messages(&model)
    } else if path.contains(":streamGenerateContent") {
        gemini()
    } else if path.ends_with("/responses") {
        responses(&model)
    } else {
        return Reply::json(404, json!({"error": {"message": "no such path"}}));
    };
    broken(stream, fault)
}

/// A stream as events: those before the fault, the event the fault spoils (its text is
/// never shown), those after it (the rest of the answer, usage, the end marker).
struct Script {
    before: Vec<Vec<u8>>,
    spoiled: Vec<u8>,
    after: Vec<Vec<u8>>,
}

fn broken(s: Script, fault: Fault) -> Reply {
    let mut pieces = s.before;
    let end = match fault {
        Fault::HalfEvent => {
            let half = s.spoiled.len() / 2;
            let mut cut = s.spoiled[..half].to_vec();
            cut.extend_from_slice(b"\n\n");
            pieces.push(cut);
            pieces.extend(s.after);
            End::Clean
        }
        Fault::BadUtf8 => {
            let text = String::from_utf8(s.spoiled).unwrap();
            let at = text
                .find("SPOILED")
                .expect("the spoiled event names itself");
            let mut bytes = text.into_bytes();
            bytes[at] = 0xff;
            bytes[at + 1] = 0xfe;
            pieces.push(bytes);
            pieces.extend(s.after);
            End::Clean
        }
        Fault::Oversized => {
            let pad = "x".repeat(model_gateway::protocol::sse::MAX_EVENT_BYTES);
            pieces.push(format!("data: {{\"pad\":\"{pad}\"}}\n\n").into_bytes());
            pieces.extend(s.after);
            End::Clean
        }
        Fault::NoEndMarker => End::Disconnect,
    };
    Reply::Chunked {
        status: 200,
        content_type: "text/event-stream".into(),
        pieces,
        interval: Duration::from_millis(1),
        end,
    }
}

fn data(v: Value) -> Vec<u8> {
    format!("data: {v}\n\n").into_bytes()
}

fn named(name: &str, v: Value) -> Vec<u8> {
    format!("event: {name}\ndata: {v}\n\n").into_bytes()
}

/// Splits a text into pieces of at most 4 characters, as a model streams it.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(4).map(|c| c.iter().collect()).collect()
}

fn chat(model: &str) -> Script {
    let chunk = |delta: Value, finish: Value, usage: Option<Value>| {
        let mut v = json!({"id": "chatcmpl-f", "object": "chat.completion.chunk", "created": 1,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        data(v)
    };
    let usage = |out: u64| {
        json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": out,
            "total_tokens": PROMPT_TOKENS + out})
    };
    // Some compatible servers report usage on every chunk: the first one says so here.
    let mut before = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        Some(usage(EARLY_OUTPUT_TOKENS)),
    )];
    before.extend(
        pieces(BEFORE)
            .iter()
            .map(|p| chunk(json!({"content": p}), Value::Null, None)),
    );
    let spoiled = chunk(json!({"content": "SPOILED"}), Value::Null, None);
    let mut after: Vec<Vec<u8>> = pieces(AFTER)
        .iter()
        .map(|p| chunk(json!({"content": p}), Value::Null, None))
        .collect();
    after.push(chunk(json!({}), json!("stop"), None));
    after.push(data(
        json!({"id": "chatcmpl-f", "object": "chat.completion.chunk", "created": 1,
        "model": model, "choices": [], "usage": usage(OUTPUT_TOKENS)}),
    ));
    after.push(b"data: [DONE]\n\n".to_vec());
    Script {
        before,
        spoiled,
        after,
    }
}

fn messages(model: &str) -> Script {
    let delta = |t: &str| {
        named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": t}}),
        )
    };
    let mut before = vec![
        named(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_f", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": EARLY_OUTPUT_TOKENS}}}),
        ),
        named(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    before.extend(pieces(BEFORE).iter().map(|p| delta(p)));
    let spoiled = delta("SPOILED");
    let mut after: Vec<Vec<u8>> = pieces(AFTER).iter().map(|p| delta(p)).collect();
    after.push(named(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    after.push(named(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": OUTPUT_TOKENS}}),
    ));
    after.push(named("message_stop", json!({"type": "message_stop"})));
    Script {
        before,
        spoiled,
        after,
    }
}

fn gemini() -> Script {
    let chunk = |text: &str, finish: Option<&str>, out: Option<u64>| {
        let mut c = json!({"content": {"role": "model", "parts": [{"text": text}]}, "index": 0});
        if let Some(f) = finish {
            c["finishReason"] = json!(f);
        }
        let mut v = json!({"candidates": [c], "modelVersion": "up-model", "responseId": "r-f"});
        if let Some(out) = out {
            v["usageMetadata"] = json!({"promptTokenCount": PROMPT_TOKENS,
                "candidatesTokenCount": out, "totalTokenCount": PROMPT_TOKENS + out});
        }
        data(v)
    };
    let ps = pieces(BEFORE);
    let mut before = vec![chunk(&ps[0], None, Some(EARLY_OUTPUT_TOKENS))];
    before.extend(ps[1..].iter().map(|p| chunk(p, None, None)));
    let spoiled = chunk("SPOILED", None, None);
    let rest = pieces(AFTER);
    let mut after: Vec<Vec<u8>> = rest[..rest.len() - 1]
        .iter()
        .map(|p| chunk(p, None, None))
        .collect();
    after.push(chunk(
        &rest[rest.len() - 1],
        Some("STOP"),
        Some(OUTPUT_TOKENS),
    ));
    Script {
        before,
        spoiled,
        after,
    }
}

fn responses(model: &str) -> Script {
    let mut seq = 0u64;
    let mut ev = |kind: &str, mut v: Value| {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(seq);
        seq += 1;
        named(kind, v)
    };
    let response = |status: &str, usage: Value| {
        json!({"id": "resp_f", "object": "response", "created_at": 1, "status": status,
            "model": model, "output": [], "usage": usage})
    };
    let mut before = vec![
        ev(
            "response.created",
            json!({"response": response("in_progress", Value::Null)}),
        ),
        ev(
            "response.output_item.added",
            json!({"output_index": 0, "item": {"id": "msg_f", "type": "message",
                "role": "assistant", "status": "in_progress", "content": []}}),
        ),
    ];
    for p in pieces(BEFORE) {
        before.push(ev(
            "response.output_text.delta",
            json!({"item_id": "msg_f", "output_index": 0, "content_index": 0, "delta": p}),
        ));
    }
    let spoiled = ev(
        "response.output_text.delta",
        json!({"item_id": "msg_f", "output_index": 0, "content_index": 0, "delta": "SPOILED"}),
    );
    let mut after = Vec::new();
    for p in pieces(AFTER) {
        after.push(ev(
            "response.output_text.delta",
            json!({"item_id": "msg_f", "output_index": 0, "content_index": 0, "delta": p}),
        ));
    }
    after.push(ev(
        "response.completed",
        json!({"response": response("completed", json!({"input_tokens": PROMPT_TOKENS,
            "output_tokens": OUTPUT_TOKENS, "total_tokens": PROMPT_TOKENS + OUTPUT_TOKENS}))}),
    ));
    Script {
        before,
        spoiled,
        after,
    }
}
