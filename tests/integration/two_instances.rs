//! Two gateways sharing one Redis: the two-instance no-overspend burst (as in `quota`) on
//! a private 3-master Redis Cluster, and a key spent to its end through two instances
//! whose leases serve most requests, on a single Redis and on the cluster. After each:
//! charged ≤ cap, the usage records add up to the charge, one record per answer.

use crate::gateway::{StoreKind, TestGateway};
use crate::quota::{burst, config, honest_upstream};
use crate::redis_server::{RedisCluster, RedisServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Both invariants, read through each gateway once every answer has its record (what a
/// gateway settled is sent before it answers a read). At most 1,000 records are read:
/// enough for these tests.
async fn check(gws: &[&TestGateway], key: &str, cap: i64, answered: usize) -> i64 {
    let mut used = None;
    for gw in gws {
        let deadline = Instant::now() + Duration::from_secs(10);
        let records = loop {
            let (s, log) = gw.get("/api/log/token?limit=1000", key).await;
            assert_eq!(s, 200, "{log}");
            let data = log["data"].as_array().cloned().unwrap_or_default();
            // Refused requests have records too (status 403, nothing charged).
            let served = data.iter().filter(|r| r["status"] == 200).count();
            if served == answered {
                break data;
            }
            assert!(
                Instant::now() < deadline,
                "{served} records for {answered} answers"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let (_, u) = gw.get("/api/usage/token", key).await;
        let charged = u["used_micro_usd"].as_i64().unwrap();
        assert!(charged <= cap, "charged {charged} µUSD on a cap of {cap}");
        let logged: i64 = records
            .iter()
            .map(|r: &Value| r["cost_micro_usd"].as_i64().unwrap())
            .sum();
        assert_eq!(logged, charged, "the records add up to the charge");
        assert_eq!(*used.get_or_insert(charged), charged, "both gateways agree");
    }
    used.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_on_two_instances_sharing_a_redis_cluster_never_pass_the_cap() {
    let cluster = RedisCluster::start().await;
    let up = honest_upstream().await;
    let store = StoreKind::RedisCluster(cluster.urls());
    let a = TestGateway::start(&config(&up.base_url()), store.clone()).await;
    let b = TestGateway::start(&config(&up.base_url()), store).await;
    let (key, _) = a.create_key(json!({"quota_usd": 0.001})).await;
    let statuses = burst(&[&a, &b], &key, 50).await;
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!(ok >= 2, "{statuses:?}");
    assert!(statuses.contains(&403), "{statuses:?}");
    check(&[&a, &b], &key, 1_000, ok).await;
}

/// Bursts of 64 until the key is refused everywhere: the instances lease while the key
/// has room, fall back to one script per request near its end, and the cap holds.
async fn a_key_spent_to_its_end_through_two_leasing_instances(store: StoreKind) {
    let up = honest_upstream().await;
    let a = TestGateway::start(&config(&up.base_url()), store.clone()).await;
    let b = TestGateway::start(&config(&up.base_url()), store).await;
    // About 300 µUSD a request: a few hundred requests.
    const CAP: i64 = 100_000;
    let (key, _) = a.create_key(json!({"quota_usd": CAP as f64 / 1e6})).await;
    let mut answered = 0;
    for _ in 0..20 {
        let statuses = burst(&[&a, &b], &key, 64).await;
        let ok = statuses.iter().filter(|s| **s == 200).count();
        answered += ok;
        check(&[&a, &b], &key, CAP, answered).await;
        if ok == 0 {
            break;
        }
    }
    assert!(answered >= 250, "{answered} served");
    let used = check(&[&a, &b], &key, CAP, answered).await;
    assert!(CAP - used < 1_000, "{} µUSD left unspent", CAP - used);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_spent_to_its_end_through_two_leasing_instances_on_redis() {
    let redis = RedisServer::start().await;
    a_key_spent_to_its_end_through_two_leasing_instances(StoreKind::Redis(redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_spent_to_its_end_through_two_leasing_instances_on_a_cluster() {
    let cluster = RedisCluster::start().await;
    a_key_spent_to_its_end_through_two_leasing_instances(StoreKind::RedisCluster(cluster.urls()))
        .await;
}
