//! Usage as generate-content upstreams report it (cached content, thoughts, tool-use
//! prompts, modality breakdowns), read alike by every path, and the cost a
//! generate-content client's stream shows.

use super::super::super::cost::test_charge;
use super::super::super::ir::{Event, FinishReason, Response};
use super::super::super::{usd_json, StreamContext, Usage};
use super::super::{
    decoder, encoder, parse_response, passthrough_response, passthrough_stream, render_response,
};
use super::{response_ctx, splits, stream_ctx};
use serde_json::{json, Value};

/// `usageMetadata` with every count the Gemini API reference documents
/// (GenerateContentResponse, UsageMetadata): an audio and image prompt, part of it read
/// from cached content, a search tool's prompt, and thoughts.
const AUDIO_IN: &str = r#"{"promptTokenCount":1250,"candidatesTokenCount":40,"totalTokenCount":1420,"cachedContentTokenCount":600,"thoughtsTokenCount":100,"toolUsePromptTokenCount":30,"promptTokensDetails":[{"modality":"TEXT","tokenCount":250},{"modality":"AUDIO","tokenCount":800},{"modality":"IMAGE","tokenCount":200}],"cacheTokensDetails":[{"modality":"TEXT","tokenCount":100},{"modality":"AUDIO","tokenCount":500}],"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":40}],"toolUsePromptTokensDetails":[{"modality":"TEXT","tokenCount":30}]}"#;

fn audio_in() -> Usage {
    Usage {
        input_tokens: 1250 + 30,
        output_tokens: 40 + 100,
        cached_input_tokens: 600,
        reasoning_tokens: 100,
        // 800 audio tokens, 500 of them cached (priced as cached).
        audio_input_tokens: 300,
        image_input_tokens: 200,
        ..Usage::default()
    }
}

/// A speech model's answer (audio out).
const AUDIO_OUT: &str = r#"{"promptTokenCount":9,"candidatesTokenCount":250,"totalTokenCount":259,"promptTokensDetails":[{"modality":"TEXT","tokenCount":9}],"candidatesTokensDetails":[{"modality":"AUDIO","tokenCount":250}]}"#;

/// An image model's answer (an image and a caption out).
const IMAGE_OUT: &str = r#"{"promptTokenCount":12,"candidatesTokenCount":1302,"totalTokenCount":1314,"promptTokensDetails":[{"modality":"TEXT","tokenCount":12}],"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":12},{"modality":"IMAGE","tokenCount":1290}]}"#;

