//! The one writing connection, committed in groups by the writer thread, or by a request
//! alone when jobs come too slowly to share commits.
//!
//! The writer thread takes the first queued job, drains whatever else is queued and, when
//! jobs arrive fast enough that waiting pays, waits a little for more (see [`Pace`]), runs
//! each job inside its own savepoint (one failing job undoes only itself), commits once,
//! and only then answers every job and applies what they changed in memory. At low rates
//! a request's settle does the same on its own thread ([`Writer::try_alone`]): the two
//! thread hand-offs of the queue cost more than the commit. A caller that got an answer
//! is durable against a process crash or `kill -9` (the WAL is written before the
//! answer); with `synchronous=NORMAL`, an OS crash or power loss may lose the last
//! transactions.
//!
//! Between two commits it also notices another process's commits (the CLI changing a
//! key) with `PRAGMA data_version`, and reads the accounts in memory again.

use super::ledger::Ledger;
use super::sql::{exec, figures, group_figures, internal};
use crate::store::StoreError;
use parking_lot::Mutex;
use rusqlite::Connection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Run after the commit: with the commit's error, or `None` once it is durable.
pub type Finish = Box<dyn FnOnce(Option<StoreError>) + Send>;
/// A job's body: runs inside the group's transaction; returns what to do after it, and
/// whether it failed in a way only undoing the whole group can repair.
pub type Run = Box<dyn FnOnce(&Connection) -> (Finish, bool) + Send>;

pub struct Job {
    /// Runs before the group's other jobs, so it reads only committed state (loading an
    /// account must not see a settle of the same group that may still fail to commit).
    pub early: bool,
    pub run: Run,
}

/// How long the writer waits for another process's write lock (the CLI's).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Jobs one commit may carry.
const MAX_GROUP: usize = 512;
/// The longest a job waits for others to share its commit.
const WINDOW: Duration = Duration::from_millis(2);
/// How long, on average, a job may wait for company: a group is gathered only when more
/// than one job is expected within this time. At 1,000 settles a second (one per
/// millisecond) nothing waits; at 10,000 a commit carries a handful, and its fixed cost
/// (the lock, the log header, the page writes) is paid once for all of them.
const GATHER: Duration = Duration::from_micros(1000);
/// How often an idle writer looks for another process's changes.
const IDLE_CHECK: Duration = Duration::from_millis(250);

/// How long a measure of the arrival rate lasts.
const RATE_WINDOW: Duration = Duration::from_millis(50);

/// The rate jobs arrive at, and how many to gather for the next commit.
#[derive(Default)]
pub struct Pace {
    /// Jobs per second over the last complete window.
    rate: f64,
    window: Option<(Instant, usize)>,
}

impl Pace {
    /// Records a group of `n` jobs whose gathering started at `at`.
    pub fn observe(&mut self, n: usize, at: Instant) {
        let (start, count) = self.window.get_or_insert((at, 0));
        *count += n;
        let span = at.duration_since(*start);
        if span >= RATE_WINDOW {
            self.rate = *count as f64 / span.as_secs_f64();
            self.window = Some((at, 0));
        }
    }

    /// Jobs to wait for before committing: those expected within [`GATHER`].
    pub fn want(&self) -> usize {
        ((self.rate * GATHER.as_secs_f64()) as usize).clamp(1, MAX_GROUP)
    }

    /// How long `missing` more jobs should take to arrive.
    fn expected(&self, missing: usize) -> Duration {
        if self.rate <= 0.0 {
            return WINDOW;
        }
        Duration::from_secs_f64(missing as f64 / self.rate)
    }
}

fn drain(rx: &Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(j) => batch.push(j),
            Err(_) => return,
        }
    }
}

/// Another process's commits since the last look, read with `PRAGMA data_version`
/// (which changes only for other connections' commits).
struct Watch {
    version: Option<i64>,
}

impl Watch {
    fn changed(&mut self, conn: &Connection) -> bool {
        let now: Option<i64> = conn.query_row("PRAGMA data_version", [], |r| r.get(0)).ok();
        let changed = now.is_some() && self.version.is_some() && now != self.version;
        self.version = now.or(self.version);
        changed
    }

    /// Reads every account in memory again when another process committed.
    fn refresh(&mut self, conn: &Connection, ledger: &Ledger) {
        if !self.changed(conn) {
            return;
        }
        for id in ledger.loaded() {
            match figures(conn, &id) {
                Ok(f) => ledger.reload(&id, f),
                Err(e) => {
                    tracing::warn!(key = %id, error = %e, "embedded store cannot re-read a key")
                }
            }
        }
        for id in ledger.loaded_groups() {
            match group_figures(conn, &id) {
                Ok(f) => ledger.reload_group(&id, f),
                Err(e) => {
                    tracing::warn!(group = %id, error = %e, "embedded store cannot re-read a group")
                }
            }
        }
    }
}

/// What the writer did: jobs run and commits made (how well groups form).
#[derive(Default)]
pub struct Counts {
    pub jobs: AtomicU64,
    pub commits: AtomicU64,
}

/// The writing connection and what is known between its commits. Whoever commits holds it:
/// the writer thread for a group, or a caller committing its own job (see
/// [`Writer::try_alone`]).
struct Desk {
    conn: Connection,
    pace: Pace,
    watch: Watch,
}

