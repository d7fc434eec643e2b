//! Authentication and per-key rules (spec 5, 7).

use crate::gateway::{chat, error_of, openai_channel, StoreKind, TestGateway};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use reqwest::Method;
use serde_json::{json, Value};

async fn upstream() -> MockUpstream {
    MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap_or("m").to_string();
        Reply::json(
            200,
            openai::completion(&model, "ok", openai::usage(1, 1, 0)),
        )
    })
    .await
}

async fn status_with(
    gw: &TestGateway,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String) {
    let mut req = match body {
        Some(b) => gw.http.post(gw.url(path)).json(b),
        None => gw.http.get(gw.url(path)),
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_credential_form_of_section_5() {
    let up = upstream().await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let body = chat("m", false);
    for auth in [
        format!("Bearer {key}"),
        format!("bearer {key}"),
        format!("BEARER {key}"),
        key.clone(),
    ] {
        let (s, t) = status_with(
            &gw,
            "/v1/chat/completions",
            &[("authorization", &auth)],
            Some(&body),
        )
        .await;
        assert_eq!(s, 200, "{auth}: {t}");
    }
    // The organization header is accepted and ignored (spec 5.4).
    let (s, _) = status_with(
        &gw,
        "/v1/models",
        &[
            ("authorization", &format!("Bearer {key}")),
            ("openai-organization", "org-x"),
        ],
        None,
    )
    .await;
    assert_eq!(s, 200);
    // x-api-key on /v1/models (and /v1/messages), not on chat.
    assert_eq!(
        status_with(&gw, "/v1/models", &[("x-api-key", &key)], None)
            .await
            .0,
        200
    );
    assert_eq!(
        status_with(
            &gw,
            "/v1/chat/completions",
            &[("x-api-key", &key)],
            Some(&body)
        )
        .await
        .0,
        401
    );
    // Generate-content paths: the neutral header, the SDK's header, and ?key=.
    assert_eq!(
        status_with(&gw, "/v1beta/models", &[("x-gen-api-key", &key)], None)
            .await
            .0,
        200
    );
    assert_eq!(
        status_with(&gw, "/v1beta/models", &[("x-goog-api-key", &key)], None)
            .await
            .0,
        200
    );
    assert_eq!(
        status_with(&gw, &format!("/v1beta/models?key={key}"), &[], None)
            .await
            .0,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_malformed_and_unknown_keys_are_401() {
    let up = upstream().await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let body = chat("m", false);
    let unknown = format!("sk-{}", "A".repeat(48));
    for (headers, code) in [
        (vec![], "missing_api_key"),
        (
            vec![("authorization", "Bearer sk-short")],
            "invalid_api_key",
        ),
        (
            vec![("authorization", "Bearer not-a-key-at-all")],
            "invalid_api_key",
        ),
        (vec![("authorization", unknown.as_str())], "invalid_api_key"),
    ] {
        let (s, t) = status_with(&gw, "/v1/chat/completions", &headers, Some(&body)).await;
        assert_eq!(s, 401, "{headers:?}");
        assert_eq!(error_of(&t)["code"], code);
    }
    assert!(up.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_keys_are_403_with_the_reason() {
    let up = upstream().await;
    let cfg = openai_channel(&up.base_url(), &["m", "other"]);
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let body = chat("m", false);

    let (disabled, id) = gw.create_key(json!({})).await;
    let (s, _) = gw
        .admin_send(
            Method::PATCH,
            &format!("/admin/keys/{id}"),
            Some(json!({"status": "disabled"})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, _, t) = gw.post("/v1/chat/completions", &disabled, &body).await;
    assert_eq!(
        (s, error_of(&t)["code"].clone()),
        (403, json!("key_disabled"))
    );

    let (expired, _) = gw
        .create_key(json!({"expires_at": "2020-01-01T00:00:00Z"}))
        .await;
    let (s, _, t) = gw.post("/v1/chat/completions", &expired, &body).await;
    assert_eq!(
        (s, error_of(&t)["code"].clone()),
        (403, json!("key_expired"))
    );

    let (limited, _) = gw.create_key(json!({"models": ["other"]})).await;
    let (s, _, t) = gw.post("/v1/chat/completions", &limited, &body).await;
    assert_eq!(s, 403);
    let e = error_of(&t);
    assert_eq!(e["code"], "model_not_allowed");
    assert_eq!(e["param"], "model");
    assert!(e["message"].as_str().unwrap().contains("`m`"));

    let (fenced, _) = gw
        .create_key(json!({"allow_ips": ["10.0.0.0/8", "2001:db8::/32"]}))
        .await;
    let (s, _, t) = gw.post("/v1/chat/completions", &fenced, &body).await;
    assert_eq!(
        (s, error_of(&t)["code"].clone()),
        (403, json!("ip_not_allowed"))
    );

    let (broke, _) = gw.create_key(json!({"quota_usd": 0})).await;
    let (s, _, t) = gw.post("/v1/chat/completions", &broke, &body).await;
    assert_eq!(
        (s, error_of(&t)["code"].clone()),
        (403, json!("insufficient_quota"))
    );
    assert!(
        up.requests().is_empty(),
        "no rejected request reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_is_believed_only_from_trusted_proxies() {
    let up = upstream().await;
    let body_cfg = openai_channel(&up.base_url(), &["m"]);
    let body = chat("m", false);
    // Untrusted peer: the header is ignored, the TCP peer (127.0.0.1) is not allowed.
    let gw = TestGateway::start(&body_cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"allow_ips": ["10.1.1.1"]})).await;
    let auth = format!("Bearer {key}");
    let h = [
        ("authorization", auth.as_str()),
        ("x-forwarded-for", "10.1.1.1"),
    ];
    assert_eq!(
        status_with(&gw, "/v1/chat/completions", &h, Some(&body))
            .await
            .0,
        403
    );
    // Trusted peer: the forwarded address is the client.
    let gw = TestGateway::start(
        &format!("trusted_proxies: [127.0.0.1]\n{body_cfg}"),
        StoreKind::Embedded,
    )
    .await;
    let (key, _) = gw.create_key(json!({"allow_ips": ["10.1.1.1"]})).await;
    let auth = format!("Bearer {key}");
    let h = [
        ("authorization", auth.as_str()),
        ("x-forwarded-for", "10.1.1.1"),
    ];
    assert_eq!(
        status_with(&gw, "/v1/chat/completions", &h, Some(&body))
            .await
            .0,
        200
    );
    let h = [
        ("authorization", auth.as_str()),
        ("x-forwarded-for", "10.1.1.2"),
    ];
    assert_eq!(
        status_with(&gw, "/v1/chat/completions", &h, Some(&body))
            .await
            .0,
        403
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_minute_give_429_without_retry_after() {
    let up = upstream().await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"rpm": 3})).await;
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let (s, h, t) = gw
            .post("/v1/chat/completions", &key, &chat("m", false))
            .await;
        if s == 429 {
            assert!(h.get("retry-after").is_none());
            assert_eq!(error_of(&t)["code"], "rate_limited");
        }
        statuses.push(s);
    }
    // At most `rpm` pass per one-minute window; seven requests span at most two windows.
    assert_eq!(&statuses[..3], &[200, 200, 200], "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().filter(|s| **s == 200).count() <= 6,
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_and_update_take_effect_at_once_on_the_same_instance() {
    let up = upstream().await;
    let gw = TestGateway::start(&openai_channel(&up.base_url(), &["m"]), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    assert_eq!(
        gw.post("/v1/chat/completions", &key, &chat("m", false))
            .await
            .0,
        200
    );
    let (s, _) = gw
        .admin_send(Method::DELETE, &format!("/admin/keys/{id}"), None)
        .await;
    assert_eq!(s, 200);
    let (s, _, t) = gw
        .post("/v1/chat/completions", &key, &chat("m", false))
        .await;
    assert_eq!(s, 401, "{t}");
}
