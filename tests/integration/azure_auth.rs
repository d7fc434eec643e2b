//! Azure channels' authentication: Entra ID tokens that lapse, a refused grant, a refused
//! resource key, the mock's own refusals, and `check-config`.

use crate::azure::{ask, mock, KEY_1, KEY_2, PRICE};
use crate::azure_mock::{CLIENT_ID, CLIENT_SECRET, TENANT};
use crate::gateway::{config_text, StoreKind, TestGateway};
use crate::protocols::Client;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn entra_config(base: &str, token_url: &str, secret: &str) -> String {
    format!(
        "channels:\n\
         \x20 - name: az-entra\n\
         \x20   protocol: azure\n\
         \x20   base_url: \"{base}\"\n\
         \x20   api_version: \"2024-10-21\"\n\
         \x20   entra: {{ tenant_id: {TENANT}, client_id: {CLIENT_ID}, client_secret: {secret}, token_url: \"{token_url}\" }}\n\
         \x20   models: [gpt-4o]\n\
         \x20   model_map: {{ gpt-4o: gpt4o-prod }}\n\
         \x20   circuit: {{ failures: 1, cooldown_secs: 600 }}\n\
         \x20 - name: az-key\n\
         \x20   protocol: azure\n\
         \x20   base_url: \"{base}\"\n\
         \x20   api_version: v1\n\
         \x20   api_key: {KEY_1}\n\
         \x20   priority: 1\n\
         \x20   models: [gpt-4o]\n\
         \x20   model_map: {{ gpt-4o: gpt4o-prod }}\n\
         prices:\n{PRICE}"
    )
}

