//! Running it in production: `/metrics`, `/healthz`, `/readyz`, traces to an OTLP
//! collector, channel circuits and keys (`/admin/channels`), and reloads that keep the
//! requests in flight on the configuration they started with.

use crate::gateway::{chat, metric, openai_channel, StoreKind, TestGateway};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use crate::otlp_receiver::{attr, OtlpReceiver};
use crate::redis_server::RedisServer;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn completion_upstream() -> MockUpstream {
    MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap_or("m").to_string();
        if r.json()["stream"] == true {
            let events = openai::stream(&model, &["a", "b"], Some(openai::usage(10, 20, 4)));
            Reply::sse(&events, Duration::ZERO, End::Clean)
        } else {
            Reply::json(
                200,
                openai::completion(&model, "hi", openai::usage(10, 20, 4)),
            )
        }
    })
    .await
}

async fn admin_post(gw: &TestGateway, path: &str) -> (u16, Value) {
    gw.admin_send(reqwest::Method::POST, path, None).await
}

#[tokio::test]
async fn metrics_count_requests_tokens_cost_and_store_calls_with_bounded_labels() {
    let up = completion_upstream().await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 5.0})).await;
    let (s, _, _) = gw
        .post("/v1/chat/completions", &key, &chat("m", false))
        .await;
    assert_eq!(s, 200);
    let r = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat("m", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    // A model nobody serves must not become a label value.
    let (s, _, _) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &chat("no-such-model-x1", false),
        )
        .await;
    assert_eq!(s, 404);
    let (s, _, _) = gw
        .post("/v1/chat/completions", "sk-bad", &chat("m", false))
        .await;
    assert_eq!(s, 401);

    // The logging phase runs after the answer: poll until every request is counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = gw.metrics().await;
        let ok = metric(
            &text,
            "mg_requests_total",
            &[
                ("route", "chat_completions"),
                ("model", "m"),
                ("status", "200"),
            ],
        ) == Some(2.0)
            && metric(
                &text,
                "mg_requests_total",
                &[("model", "other"), ("status", "404")],
            ) == Some(1.0)
            && metric(&text, "mg_requests_total", &[("status", "401")]) == Some(1.0);
        if ok {
            break text;
        }
        assert!(Instant::now() < deadline, "requests not counted:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let labels = [
        ("route", "chat_completions"),
        ("protocol", "chat"),
        ("model", "m"),
        ("channel", "mock-openai"),
        ("status", "200"),
    ];
    assert_eq!(
        metric(&text, "mg_requests_total", &labels),
        Some(2.0),
        "{text}"
    );
    assert!(!text.contains("no-such-model-x1"), "unbounded label value");
    assert!(!text.contains(&id), "no key id in metrics");
    let tokens = |kind| metric(&text, "mg_tokens_total", &[("model", "m"), ("kind", kind)]);
    assert_eq!(tokens("input"), Some(20.0));
    assert_eq!(tokens("output"), Some(40.0));
    assert_eq!(tokens("cached_input"), Some(8.0));
    // Two requests, each 6 cached-free input at 1 µ$, 4 cached at 0.5, 20 output at 2.
    let cost = metric(
        &text,
        "mg_cost_micro_usd_total",
        &[("model", "m"), ("source", "exact")],
    );
    assert_eq!(cost, Some(2.0 * (6.0 + 2.0 + 40.0)), "{text}");
    assert_eq!(gw.used_micros(&id).await as f64, cost.unwrap());
    for series in [
        "mg_request_duration_seconds_bucket",
        "mg_time_to_first_byte_seconds_bucket",
        "mg_store_operation_seconds_bucket",
        "mg_upstream_response_seconds_bucket",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    assert!(
        metric(
            &text,
            "mg_store_operation_seconds_count",
            &[("op", "reserve")]
        )
        .unwrap()
            >= 2.0
    );
    assert_eq!(
        metric(&text, "mg_channel_state", &[("channel", "mock-openai")]),
        Some(0.0)
    );
    assert_eq!(metric(&text, "mg_reservations_held", &[]), Some(0.0));
    assert_eq!(metric(&text, "mg_open_streams", &[]), Some(0.0));
    assert_eq!(metric(&text, "mg_config_generation", &[]), Some(1.0));
}

