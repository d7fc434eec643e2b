//! Endpoints answered by the gateway itself, and the error envelopes (spec 4.1, 4.2,
//! 4.23, 7).

use crate::gateway::{error_of, openai_channel, StoreKind, TestGateway};
use crate::mock_upstream::{MockUpstream, Reply};
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_lists_in_three_formats_filtered_by_the_whitelist() {
    let up = MockUpstream::start(|_| Reply::json(200, json!({}))).await;
    let gw = TestGateway::start(
        &openai_channel(&up.base_url(), &["a", "b", "c"]),
        StoreKind::Embedded,
    )
    .await;
    let (key, _) = gw.create_key(json!({"models": ["a", "c"]})).await;

    let (s, v) = gw.get("/v1/models", &key).await;
    assert_eq!(s, 200);
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "c"]);
    for m in v["data"].as_array().unwrap() {
        assert_eq!(m["object"], "model");
        assert!(m["created"].is_i64() && m["owned_by"].is_string());
    }

    let r = gw
        .http
        .get(gw.url("/v1/models"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["data"][1]["id"], "c");
    assert_eq!(v["has_more"], false);
    let r = gw
        .http
        .get(gw.url("/v1/models"))
        .header("x-api-key", &key)
        .header("msg-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["data"][0]["type"], "model");

    for req in [
        gw.http
            .get(gw.url("/v1/models"))
            .header("x-gen-api-key", &key),
        gw.http.get(gw.url(&format!("/v1/models?key={key}"))),
        gw.http
            .get(gw.url("/v1beta/models"))
            .header("x-goog-api-key", &key),
    ] {
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        let names: Vec<&str> = v["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["models/a", "models/c"]);
        assert!(v["models"][0]["displayName"].is_string());
    }
    let (s, v) = gw.get("/v1beta/models/c", &key).await;
    assert_eq!((s, v["name"].as_str()), (200, Some("models/c")));
    assert_eq!(gw.get("/v1beta/models/b", &key).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_but_unimplemented_paths_are_501_unknown_404_wrong_method_405() {
    let up = MockUpstream::start(|_| Reply::json(200, json!({}))).await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let cases: &[(&str, &str, u16)] = &[
        ("GET", "/v1/fine-tunes", 501),
        ("POST", "/v1/fine-tunes", 501),
        ("GET", "/v1/fine-tunes/ft-1", 501),
        ("POST", "/v1/fine-tunes/ft-1/cancel", 501),
        ("GET", "/v1/fine-tunes/ft-1/events", 501),
        ("GET", "/v1/files", 501),
        ("POST", "/v1/files", 501),
        ("GET", "/v1/files/f-1", 501),
        ("DELETE", "/v1/files/f-1", 501),
        ("GET", "/v1/files/f-1/content", 501),
        ("GET", "/v1/nothing-here", 404),
        ("GET", "/", 404),
        ("PUT", "/v1/files/f-1", 405),
        ("GET", "/v1/chat/completions", 405),
        ("DELETE", "/v1/models", 405),
    ];
    for (m, path, want) in cases {
        let r = gw
            .http
            .request(Method::from_bytes(m.as_bytes()).unwrap(), gw.url(path))
            .bearer_auth(&key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), *want, "{m} {path}");
        assert!(r.headers().get("x-request-id").is_some());
        error_of(&r.text().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_json_and_bad_fields_are_400_naming_the_field_before_any_upstream_call() {
    let up = MockUpstream::start(|_| Reply::json(200, json!({}))).await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;
    let raw = |body: &'static str| {
        gw.http
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body)
    };
    for (body, param) in [
        (r#"{"model": "m", "messages": [}"#, None),
        (
            r#"{"messages": [{"role": "user", "content": "x"}]}"#,
            Some("model"),
        ),
        (
            r#"{"model": 123, "messages": [{"role": "user", "content": "x"}]}"#,
            Some("model"),
        ),
        (r#"{"model": "m"}"#, Some("messages")),
        (r#"{"model": "m", "messages": "hi"}"#, Some("messages")),
    ] {
        let r = raw(body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let e = error_of(&r.text().await.unwrap());
        if let Some(p) = param {
            assert_eq!(
                e["param"]
                    .as_str()
                    .map(|s| s.split(['[', '.']).next().unwrap()),
                Some(p),
                "{body}: {e}"
            );
        }
    }
    let (s, _, t) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(s, 404);
    assert_eq!(error_of(&t)["code"], "model_not_found");
    assert!(up.requests().is_empty());
    assert_eq!(gw.used_micros(&id).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpriced_model_is_refused() {
    let up = MockUpstream::start(|_| Reply::json(200, json!({}))).await;
    let cfg = format!(
        "channels:\n  - {{ name: c, protocol: openai, base_url: \"{}\", models: [free-lunch] }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let (s, _, t) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "free-lunch", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(s, 403);
    assert_eq!(error_of(&t)["code"], "model_not_priced");
    assert!(up.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_paths_answer_errors_in_the_messages_shape() {
    let up = MockUpstream::start(|_| Reply::json(200, json!({}))).await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let r = gw
        .http
        .post(gw.url("/v1/messages"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("(request id: "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_manages_keys_and_never_shows_the_secret_again() {
    let up = MockUpstream::start(|_| Reply::json(200, json!({}))).await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, id) = gw
        .create_key(json!({"name": "team-a", "models": ["m"], "quota_usd": 12.5, "expires_at": "2099-01-01T00:00:00Z",
                           "allow_ips": ["10.0.0.0/8", "2001:db8::1"], "rpm": 60}))
        .await;
    assert!(key.starts_with("sk-") && key.len() == 51);
    let (s, v) = gw.admin_get(&format!("/admin/keys/{id}")).await;
    assert_eq!(s, 200);
    assert_eq!(v["name"], "team-a");
    assert_eq!(v["quota_usd"], 12.5);
    assert_eq!(v["used_usd"], 0.0);
    assert_eq!(v["expires_at"], "2099-01-01T00:00:00Z");
    assert_eq!(v["allow_ips"], json!(["10.0.0.0/8", "2001:db8::1/128"]));
    assert_eq!(v["rpm"], 60);
    assert!(v.get("key").is_none());
    assert!(!v.to_string().contains(&key[10..]), "secret shown again");
    let (s, v) = gw
        .admin_send(
            Method::PATCH,
            &format!("/admin/keys/{id}"),
            Some(json!({"quota_usd": null, "rpm": null, "name": "b"})),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        (v["quota_usd"].clone(), v["rpm"].clone(), v["name"].clone()),
        (Value::Null, Value::Null, json!("b"))
    );
    let (s, v) = gw.admin_get("/admin/keys").await;
    assert_eq!(s, 200);
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    let (s, v) = gw
        .admin_send(
            Method::PATCH,
            &format!("/admin/keys/{id}"),
            Some(json!({"allow_ips": ["not-an-ip"]})),
        )
        .await;
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("allow_ips[0]"))
    );
    assert_eq!(
        gw.admin_send(Method::DELETE, &format!("/admin/keys/{id}"), None)
            .await
            .0,
        200
    );
    assert_eq!(gw.admin_get(&format!("/admin/keys/{id}")).await.0, 404);
    // Without the admin token.
    let r = gw
        .http
        .get(format!("{}/admin/keys", gw.admin))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}
