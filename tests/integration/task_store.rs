//! The store contract, every check run against both backends: the embedded store in a
//! temporary directory and a private `redis-server`. The video task store
//! (`store::TaskStore`): lease expiry is driven by explicit `now_ms` values, never by
//! waiting. Money exactly once (`Store::reserve`/`extend`/`settle`/`settle_logged` and
//! `billing::reserve` with its guard): idempotent by reservation id, holds kept alive by
//! their guard and reclaimed by their TTL only when the instance holding them is gone;
//! these checks wait for real time where a TTL is the point (2 s TTLs, polled with a
//! deadline).

use crate::redis_server::RedisServer;
use model_gateway::billing::{self, SettleOutcome};
use model_gateway::config::StoreConfig;
use model_gateway::gateway::open_store;
use model_gateway::store::{
    KeyRecord, KeyStatus, Micros, Reservation, ReserveDenied, Store, StoreError, TaskError,
    TaskRecord, TaskRef, TaskResult, TaskStatus, UsageRecord,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const KEY: &str = "key_0123456789abcdef01234567";
const OTHER: &str = "key_fedcba9876543210fedcba98";
pub(crate) const QUOTA: Micros = 1_000_000;
pub(crate) const TTL: u64 = 3600;
const LEASE: i64 = 10_000;

/// Runs `$check(cfg)` once per backend, as `task_store::$check::{embedded, redis}`.
macro_rules! both {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                let dir = tempfile::tempdir().unwrap();
                super::$check(super::embedded_config(&dir)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                let redis = crate::redis_server::RedisServer::start().await;
                super::$check(super::redis_config(&redis)).await;
            }
        }
    )*};
}

both!(
    create_then_get_only_through_the_owner,
    claims_hand_out_due_open_tasks_once_per_lease,
    claim_task_takes_one_due_task,
    save_task_moves_progress_and_due_time_until_the_end,
    finish_task_settles_and_logs_exactly_once,
    failed_task_with_no_cost_refunds_its_reservation,
    concurrent_claims_hand_each_task_to_one_caller,
    settle_logged_settles_and_logs_in_one_step,
    settling_an_id_twice_charges_and_logs_once,
    reserving_a_held_id_answers_its_grant_and_a_settled_id_is_refused,
    settling_an_unreserved_id_releases_it,
    a_finished_task_s_id_is_not_charged_again,
    extend_pushes_a_live_hold_and_revives_none,
    a_guard_keeps_its_hold_and_a_dead_instance_s_hold_expires,
    a_settle_cancelled_mid_call_lands_exactly_once,
    a_reserve_cancelled_before_its_answer_is_released,
    usage_records_keep_whether_their_cost_is_estimated_and_the_overrun,
);

fn embedded_config(dir: &tempfile::TempDir) -> StoreConfig {
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

pub(crate) async fn open(cfg: &StoreConfig) -> Arc<dyn Store> {
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
        })
        .await
        .unwrap();
}

fn task_id(n: u32) -> String {
    format!("task_{n:032}")
}

fn task(key_id: &str, id: &str, reserved: Micros) -> TaskRecord {
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
        polls: 0,
        result: None,
        error: None,
    }
}

fn completed(mut t: TaskRecord, cost: Micros) -> TaskRecord {
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

fn usage(t: &TaskRecord) -> UsageRecord {
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
        status: 200,
        latency_ms: 100_000,
        stream: false,
    }
}

/// Reserves exactly `amount` for `id` now.
async fn reserve(
    store: &dyn Store,
    key_id: &str,
    id: &str,
    amount: Micros,
) -> Result<Reservation, ReserveDenied> {
    store
        .reserve(key_id, id, amount, amount, TTL)
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
        .reserve(key_id, &model_gateway::ids::request_id(), 0, QUOTA, TTL)
        .await
        .unwrap()
        .unwrap();
    store.settle(&r, 0).await.unwrap();
    r.amount
}

fn ids(refs: &[TaskRef]) -> HashSet<String> {
    refs.iter().map(|r| r.id.clone()).collect()
}

fn set(ids: &[&str]) -> HashSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

