//! The Redis backend: several gateway instances share one Redis (or Redis Cluster).
//!
//! Every check-and-change in Redis is one Lua script ([`scripts`]): atomic, so
//! concurrent requests on any number of instances can never spend past a key's cap.
//! Layout (everything of one key carries its id as a hash tag, `{ID}`: one Cluster slot):
//! - `gw:key:{ID}`  hash: the record, plus `quota_used`, `quota_reserved`, `lease_slack`,
//!   `wanted_until`
//! - `gw:rsv:{ID}`  zset: hold id → expiry (unix seconds); leases are holds too
//! - `gw:rsva:{ID}` hash: hold id → amount
//! - `gw:done:{ID}` zset: settled (or released) reservation id → when: the tombstones of
//!   per-request settles, pruned after [`SETTLED_KEEP_SECS`]
//! - `gw:seq:{ID}`  hash: lease → the last batch of settles applied from it: the batches'
//!   tombstones
//! - `gw:rl:{ID}:<minute>` counter with a TTL
//! - `gw:log:{ID}`  stream of usage records, capped
//! - `gw:keys`      set of all ids (for listing; maintained after the per-key script)
//! - key policy: the fields `group`, `budget_day`, `budget_week`, `budget_month`, `tpm`,
//!   `max_concurrent`, `time_zone` and `in_flight` in `gw:key:{ID}`; the holds' details
//!   `gw:hold:{ID}`, `gw:kept:{ID}`; the counters `gw:cnt:{ID}:<period label>` and
//!   `gw:tpm:{ID}:<minute>` (see [`scopes`])
//! - groups: `gw:grp:{grp:GID}` hash (the record, `quota_used`, `quota_reserved`,
//!   `in_flight`), and `gw:rsv:`, `gw:rsva:`, `gw:done:`, `gw:hold:`, `gw:kept:`, `gw:cnt:`,
//!   `gw:tpm:` under the group's own tag `{grp:GID}`; `gw:groups` set of all group ids
//! - video tasks: `gw:task:{ID}:<task_id>` and `gw:tasks:due` (see [`tasks`])
//!
//! **Off the request path at steady state.** A key busy on an instance gets a lease
//! ([`lease`], [`sync`]): part of its free quota held by that instance, from which its
//! requests reserve and settle in memory; settles reach Redis in batches, a few
//! milliseconds apart. A key that is quiet, near the end of its quota, or wanted by
//! another instance is served by one script per request. Request limits are counted in
//! blocks ([`rate`]).
//!
//! **Key policy** (period budgets, tpm, max_concurrent, groups): one script
//! (`gw_reserve_scopes_v2`) checks and holds a request against a list of scopes, each a
//! key or a group with its lifetime cap and its counters, and writes per hold which
//! counters it is on, so its settle and its expiry release exactly those (after a period
//! boundary or a policy change too). On a single Redis a key and its group are one call:
//! truly atomic. On a Redis Cluster a script touches one slot and the group has its own,
//! so the group is asked first and the key then for at most what the group granted; when
//! the key refuses, the group's half is taken back (idempotently, by reservation id, no
//! tombstone), and a refusal of the group is reported as the key's when a single script
//! would have named the key's first (a dry run of the key). The limits hold either way:
//! each scope's own script never lets its counters past its limits. Settles are gated the
//! same way on both: a key's hold on a group answers the group's id, the group's half is
//! settled (once, by its own tombstone), then the key's; a retry completes what is left.
//! A key with any limit or a group is never leased: `gw_lease_v3` refuses and shrinks
//! such a lease (answering `policy`), so every instance gives it back at its next call
//! and reserves by script; keys with no policy keep the lease path unchanged.
//!
//! Time is Redis's own (`TIME` inside the scripts): instances whose clocks disagree still
//! agree on when a reservation expires. (Redis 5 or later: scripts replicate their
//! effects, so `TIME` before a write is allowed.)

mod conn;
mod groups;
mod hashes;
mod lease;
mod rate;
mod records;
mod responses;
mod scopes;
mod scripts;
mod sync;
mod tasks;
mod usage;

