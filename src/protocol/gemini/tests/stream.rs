//! Streams: upstream SSE → events, events → client chunks, and both joined.

use super::super::super::ir::{Event, FinishReason, StreamBroken};
use super::super::super::translate::Translated;
use super::super::super::{sse, StreamTranslator, Usage};
use super::super::{decoder, encoder, error_event};
use super::{splits, stream_ctx};
use serde_json::{json, Value};

/// A thinking model's stream with two parallel calls, as the API sends it with
/// `alt=sse` (CRLF framing, usage on every chunk, calls whole in the last one).
const UPSTREAM: &str = concat!(
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Planning the answer.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 57,\"totalTokenCount\": 57},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"mWzMaOfH\"}\r\n\r\n",
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" Done.\",\"thought\": true,\"thoughtSignature\": \"Q2lr+/8=\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 57,\"totalTokenCount\": 57},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"mWzMaOfH\"}\r\n\r\n",
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Bonjour \"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 57,\"totalTokenCount\": 57},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"mWzMaOfH\"}\r\n\r\n",
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"tout le monde \u{1F30D}\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 57,\"totalTokenCount\": 57},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"mWzMaOfH\"}\r\n\r\n",
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"get_weather\",\"args\": {\"city\": \"Paris\"}},\"thoughtSignature\": \"CiQB0e2K\"},{\"functionCall\": {\"name\": \"get_weather\",\"args\": {\"city\": \"Tokyo\"}}}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 57,\"candidatesTokenCount\": 40,\"totalTokenCount\": 171,\"cachedContentTokenCount\": 32,\"thoughtsTokenCount\": 74},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"mWzMaOfH\"}\r\n\r\n",
);

fn decode(pieces: &[&[u8]]) -> (Vec<Event>, bool) {
    let mut d = decoder();
    let mut events = Vec::new();
    for p in pieces {
        d.feed(p, &mut events).unwrap();
    }
    d.flush(&mut events).unwrap();
    (events, d.complete())
}

fn first_usage() -> Usage {
    Usage {
        input_tokens: 57,
        ..Usage::default()
    }
}

#[test]
fn decoder_gives_the_same_events_for_any_split() {
    let (events, complete) = decode(&[UPSTREAM.as_bytes()]);
    assert!(complete);
    let (id0, id1) = match (&events[6], &events[8]) {
        (Event::ToolCallStart { id: a, .. }, Event::ToolCallStart { id: b, .. }) => {
            (a.clone(), b.clone())
        }
        other => panic!("{other:?}"),
    };
    assert_ne!(id0, id1);
    assert!(id0.starts_with("call_") && id0.ends_with("_0"), "{id0}");
    assert_eq!(
        events,
        vec![
            Event::Thinking("Planning the answer.".into()),
            Event::Usage(first_usage()),
            Event::Thinking(" Done.".into()),
            Event::ThinkingSignature("Q2lr-_8".into()),
            Event::Text("Bonjour ".into()),
            Event::Text("tout le monde \u{1F30D}".into()),
            Event::ToolCallStart {
                index: 0,
                id: id0,
                name: "get_weather".into(),
                signature: Some("CiQB0e2K".into()),
            },
            Event::ToolCallArgs {
                index: 0,
                fragment: r#"{"city":"Paris"}"#.into(),
            },
            Event::ToolCallStart {
                index: 1,
                id: id1,
                name: "get_weather".into(),
                signature: None,
            },
            Event::ToolCallArgs {
                index: 1,
                fragment: r#"{"city":"Tokyo"}"#.into(),
            },
            Event::Usage(Usage {
                input_tokens: 57,
                output_tokens: 114,
                cached_input_tokens: 32,
                cache_creation_input_tokens: 0,
                reasoning_tokens: 74,
                ..Usage::default()
            }),
            Event::Finish(FinishReason::ToolCalls),
        ]
    );
    for split in splits(UPSTREAM.as_bytes()) {
        assert_eq!(decode(&split), (events.clone(), true));
    }
}

#[test]
fn decoder_sees_a_cut_stream_and_an_unterminated_last_chunk() {
    let last = UPSTREAM.rfind("data: ").unwrap();
    let (events, complete) = decode(&[&UPSTREAM.as_bytes()[..last]]);
    assert!(!complete);
    assert!(!events.iter().any(|e| matches!(e, Event::Finish(_))));
    // The final chunk without its blank line still counts once the body ends.
    let trimmed = UPSTREAM.trim_end();
    let (_, complete) = decode(&[trimmed.as_bytes()]);
    assert!(complete);
}

#[test]
fn decoder_reports_an_error_chunk_and_an_oversized_event() {
    let first = &UPSTREAM[..UPSTREAM.find("\r\n\r\n").unwrap() + 4];
    let body = format!(
        "{first}data: {{\"error\": {{\"code\": 503, \"message\": \"The model is overloaded.\", \"status\": \"UNAVAILABLE\"}}}}\r\n\r\n"
    );
    let (events, complete) = decode(&[body.as_bytes()]);
    assert_eq!(events.last(), Some(&Event::Error));
    assert!(!complete);
    let mut d = decoder();
    let mut events = Vec::new();
    let big = vec![b'x'; sse::MAX_EVENT_BYTES + 1];
    assert_eq!(
        d.feed(&big, &mut events),
        Err(StreamBroken(sse::Fault::TooLarge))
    );
}

