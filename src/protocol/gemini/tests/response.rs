//! Whole answers: pivot → client response, upstream response → pivot.

use super::super::super::ir::{self, FinishReason, Part, ToolCall};
use super::super::super::{TranslateError, Usage};
use super::super::{parse_response, render_response};
use super::response_ctx;
use serde_json::{json, Value};

fn render(resp: &ir::Response) -> Value {
    serde_json::from_slice(&render_response(resp, &response_ctx())).unwrap()
}

#[test]
fn renders_text_thinking_parallel_calls_and_usage() {
    let resp = ir::Response {
        content: vec![
            Part::Thinking {
                text: "Need both cities.".into(),
                signature: Some("EqQBCkgIARABGAIiQL+/==".into()),
            },
            Part::RedactedThinking("EmwKAhgBEgy".into()),
            Part::Text("Checking.".into()),
            Part::ToolCall(ToolCall {
                id: "toolu_01A".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
                signature: Some("c2ln".into()),
            }),
            Part::ToolCall(ToolCall {
                id: "toolu_01B".into(),
                name: "get_weather".into(),
                arguments: "not json".into(),
                signature: None,
            }),
        ],
        finish: Some(FinishReason::ToolCalls),
        usage: Usage {
            input_tokens: 120,
            output_tokens: 50,
            cached_input_tokens: 100,
            cache_creation_input_tokens: 10,
            reasoning_tokens: 30,
            ..Usage::default()
        },
    };
    assert_eq!(
        render(&resp),
        json!({
            "candidates": [{
                "content": {"role": "model", "parts": [
                    {"text": "Need both cities.", "thought": true, "thoughtSignature": "EqQBCkgIARABGAIiQL+/=="},
                    {"text": "Checking."},
                    {"functionCall": {"id": "toolu_01A", "name": "get_weather", "args": {"city": "Paris"}},
                     "thoughtSignature": "c2ln"},
                    {"functionCall": {"id": "toolu_01B", "name": "get_weather", "args": {}}}
                ]},
                "finishReason": "STOP",
                "index": 0
            }],
            "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 20, "totalTokenCount": 170,
                "cachedContentTokenCount": 100, "thoughtsTokenCount": 30},
            "modelVersion": "my-gemini",
            "responseId": "req123"
        })
    );
}

#[test]
fn renders_finish_reasons_and_empty_answers() {
    let with = |finish: Option<FinishReason>| {
        render(&ir::Response {
            content: vec![],
            finish,
            usage: Usage::default(),
        })
    };
    for (f, wire) in [
        (Some(FinishReason::Stop), "STOP"),
        (Some(FinishReason::StopSequence(Some("END".into()))), "STOP"),
        (Some(FinishReason::Length), "MAX_TOKENS"),
        (Some(FinishReason::ContentFilter), "SAFETY"),
        (Some(FinishReason::Other("pause_turn".into())), "OTHER"),
        (None, "STOP"),
    ] {
        let v = with(f);
        assert_eq!(v["candidates"][0]["finishReason"], wire);
        assert_eq!(v["candidates"][0]["content"], json!({"role": "model"}));
        assert_eq!(
            v["usageMetadata"],
            json!({"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0})
        );
    }
}

/// A real answer of a thinking model with parallel calls (ids are not sent by the
/// public API; the signature rides on the first call).
const UPSTREAM: &str = r#"{
  "candidates": [{
    "content": {"parts": [
      {"text": "**Planning**\nTwo lookups.", "thought": true},
      {"text": "", "thought": true, "thoughtSignature": "Q2lrQjB+/w=="},
      {"text": "Let me check "},
      {"text": "both."},
      {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "CiQB0e2K+b/8="},
      {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}},
      {"functionCall": {"id": "fc_given", "name": "get_time"}}
    ], "role": "model"},
    "finishReason": "STOP",
    "index": 0,
    "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}]
  }],
  "usageMetadata": {"promptTokenCount": 245, "candidatesTokenCount": 38, "totalTokenCount": 365,
    "cachedContentTokenCount": 200, "thoughtsTokenCount": 82,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 245}]},
  "modelVersion": "gemini-2.5-flash",
  "responseId": "mWzMaOfHBZ2kz7IP6dnO0Ac"
}"#;