pub use lease::LeaseOptions;

#[cfg(doc)]
use super::SETTLED_KEEP_SECS;
use super::{
    Ask, GroupPatch, GroupRecord, Headroom, KeyPatch, KeyRecord, Limit, LimitKind, Micros, Periods,
    RateCount, Reservation, ReserveDenied, Scope, Standing, Store, StoreError, StoreResult,
    UsageRecord,
};
use async_trait::async_trait;
use conn::{done, key, log, map_err, rsv, rsva, seqs, Conn};
use lease::Local;
use redis::{Cmd, FromRedisValue};
use scripts::Scripts;
use std::sync::Arc;
use std::time::Duration;
use sync::{Leases, Settled};

const LOG_MAX: usize = 10_000;
const KEYS_SET: &str = "gw:keys";
/// How long a reserve waits for other instances to give back what their leases hold.
const WANTED_WAIT: Duration = Duration::from_millis(1500);

/// Reservations that outlive a request (video tasks, settled by whichever instance polls
/// them): always by script.
fn durable(reservation_id: &str) -> bool {
    reservation_id.starts_with("task_")
}

pub struct RedisStore {
    conn: Conn,
    scripts: Arc<Scripts>,
    leases: Arc<Leases>,
    rates: Arc<rate::Rates>,
}

/// What the reserve script answered.
enum Answer {
    /// The grant, whether the hold is on policy counters (never a lease's key), and where
    /// the scopes' tightest limits stand after it.
    Granted(Micros, bool, Headroom),
    Denied(ReserveDenied, Headroom),
    /// Other instances' leases hold the money: asked for it, try again.
    Leased,
}

impl RedisStore {
    /// Connects; fails with `Unavailable` if Redis cannot be reached now. Afterwards a
    /// lost connection fails calls with `Unavailable` and is re-established by itself.
    pub async fn connect(urls: &[String], cluster: bool) -> StoreResult<RedisStore> {
        Self::connect_with(urls, cluster, LeaseOptions::default()).await
    }

