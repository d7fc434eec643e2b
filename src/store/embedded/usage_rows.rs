//! Each key keeps its newest usage records, up to a cap.
//!
//! The writer knows how many rows each key has (counted on the key's first insert since
//! the store opened, and again every cap's worth of inserts, which also picks up other
//! processes' deletions and the rare insert whose group was undone). Once a key holds a
//! hundredth more than the cap, one insert deletes its oldest rows down to the cap, read
//! from the oldest end of the key's index. Deleting one row per insert instead dirtied
//! two more pages (the oldest of the table and of the index) in every commit; a batch
//! that found its cut-off by walking the key's newest rows cost a millisecond every
//! hundred inserts, which was the store's whole p99 at low load.

use super::sql::{exec, internal};
use crate::store::StoreResult;
use parking_lot::Mutex;
use rusqlite::{params, Connection};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Usage rows kept per key.
pub const USAGE_PER_KEY: i64 = 10_000;

/// Rows a key may hold beyond the cap before they are trimmed: `cap / SLACK_PART`.
const SLACK_PART: i64 = 100;

struct Rows {
    rows: i64,
    /// Inserts until the rows are counted again.
    until_count: i64,
}

pub struct UsageRows {
    cap: i64,
    /// Rows past the cap that trigger a trim (at least one).
    slack: i64,
    keys: Mutex<HashMap<String, Rows>>,
}

impl Default for UsageRows {
    fn default() -> Self {
        UsageRows::with_cap(USAGE_PER_KEY)
    }
}

