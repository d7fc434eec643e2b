//! Usage as messages upstreams report it (cache reads, cache writes by lifetime, server
//! web searches), read alike by every path, and the cost a messages client's stream shows.

use super::test_support::{parse_sse, splits};
use super::{
    decoder, encoder, parse_response, passthrough_response, passthrough_stream, render_response,
};
use crate::protocol::cost::test_charge;
use crate::protocol::ir::{Event, FinishReason, Response};
use crate::protocol::{usd_json, ResponseContext, StreamContext, Usage};
use serde_json::{json, Value};

/// `usage` with every member the Anthropic API reference documents (Messages, `usage`):
/// `input_tokens` counts neither cache reads nor writes; `cache_creation` splits the
/// writes by lifetime.
const USAGE: &str = r#"{"input_tokens":2095,"cache_creation_input_tokens":3000,"cache_read_input_tokens":1500,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":503,"server_tool_use":{"web_search_requests":1},"service_tier":"standard"}"#;

fn reported() -> Usage {
    Usage {
        input_tokens: 2095 + 1500 + 3000,
        output_tokens: 503,
        cached_input_tokens: 1500,
        cache_creation_input_tokens: 3000,
        cache_write_1h_tokens: 2000,
        web_search_requests: 1,
        ..Usage::default()
    }
}

/// An answer that searched the web once, as the API writes it.
fn answer() -> String {
    format!(
        r#"{{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{{"type":"server_tool_use","id":"srvtoolu_01WYG3ziw53XMcoyKL4XcZmE","name":"web_search","input":{{"query":"weather in Paris today"}}}},{{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01WYG3ziw53XMcoyKL4XcZmE","content":[{{"type":"web_search_result","url":"https://example.com/paris","title":"Paris weather","encrypted_content":"EqgfCioIARgBIiQ3","page_age":null}}]}},{{"type":"text","text":"It is sunny in Paris.","citations":null}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{USAGE}}}"#
    )
}

