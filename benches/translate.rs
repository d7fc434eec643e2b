//! Translation throughput: a 100 KiB request per (client → upstream) pair, and a
//! 2,000-event stream per (upstream → client) pair, decoded, translated and re-encoded.
//!
//! `cargo bench --bench translate` prints a Markdown table and writes it to
//! `target/bench-translate.md`. Each figure is the median of several timed rounds.

use model_gateway::protocol::{
    parse_request, stream_translator, translate_request, Protocol, RequestOptions, StreamContext,
};
use serde_json::{json, Value};
use std::fmt::Write as _;

#[path = "common/timing.rs"]
mod timing;

fn name(p: Protocol) -> &'static str {
    match p {
        Protocol::Chat => "chat",
        Protocol::Messages => "messages",
        Protocol::Gemini => "gemini",
        Protocol::Responses => "responses",
        Protocol::Converse => "converse",
    }
}

/// A ~100 KiB agent-style conversation in the client's protocol: many turns of prose
/// and tool calls with their results.
fn big_request(client: Protocol) -> Vec<u8> {
    let prose = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    let mut turns = Vec::new();
    let mut i = 0;
    while serde_json::to_vec(&turns).map_or(0, |v| v.len()) < 100 * 1024 {
        let id = format!("call_{i}");
        let v = match client {
            Protocol::Chat => vec![
                json!({"role": "user", "content": prose}),
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"fox\"}"}}]}),
                json!({"role": "tool", "tool_call_id": id, "content": prose}),
                json!({"role": "assistant", "content": prose}),
            ],
            Protocol::Messages => vec![
                json!({"role": "user", "content": prose}),
                json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": "fox"}}]}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": prose}]}),
                json!({"role": "assistant", "content": prose}),
            ],
            Protocol::Gemini => vec![
                json!({"role": "user", "parts": [{"text": prose}]}),
                json!({"role": "model", "parts": [{"functionCall": {"name": "search", "args": {"q": "fox"}}}]}),
                json!({"role": "user", "parts": [{"functionResponse": {"name": "search", "response": {"result": prose}}}]}),
                json!({"role": "model", "parts": [{"text": prose}]}),
            ],
            Protocol::Responses => vec![
                json!({"role": "user", "content": prose}),
                json!({"type": "function_call", "call_id": id, "name": "search", "arguments": "{\"q\":\"fox\"}"}),
                json!({"type": "function_call_output", "call_id": id, "output": prose}),
                json!({"role": "assistant", "content": prose}),
            ],
            // Upstream only: never a client here.
            Protocol::Converse => return Vec::new(),
        };
        turns.extend(v);
        i += 1;
    }
    let tools = json!([{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]);
    let body = match client {
        Protocol::Chat => json!({"model": "m", "messages": turns, "tools": tools}),
        Protocol::Messages => {
            json!({"model": "m", "max_tokens": 1024, "messages": turns, "tools": [{"name": "search", "input_schema": tools[0]["function"]["parameters"]}]})
        }
        Protocol::Gemini => {
            json!({"contents": turns, "tools": [{"functionDeclarations": [{"name": "search", "parameters": tools[0]["function"]["parameters"]}]}]})
        }
        Protocol::Responses => {
            json!({"model": "m", "input": turns, "tools": [{"type": "function", "name": "search", "parameters": tools[0]["function"]["parameters"]}]})
        }
        Protocol::Converse => return Vec::new(),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// A 2,000-event text stream as the upstream sends it, with usage at the end.
fn big_stream(upstream: Protocol) -> (Vec<u8>, usize) {
    const N: usize = 2000;
    let mut s = String::new();
    let piece = "word ";
    match upstream {
        Protocol::Chat => {
            for _ in 0..N - 2 {
                let _ = write!(
                    s,
                    "data: {}\n\n",
                    json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]})
                );
            }
            let _ = write!(
                s,
                "data: {}\n\n",
                json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": N, "total_tokens": N + 10}})
            );
            s.push_str("data: [DONE]\n\n");
        }
        Protocol::Messages => {
            let ev = |s: &mut String, name: &str, v: Value| {
                let _ = write!(s, "event: {name}\ndata: {v}\n\n");
            };
            ev(
                &mut s,
                "message_start",
                json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            );
            ev(
                &mut s,
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            );
            for _ in 0..N - 5 {
                ev(
                    &mut s,
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}),
                );
            }
            ev(
                &mut s,
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            );
            ev(
                &mut s,
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": N}}),
            );
            ev(&mut s, "message_stop", json!({"type": "message_stop"}));
        }
        Protocol::Gemini | Protocol::Responses => {
            for i in 0..N {
                let mut c = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}], "modelVersion": "m"});
                if i == N - 1 {
                    c["candidates"][0]["finishReason"] = json!("STOP");
                    c["usageMetadata"] = json!({"promptTokenCount": 10, "candidatesTokenCount": N, "totalTokenCount": N + 10});
                }
                let _ = write!(s, "data: {c}\n\n");
            }
        }
        Protocol::Converse => return (converse_stream(N), N),
    }
    (s.into_bytes(), N)
}

