//! The store's directory between processes: the server claims it (and first applies
//! what the journal of the server before it left), another process catches up with the
//! journal of the server running beside it (a closing server gives it up in `close`).

use super::sql::{self, exec, internal};
use super::{journal, writer, EmbeddedStore, Work};
use crate::store::{Cause, StoreError, StoreResult};
use rusqlite::Connection;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

impl EmbeddedStore {
    /// Claims the directory for one server process. Reservations left by a previous
    /// server are dropped: a restarted single node has no request in flight. Video task
    /// reservations (their id is the task id, `task_...`) stay: their tasks outlive the
    /// process and settle them when they end. Open tasks are made due now: their leases
    /// were held by the process that stopped, and nobody else polls a single node.
    pub fn lock_exclusive(&self) -> StoreResult<()> {
        let f = File::create(self.dir.join("LOCK")).map_err(internal)?;
        f.try_lock().map_err(|e| {
            let what = format!("{} is in use by another gateway", self.dir.display());
            StoreError::Conflict(Cause::new(what).because(e))
        })?;
        *self.lock.lock() = Some(f);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let (files, last) = self.catch_up(false, |conn| {
            // Not `LIKE 'task_%'`: `_` is a LIKE wildcard.
            exec(
                conn,
                "DELETE FROM reservations WHERE substr(id, 1, 5) <> 'task_'",
                [],
            )
            .and_then(|_| {
                exec(
                    conn,
                    "UPDATE tasks SET due_at = ?1 WHERE due_at > ?1",
                    [now_ms],
                )
            })
            .map(|_| ())
            .map_err(internal)
        })?;
        // Deleted before the new file is made: its name may be one of theirs.
        for f in files {
            if let Err(e) = std::fs::remove_file(&f) {
                tracing::warn!(file = %f.display(), error = %e, "cannot delete an applied journal file");
            }
        }
        let jobs = self.jobs.clone();
        // The writer gone means the store is closing: the entry is on disk, and the next
        // process to open the store applies it.
        let queue = Box::new(move |e| drop(jobs.send(Work::Entry(e))));
        let j = Arc::new(journal::Journal::start(&self.dir, last, queue)?);
        self.writer.set_journal(&j);
        let _ = self.journal.set(j);
        Ok(())
    }

    /// Applies, in one transaction with `also`, what the journal files hold beyond what
    /// the database has, then reads memory again (what the store read when it opened may
    /// predate them). Returns the files and the last entry the database now has. Each
    /// entry counts once whoever applies it: the server that journaled it, its successor,
    /// or another process. `beside_server`: a server may still be appending, so only the
    /// entries up to the first missing number are applied (the rest are its to apply).
    fn catch_up(
        &self,
        beside_server: bool,
        also: impl FnOnce(&Connection) -> StoreResult<()>,
    ) -> StoreResult<(Vec<PathBuf>, u64)> {
        let conn = Connection::open(self.dir.join("gateway.db")).map_err(internal)?;
        conn.busy_timeout(writer::BUSY_TIMEOUT).map_err(internal)?;
        let (files, entries) = journal::recover(&self.dir)?;
        conn.execute_batch("BEGIN IMMEDIATE").map_err(internal)?;
        let ready = if beside_server {
            journal::last_applied(&conn).map(|done| journal::contiguous(&entries, done))
        } else {
            Ok(&entries[..])
        };
        let r = ready.and_then(|ready| {
            let last = journal::apply(&conn, ready, &self.usage_rows)?;
            also(&conn)?;
            conn.execute_batch("COMMIT").map_err(internal)?;
            Ok(last)
        });
        let last = match r {
            Ok(last) => last,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        };
        self.ledger.clear();
        sql::load_task_holders(&conn, &self.ledger)?;
        Ok((files, entries.last().map_or(last, |e| e.seq.max(last))))
    }

    /// For a process beside the server (the CLI): applies what the server journaled and
    /// has not applied yet (or left by a crash), so this process's reads see every
    /// answered settle. The files stay: they are the server's (or its successor's) to
    /// delete.
    pub fn catch_up_with_journal(&self) -> StoreResult<()> {
        self.catch_up(true, |_| Ok(())).map(|_| ())
    }
}