#[tokio::test]
async fn health_and_readiness_answer_without_the_token_and_readiness_follows_the_store() {
    let mut redis = RedisServer::start().await;
    let gw = TestGateway::start("", StoreKind::Redis(redis.url())).await;
    let get = |p: &str| gw.http.get(format!("{}{p}", gw.admin)).send();
    let r = get("/healthz").await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["pid"], std::process::id());
    let r = get("/readyz").await.unwrap();
    assert_eq!(r.status(), 200);
    // The key API still wants the token.
    let r = get("/admin/keys").await.unwrap();
    assert_eq!(r.status(), 401);
    let r = get("/admin/channels").await.unwrap();
    assert_eq!(r.status(), 401);

    redis.stop();
    let r = get("/readyz").await.unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert!(v["reason"].as_str().unwrap().contains("store"), "{v}");
    assert_eq!(
        get("/healthz").await.unwrap().status(),
        200,
        "alive all the same"
    );
    redis.restart().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while get("/readyz").await.unwrap().status() != 200 {
        assert!(
            Instant::now() < deadline,
            "ready again once the store is back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_trace_per_request_reaches_the_collector_with_its_steps() {
    let up = completion_upstream().await;
    let otlp = OtlpReceiver::start().await;
    let body = format!(
        "telemetry: {{ otlp_endpoint: \"{}\", service_name: gw-test, headers: {{ x-collector-key: abc }} }}\n{}",
        otlp.endpoint(),
        openai_channel(&up.base_url(), &["m"])
    );
    let gw = TestGateway::start(&body, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"quota_usd": 5.0})).await;
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let r = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(&chat("m", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let request_id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    r.text().await.unwrap();

    let is_root = |s: &Value| attr(s, "gateway.request_id") == request_id.as_str();
    let spans = otlp.wait_for(is_root).await;
    let root = spans.iter().find(|s| is_root(s)).unwrap();
    assert_eq!(
        root["traceId"], caller_trace,
        "continues the caller's trace"
    );
    assert_eq!(root["parentSpanId"], caller_span);
    assert_eq!(root["kind"], 2);
    assert_eq!(root["service.name"], "gw-test");
    assert_eq!(attr(root, "gen_ai.request.model"), "m");
    assert_eq!(attr(root, "gateway.channel"), "mock-openai");
    assert_eq!(attr(root, "gateway.protocol"), "chat");
    assert_eq!(attr(root, "http.response.status_code"), "200");
    assert_eq!(attr(root, "gen_ai.usage.input_tokens"), "10");
    assert_eq!(attr(root, "gen_ai.usage.output_tokens"), "20");
    assert!(attr(root, "gateway.cost_usd").as_f64().unwrap() > 0.0);
    let children: Vec<&str> = spans
        .iter()
        .filter(|s| s["parentSpanId"] == root["spanId"])
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for step in [
        "store.reserve",
        "upstream.connect",
        "upstream.first_byte",
        "store.settle",
    ] {
        assert!(children.contains(&step), "{step} missing from {children:?}");
    }
    let start: u128 = root["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
    let end: u128 = root["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
    assert!(end > start);
    assert_eq!(otlp.header("x-collector-key").as_deref(), Some("abc"));
    assert!(
        !serde_json::to_string(&spans).unwrap().contains(&key),
        "no key in spans"
    );
}

#[tokio::test]
async fn an_open_circuit_takes_a_failing_channel_out_and_a_probe_brings_it_back() {
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let flaky = MockUpstream::start(move |r| {
        if h.load(Ordering::SeqCst) {
            let model = r.json()["model"].as_str().unwrap_or("m").to_string();
            Reply::json(
                200,
                openai::completion(&model, "flaky", openai::usage(1, 1, 0)),
            )
        } else {
            Reply::json(503, json!({"error": {"message": "overloaded"}}))
        }
    })
    .await;
    let steady = completion_upstream().await;
    let body = format!(
        "circuit: {{ failures: 2, cooldown_secs: 1 }}\nchannels:\n  - {{ name: flaky, protocol: openai, base_url: \"{}\", models: [m], priority: 0 }}\n  - {{ name: steady, protocol: openai, base_url: \"{}\", models: [m], priority: 1 }}\nprices:\n  m: {{ input: 1.0, output: 2.0 }}\n",
        flaky.base_url(),
        steady.base_url()
    );
    let gw = TestGateway::start(&body, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    // The first two reach the failing channel; a request an upstream saw is never
    // retried elsewhere (spec 7.3), so they fail.
    for _ in 0..2 {
        let (s, _, _) = gw
            .post("/v1/chat/completions", &key, &chat("m", false))
            .await;
        assert_eq!(s, 500);
    }
    let channel = |v: &Value, name: &str| {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let (_, v) = gw.admin_get("/admin/channels").await;
    let f = channel(&v, "flaky");
    assert_eq!(f["state"], "open", "{v}");
    assert_eq!(f["last_error"], "status_5xx");
    assert_eq!(f["recent_error_rate"], 1.0);
    // Open: the next requests skip it, before anything is sent to it.
    let seen = flaky.requests().len();
    for _ in 0..3 {
        let (s, _, body) = gw
            .post("/v1/chat/completions", &key, &chat("m", false))
            .await;
        assert_eq!(s, 200, "{body}");
    }
    assert_eq!(
        flaky.requests().len(),
        seen,
        "an open circuit sends nothing"
    );
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, "mg_channel_state", &[("channel", "flaky")]),
        Some(2.0)
    );
    assert_eq!(
        metric(
            &text,
            "mg_upstream_errors_total",
            &[("channel", "flaky"), ("kind", "status_5xx")]
        ),
        Some(2.0)
    );
    assert_eq!(
        metric(
            &text,
            "mg_channel_circuit_opened_total",
            &[("channel", "flaky")]
        ),
        Some(1.0)
    );
    // The upstream recovers; after the cool-down one request probes it and closes it.
    healthy.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _, body) = gw
            .post("/v1/chat/completions", &key, &chat("m", false))
            .await;
        assert_eq!(s, 200);
        if body.contains("flaky") {
            break;
        }
        assert!(Instant::now() < deadline, "no probe after the cool-down");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, v) = gw.admin_get("/admin/channels").await;
    assert_eq!(channel(&v, "flaky")["state"], "closed", "{v}");
}

#[tokio::test]
async fn upstream_keys_are_used_in_turn_and_a_refused_one_is_set_aside() {
    let up = MockUpstream::start(|r| {
        if r.header("authorization") == Some("Bearer key-two") {
            return Reply::json(401, json!({"error": {"message": "invalid key"}}));
        }
        Reply::json(200, openai::completion("m", "ok", openai::usage(1, 1, 0)))
    })
    .await;
    let body = format!(
        "channels:\n  - {{ name: c, protocol: openai, base_url: \"{}\", models: [m], api_keys: [key-one, key-two, key-three] }}\nprices:\n  m: {{ input: 1.0, output: 2.0 }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&body, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let mut statuses = Vec::new();
    for _ in 0..9 {
        let (s, _, _) = gw
            .post("/v1/chat/completions", &key, &chat("m", false))
            .await;
        statuses.push(s);
    }
    let used: Vec<String> = up
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_string())
        .collect();
    assert_eq!(
        &used[..3],
        ["Bearer key-one", "Bearer key-two", "Bearer key-three"],
        "in turn"
    );
    assert_eq!(
        used.iter().filter(|k| k.ends_with("key-two")).count(),
        1,
        "a refused key is not used again: {used:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s != 200).count(),
        1,
        "{statuses:?}"
    );
    let (_, v) = gw.admin_get("/admin/channels").await;
    let keys = &v["data"][0]["keys"];
    assert_eq!(keys[1]["state"], "set_aside", "{v}");
    assert_eq!(keys[1]["refused_with"], 401);
    assert_eq!(keys[0]["state"], "in_use");
    assert_eq!(
        v["data"][0]["state"], "closed",
        "a refused key is not the channel's fault"
    );
    let shown = v.to_string();
    assert!(
        !shown.contains("key-two") && !shown.contains("key-one"),
        "{shown}"
    );
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, "mg_channel_keys_set_aside", &[("channel", "c")]),
        Some(1.0)
    );
}

