//! The embedded store: SQLite in WAL mode, the default, for a single node.
//!
//! SQLite is the authority for everything. All statements run on one dedicated thread
//! that owns the connection and commits in groups: it takes the first queued job, drains
//! whatever else is queued, runs each job inside its own savepoint (one failing job
//! undoes only itself), commits once, and only then answers every job. A caller that
//! got an answer is durable against a process crash or `kill -9` (the WAL is written
//! before the answer); with `synchronous=NORMAL`, an OS crash or power loss may lose
//! the last transactions. No tokio worker ever blocks on SQLite.
//!
//! Other processes (the CLI) may use the same file at the same time: SQLite's own locking
//! and `busy_timeout` handle that, and nothing here caches rows.
//!
//! Settling is exactly once: the `settled` table holds a row per settled (or released)
//! reservation id, written in the same savepoint as the charge and the usage record, so
//! a settle retried after a cancelled or failed call changes nothing. Rows older than
//! [`SETTLED_KEEP_SECS`] are pruned as usage rows are, a batch every `PRUNE_EVERY`
//! settles. Time is the store's own clock, never a caller's.

use super::{
    KeyPatch, KeyRecord, KeyStatus, Micros, Reservation, ReserveDenied, Store, StoreError,
    StoreResult, UsageRecord, SETTLED_KEEP_SECS,
};
use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Jobs one commit may carry.
const MAX_GROUP: usize = 512;
/// Usage rows kept per key.
const USAGE_PER_KEY: i64 = 10_000;
/// Prune a key's usage rows once every this many inserts.
const PRUNE_EVERY: u64 = 100;

#[path = "embedded_tasks.rs"]
mod tasks;
#[path = "embedded_usage.rs"]
mod usage;

