//! Quota leases on Redis (README "Guarantees of the stores"), on a single Redis and on a
//! private 3-master Redis Cluster:
//! - a busy key is served from a lease: far fewer scripts than requests, every charge
//!   and record in Redis exactly once;
//! - two instances spend a key to its end: never past the cap, and nothing stranded in a
//!   lease (the cap is reached exactly);
//! - a batch whose reply is lost is applied once; a crashed instance's lease is reclaimed
//!   by its TTL with its sent charges counted once; leases are handed back on shutdown;
//!   an instance short of money gets what another's lease holds;
//! - request limits are never exceeded across instances.

use crate::contract::{eventually, key, money, request_usage, KEY};
use crate::flaky_proxy::FlakyProxy;
use crate::redis_server::{RedisCluster, RedisServer};
use model_gateway::store::redis::{LeaseOptions, RedisStore};
use model_gateway::store::{Micros, ReserveDenied, Store};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Where the stores of a test connect, and how the truth is read.
pub(crate) enum Backend {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl Backend {
    pub(crate) async fn start(cluster: bool) -> Backend {
        if cluster {
            Backend::Cluster(RedisCluster::start().await)
        } else {
            Backend::Single(RedisServer::start().await)
        }
    }

    pub(crate) fn urls(&self) -> (Vec<String>, bool) {
        match self {
            Backend::Single(r) => (vec![r.url()], false),
            Backend::Cluster(c) => (c.urls(), true),
        }
    }

    /// An instance with leases behaving as `opts` says.
    pub(crate) async fn store(&self, opts: LeaseOptions) -> Arc<RedisStore> {
        let (urls, cluster) = self.urls();
        Arc::new(
            RedisStore::connect_with(&urls, cluster, opts)
                .await
                .unwrap(),
        )
    }

    /// An instance that never leases: one script per call, reading Redis as it is.
    pub(crate) async fn direct(&self) -> Arc<RedisStore> {
        self.store(LeaseOptions {
            enabled: false,
            ..LeaseOptions::default()
        })
        .await
    }

    /// Script calls every node has run so far (`INFO commandstats`).
    async fn script_calls(&self) -> u64 {
        let urls: Vec<String> = match self {
            Backend::Single(r) => vec![r.url()],
            Backend::Cluster(c) => c.urls(),
        };
        let mut total = 0;
        for url in urls {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut c)
                .await
                .unwrap();
            total += info
                .lines()
                .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
                .filter_map(|l| {
                    l.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>();
        }
        total
    }
}

/// Leases that react within a test's patience.
fn quick() -> LeaseOptions {
    LeaseOptions {
        ttl_secs: 3,
        renew_every: Duration::from_millis(200),
        idle_after: Duration::from_millis(300),
        cooldown: Duration::from_millis(300),
        ..LeaseOptions::default()
    }
}

async fn capped(store: &dyn Store, id: &str, cap: Micros) {
    key(store, id).await;
    let patch = model_gateway::store::KeyPatch {
        quota_limit: Some(Some(cap)),
        ..Default::default()
    };
    store.update_key(id, &patch).await.unwrap();
}

/// One request's store work, as the relay does it: reserve, then settle with its record.
/// `None` when refused.
async fn request(store: &dyn Store, id: &str, max: Micros, cost: Micros) -> Option<String> {
    let rid = model_gateway::ids::request_id();
    let r = match store
        .reserve_ask(KEY, &rid, &money(max, max), 3600)
        .await
        .unwrap()
    {
        Ok(r) => r,
        Err(ReserveDenied::QuotaExhausted) => return None,
        Err(e) => panic!("{id}: refused as {e:?}"),
    };
    assert_eq!(r.amount, max);
    let mut rec = request_usage(&rid, cost);
    rec.key_id = KEY.into();
    store.settle_logged(&r, cost, &rec).await.unwrap();
    Some(rid)
}

/// What the key was charged and its records, read through `store` (after it sent what it
/// settled), checked against each other: each request once, the records adding up.
async fn truth(store: &dyn Store, served: &HashSet<String>) -> Micros {
    let used = store.get_key(KEY).await.unwrap().unwrap().quota_used;
    let records = store.recent_usage(KEY, 100_000).await.unwrap();
    let ids: HashSet<String> = records.iter().map(|r| r.request_id.clone()).collect();
    assert_eq!(records.len(), ids.len(), "each record once");
    assert_eq!(&ids, served, "a record for every served request");
    assert_eq!(
        records.iter().map(|r| r.cost).sum::<Micros>(),
        used,
        "records add up"
    );
    used
}

async fn busy_key_is_served_from_a_lease(cluster: bool) {
    let b = Backend::start(cluster).await;
    let store = b.store(LeaseOptions::default()).await;
    key(&*store, KEY).await;
    let before = b.script_calls().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..50 {
                ids.extend(request(&*s, "busy", 1_000, 10).await);
            }
            ids
        }));
    }
    let mut served = HashSet::new();
    for t in tasks {
        served.extend(t.await.unwrap());
    }
    assert_eq!(served.len(), 400);
    let used = truth(&*store, &served).await;
    assert_eq!(used, 4_000, "charged once each");
    let scripts = b.script_calls().await - before;
    assert!(
        scripts < 100,
        "{scripts} script calls for 400 requests: the lease served them"
    );
    // Another instance reads the same.
    assert_eq!(truth(&*b.direct().await, &served).await, 4_000);
}

