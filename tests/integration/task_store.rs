//! The video task store (`store::TaskStore`) on every backend (see [`crate::contract`]):
//! lease expiry is driven by explicit `now_ms` values, never by waiting.

use crate::contract::{
    available, backends, completed, embedded_config, key, open, open_shared, redis_config, reserve,
    task, task_id, usage, used, KEY, OTHER, QUOTA,
};
use crate::redis_server::RedisServer;
use model_gateway::config::StoreConfig;
use model_gateway::gateway::open_store;
use model_gateway::store::{ReserveDenied, Store, StoreError, TaskError, TaskRef, TaskStatus};
use std::collections::HashSet;
use std::sync::Arc;

backends!(
    create_then_get_only_through_the_owner,
    claims_hand_out_due_open_tasks_once_per_lease,
    claim_task_takes_one_due_task,
    save_task_moves_progress_and_due_time_until_the_end,
    finish_task_settles_and_logs_exactly_once,
    failed_task_with_no_cost_refunds_its_reservation,
    concurrent_claims_hand_each_task_to_one_caller,
);

const LEASE: i64 = 10_000;

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
        v.push(open(&cfg).await);
        for _ in 1..4 {
            v.push(open_shared(&cfg).await);
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
