use super::super::test_support::{accumulate, parse_sse, splits};
use super::*;
use serde_json::json;

fn ctx() -> StreamContext {
    StreamContext {
        client_model: "claude-latest".into(),
        request_id: "rid9".into(),
        created: 0,
        client_wants_usage: false,
        client_sse: true,
        charge: None,
    }
}

#[test]
fn the_request_keeps_every_field_but_the_model() {
    let body = json!({
        "model": "claude-latest",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0"},
             "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ]}],
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "stream": true
    });
    let opts = RequestOptions {
        upstream_model: "claude-sonnet-4-5-20250929",
        stream: true,
        default_max_tokens: 100,
        chat_limit_field: "max_completion_tokens",
        compact: false,
    };
    let r = request(body.clone(), &opts);
    assert_eq!(r.path, "/v1/messages");
    assert!(!r.client_wants_usage);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let mut expected = body;
    expected["model"] = json!("claude-sonnet-4-5-20250929");
    assert_eq!(v, expected);
}

#[test]
fn the_response_shows_the_client_model_and_reports_usage() {
    let body = br#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",
        "content":[{"type":"text","text":"Hi","citations":null}],"stop_reason":"end_turn","stop_sequence":null,
        "usage":{"input_tokens":8,"cache_creation_input_tokens":4,"cache_read_input_tokens":16,"output_tokens":2,
                 "server_tool_use":{"web_search_requests":1},"service_tier":"standard"},"container":null}"#;
    let (out, usage) = response(body, "claude-latest").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["model"], "claude-latest");
    assert_eq!(v["usage"]["server_tool_use"]["web_search_requests"], 1);
    assert!(v.as_object().unwrap().contains_key("container"));
    assert_eq!(
        usage,
        Usage {
            input_tokens: 28,
            output_tokens: 2,
            cached_input_tokens: 16,
            cache_creation_input_tokens: 4,
            reasoning_tokens: 0,
            web_search_requests: 1,
            ..Usage::default()
        }
    );
    let err = br#"{"type":"error","error":{"type":"invalid_request_error","message":"x"}}"#;
    assert!(response(err, "m").is_err());
    assert!(matches!(
        response(b"nope", "m"),
        Err(TranslateError::NotJson(_))
    ));
}

const STREAM: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":8,\"cache_creation_input_tokens\":4,\"cache_read_input_tokens\":16,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: ping\n",
    "data: {\"type\": \"ping\"}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Bonjour — ça va ?\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":12}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

fn run(pieces: &[&[u8]], error: Option<&str>) -> (Vec<u8>, Usage) {
    let mut s = Stream::new(ctx());
    let mut out = Vec::new();
    for p in pieces {
        s.feed(p, &mut out);
    }
    s.finish(error, &mut out);
    (out, s.usage())
}

#[test]
fn events_pass_through_with_the_client_model_in_any_split() {
    let (whole, usage) = run(&[STREAM.as_bytes()], None);
    for pieces in splits(STREAM.as_bytes()) {
        assert_eq!(run(&pieces, None).0, whole);
    }
    let text = String::from_utf8(whole.clone()).unwrap();
    assert!(!text.contains("claude-sonnet-4-5-20250929"));
    // Everything but message_start is byte for byte what the upstream sent.
    let rest = &STREAM[STREAM.find("event: content_block_start").unwrap()..];
    assert!(text.ends_with(rest), "{text}");
    let m = accumulate(&parse_sse(&whole), false).unwrap();
    assert_eq!(m["model"], "claude-latest");
    assert_eq!(m["content"][0]["text"], "Bonjour — ça va ?");
    assert_eq!(
        usage,
        Usage {
            input_tokens: 28,
            output_tokens: 12,
            cached_input_tokens: 16,
            cache_creation_input_tokens: 4,
            reasoning_tokens: 0,
            ..Usage::default()
        }
    );
}

#[test]
fn a_stream_without_message_stop_ends_with_an_error_event() {
    let cut = &STREAM[..STREAM.find("event: message_delta").unwrap()];
    for pieces in splits(cut.as_bytes()) {
        let (out, usage) = run(&pieces, None);
        let err = accumulate(&parse_sse(&out), false).unwrap_err();
        assert_eq!(
            err,
            "The upstream provider ended the stream before it was complete. (request id: rid9)"
        );
        assert_eq!(usage.input_tokens, 28);
    }
    let (out, _) = run(
        &[cut.as_bytes()],
        Some("Upstream timed out. (request id: rid9)"),
    );
    assert_eq!(
        accumulate(&parse_sse(&out), false).unwrap_err(),
        "Upstream timed out. (request id: rid9)"
    );
    // A complete stream gets nothing more, whatever finish is told.
    let (out, _) = run(&[STREAM.as_bytes()], Some("too late to matter"));
    assert!(!String::from_utf8(out).unwrap().contains("too late"));
}

#[test]
fn an_upstream_error_event_is_forwarded_sanitized_and_ends_the_stream() {
    let cut = &STREAM[..STREAM.find("event: content_block_stop").unwrap()];
    let input = format!(
        "{cut}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded at host-17.internal\"}}}}\n\n"
    );
    let (out, _) = run(&[input.as_bytes()], None);
    let evs = parse_sse(&out);
    let (name, last) = evs.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(last["error"]["type"], "overloaded_error");
    assert_eq!(
        last["error"]["message"],
        "The upstream provider reported an error mid-stream. (request id: rid9)"
    );
    assert_eq!(evs.iter().filter(|(n, _)| n == "error").count(), 1);
    assert!(!String::from_utf8(out).unwrap().contains("host-17"));
}

#[test]
fn unnamed_events_get_their_names_and_oversized_ones_end_the_stream() {
    let input = "data: {\"type\":\"message_start\",\"message\":{\"model\":\"up\",\"usage\":{\"input_tokens\":3}}}\n\ndata: {\"type\":\"message_stop\"}\n\n";
    let (out, usage) = run(&[input.as_bytes()], None);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-latest\",\"usage\":{\"input_tokens\":3}}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    );
    assert_eq!(usage.input_tokens, 3);

    let mut s = Stream::new(ctx());
    let mut out = Vec::new();
    s.feed(b"event: content_block_delta\ndata: ", &mut out);
    s.feed(
        &vec![b'x'; crate::protocol::sse::MAX_EVENT_BYTES + 1],
        &mut out,
    );
    s.finish(None, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("event: error\n"), "{text}");
    assert!(text.contains("oversized event. (request id: rid9)"));
    assert_eq!(text.matches("event: error").count(), 1);
}