fn channel<'a>(channels: &'a Value, name: &str) -> &'a Value {
    channels["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entra_token_that_lapses_mid_run_is_renewed_while_requests_keep_succeeding() {
    // Tokens live two seconds: the gateway renews each at half its life.
    let up = mock(Duration::from_secs(2)).await;
    let cfg = entra_config(&up.base_url(), &up.token_url(), CLIENT_SECRET);
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent = 0;
    // Requests, two at a time, until the third token was issued (the first two lapsed).
    while up.state.grants.load(Ordering::SeqCst) < 3 {
        assert!(Instant::now() < deadline, "no renewal within 20 s");
        let (a, b) = tokio::join!(
            ask(&gw, Client::Chat, "gpt-4o", false, &key, "hi").send(),
            ask(&gw, Client::Messages, "gpt-4o", true, &key, "hi").send(),
        );
        for r in [a.unwrap(), b.unwrap()] {
            assert_eq!(r.status(), 200, "request {sent}");
            let _ = r.bytes().await.unwrap();
            sent += 2;
        }
    }
    assert_eq!(
        up.state.expired.load(Ordering::SeqCst),
        0,
        "never sent a lapsed token"
    );
    assert_eq!(up.state.unauthorized.load(Ordering::SeqCst), 0);
    let reqs = up.up.requests();
    let served: Vec<_> = reqs
        .iter()
        .filter(|r| r.path.starts_with("/openai/"))
        .collect();
    assert!(served
        .iter()
        .all(|r| r.path.starts_with("/openai/deployments/gpt4o-prod/")));
    assert!(served.iter().all(|r| r
        .header("authorization")
        .is_some_and(|a| a.starts_with("Bearer entra-token-"))));
    assert!(served.iter().all(|r| r.header("api-key").is_none()));
    // No request went to the second channel.
    let (_, channels) = gw.admin_get("/admin/channels").await;
    let entra = channel(&channels, "az-entra");
    assert_eq!(entra["auth"]["kind"], "entra", "{entra}");
    assert!(entra["auth"]["valid_until"].is_string(), "{entra}");
    assert!(entra["auth"]["last_refresh_error"].is_null(), "{entra}");
    let text = channels.to_string();
    assert!(
        !text.contains(CLIENT_SECRET) && !text.contains("entra-token-"),
        "{text}"
    );
    assert!(served.len() >= 6, "{}", served.len());
    // A token Azure stops taking (revoked) is dropped after its refusal: the next
    // request asks for a new one.
    up.state.revoke();
    let grants = up.state.grants.load(Ordering::SeqCst);
    let r = ask(&gw, Client::Chat, "gpt-4o", false, &key, "hi")
        .send()
        .await
        .unwrap();
    if r.status() != 200 {
        assert_eq!(r.status(), 500, "the credentials' refusal, sanitized");
        let body = r.text().await.unwrap();
        assert!(body.contains("refused the gateway's credentials"), "{body}");
        let r = ask(&gw, Client::Chat, "gpt-4o", false, &key, "hi")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert!(up.state.grants.load(Ordering::SeqCst) > grants);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_grant_fails_over_to_the_next_channel_and_shows_why() {
    let up = mock(Duration::from_secs(3600)).await;
    let cfg = entra_config(&up.base_url(), &up.token_url(), "a-wrong-secret");
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for stream in [false, true] {
        let r = ask(&gw, Client::Chat, "gpt-4o", stream, &key, "hi")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await.unwrap();
    }
    // One refused grant opened the circuit (failures: 1): asked once, not per request.
    assert_eq!(up.state.grants.load(Ordering::SeqCst), 0);
    let grants = up
        .up
        .requests()
        .iter()
        .filter(|r| r.path.contains("/oauth2/"))
        .count();
    assert_eq!(grants, 1);
    assert_eq!(up.up.last().path, "/openai/v1/chat/completions");
    let (_, channels) = gw.admin_get("/admin/channels").await;
    let entra = channel(&channels, "az-entra");
    assert_eq!(entra["state"], "open", "{entra}");
    let why = entra["auth"]["last_refresh_error"].as_str().unwrap();
    assert!(
        why.contains("401") && why.contains("invalid_client"),
        "{why}"
    );
    assert!(entra["auth"]["valid_until"].is_null());
    assert!(!channels.to_string().contains("a-wrong-secret"));
    assert!(!channels.to_string().contains("AADSTS"));
    assert_eq!(channel(&channels, "az-key")["auth"]["kind"], "api_key");
}

#[test]
fn check_config_names_the_azure_field_at_fault() {
    let dir = tempfile::tempdir().unwrap();
    let base =
        "  - { name: az, protocol: azure, base_url: \"https://r.openai.azure.com\", models: [m]";
    let entra = "entra: { tenant_id: t, client_id: c, client_secret: s }";
    for (fields, path) in [
        ("api_key: k", "channels[0].api_version"),
        ("api_key: k, api_version: latest", "channels[0].api_version"),
        ("api_version: v1", "channels[0].api_key"),
        (&format!("api_version: v1, api_key: k, {entra}") as &str, "channels[0].entra"),
        ("api_version: v1, entra: { tenant_id: t, client_id: c, client_secret: \"\" }", "channels[0].entra.client_secret"),
        ("api_version: v1, entra: { tenant_id: \"\", client_id: c, client_secret: s }", "channels[0].entra.tenant_id"),
        ("api_version: v1, entra: { tenant_id: t, client_id: c, client_secret: s, token_url: \"not a url\" }", "channels[0].entra.token_url"),
    ] {
        let text = config_text(&format!("channels:\n{base}, {fields} }}\n"), &StoreKind::Embedded, dir.path());
        let e = model_gateway::config::Config::parse(&text, dir.path()).err().unwrap_or_else(|| panic!("{fields} accepted"));
        assert_eq!(e.path, path, "{fields}: {e}");
    }
    // The Azure options on another protocol are refused, not ignored.
    let text = config_text(
        "channels:\n  - { name: o, protocol: openai, base_url: \"https://api.openai.com\", models: [m], api_version: v1 }\n",
        &StoreKind::Embedded,
        dir.path(),
    );
    let e = model_gateway::config::Config::parse(&text, dir.path())
        .err()
        .unwrap();
    assert_eq!(e.path, "channels[0].api_version");
    // And a good one passes `check-config`, the secret from the environment.
    let good = format!(
        "channels:\n{base}, api_version: \"2024-10-21\", entra: {{ tenant_id: t, client_id: c, client_secret: \"${{AZ_TEST_SECRET}}\" }} }}\nprices:\n  m: {{ input: 1, output: 1 }}\n"
    );
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, config_text(&good, &StoreKind::Embedded, dir.path())).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_model-gateway"))
        .args(["check-config", "--config"])
        .arg(&file)
        .env("AZ_TEST_SECRET", "s3cr3t")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_key_azure_refuses_is_set_aside_and_the_others_serve() {
    let up = mock(Duration::from_secs(3600)).await;
    let cfg = format!(
        "channels:\n  - {{ name: az, protocol: azure, base_url: \"{}\", api_version: v1, \
         api_keys: [revoked-key, {KEY_2}], models: [gpt-4o], model_map: {{ gpt-4o: gpt4o-prod }} }}\n\
         prices:\n{PRICE}",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let mut refused = 0;
    for _ in 0..4 {
        let r = ask(&gw, Client::Chat, "gpt-4o", false, &key, "hi")
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => {}
            500 => refused += 1,
            s => panic!("status {s}"),
        }
    }
    assert_eq!(refused, 1, "the revoked key is tried once");
    assert_eq!(up.up.last().header("api-key"), Some(KEY_2));
    let (_, channels) = gw.admin_get("/admin/channels").await;
    let keys = &channel(&channels, "az")["keys"];
    assert_eq!(keys[0]["state"], "set_aside", "{keys}");
    assert_eq!(keys[0]["refused_with"], 401);
    assert_eq!(keys[1]["state"], "in_use");
    assert!(!channels.to_string().contains(KEY_2));
}

/// The mock refuses what Azure refuses (so the tests above prove the gateway avoids it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_refuses_what_azure_refuses() {
    let up = mock(Duration::ZERO).await;
    let http = reqwest::Client::new();
    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    let send = |path: &str, auth: (&str, String)| {
        http.post(format!("{}{path}", up.base_url()))
            .header(auth.0, auth.1)
            .json(&chat)
            .send()
    };
    let key = || ("api-key", KEY_1.to_string());
    let dep = "/openai/deployments/gpt4o-prod/chat/completions";
    let status_code = |r: reqwest::Response| async move {
        let s = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        (s, v["error"]["code"].as_str().unwrap_or("").to_string())
    };
    let ok = send(&format!("{dep}?api-version=2024-10-21"), key())
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(
        status_code(send(dep, key()).await.unwrap()).await,
        (404, "404".into())
    );
    assert_eq!(
        status_code(
            send(&format!("{dep}?api-version=2099-01-01"), key())
                .await
                .unwrap()
        )
        .await,
        (400, "BadRequest".into())
    );
    assert_eq!(
        status_code(
            send(
                "/openai/deployments/nope/chat/completions?api-version=2024-10-21",
                key()
            )
            .await
            .unwrap()
        )
        .await,
        (404, "DeploymentNotFound".into())
    );
    let wrong = ("api-key", "wrong".to_string());
    assert_eq!(
        status_code(
            send(&format!("{dep}?api-version=2024-10-21"), wrong)
                .await
                .unwrap()
        )
        .await
        .0,
        401
    );
    // A token of no lifetime has lapsed when it is used.
    let form = format!(
        "grant_type=client_credentials&client_id={CLIENT_ID}&client_secret={CLIENT_SECRET}&scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default"
    );
    let r = http
        .post(up.token_url())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let token: Value = r.json().await.unwrap();
    let bearer = (
        "authorization",
        format!("Bearer {}", token["access_token"].as_str().unwrap()),
    );
    let r = send(&format!("{dep}?api-version=2024-10-21"), bearer)
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(up.state.expired.load(Ordering::SeqCst), 1);
}
