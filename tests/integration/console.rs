//! The console and the admin endpoints it reads, over HTTP on a real gateway:
//! - every admin endpoint refuses a missing or wrong token, and every answer of the admin
//!   listener carries the security headers (a strict CSP, no framing, no sniffing);
//! - the console's page is served from the binary with no inline script or style;
//! - usage records are filtered, found by request id and summed into spend buckets, on
//!   both stores;
//! - a key's full value appears in no answer after the one that created it.

use crate::gateway::{chat, StoreKind, TestGateway, ADMIN_TOKEN};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use crate::redis_server::RedisServer;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const UPSTREAM_KEY: &str = "upstream-secret-key";

/// `m1` and `m2` answer; `broken` fails upstream with a 500.
async fn upstream() -> MockUpstream {
    MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap_or("m").to_string();
        if model == "broken" {
            return Reply::json(500, json!({"error": {"message": "upstream exploded"}}));
        }
        Reply::json(
            200,
            openai::completion(&model, "hi", openai::usage(100, 20, 0)),
        )
    })
    .await
}

fn config(base_url: &str) -> String {
    format!(
        "channels:\n  - {{ name: primary, protocol: openai, base_url: \"{base_url}\", api_key: {UPSTREAM_KEY}, models: [m1, m2, broken] }}\nprices:\n  m1: {{ input: 1.0, output: 2.0 }}\n  m2: {{ input: 3.0, output: 4.0 }}\n  broken: {{ input: 1.0, output: 1.0 }}\n"
    )
}

fn assert_secure(h: &reqwest::header::HeaderMap, what: &str) {
    let csp = h
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("{what}: no CSP"));
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{what}: CSP {csp} lacks {part}");
    }
    assert!(!csp.contains("unsafe"), "{what}: CSP {csp}");
    assert_eq!(h["x-frame-options"], "DENY", "{what}");
    assert_eq!(h["x-content-type-options"], "nosniff", "{what}");
    assert!(h.get("set-cookie").is_none(), "{what}: sets a cookie");
}