impl UsageRows {
    pub fn with_cap(cap: i64) -> UsageRows {
        let cap = cap.max(1);
        UsageRows {
            cap,
            slack: (cap / SLACK_PART).max(1),
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// Appends `text` to `key_id`'s records, inside the caller's transaction, and drops
    /// what is past the cap once the slack is used up.
    pub fn insert(&self, c: &Connection, key_id: &str, text: &str) -> StoreResult<()> {
        self.insert_all(c, &[(key_id, text)])
    }

    /// Appends each `(key_id, text)` in order, as [`UsageRows::insert`] does one: up to
    /// [`CHUNK`] rows per statement, so a statement's own work (and AUTOINCREMENT's update
    /// of its counter) is paid once a chunk instead of once a row; then each key's count
    /// and trim, once per key.
    pub fn insert_all(&self, c: &Connection, rows: &[(&str, &str)]) -> StoreResult<()> {
        for chunk in rows.chunks(CHUNK) {
            let params: Vec<&dyn rusqlite::ToSql> = chunk
                .iter()
                .flat_map(|(k, t)| [k as &dyn rusqlite::ToSql, t as &dyn rusqlite::ToSql])
                .collect();
            exec(c, insert_sql(chunk.len()), params.as_slice()).map_err(internal)?;
        }
        let mut added: Vec<(&str, i64)> = Vec::new();
        for (key, _) in rows {
            match added.iter_mut().find(|(k, _)| k == key) {
                Some((_, n)) => *n += 1,
                None => added.push((key, 1)),
            }
        }
        for (key, n) in added {
            self.counted(c, key, n)?;
        }
        Ok(())
    }

    /// Counts `added` new rows of `key_id` and drops what is past the cap once the slack
    /// is used up.
    fn counted(&self, c: &Connection, key_id: &str, added: i64) -> StoreResult<()> {
        let mut keys = self.keys.lock();
        let rows = match keys.get_mut(key_id) {
            Some(r) if r.until_count > 0 => {
                r.rows += added;
                r.until_count -= added;
                r.rows
            }
            _ => {
                let rows = c
                    .prepare_cached("SELECT COUNT(*) FROM usage WHERE key_id = ?1")
                    .and_then(|mut st| st.query_row([key_id], |r| r.get::<_, i64>(0)))
                    .map_err(internal)?;
                let until_count = self.cap;
                keys.insert(key_id.to_string(), Rows { rows, until_count });
                rows
            }
        };
        let over = rows - self.cap;
        if over >= self.slack {
            // Without the writer's planner guarantee (`sql::tune_writer`) SQLite compiles
            // this statement again at every run (its `LIMIT` is a bound value); it runs
            // once per slack, not once per insert, either way.
            exec(c, TRIM, params![key_id, over]).map_err(internal)?;
            if let Some(r) = keys.get_mut(key_id) {
                r.rows = self.cap;
            }
        }
        Ok(())
    }
}

/// Deletes the key's `?2` oldest rows.
const TRIM: &str = "DELETE FROM usage WHERE seq IN (
   SELECT seq FROM usage WHERE key_id = ?1 ORDER BY seq LIMIT ?2)";

/// Most rows one insert statement carries.
const CHUNK: usize = 16;

/// The insert of `n` rows (1 to [`CHUNK`]), each statement made once.
fn insert_sql(n: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        (1..=CHUNK)
            .map(|n| {
                let values = vec!["(?, ?)"; n].join(", ");
                format!("INSERT INTO usage (key_id, record) VALUES {values}")
            })
            .collect()
    });
    &all[n.clamp(1, CHUNK) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(super::super::sql::SCHEMA).unwrap();
        super::super::sql::tune_writer(&c).unwrap();
        c
    }

    fn rows(c: &Connection, key: &str) -> Vec<String> {
        let mut st = c
            .prepare("SELECT record FROM usage WHERE key_id = ?1 ORDER BY seq")
            .unwrap();
        st.query_map([key], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Inserts `{key}{i}` for each `i` of `range`.
    fn insert_each(u: &UsageRows, c: &Connection, key: &str, range: std::ops::Range<usize>) {
        for i in range {
            u.insert(c, key, &format!("{key}{i}")).unwrap();
        }
    }

    #[test]
    fn a_key_keeps_its_newest_rows_up_to_the_cap_and_others_keep_theirs() {
        let c = table();
        let u = UsageRows::with_cap(3);
        for i in 0..5 {
            u.insert(&c, "a", &format!("a{i}")).unwrap();
            u.insert(&c, "b", &format!("b{i}")).unwrap();
        }
        assert_eq!(rows(&c, "a"), ["a2", "a3", "a4"]);
        assert_eq!(rows(&c, "b"), ["b2", "b3", "b4"]);
    }

    #[test]
    fn a_large_cap_trims_in_steps_of_its_slack() {
        let c = table();
        let u = UsageRows::with_cap(300);
        insert_each(&u, &c, "a", 0..302);
        // The slack is 3: 302 rows are kept, the 303rd insert trims to the newest 300.
        assert_eq!(rows(&c, "a").len(), 302);
        u.insert(&c, "a", "a302").unwrap();
        let kept = rows(&c, "a");
        assert_eq!(kept.len(), 300);
        assert_eq!((kept[0].as_str(), kept[299].as_str()), ("a3", "a302"));
    }

    #[test]
    fn rows_already_there_are_counted_and_an_excess_is_dropped_at_once() {
        let c = table();
        for i in 0..6 {
            exec(
                &c,
                "INSERT INTO usage (key_id, record) VALUES ('a', ?1)",
                [format!("old{i}")],
            )
            .unwrap();
        }
        let u = UsageRows::with_cap(3);
        u.insert(&c, "a", "new").unwrap();
        assert_eq!(rows(&c, "a"), ["old4", "old5", "new"]);
    }

    #[test]
    fn rows_deleted_behind_its_back_are_noticed_at_the_next_count() {
        let c = table();
        let u = UsageRows::with_cap(3);
        insert_each(&u, &c, "a", 0..3);
        // Another process deletes two rows: the count in memory is now two too high.
        c.execute_batch("DELETE FROM usage WHERE record IN ('a0', 'a1')")
            .unwrap();
        // Until the recount, an insert may drop one row too many, never keep too many.
        for i in 3..6 {
            u.insert(&c, "a", &format!("a{i}")).unwrap();
            assert!(rows(&c, "a").len() <= 3);
        }
        // After the recount (every cap's worth of inserts), the key is full again.
        insert_each(&u, &c, "a", 6..9);
        assert_eq!(rows(&c, "a"), ["a6", "a7", "a8"]);
    }

    /// The trim is compiled once on the writer's connection, though its `LIMIT` changes
    /// from one run to the next.
    #[test]
    fn the_trim_is_not_compiled_again_for_each_limit() {
        let u = UsageRows::with_cap(10);
        // Trims of 1, 2 and 3 rows (the slack is 1).
        let trims = |c: &Connection, key: &str| {
            for extra in [11, 2, 3] {
                insert_each(&u, c, key, 0..extra);
            }
        };
        let c = table();
        trims(&c, "a");
        assert_eq!(rows(&c, "a").len(), 10);
        let st = c.prepare_cached(TRIM).unwrap();
        assert_eq!(st.get_status(rusqlite::StatementStatus::RePrepare), 0);
        // Without the guarantee the same runs recompile it.
        let plain = Connection::open_in_memory().unwrap();
        plain.execute_batch(super::super::sql::SCHEMA).unwrap();
        trims(&plain, "b");
        let st = plain.prepare_cached(TRIM).unwrap();
        assert!(st.get_status(rusqlite::StatementStatus::RePrepare) > 0);
    }

    /// A batch leaves what its rows inserted one at a time leave, in the same order,
    /// across chunks, keys and trims.
    #[test]
    fn a_batch_inserts_and_trims_as_its_rows_one_by_one() {
        let (one, all) = (table(), table());
        let (u1, ua) = (UsageRows::with_cap(20), UsageRows::with_cap(20));
        let mut batch = Vec::new();
        for i in 0..90 {
            let key = ["a", "b", "c"][i % 3 * (i % 7).min(1)];
            batch.push((key, format!("{key}{i}")));
        }
        for part in batch.chunks(37) {
            for (k, t) in part {
                u1.insert(&one, k, t).unwrap();
            }
            let part: Vec<(&str, &str)> = part.iter().map(|(k, t)| (*k, t.as_str())).collect();
            ua.insert_all(&all, &part).unwrap();
        }
        for key in ["a", "b", "c"] {
            let (a, b) = (rows(&one, key), rows(&all, key));
            assert!(b.len() >= 20 && b.len() < 21 + 37, "{key}: {}", b.len());
            assert_eq!(
                a[a.len() - 20..],
                b[b.len() - 20..],
                "{key}: the newest rows"
            );
        }
        let order: Vec<String> = {
            let mut st = all
                .prepare("SELECT record FROM usage ORDER BY seq")
                .unwrap();
            st.query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        let mut sorted = order.clone();
        sorted.sort_by_key(|r| r[1..].parse::<u32>().unwrap());
        assert_eq!(order, sorted, "rows keep the order they came in");
    }
}
