//! The embedded store's tables and the statements the writer and the readers share.

use super::counters::STALE_PERIOD;
use super::figures::{Detail, DurableHold, Figures, GroupFigures, On};
use super::ledger::{durable, Ledger};
use crate::store::policy::{GroupRecord, Policy};
use crate::store::{KeyRecord, KeyStatus, Micros, StoreError, StoreResult, SETTLED_KEEP_SECS};
use rusqlite::{params, Connection, OptionalExtension, Row};

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY, hash TEXT NOT NULL, display TEXT NOT NULL, name TEXT NOT NULL,
    status TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER,
    models TEXT NOT NULL, allow_ips TEXT NOT NULL, rpm INTEGER,
    quota_limit INTEGER, quota_used INTEGER NOT NULL DEFAULT 0, group_id TEXT, policy TEXT
);
CREATE TABLE IF NOT EXISTS reservations (
    id TEXT PRIMARY KEY, key_id TEXT NOT NULL, amount INTEGER NOT NULL, expires_at INTEGER NOT NULL,
    detail TEXT
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
CREATE TABLE IF NOT EXISTS groups (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, status TEXT NOT NULL, created_at INTEGER NOT NULL,
    quota_limit INTEGER, quota_used INTEGER NOT NULL DEFAULT 0, policy TEXT
);
CREATE TABLE IF NOT EXISTS period_spend (
    scope TEXT NOT NULL, label TEXT NOT NULL, period_end INTEGER NOT NULL,
    used INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (scope, label)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS period_spend_end ON period_spend(period_end);
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY, key_id TEXT NOT NULL, expires_at INTEGER NOT NULL,
    bytes INTEGER NOT NULL, record TEXT NOT NULL
);
DROP INDEX IF EXISTS responses_key;
CREATE INDEX IF NOT EXISTS responses_key_bytes ON responses(key_id, expires_at, bytes);
CREATE INDEX IF NOT EXISTS responses_expiry ON responses(expires_at);
CREATE TABLE IF NOT EXISTS journal_applied (
    id INTEGER PRIMARY KEY CHECK (id = 0), seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO journal_applied (id, seq) VALUES (0, 0);
";

/// Columns added since the first release, with their type: added to an existing
/// database when it is opened.
const ADDED: &[(&str, &str, &str)] = &[
    ("keys", "group_id", "TEXT"),
    ("keys", "policy", "TEXT"),
    ("reservations", "detail", "TEXT"),
];

/// Creates what is missing: the tables of [`SCHEMA`], and the columns a database
/// written by an older release lacks.
pub fn migrate(conn: &Connection) -> StoreResult<()> {
    conn.execute_batch(SCHEMA).map_err(internal)?;
    for (table, column, kind) in ADDED {
        let has: bool = conn
            .prepare(&format!(
                "SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?1"
            ))
            .and_then(|mut st| st.exists([column]))
            .map_err(internal)?;
        if !has {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))
                .map_err(internal)?;
        }
    }
    Ok(())
}

/// Settings of the writing connection that only change how fast it writes: the query
/// planner stability guarantee, so that a bound value never recompiles a statement
/// (SQLite otherwise recompiles the usage trim at every run, as its `LIMIT` is a bound
/// value the planner could use: about 6 % of the writer thread under load).
pub fn tune_writer(conn: &Connection) -> StoreResult<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map(|_| ())
    .map_err(internal)
}

/// A policy as stored: `NULL` when it limits nothing and names no zone.
pub fn policy_json(p: &Policy) -> Option<String> {
    if *p == Policy::default() {
        return None;
    }
    serde_json::to_string(p).ok()
}

