//! The OpenAI chat relay (issue: spine, section 4).

use crate::gateway::{chat, error_of, openai_channel, StoreKind, TestGateway};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

fn mapped_channel(base: &str) -> String {
    format!(
        "channels:\n  - name: main\n    protocol: openai\n    base_url: {base}\n    api_key: upstream-secret-key\n    models: [gpt-4o]\n    model_map: {{ gpt-4o: gpt-4o-2024-08-06 }}\nprices:\n  gpt-4o: {{ input: 1.0, output: 2.0, cached_input: 0.5 }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streaming_relays_maps_the_model_and_bills_real_usage() {
    let up = MockUpstream::completing("Hi there", openai::usage(10, 20, 4)).await;
    let gw = TestGateway::start(&mapped_channel(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"name": "t"})).await;

    let (status, headers, body) = gw
        .post("/v1/chat/completions", &key, &chat("gpt-4o", false))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.get("x-request-id").is_some());
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hi there");
    assert_eq!(
        v["model"], "gpt-4o",
        "the internal model id never reaches the client"
    );

    let seen = up.last();
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.json()["model"], "gpt-4o-2024-08-06");
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer upstream-secret-key")
    );
    assert!(
        !seen.headers.iter().any(|(_, v)| v.contains(&key)),
        "client key forwarded"
    );

    // 6 plain input tokens at 1, 4 cached at 0.5, 20 output at 2 micro-USD each.
    assert_eq!(gw.used_micros(&id).await, 6 + 2 + 40);
    let (s, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(s, 200);
    let rec = &log["data"][0];
    assert_eq!(rec["model"], "gpt-4o");
    assert_eq!(rec["channel"], "main");
    assert_eq!(rec["prompt_tokens"], 10);
    assert_eq!(rec["completion_tokens"], 20);
    assert_eq!(rec["cached_tokens"], 4);
    assert_eq!(rec["cost_micro_usd"], 48);
    assert_eq!(rec["status"], 200);
    assert_eq!(rec["stream"], false);
    assert_eq!(rec["request_id"], headers["x-request-id"].to_str().unwrap());
}