type Finish = Box<dyn FnOnce(Option<StoreError>) + Send>;
type Job = Box<dyn FnOnce(&Connection) -> Finish + Send>;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY, hash TEXT NOT NULL, display TEXT NOT NULL, name TEXT NOT NULL,
    status TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER,
    models TEXT NOT NULL, allow_ips TEXT NOT NULL, rpm INTEGER,
    quota_limit INTEGER, quota_used INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS reservations (
    id TEXT PRIMARY KEY, key_id TEXT NOT NULL, amount INTEGER NOT NULL, expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_key ON reservations(key_id, expires_at);
CREATE TABLE IF NOT EXISTS usage (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, key_id TEXT NOT NULL, record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_key ON usage(key_id, seq);
CREATE TABLE IF NOT EXISTS settled (
    key_id TEXT NOT NULL, id TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (key_id, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS settled_at ON settled(at);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, key_id TEXT NOT NULL, status TEXT NOT NULL, due_at INTEGER,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_due ON tasks(due_at) WHERE due_at IS NOT NULL;
";

/// Reservations of requests in flight. They are held in memory, not in SQLite: a single
/// node's requests do not outlive its process (a restart drops their reservations
/// anyway), so writing them to disk and deleting them again bought nothing and cost two
/// write-ahead-log writes per request. Only the store thread touches them, inside its
/// jobs, so a reservation and the reads and writes of `quota_used` it is checked
/// against stay one atomic step. Video task reservations (`task_...`) outlive the
/// process and stay in the `reservations` table.
#[derive(Default)]
struct Held {
    by_key: HashMap<String, KeyHeld>,
}

#[derive(Default)]
struct KeyHeld {
    total: Micros,
    /// Reservation id → (amount, expiry in unix seconds).
    items: HashMap<String, (Micros, i64)>,
}

impl Held {
    /// Releases the key's reservations that expired by `now`.
    fn purge(&mut self, key_id: &str, now: i64) {
        if let Some(k) = self.by_key.get_mut(key_id) {
            let before = k.items.len();
            k.items.retain(|_, (_, expires)| *expires > now);
            if k.items.len() != before {
                k.total = k.items.values().map(|(a, _)| *a).sum();
            }
            if k.items.is_empty() {
                self.by_key.remove(key_id);
            }
        }
    }

    fn total(&self, key_id: &str) -> Micros {
        self.by_key.get(key_id).map_or(0, |k| k.total)
    }

    /// Holds `amount` under `rid`, replacing an earlier reservation with that id.
    fn insert(&mut self, key_id: &str, rid: &str, amount: Micros, expires: i64) {
        let k = self.by_key.entry(key_id.to_string()).or_default();
        if let Some((old, _)) = k.items.insert(rid.to_string(), (amount, expires)) {
            k.total -= old;
        }
        k.total += amount;
    }

    fn contains(&self, key_id: &str, rid: &str) -> bool {
        self.by_key
            .get(key_id)
            .is_some_and(|k| k.items.contains_key(rid))
    }

    /// The amount held under `rid`, if it is held.
    fn amount(&self, key_id: &str, rid: &str) -> Option<Micros> {
        self.by_key.get(key_id)?.items.get(rid).map(|(a, _)| *a)
    }

    /// Pushes a live hold's expiry to `until` (never earlier). `None` if `rid` is not
    /// held here; `Some(false)` if it is held but expired at `now`.
    fn extend(&mut self, key_id: &str, rid: &str, until: i64, now: i64) -> Option<bool> {
        let (_, expires) = self.by_key.get_mut(key_id)?.items.get_mut(rid)?;
        if *expires <= now {
            return Some(false);
        }
        *expires = (*expires).max(until);
        Some(true)
    }

    fn remove(&mut self, key_id: &str, rid: &str) {
        if let Some(k) = self.by_key.get_mut(key_id) {
            if let Some((amount, _)) = k.items.remove(rid) {
                k.total -= amount;
            }
            if k.items.is_empty() {
                self.by_key.remove(key_id);
            }
        }
    }
}

/// Reservations that must survive a restart: those of video tasks.
fn durable(reservation_id: &str) -> bool {
    reservation_id.starts_with("task_")
}

/// The store's clock, in unix seconds. Unit tests move it forward instead of waiting.
#[derive(Default)]
struct Clock {
    skew: AtomicI64,
}

impl Clock {
    fn now(&self) -> i64 {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        secs + self.skew.load(Ordering::Relaxed)
    }
}

pub struct EmbeddedStore {
    dir: PathBuf,
    held: Arc<Mutex<Held>>,
    jobs: Mutex<mpsc::Sender<Job>>,
    /// Dropping the store stops the checkpoint thread.
    _checkpoints: mpsc::Sender<()>,
    lock: Mutex<Option<File>>,
    /// Per-key (minute window, count); a single node needs no shared counter.
    rates: Mutex<HashMap<String, (i64, u32)>>,
    inserts: AtomicU64,
    settles: AtomicU64,
    clock: Arc<Clock>,
}

fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(e.to_string())
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> StoreResult<EmbeddedStore> {
        std::fs::create_dir_all(dir).map_err(internal)?;
        let conn = Connection::open(dir.join("gateway.db")).map_err(internal)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(internal)?;
        // Checkpoints run on their own thread (below), not inside a request's COMMIT.
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0; PRAGMA temp_store=MEMORY;",
        )
        .map_err(internal)?;
        conn.execute_batch(SCHEMA).map_err(internal)?;
        conn.set_prepared_statement_cache_capacity(64);
        let checkpoints = Connection::open(dir.join("gateway.db")).map_err(internal)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let (stop, stopped) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("embedded-store".into())
            .spawn(move || writer(conn, rx))
            .map_err(internal)?;
        std::thread::Builder::new()
            .name("embedded-checkpoint".into())
            .spawn(move || checkpointer(checkpoints, stopped))
            .map_err(internal)?;
        Ok(EmbeddedStore {
            dir: dir.to_path_buf(),
            held: Arc::new(Mutex::new(Held::default())),
            jobs: Mutex::new(tx),
            _checkpoints: stop,
            lock: Mutex::new(None),
            rates: Mutex::new(HashMap::new()),
            inserts: AtomicU64::new(0),
            settles: AtomicU64::new(0),
            clock: Arc::new(Clock::default()),
        })
    }

    /// Claims the directory for one server process. Reservations left by a previous
    /// server are dropped: a restarted single node has no request in flight. Video task
    /// reservations (their id is the task id, `task_...`) stay: their tasks outlive the
    /// process and settle them when they end. Open tasks are made due now: their leases
    /// were held by the process that stopped, and nobody else polls a single node.
    pub fn lock_exclusive(&self) -> StoreResult<()> {
        let f = File::create(self.dir.join("LOCK")).map_err(internal)?;
        f.try_lock().map_err(|_| {
            StoreError::Conflict(format!(
                "{} is in use by another gateway",
                self.dir.display()
            ))
        })?;
        *self.lock.lock() = Some(f);
        let conn = Connection::open(self.dir.join("gateway.db")).map_err(internal)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(internal)?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        conn.execute_batch("BEGIN IMMEDIATE").map_err(internal)?;
        // Not `LIKE 'task_%'`: `_` is a LIKE wildcard.
        let r = exec(
            &conn,
            "DELETE FROM reservations WHERE substr(id, 1, 5) <> 'task_'",
            [],
        )
        .and_then(|_| {
            exec(
                &conn,
                "UPDATE tasks SET due_at = ?1 WHERE due_at > ?1",
                [now_ms],
            )
        })
        .and_then(|_| conn.execute_batch("COMMIT"));
        if let Err(e) = r {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(internal(e));
        }
        Ok(())
    }

    /// Whether this usage insert should also prune the key's oldest rows.
    fn prune_due(&self) -> bool {
        self.inserts.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1
    }

    /// What one settle needs to know: the store's time, and whether it also prunes old
    /// tombstones.
    fn settle_ctx(&self) -> SettleCtx {
        SettleCtx {
            held: self.held.clone(),
            clock: self.clock.clone(),
            prune: self.settles.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1,
        }
    }

    /// Moves the store's clock (tests of expiry).
    #[cfg(test)]
    fn advance_clock(&self, secs: i64) {
        self.clock.skew.fetch_add(secs, Ordering::Relaxed);
    }

    /// Runs `f` on the store thread, inside the next group commit.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let r = in_savepoint(conn, f);
            Box::new(move |commit_err| {
                let _ = tx.send(match commit_err {
                    None => r,
                    Some(e) => Err(e),
                });
            })
        });
        self.jobs
            .lock()
            .send(job)
            .map_err(|_| StoreError::Internal("store thread stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("store thread dropped a job".into()))?
    }
}

/// Runs one statement, compiled once per connection (the writer runs the same few
/// statements for every request; compiling them each time cost more than running them).
fn exec(c: &Connection, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute(p)
}

fn in_savepoint<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    exec(conn, "SAVEPOINT job", []).map_err(internal)?;
    let r = f(conn);
    if r.is_err() {
        exec(conn, "ROLLBACK TO job", []).map_err(internal)?;
    }
    exec(conn, "RELEASE job", []).map_err(internal)?;
    r
}

