//! Usage as Responses upstreams report it, and the cost a responses client's stream
//! shows on its final response (translated or passed through).

use super::super::{encoder, passthrough_response, passthrough_stream, render_response};
use super::{events, random_pieces, rctx, sctx};
use crate::protocol::cost::test_charge;
use crate::protocol::ir::{Event, FinishReason, Response};
use crate::protocol::{usd_json, StreamContext, Usage};
use serde_json::{json, Value};

/// `usage` as the OpenAI API reference documents it (the response object, `usage`):
/// cached tokens a share of the input, reasoning tokens a share of the output.
const USAGE: &str = r#"{"input_tokens":1524,"input_tokens_details":{"cached_tokens":1280},"output_tokens":612,"output_tokens_details":{"reasoning_tokens":448},"total_tokens":2136}"#;

fn reported() -> Usage {
    Usage {
        input_tokens: 1524,
        output_tokens: 612,
        cached_input_tokens: 1280,
        reasoning_tokens: 448,
        ..Usage::default()
    }
}

fn response(status: &str) -> String {
    format!(
        r#"{{"id":"resp_67ccd3a9da748190","object":"response","created_at":1741476777,"status":"{status}","error":null,"incomplete_details":null,"model":"o3-2025-04-16","output":[{{"id":"rs_67ccd3b0","type":"reasoning","summary":[]}},{{"id":"msg_67ccd3c1","type":"message","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"Paris.","annotations":[]}}]}}],"parallel_tool_calls":true,"store":true,"usage":{USAGE}}}"#
    )
}

/// A native stream ending with `kind` (its final response object carries the usage).
fn stream(kind: &str) -> String {
    let created = r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_67ccd3a9da748190","object":"response","status":"in_progress","model":"o3-2025-04-16","output":[],"usage":null}}"#;
    let delta = r#"{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_67ccd3c1","output_index":1,"content_index":0,"delta":"Paris.","obfuscation":"ab"}"#;
    let status = kind.trim_start_matches("response.");
    let last = format!(
        r#"{{"type":"{kind}","sequence_number":2,"response":{}}}"#,
        response(status)
    );
    [
        ("response.created", created),
        ("response.output_text.delta", delta),
        (kind, last.as_str()),
    ]
    .iter()
    .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
    .collect()
}

fn charged() -> StreamContext {
    StreamContext {
        charge: Some(test_charge()),
        ..sctx()
    }
}

fn cost_of(u: &Usage) -> Value {
    usd_json(test_charge().of(u))
}

fn relay(ctx: StreamContext, pieces: Vec<&[u8]>) -> (String, Usage) {
    let mut t = passthrough_stream(ctx);
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(None, &mut out);
    (String::from_utf8(out).unwrap(), t.usage())
}

#[test]
fn every_path_reads_every_usage_detail() {
    let body = response("completed");
    let (_, whole) = passthrough_response(body.as_bytes(), "m", "r").unwrap();
    assert_eq!(whole, reported());
    let input = stream("response.completed");
    for seed in 0..6 {
        let pieces = random_pieces(input.as_bytes(), seed, 30);
        assert_eq!(relay(sctx(), pieces).1, reported());
    }
}

/// The chat-style details (spec 2.6) split the tokens by kind: text is the rest.
#[test]
fn the_chat_style_details_split_the_tokens_by_kind() {
    let resp = Response {
        usage: Usage {
            input_tokens: 100,
            cached_input_tokens: 40,
            audio_input_tokens: 30,
            image_input_tokens: 20,
            output_tokens: 50,
            reasoning_tokens: 10,
            audio_output_tokens: 15,
            ..Usage::default()
        },
        ..Default::default()
    };
    let v: Value = serde_json::from_slice(&render_response(&resp, &rctx())).unwrap();
    let u = &v["usage"];
    assert_eq!(
        u["prompt_tokens_details"],
        json!({"cached_tokens": 40, "text_tokens": 50, "audio_tokens": 30, "image_tokens": 20})
    );
    assert_eq!(
        u["completion_tokens_details"],
        json!({"text_tokens": 25, "audio_tokens": 15, "reasoning_tokens": 10})
    );
}

fn encode(ctx: &StreamContext, usage: Option<Usage>, finish: FinishReason) -> String {
    let mut e = encoder(ctx);
    let mut out = Vec::new();
    e.event(&Event::Text("Paris.".into()), &mut out);
    if let Some(u) = usage {
        e.event(&Event::Usage(u), &mut out);
    }
    e.event(&Event::Finish(finish), &mut out);
    e.finish(None, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn a_translated_stream_shows_its_cost_on_the_final_response() {
    let cost = format!(r#","cost_usd":{}"#, cost_of(&reported()));
    for (finish, kind) in [
        (FinishReason::Stop, "response.completed"),
        (FinishReason::Length, "response.incomplete"),
    ] {
        let out = encode(&charged(), Some(reported()), finish.clone());
        let evs = events(out.as_bytes());
        let (name, last) = evs.last().unwrap();
        assert_eq!(name, kind);
        assert_eq!(last["response"]["usage"]["cost_usd"], cost_of(&reported()));
        assert_eq!(last["response"]["usage"]["input_tokens"], 1524);
        let plain = encode(&sctx(), Some(reported()), finish.clone());
        assert_eq!(out.replace(&cost, ""), plain);
        assert!(!plain.contains("cost_usd"));
        // No usage reported, no cost shown.
        assert_eq!(
            encode(&charged(), None, finish.clone()),
            encode(&sctx(), None, finish)
        );
    }
}

#[test]
fn a_passed_through_stream_shows_its_cost_on_the_final_response() {
    for kind in ["response.completed", "response.incomplete"] {
        let input = stream(kind);
        let (out, _) = relay(charged(), vec![input.as_bytes()]);
        let (plain, _) = relay(sctx(), vec![input.as_bytes()]);
        let (got, want) = (events(out.as_bytes()), events(plain.as_bytes()));
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[..2],
            want[..2],
            "{kind}: the events before it are unchanged"
        );
        let mut usage = want[2].1["response"]["usage"].clone();
        usage["cost_usd"] = cost_of(&reported());
        assert_eq!(got[2].1["response"]["usage"], usage, "{kind}");
        assert_eq!(
            out.split("\n\n").take(2).collect::<Vec<_>>(),
            plain.split("\n\n").take(2).collect::<Vec<_>>(),
            "byte for byte"
        );
        assert!(!plain.contains("cost_usd"));
        for seed in 0..4 {
            let pieces = random_pieces(input.as_bytes(), seed, 25);
            assert_eq!(relay(charged(), pieces).0, out);
        }
    }
    // A failed response is billed as the relay decides: no cost is shown on it.
    let input = stream("response.failed");
    let (out, _) = relay(charged(), vec![input.as_bytes()]);
    assert!(!out.contains("cost_usd"), "{out}");
}