    /// As [`RedisStore::connect`], with leases behaving as `opts` says. Runs its
    /// background calls on the current Tokio runtime.
    pub async fn connect_with(
        urls: &[String],
        cluster: bool,
        opts: LeaseOptions,
    ) -> StoreResult<RedisStore> {
        let conn = Conn::connect(urls, cluster).await?;
        let scripts = Arc::new(Scripts::new());
        let leases = Arc::new(Leases::new(opts));
        leases.spawn(conn.clone(), scripts.clone());
        Ok(RedisStore {
            conn,
            scripts,
            leases,
            rates: Arc::new(rate::Rates::default()),
        })
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> StoreResult<T> {
        let mut c = self.conn.clone();
        cmd.query_async(&mut c).await.map_err(map_err)
    }

    fn cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// gw_reserve_scopes_v2 on `parts` (one slot each on a Cluster: one part there).
    async fn reserve_script(
        &self,
        rid: &str,
        ask: &Ask,
        max: Micros,
        dry: bool,
        parts: &[scopes::Part],
        ttl_secs: u64,
    ) -> StoreResult<Answer> {
        let mut inv = self.scripts.reserve.prepare_invoke();
        for p in parts {
            for k in &p.keys {
                inv.key(k);
            }
        }
        inv.arg(rid)
            .arg(ask.min)
            .arg(max)
            .arg(ask.tokens)
            .arg(ttl_secs.min(i64::MAX as u64 / 2))
            .arg(if dry { "1" } else { "0" })
            .arg(parts.len())
            .arg(ask.minute());
        for p in parts {
            for a in &p.args {
                inv.arg(a);
            }
        }
        inv.arg(if ask.in_flight { "1" } else { "0" });
        let answer: Vec<String> = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        let at = |i: usize| answer.get(i).map_or("", String::as_str);
        let (status, detail, counted) = (at(0), at(1), at(2));
        let room = scopes::headroom(&answer[answer.len().min(3)..]);
        if status == "ok" {
            let amount = detail
                .parse::<f64>()
                .map_err(|e| StoreError::internal_from(format!("bad grant {detail}"), e))?;
            return Ok(Answer::Granted(amount as Micros, counted == "1", room));
        }
        if detail == "leased" {
            return Ok(Answer::Leased);
        }
        scopes::denied(detail)
            .map(|d| Answer::Denied(d, room))
            .ok_or_else(|| StoreError::internal(format!("bad refusal {detail}")))
    }

    /// The reserve served from this instance's lease of the key, growing the lease once
    /// when it is short; `None` when a script must answer.
    async fn reserve_from_lease(
        &self,
        key_id: &str,
        rid: &str,
        max: Micros,
        ttl_secs: u64,
    ) -> Option<(Result<Reservation, ReserveDenied>, Headroom)> {
        let room = |r| (r, self.leases.headroom(key_id));
        match self.leases.try_reserve(key_id, rid, max, ttl_secs) {
            Err(d) => Some(room(Err(d))),
            Ok(Local::Granted(r)) => Some(room(Ok(r))),
            Ok(Local::TopUp) => {
                let grown = self
                    .leases
                    .sync(&self.conn, &self.scripts, key_id, max)
                    .await;
                if grown.is_err() {
                    return None;
                }
                match self.leases.try_reserve(key_id, rid, max, ttl_secs) {
                    Ok(Local::Granted(r)) => Some(room(Ok(r))),
                    _ => None,
                }
            }
            Ok(Local::Script) => None,
        }
    }

    /// On a Cluster the group's slot is another than the key's: the group's half of a hold
    /// is taken first, and the key is then asked for no more than the group granted
    /// (`Ok`). A refusal is named as one script would name it: the key's, if its limit
    /// comes first.
    async fn hold_group_half(
        &self,
        rid: &str,
        ask: &Ask,
        group_part: scopes::Part,
        key_part: impl Fn() -> scopes::Part,
        ttl_secs: u64,
    ) -> StoreResult<(Result<Micros, ReserveDenied>, Headroom)> {
        let answer = self
            .reserve_script(rid, ask, ask.max, false, &[group_part], ttl_secs)
            .await?;
        match answer {
            Answer::Granted(amount, _, room) => Ok((Ok(amount), room)),
            Answer::Denied(dg, room) => {
                let dry = self
                    .reserve_script(rid, ask, ask.max, true, &[key_part()], ttl_secs)
                    .await?;
                match dry {
                    Answer::Denied(dk, key_room) if scopes::rank(&dk) < scopes::rank(&dg) => {
                        Ok((Err(dk), room.tighter(key_room)))
                    }
                    _ => Ok((Err(dg), room)),
                }
            }
            Answer::Leased => Ok((
                Err(ReserveDenied::Limit(Limit::group(LimitKind::Quota))),
                Headroom::default(),
            )),
        }
    }

    /// Takes the group's half of a hold back (its key refused, on a Cluster).
    async fn release_group(&self, group_id: &str, rid: &str) -> StoreResult<()> {
        let tag = scopes::group_tag(group_id);
        let _: i64 = self
            .scripts
            .release
            .key(scopes::group(group_id))
            .key(rsv(&tag))
            .key(rsva(&tag))
            .arg(rid)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// Settles the group's half of hold `rid`, once (the group's own tombstone).
    pub(super) async fn settle_group(
        &self,
        group_id: &str,
        rid: &str,
        actual: Micros,
        used: i64,
    ) -> StoreResult<()> {
        let tag = scopes::group_tag(group_id);
        let _: String = self
            .scripts
            .settle
            .key(scopes::group(group_id))
            .key(rsv(&tag))
            .key(rsva(&tag))
            .key(done(&tag))
            .arg(rid)
            .arg(actual.max(0))
            .arg(used)
            .arg("0")
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// The group a key's hold `rid` is also on, if it is held (or kept) with details.
    pub(super) async fn hold_group(&self, key_id: &str, rid: &str) -> StoreResult<Option<String>> {
        let d: Option<String> = self
            .query(redis::cmd("HGET").arg(scopes::hold(key_id)).arg(rid))
            .await?;
        Ok(
            d.and_then(|d| serde_json::from_str::<serde_json::Value>(&d).ok())
                .and_then(|v| v.get("grp").and_then(|g| g.as_str()).map(str::to_string)),
        )
    }

    /// The key's half of a settle; with `gate`, a hold also on a group is left alone and
    /// its group answered (settled first by the caller).
    async fn settle_key(
        &self,
        r: &Reservation,
        actual: Micros,
        used: i64,
        record: Option<&str>,
        gate: bool,
    ) -> StoreResult<String> {
        let gate = if gate { "1" } else { "0" };
        match record {
            None => self
                .scripts
                .settle
                .key(key(&r.key_id))
                .key(rsv(&r.key_id))
                .key(rsva(&r.key_id))
                .key(done(&r.key_id))
                .arg(&r.id)
                .arg(actual.max(0))
                .arg(used)
                .arg(gate)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(map_err),
            Some(text) => self
                .scripts
                .settle_log
                .key(key(&r.key_id))
                .key(rsv(&r.key_id))
                .key(rsva(&r.key_id))
                .key(done(&r.key_id))
                .key(log(&r.key_id))
                .arg(&r.id)
                .arg(actual.max(0))
                .arg(text)
                .arg(LOG_MAX)
                .arg(used)
                .arg(gate)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(map_err),
        }
    }

    /// Settles by script: the group's half first when the hold has one (each half once,
    /// by its own tombstone, so a retry after any failure completes what is left).
    async fn settle_script(
        &self,
        r: &Reservation,
        actual: Micros,
        usage: Option<(&UsageRecord, String)>,
    ) -> StoreResult<()> {
        let used = usage.as_ref().map_or(-1, |(u, _)| {
            u.prompt_tokens
                .saturating_add(u.completion_tokens)
                .min(i64::MAX as u64) as i64
        });
        let own = usage
            .as_ref()
            .filter(|(u, _)| u.key_id == r.key_id)
            .map(|(_, t)| t.as_str());
        let group = self.settle_key(r, actual, used, own, true).await?;
        if !group.is_empty() {
            self.settle_group(&group, &r.id, actual, used).await?;
            self.settle_key(r, actual, used, own, false).await?;
        }
        if let Some((u, text)) = usage.filter(|(u, _)| u.key_id != r.key_id) {
            // Another key's log lives in another slot: two steps, each once. The record's
            // tombstone lives with that key's, under a name no reservation id takes.
            let _: i64 = self
                .scripts
                .log_once
                .key(done(&u.key_id))
                .key(log(&u.key_id))
                .arg(format!("\u{0}log {} {}", r.key_id, r.id))
                .arg(text)
                .arg(LOG_MAX)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }

    async fn settle_with(
        &self,
        r: &Reservation,
        actual: Micros,
        usage: Option<&UsageRecord>,
    ) -> StoreResult<()> {
        let text = usage
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::internal(e.to_string()))?;
        let same_key = usage.is_none_or(|u| u.key_id == r.key_id);
        if same_key {
            match self.leases.settle(&r.key_id, &r.id, actual, text.clone()) {
                Settled::Local | Settled::Duplicate => return Ok(()),
                Settled::NotLocal => {}
            }
        } else if self.leases.holds(&r.key_id, &r.id) {
            // A lease's hold whose record belongs to another key: settled by script (the
            // charge goes straight to the key; the lease keeps its money), then dropped.
            let usage = usage.zip(text);
            self.settle_script(r, actual, usage).await?;
            self.leases.release(&r.key_id, &r.id);
            return Ok(());
        }
        self.settle_script(r, actual, usage.zip(text)).await
    }

    /// The key's reserve by script (with its group's on a single Redis), waiting a while
    /// for other instances' leases to give back money they hold beyond their requests.
    async fn reserve_key(
        &self,
        key_id: &str,
        rid: &str,
        ask: &Ask,
        max: Micros,
        parts: &[scopes::Part],
        ttl_secs: u64,
    ) -> StoreResult<(Result<Micros, ReserveDenied>, Headroom)> {
        let deadline = tokio::time::Instant::now() + WANTED_WAIT;
        let mut wait = Duration::from_millis(5);
        loop {
            match self
                .reserve_script(rid, ask, max, false, parts, ttl_secs)
                .await?
            {
                Answer::Granted(amount, counted, room) => {
                    if !durable(rid) && !counted {
                        self.leases.note_script_grant(key_id, amount);
                    }
                    return Ok((Ok(amount), room));
                }
                Answer::Denied(d, room) => return Ok((Err(d), room)),
                Answer::Leased if tokio::time::Instant::now() + wait < deadline => {
                    // This instance's own lease, if any, gives back at once.
                    self.leases.stale(key_id);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(100));
                }
                Answer::Leased => {
                    return Ok((Err(ReserveDenied::QuotaExhausted), Headroom::default()))
                }
            }
        }
    }

    /// Gives every lease back and sends every settled charge, waiting at most `within`.
    /// Afterwards every reserve is one script.
    pub async fn close_leases(&self, within: Duration) -> StoreResult<()> {
        self.leases.close(within).await
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn create_key(&self, rec: &KeyRecord) -> StoreResult<()> {
        self.create_record(key(&rec.id), records::fields(rec), KEYS_SET, "key", &rec.id)
            .await
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<KeyRecord>> {
        // What this instance settled is in the record it reads.
        self.leases.flush(&self.conn, &self.scripts, id).await?;
        self.read_record(key(id), records::record).await
    }

    async fn list_keys(&self) -> StoreResult<Vec<KeyRecord>> {
        let read = |id: String| async move { self.read_record(key(&id), records::record).await };
        self.read_all(KEYS_SET, read, |k| (k.created_at, &k.id))
            .await
    }

    async fn update_key(&self, id: &str, patch: &KeyPatch) -> StoreResult<Option<KeyRecord>> {
        let fields = records::patch_fields(patch);
        let updated = self.update_record(key(id), fields, records::record).await;
        self.leases.stale(id);
        updated
    }

    async fn delete_key(&self, id: &str) -> StoreResult<bool> {
        let n: i64 = self
            .query(
                redis::cmd("DEL")
                    .arg(key(id))
                    .arg(rsv(id))
                    .arg(rsva(id))
                    .arg(done(id))
                    .arg(seqs(id))
                    .arg(scopes::hold(id))
                    .arg(scopes::kept(id)),
            )
            .await?;
        self.leases.stale(id);
        self.query::<()>(redis::cmd("SREM").arg(KEYS_SET).arg(id))
            .await?;
        Ok(n > 0)
    }

    async fn reserve_counted(
        &self,
        key_id: &str,
        reservation_id: &str,
        ask: &Ask,
        ttl_secs: u64,
    ) -> StoreResult<(Result<Reservation, ReserveDenied>, Headroom)> {
        // A key in a group is never leased; a key with limits is refused a lease by Redis
        // (gw_lease_v3), so its instance's lease path answers `Script`.
        if !durable(reservation_id) && ask.group.is_none() {
            let leased = self
                .reserve_from_lease(key_id, reservation_id, ask.max, ttl_secs)
                .await;
            if let Some(answer) = leased {
                return Ok(answer);
            }
        }
        let minute = ask.minute();
        let expect = ask.group.as_ref().map_or("", |g| g.id.as_str());
        let key_part = || scopes::Part::key(key_id, expect, &ask.periods, minute);
        let mut parts = vec![key_part()];
        let mut held_group = None;
        let mut max = ask.max;
        let mut group_room = Headroom::default();
        if let Some(g) = &ask.group {
            let group_part = scopes::Part::group(&g.id, &g.periods, minute);
            if self.cluster() {
                let (held, room) = self
                    .hold_group_half(reservation_id, ask, group_part, key_part, ttl_secs)
                    .await?;
                group_room = room;
                match held {
                    Ok(amount) => {
                        max = amount;
                        held_group = Some(g.id.as_str());
                    }
                    Err(denied) => return Ok((Err(denied), group_room)),
                }
            } else {
                parts.push(group_part);
            }
        }
        let answer = self
            .reserve_key(key_id, reservation_id, ask, max, &parts, ttl_secs)
            .await;
        if let Some(g) = held_group {
            if !matches!(answer, Ok((Ok(_), _))) {
                // The key refused (or could not be asked): the group's half goes back.
                self.release_group(g, reservation_id).await?;
            }
        }
        answer.map(|(a, room)| {
            let r = a.map(|amount| Reservation {
                id: reservation_id.to_string(),
                key_id: key_id.to_string(),
                amount,
            });
            (r, room.tighter(group_room))
        })
    }

    async fn extend(&self, r: &Reservation, ttl_secs: u64) -> StoreResult<()> {
        if self.leases.extend(&r.key_id, &r.id, ttl_secs) {
            return Ok(());
        }
        let ttl = ttl_secs.min(i64::MAX as u64 / 2);
        let group: String = self
            .scripts
            .extend
            .key(rsv(&r.key_id))
            .arg(&r.id)
            .arg(ttl)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        if !group.is_empty() {
            let _: String = self
                .scripts
                .extend
                .key(rsv(&scopes::group_tag(&group)))
                .arg(&r.id)
                .arg(ttl)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }

    async fn settle(&self, r: &Reservation, actual: Micros) -> StoreResult<()> {
        self.settle_with(r, actual, None).await
    }

    async fn settle_logged(
        &self,
        r: &Reservation,
        actual: Micros,
        usage: &UsageRecord,
    ) -> StoreResult<()> {
        self.settle_with(r, actual, Some(usage)).await
    }

    async fn rate_hit(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<bool> {
        self.rate_take(key_id, rpm, now_ms)
            .await
            .map(|c| c.admitted)
    }

    async fn rate_take(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<RateCount> {
        self.rates
            .hit(&self.conn, &self.scripts, key_id, rpm, now_ms)
            .await
    }

    async fn append_usage(&self, rec: &UsageRecord) -> StoreResult<()> {
        let text = serde_json::to_string(rec).map_err(|e| StoreError::internal(e.to_string()))?;
        self.query::<String>(
            redis::cmd("XADD")
                .arg(log(&rec.key_id))
                .arg("MAXLEN")
                .arg("~")
                .arg(LOG_MAX)
                .arg("*")
                .arg("r")
                .arg(text),
        )
        .await
        .map(|_| ())
    }

    async fn recent_usage(&self, key_id: &str, limit: usize) -> StoreResult<Vec<UsageRecord>> {
        self.leases.flush(&self.conn, &self.scripts, key_id).await?;
        let entries: Vec<(String, Vec<(String, String)>)> = self
            .query(
                redis::cmd("XREVRANGE")
                    .arg(log(key_id))
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(limit),
            )
            .await?;
        records::usage_entries(entries, limit)
    }

    async fn create_group(&self, rec: &GroupRecord) -> StoreResult<()> {
        groups::create(self, rec).await
    }

    async fn get_group(&self, id: &str) -> StoreResult<Option<GroupRecord>> {
        self.read_record(scopes::group(id), records::group_record)
            .await
    }

    async fn list_groups(&self) -> StoreResult<Vec<GroupRecord>> {
        groups::list(self).await
    }

    async fn update_group(&self, id: &str, patch: &GroupPatch) -> StoreResult<Option<GroupRecord>> {
        let fields = records::group_patch_fields(patch);
        self.update_record(scopes::group(id), fields, records::group_record)
            .await
    }

    async fn delete_group(&self, id: &str) -> StoreResult<bool> {
        groups::delete(self, id).await
    }

    async fn standing(
        &self,
        scope: Scope,
        id: &str,
        periods: &Periods,
        minute: i64,
    ) -> StoreResult<Standing> {
        groups::standing(self, scope, id, periods, minute).await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.query::<String>(&redis::cmd("PING")).await.map(|_| ())
    }

    fn usage_query(&self) -> Option<&dyn super::usage_query::UsageQuery> {
        Some(self)
    }

    fn responses(&self) -> Option<&dyn super::responses::ResponseStore> {
        Some(self)
    }

    async fn close(&self) -> StoreResult<()> {
        self.close_leases(Duration::from_secs(5)).await
    }
}
