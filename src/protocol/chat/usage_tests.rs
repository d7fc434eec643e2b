//! Usage as chat upstreams report it, read alike by every path (whole answers and
//! streams, translated and passed through), and the cost a chat client's stream shows.

use super::testutil::{decode, splits, stream_ctx};
use super::{decoder, encoder, parse_response, passthrough_response, render_response, Passthrough};
use crate::protocol::cost::test_charge;
use crate::protocol::ir::{Event, FinishReason};
use crate::protocol::{usd_json, ResponseContext, StreamContext, StreamTranslator, Usage};
use serde_json::{json, Value};

/// `usage` with every detail the OpenAI API reference documents (Chat Completions
/// object, `usage`): cached and audio prompt tokens, reasoning and audio completion
/// tokens, and the prediction counts (billed as completion tokens, read as such).
const USAGE: &str = r#"{"prompt_tokens":1117,"completion_tokens":260,"total_tokens":1377,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":48},"completion_tokens_details":{"reasoning_tokens":64,"audio_tokens":180,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}"#;

fn reported() -> Usage {
    Usage {
        input_tokens: 1117,
        output_tokens: 260,
        cached_input_tokens: 1024,
        audio_input_tokens: 48,
        reasoning_tokens: 64,
        audio_output_tokens: 180,
        ..Usage::default()
    }
}

/// A spoken answer of an audio model, as the API writes it.
fn answer() -> String {
    format!(
        r#"{{"id":"chatcmpl-AZ7qpVvbc3hTCkyJLmI1","object":"chat.completion","created":1733156412,"model":"gpt-4o-audio-preview-2024-12-17","choices":[{{"index":0,"message":{{"role":"assistant","content":null,"refusal":null,"audio":{{"id":"audio_674e2c3c1cc48190","data":"UklGRiQAAABXQVZF","expires_at":1733160012,"transcript":"Hello there."}}}},"finish_reason":"stop"}}],"usage":{USAGE},"service_tier":"default","system_fingerprint":"fp_4a7e8b6bf7"}}"#
    )
}