/// A ConverseStream answer of `n` events: AWS event-stream frames.
fn converse_stream(n: usize) -> Vec<u8> {
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    let mut out = Vec::new();
    let mut frame = |event: &str, payload: Value| {
        let m = Message::new(serde_json::to_vec(&payload).unwrap_or_default())
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
        let _ = write_message_to(&m, &mut out);
    };
    frame("messageStart", json!({"role": "assistant"}));
    for _ in 0..n - 3 {
        frame(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "word "}}),
        );
    }
    frame("messageStop", json!({"stopReason": "end_turn"}));
    frame(
        "metadata",
        json!({"usage": {"inputTokens": 10, "outputTokens": n, "totalTokens": n + 10}}),
    );
    out
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too: keep it short then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let clients = [
        Protocol::Chat,
        Protocol::Messages,
        Protocol::Gemini,
        Protocol::Responses,
    ];
    let upstreams = [
        Protocol::Chat,
        Protocol::Messages,
        Protocol::Gemini,
        Protocol::Converse,
    ];
    let mut report = String::from(
        "### Request translation (100 KiB body: parse, validate, translate, serialize)\n\n| client → upstream | MB/s | µs per request |\n|---|---:|---:|\n",
    );
    for client in clients {
        let body = big_request(client);
        for upstream in upstreams {
            let opts = RequestOptions {
                upstream_model: "upstream-model",
                stream: false,
                default_max_tokens: 4096,
                chat_limit_field: "max_completion_tokens",
                compact: false,
            };
            let run = || {
                let v = parse_request(client, &body).expect("valid request");
                let out = translate_request(client, upstream, v, &opts).expect("translates");
                std::hint::black_box(out.body.len());
            };
            let secs = if quick {
                run();
                continue;
            } else {
                timing::median(false, run)
            };
            let mbps = body.len() as f64 / secs / 1e6;
            let _ = writeln!(
                report,
                "| {} → {} | {mbps:.0} | {:.0} |",
                name(client),
                name(upstream),
                secs * 1e6
            );
        }
    }
    report.push_str(
        "\n### Stream translation (2,000 events: SSE decode, translate, encode)\n\n| upstream → client | events/s | MB/s |\n|---|---:|---:|\n",
    );
    for upstream in upstreams {
        let (bytes, n) = big_stream(upstream);
        for client in clients {
            let run = || {
                let ctx = StreamContext {
                    client_model: "m".into(),
                    request_id: "r".into(),
                    created: 0,
                    client_wants_usage: true,
                    client_sse: true,
                    charge: None,
                };
                let mut t = stream_translator(upstream, client, ctx);
                let mut out = Vec::with_capacity(bytes.len() * 2);
                // Network-sized reads, as the relay feeds them.
                for piece in bytes.chunks(4096) {
                    t.feed(piece, &mut out);
                }
                t.finish(None, &mut out);
                std::hint::black_box(out.len());
            };
            let secs = if quick {
                run();
                continue;
            } else {
                timing::median(false, run)
            };
            let _ = writeln!(
                report,
                "| {} → {} | {:.0} | {:.0} |",
                name(upstream),
                name(client),
                n as f64 / secs,
                bytes.len() as f64 / secs / 1e6
            );
        }
    }
    if quick {
        println!("translate bench smoke run ok");
        return;
    }
    println!("{report}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-translate.md");
    if let Err(e) = std::fs::write(path, &report) {
        eprintln!("cannot write {path}: {e}");
    }
}