fn policy_from(text: Option<String>) -> Policy {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// The counter scope of a key (`k:ID`) or a group (`g:ID`) in `period_spend`.
pub fn key_scope(id: &str) -> String {
    format!("k:{id}")
}

pub fn group_scope(id: &str) -> String {
    format!("g:{id}")
}

pub fn internal(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::internal_error(e)
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

/// How a settle knows it is the first of its reservation id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Once {
    /// By the id's row in `settled`, written here: a task's id, whose settle may come
    /// after a restart.
    Row,
    /// Decided by the caller in memory: a request's id, whose hold and guard never
    /// outlive the process (so no row is written for it).
    Decided(bool),
}

/// Settles once, inside the caller's savepoint: unless the reservation id was settled
/// before (see [`Once`]), drops a task reservation's row and returns `true`; the charge
/// itself is the caller's ([`Charges`]). The hold in memory is released by the caller
/// once this is committed. `prune` also drops tombstones older than
/// [`SETTLED_KEEP_SECS`] and period rows long over.
fn settle_once(
    c: &Connection,
    now: i64,
    prune: bool,
    key_id: &str,
    reservation_id: &str,
    once: Once,
) -> StoreResult<bool> {
    let first = match once {
        Once::Decided(first) => first,
        Once::Row => {
            exec(
                c,
                "INSERT OR IGNORE INTO settled (key_id, id, at) VALUES (?1, ?2, ?3)",
                params![key_id, reservation_id, now],
            )
            .map_err(internal)?
                > 0
        }
    };
    if !first {
        return Ok(false);
    }
    if prune {
        prune_settled(c, now)?;
    }
    if durable(reservation_id) {
        exec(
            c,
            "DELETE FROM reservations WHERE id = ?1",
            [reservation_id],
        )
        .map_err(internal)?;
    }
    Ok(true)
}

/// Drops tombstones older than [`SETTLED_KEEP_SECS`] and period rows long over.
pub fn prune_settled(c: &Connection, now: i64) -> StoreResult<()> {
    exec(
        c,
        "DELETE FROM settled WHERE at < ?1",
        [now - SETTLED_KEEP_SECS],
    )
    .map_err(internal)?;
    exec(
        c,
        "DELETE FROM period_spend WHERE period_end < ?1",
        [now - STALE_PERIOD],
    )
    .map_err(internal)?;
    Ok(())
}

/// Settles once (as [`settle_once`]) and, when this call charged, charges the key's
/// lifetime spend and the counters the hold was on (`on`) in the same savepoint: the
/// key's period spend, the group's lifetime spend and its period spend.
#[allow(clippy::too_many_arguments)]
pub fn settle_hold_in(
    c: &Connection,
    now: i64,
    prune: bool,
    key_id: &str,
    reservation_id: &str,
    actual: Micros,
    on: Option<&On>,
    once: Once,
) -> StoreResult<bool> {
    let first = settle_once(c, now, prune, key_id, reservation_id, once)?;
    if first {
        let mut charges = Charges::default();
        charges.add(key_id, actual, on);
        charges.write(c)?;
    }
    Ok(first)
}

/// The charges of many settles, summed per counter, so that a commit carrying dozens of
/// a key's settles updates its row (and each period row) once instead of once each.
/// Every charge is an addition, so the sum is the same whatever the order.
#[derive(Debug, Default)]
pub struct Charges {
    /// Lifetime spend per key.
    keys: Vec<(String, Micros)>,
    /// Lifetime spend per group, each with its period spend.
    groups: Vec<(String, Micros, Vec<PeriodSum>)>,
    /// Period spend per key: (key, label, end, used).
    key_periods: Vec<(String, String, i64, Micros)>,
}

/// A period's spend: (label, end, used).
type PeriodSum = (String, i64, Micros);

/// The entry of `list` that `is` picks, added (from `make`) when absent: a batch
/// touches a handful of keys, so a scan costs less than hashing.
fn entry<T>(list: &mut Vec<T>, is: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> &mut T {
    let i = match list.iter().position(is) {
        Some(i) => i,
        None => {
            list.push(make());
            list.len() - 1
        }
    };
    &mut list[i]
}

impl Charges {
    /// Counts one settle's charge (`actual`, clamped at 0) on `key_id` and on what its
    /// hold was on.
    pub fn add(&mut self, key_id: &str, actual: Micros, on: Option<&On>) {
        let actual = actual.max(0);
        entry(
            &mut self.keys,
            |k| k.0 == key_id,
            || (key_id.to_string(), 0),
        )
        .1 += actual;
        let Some(on) = on.filter(|_| actual > 0) else {
            return;
        };
        for (label, end) in &on.key {
            let row = entry(
                &mut self.key_periods,
                |p| p.0 == key_id && p.1 == *label,
                || (key_id.to_string(), label.clone(), *end, 0),
            );
            row.3 += actual;
        }
        if let Some(g) = &on.group {
            let group = entry(
                &mut self.groups,
                |x| x.0 == *g,
                || (g.clone(), 0, Vec::new()),
            );
            group.1 += actual;
            for (label, end) in &on.group_periods {
                let row = entry(&mut group.2, |p| p.0 == *label, || (label.clone(), *end, 0));
                row.2 += actual;
            }
        }
    }

    /// Writes the sums, inside the caller's transaction.
    pub fn write(&self, c: &Connection) -> StoreResult<()> {
        let spend = |scope: &str, label: &str, end: i64, used: Micros| {
            exec(
                c,
                "INSERT INTO period_spend (scope, label, period_end, used) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (scope, label) DO UPDATE SET used = used + excluded.used",
                params![scope, label, end, used],
            )
            .map(|_| ())
            .map_err(internal)
        };
        for (key_id, used) in self.keys.iter().filter(|k| k.1 > 0) {
            exec(
                c,
                "UPDATE keys SET quota_used = quota_used + ?2 WHERE id = ?1",
                params![key_id, used],
            )
            .map_err(internal)?;
        }
        for (key_id, label, end, used) in &self.key_periods {
            spend(&key_scope(key_id), label, *end, *used)?;
        }
        for (g, used, periods) in &self.groups {
            let n = exec(
                c,
                "UPDATE groups SET quota_used = quota_used + ?2 WHERE id = ?1",
                params![g, used],
            )
            .map_err(internal)?;
            if n == 0 {
                // Deleted since: its counters went with it (a group made anew starts afresh).
                continue;
            }
            let scope = group_scope(g);
            for (label, end, used) in periods {
                spend(&scope, label, *end, *used)?;
            }
        }
        Ok(())
    }
}

/// A task reservation's detail (what it is on), from its row.
pub fn hold_detail(c: &Connection, reservation_id: &str) -> StoreResult<Option<Detail>> {
    let text: Option<Option<String>> = c
        .prepare_cached("SELECT detail FROM reservations WHERE id = ?1")
        .and_then(|mut st| st.query_row([reservation_id], |r| r.get(0)).optional())
        .map_err(internal)?;
    Ok(text.flatten().and_then(|t| serde_json::from_str(&t).ok()))
}

/// The settled spend of a scope's periods not long over: (label, end, used).
pub fn period_rows(
    c: &Connection,
    scope: &str,
    now: i64,
) -> StoreResult<Vec<(String, i64, Micros)>> {
    let mut st = c
        .prepare_cached(
            "SELECT label, period_end, used FROM period_spend WHERE scope = ?1 AND period_end > ?2",
        )
        .map_err(internal)?;
    let rows = st
        .query_map(params![scope, now - STALE_PERIOD], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(internal)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(internal)
}

/// Puts a group's account in memory, unless it is there (on the writer, between commits).
pub fn load_group(c: &Connection, ledger: &Ledger, group_id: &str) -> StoreResult<()> {
    if ledger.is_group_loaded(group_id) {
        return Ok(());
    }
    let figures = group_figures(c, group_id)?;
    let periods = period_rows(c, &group_scope(group_id), ledger.now())?;
    ledger.load_group(group_id, figures, periods);
    Ok(())
}

/// Puts a key's account in memory with its group's, unless they are there (on the writer,
/// between commits); `false` if the key does not exist.
pub fn load_account(c: &Connection, ledger: &Ledger, key_id: &str) -> StoreResult<bool> {
    if !ledger.is_loaded(key_id) {
        let Some(f) = figures(c, key_id)? else {
            return Ok(false);
        };
        let now = ledger.now();
        let holds = durable_holds(c, key_id, now)?;
        // The groups its holds are on first: the holds count on them as they load.
        for g in holds
            .iter()
            .filter_map(|h| h.detail.on.as_ref()?.group.as_ref())
        {
            load_group(c, ledger, g)?;
        }
        let periods = period_rows(c, &key_scope(key_id), now)?;
        ledger.load(key_id, f, periods, holds);
    }
    if let Some(g) = ledger.group_of(key_id) {
        load_group(c, ledger, &g)?;
    }
    Ok(true)
}

/// Loads every key holding a task reservation (and its groups): every hold on a group is
/// then in memory before the group's account can be, so a group counts them all.
pub fn load_task_holders(c: &Connection, ledger: &Ledger) -> StoreResult<()> {
    let ids: Vec<String> = {
        let mut st = c
            .prepare(
                "SELECT DISTINCT key_id FROM reservations
                 WHERE substr(id, 1, 5) = 'task_' AND expires_at > ?1",
            )
            .map_err(internal)?;
        let rows = st
            .query_map([ledger.now()], |r| r.get(0))
            .map_err(internal)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(internal)?
    };
    for id in ids {
        load_account(c, ledger, &id)?;
    }
    Ok(())
}

const KEY_COLUMNS: &str =
    "id, hash, display, name, status, created_at, expires_at, models, allow_ips, rpm, quota_limit, quota_used, group_id, policy";

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
        group: r.get(12)?,
        policy: policy_from(r.get(13)?),
    })
}

