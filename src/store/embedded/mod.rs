//! The embedded store: SQLite in WAL mode, the default, for a single node.
//!
//! Four kinds of work, four places, so the request path never queues behind a commit:
//! - **reserve and extend** are decided in memory ([`ledger`]): one lock, no statement;
//! - **a request's settle and usage record**, in the serving process (the one holding the
//!   store's lock), are made durable by one append to the settle journal ([`journal`]),
//!   counted in memory at once, and applied to SQLite by the writer thread, a couple of
//!   milliseconds' worth per commit; `kill -9` loses no answered charge (the next server
//!   applies what the journal holds before it serves);
//! - **every other change** (keys, groups, tasks, a task's settle) and every change made
//!   by another process go to the one writer thread ([`writer`]), which commits them in
//!   groups and answers once they are committed (a process without the lock, such as the
//!   CLI, commits its settles there too: alone on its thread at low load);
//! - **key lookups and log reads** run on read connections ([`readers`]): WAL readers
//!   never wait for the writer, and an unknown key never reaches it. Reads of spend and
//!   usage first wait for the settles journaled before them to be applied.
//!
//! Other processes (the CLI) may use the same file at the same time: SQLite's own locking
//! and `busy_timeout` handle that, and the writer re-reads the accounts it holds in memory
//! when another process has committed (within [`writer`]'s idle check, 0.25 s).
//!
//! Settling is exactly once, so a settle retried after a cancelled or failed call
//! changes nothing. A video task's reservation id gets a row in the `settled` table,
//! written in the same savepoint as the charge and the usage record (its settle may come
//! after a restart); rows older than [`super::SETTLED_KEEP_SECS`] are pruned in a batch
//! every `PRUNE_EVERY` settles (found through their time's index). A request's id is
//! claimed in memory on the writer instead ([`ledger::Ledger::claim`]) and given back if
//! its commit fails: its hold and its guard never outlive the process, and a row per
//! request (kept a day) would cost two index writes a request and grow by the request
//! rate. Each key keeps its newest usage records, up to a cap ([`usage_rows`]). Time is
//! the store's own clock, never a caller's.
//!
//! Key policies and groups: a key's `group_id` and `policy` (JSON) are columns of `keys`
//! (added to an older database when it opens), groups have a table of their own, and
//! the settled spend of every budgeted period, of keys (`k:ID`) and groups (`g:ID`), is a
//! row of `period_spend` written in the settle's commit, as is the group's `quota_used`.
//! Reserves are checked against all of them in memory ([`ledger`]); tokens per minute and
//! requests in flight are counted there only (see its notes). A task's reservation row
//! keeps what its hold is on (`detail`), so its settle after a restart charges the same
//! counters; the keys holding task reservations are loaded when the store opens.

mod counters;
mod directory;
mod figures;
mod groups;
mod journal;
mod ledger;
mod mapped;
mod readers;
mod responses;
mod sql;
mod tasks;
mod usage;
mod usage_rows;
mod writer;

use super::policy::{Ask, GroupPatch, GroupRecord, Headroom, Periods, RateCount, Scope, Standing};
use super::{
    KeyPatch, KeyRecord, Micros, Reservation, ReserveDenied, Store, StoreError, StoreResult,
    UsageRecord,
};
use async_trait::async_trait;
use ledger::{durable, Decision, Ledger};
use parking_lot::Mutex;
use readers::Readers;
use rusqlite::{params, Connection};
use sql::{exec, in_savepoint, internal, json_list, Once};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;
use writer::{Finish, Job, Work};

/// Prune a key's usage rows (and old tombstones) once every this many inserts.
const PRUNE_EVERY: u64 = 100;

/// The store's clock, in unix seconds. Unit tests move it forward instead of waiting.
#[derive(Default)]
pub struct Clock {
    skew: AtomicI64,
}

impl Clock {
    pub fn now(&self) -> i64 {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        secs + self.skew.load(Ordering::Relaxed)
    }
}