pub struct Writer {
    desk: Mutex<Desk>,
    ledger: Arc<Ledger>,
    pub counts: Counts,
}

impl Writer {
    pub fn new(conn: Connection, ledger: Arc<Ledger>) -> Writer {
        let mut watch = Watch { version: None };
        watch.changed(&conn);
        Writer {
            desk: Mutex::new(Desk {
                conn,
                pace: Pace::default(),
                watch,
            }),
            ledger,
            counts: Counts::default(),
        }
    }

    /// Commits `job` on the caller's thread when nothing else is being committed and jobs
    /// come too slowly to share commits: the two thread hand-offs of the queue would then
    /// be most of the job's wait. Gives the job back otherwise, for the queue.
    pub fn try_alone(&self, job: Job) -> Result<(), Job> {
        let Some(mut desk) = self.desk.try_lock() else {
            return Err(job);
        };
        if self.want(&desk) > 1 {
            return Err(job);
        }
        // Never wait on a request's thread for another process's write lock (the CLI's):
        // then the job queues, and the writer thread waits for it.
        let conn = &desk.conn;
        let _ = conn.busy_timeout(Duration::ZERO);
        let begun = exec(conn, "BEGIN IMMEDIATE", []);
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
        if begun.is_err() {
            return Err(job);
        }
        desk.pace.observe(1, Instant::now());
        self.commit(&mut desk, vec![job]);
        Ok(())
    }

    /// Jobs to gather for the next commit: those the pace expects soon, but no more than
    /// requests hold money (one request at a time never waits, whatever the rate).
    fn want(&self, desk: &Desk) -> usize {
        desk.pace.want().min(self.ledger.live().max(1))
    }

    /// Holds the connection as a group being committed does (for tests).
    #[cfg(test)]
    pub fn busy(&self) -> impl Drop + '_ {
        self.desk.lock()
    }

    /// Runs every job of `batch` in the transaction begun, commits once, and only then
    /// answers each job.
    fn commit(&self, desk: &mut Desk, mut batch: Vec<Job>) {
        let conn = &desk.conn;
        desk.watch.refresh(conn, &self.ledger);
        batch.sort_by_key(|j| !j.early);
        let mut poisoned = false;
        let finishes: Vec<Finish> = batch
            .into_iter()
            .map(|job| {
                let (finish, failed) = (job.run)(conn);
                poisoned |= failed;
                finish
            })
            .collect();
        let err = if poisoned {
            Some(StoreError::Internal(
                "a write of the group failed; the group was undone".into(),
            ))
        } else {
            exec(conn, "COMMIT", []).map_err(internal).err()
        };
        self.counts
            .jobs
            .fetch_add(finishes.len() as u64, Ordering::Relaxed);
        self.counts.commits.fetch_add(1, Ordering::Relaxed);
        if err.is_some() {
            let _ = exec(conn, "ROLLBACK", []);
        }
        for f in finishes {
            f(err.clone());
        }
    }
}

/// The writer thread: takes the first queued job, holds the desk while it gathers a group
/// (callers then queue rather than commit alone), and commits the group.
pub fn run(w: Arc<Writer>, rx: Receiver<Job>) {
    loop {
        let first = match rx.recv_timeout(IDLE_CHECK) {
            Ok(j) => j,
            Err(RecvTimeoutError::Timeout) => {
                let desk = &mut *w.desk.lock();
                desk.watch.refresh(&desk.conn, &w.ledger);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut desk = w.desk.lock();
        let started = Instant::now();
        let mut batch = vec![first];
        drain(&rx, &mut batch);
        let want = w.want(&desk);
        let deadline = started + WINDOW;
        while batch.len() < want {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Sleeping, not blocking on the queue: senders then never wake this thread.
            std::thread::sleep(desk.pace.expected(want - batch.len()).min(deadline - now));
            drain(&rx, &mut batch);
        }
        desk.pace.observe(batch.len(), started);
        if let Err(e) = exec(&desk.conn, "BEGIN IMMEDIATE", []) {
            // Dropping the jobs drops their reply channels: each caller gets an error.
            tracing::error!(error = %e, "embedded store cannot begin a transaction");
            continue;
        }
        w.commit(&mut desk, batch);
    }
}

/// How often the write-ahead log is copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Passive checkpoints never block the writer; the log stays small under any load.
pub fn checkpointer(conn: Connection, stop: mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);") {
            tracing::warn!(error = %e, "embedded store checkpoint failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_form_only_when_jobs_come_fast_enough() {
        let t0 = Instant::now();
        let mut p = Pace::default();
        // 1,000 jobs a second, one at a time: nothing waits.
        for i in 1..200 {
            p.observe(1, t0 + Duration::from_millis(i));
        }
        assert_eq!(p.want(), 1);
        // 20,000 a second: a commit gathers those of a millisecond.
        let t1 = t0 + Duration::from_secs(1);
        for i in 1..300 {
            p.observe(8, t1 + Duration::from_micros(400 * i));
        }
        assert!((15..=25).contains(&p.want()), "{}", p.want());
        // Quiet again: the next window brings the rate down.
        p.observe(1, t1 + Duration::from_secs(1));
        assert_eq!(p.want(), 1);
    }
}