fn cases() -> [(&'static str, Usage); 3] {
    let audio_out = Usage {
        input_tokens: 9,
        output_tokens: 250,
        audio_output_tokens: 250,
        ..Usage::default()
    };
    let image_out = Usage {
        input_tokens: 12,
        output_tokens: 1302,
        image_output_tokens: 1290,
        ..Usage::default()
    };
    [
        (AUDIO_IN, audio_in()),
        (AUDIO_OUT, audio_out),
        (IMAGE_OUT, image_out),
    ]
}

fn answer(usage: &str) -> String {
    format!(
        r#"{{"candidates":[{{"content":{{"parts":[{{"text":"Done."}}],"role":"model"}},"finishReason":"STOP","index":0}}],"usageMetadata":{usage},"modelVersion":"gemini-2.5-flash","responseId":"mWzMaOfH"}}"#
    )
}

/// The answer streamed as the API sends it: usage on every chunk, the final figures on
/// the last one (with the finish reason).
fn stream(usage: &str) -> String {
    let first = r#"{"candidates":[{"content":{"parts":[{"text":"Do"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":1250,"totalTokenCount":1250},"modelVersion":"gemini-2.5-flash","responseId":"mWzMaOfH"}"#;
    let plain = r#"{"candidates":[{"content":{"parts":[{"text":"ne"}],"role":"model"},"index":0}],"modelVersion":"gemini-2.5-flash","responseId":"mWzMaOfH"}"#;
    let last = format!(
        r#"{{"candidates":[{{"content":{{"parts":[{{"text":"."}}],"role":"model"}},"finishReason":"STOP","index":0}}],"usageMetadata":{usage},"modelVersion":"gemini-2.5-flash","responseId":"mWzMaOfH"}}"#
    );
    [first, plain, &last]
        .iter()
        .map(|c| format!("data: {c}\r\n\r\n"))
        .collect()
}

fn charged(sse: bool) -> StreamContext {
    StreamContext {
        charge: Some(test_charge()),
        ..stream_ctx(sse)
    }
}

fn cost_of(u: &Usage) -> Value {
    usd_json(test_charge().of(u))
}

fn relay(ctx: StreamContext, pieces: &[&[u8]]) -> (String, Usage) {
    let mut t = passthrough_stream(ctx);
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(None, &mut out);
    (String::from_utf8(out).unwrap(), t.usage())
}

/// The chunks of an `alt=sse` client stream.
fn chunks(out: &str) -> Vec<Value> {
    out.split_terminator("\r\n\r\n")
        .map(|c| serde_json::from_str(c.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

#[test]
fn every_path_reads_every_usage_detail() {
    for (metadata, want) in cases() {
        let body = answer(metadata);
        let (_, whole) = passthrough_response(body.as_bytes(), "m").unwrap();
        assert_eq!(whole, want, "passed through: {metadata}");
        assert_eq!(parse_response(body.as_bytes()).unwrap().usage, want);
        let input = stream(metadata);
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
            assert_eq!(last, Some(want), "translated: {metadata}");
            assert_eq!(relay(stream_ctx(true), &pieces).1, want);
        }
    }
}

#[test]
fn modality_breakdowns_are_written_only_when_some_tokens_were_not_text() {
    let render = |usage: Usage| {
        let resp = Response {
            usage,
            ..Default::default()
        };
        let v: Value = serde_json::from_slice(&render_response(&resp, &response_ctx())).unwrap();
        v["usageMetadata"].clone()
    };
    let m = render(audio_in());
    assert_eq!(
        m["promptTokensDetails"],
        json!([{"modality": "TEXT", "tokenCount": 780}, {"modality": "AUDIO", "tokenCount": 300},
            {"modality": "IMAGE", "tokenCount": 200}])
    );
    assert!(m.get("candidatesTokensDetails").is_none(), "{m}");
    let [_, (_, audio_out), (_, image_out)] = cases();
    let m = render(audio_out);
    assert_eq!(
        m["candidatesTokensDetails"],
        json!([{"modality": "AUDIO", "tokenCount": 250}])
    );
    assert!(m.get("promptTokensDetails").is_none(), "{m}");
    let m = render(image_out);
    assert_eq!(
        m["candidatesTokensDetails"],
        json!([{"modality": "TEXT", "tokenCount": 12}, {"modality": "IMAGE", "tokenCount": 1290}])
    );
    // What the gateway writes, it reads back the same.
    let resp = Response {
        usage: image_out,
        ..Default::default()
    };
    let body = render_response(&resp, &response_ctx());
    assert_eq!(parse_response(&body).unwrap().usage, image_out);
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
fn a_translated_stream_shows_its_cost_in_the_final_usage_metadata() {
    let u = audio_in();
    let out = encode(&charged(true), Some(u));
    let last = chunks(&out).pop().unwrap();
    assert_eq!(last["usageMetadata"]["cost_usd"], cost_of(&u));
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    let cost = format!(r#","cost_usd":{}"#, cost_of(&u));
    assert_eq!(out.replace(&cost, ""), encode(&stream_ctx(true), Some(u)));
    // The JSON-array framing carries it the same way.
    let array = encode(&charged(false), Some(u));
    let v: Value = serde_json::from_str(&array).unwrap();
    assert_eq!(v[1]["usageMetadata"]["cost_usd"], cost_of(&u));
    assert_eq!(
        array.replace(&cost, ""),
        encode(&stream_ctx(false), Some(u))
    );
    // No usage reported, no usage and no cost.
    assert_eq!(
        encode(&charged(true), None),
        encode(&stream_ctx(true), None)
    );
}

#[test]
fn a_passed_through_stream_shows_the_cost_of_each_usage_it_carries() {
    let input = stream(AUDIO_IN);
    let (out, _) = relay(charged(true), &[input.as_bytes()]);
    let (plain, _) = relay(stream_ctx(true), &[input.as_bytes()]);
    let (got, want) = (chunks(&out), chunks(&plain));
    assert_eq!(got.len(), 3);
    let first = Usage {
        input_tokens: 1250,
        ..Usage::default()
    };
    assert_eq!(got[0]["usageMetadata"]["cost_usd"], cost_of(&first));
    assert_eq!(got[1], want[1], "a chunk without usage is unchanged");
    // The final usage, the stream's cost; the upstream's members as they came.
    let mut m = want[2]["usageMetadata"].clone();
    m["cost_usd"] = cost_of(&audio_in());
    assert_eq!(got[2]["usageMetadata"], m);
    assert!(!plain.contains("cost_usd"));
    for pieces in splits(input.as_bytes()) {
        assert_eq!(relay(charged(true), &pieces).0, out);
    }
}
