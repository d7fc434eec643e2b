//! Read connections: key lookups, key lists and usage logs never go through the writer.
//!
//! In WAL mode a reader sees the last committed state and never waits for the writer, so
//! a lookup is not queued behind a commit, and a flood of unknown keys (each one looked
//! up once before the key cache remembers it) costs the writer nothing. The reads run on
//! threads of their own, so no Tokio worker blocks on SQLite either.

use super::sql::internal;
use crate::store::{StoreError, StoreResult};
use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Reader threads: lookups are short; two let one run while the other reads a long log.
const READERS: usize = 2;

type Read = Box<dyn FnOnce(&Connection) + Send>;

pub struct Readers {
    jobs: mpsc::Sender<Read>,
}

impl Readers {
    pub fn open(db: &Path) -> StoreResult<Readers> {
        let (tx, rx) = mpsc::channel::<Read>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..READERS {
            // Opened for writing and made query-only: a read-only connection cannot map
            // the WAL index when it has to create it.
            let conn = Connection::open_with_flags(
                db,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(internal)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(internal)?;
            conn.execute_batch("PRAGMA query_only = ON;")
                .map_err(internal)?;
            conn.set_prepared_statement_cache_capacity(16);
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("embedded-read-{n}"))
                .spawn(move || loop {
                    let job = rx.lock().recv();
                    match job {
                        Ok(job) => job(&conn),
                        Err(_) => return,
                    }
                })
                .map_err(internal)?;
        }
        Ok(Readers { jobs: tx })
    }

    /// Runs `f` on a read connection.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Box::new(move |c| {
                let _ = tx.send(f(c));
            }))
            // The send error only hands the job back: the readers have ended.
            .map_err(|_| StoreError::internal("store readers stopped"))?;
        rx.await
            .map_err(|e| StoreError::internal_from("store reader dropped a job", e))?
    }
}
