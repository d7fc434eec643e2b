use super::super::{passthrough_request, passthrough_response, passthrough_stream};
use super::{events, random_pieces, sctx};
use crate::protocol::{RequestOptions, Usage};
use serde_json::{json, Value};

fn opts(compact: bool) -> RequestOptions<'static> {
    RequestOptions {
        upstream_model: "gpt-5-2025-08-07",
        stream: true,
        default_max_tokens: 4096,
        chat_limit_field: "max_completion_tokens",
        compact,
    }
}

#[test]
fn the_request_goes_as_it_came_with_only_the_model_replaced() {
    let body = json!({
        "model": "my-model",
        "input": [{"type": "item_reference", "id": "msg_1"}],
        "previous_response_id": "resp_68af",
        "tools": [{"type": "web_search_preview"}, {"type": "mcp", "server_label": "x"}],
        "include": ["reasoning.encrypted_content"],
        "store": false,
        "brand_new_field": {"nested": [1, 2, 3]}
    });
    let r = passthrough_request(body.clone(), &opts(false));
    assert_eq!(r.path, "/v1/responses");
    assert!(!r.client_wants_usage);
    let sent: Value = serde_json::from_slice(&r.body).unwrap();
    let mut want = body.clone();
    want["model"] = "gpt-5-2025-08-07".into();
    assert_eq!(sent, want);
    // Field order survives too.
    let keys: Vec<&String> = sent.as_object().unwrap().keys().collect();
    assert_eq!(keys[0], "model");
    assert_eq!(keys[6], "brand_new_field");
    assert_eq!(
        passthrough_request(body, &opts(true)).path,
        "/v1/responses/compact"
    );
}

const RESPONSE: &str = r#"{
  "id": "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b",
  "object": "response",
  "created_at": 1756315696,
  "status": "completed",
  "model": "gpt-5-2025-08-07",
  "output": [
    {"id": "rs_68af4030baa48193b0b43b4c2a176a1a05438e46b5f69a3b", "type": "reasoning", "summary": []},
    {"id": "msg_68af40337e58819392e935fb404414d005438e46b5f69a3b", "type": "message", "status": "completed",
     "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Hi!"}], "role": "assistant"}
  ],
  "reasoning": {"effort": "medium", "summary": null},
  "service_tier": "default",
  "usage": {"input_tokens": 2048, "input_tokens_details": {"cached_tokens": 1920},
            "output_tokens": 75, "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 2123}
}"#;

#[test]
fn a_whole_response_keeps_everything_but_the_model_and_reports_usage() {
    let (out, usage) = passthrough_response(RESPONSE.as_bytes(), "my-model", "r").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let mut want: Value = serde_json::from_str(RESPONSE).unwrap();
    want["model"] = "my-model".into();
    // The gateway's own id, never the upstream's.
    want["id"] = "resp_r".into();
    assert_eq!(v, want);
    assert_eq!(
        usage,
        Usage {
            input_tokens: 2048,
            output_tokens: 75,
            cached_input_tokens: 1920,
            cache_creation_input_tokens: 0,
            reasoning_tokens: 64,
            ..Usage::default()
        }
    );
}

#[test]
fn compaction_answers_and_chat_style_usage_pass_too() {
    let body = json!({
        "id": "cmp_1", "object": "response.compaction", "created_at": 1,
        "output": [{"type": "compaction", "encrypted_content": "gAAAA"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40,
                  "prompt_tokens_details": {"cached_tokens": 100},
                  "completion_tokens_details": {"reasoning_tokens": 10}}
    });
    let (out, usage) = passthrough_response(body.to_string().as_bytes(), "my-model", "r").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, body, "no model field: none added");
    assert_eq!(usage.input_tokens, 900);
    assert_eq!(usage.output_tokens, 40);
    assert_eq!(usage.cached_input_tokens, 100);
    assert_eq!(usage.reasoning_tokens, 10);
    let u = super::super::passthrough::usage_of(&json!({
        "input_tokens": 500, "output_tokens": 9,
        "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 300}
    }));
    assert_eq!(
        (u.cached_input_tokens, u.cache_creation_input_tokens),
        (100, 300)
    );
    assert!(passthrough_response(b"not json", "m", "r").is_err());
    assert!(passthrough_response(b"[1]", "m", "r").is_err());
    assert!(passthrough_response(b"{\"error\": {}}", "m", "r").is_err());
}

/// A gpt-5 stream as the Responses API sends it (abridged ids), with a function call.
const STREAM: &str = concat!(
    "event: response.created\n",
    "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1756315696,\"status\":\"in_progress\",\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"usage\":null}}\n\n",
    "event: response.in_progress\n",
    "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1756315696,\"status\":\"in_progress\",\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"usage\":null}}\n\n",
    ": keep-alive\n\n",
    "event: response.output_item.added\r\n",
    "data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"in_progress\",\"arguments\":\"\",\"call_id\":\"call_Zx\",\"name\":\"get_weather\"}}\r\n\r\n",
    "event: response.function_call_arguments.delta\n",
    "data: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":3,\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\"{\\\"city\\\":\\\"Zürich\\\"}\",\"obfuscation\":\"ab\"}\n\n",
    "event: response.function_call_arguments.done\n",
    "data: {\"type\":\"response.function_call_arguments.done\",\"sequence_number\":4,\"item_id\":\"fc_1\",\"output_index\":0,\"arguments\":\"{\\\"city\\\":\\\"Zürich\\\"}\"}\n\n",
    "event: response.output_item.done\n",
    "data: {\"type\":\"response.output_item.done\",\"sequence_number\":5,\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":\"{\\\"city\\\":\\\"Zürich\\\"}\",\"call_id\":\"call_Zx\",\"name\":\"get_weather\"}}\n\n",
    "event: response.completed\n",
    "data: {\"type\":\"response.completed\",\"sequence_number\":6,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1756315696,\"status\":\"completed\",\"model\":\"gpt-5-2025-08-07\",\"output\":[{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":\"{\\\"city\\\":\\\"Zürich\\\"}\",\"call_id\":\"call_Zx\",\"name\":\"get_weather\"}],\"usage\":{\"input_tokens\":310,\"input_tokens_details\":{\"cached_tokens\":256},\"output_tokens\":90,\"output_tokens_details\":{\"reasoning_tokens\":64},\"total_tokens\":400}}}\n\n",
);