/// How often the write-ahead log is copied back into the database file.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Passive checkpoints never block the writer; the log stays small under any load.
fn checkpointer(conn: Connection, stop: mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);") {
            tracing::warn!(error = %e, "embedded store checkpoint failed");
        }
    }
}

fn writer(conn: Connection, rx: mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        if let Err(e) = exec(&conn, "BEGIN IMMEDIATE", []) {
            // Dropping the jobs drops their reply channels: each caller gets an error.
            tracing::error!(error = %e, "embedded store cannot begin a transaction");
            continue;
        }
        let finishes: Vec<Finish> = batch.into_iter().map(|job| job(&conn)).collect();
        let err = exec(&conn, "COMMIT", []).map_err(internal).err();
        if err.is_some() {
            let _ = exec(&conn, "ROLLBACK", []);
        }
        for f in finishes {
            f(err.clone());
        }
    }
}

/// What [`settle_in`] runs with.
struct SettleCtx {
    held: Arc<Mutex<Held>>,
    clock: Arc<Clock>,
    prune: bool,
}

/// Settles once: unless the reservation id already has a row in `settled`, releases the
/// reservation, adds `actual` (clamped at 0) to the key's `quota_used` and writes that
/// row, on the store thread, inside the caller's savepoint; returns whether it did. A
/// reservation held in memory is released only once the charge is written, so a failed
/// write leaves it to a retry.
fn settle_in(
    c: &Connection,
    cx: &SettleCtx,
    key_id: &str,
    reservation_id: &str,
    actual: Micros,
) -> StoreResult<bool> {
    let now = cx.clock.now();
    let first = exec(
        c,
        "INSERT OR IGNORE INTO settled (key_id, id, at) VALUES (?1, ?2, ?3)",
        params![key_id, reservation_id, now],
    )
    .map_err(internal)?
        > 0;
    if !first {
        return Ok(false);
    }
    if cx.prune {
        exec(
            c,
            "DELETE FROM settled WHERE at < ?1",
            [now - SETTLED_KEEP_SECS],
        )
        .map_err(internal)?;
    }
    let in_memory = cx.held.lock().contains(key_id, reservation_id);
    if !in_memory {
        exec(
            c,
            "DELETE FROM reservations WHERE id = ?1",
            [reservation_id],
        )
        .map_err(internal)?;
    }
    exec(
        c,
        "UPDATE keys SET quota_used = quota_used + ?2 WHERE id = ?1",
        params![key_id, actual.max(0)],
    )
    .map_err(internal)?;
    if in_memory {
        cx.held.lock().remove(key_id, reservation_id);
    }
    Ok(true)
}