fn priced(base: &str, output_price: f64) -> String {
    format!(
        "channels:\n  - {{ name: c, protocol: openai, base_url: \"{base}\", models: [m] }}\nprices:\n  m: {{ input: 1.0, output: {output_price} }}\n"
    )
}

#[tokio::test]
async fn a_reload_swaps_the_configuration_and_requests_in_flight_keep_theirs() {
    // A stream of 40 pieces, 50 ms apart, usage at the end.
    let slow = MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap_or("m").to_string();
        let pieces = vec!["w"; 40];
        let events = openai::stream(&model, &pieces, Some(openai::usage(10, 40, 0)));
        Reply::sse(&events, Duration::from_millis(50), End::Clean)
    })
    .await;
    let other = completion_upstream().await;
    let store = StoreKind::Embedded;
    let (gw, path) =
        TestGateway::start_from_file(&priced(&slow.base_url(), 2.0), store.clone()).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 5.0})).await;
    let r = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat("m", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert!(!first.is_empty());

    // A file that fails validation changes nothing and names the field.
    std::fs::write(
        &path,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace("protocol: openai", "protocol: opneai"),
    )
    .unwrap();
    let (s, v) = admin_post(&gw, "/admin/reload").await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "channels[0].protocol", "{v}");
    let ready: Value = gw
        .http
        .get(format!("{}/readyz", gw.admin))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(ready["last_reload_error"]
        .as_str()
        .unwrap()
        .contains("channels[0].protocol"));

    // Now a good one: another upstream, output twice the price.
    gw.rewrite(&path, &priced(&other.base_url(), 4.0), &store);
    let (s, v) = admin_post(&gw, "/admin/reload").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["generation"], 2);
    assert_eq!(v["restart_required"], json!([]));
    let (s, _, _) = gw
        .post("/v1/chat/completions", &key, &chat("m", false))
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        other.requests().len(),
        1,
        "new requests take the new channel"
    );

    // The stream that started before the reload finishes whole, on its own terms.
    let mut text = String::from_utf8_lossy(&first).to_string();
    while let Some(chunk) = stream.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(text.contains("[DONE]"), "{text}");
    assert_eq!(text.matches("\"content\":\"w\"").count(), 40);
    assert_eq!(slow.requests().len(), 1);
    let records = gw
        .running
        .gateway
        .store
        .recent_usage(&id, 10)
        .await
        .unwrap();
    assert_eq!(records.len(), 2);
    let streamed = records.iter().find(|r| r.stream).unwrap();
    let fresh = records.iter().find(|r| !r.stream).unwrap();
    assert_eq!(
        streamed.cost,
        10 + 40 * 2,
        "billed at the price it started with"
    );
    assert_eq!(fresh.cost, 10 + 20 * 4, "billed at the reloaded price");
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, "mg_config_reloads_total", &[("result", "ok")]),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "mg_config_reloads_total", &[("result", "invalid")]),
        Some(1.0)
    );
    // Fields that only take effect at a start are reported and kept.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("threads: 2", "threads: 3")).unwrap();
    let (s, v) = admin_post(&gw, "/admin/reload").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["restart_required"], json!(["threads"]));
    assert_eq!(gw.running.live.current().config.threads, Some(2));
    let r = gw
        .http
        .post(format!("{}/admin/reload", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "reload wants the admin token");
}
