//! The store contract, run against every backend: the embedded store in a temporary
//! directory, a private `redis-server`, and a private 3-master Redis Cluster. The checks
//! live in [`crate::task_store`] (video tasks) and [`crate::money_once`] (reserve, extend
//! and settle exactly once); this module has what they share.

use crate::redis_server::{RedisCluster, RedisServer};
use model_gateway::config::StoreConfig;
use model_gateway::gateway::open_store;
use model_gateway::store::{
    Ask, KeyRecord, KeyStatus, Micros, Reservation, ReserveDenied, Store, TaskRecord, TaskResult,
    TaskStatus, UsageRecord,
};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const KEY: &str = "key_0123456789abcdef01234567";
pub(crate) const OTHER: &str = "key_fedcba9876543210fedcba98";
pub(crate) const QUOTA: Micros = 1_000_000;
pub(crate) const TTL: u64 = 3600;

/// Runs `$check(cfg)` once per backend, as `<module>::$check::{embedded, redis, cluster}`.
macro_rules! backends {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                let dir = tempfile::tempdir().unwrap();
                super::$check(crate::contract::embedded_config(&dir)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                let redis = crate::redis_server::RedisServer::start().await;
                super::$check(crate::contract::redis_config(&redis)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cluster() {
                let cluster = crate::redis_server::RedisCluster::start().await;
                super::$check(crate::contract::cluster_config(&cluster)).await;
            }
        }
    )*};
}

pub(crate) use backends;

pub(crate) fn embedded_config(dir: &tempfile::TempDir) -> StoreConfig {
    StoreConfig::Embedded {
        path: dir.path().join("data"),
    }
}

pub(crate) fn redis_config(redis: &RedisServer) -> StoreConfig {
    StoreConfig::Redis {
        urls: vec![redis.url()],
        cluster: false,
    }
}

pub(crate) fn cluster_config(cluster: &RedisCluster) -> StoreConfig {
    StoreConfig::Redis {
        urls: cluster.urls(),
        cluster: true,
    }
}

/// The store as the server opens it (an embedded one locked for this process, its
/// settles journaled).
pub(crate) async fn open(cfg: &StoreConfig) -> Arc<dyn Store> {
    open_store(cfg, true).await.unwrap()
}

/// The store as another process beside the server opens it (the CLI).
pub(crate) async fn open_shared(cfg: &StoreConfig) -> Arc<dyn Store> {
    open_store(cfg, false).await.unwrap()
}

/// An enabled key with a cap of [`QUOTA`].
pub(crate) async fn key(store: &dyn Store, id: &str) {
    store
        .create_key(&KeyRecord {
            id: id.into(),
            hash: format!("{:0>64}", &id[4..]),
            display: "sk-abc…wxyz".into(),
            name: "tasks".into(),
            status: KeyStatus::Enabled,
            created_at: 1_700_000_000,
            expires_at: None,
            models: vec![],
            allow_ips: vec![],
            rpm: None,
            quota_limit: Some(QUOTA),
            quota_used: 0,
            group: None,
            policy: Default::default(),
        })
        .await
        .unwrap();
}

pub(crate) fn task_id(n: u32) -> String {
    format!("task_{n:032}")
}

pub(crate) fn task(key_id: &str, id: &str, reserved: Micros) -> TaskRecord {
    TaskRecord {
        id: id.into(),
        key_id: key_id.into(),
        endpoint: "/v1/videos".into(),
        model: "video-model".into(),
        channel: "video".into(),
        upstream_id: format!("up-{id}"),
        upstream_kind: "text2video".into(),
        status: TaskStatus::Queued,
        progress: 0,
        created_at: 1_700_000_000,
        completed_at: None,
        deadline: 1_700_003_600,
        seconds: 5.0,
        size: Some("1280x720".into()),
        n: 1,
        reserved,
        cost: 0,
        multiplier_ppm: None,
        polls: 0,
        result: None,
        error: None,
    }
}

pub(crate) fn completed(mut t: TaskRecord, cost: Micros) -> TaskRecord {
    t.status = TaskStatus::Completed;
    t.progress = 100;
    t.completed_at = Some(1_700_000_100);
    t.cost = cost;
    t.result = Some(TaskResult {
        upstream_url: Some("https://upstream.example/v.mp4".into()),
        format: Some("mp4".into()),
        duration: Some(5.0),
        fps: Some(24),
        width: Some(1280),
        height: Some(720),
        seed: Some(7),
    });
    t
}

pub(crate) fn usage(t: &TaskRecord) -> UsageRecord {
    UsageRecord {
        request_id: t.id.clone(),
        time_ms: 1_700_000_000_000,
        key_id: t.key_id.clone(),
        endpoint: t.endpoint.clone(),
        model: t.model.clone(),
        channel: t.channel.clone(),
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        cost: t.cost,
        estimated: false,
        overrun: 0,
        provider_cost: None,
        bill: Default::default(),
        multiplier_ppm: None,
        status: 200,
        latency_ms: 100_000,
        stream: false,
        group: None,
    }
}

/// A money-only ask at the wall clock's now (for a key in no group), as the relay's
/// calendar makes one.
pub(crate) fn money(min: Micros, max: Micros) -> Ask {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Ask::money(min, max, now)
}

/// Reserves exactly `amount` for `id` now.
pub(crate) async fn reserve(
    store: &dyn Store,
    key_id: &str,
    id: &str,
    amount: Micros,
) -> Result<Reservation, ReserveDenied> {
    store
        .reserve_ask(key_id, id, &money(amount, amount), TTL)
        .await
        .unwrap()
}

pub(crate) async fn used(store: &dyn Store, key_id: &str) -> Micros {
    store.get_key(key_id).await.unwrap().unwrap().quota_used
}

/// What a reservation asking for anything up to the cap is granted: the money left. (A
/// new id each time: an id holds money once.)
pub(crate) async fn available(store: &dyn Store, key_id: &str) -> Micros {
    let r = store
        .reserve_ask(
            key_id,
            &model_gateway::ids::request_id(),
            &money(0, QUOTA),
            TTL,
        )
        .await
        .unwrap()
        .unwrap();
    store.settle(&r, 0).await.unwrap();
    r.amount
}

/// A usage record of request `id`.
pub(crate) fn request_usage(id: &str, cost: Micros) -> UsageRecord {
    let mut u = usage(&completed(task(KEY, id, 0), cost));
    u.request_id = id.into();
    u.endpoint = "/v1/chat/completions".into();
    u
}

/// Polls `f` once and drops it: a caller that goes away while its call is under way.
/// `true` if it was cut off (had not finished on that one poll).
pub(crate) async fn cut_after_one_poll<F: std::future::Future>(f: F) -> bool {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx).is_pending())).await
}

/// Polls `check` until it holds, for at most `within`.
pub(crate) async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
