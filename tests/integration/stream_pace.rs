//! Streams are never buffered: an upstream that has sent its first content event and
//! waits before the next one has that event reach the client while it waits, whether
//! the stream passes through (chat to chat) or is translated (a messages client on a
//! chat upstream, a chat client on a messages upstream).

use crate::gateway::{StoreKind, TestGateway};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

fn config(base: &str) -> String {
    format!(
        "channels:\n  - name: oa\n    protocol: openai\n    base_url: {base}\n    api_key: k\n    models: [m-chat]\n  - name: an\n    protocol: anthropic\n    base_url: {base}\n    api_key: k\n    models: [m-messages]\nprices:\n  m-chat: {{ input: 1.0, output: 2.0 }}\n  m-messages: {{ input: 1.0, output: 2.0 }}\n"
    )
}

/// A messages-protocol stream as the Messages API reference (Anthropic, "Streaming
/// Messages") shows it, each event one chunk: start, a text block of `pieces`, the
/// final usage, stop.
fn messages_stream(model: &str, pieces: &[&str]) -> Vec<Vec<u8>> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n").into_bytes();
    let mut v = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_up", "type": "message",
                "role": "assistant", "content": [], "model": model, "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for p in pieces {
        v.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    v.push(ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    v.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
            "stop_sequence": null}, "usage": {"output_tokens": 3}}),
    ));
    v.push(ev("message_stop", json!({"type": "message_stop"})));
    v
}

/// The upstream sends its events up to and including the first content event, then
/// waits for the gate; the client must see that content before the gate opens.
async fn first_content_arrives_before_the_rest_is_sent(
    path: &str,
    body: Value,
    first: &str,
    end: &str,
) {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let up = MockUpstream::start(move |r| {
        let model = r.json()["model"].as_str().unwrap_or_default().to_string();
        let (pieces, before) = if model == "m-messages" {
            (messages_stream(&model, &["Hel", "lo", "!"]), 3)
        } else {
            let events = openai::stream(&model, &["Hel", "lo", "!"], Some(openai::usage(5, 3, 0)));
            let pieces = events
                .iter()
                .map(|e| format!("data: {e}\n\n").into_bytes())
                .collect();
            (pieces, 2)
        };
        Reply::Gated {
            reply: Box::new(Reply::Chunked {
                status: 200,
                content_type: "text/event-stream".into(),
                pieces,
                interval: Duration::ZERO,
                end: End::Clean,
            }),
            before,
            gate: g.clone(),
        }
    })
    .await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let resp = gw
        .http
        .post(gw.url(path))
        .bearer_auth(&key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut s = resp.bytes_stream();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains(first) {
        let piece = tokio::time::timeout_at(deadline, s.next())
            .await
            .unwrap_or_else(|_| {
                panic!("{path}: the first content never came while the upstream waited: {seen}")
            })
            .expect("the stream is still open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&piece));
    }
    assert!(
        !seen.contains("lo\""),
        "{path}: nothing after the first content was sent yet: {seen}"
    );
    gate.notify_one();
    while let Some(piece) = s.next().await {
        seen.push_str(&String::from_utf8_lossy(&piece.unwrap()));
    }
    assert!(seen.contains(end), "{path}: {seen}");
    assert!(
        seen.contains("\"lo\"") && seen.contains("\"!\""),
        "{path}: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_chat_upstream_s_first_content_reaches_a_chat_client_before_the_rest_is_sent() {
    first_content_arrives_before_the_rest_is_sent(
        "/v1/chat/completions",
        json!({"model": "m-chat", "stream": true,
            "messages": [{"role": "user", "content": "hello"}]}),
        "\"content\":\"Hel\"",
        "data: [DONE]",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_chat_upstream_s_first_content_reaches_a_messages_client_before_the_rest_is_sent() {
    first_content_arrives_before_the_rest_is_sent(
        "/v1/messages",
        json!({"model": "m-chat", "stream": true, "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello"}]}),
        "\"text\":\"Hel\"",
        "event: message_stop",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_messages_upstream_s_first_content_reaches_a_chat_client_before_the_rest_is_sent() {
    first_content_arrives_before_the_rest_is_sent(
        "/v1/chat/completions",
        json!({"model": "m-messages", "stream": true, "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello"}]}),
        "\"content\":\"Hel\"",
        "data: [DONE]",
    )
    .await;
}