type FromRow<T> = fn(&Row<'_>) -> rusqlite::Result<T>;

/// The row of `table` with this id, read by `from`.
fn by_id<T>(
    conn: &Connection,
    columns: &str,
    table: &str,
    id: &str,
    from: FromRow<T>,
) -> StoreResult<Option<T>> {
    conn.prepare_cached(&format!("SELECT {columns} FROM {table} WHERE id = ?1"))
        .and_then(|mut st| st.query_row([id], from).optional())
        .map_err(internal)
}

/// Every row of `table`, oldest first.
fn every<T>(
    conn: &Connection,
    columns: &str,
    table: &str,
    from: FromRow<T>,
) -> StoreResult<Vec<T>> {
    let mut st = conn
        .prepare_cached(&format!(
            "SELECT {columns} FROM {table} ORDER BY created_at, id"
        ))
        .map_err(internal)?;
    let rows = st.query_map([], from).map_err(internal)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(internal)
}

pub fn get_key(conn: &Connection, id: &str) -> StoreResult<Option<KeyRecord>> {
    by_id(conn, KEY_COLUMNS, "keys", id, key_from_row)
}

pub fn list_keys(conn: &Connection) -> StoreResult<Vec<KeyRecord>> {
    every(conn, KEY_COLUMNS, "keys", key_from_row)
}

/// What a key's reservations are checked against; `None` if the key does not exist.
pub fn figures(conn: &Connection, id: &str) -> StoreResult<Option<Figures>> {
    conn.prepare_cached(
        "SELECT status, expires_at, quota_limit, quota_used, group_id, policy FROM keys WHERE id = ?1",
    )
    .and_then(|mut st| {
        st.query_row([id], |r| {
            let status: String = r.get(0)?;
            Ok(Figures {
                status: KeyStatus::parse(&status).unwrap_or(KeyStatus::Disabled),
                expires_at: r.get(1)?,
                limit: r.get(2)?,
                used: r.get(3)?,
                group: r.get(4)?,
                policy: policy_from(r.get(5)?),
            })
        })
        .optional()
    })
    .map_err(internal)
}

/// A key's task reservations still held at `now`.
pub fn durable_holds(conn: &Connection, key_id: &str, now: i64) -> StoreResult<Vec<DurableHold>> {
    let mut st = conn
        .prepare_cached(
            "SELECT id, amount, expires_at, detail FROM reservations
             WHERE key_id = ?1 AND expires_at > ?2 AND substr(id, 1, 5) = 'task_'",
        )
        .map_err(internal)?;
    let rows = st
        .query_map(params![key_id, now], |r| {
            let detail: Option<String> = r.get(3)?;
            Ok(DurableHold {
                id: r.get(0)?,
                amount: r.get(1)?,
                expires: r.get(2)?,
                detail: detail
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default(),
            })
        })
        .map_err(internal)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(internal)
}

const GROUP_COLUMNS: &str = "id, name, status, created_at, quota_limit, quota_used, policy";

fn group_from_row(r: &Row<'_>) -> rusqlite::Result<GroupRecord> {
    let status: String = r.get(2)?;
    Ok(GroupRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        status: KeyStatus::parse(&status).unwrap_or(KeyStatus::Disabled),
        created_at: r.get(3)?,
        quota_limit: r.get(4)?,
        quota_used: r.get(5)?,
        policy: policy_from(r.get(6)?),
    })
}

pub fn get_group(conn: &Connection, id: &str) -> StoreResult<Option<GroupRecord>> {
    by_id(conn, GROUP_COLUMNS, "groups", id, group_from_row)
}

pub fn list_groups(conn: &Connection) -> StoreResult<Vec<GroupRecord>> {
    every(conn, GROUP_COLUMNS, "groups", group_from_row)
}

/// What a group's share of a reservation is checked against; `None` if it does not exist.
pub fn group_figures(conn: &Connection, id: &str) -> StoreResult<Option<GroupFigures>> {
    Ok(get_group(conn, id)?.map(|g| GroupFigures::of(&g)))
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
    // A list of strings always serializes: the fallback is never taken.
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}
