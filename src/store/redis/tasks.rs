//! Video tasks on Redis. Layout:
//! - `gw:task:{KEYID}:<task_id>` hash: `status`, `record` (the [`TaskRecord`] as JSON).
//!   The owner's id is the hash tag, so a task shares its slot with `gw:key:{KEYID}`,
//!   `gw:rsv:{KEYID}`, `gw:rsva:{KEYID}`, `gw:done:{KEYID}` and `gw:log:{KEYID}`: ending a task, settling its
//!   reservation and logging its usage is one Lua script.
//! - `gw:tasks:due` zset: member `"<key_id> <task_id>"`, score = unix ms when the open task
//!   is next due. Claims are Lua scripts on this one key, so two instances never claim the
//!   same task for the same lease.
//!
//! The due set and a task hash live in different slots, so some steps are two commands:
//! - `create_task` adds the due member first, then the hash. A crash between leaves a
//!   member with no task: a claim still returns it (it cannot tell it from a create in
//!   flight), `get_task` answers `None`, and the caller skips it. `finish_task` on such a
//!   ref (any record with its id and key id) returns `false` and removes the member.
//! - `finish_task` removes the due member after its script; `save_task` re-adds it after
//!   its own. A crash or a race between them can leave an ended task's member in the set:
//!   the claims look at the status of what they claimed and drop ended tasks, so they are
//!   never returned.

use super::conn::{done, key, log, map_err, rsv, rsva};
use super::scripts::{counters_fn, settle_fn, CREATE};
use super::{RedisStore, LOG_MAX};
use crate::store::tasks::{TaskRecord, TaskRef, TaskStatus, TaskStore};
use crate::store::{StoreError, StoreResult, UsageRecord};
use async_trait::async_trait;
use redis::Script;
use std::sync::LazyLock;

const DUE: &str = "gw:tasks:due";

// gw_claim_due_v1: KEYS due; ARGV now, lease_until, limit.
const CLAIM_DUE_LUA: &str = r"
local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, v in ipairs(m) do redis.call('ZADD', KEYS[1], ARGV[2], v) end
return m";

// gw_claim_task_v1: KEYS due; ARGV member, now, lease_until.
const CLAIM_ONE_LUA: &str = r"
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) <= tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
return 0";

// gw_save_task_v1: KEYS task; ARGV status, record. Only an existing open task.
const SAVE_LUA: &str = r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s or s == 'completed' or s == 'failed' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'record', ARGV[2])
return 1";

// gw_finish_task_v3: KEYS task, key, rsv, rsva, log, done; ARGV status, record, rid,
// actual, usage, log_max, tokens used. Ends an open task, settles its reservation exactly
// as gw_settle_v3 (once: a reservation settled before is not charged again) and appends its
// usage exactly as `append_usage`, or does nothing.
const FINISH_LUA: &str = concat!(
    settle_fn!(),
    r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s or s == 'completed' or s == 'failed' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'record', ARGV[2])
settle(KEYS[2], KEYS[3], KEYS[4], KEYS[6], ARGV[3], ARGV[4], ARGV[7])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[6], '*', 'r', ARGV[5])
return 1"
);

static CREATE_TASK: LazyLock<Script> = LazyLock::new(|| Script::new(CREATE));
static CLAIM_DUE: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM_DUE_LUA));
static CLAIM_ONE: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM_ONE_LUA));
static SAVE: LazyLock<Script> = LazyLock::new(|| Script::new(SAVE_LUA));
static FINISH: LazyLock<Script> = LazyLock::new(|| Script::new(FINISH_LUA));

fn task_key(key_id: &str, id: &str) -> String {
    format!("gw:task:{{{key_id}}}:{id}")
}

fn member(key_id: &str, id: &str) -> String {
    format!("{key_id} {id}")
}

fn parse_member(m: &str) -> Option<TaskRef> {
    let (key_id, id) = m.split_once(' ')?;
    Some(TaskRef {
        key_id: key_id.to_string(),
        id: id.to_string(),
    })
}

fn internal(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::internal_error(e)
}

impl RedisStore {
    /// Whether the task has ended (a missing task has not: it may be a create in flight).
    async fn task_ended(&self, r: &TaskRef) -> StoreResult<bool> {
        let s: Option<String> = self
            .query(
                redis::cmd("HGET")
                    .arg(task_key(&r.key_id, &r.id))
                    .arg("status"),
            )
            .await?;
        Ok(s.and_then(|s| TaskStatus::parse(&s))
            .is_some_and(TaskStatus::is_terminal))
    }

    /// Keeps a claimed task if it is open (or missing); drops an ended one from the due set.
    async fn keep_claimed(&self, r: &TaskRef) -> StoreResult<bool> {
        if !self.task_ended(r).await? {
            return Ok(true);
        }
        self.query::<i64>(redis::cmd("ZREM").arg(DUE).arg(member(&r.key_id, &r.id)))
            .await?;
        Ok(false)
    }
}

