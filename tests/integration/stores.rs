//! Store behaviour seen through the gateway: durability of the embedded store across a
//! restart and a `kill -9`, and Redis connection loss (503, then recovery). And money
//! exactly once when the network to Redis fails: a private `redis-server` behind a
//! [`FlakyProxy`] that loses one reply after the script ran, or is cut while a hold
//! exists; the truth is read through a direct connection.

use crate::contract::{
    available, eventually, key, money, open, redis_config, request_usage, used, KEY, QUOTA, TTL,
};
use crate::flaky_proxy::FlakyProxy;
use crate::gateway::{
    chat, config_text, error_of, openai_channel, StoreKind, TestGateway, ADMIN_TOKEN,
};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use crate::redis_server::RedisServer;
use model_gateway::billing::{self, SettleOutcome};
use model_gateway::config::StoreConfig;
use model_gateway::store::{Ask, Reservation, ReserveDenied, Store, StoreError};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::sync::Arc;
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
    // The upstream reported its usage, within the grant: exact, no overrun.
    assert_eq!(log["data"][0]["cost_estimated"], false);
    assert_eq!(log["data"][0]["overrun_micro_usd"], 0);
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
    // Each charge and record is durable (journaled) before its response ends: kill at
    // once, most likely before the store has applied the last of them to its database.
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

/// A private Redis, a proxy in front of it, the store as the gateway sees it (through the
/// proxy) and as the truth is read (directly), with the key and every script the tests
/// call already loaded on the proxied connection (so a lost reply is the reply of the
/// script itself, not of a `NOSCRIPT` round).
struct Flaky {
    _redis: RedisServer,
    proxy: FlakyProxy,
    store: Arc<dyn Store>,
    direct: Arc<dyn Store>,
}

const WARM_KEY: &str = "key_ffffffffffffffffffffffff";

async fn flaky() -> Flaky {
    let redis = RedisServer::start().await;
    let proxy = FlakyProxy::start(redis.socket()).await;
    let direct = open(&redis_config(&redis)).await;
    let store = open(&StoreConfig::Redis {
        urls: vec![proxy.url()],
        cluster: false,
    })
    .await;
    key(&*direct, KEY).await;
    key(&*direct, WARM_KEY).await;
    for (n, logged) in [(0, false), (1, true)] {
        let id = format!("warm-{n}");
        let mut g = billing::reserve(&store, WARM_KEY, &id, &Ask::money(0, 1, 0), TTL)
            .await
            .unwrap()
            .unwrap();
        let outcome = if logged {
            let mut u = request_usage(&id, 0);
            u.key_id = WARM_KEY.into();
            g.settle_logged(0, u).await
        } else {
            g.settle(0).await
        };
        assert_eq!(outcome, SettleOutcome::Settled);
    }
    Flaky {
        _redis: redis,
        proxy,
        store,
        direct,
    }
}

/// (a) A settle whose reply is lost after the script ran, retried by the guard: charged
/// once, one usage record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_settle_whose_reply_is_lost_is_retried_and_charged_once() {
    let f = flaky().await;
    let mut guard = billing::reserve(&f.store, KEY, "req-1", &Ask::money(0, 500_000, 0), TTL)
        .await
        .unwrap()
        .unwrap();
    let rec = request_usage("req-1", 120_000);
    f.proxy.drop_next_reply_then_cut();
    assert_eq!(
        guard.settle_logged(120_000, rec.clone()).await,
        SettleOutcome::Deferred,
        "the reply never came"
    );
    assert_eq!(f.proxy.dropped(), 1);
    // The script ran: the charge and the record are in, only the answer was lost.
    assert_eq!(used(&*f.direct, KEY).await, 120_000);
    assert_eq!(
        f.direct.recent_usage(KEY, 10).await.unwrap(),
        vec![rec.clone()]
    );

    let answered = f.proxy.script_replies();
    f.proxy.restore();
    eventually(
        Duration::from_secs(30),
        "the guard's retry is answered",
        || async { f.proxy.script_replies() > answered },
    )
    .await;
    assert_eq!(used(&*f.direct, KEY).await, 120_000, "charged once");
    assert_eq!(
        f.direct.recent_usage(KEY, 10).await.unwrap(),
        vec![rec],
        "logged once"
    );
    assert_eq!(available(&*f.direct, KEY).await, QUOTA - 120_000);
}

/// (b) A reserve whose reply is lost after the script ran: `billing::reserve` fails, and
/// releases the hold it could not know of as soon as Redis answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reserve_whose_reply_is_lost_is_released() {
    let f = flaky().await;
    f.proxy.drop_next_reply_then_cut();
    let lost = billing::reserve(&f.store, KEY, "req-lost", &Ask::money(0, 400_000, 0), TTL).await;
    assert!(
        matches!(lost, Err(StoreError::Unavailable(_))),
        "{:?}",
        lost.map(|g| g.map(|g| g.amount()))
    );
    assert_eq!(f.proxy.dropped(), 1);
    assert_eq!(
        available(&*f.direct, KEY).await,
        QUOTA - 400_000,
        "the script ran: the money is held, and its TTL is an hour"
    );
    f.proxy.restore();
    eventually(
        Duration::from_secs(30),
        "the lost hold is released",
        || async { available(&*f.direct, KEY).await == QUOTA },
    )
    .await;
    assert_eq!(used(&*f.direct, KEY).await, 0);
    assert_eq!(
        f.direct
            .reserve_ask(KEY, "req-lost", &money(0, 400_000), TTL)
            .await
            .unwrap(),
        Err(ReserveDenied::Released),
        "a late duplicate of the reserve holds nothing"
    );
}

/// (c) A reservation held by a request in flight when Redis became unreachable for its
/// instance (the proxy cut: Redis keeps its data, the instance cannot reach it): the
/// guard cannot extend the hold, so the TTL releases it; the request's settle, retried by
/// the guard, charges exactly once when Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hold_of_a_request_cut_off_expires_and_its_settle_lands_once() {
    let f = flaky().await;
    let mut guard = billing::reserve(&f.store, KEY, "req-inflight", &Ask::money(0, 500_000, 0), 2)
        .await
        .unwrap()
        .unwrap();
    let granted = guard.amount();
    let rec = request_usage("req-inflight", 150_000);
    f.proxy.cut();
    let started = tokio::time::Instant::now();
    assert_eq!(available(&*f.direct, KEY).await, QUOTA - granted, "held");
    assert_eq!(
        guard.settle_logged(150_000, rec.clone()).await,
        SettleOutcome::Deferred
    );
    eventually(
        Duration::from_secs(15),
        "the TTL releases the hold",
        || async { available(&*f.direct, KEY).await == QUOTA },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "not before its TTL"
    );
    assert_eq!(
        used(&*f.direct, KEY).await,
        0,
        "the settle has not landed yet"
    );

    let answered = f.proxy.script_replies();
    f.proxy.restore();
    eventually(
        Duration::from_secs(30),
        "the retried settle lands",
        || async { f.proxy.script_replies() > answered && used(&*f.direct, KEY).await == 150_000 },
    )
    .await;
    // Another retry (a second instance, a late duplicate) changes nothing.
    let r = Reservation {
        id: "req-inflight".into(),
        key_id: KEY.into(),
        amount: granted,
    };
    f.direct.settle_logged(&r, 150_000, &rec).await.unwrap();
    assert_eq!(used(&*f.direct, KEY).await, 150_000, "charged once");
    assert_eq!(f.direct.recent_usage(KEY, 10).await.unwrap(), vec![rec]);
    assert_eq!(available(&*f.direct, KEY).await, QUOTA - 150_000);
}
