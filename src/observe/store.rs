//! A thin [`Store`] decorator: every call is timed (`mg_store_operation_seconds`), every
//! failure counted by kind (`mg_store_errors_total`), the holds of requests in flight are
//! counted (`mg_reservations_held`, `mg_reserved_micro_usd`), and every usage record that
//! reaches the store is counted by model (tokens, cost, overruns). The backends stay as
//! they are; a usage record is the billing truth, so counting it where it is written
//! counts each charge once, whatever endpoint or background task made it.

use super::Observer;
use crate::store::{
    Ask, GroupPatch, GroupRecord, Headroom, KeyPatch, KeyRecord, Micros, Periods, RateCount,
    Reservation, ReserveDenied, Scope, Standing, Store, StoreError, StoreResult, TaskRecord,
    TaskRef, TaskStore, UsageRecord,
};
use async_trait::async_trait;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// The `op` label, one per store call.
pub const OPS: &[&str] = &[
    "create_key",
    "get_key",
    "list_keys",
    "update_key",
    "delete_key",
    "reserve",
    "extend",
    "settle",
    "settle_logged",
    "rate_hit",
    "append_usage",
    "recent_usage",
    "ping",
    "create_task",
    "get_task",
    "claim_due_tasks",
    "claim_task",
    "save_task",
    "finish_task",
    "forget_task",
    "groups",
    "standing",
];

#[derive(Clone, Copy)]
#[repr(usize)]
enum Op {
    CreateKey,
    GetKey,
    ListKeys,
    UpdateKey,
    DeleteKey,
    Reserve,
    Extend,
    Settle,
    SettleLogged,
    RateHit,
    AppendUsage,
    RecentUsage,
    Ping,
    CreateTask,
    GetTask,
    ClaimDueTasks,
    ClaimTask,
    SaveTask,
    FinishTask,
    ForgetTask,
    Groups,
    Standing,
}

pub struct Metered {
    inner: Arc<dyn Store>,
    obs: Arc<Observer>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Store>, obs: Arc<Observer>) -> Metered {
        Metered { inner, obs }
    }

    async fn time<T>(&self, op: Op, f: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        let start = Instant::now();
        let r = f.await;
        if let Some(h) = self.obs.store_seconds.get(op as usize) {
            h.observe(start.elapsed().as_secs_f64());
        }
        if let Err(e) = &r {
            let kind = match e {
                StoreError::Unavailable(_) => "unavailable",
                StoreError::Conflict(_) => "conflict",
                StoreError::Internal(_) => "internal",
            };
            self.obs
                .store_errors
                .with_label_values(&[OPS[op as usize], kind])
                .inc();
        }
        r
    }

    /// A request's hold (a video task's, `task_...`, lives past this process and is
    /// ended by its task, so it is not counted as in flight here).
    fn held(&self, r: &Reservation, sign: i64) {
        if r.amount > 0 && !r.id.starts_with("task_") {
            self.obs.reservations.add(sign);
            self.obs.reserved.add(sign * r.amount);
        }
    }

    fn usage(&self, u: &UsageRecord) {
        let o = &self.obs;
        let model = o.model_label(&u.model);
        for (kind, n) in [
            ("input", u.prompt_tokens),
            ("output", u.completion_tokens),
            ("cached_input", u.cached_tokens),
        ] {
            if n > 0 {
                o.tokens.with_label_values(&[model, kind]).inc_by(n);
            }
        }
        if u.cost > 0 {
            let source = if u.estimated { "estimated" } else { "exact" };
            o.cost
                .with_label_values(&[model, source])
                .inc_by(u.cost as u64);
        }
        if u.overrun > 0 {
            o.overruns.with_label_values(&[model]).inc();
            o.overrun_cost
                .with_label_values(&[model])
                .inc_by(u.overrun as u64);
        }
    }
}

