//! The one writing connection, committed in groups by the writer thread, or by a request
//! alone when jobs come too slowly to share commits.
//!
//! The writer thread takes the first queued job and whatever else is queued behind it,
//! runs each job inside its own savepoint (one failing job undoes only itself), commits
//! once, and only then answers every job and applies what they changed in memory. It
//! never waits for company: the jobs that arrive while one commit runs share the next,
//! so groups grow with the load by themselves, and a job waits for at most the commit
//! ahead of it. (Waiting a millisecond to gather a group halved closed-loop throughput:
//! the requests that would fill the group were the ones waiting for it.) At low rates a
//! request's settle commits on its own thread ([`Writer::try_alone`]): the two thread
//! hand-offs of the queue cost more than the commit. A caller that got an answer
//! is durable against a process crash or `kill -9` (the WAL is written before the
//! answer); with `synchronous=NORMAL`, an OS crash or power loss may lose the last
//! transactions.
//!
//! Journaled entries ([`journal`]) are the exception: nobody waits for them, so the
//! writer gathers them for up to [`GATHER`] before applying them all in one commit,
//! unless a job comes first. They are applied before the jobs of their group.
//!
//! Between two commits it also notices another process's commits (the CLI changing a
//! key) with `PRAGMA data_version`, and reads the accounts in memory again.

use super::journal::{self, Entry, Journal};
use super::ledger::Ledger;
use super::sql::{exec, figures, group_figures, internal};
use super::usage_rows::UsageRows;
use crate::store::StoreError;
use parking_lot::Mutex;
use rusqlite::Connection;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Run after the commit: with the commit's error, or `None` once it is durable.
pub type Finish = Box<dyn FnOnce(Option<StoreError>) + Send>;
/// A job's body: runs inside the group's transaction; returns what to do after it, and
/// whether it failed in a way only undoing the whole group can repair.
pub type Run = Box<dyn FnOnce(&Connection) -> (Finish, bool) + Send>;

/// What the writer is given: a job to run, or a journaled entry to apply.
pub enum Work {
    Job(Job),
    Entry(Entry),
}

pub struct Job {
    /// Runs before the group's other jobs, so it reads only committed state (loading an
    /// account must not see a settle of the same group that may still fail to commit).
    pub early: bool,
    pub run: Run,
}

/// How long the writer waits for another process's write lock (the CLI's).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Jobs and entries one commit may carry (beyond them, the entries taken while appends
/// are held out).
const MAX_GROUP: usize = 4_096;
/// How long the writer gathers journaled entries before applying them, unless a job
/// comes: nobody waits for them (the journal made them durable), so the wait only makes
/// groups larger. A job (a key loaded, an admin change, a read waiting for the entries)
/// ends it at once.
const GATHER: Duration = Duration::from_millis(10);
/// How long the writer waits before applying entries again after their commit failed.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Below this many jobs a second, a request commits its own job on its thread. Above it,
/// jobs go to the writer thread: commits on the request threads would hold up the other
/// requests those threads serve (measured: 17k against 23k small chats a second on two
/// cores, closed loop), and a group shares one commit's fixed cost.
const ALONE_BELOW: f64 = 2_000.0;
/// How often an idle writer looks for another process's changes.
const IDLE_CHECK: Duration = Duration::from_millis(250);

/// How long a measure of the arrival rate lasts.
const RATE_WINDOW: Duration = Duration::from_millis(50);

/// The rate jobs arrive at.
#[derive(Default)]
pub struct Pace {
    /// Jobs per second over the last complete window.
    rate: f64,
    window: Option<(Instant, usize)>,
}

impl Pace {
    /// Records a group of `n` jobs committed at `at`.
    pub fn observe(&mut self, n: usize, at: Instant) {
        let (start, count) = self.window.get_or_insert((at, 0));
        *count += n;
        let span = at.duration_since(*start);
        if span >= RATE_WINDOW {
            self.rate = *count as f64 / span.as_secs_f64();
            self.window = Some((at, 0));
        }
    }

    /// Whether jobs come slowly enough to be committed one by one on their own threads.
    pub fn slow(&self) -> bool {
        self.rate < ALONE_BELOW
    }
}