pub struct EmbeddedStore {
    dir: PathBuf,
    ledger: Arc<Ledger>,
    jobs: mpsc::Sender<Work>,
    writer: Arc<writer::Writer>,
    /// Settles journaled, once this process holds the store's lock ([`journal`]).
    journal: std::sync::OnceLock<Arc<journal::Journal>>,
    readers: Readers,
    /// Dropping the store stops the checkpoint thread.
    _checkpoints: mpsc::Sender<()>,
    lock: Mutex<Option<File>>,
    /// Per-key (minute window, count); a single node needs no shared counter.
    rates: Mutex<HashMap<String, (i64, u32)>>,
    usage_rows: Arc<usage_rows::UsageRows>,
    settles: AtomicU64,
    clock: Arc<Clock>,
}

fn ttl(secs: u64) -> i64 {
    secs.min(i64::MAX as u64) as i64
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> StoreResult<EmbeddedStore> {
        EmbeddedStore::open_with(dir, true)
    }

    /// As [`EmbeddedStore::open`]; without the checkpoint thread when `checkpoints` is
    /// false (tests that run the checkpoints themselves).
    fn open_with(dir: &Path, checkpoints: bool) -> StoreResult<EmbeddedStore> {
        std::fs::create_dir_all(dir).map_err(internal)?;
        let db = dir.join("gateway.db");
        let conn = Connection::open(&db).map_err(internal)?;
        conn.busy_timeout(writer::BUSY_TIMEOUT).map_err(internal)?;
        // Checkpoints run on their own thread (below), not inside a request's COMMIT.
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0; PRAGMA temp_store=MEMORY;",
        )
        .map_err(internal)?;
        sql::migrate(&conn)?;
        sql::tune_writer(&conn)?;
        conn.set_prepared_statement_cache_capacity(64);
        let ckpt = Connection::open(&db).map_err(internal)?;
        let readers = Readers::open(&db)?;
        let clock = Arc::new(Clock::default());
        let ledger = Arc::new(Ledger::new(clock.clone()));
        sql::load_task_holders(&conn, &ledger)?;
        let (tx, rx) = mpsc::channel::<Work>();
        let (stop, stopped) = mpsc::channel::<()>();
        let usage_rows = Arc::new(usage_rows::UsageRows::default());
        let writer = Arc::new(writer::Writer::new(
            conn,
            ledger.clone(),
            usage_rows.clone(),
        ));
        let w = writer.clone();
        let thread = std::thread::Builder::new()
            .name("embedded-store".into())
            .spawn(move || writer::run(w, rx))
            .map_err(internal)?;
        writer.set_thread(thread.thread().clone());
        if checkpoints {
            let w = writer.clone();
            std::thread::Builder::new()
                .name("embedded-checkpoint".into())
                .spawn(move || writer::checkpointer(ckpt, w, stopped))
                .map_err(internal)?;
        }
        Ok(EmbeddedStore {
            dir: dir.to_path_buf(),
            ledger,
            jobs: tx,
            writer,
            journal: Default::default(),
            readers,
            _checkpoints: stop,
            lock: Mutex::new(None),
            rates: Mutex::new(HashMap::new()),
            usage_rows,
            settles: AtomicU64::new(0),
            clock,
        })
    }

    /// Jobs the writer has run and commits it has made since the store opened.
    pub fn writer_counts(&self) -> (u64, u64) {
        (
            self.writer.counts.jobs.load(Ordering::Relaxed),
            self.writer.counts.commits.load(Ordering::Relaxed),
        )
    }

    /// Whether this settle should also prune old tombstones.
    fn settle_prune_due(&self) -> bool {
        self.settles.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1
    }

    /// Moves the store's clock (tests of expiry).
    #[cfg(test)]
    fn advance_clock(&self, secs: i64) {
        self.clock.skew.fetch_add(secs, Ordering::Relaxed);
    }

    /// Runs `f` on the writer, inside the next group commit; `after(committed, value)`
    /// runs on the writer once the group's commit is decided, when `f` succeeded.
    async fn write<T: Send + 'static>(
        &self,
        early: bool,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        after: impl FnOnce(bool, &T) + Send + 'static,
    ) -> StoreResult<T> {
        self.submit(early, false, f, after).await
    }

    /// As [`EmbeddedStore::write`], for the writes of every request (settles, usage
    /// records): without a savepoint of their own, which would copy every page they touch
    /// (a third of their cost). They fail only as SQLite itself fails (disk full, I/O),
    /// and then the whole group is undone and every caller told, so nothing half-done is
    /// ever committed; callers retry.
    async fn write_plain<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        after: impl FnOnce(bool, &T) + Send + 'static,
    ) -> StoreResult<T> {
        self.submit(false, true, f, after).await
    }

    async fn submit<T: Send + 'static>(
        &self,
        early: bool,
        plain: bool,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        after: impl FnOnce(bool, &T) + Send + 'static,
    ) -> StoreResult<T> {
        let (tx, rx) = oneshot::channel();
        let run = Box::new(move |conn: &Connection| -> (Finish, bool) {
            let r = if plain {
                f(conn)
            } else {
                in_savepoint(conn, f)
            };
            let failed = plain && r.is_err();
            let finish: Finish = Box::new(move |commit_err: Option<StoreError>| {
                if let Ok(v) = &r {
                    after(commit_err.is_none(), v);
                }
                let _ = tx.send(match (r, commit_err) {
                    (Err(e), _) => Err(e),
                    (Ok(_), Some(e)) => Err(e),
                    (Ok(v), None) => Ok(v),
                });
            });
            (finish, failed)
        });
        let job = Job { early, run };
        // A request's own writes commit on its thread when nothing else is committing.
        let queued = match plain {
            true => self.writer.try_alone(job),
            false => Err(job),
        };
        if let Err(job) = queued {
            // The send error only hands the job back: the store thread has ended.
            self.jobs
                .send(Work::Job(job))
                .map_err(|_| StoreError::internal("store thread stopped"))?;
            self.writer.wake();
        }
        rx.await
            .map_err(|e| StoreError::internal_from("store thread dropped a job", e))?
    }

    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.write(false, f, |_, _| {}).await
    }

    /// The journal, while it takes settles.
    fn journaling(&self) -> Option<&Arc<journal::Journal>> {
        self.journal.get().filter(|j| !j.is_closed())
    }

    /// Waits until every settle and record journaled so far is in the database, for reads
    /// that must see them (a key's spend, its usage records).
    async fn sync(&self) -> StoreResult<()> {
        match self.journal.get().map(|j| j.marks()) {
            Some((written, applied)) if applied < written => self.call(|_| Ok(())).await,
            _ => Ok(()),
        }
    }

    /// Puts the key's account in memory, with its group's; `false` if the key does not
    /// exist.
    async fn load(&self, key_id: &str) -> StoreResult<bool> {
        let (id, ledger) = (key_id.to_string(), self.ledger.clone());
        self.write(true, move |c| sql::load_account(c, &ledger, &id), |_, _| {})
            .await
    }

    /// Puts the group's account in memory (a missing group too: it refuses reserves).
    async fn load_group(&self, group_id: &str) -> StoreResult<()> {
        let (id, ledger) = (group_id.to_string(), self.ledger.clone());
        self.write(true, move |c| sql::load_group(c, &ledger, &id), |_, _| {})
            .await
    }

    /// A task's reservation: checked against the `settled` table (task ids outlive the
    /// process), held in memory and written, on the writer.
    async fn reserve_durable(
        &self,
        key_id: &str,
        rid: &str,
        ask: &Ask,
        ttl_secs: u64,
    ) -> StoreResult<(Decision, Headroom)> {
        let (key_id, rid, ledger) = (key_id.to_string(), rid.to_string(), self.ledger.clone());
        let ask = ask.clone();
        let undo = ledger.clone();
        self.write(
            false,
            move |c| {
                if sql::is_settled(c, &key_id, &rid)? {
                    return Ok((Decision::Denied(ReserveDenied::Released), Headroom::default()));
                }
                let (d, room) = ledger.reserve(&key_id, &rid, &ask, ttl_secs);
                if let Decision::Granted(r, true) = &d {
                    let expires = ledger.now().saturating_add(ttl(ttl_secs));
                    let detail = ledger.detail(&r.key_id, &r.id).unwrap_or_default();
                    let written = serde_json::to_string(&detail).map_err(internal).and_then(|d| {
                        exec(
                            c,
                            "INSERT OR REPLACE INTO reservations (id, key_id, amount, expires_at, detail)
                             VALUES (?1, ?2, ?3, ?4, ?5)",
                            params![r.id, r.key_id, r.amount, expires, d],
                        )
                        .map_err(internal)
                    });
                    if let Err(e) = written {
                        ledger.unhold(&r.key_id, &r.id);
                        return Err(e);
                    }
                }
                Ok((d, room))
            },
            move |committed, (d, _)| {
                if let (false, Decision::Granted(r, true)) = (committed, d) {
                    undo.unhold(&r.key_id, &r.id);
                }
            },
        )
        .await
    }

    async fn settle_with(
        &self,
        r: &Reservation,
        actual: Micros,
        usage: Option<&UsageRecord>,
    ) -> StoreResult<()> {
        let tokens = usage.map(|u| u.prompt_tokens.saturating_add(u.completion_tokens));
        let usage = match usage {
            Some(u) => Some((
                u.key_id.clone(),
                serde_json::to_string(u).map_err(internal)?,
            )),
            None => None,
        };
        // A request's settle is journaled; a task's commits (its row must go with it).
        if let Some(j) = self.journaling().filter(|_| !durable(&r.id)) {
            let settle = journal::Settle {
                now: self.clock.now(),
                prune: self.settle_prune_due(),
                key: r.key_id.clone(),
                rid: r.id.clone(),
                actual,
                on: self.ledger.on(&r.key_id, &r.id),
            };
            return j
                .append(&self.ledger, Some(settle), usage, tokens)
                .map(|_| ());
        }
        let (key_id, rid) = (r.key_id.clone(), r.id.clone());
        let (prune, ledger) = (self.settle_prune_due(), self.ledger.clone());
        let (reader, usage_rows) = (ledger.clone(), self.usage_rows.clone());
        let now = self.clock.now();
        self.write_plain(
            move |c| {
                // What the hold is on: in memory, or (a task's, its account not loaded)
                // on its row. A plain hold's answer allocates nothing.
                let on = match reader.on(&key_id, &rid) {
                    None if durable(&rid) => sql::hold_detail(c, &rid)?.and_then(|d| d.on),
                    on => on,
                };
                // A task's id is settled once by its row; a request's in memory.
                let once = if durable(&rid) {
                    Once::Row
                } else {
                    Once::Decided(reader.claim(&key_id, &rid))
                };
                let written =
                    sql::settle_hold_in(c, now, prune, &key_id, &rid, actual, on.as_ref(), once)
                        .and_then(|first| match (first, usage) {
                            (true, Some((k, text))) => {
                                usage_rows.insert(c, &k, &text).map(|_| first)
                            }
                            _ => Ok(first),
                        });
                match written {
                    Ok(first) => Ok((key_id, rid, first, on)),
                    Err(e) => {
                        if once == Once::Decided(true) {
                            reader.unclaim(&key_id, &rid);
                        }
                        Err(e)
                    }
                }
            },
            move |committed, (key_id, rid, first, on)| {
                if committed {
                    ledger.settled(key_id, rid, actual, *first, on.as_ref(), tokens);
                } else if *first && !durable(rid) {
                    ledger.unclaim(key_id, rid);
                }
            },
        )
        .await
        .map(|_| ())
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn create_key(&self, rec: &KeyRecord) -> StoreResult<()> {
        let r = rec.clone();
        let ledger = self.ledger.clone();
        self.write(
            false,
            move |c| {
                let n = exec(
                    c,
                    "INSERT OR IGNORE INTO keys (id, hash, display, name, status, created_at, expires_at,
                       models, allow_ips, rpm, quota_limit, quota_used, group_id, policy)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                    params![
                        r.id, r.hash, r.display, r.name, r.status.as_str(), r.created_at, r.expires_at,
                        json_list(&r.models), json_list(&r.allow_ips), r.rpm, r.quota_limit, r.quota_used,
                        r.group, sql::policy_json(&r.policy)
                    ],
                )
                .map_err(internal)?;
                if n == 0 {
                    return Err(StoreError::conflict(format!("key {} exists", r.id)));
                }
                Ok(r.id)
            },
            move |_, id| ledger.forget(id),
        )
        .await
        .map(|_| ())
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<KeyRecord>> {
        self.sync().await?;
        let id = id.to_string();
        self.readers.read(move |c| sql::get_key(c, &id)).await
    }

    async fn list_keys(&self) -> StoreResult<Vec<KeyRecord>> {
        self.sync().await?;
        self.readers.read(sql::list_keys).await
    }

    async fn update_key(&self, id: &str, patch: &KeyPatch) -> StoreResult<Option<KeyRecord>> {
        let (id, patch) = (id.to_string(), patch.clone());
        let ledger = self.ledger.clone();
        self.write(
            false,
            move |c| {
                let Some(mut rec) = sql::get_key(c, &id)? else {
                    return Ok(None);
                };
                patch.apply(&mut rec);
                exec(
                    c,
                    "UPDATE keys SET name = ?2, status = ?3, expires_at = ?4, models = ?5, allow_ips = ?6,
                       rpm = ?7, quota_limit = ?8, group_id = ?9, policy = ?10 WHERE id = ?1",
                    params![
                        rec.id, rec.name, rec.status.as_str(), rec.expires_at, json_list(&rec.models),
                        json_list(&rec.allow_ips), rec.rpm, rec.quota_limit, rec.group,
                        sql::policy_json(&rec.policy)
                    ],
                )
                .map_err(internal)?;
                Ok(Some(rec))
            },
            move |committed, rec| {
                if let (true, Some(r)) = (committed, rec) {
                    ledger.update(r);
                }
            },
        )
        .await
    }

    async fn delete_key(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        let ledger = self.ledger.clone();
        self.write(
            false,
            move |c| {
                exec(c, "DELETE FROM reservations WHERE key_id = ?1", [&id]).map_err(internal)?;
                exec(c, "DELETE FROM settled WHERE key_id = ?1", [&id]).map_err(internal)?;
                exec(
                    c,
                    "DELETE FROM period_spend WHERE scope = ?1",
                    [sql::key_scope(&id)],
                )
                .map_err(internal)?;
                let n = exec(c, "DELETE FROM keys WHERE id = ?1", [&id]).map_err(internal)?;
                Ok((id, n > 0))
            },
            move |committed, (id, _)| {
                if committed {
                    ledger.forget(id);
                }
            },
        )
        .await
        .map(|(_, deleted)| deleted)
    }

    async fn reserve_counted(
        &self,
        key_id: &str,
        reservation_id: &str,
        ask: &Ask,
        ttl_secs: u64,
    ) -> StoreResult<(Result<Reservation, ReserveDenied>, Headroom)> {
        // The account is loaded at most once per key and process (with its group's); a key
        // deleted between its load and this reserve is loaded again (and found missing).
        let missing = (Err(ReserveDenied::NotFound), Headroom::default());
        for _ in 0..3 {
            let (d, room) = if durable(reservation_id) {
                if !self.ledger.is_loaded(key_id) && !self.load(key_id).await? {
                    return Ok(missing);
                }
                self.reserve_durable(key_id, reservation_id, ask, ttl_secs)
                    .await?
            } else {
                self.ledger.reserve(key_id, reservation_id, ask, ttl_secs)
            };
            match d {
                Decision::Granted(r, _) => return Ok((Ok(r), room)),
                Decision::Denied(why) => return Ok((Err(why), room)),
                Decision::NotLoaded => {
                    if !self.load(key_id).await? {
                        return Ok(missing);
                    }
                }
            }
        }
        Ok(missing)
    }

    async fn extend(&self, reservation: &Reservation, ttl_secs: u64) -> StoreResult<()> {
        let held = self
            .ledger
            .extend(&reservation.key_id, &reservation.id, ttl_secs);
        // A request's hold lives in memory only; a task's is on disk too.
        if !durable(&reservation.id) || held == Some(false) {
            return Ok(());
        }
        let r = reservation.clone();
        let clock = self.clock.clone();
        self.call(move |c| {
            let now = clock.now();
            exec(
                c,
                "UPDATE reservations SET expires_at = MAX(expires_at, ?3)
                 WHERE id = ?1 AND key_id = ?2 AND expires_at > ?4",
                params![r.id, r.key_id, now.saturating_add(ttl(ttl_secs)), now],
            )
            .map_err(internal)?;
            Ok(())
        })
        .await
    }

    async fn settle(&self, reservation: &Reservation, actual: Micros) -> StoreResult<()> {
        self.settle_with(reservation, actual, None).await
    }

    async fn settle_logged(
        &self,
        reservation: &Reservation,
        actual: Micros,
        usage: &UsageRecord,
    ) -> StoreResult<()> {
        self.settle_with(reservation, actual, Some(usage)).await
    }

    async fn rate_hit(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<bool> {
        self.rate_take(key_id, rpm, now_ms)
            .await
            .map(|c| c.admitted)
    }

    async fn rate_take(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<RateCount> {
        let window = now_ms.div_euclid(60_000);
        let mut rates = self.rates.lock();
        if rates.len() > 100_000 {
            rates.retain(|_, (w, _)| *w >= window);
        }
        let e = rates.entry(key_id.to_string()).or_insert((window, 0));
        if e.0 != window {
            *e = (window, 0);
        }
        let admitted = e.1 < rpm;
        if admitted {
            e.1 += 1;
        }
        Ok(RateCount {
            admitted,
            remaining: Some(rpm.saturating_sub(e.1)),
            resets_at_ms: RateCount::window_end_ms(now_ms),
        })
    }

    async fn append_usage(&self, rec: &UsageRecord) -> StoreResult<()> {
        let text = serde_json::to_string(rec).map_err(internal)?;
        let key_id = rec.key_id.clone();
        if let Some(j) = self.journaling() {
            return j
                .append(&self.ledger, None, Some((key_id, text)), None)
                .map(|_| ());
        }
        let usage_rows = self.usage_rows.clone();
        self.write_plain(move |c| usage_rows.insert(c, &key_id, &text), |_, _| {})
            .await
    }

    async fn recent_usage(&self, key_id: &str, limit: usize) -> StoreResult<Vec<UsageRecord>> {
        self.sync().await?;
        let key_id = key_id.to_string();
        let texts = self
            .readers
            .read(move |c| sql::recent_usage(c, &key_id, limit))
            .await?;
        texts
            .iter()
            .map(|t| serde_json::from_str(t).map_err(internal))
            .collect()
    }

    async fn create_group(&self, rec: &GroupRecord) -> StoreResult<()> {
        self.insert_group(rec).await
    }

    async fn get_group(&self, id: &str) -> StoreResult<Option<GroupRecord>> {
        self.sync().await?;
        let id = id.to_string();
        self.readers.read(move |c| sql::get_group(c, &id)).await
    }

    async fn list_groups(&self) -> StoreResult<Vec<GroupRecord>> {
        self.sync().await?;
        self.readers.read(sql::list_groups).await
    }

    async fn update_group(&self, id: &str, patch: &GroupPatch) -> StoreResult<Option<GroupRecord>> {
        self.change_group(id, patch).await
    }

    async fn delete_group(&self, id: &str) -> StoreResult<bool> {
        self.remove_group(id).await
    }

    async fn standing(
        &self,
        scope: Scope,
        id: &str,
        periods: &Periods,
        minute: i64,
    ) -> StoreResult<Standing> {
        self.standing_of(scope, id, periods, minute).await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.call(|_| Ok(())).await
    }

    /// Stops journaling, applies what was journaled, and gives the directory up: the next
    /// server (an upgrade's new process) takes it without replaying anything. Settles
    /// after this commit directly.
    async fn close(&self) -> StoreResult<()> {
        if let Some(j) = self.journal.get() {
            j.close();
            self.sync().await?;
        }
        *self.lock.lock() = None;
        Ok(())
    }

    fn usage_query(&self) -> Option<&dyn super::usage_query::UsageQuery> {
        Some(self)
    }

    fn responses(&self) -> Option<&dyn super::responses::ResponseStore> {
        Some(self)
    }
}

#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod policy_settle_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod tests;