#[async_trait]
impl TaskStore for RedisStore {
    async fn create_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<()> {
        if t.status.is_terminal() {
            return Err(StoreError::internal(format!(
                "task {} created already ended",
                t.id
            )));
        }
        let text = serde_json::to_string(t).map_err(internal)?;
        // The due member first: a crash before the hash leaves a member `get_task` answers
        // `None` for, never a task nobody polls. NX: an existing task keeps its due time.
        self.query::<i64>(
            redis::cmd("ZADD")
                .arg(DUE)
                .arg("NX")
                .arg(due_ms)
                .arg(member(&t.key_id, &t.id)),
        )
        .await?;
        let created: i64 = CREATE_TASK
            .key(task_key(&t.key_id, &t.id))
            .arg("status")
            .arg(t.status.as_str())
            .arg("record")
            .arg(text)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        if created == 0 {
            return Err(StoreError::conflict(format!("task {} exists", t.id)));
        }
        Ok(())
    }

    async fn get_task(&self, key_id: &str, id: &str) -> StoreResult<Option<TaskRecord>> {
        let text: Option<String> = self
            .query(redis::cmd("HGET").arg(task_key(key_id, id)).arg("record"))
            .await?;
        let Some(text) = text else {
            return Ok(None);
        };
        let t: TaskRecord = serde_json::from_str(&text).map_err(internal)?;
        Ok((t.key_id == key_id && t.id == id).then_some(t))
    }

    async fn claim_due_tasks(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<TaskRef>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let members: Vec<String> = CLAIM_DUE
            .key(DUE)
            .arg(now_ms)
            .arg(now_ms.saturating_add(lease_ms.max(0)))
            .arg(limit)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        let mut out = Vec::with_capacity(members.len());
        for r in members.iter().filter_map(|m| parse_member(m)) {
            if self.keep_claimed(&r).await? {
                out.push(r);
            }
        }
        Ok(out)
    }

    async fn claim_task(&self, t: &TaskRef, now_ms: i64, lease_ms: i64) -> StoreResult<bool> {
        let claimed: i64 = CLAIM_ONE
            .key(DUE)
            .arg(member(&t.key_id, &t.id))
            .arg(now_ms)
            .arg(now_ms.saturating_add(lease_ms.max(0)))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        if claimed == 0 {
            return Ok(false);
        }
        self.keep_claimed(t).await
    }

    async fn save_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<bool> {
        if t.status.is_terminal() {
            return Err(StoreError::internal(format!(
                "task {} saved as ended: finish_task ends a task",
                t.id
            )));
        }
        let text = serde_json::to_string(t).map_err(internal)?;
        let saved: i64 = SAVE
            .key(task_key(&t.key_id, &t.id))
            .arg(t.status.as_str())
            .arg(text)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        if saved == 0 {
            return Ok(false);
        }
        // Plain ZADD (not XX): it also restores a member lost with Redis data. Should the
        // task end in between, claims drop the member they find ended.
        self.query::<i64>(
            redis::cmd("ZADD")
                .arg(DUE)
                .arg(due_ms)
                .arg(member(&t.key_id, &t.id)),
        )
        .await?;
        Ok(true)
    }

    async fn finish_task(&self, t: &TaskRecord, usage: &UsageRecord) -> StoreResult<bool> {
        if !t.status.is_terminal() {
            return Err(StoreError::internal(format!(
                "task {} finished as {}",
                t.id,
                t.status.as_str()
            )));
        }
        if usage.key_id != t.key_id {
            return Err(StoreError::internal(format!(
                "task {} of {} finished with usage of {}",
                t.id, t.key_id, usage.key_id
            )));
        }
        let text = serde_json::to_string(t).map_err(internal)?;
        let usage_text = serde_json::to_string(usage).map_err(internal)?;
        let k = &t.key_id;
        // A hold also on a group: the group's half first (once, by its own tombstone).
        let used = usage
            .prompt_tokens
            .saturating_add(usage.completion_tokens)
            .min(i64::MAX as u64) as i64;
        if let Some(g) = self.hold_group(k, &t.id).await? {
            self.settle_group(&g, &t.id, t.cost.max(0), used).await?;
        }
        let ended: i64 = FINISH
            .key(task_key(k, &t.id))
            .key(key(k))
            .key(rsv(k))
            .key(rsva(k))
            .key(log(k))
            .key(done(k))
            .arg(t.status.as_str())
            .arg(text)
            .arg(&t.id)
            .arg(t.cost.max(0))
            .arg(usage_text)
            .arg(LOG_MAX)
            .arg(used)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        // Housekeeping, also when nothing changed (a retry, or a member with no task): the
        // task has ended once the script did, and claims drop an ended task's member anyway.
        if let Err(e) = self
            .query::<i64>(redis::cmd("ZREM").arg(DUE).arg(member(k, &t.id)))
            .await
        {
            tracing::warn!(task = %t.id, error = %e, "task ended but stays in the due set");
        }
        Ok(ended == 1)
    }

    async fn forget_task(&self, r: &TaskRef) -> StoreResult<()> {
        let exists: i64 = self
            .query(redis::cmd("EXISTS").arg(task_key(&r.key_id, &r.id)))
            .await?;
        if exists == 0 {
            self.query::<i64>(redis::cmd("ZREM").arg(DUE).arg(member(&r.key_id, &r.id)))
                .await?;
        }
        Ok(())
    }
}