/// Appends a usage record (JSON text) for a key, pruning the key's oldest rows when
/// `prune` is set, inside the caller's savepoint.
fn usage_in(c: &Connection, key_id: &str, text: &str, prune: bool) -> StoreResult<()> {
    exec(
        c,
        "INSERT INTO usage (key_id, record) VALUES (?1, ?2)",
        params![key_id, text],
    )
    .map_err(internal)?;
    if prune {
        exec(
            c,
            "DELETE FROM usage WHERE key_id = ?1 AND seq <= (
               SELECT seq FROM usage WHERE key_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
            params![key_id, USAGE_PER_KEY],
        )
        .map_err(internal)?;
    }
    Ok(())
}

const KEY_COLUMNS: &str =
    "id, hash, display, name, status, created_at, expires_at, models, allow_ips, rpm, quota_limit, quota_used";

fn key_from_row(r: &Row<'_>) -> rusqlite::Result<KeyRecord> {
    let status: String = r.get(4)?;
    let models: String = r.get(7)?;
    let ips: String = r.get(8)?;
    Ok(KeyRecord {
        id: r.get(0)?,
        hash: r.get(1)?,
        display: r.get(2)?,
        name: r.get(3)?,
        status: KeyStatus::parse(&status).unwrap_or(KeyStatus::Disabled),
        created_at: r.get(5)?,
        expires_at: r.get(6)?,
        models: serde_json::from_str(&models).unwrap_or_default(),
        allow_ips: serde_json::from_str(&ips).unwrap_or_default(),
        rpm: r.get(9)?,
        quota_limit: r.get(10)?,
        quota_used: r.get(11)?,
    })
}

