//! Asynchronous video tasks as the store keeps them.
//!
//! A task is owned by one key and found only through it: `get_task(owner, id)` for
//! another key's task is `None`, exactly like an unknown id. Open tasks are due for a
//! poll at a time; `claim_*` hands a due task to one caller and makes it not due again
//! for a lease, so several gateway instances on one store never poll the same task at
//! once. A task ends once: [`TaskStore::finish_task`] writes the terminal state, settles
//! the task's reservation and appends its usage record in one atomic step, and does
//! nothing on a task that already ended (a restart, or a second instance, cannot bill
//! twice).

use super::{Micros, StoreResult, UsageRecord};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Spec 3: the only four states a task is shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    InProgress,
    Completed,
    Failed,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<TaskStatus> {
        match s {
            "queued" => Some(TaskStatus::Queued),
            "in_progress" => Some(TaskStatus::InProgress),
            "completed" => Some(TaskStatus::Completed),
            "failed" => Some(TaskStatus::Failed),
            _ => None,
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed)
    }
}

/// What a completed task produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    /// Where the upstream serves the video, when it gives a URL (private: clients download
    /// through the gateway).
    pub upstream_url: Option<String>,
    pub format: Option<String>,
    /// Seconds of video actually produced.
    pub duration: Option<f64>,
    pub fps: Option<u32>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub seed: Option<i64>,
}

/// Why a task failed, as shown to the client (never the upstream's own text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskError {
    /// Stable label, e.g. `generation_failed`, `task_timeout`.
    pub code: String,
    pub message: String,
}

/// One video task. Stored whole; only the store's own bookkeeping (due time, lease) lives
/// outside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// `task_` + 32 alphanumerics; also the id of the task's reservation.
    pub id: String,
    /// The owner.
    pub key_id: String,
    /// The client path that created it (for the usage record).
    pub endpoint: String,
    /// The model name the caller used.
    pub model: String,
    /// The configured channel name the task runs on.
    pub channel: String,
    /// The upstream's id for the task. Never shown to a client.
    pub upstream_id: String,
    /// Upstream-shape detail needed to poll (e.g. `text2video` / `image2video`).
    pub upstream_kind: String,
    pub status: TaskStatus,
    /// 0..=100.
    pub progress: u8,
    /// Unix seconds.
    pub created_at: i64,
    pub completed_at: Option<i64>,
    /// Unix seconds after which an open task fails with `task_timeout` and is refunded.
    pub deadline: i64,
    /// Seconds of video asked for (per video).
    pub seconds: f64,
    /// `WxH` when asked for.
    pub size: Option<String>,
    /// Videos asked for.
    pub n: u32,
    /// What the reservation (id = `id`) holds.
    pub reserved: Micros,
    /// Charged at the end (0 until then, and for failed tasks).
    pub cost: Micros,
    /// The key's price multiplier when the task was submitted, in parts per million
    /// (`None` = 1): the charge is the provider cost times it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier_ppm: Option<u64>,
    /// Polls so far (drives the back-off).
    pub polls: u32,
    pub result: Option<TaskResult>,
    pub error: Option<TaskError>,
}

/// The address of a task in the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskRef {
    pub key_id: String,
    pub id: String,
}

#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new open task, first due at `due_ms` (unix milliseconds). The task's
    /// reservation (id = task id) was made before with `Store::reserve_ask` and must survive
    /// restarts of the gateway until the task ends or the reservation's TTL passes (so
    /// its TTL should reach past the task's `deadline`). `Conflict` if the id exists;
    /// an error if `t.status` is terminal.
    async fn create_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<()>;

    /// The task with this id owned by this key; `None` for an unknown id or another
    /// key's task.
    async fn get_task(&self, key_id: &str, id: &str) -> StoreResult<Option<TaskRecord>>;

    /// Up to `limit` open tasks due at `now_ms`, each made not due until
    /// `now_ms + lease_ms` in the same atomic step (whoever gets a task owns its next
    /// poll). Ended tasks are never returned. A returned ref whose `get_task` is `None`
    /// (on Redis: a create interrupted between its two writes) is skipped by the caller;
    /// `finish_task` with its id and key id removes it.
    async fn claim_due_tasks(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<TaskRef>>;

    /// Claims this one task if it is open and due at `now_ms` (a status request that finds
    /// its task stale refreshes it itself); `false` if it is not due or already claimed.
    async fn claim_task(&self, t: &TaskRef, now_ms: i64, lease_ms: i64) -> StoreResult<bool>;

    /// Saves an open task's progress (status, progress, polls, result so far) and makes it
    /// due at `due_ms`. Does nothing and returns `false` if the task already ended or
    /// does not exist. An error if `t.status` is terminal: only `finish_task` ends a task.
    async fn save_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<bool>;

    /// Ends the task once, atomically: stores `t` (whose status is terminal, with
    /// `cost` set), settles the reservation `t.id` of `t.key_id` with `t.cost` (a refund
    /// when 0) and appends `usage`. Returns `false`, changing nothing, if the task had
    /// already ended or does not exist. An error if `t.status` is not terminal or
    /// `usage.key_id` is not `t.key_id`.
    async fn finish_task(&self, t: &TaskRecord, usage: &UsageRecord) -> StoreResult<bool>;

    /// Drops a claimed ref whose task does not exist (a submission that failed between
    /// the store's two writes), so it is not handed out again. Does nothing to a task
    /// that exists.
    async fn forget_task(&self, r: &TaskRef) -> StoreResult<()>;
}
