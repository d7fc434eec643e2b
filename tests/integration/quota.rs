//! Reserve-then-settle under concurrency: no key ever spends past its cap (spec 2.1).

use crate::gateway::{chat, error_of, StoreKind, TestGateway};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use crate::redis_server::RedisServer;
use serde_json::{json, Value};
use std::time::Duration;

/// An upstream that honours the request's output limit, as real ones do, and otherwise
/// answers with 100 output tokens.
pub(crate) async fn honest_upstream() -> MockUpstream {
    honest_upstream_after(Duration::ZERO).await
}

/// [`honest_upstream`], answering each request after `delay`.
pub(crate) async fn honest_upstream_after(delay: Duration) -> MockUpstream {
    MockUpstream::start(move |r| {
        let b = r.json();
        let limit = b["max_completion_tokens"]
            .as_u64()
            .or(b["max_tokens"].as_u64())
            .unwrap_or(u64::MAX);
        let out = limit.min(100);
        let reply = Reply::json(200, openai::completion("m", "x", openai::usage(10, out, 0)));
        if delay.is_zero() {
            reply
        } else {
            Reply::Delayed(delay, Box::new(reply))
        }
    })
    .await
}

/// One channel serving model `m`, priced so an answer of 10 + 100 tokens costs 210
/// micro-USD.
pub(crate) fn config(base: &str) -> String {
    // 1 micro-USD per input token, 2 per output token.
    format!(
        "channels:\n  - {{ name: c, protocol: openai, base_url: \"{base}\", models: [m] }}\nprices:\n  m: {{ input: 1.0, output: 2.0 }}\n"
    )
}

/// Fires `n` concurrent requests spread over the gateways; returns the statuses.
pub(crate) async fn burst(gws: &[&TestGateway], key: &str, n: usize) -> Vec<u16> {
    let mut body = chat("m", false);
    body["max_tokens"] = json!(100);
    let mut tasks = Vec::new();
    for i in 0..n {
        let gw = gws[i % gws.len()];
        let (http, url, key, body) = (
            gw.http.clone(),
            gw.url("/v1/chat/completions"),
            key.to_string(),
            body.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let s = r.status().as_u16();
            let t = r.text().await.unwrap();
            if s != 200 {
                assert_eq!(error_of(&t)["code"], "insufficient_quota", "{t}");
            }
            s
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

async fn settled_total(gw: &TestGateway, key: &str) -> i64 {
    let (_, log) = gw.get("/api/log/token?limit=1000", key).await;
    log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cost_micro_usd"].as_i64().unwrap())
        .sum()
}

const CAP_USD: f64 = 0.001; // 1000 micro-USD: a few requests of at most ~400 each

async fn check_cap(gws: &[&TestGateway], id: &str, key: &str) {
    let statuses = burst(gws, key, 50).await;
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!(ok >= 2, "{statuses:?}");
    assert!(statuses.contains(&403), "{statuses:?}");
    let used = gws[0].used_micros(id).await;
    assert!(used <= 1000, "spent {used} micro-USD past a cap of 1000");
    assert_eq!(
        used,
        settled_total(gws[0], key).await,
        "used equals the sum of settled costs"
    );
    // Nothing is left reserved: what remains below the cap is what a new request needs.
    let (_, u) = gws[0].get("/api/usage/token", key).await;
    assert_eq!(u["used_micro_usd"], used);
    assert_eq!(u["available_micro_usd"], 1000 - used);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_on_two_instances_sharing_redis_never_pass_the_cap() {
    let redis = RedisServer::start().await;
    let up = honest_upstream().await;
    let a = TestGateway::start(&config(&up.base_url()), StoreKind::Redis(redis.url())).await;
    let b = TestGateway::start(&config(&up.base_url()), StoreKind::Redis(redis.url())).await;
    let (key, id) = a.create_key(json!({"quota_usd": CAP_USD})).await;
    check_cap(&[&a, &b], &id, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_on_the_embedded_store_never_pass_the_cap() {
    let up = honest_upstream().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": CAP_USD})).await;
    check_cap(&[&gw], &id, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_near_its_cap_gets_a_lowered_output_limit_not_an_overspend() {
    let up = honest_upstream().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    // Enough for the input bound and a few dozen output tokens, not for 100.
    let (key, id) = gw.create_key(json!({"quota_usd": 0.0003})).await;
    let mut body = chat("m", false);
    body["max_tokens"] = json!(100);
    let (s, _, t) = gw.post("/v1/chat/completions", &key, &body).await;
    assert_eq!(s, 200, "{t}");
    let sent = up.last().json();
    let limit = sent["max_tokens"].as_u64().unwrap();
    assert!(
        limit < 100,
        "output limit lowered to what the key can pay: {sent}"
    );
    assert!(gw.used_micros(&id).await <= 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_endpoint_reports_the_callers_own_key() {
    let up = honest_upstream().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw
        .create_key(
            json!({"quota_usd": 2.5, "models": ["m"], "expires_at": "2099-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        gw.post("/v1/chat/completions", &key, &chat("m", false))
            .await
            .0,
        200
    );
    assert_eq!(
        gw.post("/v1/chat/completions", &key, &json!({"model": "m"}))
            .await
            .0,
        400
    );
    let (s, u) = gw.get("/api/usage/token", &key).await;
    assert_eq!(s, 200);
    assert_eq!(u["unlimited"], false);
    assert_eq!(u["granted_usd"], 2.5);
    assert_eq!(u["used_micro_usd"], 10 + 200);
    assert_eq!(u["available_micro_usd"], 2_500_000 - 210);
    assert_eq!(u["model_limits"], json!(["m"]));
    assert_eq!(u["expires_at"], "2099-01-01T00:00:00Z");
    let (s, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(s, 200);
    let data = log["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[0]["status"], 400, "newest first");
    assert_eq!(data[1]["status"], 200);
    assert!(
        data[0]["request_id"].as_str() > data[1]["request_id"].as_str()
            || data[0]["created_at_ms"].as_i64() >= data[1]["created_at_ms"].as_i64()
    );
    let (s, v): (u16, Value) = gw.get("/api/log/token?limit=0", &key).await;
    assert_eq!((s, v["error"]["param"].as_str()), (400, Some("limit")));
}
