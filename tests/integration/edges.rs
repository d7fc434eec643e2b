//! Hardening at the edges: upstream streams that break in the middle, requests the spec
//! refuses early, client addresses behind proxies, and secrets kept out of the log.

use crate::faulty_upstream::{self, Fault, FAULTS};
use crate::gateway::{StoreKind, TestGateway};
use crate::protocols::{
    config, ended_cleanly, ended_with_error, events, request, stream_text, Client, CLIENTS,
};
use serde_json::{json, Value};
use std::time::Duration;

/// (model, whether the channel serves `Responses` clients natively)
const MODELS: [&str; 4] = ["m-openai", "m-anthropic", "m-gemini", "m-responses"];

/// Whether the stream told the client the answer was complete anyway.
fn claims_complete(client: Client, evs: &[(String, String)]) -> bool {
    evs.iter().any(|(name, data)| {
        let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        match client {
            Client::Chat => data == "[DONE]" || v["choices"][0]["finish_reason"].is_string(),
            Client::Messages => name == "message_stop" || v["delta"]["stop_reason"].is_string(),
            Client::Gemini => v["candidates"][0]["finishReason"].is_string(),
            Client::Responses => name == "response.completed",
        }
    })
}

/// Micro-USD of a stream at 1 and 2 micro-USD per prompt and output token.
fn cost(output_tokens: u64) -> i64 {
    (faulty_upstream::PROMPT_TOKENS + 2 * output_tokens) as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_an_unreadable_event_ends_in_the_clients_error_event() {
    for fault in FAULTS {
        let up = faulty_upstream::start(fault).await;
        let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
        let (key, id) = gw.create_key(json!({})).await;
        let mut spent = 0;
        for client in CLIENTS {
            for model in MODELS {
                // A native responses channel is a passthrough for responses clients; the
                // others reach it as a chat channel, which the chat upstream covers.
                if model == "m-responses" && client != Client::Responses {
                    continue;
                }
                let what = format!("{fault:?}: {client:?} -> {model}");
                let r = request(&gw, client, model, true, &key)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{what}");
                let evs = tokio::time::timeout(Duration::from_secs(30), events(r))
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the client stream hung"));
                assert_eq!(
                    stream_text(client, &evs),
                    faulty_upstream::BEFORE,
                    "{what}: only what came before the fault is shown: {evs:?}"
                );
                assert!(ended_with_error(client, &evs), "{what}: {evs:?}");
                assert!(!ended_cleanly(client, &evs), "{what}: {evs:?}");
                assert!(
                    !claims_complete(client, &evs),
                    "{what}: a truncated answer marked complete: {evs:?}"
                );
                // Billed from the usage the upstream reported, after the fault included.
                let used = gw.used_micros(&id).await - spent;
                spent += used;
                if fault.final_usage_sent() {
                    assert_eq!(used, cost(faulty_upstream::OUTPUT_TOKENS), "{what}");
                } else if model != "m-responses" {
                    assert_eq!(used, cost(faulty_upstream::EARLY_OUTPUT_TOKENS), "{what}");
                } else {
                    // The responses protocol reports usage only at its end: the prompt
                    // is billed from its size.
                    assert!(used > 0, "{what}: nothing is free");
                }
            }
        }
        assert_eq!(fault == Fault::NoEndMarker, !fault.final_usage_sent());
    }
}

/// OpenAI documents 128 as the most choices a chat request may ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_request_asking_for_too_many_choices_is_refused_naming_n() {
    let up = crate::providers::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    for (n, stream) in [(1_000_000_000u64, false), (129, true), (0, false)] {
        let body = json!({"model": "m-openai", "n": n, "stream": stream,
            "messages": [{"role": "user", "content": "hi"}]});
        let (status, headers, text) = gw.post("/v1/chat/completions", &key, &body).await;
        assert_eq!(status, 400, "n={n}: {text}");
        let e = crate::gateway::error_of(&text);
        assert_eq!(e["param"], "n", "{text}");
        assert!(e["message"].as_str().unwrap().contains("`n`"), "{text}");
        assert!(headers.contains_key("x-request-id"));
    }
    assert!(up.requests().is_empty(), "nothing reached the upstream");
    assert_eq!(gw.used_micros(&id).await, 0);
    let body =
        json!({"model": "m-openai", "n": 128, "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, text) = gw.post("/v1/chat/completions", &key, &body).await;
    assert_eq!(status, 200, "{text}");
}

/// Behind a trusted proxy, every `X-Forwarded-For` line counts, in order, walked from the
/// right: a client cannot pass an allowlist by sending its own first line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_forwarded_for_line_is_read_from_the_right() {
    let up = crate::providers::start().await;
    let text = format!(
        "{}trusted_proxies: [127.0.0.1/32]\n",
        config(&up.base_url())
    );
    let gw = TestGateway::start(&text, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"allow_ips": ["203.0.113.9"]})).await;
    let send = |lines: &[&str]| {
        let mut r = gw.http.get(gw.url("/v1/models")).bearer_auth(&key);
        for l in lines {
            r = r.header("x-forwarded-for", *l);
        }
        r.send()
    };
    // The client forged the first line; the proxy appended the real address.
    let r = send(&["203.0.113.9", "198.51.100.7"]).await.unwrap();
    assert_eq!(r.status(), 403, "the right-most untrusted address decides");
    let r = send(&["198.51.100.7", "203.0.113.9, 127.0.0.1"])
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = send(&["203.0.113.9"]).await.unwrap();
    assert_eq!(r.status(), 200);
}
