//! Graceful stop: once the listeners stop accepting, requests in flight have
//! `limits.shutdown_grace_secs` to finish; the streams still running then end with their
//! protocol's error event and are settled from what was observed. No charge is lost.

use crate::gateway::{chat, StoreKind, TestGateway};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use crate::redis_server::RedisServer;
use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

fn config(base: &str, grace_secs: u64) -> String {
    // 1 micro-USD per input token, 2 per output token.
    format!(
        "limits: {{ shutdown_grace_secs: {grace_secs} }}\nchannels:\n  - {{ name: c, protocol: openai, base_url: \"{base}\", models: [m] }}\nprices:\n  m: {{ input: 1.0, output: 2.0 }}\n"
    )
}

/// An upstream whose stream takes far longer than the grace period: a piece every 50 ms
/// for 30 s, its usage only at the very end.
async fn slow_upstream() -> MockUpstream {
    MockUpstream::start(|_| {
        let pieces: Vec<&str> = vec!["word "; 600];
        let events = openai::stream("m", &pieces, Some(openai::usage(10, 600, 0)));
        Reply::sse(&events, Duration::from_millis(50), End::Clean)
    })
    .await
}

/// Starts a streaming chat request; returns its body as it arrives.
async fn open_stream(
    gw: &TestGateway,
    key: &str,
) -> impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> {
    let r = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat("m", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes_stream()
}

async fn cut_stream_is_ended_and_billed(store: StoreKind) {
    let up = slow_upstream().await;
    let gw = TestGateway::start(&config(&up.base_url(), 1), store).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1.0})).await;
    let mut body = open_stream(&gw, &key).await;
    let mut text = String::new();
    // The stream is running: the first pieces arrived.
    while !text.contains("word") {
        let chunk = body.next().await.expect("stream open").unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let stopped = Instant::now();
    gw.running.shutdown();
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    })
    .await;
    assert!(rest.is_ok(), "the stream ended after the grace period");
    assert!(
        stopped.elapsed() >= Duration::from_millis(900),
        "requests in flight get the grace period first"
    );
    assert!(
        text.contains("shutting down"),
        "ends with the protocol's error event: {}",
        &text[text.len().saturating_sub(400)..]
    );
    assert!(!text.contains("[DONE]"), "never marked complete");
    // Settled from what was delivered (the usage report never came): charged, and the
    // record says the cost is estimated.
    let store = gw.running.gateway.store.clone();
    let used = store.get_key(&id).await.unwrap().unwrap().quota_used;
    let records = store.recent_usage(&id, 10).await.unwrap();
    assert_eq!(records.len(), 1, "one usage record");
    let rec = &records[0];
    assert!(rec.estimated, "{rec:?}");
    assert!(rec.completion_tokens > 0, "{rec:?}");
    assert!(
        used > 0 && used == rec.cost,
        "charged {used}, recorded {rec:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_ends_and_bills_a_running_stream_on_the_embedded_store() {
    cut_stream_is_ended_and_billed(StoreKind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_ends_and_bills_a_running_stream_on_redis() {
    let redis = RedisServer::start().await;
    cut_stream_is_ended_and_billed(StoreKind::Redis(redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_finishes_within_the_grace_period_is_served_whole() {
    let up = MockUpstream::start(|_| {
        let events = openai::stream("m", &["a"; 20], Some(openai::usage(10, 20, 0)));
        Reply::sse(&events, Duration::from_millis(50), End::Clean)
    })
    .await;
    let gw = TestGateway::start(&config(&up.base_url(), 30), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1.0})).await;
    let mut body = open_stream(&gw, &key).await;
    let first = body.next().await.unwrap().unwrap();
    gw.running.shutdown();
    let mut text = String::from_utf8_lossy(&first).to_string();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let used = gw
        .running
        .gateway
        .store
        .get_key(&id)
        .await
        .unwrap()
        .unwrap()
        .quota_used;
    assert_eq!(used, 10 + 2 * 20, "billed from the upstream's own usage");
}
