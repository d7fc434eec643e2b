//! The binary as an operator runs it: a graceful upgrade hands the listening sockets to a
//! new process while a stream runs on the old one (the stream completes and is billed
//! once), `SIGHUP` reloads the configuration, and the log is JSON with `log.format: json`.

use crate::gateway::{chat, metric, ADMIN_TOKEN};
use crate::mock_upstream::{openai, End, MockUpstream, Reply};
use crate::process::{hand_sockets, wait_json, GatewayProcess};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

const UPSTREAM_SECRET: &str = "upstream-secret-do-not-log";

fn config(dir: &Path, listen: &str, admin: &str, upstream: &str, output_price: f64) -> String {
    format!(
        "listen: {listen}\nadmin: {{ listen: {admin}, token: \"${{GATEWAY_ADMIN_TOKEN}}\" }}\n\
         store: {{ embedded: {{ path: {store} }} }}\nthreads: 1\n\
         upgrade_sock: {sock}\nlog: {{ format: json }}\n\
         channels:\n  - {{ name: c, protocol: openai, base_url: \"{upstream}\", models: [m], api_key: \"${{UPSTREAM_KEY}}\" }}\n\
         prices:\n  m: {{ input: 1.0, output: {output_price} }}\n",
        store = dir.join("data").display(),
        sock = dir.join("upgrade.sock").display(),
    )
}

#[tokio::test]
async fn a_stream_running_across_a_graceful_upgrade_completes_and_is_billed_once() {
    // 60 pieces, 50 ms apart: three seconds, its usage at the very end.
    let up = MockUpstream::start(|r| {
        if r.json()["stream"] != true {
            return Reply::json(200, openai::completion("m", "hi", openai::usage(10, 60, 0)));
        }
        let pieces = vec!["w"; 60];
        let events = openai::stream("m", &pieces, Some(openai::usage(10, 60, 0)));
        Reply::sse(&events, Duration::from_millis(50), End::Clean)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").unwrap();
    let (base, admin_addr) = (listener.local_addr().unwrap(), admin.local_addr().unwrap());
    let path = dir.path().join("gateway.yaml");
    let text = config(
        dir.path(),
        &base.to_string(),
        &admin_addr.to_string(),
        &up.base_url(),
        2.0,
    );
    std::fs::write(&path, text).unwrap();
    let env = [
        ("GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("UPSTREAM_KEY", UPSTREAM_SECRET.to_string()),
    ];
    let mut old = GatewayProcess::start(&path, &env);
    hand_sockets(&dir.path().join("upgrade.sock"), vec![listener, admin]).await;
    let admin_url = format!("http://{admin_addr}");
    let old_pid = old.pid();
    wait_json(&format!("{admin_url}/healthz"), |v| v["pid"] == old_pid).await;

    let http = reqwest::Client::new();
    let r = http
        .post(format!("{admin_url}/admin/keys"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"quota_usd": 1.0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let k: Value = r.json().await.unwrap();
    let (key, id) = (
        k["key"].as_str().unwrap().to_string(),
        k["id"].as_str().unwrap().to_string(),
    );

    let r = http
        .post(format!("http://{base}/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat("m", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let request_id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let mut body = r.bytes_stream();
    let mut text = String::new();
    while !text.contains("\"w\"") {
        text.push_str(&String::from_utf8_lossy(
            &body.next().await.unwrap().unwrap(),
        ));
    }

    // The upgrade: a new process waits for the sockets, SIGQUIT makes the old one hand
    // them over.
    let new = GatewayProcess::start(&path, &env);
    let new_pid = new.pid();
    old.signal(libc::SIGQUIT);
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream is not cut"),
        ));
    }
    assert!(text.contains("[DONE]"), "completed: {text}");
    assert_eq!(text.matches("\"w\"").count(), 60);

    // The old process leaves once its last request is done; the new one then serves.
    let status = tokio::task::spawn_blocking(move || {
        let s = old.wait_exit(Duration::from_secs(60));
        (s, old)
    })
    .await
    .unwrap();
    let (exit, old) = status;
    assert!(exit.expect("the old process left").success());
    wait_json(&format!("{admin_url}/readyz"), |v| v["pid"] == new_pid).await;

    let log_of = || {
        let http = http.clone();
        let (base, key) = (base, key.clone());
        async move {
            let r = http
                .get(format!("http://{base}/api/log/token"))
                .bearer_auth(&key)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let log = log_of().await;
    let records = log["data"].as_array().unwrap();
    assert_eq!(records.len(), 1, "billed once: {log}");
    assert_eq!(records[0]["request_id"], request_id.as_str());
    assert_eq!(records[0]["cost_micro_usd"], 10 + 60 * 2);
    let r = http
        .get(format!("{admin_url}/admin/keys/{id}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let k: Value = r.json().await.unwrap();
    assert_eq!(k["used_usd"].as_f64().unwrap(), 130e-6);

    // The access log of the old process: JSON lines, this request's among them, and
    // never a secret.
    let lines = old.log();
    let access: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "access")
        .collect();
    let line = access
        .iter()
        .find(|v| v["request_id"] == request_id.as_str())
        .unwrap_or_else(|| panic!("no access line for the stream: {lines:#?}"));
    assert_eq!(line["status"], 200);
    assert_eq!(line["model"], "m");
    assert_eq!(line["channel"], "c");
    assert_eq!(line["key_id"], id.as_str());
    assert_eq!(line["completion_tokens"], 60);
    assert!(line["latency_ms"].as_f64().unwrap() > 0.0);
    let all = lines.join("\n");
    assert!(!all.contains(UPSTREAM_SECRET) && !all.contains(&key) && !all.contains(ADMIN_TOKEN));

    // SIGHUP reloads the file in the new process: the output price doubles.
    std::fs::write(
        &path,
        config(
            dir.path(),
            &base.to_string(),
            &admin_addr.to_string(),
            &up.base_url(),
            4.0,
        ),
    )
    .unwrap();
    new.signal(libc::SIGHUP);
    let metrics = http.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = metrics
            .get(format!("{admin_url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metric(&text, "mg_config_reloads_total", &[("result", "ok")]) == Some(1.0) {
            assert_eq!(metric(&text, "mg_config_generation", &[]), Some(2.0));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "SIGHUP reloads");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = http
        .post(format!("http://{base}/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat("m", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "served by the new process");
    let log = log_of().await;
    assert_eq!(
        log["data"][0]["cost_micro_usd"],
        10 + 60 * 4,
        "the reloaded price"
    );
    let mut new = new;
    new.signal(libc::SIGTERM);
    let exit = tokio::task::spawn_blocking(move || new.wait_exit(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(exit.expect("an idle gateway stops at once").success());
}