/// The same answer streamed, the usage chunk last (`stream_options.include_usage`).
fn stream() -> String {
    let head = r#"{"id":"chatcmpl-AZ7qp","object":"chat.completion.chunk","created":1733156412,"model":"gpt-4o-audio-preview-2024-12-17","choices":"#;
    [
        format!(r#"{head}[{{"index":0,"delta":{{"role":"assistant","content":null,"audio":{{"id":"audio_674e","transcript":"Hello"}}}},"finish_reason":null}}],"usage":null}}"#),
        format!(r#"{head}[{{"index":0,"delta":{{"content":"Hello there."}},"finish_reason":null}}],"usage":null}}"#),
        format!(r#"{head}[{{"index":0,"delta":{{}},"finish_reason":"stop"}}],"usage":null}}"#),
        format!(r#"{head}[],"usage":{USAGE}}}"#),
        "[DONE]".to_string(),
    ]
    .iter()
    .map(|c| format!("data: {c}\n\n"))
    .collect()
}

fn charged(wants_usage: bool) -> StreamContext {
    StreamContext {
        charge: Some(test_charge()),
        ..stream_ctx(wants_usage)
    }
}

fn cost_of(u: &Usage) -> Value {
    usd_json(test_charge().of(u))
}

fn passthrough(ctx: StreamContext, input: &str) -> (String, Usage) {
    let mut t = Passthrough::new(ctx);
    let mut out = Vec::new();
    for piece in input.as_bytes().chunks(7) {
        t.feed(piece, &mut out);
    }
    t.finish(None, &mut out);
    (String::from_utf8(out).unwrap(), t.usage())
}

/// The chunks' JSON, `[DONE]` left out.
fn chunks(stream: &str) -> Vec<Value> {
    stream
        .split_terminator("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn every_path_reads_every_usage_detail() {
    let body = answer();
    let (_, whole) = passthrough_response(body.as_bytes(), "m").unwrap();
    assert_eq!(whole, reported(), "a whole answer passed through");
    let parsed = parse_response(body.as_bytes()).unwrap();
    assert_eq!(parsed.usage, reported(), "a whole answer translated");
    let input = stream();
    for pieces in splits(input.as_bytes()) {
        let (events, complete) = decode(decoder(), &pieces);
        assert!(complete);
        let last = events.iter().rev().find_map(|e| match e {
            Event::Usage(u) => Some(*u),
            _ => None,
        });
        assert_eq!(last, Some(reported()), "a stream translated");
    }
    assert_eq!(
        passthrough(stream_ctx(true), &input).1,
        reported(),
        "a stream passed through"
    );
}

#[test]
fn audio_shares_are_written_only_when_there_are_some() {
    let ctx = ResponseContext {
        client_model: "m",
        request_id: "r",
        created: 1,
        compact: false,
    };
    let render = |usage: Usage| {
        let resp = crate::protocol::ir::Response {
            usage,
            ..Default::default()
        };
        let v: Value = serde_json::from_slice(&render_response(&resp, &ctx)).unwrap();
        v["usage"].clone()
    };
    let u = render(reported());
    assert_eq!(
        u["prompt_tokens_details"],
        json!({"cached_tokens": 1024, "audio_tokens": 48})
    );
    assert_eq!(
        u["completion_tokens_details"],
        json!({"reasoning_tokens": 64, "audio_tokens": 180})
    );
    let silent = Usage {
        audio_input_tokens: 0,
        audio_output_tokens: 0,
        ..reported()
    };
    let u = render(silent);
    assert_eq!(u["prompt_tokens_details"], json!({"cached_tokens": 1024}));
    assert_eq!(
        u["completion_tokens_details"],
        json!({"reasoning_tokens": 64})
    );
}

fn encode(ctx: &StreamContext, usage: Option<Usage>) -> String {
    let mut e = encoder(ctx);
    let mut out = Vec::new();
    e.event(&Event::Text("Hi".into()), &mut out);
    if let Some(u) = usage {
        e.event(&Event::Usage(u), &mut out);
    }
    e.event(&Event::Finish(FinishReason::Stop), &mut out);
    e.finish(None, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn a_translated_stream_shows_its_cost_in_the_usage_chunk_it_was_asked_for() {
    let out = encode(&charged(true), Some(reported()));
    let last = chunks(&out).pop().unwrap();
    assert_eq!(last["usage"]["cost_usd"], cost_of(&reported()));
    assert_eq!(last["usage"]["prompt_tokens"], 1117);
    // Without a charge, the same bytes without the cost.
    let plain = encode(&stream_ctx(true), Some(reported()));
    let cost = format!(r#","cost_usd":{}"#, cost_of(&reported()));
    assert_eq!(out.replace(&cost, ""), plain);
    assert!(!plain.contains("cost_usd"));
    // No usage chunk the client did not ask for, cost or not.
    let out = encode(&charged(false), Some(reported()));
    assert_eq!(out, encode(&stream_ctx(false), Some(reported())));
    assert!(!out.contains("usage") && !out.contains("cost_usd"), "{out}");
    // Usage the upstream never reported has no cost to show.
    let out = encode(&charged(true), None);
    assert_eq!(out, encode(&stream_ctx(true), None));
}

#[test]
fn a_passed_through_stream_shows_its_cost_in_the_usage_chunk() {
    let input = stream();
    let (out, _) = passthrough(charged(true), &input);
    let (plain, _) = passthrough(stream_ctx(true), &input);
    let (got, want) = (chunks(&out), chunks(&plain));
    assert_eq!(got.len(), want.len());
    let last = got.len() - 1;
    assert_eq!(got[last]["usage"]["cost_usd"], cost_of(&reported()));
    let mut usage = want[last]["usage"].clone();
    usage["cost_usd"] = cost_of(&reported());
    assert_eq!(
        got[last]["usage"], usage,
        "the upstream's members as they came"
    );
    // Every other chunk is byte for byte the one without a charge.
    let events = |s: &str| {
        s.split_terminator("\n\n")
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (a, b) = (events(&out), events(&plain));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if i != last {
            assert_eq!(x, y);
        }
    }
    // The client that did not ask for usage gets none, and no cost.
    let (out, _) = passthrough(charged(false), &input);
    assert_eq!(out, passthrough(stream_ctx(false), &input).0);
    assert!(!out.contains("cost_usd"));
}
