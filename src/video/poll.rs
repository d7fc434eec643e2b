//! Moving a task on: one poll of its upstream (claimed in the store first, by the
//! background poller or by a status request that finds it due), then its progress saved
//! or its end settled, exactly once.

use super::vendors::{self, Call};
use crate::billing::{Bill, Kind, Line, Multiplier};
use crate::channels::Channel;
use crate::gateway::Gateway;
use crate::ids;
use crate::relay::upstream::{Exchange, OpenError, Outgoing};
use crate::store::tasks::{TaskError, TaskRecord, TaskRef, TaskStatus};
use crate::store::{Micros, UsageRecord};
use std::sync::Arc;

/// Largest status answer read from an upstream.
pub(super) const STATUS_BODY_LIMIT: usize = 1024 * 1024;

/// Opens one exchange with a video upstream.
pub(super) async fn open(
    gw: &Gateway,
    channel: Arc<Channel>,
    call: &Call,
    headers: &http::HeaderMap,
) -> Result<Exchange, OpenError> {
    let out = Outgoing {
        method: call.method,
        path: &call.path,
        body: call.body.clone(),
        content_type: &call.content_type,
        stream: false,
        model: "",
        wire: None,
        client_headers: headers,
    };
    Exchange::open(gw, channel, &out).await
}

/// How long to wait before the next poll of a task polled `polls` times.
fn backoff(gw: &Gateway, polls: u32) -> i64 {
    let v = &gw.config.video;
    let base = v.poll_interval.as_millis() as i64;
    let factor = 1i64 << polls.saturating_sub(1).min(16);
    base.saturating_mul(factor)
        .min(v.max_poll_interval.as_millis() as i64)
}

/// Moves one claimed task on: asks its upstream, then saves the progress or ends the task
/// (settling its bill). Returns the task as it now stands, `None` if it is gone.
pub async fn poll_once(gw: &Gateway, r: &TaskRef) -> Option<TaskRecord> {
    let mut t = match gw.store.get_task(&r.key_id, &r.id).await {
        Ok(Some(t)) => t,
        Ok(None) => {
            if let Err(e) = gw.store.forget_task(r).await {
                tracing::warn!(task = %r.id, error = %e, "stray task ref not dropped");
            }
            return None;
        }
        Err(e) => {
            tracing::warn!(task = %r.id, error = %e, "task not readable; retried after its lease");
            return None;
        }
    };
    if t.status.is_terminal() {
        return Some(t);
    }
    let now = ids::now_secs();
    if now >= t.deadline {
        return Some(
            fail(
                gw,
                t,
                "task_timeout",
                "The video task did not finish in time; it was refunded.",
            )
            .await,
        );
    }
    let Some(channel) = gw.router.by_name(&t.channel) else {
        return Some(
            fail(
                gw,
                t,
                "channel_removed",
                "The upstream of this task is no longer configured; it was refunded.",
            )
            .await,
        );
    };
    t.polls = t.polls.saturating_add(1);
    match ask(gw, &channel, &t).await {
        Asked::Progress(p) => match p.status {
            TaskStatus::Completed => {
                t.status = TaskStatus::Completed;
                t.progress = 100;
                t.completed_at = Some(ids::now_secs());
                t.result = p.result;
                t.cost = completed_cost(gw, &t);
                Some(finish(gw, t).await)
            }
            TaskStatus::Failed => Some(
                fail(
                    gw,
                    t,
                    "generation_failed",
                    "The upstream could not generate this video; it was refunded.",
                )
                .await,
            ),
            open => {
                t.status = open;
                if let Some(pr) = p.progress {
                    t.progress = pr.min(99);
                } else if open == TaskStatus::InProgress && t.progress == 0 {
                    t.progress = 1;
                }
                save(gw, t).await
            }
        },
        Asked::Failed(f) => {
            tracing::warn!(task = %t.id, channel = %t.channel, upstream = %gw.config.secrets.body(f.detail.as_bytes()),
                "video task failed upstream");
            Some(fail(gw, t, "generation_failed", &f.message).await)
        }
        Asked::Retry => save(gw, t).await,
    }
}

async fn save(gw: &Gateway, t: TaskRecord) -> Option<TaskRecord> {
    let due = ids::now_ms() + backoff(gw, t.polls);
    if let Err(e) = gw.store.save_task(&t, due).await {
        tracing::warn!(task = %t.id, error = %e, "task progress not saved");
    }
    Some(t)
}

enum Asked {
    Progress(vendors::Progress),
    /// The upstream will never finish the task.
    Failed(vendors::Failure),
    /// No answer worth acting on now (network, 5xx, 429, unreadable): ask again later.
    Retry,
}

