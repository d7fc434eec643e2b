//! Store behaviour seen through the gateway: durability of the embedded store across a
//! restart and a `kill -9`, and Redis connection loss (503, then recovery).

use crate::gateway::{
    chat, config_text, error_of, openai_channel, StoreKind, TestGateway, ADMIN_TOKEN,
};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use crate::redis_server::RedisServer;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

async fn upstream() -> MockUpstream {
    MockUpstream::start(|_| {
        Reply::json(200, openai::completion("m", "ok", openai::usage(10, 5, 0)))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_keeps_keys_quota_and_usage_across_a_restart() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::EmbeddedAt(dir.path().join("data"));
    let cfg = openai_channel(&up.base_url(), &["m"]);
    let (key, id) = {
        let gw = TestGateway::start(&cfg, store.clone()).await;
        let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;
        assert_eq!(
            gw.post("/v1/chat/completions", &key, &chat("m", false))
                .await
                .0,
            200
        );
        assert_eq!(gw.used_micros(&id).await, 20);
        (key, id)
    };
    let gw = TestGateway::start(&cfg, store).await;
    assert_eq!(gw.used_micros(&id).await, 20);
    assert_eq!(
        gw.post("/v1/chat/completions", &key, &chat("m", false))
            .await
            .0,
        200
    );
    assert_eq!(gw.used_micros(&id).await, 40);
    let (_, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(log["data"].as_array().unwrap().len(), 2);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cli(config: &std::path::Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_model-gateway"))
        .args(["keys"])
        .args(args)
        .args(["--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

async fn wait_ready(http: &reqwest::Client, url: &str) {
    for _ in 0..200 {
        if http.get(url).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("gateway at {url} never came up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_survives_kill_9_of_the_real_binary() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let http = reqwest::Client::new();
    let start = || {
        let port = free_port();
        let text = config_text(
            &openai_channel(&up.base_url(), &["m"]),
            &StoreKind::EmbeddedAt(data.clone()),
            dir.path(),
        )
        .replace(
            "listen: 127.0.0.1:0\n",
            &format!("listen: 127.0.0.1:{port}\n"),
        )
        // no admin listener: keys are managed with the CLI here
        .replace(
            &format!("admin: {{ listen: 127.0.0.1:0, token: {ADMIN_TOKEN} }}\n"),
            "",
        );
        let path = dir.path().join("gateway.yaml");
        std::fs::write(&path, text).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_model-gateway"))
            .args(["serve", "--config", path.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        (child, port, path)
    };
    let (mut child, port, path) = start();
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&http, &format!("{base}/v1/models")).await;
    let created = cli(
        &path,
        &["create", "--json", "--name", "durable", "--quota-usd", "1"],
    );
    let key = created["key"].as_str().unwrap().to_string();
    let id = created["id"].as_str().unwrap().to_string();
    for _ in 0..3 {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(&key)
            .json(&chat("m", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // A record is committed just after its response; kill once all three are committed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let log: Value = http
            .get(format!("{base}/api/log/token"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if log["data"].as_array().unwrap().len() == 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "records never committed: {log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap(); // SIGKILL: no shutdown code runs
    child.wait().unwrap();

    let shown = cli(&path, &["show", &id]);
    assert_eq!(
        shown["used_usd"].as_f64().unwrap(),
        0.00006,
        "three settled requests of 20 micro-USD survive"
    );
    let (mut child, port, _) = start();
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&http, &format!("{base}/v1/models")).await;
    let log: Value = http
        .get(format!("{base}/api/log/token"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log["data"].as_array().unwrap().len(), 3);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_loss_gives_503_then_recovers_by_itself() {
    let mut redis = RedisServer::start().await;
    let up = upstream().await;
    let gw = TestGateway::start(
        &openai_channel(&up.base_url(), &["m"]),
        StoreKind::Redis(redis.url()),
    )
    .await;
    let (key, _) = gw.create_key(json!({})).await;
    assert_eq!(
        gw.post("/v1/chat/completions", &key, &chat("m", false))
            .await
            .0,
        200
    );

    redis.stop();
    let (s, _, t) = tokio::time::timeout(
        Duration::from_secs(30),
        gw.post("/v1/chat/completions", &key, &chat("m", false)),
    )
    .await
    .expect("a lost store fails fast, never hangs");
    assert_eq!(s, 503, "{t}");
    assert_eq!(error_of(&t)["code"], "store_unavailable");

    redis.restart().await;
    // The private server keeps nothing on disk: the key is gone, but the gateway's
    // connection must come back without a restart.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let key = loop {
        let r = gw
            .http
            .post(format!("{}/admin/keys", gw.admin))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        if r.status() == 201 {
            break r.json::<Value>().await.unwrap()["key"]
                .as_str()
                .unwrap()
                .to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "store never recovered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        gw.post("/v1/chat/completions", &key, &chat("m", false))
            .await
            .0,
        200
    );
}