fn named(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// The answer streamed: `message_start` carries the input figures; the final
/// `message_delta` the cumulative output and searches, and, from newer upstreams, the
/// input figures again (`repeats_input`) without the lifetimes.
fn stream(repeats_input: bool) -> String {
    let start = r#"{"type":"message_start","message":{"id":"msg_01XF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":3000,"cache_read_input_tokens":1500,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":1,"service_tier":"standard"}}}"#;
    let delta = if repeats_input {
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":2095,"cache_creation_input_tokens":3000,"cache_read_input_tokens":1500,"output_tokens":503,"server_tool_use":{"web_search_requests":1}}}"#
    } else {
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":503,"server_tool_use":{"web_search_requests":1}}}"#
    };
    [
        named("message_start", start),
        named(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        named("ping", r#"{"type":"ping"}"#),
        named(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"It is sunny in Paris."}}"#,
        ),
        named(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        named("message_delta", delta),
        named("message_stop", r#"{"type":"message_stop"}"#),
    ]
    .concat()
}

fn ctx(charge: bool) -> StreamContext {
    StreamContext {
        client_model: "claude-latest".into(),
        request_id: "rid9".into(),
        created: 0,
        client_wants_usage: false,
        client_sse: true,
        charge: charge.then(test_charge),
    }
}

fn cost_of(u: &Usage) -> Value {
    usd_json(test_charge().of(u))
}

/// A passed-through stream fed in `pieces`: the client's bytes and the usage read.
fn relay(charge: bool, pieces: &[&[u8]]) -> (String, Usage) {
    let mut t = passthrough_stream(ctx(charge));
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(None, &mut out);
    (String::from_utf8(out).unwrap(), t.usage())
}

#[test]
fn every_path_reads_every_usage_detail() {
    let body = answer();
    let (_, whole) = passthrough_response(body.as_bytes(), "m").unwrap();
    assert_eq!(whole, reported(), "a whole answer passed through");
    assert_eq!(parse_response(body.as_bytes()).unwrap().usage, reported());
    for repeats_input in [false, true] {
        let input = stream(repeats_input);
        for pieces in splits(input.as_bytes()) {
            let mut d = decoder();
            let mut events = Vec::new();
            for p in &pieces {
                d.feed(p, &mut events).unwrap();
            }
            d.flush(&mut events).unwrap();
            let last = events.iter().rev().find_map(|e| match e {
                Event::Usage(u) => Some(*u),
                _ => None,
            });
            assert_eq!(last, Some(reported()), "translated, {repeats_input}");
            assert_eq!(relay(false, &pieces).1, reported(), "passed through");
        }
    }
}

/// Without the breakdown (older answers), every write is one of no stated lifetime;
/// with it, its sum is the write total.
#[test]
fn cache_writes_by_lifetime_when_the_upstream_breaks_them_down() {
    let usage = |u: &str| {
        let body = format!(
            r#"{{"type":"message","role":"assistant","content":[],"stop_reason":"end_turn","usage":{u}}}"#
        );
        parse_response(body.as_bytes()).unwrap().usage
    };
    let old = usage(r#"{"input_tokens":10,"cache_creation_input_tokens":300,"output_tokens":2}"#);
    assert_eq!(
        (
            old.input_tokens,
            old.cache_creation_input_tokens,
            old.cache_write_1h_tokens
        ),
        (310, 300, 0)
    );
    let split = usage(
        r#"{"input_tokens":10,"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200},"output_tokens":2}"#,
    );
    assert_eq!(
        (
            split.input_tokens,
            split.cache_creation_input_tokens,
            split.cache_write_1h_tokens
        ),
        (310, 300, 200)
    );
}

#[test]
fn lifetimes_and_searches_are_written_only_when_there_are_some() {
    let rctx = ResponseContext {
        client_model: "m",
        request_id: "r",
        created: 0,
        compact: false,
    };
    let render = |usage: Usage| {
        let resp = Response {
            usage,
            ..Default::default()
        };
        let v: Value = serde_json::from_slice(&render_response(&resp, &rctx)).unwrap();
        v["usage"].clone()
    };
    assert_eq!(
        render(reported()),
        json!({
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 1500,
            "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
            "server_tool_use": {"web_search_requests": 1},
        })
    );
    let plain = Usage {
        cache_write_1h_tokens: 0,
        web_search_requests: 0,
        ..reported()
    };
    assert_eq!(
        render(plain),
        json!({
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 1500,
        })
    );
}

fn encode(charge: bool, usage: Option<Usage>) -> String {
    let mut e = encoder(&ctx(charge));
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
fn a_translated_stream_shows_its_cost_in_the_final_message_delta() {
    let out = encode(true, Some(reported()));
    let events = parse_sse(out.as_bytes());
    let (name, delta) = &events[events.len() - 2];
    assert_eq!(name, "message_delta");
    assert_eq!(delta["usage"]["cost_usd"], cost_of(&reported()));
    assert_eq!(delta["usage"]["server_tool_use"]["web_search_requests"], 1);
    let plain = encode(false, Some(reported()));
    let cost = format!(r#","cost_usd":{}"#, cost_of(&reported()));
    assert_eq!(out.replace(&cost, ""), plain);
    assert!(!plain.contains("cost_usd"));
    // Usage the upstream never reported has no cost to show.
    assert_eq!(encode(true, None), encode(false, None));
}

#[test]
fn a_passed_through_stream_shows_its_cost_in_the_final_message_delta() {
    let input = stream(false);
    let (out, _) = relay(true, &[input.as_bytes()]);
    let (plain, _) = relay(false, &[input.as_bytes()]);
    let blocks = |s: &str| {
        s.split_terminator("\n\n")
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (got, want) = (blocks(&out), blocks(&plain));
    assert_eq!(got.len(), want.len());
    for (x, y) in got.iter().zip(&want) {
        if !y.starts_with("event: message_delta") {
            assert_eq!(x, y, "only the message_delta changes");
        }
    }
    let events = parse_sse(out.as_bytes());
    let (_, delta) = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    // The totals merged so far, though the event itself states only the output.
    assert_eq!(
        delta["usage"],
        json!({"output_tokens": 503, "server_tool_use": {"web_search_requests": 1},
            "cost_usd": cost_of(&reported())})
    );
    assert!(!plain.contains("cost_usd"));
    // Whatever the reads' boundaries, the same bytes.
    for pieces in splits(input.as_bytes()) {
        assert_eq!(relay(true, &pieces).0, out);
    }
}