#[test]
fn parses_thoughts_text_calls_and_usage() {
    let resp = parse_response(UPSTREAM.as_bytes()).unwrap();
    assert_eq!(resp.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 245,
            output_tokens: 120,
            cached_input_tokens: 200,
            cache_creation_input_tokens: 0,
            reasoning_tokens: 82,
            ..Usage::default()
        }
    );
    assert_eq!(resp.content.len(), 5);
    assert_eq!(
        resp.content[0],
        Part::Thinking {
            text: "**Planning**\nTwo lookups.".into(),
            // URL-safe, unpadded: the same bytes, fit for a tool call id.
            signature: Some("Q2lrQjB-_w".into()),
        }
    );
    assert_eq!(resp.content[1], Part::Text("Let me check both.".into()));
    let calls: Vec<&ToolCall> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
    assert_eq!(calls[0].signature.as_deref(), Some("CiQB0e2K-b_8"));
    assert_eq!(calls[1].signature, None);
    assert_eq!(calls[2].id, "fc_given");
    assert_eq!(calls[2].arguments, "{}");
    let id_pattern = |id: &str| {
        !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    assert!(calls.iter().all(|c| id_pattern(&c.id)));
    assert_ne!(calls[0].id, calls[1].id);
    // Deterministic: the same answer gives the same ids.
    assert_eq!(parse_response(UPSTREAM.as_bytes()).unwrap(), resp);
    // A joined id stays within the id alphabet.
    assert!(id_pattern(&ir::join_call_id(
        &calls[0].id,
        calls[0].signature.as_deref()
    )));
}

#[test]
fn parses_finish_reasons_and_blocked_prompts() {
    let with_finish = |reason: &str| {
        let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}], "role": "model"},
            "finishReason": reason, "index": 0}]});
        parse_response(body.to_string().as_bytes()).unwrap().finish
    };
    assert_eq!(with_finish("STOP"), Some(FinishReason::Stop));
    assert_eq!(with_finish("MAX_TOKENS"), Some(FinishReason::Length));
    for r in [
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
    ] {
        assert_eq!(with_finish(r), Some(FinishReason::ContentFilter), "{r}");
    }
    assert_eq!(
        with_finish("MALFORMED_FUNCTION_CALL"),
        Some(FinishReason::Other("MALFORMED_FUNCTION_CALL".into()))
    );
    let blocked = parse_response(
        br#"{"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}}"#,
    )
    .unwrap();
    assert_eq!(blocked.content, vec![]);
    assert_eq!(blocked.finish, Some(FinishReason::ContentFilter));
    assert_eq!(blocked.usage.input_tokens, 9);
    // A MAX_TOKENS answer with no parts at all.
    let empty = parse_response(
        br#"{"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS", "index": 0}]}"#,
    )
    .unwrap();
    assert_eq!(empty.content, vec![]);
    assert_eq!(empty.finish, Some(FinishReason::Length));
}

#[test]
fn rejects_what_is_not_an_answer() {
    assert!(matches!(
        parse_response(b"<html>"),
        Err(TranslateError::NotJson(_))
    ));
    assert!(matches!(
        parse_response(b"[1]"),
        Err(TranslateError::Shape(_))
    ));
    assert!(matches!(
        parse_response(br#"{"error": {"code": 429, "message": "quota"}}"#),
        Err(TranslateError::Shape(_))
    ));
}

#[test]
fn an_answer_survives_parse_then_render() {
    let resp = parse_response(UPSTREAM.as_bytes()).unwrap();
    let v = render(&resp);
    let parts = v["candidates"][0]["content"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 5);
    assert_eq!(parts[2]["functionCall"]["args"], json!({"city": "Paris"}));
    assert_eq!(parts[2]["thoughtSignature"], "CiQB0e2K-b_8");
    assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 38);
    assert_eq!(v["usageMetadata"]["thoughtsTokenCount"], 82);
    assert_eq!(v["usageMetadata"]["promptTokenCount"], 245);
    assert_eq!(v["modelVersion"], "my-gemini");
    assert!(!v.to_string().contains("gemini-2.5-flash"));
}

#[test]
fn signatures_the_sdk_could_not_decode_are_left_out() {
    let resp = ir::Response {
        content: vec![
            Part::Thinking {
                text: "t".into(),
                signature: Some("not base64!".into()),
            },
            Part::ToolCall(ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: "{}".into(),
                signature: Some("abcde".into()),
            }),
            Part::ToolCall(ToolCall {
                id: "d".into(),
                name: "f".into(),
                arguments: "{}".into(),
                signature: Some("Q2lr-_8".into()),
            }),
        ],
        finish: Some(FinishReason::ToolCalls),
        usage: Usage::default(),
    };
    let v = render(&resp);
    let parts = &v["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0], json!({"text": "t", "thought": true}));
    assert_eq!(parts[1].get("thoughtSignature"), None);
    assert_eq!(parts[2]["thoughtSignature"], "Q2lr-_8");
}
