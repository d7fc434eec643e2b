//! Video tasks in the embedded store: one `tasks` row per task, the record as JSON.
//!
//! `due_at` (unix ms) is when an open task is next due for a poll; it is NULL once the
//! task has ended, so claims (which read only `due_at <= now`, through a partial index)
//! never see ended tasks. Every change is one job on the writer, which runs jobs one at a
//! time: a claim's select and update, or a finish's update, settle and usage insert, are
//! atomic and durable when they return. Reads of a task go to the read connections.

use super::sql::{exec, hold_detail, internal, settle_hold_in, Once};
use super::EmbeddedStore;
use crate::store::tasks::{TaskRecord, TaskRef, TaskStore};
use crate::store::{StoreError, StoreResult, UsageRecord};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

fn record_json(t: &TaskRecord) -> StoreResult<String> {
    serde_json::to_string(t).map_err(internal)
}

fn get_task(c: &Connection, key_id: &str, id: &str) -> StoreResult<Option<TaskRecord>> {
    let text: Option<String> = c
        .prepare_cached("SELECT record FROM tasks WHERE id = ?1 AND key_id = ?2")
        .and_then(|mut st| st.query_row([id, key_id], |r| r.get(0)).optional())
        .map_err(internal)?;
    text.map(|t| serde_json::from_str(&t).map_err(internal))
        .transpose()
}

#[async_trait]
impl TaskStore for EmbeddedStore {
    async fn create_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<()> {
        if t.status.is_terminal() {
            return Err(StoreError::internal(format!(
                "task {} created already ended",
                t.id
            )));
        }
        let text = record_json(t)?;
        let (id, key_id, status) = (t.id.clone(), t.key_id.clone(), t.status);
        self.call(move |c| {
            let n = exec(
                c,
                "INSERT OR IGNORE INTO tasks (id, key_id, status, due_at, record)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, key_id, status.as_str(), due_ms, text],
            )
            .map_err(internal)?;
            if n == 0 {
                return Err(StoreError::conflict(format!("task {id} exists")));
            }
            Ok(())
        })
        .await
    }

    async fn get_task(&self, key_id: &str, id: &str) -> StoreResult<Option<TaskRecord>> {
        let (key_id, id) = (key_id.to_string(), id.to_string());
        self.readers.read(move |c| get_task(c, &key_id, &id)).await
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
        let until = now_ms.saturating_add(lease_ms.max(0));
        self.call(move |c| {
            let refs = {
                let mut st = c
                    .prepare_cached(
                        "SELECT id, key_id FROM tasks WHERE due_at <= ?1 ORDER BY due_at LIMIT ?2",
                    )
                    .map_err(internal)?;
                let rows = st
                    .query_map(params![now_ms, limit as i64], |r| {
                        Ok(TaskRef {
                            id: r.get(0)?,
                            key_id: r.get(1)?,
                        })
                    })
                    .map_err(internal)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(internal)?
            };
            for r in &refs {
                exec(
                    c,
                    "UPDATE tasks SET due_at = ?2 WHERE id = ?1",
                    params![r.id, until],
                )
                .map_err(internal)?;
            }
            Ok(refs)
        })
        .await
    }

    async fn claim_task(&self, t: &TaskRef, now_ms: i64, lease_ms: i64) -> StoreResult<bool> {
        let (id, key_id) = (t.id.clone(), t.key_id.clone());
        let until = now_ms.saturating_add(lease_ms.max(0));
        self.call(move |c| {
            let n = exec(
                c,
                "UPDATE tasks SET due_at = ?4 WHERE id = ?1 AND key_id = ?2 AND due_at <= ?3",
                params![id, key_id, now_ms, until],
            )
            .map_err(internal)?;
            Ok(n > 0)
        })
        .await
    }

    async fn save_task(&self, t: &TaskRecord, due_ms: i64) -> StoreResult<bool> {
        if t.status.is_terminal() {
            return Err(StoreError::internal(format!(
                "task {} saved as ended: finish_task ends a task",
                t.id
            )));
        }
        let text = record_json(t)?;
        let (id, key_id, status) = (t.id.clone(), t.key_id.clone(), t.status);
        self.call(move |c| {
            let n = exec(
                c,
                "UPDATE tasks SET status = ?3, due_at = ?4, record = ?5
                 WHERE id = ?1 AND key_id = ?2 AND status NOT IN ('completed', 'failed')",
                params![id, key_id, status.as_str(), due_ms, text],
            )
            .map_err(internal)?;
            Ok(n > 0)
        })
        .await
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
        let text = record_json(t)?;
        let usage_text = serde_json::to_string(usage).map_err(internal)?;
        let (id, key_id, status, cost) = (t.id.clone(), t.key_id.clone(), t.status, t.cost);
        let usage_key = usage.key_id.clone();
        let tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        let usage_rows = self.usage_rows.clone();
        let prune_settled = self.settle_prune_due();
        let now = self.clock.now();
        let ledger = self.ledger.clone();
        let reader = ledger.clone();
        self.write(
            false,
            move |c| {
                let n = exec(
                    c,
                    "UPDATE tasks SET status = ?3, due_at = NULL, record = ?4
                     WHERE id = ?1 AND key_id = ?2 AND status NOT IN ('completed', 'failed')",
                    params![id, key_id, status.as_str(), text],
                )
                .map_err(internal)?;
                if n == 0 {
                    return Ok(None);
                }
                // What the hold is on: in memory, or (its account not loaded) on its row.
                let on = match reader.on(&key_id, &id) {
                    Some(on) => Some(on),
                    None => hold_detail(c, &id)?.and_then(|d| d.on),
                };
                let first = settle_hold_in(
                    c,
                    now,
                    prune_settled,
                    &key_id,
                    &id,
                    cost,
                    on.as_ref(),
                    Once::Row,
                )?;
                usage_rows.insert(c, &usage_key, &usage_text)?;
                Ok(Some((key_id, id, first, on)))
            },
            move |committed, settled| {
                if let (true, Some((key_id, id, first, on))) = (committed, settled) {
                    ledger.settled(key_id, id, cost, *first, on.as_ref(), Some(tokens));
                }
            },
        )
        .await
        .map(|s| s.is_some())
    }

    async fn forget_task(&self, _r: &TaskRef) -> StoreResult<()> {
        // A task row and its due time are written in one transaction: no stray refs.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_read_the_partial_due_index() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(super::super::sql::SCHEMA).unwrap();
        let plan: Vec<String> = c
            .prepare("EXPLAIN QUERY PLAN SELECT id, key_id FROM tasks WHERE due_at <= 5 ORDER BY due_at LIMIT 3")
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(plan.iter().any(|p| p.contains("tasks_due")), "{plan:?}");
    }
}