async fn create_then_get_only_through_the_owner(cfg: StoreConfig) {
    let store = open(&cfg).await;
    let t = task(KEY, &task_id(1), 0);
    store.create_task(&t, 1_000).await.unwrap();
    assert_eq!(store.get_task(KEY, &t.id).await.unwrap(), Some(t.clone()));
    assert_eq!(store.get_task(OTHER, &t.id).await.unwrap(), None);
    assert_eq!(store.get_task(KEY, &task_id(2)).await.unwrap(), None);
    assert!(matches!(
        store.create_task(&t, 1_000).await,
        Err(StoreError::Conflict(_))
    ));
    let mut ended = task(KEY, &task_id(3), 0);
    ended.status = TaskStatus::Failed;
    assert!(
        store.create_task(&ended, 1_000).await.is_err(),
        "a task is created open"
    );
}

async fn claims_hand_out_due_open_tasks_once_per_lease(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let (t1, t2, t3, t4) = (task_id(1), task_id(2), task_id(3), task_id(4));
    store.create_task(&task(KEY, &t1, 0), 1_000).await.unwrap();
    store.create_task(&task(KEY, &t2, 0), 2_000).await.unwrap();
    store.create_task(&task(KEY, &t3, 0), 5_000).await.unwrap();
    // An ended task is never claimed, however late.
    let ended = task(KEY, &t4, 0);
    store.create_task(&ended, 0).await.unwrap();
    let ended = completed(ended, 0);
    assert!(store.finish_task(&ended, &usage(&ended)).await.unwrap());

    assert_eq!(
        store.claim_due_tasks(500, LEASE, 10).await.unwrap(),
        vec![],
        "nothing open is due yet"
    );
    let first = store.claim_due_tasks(2_000, LEASE, 1).await.unwrap();
    assert_eq!(ids(&first), set(&[&t1]), "the earliest due first");
    assert_eq!(first[0].key_id, KEY);
    assert_eq!(
        ids(&store.claim_due_tasks(2_000, LEASE, 10).await.unwrap()),
        set(&[&t2])
    );
    assert_eq!(
        store.claim_due_tasks(3_000, LEASE, 10).await.unwrap(),
        vec![],
        "claimed tasks are not due within their lease"
    );
    assert_eq!(
        ids(&store.claim_due_tasks(5_000, LEASE, 10).await.unwrap()),
        set(&[&t3])
    );
    // At 12_000 the leases taken at 2_000 have run out; `limit` caps one claim.
    let one = store.claim_due_tasks(12_000, LEASE, 1).await.unwrap();
    assert_eq!(one.len(), 1);
    let other = store.claim_due_tasks(12_000, LEASE, 10).await.unwrap();
    assert_eq!(other.len(), 1);
    assert_eq!(ids(&[one, other].concat()), set(&[&t1, &t2]));
    assert_eq!(
        ids(&store.claim_due_tasks(1_000_000, LEASE, 10).await.unwrap()),
        set(&[&t1, &t2, &t3])
    );
    assert_eq!(
        store.claim_due_tasks(1_000_000, LEASE, 0).await.unwrap(),
        vec![]
    );
}

async fn claim_task_takes_one_due_task(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let t = task(KEY, &task_id(1), 0);
    let r = TaskRef {
        key_id: KEY.into(),
        id: t.id.clone(),
    };
    store.create_task(&t, 1_000).await.unwrap();
    assert!(!store.claim_task(&r, 500, LEASE).await.unwrap(), "not due");
    assert!(store.claim_task(&r, 1_000, LEASE).await.unwrap());
    assert!(
        !store.claim_task(&r, 1_500, LEASE).await.unwrap(),
        "already claimed"
    );
    assert_eq!(
        store.claim_due_tasks(1_500, LEASE, 10).await.unwrap(),
        vec![]
    );
    assert!(
        store.claim_task(&r, 11_000, LEASE).await.unwrap(),
        "the lease ran out"
    );
    let stranger = TaskRef {
        key_id: OTHER.into(),
        id: t.id.clone(),
    };
    assert!(!store.claim_task(&stranger, 1_000_000, LEASE).await.unwrap());
    let unknown = TaskRef {
        key_id: KEY.into(),
        id: task_id(9),
    };
    assert!(!store.claim_task(&unknown, 1_000_000, LEASE).await.unwrap());
    let done = completed(t, 0);
    assert!(store.finish_task(&done, &usage(&done)).await.unwrap());
    assert!(
        !store.claim_task(&r, 1_000_000, LEASE).await.unwrap(),
        "an ended task is never claimed"
    );
}