fn encode(events: &[Event], sse: bool, error: Option<&str>) -> String {
    let mut e = encoder(&stream_ctx(sse));
    let mut out = Vec::new();
    for ev in events {
        e.event(ev, &mut out);
    }
    e.finish(error, &mut out);
    String::from_utf8(out).unwrap()
}

fn sse_chunks(out: &str) -> Vec<Value> {
    out.split("\r\n\r\n")
        .filter(|s| !s.is_empty())
        .map(|s| serde_json::from_str(s.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

/// Two calls whose arguments arrive in pieces, interleaved, as a chat upstream may send.
fn client_events() -> Vec<Event> {
    vec![
        Event::Usage(first_usage()),
        Event::Thinking("Let me think.".into()),
        Event::ThinkingSignature("EqQBsig==".into()),
        Event::Text("Checking ".into()),
        Event::Text("both.".into()),
        Event::ToolCallStart {
            index: 0,
            id: "toolu_A".into(),
            name: "get_weather".into(),
            signature: None,
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "{\"ci".into(),
        },
        Event::ToolCallStart {
            index: 1,
            id: "toolu_B".into(),
            name: "get_time".into(),
            signature: Some("c2ln".into()),
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "ty\":\"Paris\"}".into(),
        },
        Event::ToolCallArgs {
            index: 1,
            fragment: "{\"tz\":\"CET\"}".into(),
        },
        Event::Usage(Usage {
            input_tokens: 80,
            output_tokens: 30,
            cached_input_tokens: 64,
            cache_creation_input_tokens: 0,
            reasoning_tokens: 12,
            ..Usage::default()
        }),
        Event::Finish(FinishReason::ToolCalls),
    ]
}

fn chunk(parts: Value) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
        "modelVersion": "my-gemini", "responseId": "req123"})
}

fn expected_chunks() -> Vec<Value> {
    vec![
        chunk(json!([{"text": "Let me think.", "thought": true}])),
        chunk(json!([{"text": "", "thought": true, "thoughtSignature": "EqQBsig=="}])),
        chunk(json!([{"text": "Checking "}])),
        chunk(json!([{"text": "both."}])),
        json!({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"id": "toolu_A", "name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"id": "toolu_B", "name": "get_time", "args": {"tz": "CET"}}, "thoughtSignature": "c2ln"}
            ]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 80, "candidatesTokenCount": 18, "totalTokenCount": 110,
                "cachedContentTokenCount": 64, "thoughtsTokenCount": 12},
            "modelVersion": "my-gemini", "responseId": "req123"}),
    ]
}

#[test]
fn encoder_sse_holds_calls_until_complete_and_ends_with_finish_and_usage() {
    let out = encode(&client_events(), true, None);
    assert_eq!(sse_chunks(&out), expected_chunks());
    assert!(out.ends_with("\r\n\r\n"));
    // Byte-exact framing of the first chunk.
    assert!(out.starts_with(
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Let me think.\",\"thought\":true}]},\"index\":0}],\"modelVersion\":\"my-gemini\",\"responseId\":\"req123\"}\r\n\r\n"
    ));
}

#[test]
fn encoder_array_mode_is_one_json_array() {
    let out = encode(&client_events(), false, None);
    assert!(out.starts_with("[{") && out.ends_with("}]"), "{out}");
    assert!(out.contains("},\r\n{"));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v, Value::Array(expected_chunks()));
    // Nothing but the end: still one valid array, and `text` stays a string.
    let v: Value =
        serde_json::from_str(&encode(&[Event::Finish(FinishReason::Stop)], false, None)).unwrap();
    assert_eq!(
        v,
        json!([{"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
            "finishReason": "STOP", "index": 0}], "modelVersion": "my-gemini", "responseId": "req123"}])
    );
}

#[test]
fn encoder_text_after_calls_flushes_them_first() {
    let events = vec![
        Event::ToolCallStart {
            index: 0,
            id: "c0".into(),
            name: "f".into(),
            signature: None,
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "{}".into(),
        },
        Event::Text("after".into()),
        Event::Finish(FinishReason::Length),
    ];
    let chunks = sse_chunks(&encode(&events, true, None));
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"],
        json!([{"functionCall": {"id": "c0", "name": "f", "args": {}}}])
    );
    assert_eq!(
        chunks[1]["candidates"][0]["content"]["parts"],
        json!([{"text": "after"}])
    );
    assert_eq!(chunks[2]["candidates"][0]["finishReason"], "MAX_TOKENS");
    assert_eq!(chunks.len(), 3);
}