fn run(pieces: Vec<&[u8]>, error: Option<&str>) -> (Vec<u8>, Usage) {
    let mut t = passthrough_stream(sctx());
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(error, &mut out);
    (out, t.usage())
}

#[test]
fn a_stream_is_forwarded_event_by_event_with_the_clients_model() {
    let (whole, usage) = run(vec![STREAM.as_bytes()], None);
    assert_eq!(run(STREAM.as_bytes().chunks(1).collect(), None).0, whole);
    for seed in 0..4 {
        assert_eq!(
            run(random_pieces(STREAM.as_bytes(), seed, 40), None).0,
            whole
        );
    }
    let text = String::from_utf8(whole.clone()).unwrap();
    assert!(!text.contains("gpt-5-2025-08-07"), "{text}");
    assert!(
        text.contains("\"obfuscation\":\"ab\""),
        "unknown fields survive"
    );
    let evs = events(&whole);
    assert_eq!(evs.len(), 7);
    assert_eq!(evs[0].1["response"]["model"], "my-model");
    assert_eq!(evs[6].1["response"]["model"], "my-model");
    assert_eq!(evs[3].1["delta"], "{\"city\":\"Zürich\"}");
    // Events without a response object go byte for byte.
    assert!(text.contains(
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,"
    ));
    assert_eq!(
        usage,
        Usage {
            input_tokens: 310,
            output_tokens: 90,
            cached_input_tokens: 256,
            cache_creation_input_tokens: 0,
            reasoning_tokens: 64,
            ..Usage::default()
        }
    );
}

#[test]
fn a_stream_cut_before_its_terminal_event_ends_with_an_error_event() {
    let cut = &STREAM[..STREAM.find("event: response.completed").unwrap()];
    let (out, usage) = run(random_pieces(cut.as_bytes(), 9, 17), None);
    let evs = events(&out);
    let (name, last) = evs.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(
        last["message"],
        "The upstream provider ended the stream before it was complete. (request id: req123)"
    );
    assert_eq!(last["error"]["type"], "upstream_error");
    assert_eq!(
        last["sequence_number"], 6,
        "follows the upstream's last one"
    );
    assert_eq!(usage, Usage::default());
    let (out, _) = run(
        vec![cut.as_bytes()],
        Some("The upstream timed out. (request id: req123)"),
    );
    assert_eq!(
        events(&out).last().unwrap().1["message"],
        "The upstream timed out. (request id: req123)"
    );
}

#[test]
fn incomplete_and_failed_are_terminal_and_carry_usage() {
    for kind in ["response.incomplete", "response.failed"] {
        let input = format!(
            "event: {kind}\ndata: {}\n\n",
            json!({"type": kind, "sequence_number": 3, "response": {
                "id": "resp_1", "status": kind.trim_start_matches("response."), "model": "gpt-5-2025-08-07",
                "error": if kind == "response.failed" { json!({"code": "server_error", "message": "internal host gpu-17 crashed"}) } else { Value::Null },
                "output": [], "usage": {"input_tokens": 10, "output_tokens": 5}}})
        );
        let (out, usage) = run(vec![input.as_bytes()], None);
        let evs = events(&out);
        assert_eq!(evs.len(), 1, "no error event after a terminal one");
        assert_eq!(usage.input_tokens, 10);
        assert_eq!(usage.output_tokens, 5);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("gpu-17"), "{text}");
    }
}

#[test]
fn an_upstream_error_event_is_sanitized_and_ends_the_stream() {
    let input = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"model\":\"gpt-5\",\"output\":[]}}\n\n",
        "event: error\n",
        "data: {\"type\":\"error\",\"sequence_number\":1,\"code\":\"server_error\",\"message\":\"upstream-lb-3.internal overloaded\",\"param\":null}\n\n",
        "event: response.output_text.delta\n",
        "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"delta\":\"x\"}\n\n",
    );
    let (out, _) = run(input.as_bytes().chunks(5).collect(), None);
    let evs = events(&out);
    assert_eq!(evs.len(), 2);
    let err = &evs[1].1;
    assert_eq!(err["sequence_number"], 1);
    assert_eq!(
        err["message"],
        "The upstream provider reported an error mid-stream. (request id: req123)"
    );
    assert!(
        err["error"].is_object(),
        "the SDK raises on a top-level error"
    );
}

#[test]
fn an_oversized_event_ends_the_stream_with_an_error() {
    let mut t = passthrough_stream(sctx());
    let mut out = Vec::new();
    let big = vec![b'x'; crate::protocol::sse::MAX_EVENT_BYTES + 10];
    t.feed(b"data: ", &mut out);
    t.feed(&big, &mut out);
    t.feed(b"\n\n", &mut out);
    t.finish(None, &mut out);
    let evs = events(&out);
    assert_eq!(evs.len(), 1);
    assert!(evs[0].1["message"]
        .as_str()
        .unwrap()
        .contains("oversized event"));
}