async fn save_task_moves_progress_and_due_time_until_the_end(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let mut t = task(KEY, &task_id(1), 0);
    store.create_task(&t, 1_000).await.unwrap();
    assert_eq!(
        store.claim_due_tasks(1_000, LEASE, 10).await.unwrap().len(),
        1
    );
    t.status = TaskStatus::InProgress;
    t.progress = 40;
    t.polls = 1;
    assert!(store.save_task(&t, 50_000).await.unwrap());
    assert_eq!(store.get_task(KEY, &t.id).await.unwrap(), Some(t.clone()));
    assert_eq!(
        store.claim_due_tasks(49_999, LEASE, 10).await.unwrap(),
        vec![],
        "due when saved, not when the lease ends"
    );
    assert_eq!(
        ids(&store.claim_due_tasks(50_000, LEASE, 10).await.unwrap()),
        set(&[&t.id])
    );
    let mut ended = t.clone();
    ended.status = TaskStatus::Completed;
    assert!(
        store.save_task(&ended, 60_000).await.is_err(),
        "only finish_task ends a task"
    );
    assert!(
        !store
            .save_task(&task(KEY, &task_id(2), 0), 0)
            .await
            .unwrap(),
        "no task to save"
    );

    let done = completed(t.clone(), 0);
    assert!(store.finish_task(&done, &usage(&done)).await.unwrap());
    t.progress = 50;
    assert!(!store.save_task(&t, 70_000).await.unwrap(), "it ended");
    assert_eq!(store.get_task(KEY, &t.id).await.unwrap(), Some(done));
    assert_eq!(
        store
            .claim_due_tasks(i64::MAX / 2, LEASE, 10)
            .await
            .unwrap(),
        vec![]
    );
}

async fn finish_task_settles_and_logs_exactly_once(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let id = task_id(1);
    reserve(&*store, KEY, &id, 600_000).await.unwrap();
    assert_eq!(
        reserve(&*store, KEY, "req-1", 500_000).await,
        Err(ReserveDenied::QuotaExhausted),
        "the task's reservation holds its money"
    );
    let t = task(KEY, &id, 600_000);
    store.create_task(&t, 1_000).await.unwrap();

    let done = completed(t.clone(), 250_000);
    let rec = usage(&done);
    assert!(store.finish_task(&done, &rec).await.unwrap());
    assert_eq!(store.get_task(KEY, &id).await.unwrap(), Some(done.clone()));
    assert_eq!(used(&*store, KEY).await, 250_000);
    assert_eq!(
        available(&*store, KEY).await,
        QUOTA - 250_000,
        "the reservation is released"
    );
    assert_eq!(
        store.recent_usage(KEY, 10).await.unwrap(),
        vec![rec.clone()]
    );

    let again = completed(t.clone(), 400_000);
    assert!(!store.finish_task(&again, &usage(&again)).await.unwrap());
    let mut failed = t.clone();
    failed.status = TaskStatus::Failed;
    assert!(!store.finish_task(&failed, &usage(&failed)).await.unwrap());
    assert_eq!(used(&*store, KEY).await, 250_000, "charged once");
    assert_eq!(store.recent_usage(KEY, 10).await.unwrap(), vec![rec]);
    assert_eq!(store.get_task(KEY, &id).await.unwrap(), Some(done));

    let unknown = completed(task(KEY, &task_id(2), 0), 100);
    assert!(!store.finish_task(&unknown, &usage(&unknown)).await.unwrap());
    assert!(
        store.finish_task(&t, &usage(&t)).await.is_err(),
        "a task ends in a terminal state"
    );
    assert_eq!(used(&*store, KEY).await, 250_000);
}

/// The step that ends every relayed request: the reservation becomes the charge and the
/// usage record is written, together.
async fn settle_logged_settles_and_logs_in_one_step(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let r = reserve(&*store, KEY, "req-1", 700_000).await.unwrap();
    assert_eq!(
        reserve(&*store, KEY, "req-2", 400_000).await,
        Err(ReserveDenied::QuotaExhausted)
    );
    let mut rec = usage(&completed(task(KEY, "req-1", 0), 120_000));
    rec.request_id = "req-1".into();
    store.settle_logged(&r, 120_000, &rec).await.unwrap();
    assert_eq!(used(&*store, KEY).await, 120_000);
    assert_eq!(available(&*store, KEY).await, QUOTA - 120_000, "released");
    assert_eq!(store.recent_usage(KEY, 10).await.unwrap(), vec![rec]);
}

