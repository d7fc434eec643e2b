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

/// Everything the gateway logs while the tests of this binary run.
pub(crate) fn captured_log() -> &'static std::sync::Mutex<Vec<u8>> {
    use std::sync::{Arc, Mutex, OnceLock};
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global logger");
        buf
    })
}

/// An upstream's error body that echoes the channel's key, a bearer token and a `key=`
/// parameter reaches the log with none of them, and cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_error_bodies_are_logged_without_secrets() {
    let log = captured_log();
    const CHANNEL_KEY: &str = "chan-secret-key-0123456789";
    const BEARER: &str = "eyJhbGciOiJIUzI1NiJ9.bearer-token-payload";
    const QUERY_KEY: &str = "AIzaSy-query-secret-42";
    let echo = format!(
        "Incorrect API key provided: {CHANNEL_KEY}. You sent Authorization: Bearer {BEARER} \
         to https://upstream.example/v1beta/models/x:generateContent?key={QUERY_KEY}&alt=sse. {}",
        "padding ".repeat(500)
    );
    let up = crate::mock_upstream::MockUpstream::start(move |_| {
        crate::mock_upstream::Reply::json(
            401,
            json!({"error": {"message": echo, "type": "invalid_request_error"}}),
        )
    })
    .await;
    let text = format!(
        "channels:\n  - {{ name: oa, protocol: openai, base_url: \"{}\", api_key: {CHANNEL_KEY}, models: [m] }}\n\
         prices:\n  m: {{ input: 1.0, output: 2.0 }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&text, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let (status, headers, body) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &crate::gateway::chat("m", false),
        )
        .await;
    assert_eq!(status, 500, "{body}");
    assert!(!body.contains(CHANNEL_KEY), "{body}");
    let rid = headers["x-request-id"].to_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        if let Some(l) = text
            .lines()
            .find(|l| l.contains(&rid) && l.contains("upstream error"))
        {
            break l.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no log line for {rid}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(line.contains("Incorrect API key provided"), "{line}");
    assert!(line.contains("[redacted]"), "{line}");
    assert!(
        line.len() < 2_000,
        "the body is cut short: {} bytes",
        line.len()
    );
    let all = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    for secret in [CHANNEL_KEY, BEARER, QUERY_KEY, key.as_str()] {
        assert!(!all.contains(secret), "{secret} reached the log: {line}");
    }
}