fn get_key(conn: &Connection, id: &str) -> StoreResult<Option<KeyRecord>> {
    conn.prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM keys WHERE id = ?1"))
        .and_then(|mut st| st.query_row([id], key_from_row).optional())
        .map_err(internal)
}

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn create_key(&self, rec: &KeyRecord) -> StoreResult<()> {
        let r = rec.clone();
        self.call(move |c| {
            let n = exec(
                c,
                    "INSERT OR IGNORE INTO keys (id, hash, display, name, status, created_at, expires_at,
                       models, allow_ips, rpm, quota_limit, quota_used)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                    params![
                        r.id, r.hash, r.display, r.name, r.status.as_str(), r.created_at, r.expires_at,
                        json_list(&r.models), json_list(&r.allow_ips), r.rpm, r.quota_limit, r.quota_used
                    ],
                )
                .map_err(internal)?;
            if n == 0 {
                return Err(StoreError::Conflict(format!("key {} exists", r.id)));
            }
            Ok(())
        })
        .await
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<KeyRecord>> {
        let id = id.to_string();
        self.call(move |c| get_key(c, &id)).await
    }

    async fn list_keys(&self) -> StoreResult<Vec<KeyRecord>> {
        self.call(|c| {
            let mut st = c
                .prepare(&format!(
                    "SELECT {KEY_COLUMNS} FROM keys ORDER BY created_at, id"
                ))
                .map_err(internal)?;
            let rows = st.query_map([], key_from_row).map_err(internal)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(internal)
        })
        .await
    }

    async fn update_key(&self, id: &str, patch: &KeyPatch) -> StoreResult<Option<KeyRecord>> {
        let (id, patch) = (id.to_string(), patch.clone());
        self.call(move |c| {
            let Some(mut rec) = get_key(c, &id)? else {
                return Ok(None);
            };
            patch.apply(&mut rec);
            exec(
                c,
                "UPDATE keys SET name = ?2, status = ?3, expires_at = ?4, models = ?5, allow_ips = ?6,
                   rpm = ?7, quota_limit = ?8 WHERE id = ?1",
                params![
                    rec.id, rec.name, rec.status.as_str(), rec.expires_at, json_list(&rec.models),
                    json_list(&rec.allow_ips), rec.rpm, rec.quota_limit
                ],
            )
            .map_err(internal)?;
            Ok(Some(rec))
        })
        .await
    }

    async fn delete_key(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        let held = self.held.clone();
        self.call(move |c| {
            exec(c, "DELETE FROM reservations WHERE key_id = ?1", [&id]).map_err(internal)?;
            exec(c, "DELETE FROM settled WHERE key_id = ?1", [&id]).map_err(internal)?;
            let deleted = exec(c, "DELETE FROM keys WHERE id = ?1", [&id]).map_err(internal)? > 0;
            held.lock().by_key.remove(&id);
            Ok(deleted)
        })
        .await
    }

    async fn reserve(
        &self,
        key_id: &str,
        reservation_id: &str,
        min: Micros,
        max: Micros,
        ttl_secs: u64,
    ) -> StoreResult<Result<Reservation, ReserveDenied>> {
        let (key_id, rid) = (key_id.to_string(), reservation_id.to_string());
        let held = self.held.clone();
        let clock = self.clock.clone();
        self.call(move |c| {
            let now = clock.now();
            exec(
                c,
                "DELETE FROM reservations WHERE key_id = ?1 AND expires_at <= ?2",
                params![key_id, now],
            )
            .map_err(internal)?;
            held.lock().purge(&key_id, now);
            // Idempotent by id: a settled id is refused, a held one answers its grant.
            let settled: Option<i64> = c
                .prepare_cached("SELECT 1 FROM settled WHERE key_id = ?1 AND id = ?2")
                .and_then(|mut st| st.query_row([&key_id, &rid], |r| r.get(0)).optional())
                .map_err(internal)?;
            if settled.is_some() {
                return Ok(Err(ReserveDenied::Released));
            }
            let holding = match held.lock().amount(&key_id, &rid) {
                Some(a) => Some(a),
                None => c
                    .prepare_cached("SELECT amount FROM reservations WHERE id = ?1 AND key_id = ?2")
                    .and_then(|mut st| st.query_row([&rid, &key_id], |r| r.get(0)).optional())
                    .map_err(internal)?,
            };
            if let Some(amount) = holding {
                return Ok(Ok(Reservation {
                    id: rid,
                    key_id,
                    amount,
                }));
            }
            let Some(rec) = get_key(c, &key_id)? else {
                return Ok(Err(ReserveDenied::NotFound));
            };
            if rec.status != KeyStatus::Enabled {
                return Ok(Err(ReserveDenied::Disabled));
            }
            if rec.expires_at.is_some_and(|t| now >= t) {
                return Ok(Err(ReserveDenied::Expired));
            }
            let amount = match rec.quota_limit {
                None => max,
                Some(limit) => {
                    let reserved: i64 = c
                        .prepare_cached(
                            "SELECT COALESCE(SUM(amount), 0) FROM reservations WHERE key_id = ?1",
                        )
                        .and_then(|mut st| st.query_row([&key_id], |r| r.get(0)))
                        .map_err(internal)?;
                    let available = limit - rec.quota_used - reserved - held.lock().total(&key_id);
                    if available < min {
                        return Ok(Err(ReserveDenied::QuotaExhausted));
                    }
                    max.min(available)
                }
            };
            let expires = now.saturating_add(ttl_secs.min(i64::MAX as u64) as i64);
            if durable(&rid) {
                exec(
                    c,
                    "INSERT OR REPLACE INTO reservations (id, key_id, amount, expires_at) VALUES (?1, ?2, ?3, ?4)",
                    params![rid, key_id, amount, expires],
                )
                .map_err(internal)?;
            } else {
                // The last step of the job: nothing after it can fail and undo the SQL
                // while leaving this in place.
                held.lock().insert(&key_id, &rid, amount, expires);
            }
            Ok(Ok(Reservation {
                id: rid,
                key_id,
                amount,
            }))
        })
        .await
    }

    async fn extend(&self, reservation: &Reservation, ttl_secs: u64) -> StoreResult<()> {
        let now = self.clock.now();
        let until = now.saturating_add(ttl_secs.min(i64::MAX as u64) as i64);
        // A request's hold lives in memory: pushed in place, no commit (reserve and settle
        // take the same lock, so this is atomic with them).
        if self
            .held
            .lock()
            .extend(&reservation.key_id, &reservation.id, until, now)
            .is_some()
        {
            return Ok(());
        }
        let r = reservation.clone();
        let clock = self.clock.clone();
        self.call(move |c| {
            let now = clock.now();
            let until = now.saturating_add(ttl_secs.min(i64::MAX as u64) as i64);
            exec(
                c,
                "UPDATE reservations SET expires_at = MAX(expires_at, ?3)
                 WHERE id = ?1 AND key_id = ?2 AND expires_at > ?4",
                params![r.id, r.key_id, until, now],
            )
            .map_err(internal)?;
            Ok(())
        })
        .await
    }

    async fn settle(&self, reservation: &Reservation, actual: Micros) -> StoreResult<()> {
        let r = reservation.clone();
        let cx = self.settle_ctx();
        self.call(move |c| settle_in(c, &cx, &r.key_id, &r.id, actual).map(|_| ()))
            .await
    }

    async fn rate_hit(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<bool> {
        let window = now_ms.div_euclid(60_000);
        let mut rates = self.rates.lock();
        if rates.len() > 100_000 {
            rates.retain(|_, (w, _)| *w >= window);
        }
        let e = rates.entry(key_id.to_string()).or_insert((window, 0));
        if e.0 != window {
            *e = (window, 0);
        }
        if e.1 >= rpm {
            return Ok(false);
        }
        e.1 += 1;
        Ok(true)
    }

    async fn append_usage(&self, rec: &UsageRecord) -> StoreResult<()> {
        let text = serde_json::to_string(rec).map_err(internal)?;
        let key_id = rec.key_id.clone();
        let prune = self.prune_due();
        self.call(move |c| usage_in(c, &key_id, &text, prune)).await
    }

    async fn settle_logged(
        &self,
        reservation: &Reservation,
        actual: Micros,
        usage: &UsageRecord,
    ) -> StoreResult<()> {
        let r = reservation.clone();
        let text = serde_json::to_string(usage).map_err(internal)?;
        let usage_key = usage.key_id.clone();
        let prune = self.prune_due();
        let cx = self.settle_ctx();
        self.call(move |c| {
            if settle_in(c, &cx, &r.key_id, &r.id, actual)? {
                usage_in(c, &usage_key, &text, prune)?;
            }
            Ok(())
        })
        .await
    }

    async fn recent_usage(&self, key_id: &str, limit: usize) -> StoreResult<Vec<UsageRecord>> {
        let key_id = key_id.to_string();
        self.call(move |c| {
            let mut st = c
                .prepare("SELECT record FROM usage WHERE key_id = ?1 ORDER BY seq DESC LIMIT ?2")
                .map_err(internal)?;
            let rows = st
                .query_map(params![key_id, limit as i64], |r| r.get::<_, String>(0))
                .map_err(internal)?;
            let mut out = Vec::new();
            for text in rows {
                out.push(serde_json::from_str(&text.map_err(internal)?).map_err(internal)?);
            }
            Ok(out)
        })
        .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.call(|_| Ok(())).await
    }

    fn usage_query(&self) -> Option<&dyn super::usage_query::UsageQuery> {
        Some(self)
    }
}

#[cfg(test)]
#[path = "embedded_tests.rs"]
mod tests;