async fn failed_task_with_no_cost_refunds_its_reservation(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let id = task_id(1);
    reserve(&*store, KEY, &id, 600_000).await.unwrap();
    let mut t = task(KEY, &id, 600_000);
    store.create_task(&t, 1_000).await.unwrap();
    assert_eq!(available(&*store, KEY).await, QUOTA - 600_000);
    t.status = TaskStatus::Failed;
    t.error = Some(TaskError {
        code: "generation_failed".into(),
        message: "the video could not be generated".into(),
    });
    assert!(store.finish_task(&t, &usage(&t)).await.unwrap());
    assert_eq!(used(&*store, KEY).await, 0);
    assert_eq!(available(&*store, KEY).await, QUOTA);
    assert_eq!(store.recent_usage(KEY, 10).await.unwrap(), vec![usage(&t)]);
}

async fn concurrent_claims_hand_each_task_to_one_caller(cfg: StoreConfig) {
    let stores: Vec<Arc<dyn Store>> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(open(&cfg).await);
        }
        v
    };
    key(&*stores[0], KEY).await;
    let mut all = HashSet::new();
    for n in 0..10 {
        let t = task(KEY, &task_id(n), 0);
        stores[0].create_task(&t, 1_000 + n as i64).await.unwrap();
        all.insert(t.id);
    }
    let start = Arc::new(tokio::sync::Barrier::new(20));
    let mut callers = Vec::new();
    for i in 0..20 {
        let (store, start) = (stores[i % stores.len()].clone(), start.clone());
        callers.push(tokio::spawn(async move {
            start.wait().await;
            store.claim_due_tasks(5_000, LEASE, 2).await.unwrap()
        }));
    }
    let mut seen = Vec::new();
    for c in callers {
        seen.extend(c.await.unwrap().into_iter().map(|r| r.id));
    }
    assert_eq!(seen.len(), 10, "{seen:?}");
    assert_eq!(seen.into_iter().collect::<HashSet<_>>(), all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_restart_keeps_task_reservations_and_makes_open_tasks_due() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = embedded_config(&dir);
    let id = task_id(1);
    let far = model_gateway::ids::now_ms() + 3_600_000;
    {
        let store = open_store(&cfg, true).await.unwrap();
        key(&*store, KEY).await;
        reserve(&*store, KEY, &id, 600_000).await.unwrap();
        reserve(&*store, KEY, "req-in-flight", 300_000)
            .await
            .unwrap();
        // A name `task_%` as a LIKE pattern would match: it must not survive.
        reserve(&*store, KEY, "taskX-not-a-task", 50_000)
            .await
            .unwrap();
        store
            .create_task(&task(KEY, &id, 600_000), far)
            .await
            .unwrap();
        assert_eq!(available(&*store, KEY).await, QUOTA - 950_000);
    }
    let store = open_store(&cfg, true).await.unwrap();
    assert_eq!(
        available(&*store, KEY).await,
        QUOTA - 600_000,
        "only the task's reservation survives the restart"
    );
    let now = model_gateway::ids::now_ms();
    assert_eq!(
        ids(&store.claim_due_tasks(now, LEASE, 10).await.unwrap()),
        set(&[&id]),
        "an open task is due again at once after a restart"
    );
    let done = completed(task(KEY, &id, 600_000), 100_000);
    assert!(store.finish_task(&done, &usage(&done)).await.unwrap());
    assert_eq!(used(&*store, KEY).await, 100_000);
    assert_eq!(available(&*store, KEY).await, QUOTA - 100_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_claims_skip_a_task_that_ended_but_stayed_due() {
    // As if an instance stopped between finishing a task and removing its due entry (or a
    // late save re-added it): claims must still never return the ended task.
    let redis = RedisServer::start().await;
    let cfg = redis_config(&redis);
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let t = task(KEY, &task_id(1), 0);
    store.create_task(&t, 1_000).await.unwrap();
    let done = completed(t.clone(), 0);
    assert!(store.finish_task(&done, &usage(&done)).await.unwrap());
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let member = format!("{KEY} {}", t.id);
    let _: i64 = redis::cmd("ZADD")
        .arg("gw:tasks:due")
        .arg(1_000)
        .arg(&member)
        .query_async(&mut c)
        .await
        .unwrap();
    let r = TaskRef {
        key_id: KEY.into(),
        id: t.id.clone(),
    };
    assert!(!store.claim_task(&r, 2_000, LEASE).await.unwrap());
    let _: i64 = redis::cmd("ZADD")
        .arg("gw:tasks:due")
        .arg(1_000)
        .arg(&member)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        store.claim_due_tasks(2_000, LEASE, 10).await.unwrap(),
        vec![]
    );
    let left: Option<f64> = redis::cmd("ZSCORE")
        .arg("gw:tasks:due")
        .arg(&member)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(left, None, "the stale entry is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_due_entry_without_a_task_is_returned_and_finish_removes_it() {
    // As if an instance stopped between the two writes of `create_task`.
    let redis = RedisServer::start().await;
    let store = open(&redis_config(&redis)).await;
    key(&*store, KEY).await;
    let id = task_id(1);
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("gw:tasks:due")
        .arg(1_000)
        .arg(format!("{KEY} {id}"))
        .query_async(&mut c)
        .await
        .unwrap();
    let claimed = store.claim_due_tasks(2_000, LEASE, 10).await.unwrap();
    assert_eq!(
        ids(&claimed),
        set(&[&id]),
        "a create may still be in flight"
    );
    assert_eq!(store.get_task(KEY, &id).await.unwrap(), None);
    let orphan = completed(task(KEY, &id, 0), 0);
    assert!(!store.finish_task(&orphan, &usage(&orphan)).await.unwrap());
    assert_eq!(
        store
            .claim_due_tasks(i64::MAX / 2, LEASE, 10)
            .await
            .unwrap(),
        vec![]
    );
    assert_eq!(used(&*store, KEY).await, 0);
    assert_eq!(store.recent_usage(KEY, 10).await.unwrap(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_forget_task_drops_a_stray_ref_and_spares_a_live_task() {
    let redis = RedisServer::start().await;
    let store = open(&redis_config(&redis)).await;
    key(&*store, KEY).await;
    let (stray, live) = (task_id(1), task_id(2));
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("gw:tasks:due")
        .arg(1_000)
        .arg(format!("{KEY} {stray}"))
        .query_async(&mut c)
        .await
        .unwrap();
    store
        .create_task(&task(KEY, &live, 0), 1_000)
        .await
        .unwrap();
    for id in [&stray, &live] {
        let r = TaskRef {
            key_id: KEY.into(),
            id: id.to_string(),
        };
        store.forget_task(&r).await.unwrap();
    }
    let claimed = store.claim_due_tasks(2_000, LEASE, 10).await.unwrap();
    assert_eq!(ids(&claimed), set(&[&live]));
}

// ---------------------------------------------------------------------------------------
// Money exactly once.
// ---------------------------------------------------------------------------------------

/// A usage record of request `id`.
pub(crate) fn request_usage(id: &str, cost: Micros) -> UsageRecord {
    let mut u = usage(&completed(task(KEY, id, 0), cost));
    u.request_id = id.into();
    u.endpoint = "/v1/chat/completions".into();
    u
}

/// Polls `f` once and drops it: a caller that goes away while its call is under way.
/// `true` if it was cut off (had not finished on that one poll).
async fn cut_after_one_poll<F: std::future::Future>(f: F) -> bool {
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

async fn settling_an_id_twice_charges_and_logs_once(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let r = reserve(&*store, KEY, "req-1", 700_000).await.unwrap();
    let rec = request_usage("req-1", 120_000);
    store.settle_logged(&r, 120_000, &rec).await.unwrap();
    // A retry after a lost reply, then stray retries of other shapes: none changes a thing.
    store.settle_logged(&r, 120_000, &rec).await.unwrap();
    store.settle(&r, 500_000).await.unwrap();
    assert_eq!(used(&*store, KEY).await, 120_000, "charged once");
    assert_eq!(available(&*store, KEY).await, QUOTA - 120_000);
    assert_eq!(
        store.recent_usage(KEY, 10).await.unwrap(),
        vec![rec],
        "logged once"
    );
    // Plain settles too.
    let r = reserve(&*store, KEY, "req-2", 100_000).await.unwrap();
    store.settle(&r, 30_000).await.unwrap();
    store.settle(&r, 30_000).await.unwrap();
    assert_eq!(used(&*store, KEY).await, 150_000);
}

async fn reserving_a_held_id_answers_its_grant_and_a_settled_id_is_refused(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let r = store
        .reserve(KEY, "req-1", 0, 300_000, TTL)
        .await
        .unwrap()
        .unwrap();
    // A retry of the same reserve, even asking for more, holds nothing more.
    let again = store
        .reserve(KEY, "req-1", 0, 900_000, TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, r);
    assert_eq!(available(&*store, KEY).await, QUOTA - 300_000);
    // A task's reservation (kept on disk by the embedded store) is idempotent the same way.
    let t = reserve(&*store, KEY, &task_id(1), 200_000).await.unwrap();
    assert_eq!(
        reserve(&*store, KEY, &task_id(1), 200_000).await,
        Ok(t.clone())
    );
    assert_eq!(available(&*store, KEY).await, QUOTA - 500_000);

    store.settle(&r, 10_000).await.unwrap();
    store.settle(&t, 0).await.unwrap();
    for id in ["req-1", &task_id(1)] {
        assert_eq!(
            store.reserve(KEY, id, 0, 1, TTL).await.unwrap(),
            Err(ReserveDenied::Released),
            "{id}: an id holds money once"
        );
    }
    assert_eq!(available(&*store, KEY).await, QUOTA - 10_000);
    assert_eq!(used(&*store, KEY).await, 10_000);
}

/// What `billing::reserve` does after a reserve whose reply was lost: it cannot know
/// whether the store holds the id, so it releases it; a reserve arriving after that (a
/// late duplicate) must not hold it again.
async fn settling_an_unreserved_id_releases_it(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let never = Reservation {
        id: "req-lost".into(),
        key_id: KEY.into(),
        amount: 0,
    };
    store.settle(&never, 0).await.unwrap();
    assert_eq!(
        store.reserve(KEY, "req-lost", 0, 100, TTL).await.unwrap(),
        Err(ReserveDenied::Released)
    );
    assert_eq!(used(&*store, KEY).await, 0);
    assert_eq!(available(&*store, KEY).await, QUOTA);
}

/// A task ends once by its status; its reservation id is settled once too, so a settle
/// retried by a guard that handed it over, or a reserve of the id, changes nothing.
async fn a_finished_task_s_id_is_not_charged_again(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let id = task_id(1);
    let r = reserve(&*store, KEY, &id, 600_000).await.unwrap();
    let t = task(KEY, &id, 600_000);
    store.create_task(&t, 1_000).await.unwrap();
    let done = completed(t, 250_000);
    assert!(store.finish_task(&done, &usage(&done)).await.unwrap());
    store.settle(&r, 600_000).await.unwrap();
    assert_eq!(used(&*store, KEY).await, 250_000);
    assert_eq!(
        reserve(&*store, KEY, &id, 1).await,
        Err(ReserveDenied::Released)
    );
}

async fn extend_pushes_a_live_hold_and_revives_none(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let kept = store
        .reserve(KEY, "req-kept", 0, 100_000, 2)
        .await
        .unwrap()
        .unwrap();
    let lapsing = store
        .reserve(KEY, "req-lapsing", 0, 200_000, 2)
        .await
        .unwrap()
        .unwrap();
    let started = tokio::time::Instant::now();
    store.extend(&kept, 30).await.unwrap();
    // Extending never shortens: a hold extended by less than it has left keeps its expiry.
    store.extend(&kept, 1).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the unextended hold expires",
        || async { available(&*store, KEY).await == QUOTA - 100_000 },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "not before its TTL"
    );
    // An expired hold is not brought back by a late extend.
    store.extend(&lapsing, 30).await.unwrap();
    assert_eq!(available(&*store, KEY).await, QUOTA - 100_000);
    // Nor a settled one.
    store.settle(&kept, 5_000).await.unwrap();
    store.extend(&kept, 30).await.unwrap();
    assert_eq!(available(&*store, KEY).await, QUOTA - 5_000);
}

/// Holds live as long as their request: a guard extends its 2 s hold for as long as it
/// exists; the TTL reclaims only the hold of an instance that is gone (its guard leaked
/// with `mem::forget`, its runtime, and every task of it, stopped: a crash).
async fn a_guard_keeps_its_hold_and_a_dead_instance_s_hold_expires(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let mut guard = billing::reserve(&store, KEY, "req-long", 0, 300_000, 2)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await; // a long stream, 2.5 TTLs
    assert_eq!(
        available(&*store, KEY).await,
        QUOTA - 300_000,
        "still held after 5 s while its guard lives"
    );
    assert_eq!(guard.settle(40_000).await, SettleOutcome::Settled);
    assert_eq!(available(&*store, KEY).await, QUOTA - 40_000);

    // An instance that dies holding a reservation: its runtime stops with the guard leaked.
    let started = tokio::time::Instant::now();
    let shared = store.clone();
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let guard = rt
                .block_on(billing::reserve(&shared, KEY, "req-crashed", 0, 500_000, 2))
                .unwrap()
                .unwrap();
            std::mem::forget(guard);
            rt.shutdown_background();
        })
        .join()
        .unwrap()
    })
    .await
    .unwrap();
    eventually(
        Duration::from_secs(15),
        "the dead instance's hold expires",
        || async { available(&*store, KEY).await == QUOTA - 40_000 },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "held until its TTL, not released early"
    );
    assert_eq!(
        used(&*store, KEY).await,
        40_000,
        "and nothing charged for it"
    );
}

/// The guard keeps its reservation until the store confirms: a settle whose future is
/// dropped mid-call is finished by `Drop` in the background, with the same amount and the
/// same usage record, exactly once; whether the dropped call had reached the store (a
/// store that answers at once) or not yet (one that is slow to start the call, as a
/// connection being re-established is).
async fn a_settle_cancelled_mid_call_lands_exactly_once(cfg: StoreConfig) {
    let inner = open(&cfg).await;
    for (n, delay) in [Duration::ZERO, Duration::from_millis(50)]
        .into_iter()
        .enumerate()
    {
        let key_id = format!("key_{n:024}");
        key(&*inner, &key_id).await;
        let spy = Arc::new(Spy::new(inner.clone(), delay));
        let store: Arc<dyn Store> = spy.clone();
        let mut guard = billing::reserve(&store, &key_id, "req-1", 0, 500_000, TTL)
            .await
            .unwrap()
            .unwrap();
        guard.set_charge_on_drop(1); // what a drop would charge with no settle under way
        let mut rec = request_usage("req-1", 123_000);
        rec.key_id = key_id.clone();
        let cut = cut_after_one_poll(guard.settle_logged(123_000, rec.clone())).await;
        // (A store thread could in theory answer within the one poll; the slow start cannot.)
        assert!(cut || delay.is_zero(), "cancelled mid-call");
        drop(guard);
        eventually(Duration::from_secs(10), "the settle is retried", || async {
            spy.settles() >= 1
        })
        .await;
        let store = &*inner;
        assert_eq!(
            used(store, &key_id).await,
            123_000,
            "delay {delay:?}: charged once"
        );
        assert_eq!(
            store.recent_usage(&key_id, 10).await.unwrap(),
            vec![rec],
            "delay {delay:?}: logged once"
        );
        let left = store
            .reserve(&key_id, &model_gateway::ids::request_id(), 0, QUOTA, TTL)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            left.amount,
            QUOTA - 123_000,
            "delay {delay:?}: the hold is released"
        );
    }
}