#[test]
fn encoder_errors_end_the_stream_in_both_framings() {
    let msg = "The upstream provider reported an error mid-stream. (request id: req123)";
    let events = [Event::Text("partial".into())];
    let out = encode(&events, true, Some(msg));
    let chunks = sse_chunks(&out);
    assert_eq!(chunks.len(), 2);
    assert_eq!(
        chunks[1],
        json!({"error": {"code": 500, "message": msg, "status": "INTERNAL"}})
    );
    // The SDK raises a chunk whose JSON starts with `{"error":`.
    assert!(out.ends_with(&String::from_utf8(error_event(msg)).unwrap()));
    let v: Value = serde_json::from_str(&encode(&events, false, Some(msg))).unwrap();
    assert_eq!(v[1]["error"]["message"], msg);
    assert_eq!(v.as_array().unwrap().len(), 2);
    // An array that broke before its first chunk is still valid JSON.
    let v: Value = serde_json::from_str(&encode(&[], false, Some(msg))).unwrap();
    assert_eq!(
        v,
        json!([{"error": {"code": 500, "message": msg, "status": "INTERNAL"}}])
    );
    // A call cut short is not shown.
    let cut = [Event::ToolCallStart {
        index: 0,
        id: "c".into(),
        name: "f".into(),
        signature: None,
    }];
    assert!(!encode(&cut, true, Some(msg)).contains("functionCall"));
}

fn translate(pieces: &[&[u8]], sse: bool, error: Option<&str>) -> (String, Usage) {
    let ctx = stream_ctx(sse);
    let mut t = Translated::new(decoder(), encoder(&ctx), ctx.request_id.clone());
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(error, &mut out);
    (String::from_utf8(out).unwrap(), t.usage())
}

#[test]
fn decoder_and_encoder_joined_give_identical_output_for_any_split() {
    for sse in [true, false] {
        let (whole, usage) = translate(&[UPSTREAM.as_bytes()], sse, None);
        assert_eq!(usage.output_tokens, 114);
        assert_eq!(usage.cached_input_tokens, 32);
        assert!(!whole.contains("gemini-2.5-flash"));
        for split in splits(UPSTREAM.as_bytes()) {
            assert_eq!(translate(&split, sse, None).0, whole);
        }
        let chunks = if sse {
            sse_chunks(&whole)
        } else {
            serde_json::from_str::<Vec<Value>>(&whole).unwrap()
        };
        let last = chunks.last().unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(
            last["candidates"][0]["content"]["parts"][0]["functionCall"]["args"],
            json!({"city": "Paris"})
        );
        assert_eq!(last["usageMetadata"]["thoughtsTokenCount"], 74);
        assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 40);
    }
}

#[test]
fn a_cut_or_failing_upstream_ends_the_client_stream_with_an_error() {
    let cut = &UPSTREAM.as_bytes()[..UPSTREAM.rfind("data: ").unwrap()];
    let (out, usage) = translate(&[cut], true, None);
    let chunks = sse_chunks(&out);
    let message = chunks.last().unwrap()["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("ended the stream before it was complete"),
        "{message}"
    );
    assert!(message.contains("req123"));
    assert_eq!(usage.input_tokens, 57);
    let (out, _) = translate(&[cut], false, None);
    let v: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert!(v.last().unwrap()["error"].is_object());
    let failing = format!(
        "{}data: {{\"error\": {{\"code\": 500, \"message\": \"internal host 10.0.0.3\", \"status\": \"INTERNAL\"}}}}\r\n\r\n",
        String::from_utf8_lossy(cut)
    );
    let (out, _) = translate(&[failing.as_bytes()], true, None);
    assert!(!out.contains("10.0.0.3"));
    assert!(out.contains("reported an error mid-stream"));
}

#[test]
fn decoder_handles_blocked_prompts_and_ignores_noise() {
    let body = concat!(
        ": keep-alive\r\n\r\n",
        "event: nothing\r\n\r\n",
        "data: {\"promptFeedback\": {\"blockReason\": \"PROHIBITED_CONTENT\"},\"usageMetadata\": {\"promptTokenCount\": 7,\"totalTokenCount\": 7},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"x\"}\r\n\r\n",
    );
    let (events, complete) = decode(&[body.as_bytes()]);
    assert!(complete);
    assert_eq!(
        events,
        vec![
            Event::Usage(Usage {
                input_tokens: 7,
                ..Usage::default()
            }),
            Event::Finish(FinishReason::ContentFilter),
        ]
    );
}

#[test]
fn encoder_drops_undecodable_signatures_and_redacted_thinking() {
    let events = [
        Event::RedactedThinking("opaque".into()),
        Event::Thinking("hmm".into()),
        Event::ThinkingSignature("sig with spaces".into()),
        Event::Finish(FinishReason::Stop),
    ];
    let chunks = sse_chunks(&encode(&events, true, None));
    assert_eq!(chunks.len(), 2);
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"],
        json!([{"text": "hmm", "thought": true}])
    );
}