fn sort_in(work: Work, jobs: &mut Vec<Job>, entries: &mut Vec<Entry>) {
    match work {
        Work::Job(j) => jobs.push(j),
        Work::Entry(e) => entries.push(e),
    }
}

/// Takes what is queued, up to `max` jobs and entries in all.
fn drain(rx: &Receiver<Work>, jobs: &mut Vec<Job>, entries: &mut Vec<Entry>, max: usize) {
    while jobs.len() + entries.len() < max {
        match rx.try_recv() {
            Ok(w) => sort_in(w, jobs, entries),
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
        let now: Option<i64> = conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .ok();
        let changed = now.is_some() && self.version.is_some() && now != self.version;
        self.version = now.or(self.version);
        changed
    }
}

/// Reads every account in memory again (after another process committed): on the
/// writer, between its commits or with every journaled entry applied, so the database
/// holds every settle memory has.
pub fn reread(conn: &Connection, ledger: &Ledger) {
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
    rows: Arc<UsageRows>,
    /// The settle journal, once this process holds the store's lock. The store owns it:
    /// dropping the store drops the journal's queue sender, which ends this thread.
    journal: OnceLock<Weak<Journal>>,
    /// A job is queued: stop gathering entries.
    urgent: AtomicBool,
    thread: OnceLock<Thread>,
    pub counts: Counts,
}

/// What running a group did, before its commit.
struct Ran {
    finishes: Vec<Finish>,
    entries: usize,
    poisoned: bool,
    /// The last journaled entry the group applied.
    applied: Option<u64>,
}

impl Writer {
    pub fn new(conn: Connection, ledger: Arc<Ledger>, rows: Arc<UsageRows>) -> Writer {
        let mut watch = Watch { version: None };
        watch.changed(&conn);
        Writer {
            desk: Mutex::new(Desk {
                conn,
                pace: Pace::default(),
                watch,
            }),
            ledger,
            rows,
            journal: OnceLock::new(),
            urgent: AtomicBool::new(false),
            thread: OnceLock::new(),
            counts: Counts::default(),
        }
    }

    /// The thread [`run`] runs on (woken by [`Writer::wake`]).
    pub fn set_thread(&self, t: Thread) {
        let _ = self.thread.set(t);
    }

    /// Starts journaling settles (see [`journal`]).
    pub fn set_journal(&self, j: &Arc<Journal>) {
        let _ = self.journal.set(Arc::downgrade(j));
    }

    fn journal(&self) -> Option<Arc<Journal>> {
        self.journal.get().and_then(Weak::upgrade)
    }

    /// Tells the writer a job is queued: it stops gathering entries.
    pub fn wake(&self) {
        self.urgent.store(true, Ordering::Release);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Waits out the gathering of entries, unless a job comes.
    fn gather(&self) {
        let until = Instant::now() + GATHER;
        while !self.urgent.swap(false, Ordering::AcqRel) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::park_timeout(left);
        }
    }

    /// Commits `job` on the caller's thread when nothing else is being committed and jobs
    /// come too slowly to share commits: the two thread hand-offs of the queue would then
    /// be most of the job's wait. Gives the job back otherwise, for the queue.
    pub fn try_alone(&self, job: Job) -> Result<(), Job> {
        // With the journal, the writer applies entries in order; a commit beside it could
        // read figures into memory without them.
        if self.journal.get().is_some() {
            return Err(job);
        }
        let Some(mut desk) = self.desk.try_lock() else {
            return Err(job);
        };
        if !self.alone(&desk) {
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
        let Desk { conn, watch, .. } = &mut *desk;
        let changed = watch.changed(conn);
        let ran = self.run_group(&desk, vec![job], &[], changed);
        self.commit(&desk, ran);
        Ok(())
    }

    /// Whether a job should commit on its caller's thread: jobs come slowly, or only one
    /// request holds money (then no other job could share the commit, whatever the rate).
    fn alone(&self, desk: &Desk) -> bool {
        desk.pace.slow() || self.ledger.live() <= 1
    }

    /// Holds the connection as a group being committed does (for tests).
    #[cfg(test)]
    pub fn busy(&self) -> impl Drop + '_ {
        self.desk.lock()
    }

    /// Runs, in the transaction begun, the journaled `entries`, then (when another
    /// process committed) reads the accounts in memory again, then every job of `batch`.
    /// Jobs do not run when the entries fail to apply: a load would read figures without
    /// them.
    fn run_group(
        &self,
        desk: &Desk,
        mut batch: Vec<Job>,
        entries: &[Entry],
        reread_all: bool,
    ) -> Ran {
        let conn = &desk.conn;
        let mut ran = Ran {
            finishes: Vec::with_capacity(batch.len()),
            entries: entries.len(),
            poisoned: false,
            applied: None,
        };
        if !entries.is_empty() {
            match journal::apply(conn, entries, &self.rows) {
                Ok(last) => ran.applied = Some(last),
                Err(e) => {
                    tracing::error!(error = %e, "embedded store cannot apply journaled settles");
                    ran.poisoned = true;
                    return ran;
                }
            }
        }
        if reread_all {
            reread(conn, &self.ledger);
        }
        batch.sort_by_key(|j| !j.early);
        for job in batch {
            let (finish, failed) = (job.run)(conn);
            ran.poisoned |= failed;
            ran.finishes.push(finish);
        }
        ran
    }

    /// Commits the group run (undoes it if any part failed), then answers each job.
    /// Returns whether it committed.
    fn commit(&self, desk: &Desk, ran: Ran) -> bool {
        let conn = &desk.conn;
        let err = if ran.poisoned {
            Some(StoreError::internal(
                "a write of the group failed; the group was undone",
            ))
        } else {
            exec(conn, "COMMIT", []).map_err(internal).err()
        };
        let jobs = ran.finishes.len() + ran.entries;
        self.counts.jobs.fetch_add(jobs as u64, Ordering::Relaxed);
        self.counts.commits.fetch_add(1, Ordering::Relaxed);
        if err.is_some() {
            let _ = exec(conn, "ROLLBACK", []);
        }
        let committed = err.is_none();
        for f in ran.finishes {
            f(err.clone());
        }
        if let (true, Some(seq), Some(j)) = (committed, ran.applied, self.journal()) {
            j.applied(seq);
        }
        committed
    }
}

/// The writer thread: takes the first queued job or entry and those queued behind it
/// (for entries, those queued within [`GATHER`]), and commits them as one group.
pub fn run(w: Arc<Writer>, rx: Receiver<Work>) {
    let mut retry: Vec<Entry> = Vec::new();
    // Another process's commit seen by a round that could not begin its transaction: the
    // next round reads the accounts again.
    let mut unread = false;
    loop {
        let mut jobs = Vec::new();
        let mut entries = std::mem::take(&mut retry);
        if entries.is_empty() {
            match rx.recv_timeout(IDLE_CHECK) {
                Ok(work) => sort_in(work, &mut jobs, &mut entries),
                // Idle: only look for another process's changes.
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        if jobs.is_empty() && !entries.is_empty() {
            w.gather();
        }
        drain(&rx, &mut jobs, &mut entries, MAX_GROUP);
        if let Some(j) = w.journal() {
            j.prepare_ahead();
        }
        let mut desk = w.desk.lock();
        let Desk { conn, watch, .. } = &mut *desk;
        let changed = watch.changed(conn) | std::mem::take(&mut unread);
        if jobs.is_empty() && entries.is_empty() && !changed {
            continue;
        }
        if let Err(e) = exec(&desk.conn, "BEGIN IMMEDIATE", []) {
            // Dropping the jobs drops their reply channels: each caller gets an error.
            tracing::error!(error = %e, "embedded store cannot begin a transaction");
            retry = entries;
            unread = changed;
            drop(desk);
            std::thread::sleep(RETRY_PAUSE);
            continue;
        }
        // Figures read into memory (loads, rereads) must include every journaled entry:
        // appends wait while the queue is emptied and the group runs.
        let journal = w.journal().filter(|_| changed || !jobs.is_empty());
        let hold = journal.as_ref().map(|j| j.hold());
        if hold.is_some() {
            drain(&rx, &mut jobs, &mut entries, usize::MAX);
        }
        desk.pace.observe(jobs.len(), Instant::now());
        let ran = w.run_group(&desk, jobs, &entries, changed);
        drop(hold);
        if !w.commit(&desk, ran) && !entries.is_empty() {
            retry = entries;
            drop(desk);
            std::thread::sleep(RETRY_PAUSE);
        }
    }
}

/// How often the write-ahead log is copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Frames (of 4 KiB pages: 64 MiB) the log may hold before a checkpoint also pauses the
/// writer for its last pass, so that the log starts again from its beginning. Under
/// steady writes that pause comes about once a second or less, not at every checkpoint.
const RESTART_FRAMES: i64 = 16_384;

/// Copies the write-ahead log back into the database file, and makes sure the log does
/// not grow without end. SQLite writes the log from its beginning again only when a
/// write finds every frame already copied; under steady writes a checkpoint that runs
/// beside them never gets there (frames arrive while it copies), and the log grew by
/// every commit's pages, without bound. So passes beside the writes copy and sync the
/// bulk, each one what arrived during the last, and when the log is past `restart`
/// frames, a last pass holds the writing connection and copies the few frames that
/// arrived meanwhile (so the pause is two syncs of a few frames, not of the whole log).
/// The next commit then
/// starts the log again (unless another connection is reading the log at that moment:
/// then the start waits for the next pause). Returns the frames in the log and the
/// frames copied by the last pass.
pub fn checkpoint(
    conn: &Connection,
    writer: &Writer,
    restart: i64,
) -> rusqlite::Result<(i64, i64)> {
    let passive = || {
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })
    };
    let (mut log, copied) = passive()?;
    if log < restart {
        return Ok((log, copied));
    }
    // Each pass also syncs the frames that arrived during the one before, so passes
    // beside the writes shrink what the paused pass must sync.
    for _ in 0..TAIL_PASSES {
        let (now, _) = passive()?;
        let arrived = now - log;
        log = now;
        if arrived < TAIL_FRAMES {
            break;
        }
    }
    let _desk = writer.desk.lock();
    passive()
}

/// Passes beside the writes, at most, before the paused one.
const TAIL_PASSES: usize = 4;
/// Frames arrived during a pass few enough to be synced with the writer paused.
const TAIL_FRAMES: i64 = 64;

/// How often the checkpointer looks at how many commits were made.
const CHECKPOINT_POLL: Duration = Duration::from_millis(100);

/// Commits (of a few pages each) after which a checkpoint runs without waiting for
/// [`CHECKPOINT_EVERY`]: under steady writes the passes beside them keep up, and the
/// log peaks near [`RESTART_FRAMES`] rather than growing with the commit rate.
const CHECKPOINT_COMMITS: u64 = 1_024;

/// Checkpoints until the store closes: every [`CHECKPOINT_EVERY`] when anything was
/// committed, sooner when many commits were.
pub fn checkpointer(conn: Connection, writer: Arc<Writer>, stop: mpsc::Receiver<()>) {
    let commits = || writer.counts.commits.load(Ordering::Relaxed);
    let mut last = (Instant::now(), commits());
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_POLL) {
        let now = (Instant::now(), commits());
        if now.1.wrapping_sub(last.1) < CHECKPOINT_COMMITS && now.0 - last.0 < CHECKPOINT_EVERY {
            continue;
        }
        last = now;
        if let Err(e) = checkpoint(&conn, &writer, RESTART_FRAMES) {
            tracing::warn!(error = %e, "embedded store checkpoint failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_commit_alone_only_while_they_come_slowly() {
        let t0 = Instant::now();
        let mut p = Pace::default();
        assert!(p.slow());
        // 1,000 jobs a second, one at a time: each commits alone.
        for i in 1..200 {
            p.observe(1, t0 + Duration::from_millis(i));
        }
        assert!(p.slow());
        // 20,000 a second: they go to the writer thread.
        let t1 = t0 + Duration::from_secs(1);
        for i in 1..300 {
            p.observe(8, t1 + Duration::from_micros(400 * i));
        }
        assert!(!p.slow());
        // Quiet again: the next window brings the rate down.
        p.observe(1, t1 + Duration::from_secs(1));
        assert!(p.slow());
    }
}