#[async_trait]
impl Store for Metered {
    async fn create_key(&self, rec: &KeyRecord) -> StoreResult<()> {
        self.time(Op::CreateKey, self.inner.create_key(rec)).await
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<KeyRecord>> {
        self.time(Op::GetKey, self.inner.get_key(id)).await
    }

    async fn list_keys(&self) -> StoreResult<Vec<KeyRecord>> {
        self.time(Op::ListKeys, self.inner.list_keys()).await
    }

    async fn update_key(&self, id: &str, patch: &KeyPatch) -> StoreResult<Option<KeyRecord>> {
        self.time(Op::UpdateKey, self.inner.update_key(id, patch))
            .await
    }

    async fn delete_key(&self, id: &str) -> StoreResult<bool> {
        self.time(Op::DeleteKey, self.inner.delete_key(id)).await
    }

    async fn reserve_counted(
        &self,
        key_id: &str,
        reservation_id: &str,
        ask: &Ask,
        ttl_secs: u64,
    ) -> StoreResult<(Result<Reservation, ReserveDenied>, Headroom)> {
        let r = self
            .time(
                Op::Reserve,
                self.inner
                    .reserve_counted(key_id, reservation_id, ask, ttl_secs),
            )
            .await;
        if let Ok((Ok(held), _)) = &r {
            self.held(held, 1);
        }
        r
    }

    async fn extend(&self, reservation: &Reservation, ttl_secs: u64) -> StoreResult<()> {
        self.time(Op::Extend, self.inner.extend(reservation, ttl_secs))
            .await
    }

    async fn settle(&self, reservation: &Reservation, actual: Micros) -> StoreResult<()> {
        let r = self
            .time(Op::Settle, self.inner.settle(reservation, actual))
            .await;
        if r.is_ok() {
            self.held(reservation, -1);
        }
        r
    }

    async fn settle_logged(
        &self,
        reservation: &Reservation,
        actual: Micros,
        usage: &UsageRecord,
    ) -> StoreResult<()> {
        let r = self
            .time(
                Op::SettleLogged,
                self.inner.settle_logged(reservation, actual, usage),
            )
            .await;
        if r.is_ok() {
            self.held(reservation, -1);
            self.usage(usage);
        }
        r
    }

    async fn rate_hit(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<bool> {
        self.time(Op::RateHit, self.inner.rate_hit(key_id, rpm, now_ms))
            .await
    }

    async fn rate_take(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<RateCount> {
        self.time(Op::RateHit, self.inner.rate_take(key_id, rpm, now_ms))
            .await
    }

    async fn append_usage(&self, rec: &UsageRecord) -> StoreResult<()> {
        let r = self
            .time(Op::AppendUsage, self.inner.append_usage(rec))
            .await;
        if r.is_ok() {
            self.usage(rec);
        }
        r
    }

    async fn recent_usage(&self, key_id: &str, limit: usize) -> StoreResult<Vec<UsageRecord>> {
        self.time(Op::RecentUsage, self.inner.recent_usage(key_id, limit))
            .await
    }

    async fn create_group(&self, rec: &GroupRecord) -> StoreResult<()> {
        self.time(Op::Groups, self.inner.create_group(rec)).await
    }

    async fn get_group(&self, id: &str) -> StoreResult<Option<GroupRecord>> {
        self.time(Op::Groups, self.inner.get_group(id)).await
    }

    async fn list_groups(&self) -> StoreResult<Vec<GroupRecord>> {
        self.time(Op::Groups, self.inner.list_groups()).await
    }

    async fn update_group(&self, id: &str, patch: &GroupPatch) -> StoreResult<Option<GroupRecord>> {
        self.time(Op::Groups, self.inner.update_group(id, patch))
            .await
    }

    async fn delete_group(&self, id: &str) -> StoreResult<bool> {
        self.time(Op::Groups, self.inner.delete_group(id)).await
    }

    async fn standing(
        &self,
        scope: Scope,
        id: &str,
        periods: &Periods,
        minute: i64,
    ) -> StoreResult<Standing> {
        self.time(
            Op::Standing,
            self.inner.standing(scope, id, periods, minute),
        )
        .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.time(Op::Ping, self.inner.ping()).await
    }

    fn usage_query(&self) -> Option<&dyn crate::store::usage_query::UsageQuery> {
        self.inner.usage_query()
    }

    fn responses(&self) -> Option<&dyn crate::store::responses::ResponseStore> {
        self.inner.responses()
    }

    async fn close(&self) -> StoreResult<()> {
        self.inner.close().await
    }
}

#[async_trait]
impl TaskStore for Metered {
    async fn create_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<()> {
        self.time(Op::CreateTask, self.inner.create_task(t, due_ms))
            .await
    }

    async fn get_task(&self, key_id: &str, id: &str) -> StoreResult<Option<TaskRecord>> {
        self.time(Op::GetTask, self.inner.get_task(key_id, id))
            .await
    }

    async fn claim_due_tasks(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<TaskRef>> {
        self.time(
            Op::ClaimDueTasks,
            self.inner.claim_due_tasks(now_ms, lease_ms, limit),
        )
        .await
    }

    async fn claim_task(&self, t: &TaskRef, now_ms: i64, lease_ms: i64) -> StoreResult<bool> {
        self.time(Op::ClaimTask, self.inner.claim_task(t, now_ms, lease_ms))
            .await
    }

    async fn save_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<bool> {
        self.time(Op::SaveTask, self.inner.save_task(t, due_ms))
            .await
    }

    async fn finish_task(&self, t: &TaskRecord, usage: &UsageRecord) -> StoreResult<bool> {
        let r = self
            .time(Op::FinishTask, self.inner.finish_task(t, usage))
            .await;
        if let Ok(true) = r {
            self.usage(usage);
        }
        r
    }

    async fn forget_task(&self, r: &TaskRef) -> StoreResult<()> {
        self.time(Op::ForgetTask, self.inner.forget_task(r)).await
    }
}
