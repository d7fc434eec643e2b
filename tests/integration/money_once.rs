//! Money exactly once on every backend (see [`crate::contract`]): `Store::reserve_ask`,
//! `extend`, `settle`, `settle_logged` and `billing::reserve` with its guard are
//! idempotent by reservation id; holds are kept alive by their guard and reclaimed by
//! their TTL only when the instance holding them is gone. These checks wait for real time
//! where a TTL is the point (2 s TTLs, polled with a deadline).

use crate::contract::{
    available, backends, completed, cut_after_one_poll, eventually, key, money, open,
    request_usage, reserve, task, task_id, usage, used, KEY, QUOTA, TTL,
};
use model_gateway::billing::{self, SettleOutcome};
use model_gateway::config::StoreConfig;
use model_gateway::store::{
    Ask, KeyRecord, Micros, Reservation, ReserveDenied, Store, TaskRecord, TaskRef, UsageRecord,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

backends!(
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
        .reserve_ask(KEY, "req-1", &money(0, 300_000), TTL)
        .await
        .unwrap()
        .unwrap();
    // A retry of the same reserve, even asking for more, holds nothing more.
    let again = store
        .reserve_ask(KEY, "req-1", &money(0, 900_000), TTL)
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
            store.reserve_ask(KEY, id, &money(0, 1), TTL).await.unwrap(),
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
        store
            .reserve_ask(KEY, "req-lost", &money(0, 100), TTL)
            .await
            .unwrap(),
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
        .reserve_ask(KEY, "req-kept", &money(0, 100_000), 2)
        .await
        .unwrap()
        .unwrap();
    let lapsing = store
        .reserve_ask(KEY, "req-lapsing", &money(0, 200_000), 2)
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
    let mut guard = billing::reserve(&store, KEY, "req-long", &Ask::money(0, 300_000, 0), 2)
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
                .block_on(billing::reserve(
                    &shared,
                    KEY,
                    "req-crashed",
                    &Ask::money(0, 500_000, 0),
                    2,
                ))
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
        let mut guard = billing::reserve(&store, &key_id, "req-1", &Ask::money(0, 500_000, 0), TTL)
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
            .reserve_ask(
                &key_id,
                &model_gateway::ids::request_id(),
                &money(0, QUOTA),
                TTL,
            )
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
    // A reserve is cut after its first poll. A store that answers within that poll (a
    // connection being re-established fails at once; the embedded store answers a key
    // it holds in memory at once, and loads one it does not on its writer thread, which
    // may be quicker than the poll) is simply asked again, for a key it has not seen:
    // what must hold is that no cut leaves money held.
    let mut cut = None;
    for attempt in 0..20 {
        let key_id = format!("key_{attempt:024}");
        key(&*store, &key_id).await;
        let id = format!("req-gone-{attempt}");
        if cut_after_one_poll(billing::reserve(
            &store,
            &key_id,
            &id,
            &Ask::money(0, 400_000, 0),
            TTL,
        ))
        .await
        {
            cut = Some((key_id, id));
            break;
        }
    }
    let (key_id, cut) = cut.expect("cancelled before the answer");
    // The release runs in the background. Until it has, a late duplicate of the reserve
    // may still be granted (the release then frees that too); once it has, the id is
    // refused for good and nothing is held.
    eventually(
        Duration::from_secs(10),
        "the cut id is released, so a late duplicate cannot hold it again",
        || async {
            store
                .reserve_ask(&key_id, &cut, &money(0, 400_000), TTL)
                .await
                .unwrap()
                == Err(ReserveDenied::Released)
        },
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the orphan hold is released",
        || async { available(&*store, &key_id).await == QUOTA },
    )
    .await;
    assert_eq!(used(&*store, &key_id).await, 0);
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
    async fn reserve_counted(
        &self,
        key_id: &str,
        id: &str,
        ask: &model_gateway::store::Ask,
        ttl_secs: u64,
    ) -> Res<(
        Result<Reservation, ReserveDenied>,
        model_gateway::store::Headroom,
    )> {
        self.inner.reserve_counted(key_id, id, ask, ttl_secs).await
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
    async fn create_group(&self, g: &model_gateway::store::GroupRecord) -> Res<()> {
        self.inner.create_group(g).await
    }
    async fn get_group(&self, id: &str) -> Res<Option<model_gateway::store::GroupRecord>> {
        self.inner.get_group(id).await
    }
    async fn list_groups(&self) -> Res<Vec<model_gateway::store::GroupRecord>> {
        self.inner.list_groups().await
    }
    async fn update_group(
        &self,
        id: &str,
        patch: &model_gateway::store::GroupPatch,
    ) -> Res<Option<model_gateway::store::GroupRecord>> {
        self.inner.update_group(id, patch).await
    }
    async fn delete_group(&self, id: &str) -> Res<bool> {
        self.inner.delete_group(id).await
    }
    async fn standing(
        &self,
        scope: model_gateway::store::Scope,
        id: &str,
        periods: &model_gateway::store::Periods,
        minute: i64,
    ) -> Res<model_gateway::store::Standing> {
        self.inner.standing(scope, id, periods, minute).await
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
