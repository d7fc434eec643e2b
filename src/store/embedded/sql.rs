//! The embedded store's tables and the statements the writer and the readers share.

use super::ledger::{durable, Figures};
use crate::store::{KeyRecord, KeyStatus, Micros, StoreError, StoreResult, SETTLED_KEEP_SECS};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Usage rows kept per key.
pub const USAGE_PER_KEY: i64 = 10_000;

pub const SCHEMA: &str = "
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

pub fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(e.to_string())
}

/// Runs one statement, compiled once per connection (the writer runs the same few
/// statements for every request; compiling them each time cost more than running them).
pub fn exec(c: &Connection, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute(p)
}

/// Runs `f` inside a savepoint: a job that fails undoes only itself, not the others
/// sharing its commit.
pub fn in_savepoint<T>(
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

/// Whether `reservation_id` has a row in `settled`.
pub fn is_settled(c: &Connection, key_id: &str, reservation_id: &str) -> StoreResult<bool> {
    c.prepare_cached("SELECT 1 FROM settled WHERE key_id = ?1 AND id = ?2")
        .and_then(|mut st| {
            st.query_row([key_id, reservation_id], |r| r.get::<_, i64>(0))
                .optional()
        })
        .map(|v| v.is_some())
        .map_err(internal)
}

/// Settles once, inside the caller's savepoint: unless the reservation id already has a
/// row in `settled`, adds `actual` (clamped at 0) to the key's `quota_used`, writes that
/// row and drops a task reservation's row; returns whether it did. The hold in memory is
/// released by the caller once this is committed. `prune` also drops tombstones older
/// than [`SETTLED_KEEP_SECS`].
pub fn settle_in(
    c: &Connection,
    now: i64,
    prune: bool,
    key_id: &str,
    reservation_id: &str,
    actual: Micros,
) -> StoreResult<bool> {
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
    if prune {
        exec(
            c,
            "DELETE FROM settled WHERE at < ?1",
            [now - SETTLED_KEEP_SECS],
        )
        .map_err(internal)?;
    }
    if durable(reservation_id) {
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
    Ok(true)
}

/// Appends a usage record (JSON text) for a key, pruning the key's oldest rows when
/// `prune` is set, inside the caller's savepoint.
pub fn usage_in(c: &Connection, key_id: &str, text: &str, prune: bool) -> StoreResult<()> {
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
        group: None,
        policy: Default::default(),
    })
}

pub fn get_key(conn: &Connection, id: &str) -> StoreResult<Option<KeyRecord>> {
    conn.prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM keys WHERE id = ?1"))
        .and_then(|mut st| st.query_row([id], key_from_row).optional())
        .map_err(internal)
}

pub fn list_keys(conn: &Connection) -> StoreResult<Vec<KeyRecord>> {
    let mut st = conn
        .prepare_cached(&format!(
            "SELECT {KEY_COLUMNS} FROM keys ORDER BY created_at, id"
        ))
        .map_err(internal)?;
    let rows = st.query_map([], key_from_row).map_err(internal)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(internal)
}

/// What a key's reservations are checked against; `None` if the key does not exist.
pub fn figures(conn: &Connection, id: &str) -> StoreResult<Option<Figures>> {
    conn.prepare_cached(
        "SELECT status, expires_at, quota_limit, quota_used FROM keys WHERE id = ?1",
    )
    .and_then(|mut st| {
        st.query_row([id], |r| {
            let status: String = r.get(0)?;
            Ok(Figures {
                status: KeyStatus::parse(&status).unwrap_or(KeyStatus::Disabled),
                expires_at: r.get(1)?,
                limit: r.get(2)?,
                used: r.get(3)?,
            })
        })
        .optional()
    })
    .map_err(internal)
}

/// A key's task reservations still held at `now`: (id, amount, expiry).
pub fn durable_holds(
    conn: &Connection,
    key_id: &str,
    now: i64,
) -> StoreResult<Vec<(String, Micros, i64)>> {
    let mut st = conn
        .prepare_cached(
            "SELECT id, amount, expires_at FROM reservations WHERE key_id = ?1 AND expires_at > ?2",
        )
        .map_err(internal)?;
    let rows = st
        .query_map(params![key_id, now], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(internal)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(internal)
}

pub fn recent_usage(conn: &Connection, key_id: &str, limit: usize) -> StoreResult<Vec<String>> {
    let mut st = conn
        .prepare_cached("SELECT record FROM usage WHERE key_id = ?1 ORDER BY seq DESC LIMIT ?2")
        .map_err(internal)?;
    let rows = st
        .query_map(params![key_id, limit as i64], |r| r.get::<_, String>(0))
        .map_err(internal)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(internal)
}

pub fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}