/// Reads SSE `data:` payloads from a streaming response until `[DONE]` or the end.
pub(crate) async fn sse_events(resp: reqwest::Response) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(i) = buf.find("\n\n") {
            let ev: String = buf.drain(..i + 2).collect();
            for line in ev.lines() {
                if let Some(d) = line.strip_prefix("data:") {
                    out.push(d.trim().to_string());
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_forwards_chunks_as_they_arrive_and_bills_usage() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let up = MockUpstream::start(move |r| {
        let model = r.json()["model"].as_str().unwrap().to_string();
        let events = openai::stream(&model, &["Hel", "lo", "!"], Some(openai::usage(7, 3, 0)));
        Reply::Gated {
            reply: Box::new(Reply::sse(&events, Duration::ZERO, End::Clean)),
            before: 2,
            gate: g.clone(),
        }
    })
    .await;
    let gw = TestGateway::start(&mapped_channel(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;

    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat("gpt-4o", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut s = resp.bytes_stream();
    // The upstream holds back everything after its second event until the gate opens:
    // the client must see the first event before that, or the gateway is buffering.
    let first = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("first event arrived while the upstream was still streaming")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("chat.completion.chunk"));
    gate.notify_one();
    let mut rest = String::from_utf8_lossy(&first).to_string();
    while let Some(c) = s.next().await {
        rest.push_str(&String::from_utf8_lossy(&c.unwrap()));
    }
    assert!(rest.contains("\"Hel\"") && rest.contains("\"lo\"") && rest.contains("\"!\""));
    assert!(rest.trim_end().ends_with("data: [DONE]"), "{rest}");
    assert!(
        !rest.contains("\"usage\""),
        "usage chunk dropped when the client did not ask"
    );
    assert!(
        !rest.contains("gpt-4o-2024-08-06"),
        "mapped model leaked: {rest}"
    );

    let sent = up.last().json();
    assert_eq!(
        sent["stream_options"]["include_usage"], true,
        "the gateway asks for usage"
    );
    assert_eq!(gw.used_micros(&id).await, 7 + 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_keeps_the_usage_chunk_when_asked() {
    let up = MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap().to_string();
        Reply::sse(
            &openai::stream(&model, &["a"], Some(openai::usage(2, 1, 0))),
            Duration::ZERO,
            End::Clean,
        )
    })
    .await;
    let gw = TestGateway::start(&mapped_channel(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let mut body = chat("gpt-4o", true);
    body["stream_options"] = json!({"include_usage": true});
    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let events = sse_events(resp).await;
    let usage: Vec<&String> = events.iter().filter(|e| e.contains("\"usage\"")).collect();
    assert_eq!(usage.len(), 1, "{events:?}");
    assert_eq!(events.last().unwrap(), "[DONE]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_mebibyte_body_reaches_the_upstream_intact() {
    let up = MockUpstream::completing("ok", openai::usage(1, 1, 0)).await;
    let gw = TestGateway::start(&mapped_channel(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    // Far above Pingora's 64 KiB replay buffer, with every byte value a JSON string can hold.
    let content: String = (0..(1 << 20))
        .map(|i| char::from(b' ' + (i % 90) as u8))
        .collect();
    let mut body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": content}],
                          "temperature": 0.25, "some_future_field": {"kept": [1, 2, 3]}});
    let (status, _, text) = gw.post("/v1/chat/completions", &key, &body).await;
    assert_eq!(status, 200, "{text}");
    let seen = up.last();
    assert!(seen.body.len() > 1 << 20);
    // The only intended rewrites: the model name, and the output limit the reservation
    // paid for (always written, here the price's maximum, after the client's members).
    body["model"] = json!("gpt-4o-2024-08-06");
    let limit = seen.json()["max_completion_tokens"].as_u64();
    assert!(
        limit.is_some_and(|n| n > 0),
        "the upstream is told the output limit"
    );
    body["max_completion_tokens"] = json!(limit);
    assert_eq!(seen.json(), body);
    assert_eq!(
        seen.body,
        serde_json::to_vec(&body).unwrap(),
        "byte-exact apart from the model and the output limit"
    );
}

/// A request body goes upstream with its header in one write up to 64 KiB, and after it
/// beyond: either way the upstream reads the whole body, byte for byte, and the pooled
/// connection serves the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_below_and_above_the_one_write_size_reach_the_upstream_whole() {
    let up = MockUpstream::completing("ok", openai::usage(1, 1, 0)).await;
    let cfg = format!(
        "limits: {{ max_body_bytes: 4194304 }}\n{}",
        mapped_channel(&up.base_url())
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for size in [10, 60_000, 66_000, 1_500_000, 20] {
        let text: String = (0..size).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]});
        let (status, _, answer) = gw.post("/v1/chat/completions", &key, &body).await;
        assert_eq!(status, 200, "{size}: {answer}");
        let seen = up.last();
        assert_eq!(
            seen.header("content-length").and_then(|v| v.parse().ok()),
            Some(seen.body.len()),
            "{size}"
        );
        assert_eq!(seen.json()["messages"][0]["content"], text, "{size}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_413_and_never_sent() {
    let up = MockUpstream::start(|_| Reply::json(200, json!({}))).await;
    let cfg = format!(
        "limits: {{ max_body_bytes: 65536 }}\n{}",
        mapped_channel(&up.base_url())
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let big =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "x".repeat(70_000)}]});
    let (status, _, body) = gw.post("/v1/chat/completions", &key, &big).await;
    assert_eq!(status, 413);
    let e = error_of(&body);
    assert_eq!(e["code"], "request_too_large");
    assert!(up.requests().is_empty());
    assert_eq!(gw.used_micros(&id).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_are_sanitized_and_refunded() {
    let up = MockUpstream::start(|r| {
        let leak = "upstream host internal-llm-7.corp:8443 key sk-proj-SECRET model gpt-4o-2024-08-06 Traceback (most recent call last)";
        let status = match r.json()["messages"][0]["content"].as_str() {
            Some("bad") => 400,
            Some("slow down") => 429,
            Some("auth") => 401,
            _ => 503,
        };
        Reply::json(status, json!({"error": {"message": leak, "type": "server_error"}}))
    })
    .await;
    let gw = TestGateway::start(&mapped_channel(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    for (content, expected) in [
        ("boom", 500),
        ("bad", 400),
        ("slow down", 429),
        ("auth", 500),
    ] {
        let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": content}]});
        let (status, headers, text) = gw.post("/v1/chat/completions", &key, &body).await;
        assert_eq!(status, expected, "{content}: {text}");
        assert!(headers.get("retry-after").is_none());
        let e = error_of(&text);
        assert_eq!(e["type"], "upstream_error");
        for secret in [
            "internal-llm",
            "corp",
            "sk-proj",
            "2024-08-06",
            "Traceback",
            "8443",
            &up.addr.to_string(),
        ] {
            assert!(!text.contains(secret), "leaked {secret}: {text}");
        }
    }
    assert_eq!(gw.used_micros(&id).await, 0, "failed requests are refunded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_unopened_connection_falls_over_to_the_next_channel() {
    let up = MockUpstream::completing("from backup", openai::usage(1, 1, 0)).await;
    // A port with nothing listening: bind, note it, close it.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = format!(
        "channels:\n  - {{ name: dead, protocol: openai, base_url: \"http://{dead}\", models: [m], priority: 0 }}\n  - {{ name: backup, protocol: openai, base_url: \"{}\", models: [m], priority: 1 }}\nprices:\n  m: {{ input: 1, output: 1 }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let (status, _, body) = gw
        .post("/v1/chat/completions", &key, &chat("m", false))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("from backup"));
    let (_, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(log["data"][0]["channel"], "backup");

    // A 500 after the request was sent is not retried anywhere.
    let failing =
        MockUpstream::start(|_| Reply::json(500, json!({"error": {"message": "x"}}))).await;
    let cfg = format!(
        "channels:\n  - {{ name: first, protocol: openai, base_url: \"{}\", models: [m], priority: 0 }}\n  - {{ name: second, protocol: openai, base_url: \"{}\", models: [m], priority: 1 }}\nprices:\n  m: {{ input: 1, output: 1 }}\n",
        failing.base_url(),
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let before = up.requests().len();
    let (status, _, _) = gw
        .post("/v1/chat/completions", &key, &chat("m", false))
        .await;
    assert_eq!(status, 500);
    assert_eq!(failing.requests().len(), 1);
    assert_eq!(
        up.requests().len(),
        before,
        "no retry on the caller's behalf"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_breaks_mid_stream_ends_the_client_stream_with_an_error() {
    let up = MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap().to_string();
        let mut events = openai::stream(&model, &["partial", "more"], None);
        events.truncate(2);
        Reply::sse(&events, Duration::ZERO, End::Disconnect)
    })
    .await;
    let gw = TestGateway::start(&mapped_channel(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat("gpt-4o", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = tokio::time::timeout(Duration::from_secs(20), sse_events(resp))
        .await
        .expect("no hang");
    assert!(events.iter().any(|e| e.contains("partial")), "{events:?}");
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "upstream_error", "{events:?}");
    assert!(last["error"]["message"]
        .as_str()
        .unwrap()
        .contains("(request id: "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_stream_is_billed_for_what_the_upstream_produced() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let up = MockUpstream::start(move |r| {
        let model = r.json()["model"].as_str().unwrap().to_string();
        let events = openai::stream(&model, &["a", "b", "c"], Some(openai::usage(100, 50, 0)));
        Reply::Gated {
            reply: Box::new(Reply::sse(&events, Duration::ZERO, End::Clean)),
            before: 2,
            gate: g.clone(),
        }
    })
    .await;
    let gw = TestGateway::start(&mapped_channel(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1.0})).await;
    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat("gpt-4o", true))
        .send()
        .await
        .unwrap();
    let mut s = resp.bytes_stream();
    s.next().await.unwrap().unwrap();
    drop(s); // the client leaves
    gate.notify_one();
    // The settle happens when the upstream stream ends; wait for it, bounded.
    let expected = 100 + 100;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let used = gw.used_micros(&id).await;
        if used == expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "billed {used}, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, usage) = gw.get("/api/usage/token", &key).await;
    assert_eq!(usage["used_micro_usd"], expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_times_out_with_a_clean_error() {
    let up = MockUpstream::start(|_| {
        Reply::Delayed(
            Duration::from_secs(5),
            Box::new(Reply::json(200, json!({}))),
        )
    })
    .await;
    let cfg = format!(
        "channels:\n  - {{ name: slow, protocol: openai, base_url: \"{}\", models: [m], read_timeout_secs: 1 }}\nprices:\n  m: {{ input: 1, output: 1 }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let (status, _, body) = gw
        .post("/v1/chat/completions", &key, &chat("m", false))
        .await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(error_of(&body)["code"], "upstream_timeout");
    assert_eq!(gw.used_micros(&id).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused() {
    let up = MockUpstream::completing("x", openai::usage(1, 1, 0)).await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for _ in 0..10 {
        let (status, _, _) = gw
            .post("/v1/chat/completions", &key, &chat("m", false))
            .await;
        assert_eq!(status, 200);
    }
    assert_eq!(up.requests().len(), 10);
    assert!(
        up.connections() <= 2,
        "{} connections for 10 sequential requests",
        up.connections()
    );
}