async fn two_instances_spend_a_key_to_its_end(cluster: bool) {
    const CAP: Micros = 300_000;
    const MAX: Micros = 1_000;
    const COST: Micros = 700;
    let b = Backend::start(cluster).await;
    let (a, c) = (b.store(quick()).await, b.store(quick()).await);
    capped(&*a, KEY, CAP).await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = if i % 2 == 0 { a.clone() } else { c.clone() };
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            while let Some(id) = request(&*s, "burst", MAX, COST).await {
                ids.push(id);
            }
            ids
        }));
    }
    let mut served = HashSet::new();
    for t in tasks {
        served.extend(t.await.unwrap());
    }
    // Requests settled after the last refusal freed money: whatever is left is found,
    // from either instance, once the leases are back.
    for s in [&a, &c, &a] {
        while let Some(id) = request(&**s, "tail", MAX, COST).await {
            served.insert(id);
        }
    }
    a.get_key(KEY).await.unwrap();
    c.get_key(KEY).await.unwrap();
    let used = truth(&*b.direct().await, &served).await;
    assert!(used <= CAP, "charged {used} on a cap of {CAP}");
    assert!(
        CAP - used < MAX,
        "the cap is reached exactly: {} left, a request needs {MAX}",
        CAP - used
    );
    assert_eq!(used, served.len() as Micros * COST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_key_is_served_from_a_lease_on_redis() {
    busy_key_is_served_from_a_lease(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_key_is_served_from_a_lease_on_a_cluster() {
    busy_key_is_served_from_a_lease(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_spend_a_key_to_its_end_on_redis() {
    two_instances_spend_a_key_to_its_end(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_spend_a_key_to_its_end_on_a_cluster() {
    two_instances_spend_a_key_to_its_end(true).await;
}

/// Whether Redis holds a lease for some instance on the key.
async fn leased(url: &str) -> bool {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let holds: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("gw:rsva:{{{KEY}}}"))
        .query_async(&mut c)
        .await
        .unwrap();
    holds.iter().any(|h| h.starts_with("lease:"))
}

/// Makes `store` take a lease on the key (enough reserves at once), served locally.
async fn take_lease(store: &Arc<RedisStore>, url: &str) {
    for _ in 0..20 {
        request(&**store, "warm", 1_000, 0).await.unwrap();
    }
    eventually(Duration::from_secs(10), "a lease is taken", || async {
        leased(url).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_reply_is_lost_is_applied_once() {
    let redis = RedisServer::start().await;
    let proxy = FlakyProxy::start(redis.socket()).await;
    // Nothing is sent but when this test asks (a read sends what was settled).
    let slow = LeaseOptions {
        flush_after: Duration::from_secs(600),
        renew_every: Duration::from_secs(600),
        idle_after: Duration::from_secs(600),
        ..LeaseOptions::default()
    };
    let store = Arc::new(
        RedisStore::connect_with(&[proxy.url()], false, slow)
            .await
            .unwrap(),
    );
    let direct = Backend::Single(redis);
    let url = match &direct {
        Backend::Single(r) => r.url(),
        Backend::Cluster(_) => unreachable!(),
    };
    key(&*store, KEY).await;
    take_lease(&store, &url).await;
    store.get_key(KEY).await.unwrap();
    let truth_store = direct.direct().await;
    let base = truth_store.get_key(KEY).await.unwrap().unwrap().quota_used;
    let mut served = HashSet::new();
    for _ in 0..5 {
        served.insert(request(&*store, "lost", 1_000, 111).await.unwrap());
    }
    let before = truth_store.recent_usage(KEY, 1000).await.unwrap().len();
    proxy.drop_next_reply_then_cut();
    assert!(store.get_key(KEY).await.is_err(), "the reply never came");
    assert_eq!(proxy.dropped(), 1);
    // The script ran: the batch is in.
    let used = || async { truth_store.get_key(KEY).await.unwrap().unwrap().quota_used };
    assert_eq!(used().await, base + 555);
    proxy.restore();
    // Sent again, as it was: changes nothing.
    store.get_key(KEY).await.unwrap();
    assert_eq!(used().await, base + 555, "charged once");
    let records = truth_store.recent_usage(KEY, 1000).await.unwrap();
    assert_eq!(records.len(), before + 5, "logged once");
    let logged: HashSet<String> = records[..5].iter().map(|r| r.request_id.clone()).collect();
    assert_eq!(logged, served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_instance_s_lease_is_reclaimed_and_its_charges_count_once() {
    let redis = RedisServer::start().await;
    let url = redis.url();
    let b = Backend::Single(redis);
    let direct = b.direct().await;
    capped(&*direct, KEY, 1_000_000).await;
    // An instance on a runtime of its own: it takes a lease, serves from it, sends what it
    // settled, then dies (its runtime stops, nothing of it runs again).
    let (urls, opts) = (vec![url.clone()], quick());
    let u = url.clone();
    let served = tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let served = rt.block_on(async {
                let s = Arc::new(RedisStore::connect_with(&urls, false, opts).await.unwrap());
                take_lease(&s, &u).await;
                let mut served = HashSet::new();
                for _ in 0..10 {
                    served.insert(request(&*s, "crash", 1_000, 300).await.unwrap());
                }
                s.get_key(KEY).await.unwrap();
                std::mem::forget(s);
                served
            });
            rt.shutdown_background();
            served
        })
        .join()
        .unwrap()
    })
    .await
    .unwrap();
    assert!(
        leased(&url).await,
        "the dead instance's lease is still held"
    );
    let charged = direct.get_key(KEY).await.unwrap().unwrap().quota_used;
    eventually(
        Duration::from_secs(15),
        "the lease is reclaimed",
        || async {
            // A probe of everything: granted only once the lease's money is back.
            let rid = model_gateway::ids::request_id();
            let left = 1_000_000 - charged;
            let r = direct
                .reserve_ask(KEY, &rid, &money(left, left), 60)
                .await
                .unwrap();
            match r {
                Ok(r) => {
                    direct.settle(&r, 0).await.unwrap();
                    true
                }
                Err(_) => false,
            }
        },
    )
    .await;
    assert!(!leased(&url).await);
    // The 20 requests that took the lease cost nothing; the 10 served from it 300 each.
    assert_eq!(charged, 10 * 300, "charged once");
    let used = direct.get_key(KEY).await.unwrap().unwrap().quota_used;
    assert_eq!(used, charged, "the reclaimed lease charged nothing more");
    let records = direct.recent_usage(KEY, 1000).await.unwrap();
    let logged: HashSet<String> = records
        .iter()
        .filter(|r| r.cost == 300)
        .map(|r| r.request_id.clone())
        .collect();
    assert_eq!(logged, served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_handed_back_on_shutdown() {
    let redis = RedisServer::start().await;
    let url = redis.url();
    let b = Backend::Single(redis);
    let store = b.store(LeaseOptions::default()).await;
    capped(&*store, KEY, 1_000_000).await;
    take_lease(&store, &url).await;
    request(&*store, "last", 1_000, 250).await.unwrap();
    store.close().await.unwrap();
    assert!(!leased(&url).await, "no lease left");
    let direct = b.direct().await;
    assert_eq!(direct.get_key(KEY).await.unwrap().unwrap().quota_used, 250);
    let r = direct
        .reserve_ask(KEY, "probe", &money(0, 1_000_000), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.amount, 1_000_000 - 250, "everything else is free at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_short_of_money_gets_what_another_s_lease_holds() {
    let redis = RedisServer::start().await;
    let url = redis.url();
    let b = Backend::Single(redis);
    let holder = b.store(LeaseOptions::default()).await;
    capped(&*holder, KEY, 100_000).await;
    take_lease(&holder, &url).await;
    let other = b.direct().await;
    // More than is free while the lease stands, less than the key has.
    let r = other
        .reserve_ask(KEY, "big", &money(90_000, 90_000), 60)
        .await
        .unwrap();
    assert_eq!(r.map(|r| r.amount), Ok(90_000));
}

async fn request_limits_hold_across_instances(cluster: bool) {
    let b = Backend::start(cluster).await;
    let (a, c) = (b.store(quick()).await, b.store(quick()).await);
    key(&*a, KEY).await;
    const RPM: u32 = 160;
    let now_ms = 1_700_000_030_000; // one minute window for the whole test
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = if i % 2 == 0 { a.clone() } else { c.clone() };
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u32;
            for _ in 0..60 {
                if s.rate_hit(KEY, RPM, now_ms).await.unwrap() {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert!(admitted <= RPM, "{admitted} admitted on a limit of {RPM}");
    assert!(
        admitted >= RPM - RPM / 8,
        "{admitted} admitted: no more than rpm/8 left unused in the other instance's blocks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_limits_hold_across_instances_on_redis() {
    request_limits_hold_across_instances(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_limits_hold_across_instances_on_a_cluster() {
    request_limits_hold_across_instances(true).await;
}