async fn ask(gw: &Gateway, channel: &Arc<Channel>, t: &TaskRecord) -> Asked {
    let call = vendors::poll(channel.protocol, t, channel.upstream_model(&t.model));
    // The answer must come within the claim's lease (with room to save it): a poll that
    // outlived it could overlap the next claimant's.
    let within = gw.config.video.lease * 3 / 4;
    let answer = tokio::time::timeout(within, async {
        let mut ex = match open(gw, channel.clone(), &call, &http::HeaderMap::new()).await {
            Ok(ex) => ex,
            Err(OpenError::NotSent(e) | OpenError::Sent(e)) => return Err(e),
        };
        let status = ex.status();
        let body = ex.body(STATUS_BODY_LIMIT).await;
        ex.finish(gw).await;
        Ok((status, body?))
    })
    .await;
    let (status, body) = match answer {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            tracing::debug!(task = %t.id, error = ?e, "video status poll failed");
            return Asked::Retry;
        }
        Err(_) => {
            tracing::warn!(task = %t.id, channel = %channel.name, "video status poll outlived its lease");
            return Asked::Retry;
        }
    };
    match vendors::read_poll(channel.protocol, status, &body) {
        vendors::Polled::Progress(p) => Asked::Progress(p),
        vendors::Polled::Failed(f) => Asked::Failed(f),
        vendors::Polled::Retry(why) => {
            tracing::warn!(task = %t.id, channel = %channel.name, status, answer = %gw.config.secrets.body(why.as_bytes()),
                "video status poll to be repeated");
            Asked::Retry
        }
    }
}

/// Seconds delivered (never more than asked for) at the channel's price, times the key's
/// multiplier, never more than was reserved.
fn completed_cost(gw: &Gateway, t: &TaskRecord) -> Micros {
    match provider_bill(gw, t) {
        Some(bill) => multiplier(t).apply_micros(bill.micros()).min(t.reserved),
        None => t.reserved,
    }
}

fn multiplier(t: &TaskRecord) -> Multiplier {
    t.multiplier_ppm.map_or(Multiplier::ONE, Multiplier)
}

/// The provider's cost of a completed task: the milliseconds of video delivered (never
/// more than asked for), times the videos, at the channel's price per second.
fn provider_bill(gw: &Gateway, t: &TaskRecord) -> Option<Bill> {
    let delivered = t
        .result
        .as_ref()
        .and_then(|r| r.duration)
        .filter(|d| *d > 0.0)
        .map_or(t.seconds, |d| d.min(t.seconds));
    let per_second = gw
        .config
        .channel_price(&t.channel, &t.model)?
        .per_second_micros?;
    let ms = ((delivered.max(0.0) * 1000.0).ceil() as u64).saturating_mul(t.n as u64);
    Some(Bill::one(Line::at_micros(
        Kind::VideoMs,
        ms,
        per_second,
        1000,
    )))
}

async fn fail(gw: &Gateway, mut t: TaskRecord, code: &str, message: &str) -> TaskRecord {
    t.status = TaskStatus::Failed;
    t.completed_at = Some(ids::now_secs());
    t.cost = 0;
    t.error = Some(TaskError {
        code: code.into(),
        message: message.into(),
    });
    finish(gw, t).await
}

/// Ends the task in the store (once, whoever gets there first), then reads back what
/// the store holds.
async fn finish(gw: &Gateway, t: TaskRecord) -> TaskRecord {
    let now_ms = ids::now_ms();
    // The group the task's hold counted against: the key's (a read of a key that is gone
    // or a store that fails names none; the charge itself does not depend on it).
    let group = match gw.store.get_key(&t.key_id).await {
        Ok(Some(k)) => k.group,
        _ => None,
    };
    let bill = match t.status {
        TaskStatus::Completed => provider_bill(gw, &t).unwrap_or_default(),
        _ => Bill::default(),
    };
    let usage = UsageRecord {
        request_id: t.id.clone(),
        time_ms: now_ms,
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
        provider_cost: Some(bill.micros()),
        bill,
        multiplier_ppm: t.multiplier_ppm,
        status: if t.status == TaskStatus::Completed {
            200
        } else {
            500
        },
        latency_ms: (now_ms - t.created_at * 1000).max(0) as u64,
        stream: false,
        group,
    };
    match gw.store.finish_task(&t, &usage).await {
        Ok(true) => {
            tracing::info!(task = %t.id, status = t.status.as_str(), cost = t.cost, "video task ended");
            t
        }
        Ok(false) => match gw.store.get_task(&t.key_id, &t.id).await {
            Ok(Some(stored)) => stored,
            _ => t,
        },
        Err(e) => {
            // Still open in the store: the next poll after the lease tries again.
            tracing::warn!(task = %t.id, error = %e, "task end not stored; will retry");
            t
        }
    }
}