/// Every admin endpoint, as (method, path).
const ENDPOINTS: [(&str, &str); 16] = [
    ("GET", "/admin/keys"),
    ("POST", "/admin/keys"),
    ("GET", "/admin/keys/some-id"),
    ("PATCH", "/admin/keys/some-id"),
    ("DELETE", "/admin/keys/some-id"),
    ("GET", "/admin/groups"),
    ("POST", "/admin/groups"),
    ("GET", "/admin/groups/some-id"),
    ("PATCH", "/admin/groups/some-id"),
    ("DELETE", "/admin/groups/some-id"),
    ("GET", "/admin/usage"),
    ("GET", "/admin/usage/0194c6d2a1b2c3d4e5f6a7b8c9d0"),
    ("GET", "/admin/spend"),
    ("GET", "/admin/catalog"),
    ("GET", "/admin/channels"),
    ("GET", "/admin/nothing-here"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_endpoint_refuses_a_missing_or_wrong_token() {
    let gw = TestGateway::start(&config("http://127.0.0.1:9"), StoreKind::Embedded).await;
    let wrong = [
        None,
        Some("Bearer wrong-token".to_string()),
        Some(format!("Bearer {ADMIN_TOKEN}x")),
        Some(format!("Basic {ADMIN_TOKEN}")),
        Some(ADMIN_TOKEN.to_string()),
        Some("Bearer ".to_string()),
    ];
    for (method, path) in ENDPOINTS {
        for auth in &wrong {
            let mut req = gw
                .http
                .request(
                    Method::from_bytes(method.as_bytes()).unwrap(),
                    format!("{}{path}", gw.admin),
                )
                .body(r#"{"id": "x", "name": "x"}"#);
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let r = req.send().await.unwrap();
            let what = format!("{method} {path} with {auth:?}");
            assert_eq!(r.status(), 401, "{what}");
            assert_secure(r.headers(), &what);
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["error"]["code"], "invalid_admin_token", "{what}");
        }
    }
    // Nothing was created by the refused POSTs.
    let (s, keys) = gw.admin_get("/admin/keys").await;
    assert_eq!((s, keys["data"].as_array().unwrap().len()), (200, 0));
    let (s, groups) = gw.admin_get("/admin/groups").await;
    assert_eq!(
        (s, groups["data"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{groups}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_from_the_binary_under_a_strict_policy() {
    let gw = TestGateway::start(&config("http://127.0.0.1:9"), StoreKind::Embedded).await;
    let get = |path: &str| gw.http.get(format!("{}{path}", gw.admin)).send();
    let page = get("/console").await.unwrap();
    assert_eq!(page.status(), 200);
    assert_secure(page.headers(), "page");
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script type=\"module\" crossorigin src=\"/console/")
            .count(),
        "every script is a file of this origin: {html}"
    );
    assert!(
        !html.contains("<style") && !html.contains(" style="),
        "{html}"
    );
    for (path, ty) in [
        ("/console/assets/app.js", "text/javascript"),
        ("/console/assets/app.css", "text/css"),
        ("/console/favicon.svg", "image/svg+xml"),
    ] {
        let r = get(path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_secure(r.headers(), path);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with(ty));
        let tag = r.headers()["etag"].to_str().unwrap().to_string();
        assert!(!r.bytes().await.unwrap().is_empty());
        let again = gw
            .http
            .get(format!("{}{path}", gw.admin))
            .header("if-none-match", &tag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path} revalidates");
    }
    let root = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (root.status().as_u16(), &root.headers()["location"]),
        (
            302,
            &"/console".parse::<reqwest::header::HeaderValue>().unwrap()
        )
    );
    let missing = get("/console/assets/other.js").await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_secure(missing.headers(), "missing file");
    let post = gw
        .http
        .post(format!("{}/console", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
}

/// Polls until `/admin/usage` holds `n` records (the last record of a request is written
/// as its answer goes out).
async fn wait_for_records(gw: &TestGateway, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = gw.admin_get("/admin/usage").await;
        assert_eq!(s, 200, "{v}");
        let data = v["data"].as_array().unwrap().clone();
        if data.len() >= n {
            return data;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records: {v}",
            data.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn usage_spend_and_lookup(store: StoreKind) {
    let up = upstream().await;
    let gw = TestGateway::start(&config(&up.base_url()), store).await;
    let (key_a, id_a) = gw
        .create_key(json!({"name": "alpha", "quota_usd": 5}))
        .await;
    let (key_b, id_b) = gw.create_key(json!({"name": "beta"})).await;
    for (key, model) in [(&key_a, "m1"), (&key_a, "m1"), (&key_b, "m2")] {
        let (s, _, body) = gw
            .post("/v1/chat/completions", key, &chat(model, false))
            .await;
        assert_eq!(s, 200, "{body}");
    }
    let (s, _, body) = gw
        .post("/v1/chat/completions", &key_a, &chat("broken", false))
        .await;
    assert_eq!(s, 500, "{body}");
    let msg = crate::gateway::error_of(&body)["message"]
        .as_str()
        .unwrap()
        .to_string();
    let failed_id = msg
        .rsplit("(request id: ")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .to_string();

    let all = wait_for_records(&gw, 4).await;
    assert_eq!(all.len(), 4);
    assert_eq!(all[0]["request_id"], failed_id.as_str(), "newest first");
    assert_eq!(all[0]["key_name"], "alpha");
    assert!(all[0]["key_display"].as_str().unwrap().starts_with("sk-"));
    let count = |q: &'static str| {
        let gw = &gw;
        async move {
            let (s, v) = gw.admin_get(&format!("/admin/usage?{q}")).await;
            assert_eq!(s, 200, "{q}: {v}");
            v["data"].as_array().unwrap().len()
        }
    };
    assert_eq!(count("limit=2").await, 2);
    assert_eq!(count("model=m2").await, 1);
    assert_eq!(count("status=error").await, 1);
    assert_eq!(count("status=2xx").await, 3);
    assert_eq!(count("status=500").await, 1);
    assert_eq!(count("from=2999-01-01T00:00:00Z").await, 0);
    assert_eq!(count("to=2000-01-01T00:00:00Z").await, 0);
    let (_, v) = gw.admin_get(&format!("/admin/usage?key={id_a}")).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 3);
    let (_, v) = gw
        .admin_get(&format!("/admin/usage?key={id_b}&model=m2"))
        .await;
    assert_eq!(
        v["data"][0]["cost_usd"], 0.00038,
        "100 in at $3/M + 20 out at $4/M"
    );

    // The id from the error message finds the record.
    let (s, r) = gw.admin_get(&format!("/admin/usage/{failed_id}")).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        (r["status"].as_u64(), r["model"].as_str()),
        (Some(500), Some("broken"))
    );
    assert_eq!(r["key_id"], id_a.as_str());
    for field in [
        "created_at",
        "endpoint",
        "channel",
        "latency_ms",
        "cost_estimated",
        "overrun_usd",
    ] {
        assert!(r.get(field).is_some(), "{field} in {r}");
    }
    let (s, e) = gw
        .admin_get("/admin/usage/0000000000000000000000000000")
        .await;
    assert_eq!(s, 404);
    assert_eq!(e["error"]["code"], "usage_record_not_found");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("(request id: "));

    // Spend: every record counted, by model, by key, and for one key.
    let (s, sp) = gw
        .admin_get("/admin/spend?bucket=hour&group_by=model")
        .await;
    assert_eq!(s, 200, "{sp}");
    assert_eq!(sp["totals"]["requests"], 4);
    assert_eq!(sp["totals"]["errors"], 1);
    // The last 24 hours touch 25 hour buckets (24 only on the hour exactly).
    assert!(
        (24..=25).contains(&sp["buckets"].as_array().unwrap().len()),
        "{sp}"
    );
    let names: Vec<&str> = sp["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"m1") && names.contains(&"m2"), "{names:?}");
    let cost: f64 = all.iter().map(|r| r["cost_usd"].as_f64().unwrap()).sum();
    assert!(
        (sp["totals"]["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9,
        "{sp}"
    );
    let m1 = sp["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "m1")
        .unwrap();
    assert_eq!(
        m1["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        2
    );
    let (_, by_key) = gw.admin_get("/admin/spend?bucket=day&group_by=key").await;
    assert_eq!(by_key["groups"].as_array().unwrap().len(), 2, "{by_key}");
    assert!((30..=31).contains(&by_key["buckets"].as_array().unwrap().len()));
    let (_, one) = gw
        .admin_get(&format!(
            "/admin/spend?key={id_a}&group_by=channel&utc_offset_minutes=120"
        ))
        .await;
    assert_eq!(one["totals"]["requests"], 3);
    assert_eq!(one["series"][0]["name"], "primary");

    // Refusals name the parameter.
    for (q, param) in [
        ("/admin/usage?modle=m1", "modle"),
        ("/admin/usage?status=teapot", "status"),
        ("/admin/usage?limit=0", "limit"),
        ("/admin/spend?bucket=week", "bucket"),
        ("/admin/spend?group_by=colour", "group_by"),
        ("/admin/spend?from=2000-01-01T00:00:00Z&bucket=hour", "from"),
        ("/admin/usage/has%20space", "request_id"),
    ] {
        let (s, e) = gw.admin_get(q).await;
        assert_eq!(
            (s, e["error"]["param"].as_str()),
            (400, Some(param)),
            "{q}: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_records_filter_look_up_and_sum_on_the_embedded_store() {
    usage_spend_and_lookup(StoreKind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_records_filter_look_up_and_sum_on_redis() {
    let redis = RedisServer::start().await;
    usage_spend_and_lookup(StoreKind::Redis(redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_key_appears_in_no_answer_after_its_creation() {
    let up = upstream().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (s, g) = gw
        .admin_send(
            Method::POST,
            "/admin/groups",
            Some(json!({"id": "team-a", "budget_day_usd": 5})),
        )
        .await;
    assert_eq!(s, 201, "{g}");
    let (secret, id) = gw
        .create_key(json!({"name": "once", "models": ["m1"], "group": "team-a", "tpm": 100000, "budget_day_usd": 2}))
        .await;
    let (s, _, body) = gw
        .post("/v1/chat/completions", &secret, &chat("m1", false))
        .await;
    assert_eq!(s, 200, "{body}");
    let recs = wait_for_records(&gw, 1).await;
    let rid = recs[0]["request_id"].as_str().unwrap().to_string();
    gw.admin_send(
        Method::PATCH,
        &format!("/admin/keys/{id}"),
        Some(json!({"name": "renamed"})),
    )
    .await;
    let paths = [
        "/admin/keys".to_string(),
        format!("/admin/keys/{id}"),
        "/admin/usage".into(),
        format!("/admin/usage?key={id}"),
        format!("/admin/usage/{rid}"),
        "/admin/spend?group_by=key".into(),
        format!("/admin/spend?key={id}"),
        "/admin/spend?group_by=group".into(),
        "/admin/spend?group=team-a".into(),
        "/admin/usage?group=team-a".into(),
        "/admin/groups".into(),
        "/admin/groups/team-a".into(),
        "/admin/catalog".into(),
    ];
    let upstream_host = up.addr.to_string();
    for path in &paths {
        let r = gw
            .http
            .get(format!("{}{path}", gw.admin))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_secure(r.headers(), path);
        let text = r.text().await.unwrap();
        assert!(!text.contains(&secret), "{path} shows the key");
        // Nor a channel's key or address.
        assert!(
            !text.contains(UPSTREAM_KEY) && !text.contains(&upstream_host),
            "{path}: {text}"
        );
    }
    let (_, patched) = gw
        .admin_send(
            Method::PATCH,
            &format!("/admin/keys/{id}"),
            Some(json!({"rpm": 5})),
        )
        .await;
    assert!(patched.get("key").is_none() && !patched.to_string().contains(&secret));
    for path in ["/console", "/console/assets/app.js"] {
        let text = gw
            .http
            .get(format!("{}{path}", gw.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!text.contains(&secret), "{path}");
    }
}

/// What the console shows when the admin API refuses a group: the error envelope's words
/// and the parameter they are about, never an empty answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_refusals_are_answered_in_words() {
    let gw = TestGateway::start(&config("http://127.0.0.1:9"), StoreKind::Embedded).await;
    let words = |v: &Value| v["error"]["message"].as_str().unwrap_or("").to_string();
    let (s, v) = gw
        .admin_send(Method::POST, "/admin/groups", Some(json!({"id": "a b"})))
        .await;
    assert_eq!((s, v["error"]["param"].as_str()), (400, Some("id")), "{v}");
    assert!(words(&v).contains("1 to 64"), "{v}");
    let (s, v) = gw
        .admin_send(
            Method::POST,
            "/admin/groups",
            Some(json!({"name": "no id"})),
        )
        .await;
    assert_eq!((s, v["error"]["param"].as_str()), (400, Some("id")), "{v}");
    let (s, v) = gw
        .admin_send(
            Method::POST,
            "/admin/groups",
            Some(json!({"id": "team-a", "time_zone": "Mars/Olympus"})),
        )
        .await;
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("time_zone")),
        "{v}"
    );
    let (s, v) = gw
        .admin_send(Method::POST, "/admin/groups", Some(json!({"id": "team-a"})))
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = gw
        .admin_send(Method::POST, "/admin/groups", Some(json!({"id": "team-a"})))
        .await;
    assert_eq!((s, v["error"]["param"].as_str()), (400, Some("id")), "{v}");
    let (s, v) = gw
        .admin_send(Method::POST, "/admin/keys", Some(json!({"group": "nope"})))
        .await;
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("group")),
        "{v}"
    );
    let (_, id) = gw.create_key(json!({"group": "team-a"})).await;
    let (s, v) = gw
        .admin_send(Method::DELETE, "/admin/groups/team-a", None)
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(words(&v).contains("still belong"), "{v}");
    let (s, v) = gw.admin_get("/admin/groups/team-a").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["keys"], json!([id]), "{v}");
    let (s, v) = gw.admin_get("/admin/groups/nope").await;
    assert_eq!(s, 404, "{v}");
    assert!(!words(&v).is_empty(), "{v}");
}
