//! Same protocol on both sides: bodies untouched but for the model, usage captured.

use super::super::super::{TranslateError, Usage};
use super::super::{passthrough_request, passthrough_response, passthrough_stream};
use super::{opts, splits, stream_ctx};
use serde_json::{json, Value};

#[test]
fn request_keeps_every_field_and_names_the_model_in_the_path() {
    // The spec's speech request, plus a field this gateway has never heard of.
    let body = json!({
        "contents": [{"parts": [{"text": "Say cheerfully: Have a wonderful day!"}]}],
        "generationConfig": {
            "responseModalities": ["AUDIO"],
            "speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}}
        },
        "tools": [{"googleSearch": {}}],
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "cachedContent": "cachedContents/abc",
        "aFutureField": {"nested": [1, 2, 3]}
    });
    let out = passthrough_request(body.clone(), &opts("gemini-2.5-flash-preview-tts", false));
    assert_eq!(serde_json::from_slice::<Value>(&out.body).unwrap(), body);
    assert_eq!(
        out.path,
        "/v1beta/models/gemini-2.5-flash-preview-tts:generateContent"
    );
    assert!(!out.client_wants_usage);
    let out = passthrough_request(body, &opts("gemini-2.5-pro", true));
    assert_eq!(
        out.path,
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
}

#[test]
fn request_with_both_spellings_of_the_config_becomes_one_object() {
    let body = json!({
        "contents": [{"parts": [{"text": "hi"}]}],
        "generation_config": {"temperature": 0.3, "max_output_tokens": 9000},
        "generationConfig": {"maxOutputTokens": 500}
    });
    let out = passthrough_request(body, &opts("m", false));
    let v: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(
        v,
        json!({
            "contents": [{"parts": [{"text": "hi"}]}],
            "generationConfig": {"maxOutputTokens": 500, "temperature": 0.3}
        })
    );
}

const ANSWER: &str = r#"{"candidates": [{"content": {"parts": [{"text": "Hello!"}], "role": "model"}, "finishReason": "STOP", "index": 0, "safetyRatings": []}], "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 30, "cachedContentTokenCount": 4, "thoughtsTokenCount": 18, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 10}]}, "modelVersion": "gemini-2.5-flash", "responseId": "abc", "somethingNew": true}"#;

#[test]
fn response_shows_the_clients_model_and_reports_usage() {
    let (out, usage) = passthrough_response(ANSWER.as_bytes(), "my-gemini").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let mut expected: Value = serde_json::from_str(ANSWER).unwrap();
    expected["modelVersion"] = json!("my-gemini");
    assert_eq!(v, expected);
    assert_eq!(
        usage,
        Usage {
            input_tokens: 10,
            output_tokens: 20,
            cached_input_tokens: 4,
            cache_creation_input_tokens: 0,
            reasoning_tokens: 18,
            ..Usage::default()
        }
    );
    assert!(matches!(
        passthrough_response(b"oops", "m"),
        Err(TranslateError::NotJson(_))
    ));
    assert!(matches!(
        passthrough_response(br#"{"name": "operations/1"}"#, "m"),
        Err(TranslateError::Shape(_))
    ));
}

/// An audio answer streamed by a speech model: parts this gateway does not model pass.
const STREAM: &str = concat!(
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"inlineData\": {\"mimeType\": \"audio/L16;codec=pcm;rate=24000\",\"data\": \"AAECAwQF\"}}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9},\"modelVersion\": \"gemini-2.5-flash-preview-tts\",\"responseId\": \"r1\"}\r\n\r\n",
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"caf\u{e9}\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"candidatesTokenCount\": 300,\"totalTokenCount\": 309},\"modelVersion\": \"gemini-2.5-flash-preview-tts\",\"responseId\": \"r1\"}\r\n\r\n",
);

fn run(pieces: &[&[u8]], sse: bool, error: Option<&str>) -> (String, Usage) {
    let mut t = passthrough_stream(stream_ctx(sse));
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(error, &mut out);
    (String::from_utf8(out).unwrap(), t.usage())
}

fn sse_values(out: &str) -> Vec<Value> {
    out.split("\r\n\r\n")
        .filter(|s| !s.is_empty())
        .map(|s| serde_json::from_str(s.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

fn upstream_values() -> Vec<Value> {
    sse_values(STREAM)
        .into_iter()
        .map(|mut v| {
            v["modelVersion"] = json!("my-gemini");
            v
        })
        .collect()
}

#[test]
fn stream_forwards_chunks_in_either_framing_for_any_split() {
    for sse in [true, false] {
        let (whole, usage) = run(&[STREAM.as_bytes()], sse, None);
        assert_eq!(usage.output_tokens, 300);
        assert_eq!(usage.input_tokens, 9);
        for split in splits(STREAM.as_bytes()) {
            assert_eq!(run(&split, sse, None), (whole.clone(), usage));
        }
        let values = if sse {
            sse_values(&whole)
        } else {
            serde_json::from_str::<Vec<Value>>(&whole).unwrap()
        };
        assert_eq!(values, upstream_values());
        assert!(!whole.contains("preview-tts"));
    }
}

#[test]
fn stream_without_a_finish_ends_with_the_error_chunk() {
    let cut = &STREAM.as_bytes()[..STREAM.rfind("data: ").unwrap()];
    let (out, usage) = run(&[cut], true, None);
    let values = sse_values(&out);
    assert_eq!(values.len(), 2);
    assert_eq!(
        values[1],
        json!({"error": {"code": 500, "status": "INTERNAL", "message":
            "The upstream provider ended the stream before it was complete. (request id: req123)"}})
    );
    assert_eq!(usage.input_tokens, 9);
    // The relay's own message when it gives one; array framing stays valid JSON.
    let (out, _) = run(
        &[cut],
        false,
        Some("Upstream timed out. (request id: req123)"),
    );
    let v: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v[1]["error"]["message"],
        "Upstream timed out. (request id: req123)"
    );
    let (out, _) = run(&[], false, None);
    let v: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert!(v[0]["error"].is_object());
    // A clean end is not turned into an error by a late transport failure.
    let (out, _) = run(&[STREAM.as_bytes()], true, Some("late"));
    assert!(!out.contains("error"));
}

#[test]
fn upstream_errors_are_sanitized_and_oversized_events_end_the_stream() {
    let first = &STREAM[..STREAM.find("\r\n\r\n").unwrap() + 4];
    let failing = format!(
        "{first}data: {{\"error\": {{\"code\": 500, \"message\": \"backend 10.1.2.3 crashed\", \"status\": \"INTERNAL\"}}}}\r\n\r\n"
    );
    for sse in [true, false] {
        let (out, _) = run(&[failing.as_bytes()], sse, None);
        assert!(!out.contains("10.1.2.3"));
        assert!(out.contains("reported an error mid-stream. (request id: req123)"));
        if !sse {
            let v: Vec<Value> = serde_json::from_str(&out).unwrap();
            assert_eq!(v.len(), 2);
        }
    }
    let mut t = passthrough_stream(stream_ctx(false));
    let mut out = Vec::new();
    t.feed(first.as_bytes(), &mut out);
    t.feed(
        &vec![b'x'; super::super::super::sse::MAX_EVENT_BYTES + 1],
        &mut out,
    );
    t.feed(STREAM.as_bytes(), &mut out);
    t.finish(None, &mut out);
    let v: Vec<Value> = serde_json::from_slice(&out).unwrap();
    assert_eq!(v.len(), 2);
    assert!(v[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("oversized"));
}

/// Data that is not JSON (half a chunk) ends the stream in either framing: forwarded,
/// it would show the client a hole in the answer (or corrupt the JSON array).
#[test]
fn what_is_not_json_ends_the_stream_in_either_framing() {
    let body = format!(
        "{}data: {{\"candidates\":[{{\"cont\n\n{STREAM}",
        &STREAM[..0]
    );
    for sse in [true, false] {
        let (out, _) = run(&[body.as_bytes()], sse, None);
        assert!(
            out.contains("could not be read. (request id: req123)"),
            "{out}"
        );
        assert!(!out.contains("finishReason"), "{out}");
        if !sse {
            let v: Vec<Value> = serde_json::from_str(&out).unwrap();
            assert!(v.last().unwrap()["error"].is_object(), "{out}");
        }
    }
}