/// A reserve cancelled after it reached the store but before its answer (the caller went
/// away, or the reply was lost) holds money no guard owns: `billing::reserve` releases it.
async fn a_reserve_cancelled_before_its_answer_is_released(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    // A reserve is cut after its first poll. A store that answers within that poll (a
    // connection being re-established fails at once) is simply asked again under
    // another id: what must hold is that no cut leaves money held.
    let mut cut = None;
    for attempt in 0..20 {
        let id = format!("req-gone-{attempt}");
        if cut_after_one_poll(billing::reserve(&store, KEY, &id, 0, 400_000, TTL)).await {
            cut = Some(id);
            break;
        }
    }
    let cut = cut.expect("cancelled before the answer");
    // The release runs in the background. Until it has, a late duplicate of the reserve
    // may still be granted (the release then frees that too); once it has, the id is
    // refused for good and nothing is held.
    eventually(
        Duration::from_secs(10),
        "the cut id is released, so a late duplicate cannot hold it again",
        || async {
            store.reserve(KEY, &cut, 0, 400_000, TTL).await.unwrap() == Err(ReserveDenied::Released)
        },
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the orphan hold is released",
        || async { available(&*store, KEY).await == QUOTA },
    )
    .await;
    assert_eq!(used(&*store, KEY).await, 0);
}

async fn usage_records_keep_whether_their_cost_is_estimated_and_the_overrun(cfg: StoreConfig) {
    let store = open(&cfg).await;
    key(&*store, KEY).await;
    let r = reserve(&*store, KEY, "req-1", 100_000).await.unwrap();
    let mut rec = request_usage("req-1", 100_000);
    rec.estimated = true;
    rec.overrun = 42_000;
    store.settle_logged(&r, 100_000, &rec).await.unwrap();
    let mut plain = request_usage("req-2", 0);
    plain.time_ms += 1;
    store.append_usage(&plain).await.unwrap();
    assert_eq!(store.recent_usage(KEY, 10).await.unwrap(), vec![plain, rec]);
}

/// A store in front of another that counts the settles it saw through to the end and can
/// be slow to start them (`delay` before the inner call).
struct Spy {
    inner: Arc<dyn Store>,
    delay: Duration,
    settles: AtomicUsize,
}

impl Spy {
    fn new(inner: Arc<dyn Store>, delay: Duration) -> Spy {
        Spy {
            inner,
            delay,
            settles: AtomicUsize::new(0),
        }
    }

    fn settles(&self) -> usize {
        self.settles.load(Ordering::SeqCst)
    }

    async fn slow_start(&self) {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
    }
}

type Res<T> = model_gateway::store::StoreResult<T>;

#[async_trait::async_trait]
impl Store for Spy {
    async fn create_key(&self, rec: &KeyRecord) -> Res<()> {
        self.inner.create_key(rec).await
    }
    async fn get_key(&self, id: &str) -> Res<Option<KeyRecord>> {
        self.inner.get_key(id).await
    }
    async fn list_keys(&self) -> Res<Vec<KeyRecord>> {
        self.inner.list_keys().await
    }
    async fn update_key(
        &self,
        id: &str,
        patch: &model_gateway::store::KeyPatch,
    ) -> Res<Option<KeyRecord>> {
        self.inner.update_key(id, patch).await
    }
    async fn delete_key(&self, id: &str) -> Res<bool> {
        self.inner.delete_key(id).await
    }
    async fn reserve(
        &self,
        key_id: &str,
        id: &str,
        min: Micros,
        max: Micros,
        ttl_secs: u64,
    ) -> Res<Result<Reservation, ReserveDenied>> {
        self.inner.reserve(key_id, id, min, max, ttl_secs).await
    }
    async fn extend(&self, r: &Reservation, ttl_secs: u64) -> Res<()> {
        self.inner.extend(r, ttl_secs).await
    }
    async fn settle(&self, r: &Reservation, actual: Micros) -> Res<()> {
        self.slow_start().await;
        let done = self.inner.settle(r, actual).await;
        self.settles.fetch_add(1, Ordering::SeqCst);
        done
    }
    async fn settle_logged(&self, r: &Reservation, actual: Micros, u: &UsageRecord) -> Res<()> {
        self.slow_start().await;
        let done = self.inner.settle_logged(r, actual, u).await;
        self.settles.fetch_add(1, Ordering::SeqCst);
        done
    }
    async fn rate_hit(&self, key_id: &str, rpm: u32, now_ms: i64) -> Res<bool> {
        self.inner.rate_hit(key_id, rpm, now_ms).await
    }
    async fn append_usage(&self, rec: &UsageRecord) -> Res<()> {
        self.inner.append_usage(rec).await
    }
    async fn recent_usage(&self, key_id: &str, limit: usize) -> Res<Vec<UsageRecord>> {
        self.inner.recent_usage(key_id, limit).await
    }
    async fn ping(&self) -> Res<()> {
        self.inner.ping().await
    }
}

#[async_trait::async_trait]
impl model_gateway::store::TaskStore for Spy {
    async fn create_task(&self, t: &TaskRecord, due_ms: i64) -> Res<()> {
        self.inner.create_task(t, due_ms).await
    }
    async fn get_task(&self, key_id: &str, id: &str) -> Res<Option<TaskRecord>> {
        self.inner.get_task(key_id, id).await
    }
    async fn claim_due_tasks(&self, now_ms: i64, lease_ms: i64, limit: usize) -> Res<Vec<TaskRef>> {
        self.inner.claim_due_tasks(now_ms, lease_ms, limit).await
    }
    async fn claim_task(&self, t: &TaskRef, now_ms: i64, lease_ms: i64) -> Res<bool> {
        self.inner.claim_task(t, now_ms, lease_ms).await
    }
    async fn save_task(&self, t: &TaskRecord, due_ms: i64) -> Res<bool> {
        self.inner.save_task(t, due_ms).await
    }
    async fn finish_task(&self, t: &TaskRecord, u: &UsageRecord) -> Res<bool> {
        self.inner.finish_task(t, u).await
    }
    async fn forget_task(&self, r: &TaskRef) -> Res<()> {
        self.inner.forget_task(r).await
    }
}
