//! The settle journal of the serving process: a request's charge and usage record are
//! made durable by one append to a file of the store's own, and reach SQLite later, many
//! at a time, on the writer thread.
//!
//! A settle committed to SQLite on its own path cost a commit's share (every touched page
//! written to the write-ahead log, under `fcntl` locks) and made the request wait for the
//! commit ahead of its own. An append is a copy into the file's pages, mapped shared
//! ([`super::mapped`]): no system call, and as durable against a process crash or `kill -9`
//! as a commit with `synchronous=NORMAL` (the page cache holds both; both are lost only
//! with the machine). The writer then applies a couple of milliseconds' worth
//! of entries in one transaction ([`apply`]), so a commit carries dozens of settles
//! instead of a handful.
//!
//! What stays true:
//! - **Memory first, in journal order.** Under the journal's lock an append claims the
//!   request's id (a second settle of it changes nothing), writes its line, applies the
//!   settle to the ledger (the hold is released and the charge counted at once) and
//!   queues the entry for the writer, so the writer's queue holds entries in the order of
//!   their numbers. Memory is therefore always SQLite plus the entries not yet applied.
//! - **Reading figures into memory sees every entry.** Loading an account, or reading
//!   the accounts again after another process changed the file, happens on the writer
//!   while it holds the journal's lock ([`Journal::hold`]), after applying every entry
//!   queued, so memory never loses an entry nor counts one twice.
//! - **Reads see every answered settle.** Key, group and usage reads wait until the
//!   writer has applied what was appended before them (`EmbeddedStore::sync`).
//! - **Exactly once.** Each commit records the last entry it applied (`journal_applied`)
//!   and skips entries at or below it, so an entry applied by a process that is leaving
//!   (a graceful upgrade) and replayed by its successor counts once.
//! - **Recovery.** The process that takes the store's lock applies every journal file it
//!   finds before serving ([`recover`]) and deletes them; a line cut short by a crash was
//!   never answered and is ignored. A file is made at its full size, zero-filled, so
//!   what follows its last line is zeros. The writer deletes a file once every entry in it is
//!   applied, so the files hold at most a few seconds of settles.
//!
//! Only the process holding the store's lock (the server) journals; the CLI and other
//! processes that open the file commit their writes directly. When they open it, they
//! apply what the journal files hold beyond the database (a crashed server's entries,
//! or a running server's not yet applied: each counts once whoever applies it), so
//! they see every answered settle; the files stay the server's to delete. Reading
//! beside a server that is copying a line in, such a process may see that line part
//! zeros and a later one whole, so it applies entries only up to the first missing
//! number ([`contiguous`]).
//!
//! A line: `SEQ \t SETTLE \t USAGE \n`, each of the last two a JSON object or `-`.

use super::figures::On;
use super::ledger::durable;
use super::ledger::Ledger;
use super::mapped::MappedFile;
use super::sql::{exec, internal, prune_settled, settle_hold_in, Charges, Once};
use super::usage_rows::UsageRows;
use crate::store::{Micros, StoreError, StoreResult};
use parking_lot::Mutex;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The size a journal file is made at; a new one is started when a line does not fit.
/// A file is deleted once every entry in it is applied.
const FILE_BYTES: usize = if cfg!(test) { 256 << 10 } else { 4 << 20 };

/// How far past the last append the writer makes pages writable: more than the appends of
/// one of its rounds (a few hundred lines of about 600 bytes at full load).
const AHEAD_BYTES: usize = 512 << 10;

/// A settle as journaled: what the commit on SQLite needs, without the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    /// The store's clock at the settle (dates the period rows it prunes).
    pub now: i64,
    pub prune: bool,
    pub key: String,
    pub rid: String,
    pub actual: Micros,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<On>,
}

/// One journaled change: a settle, a usage record (its key and its JSON), or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub seq: u64,
    pub settle: Option<Settle>,
    pub usage: Option<(String, String)>,
}

/// The part of a line after its number.
fn body(settle: Option<&Settle>, usage: Option<&str>) -> StoreResult<Vec<u8>> {
    let mut out = Vec::with_capacity(160 + usage.map_or(0, str::len));
    out.push(b'\t');
    match settle {
        Some(s) => serde_json::to_writer(&mut out, s).map_err(internal)?,
        None => out.push(b'-'),
    }
    out.push(b'\t');
    match usage {
        // Compact JSON escapes every control character: no tab nor newline in it.
        Some(u) if !u.bytes().any(|b| b == b'\n' || b == b'\t') => {
            out.extend_from_slice(u.as_bytes())
        }
        Some(_) => {
            return Err(StoreError::internal(
                "usage record with a raw control character",
            ))
        }
        None => out.push(b'-'),
    }
    out.push(b'\n');
    Ok(out)
}

#[derive(Deserialize)]
struct KeyOf {
    key_id: String,
}

/// Reads one complete line back; `None` for a line that is not one (cut short).
fn parse(line: &str) -> Option<Entry> {
    let mut parts = line.splitn(3, '\t');
    let seq = parts.next()?.parse().ok()?;
    let settle = match parts.next()? {
        "-" => None,
        s => Some(serde_json::from_str(s).ok()?),
    };
    let usage = match parts.next()? {
        "-" => None,
        u => Some((serde_json::from_str::<KeyOf>(u).ok()?.key_id, u.to_string())),
    };
    Some(Entry { seq, settle, usage })
}

/// A name no other journal file has, even of a store opened again in this process.
fn file_name(first_seq: u64) -> String {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let n = MADE.fetch_add(1, Ordering::Relaxed);
    format!("journal-{first_seq:020}-{}-{n}.log", std::process::id())
}

/// The first entry number a journal file's name gives.
fn first_of(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("journal-")?.strip_suffix(".log")?;
    rest.split('-').next()?.parse().ok()
}

fn create(dir: &Path, first_seq: u64, len: usize) -> StoreResult<(MappedFile, PathBuf)> {
    let path = dir.join(file_name(first_seq));
    let f = MappedFile::create(&path, len.max(FILE_BYTES)).map_err(internal)?;
    Ok((f, path))
}

struct Inner {
    file: MappedFile,
    /// The last entry written.
    seq: u64,
    /// Files not yet deleted, oldest first, with their first entry; the last is written.
    files: VecDeque<(u64, PathBuf)>,
    /// Hands a written entry to the writer, in the order of the entries' numbers.
    queue: Queue,
}

/// Where written entries go (the writer's queue).
pub type Queue = Box<dyn Fn(Entry) + Send>;

pub struct Journal {
    dir: PathBuf,
    inner: Mutex<Inner>,
    /// The last entry written and the last applied (committed to SQLite).
    written: AtomicU64,
    applied: AtomicU64,
    /// The store was closed: settles commit directly from now on.
    closed: AtomicBool,
}

/// What an append did.
#[derive(Debug, PartialEq, Eq)]
pub enum Appended {
    /// Written and counted in memory.
    Written,
    /// The request's id was settled before: nothing written, nothing charged.
    Again,
}

impl Journal {
    /// Starts a journal whose entries follow `seq` (every entry up to it is applied).
    pub fn start(dir: &Path, seq: u64, queue: Queue) -> StoreResult<Journal> {
        let (file, path) = create(dir, seq + 1, FILE_BYTES)?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                file,
                seq,
                files: VecDeque::from([(seq + 1, path)]),
                queue,
            }),
            written: AtomicU64::new(seq),
            applied: AtomicU64::new(seq),
            closed: AtomicBool::new(false),
        })
    }

    /// Journals a settle (when `settle` is given, it is the first of its id or nothing)
    /// and a usage record, applies the settle to `ledger`, and queues the entry for the
    /// writer. `tokens` are the tokens the request used, if known.
    pub fn append(
        &self,
        ledger: &Ledger,
        settle: Option<Settle>,
        usage: Option<(String, String)>,
        tokens: Option<u64>,
    ) -> StoreResult<Appended> {
        let body = body(settle.as_ref(), usage.as_ref().map(|(_, u)| u.as_str()))?;
        let mut g = self.inner.lock();
        if self.is_closed() {
            // Closed since the caller looked: its retry commits directly.
            return Err(StoreError::unavailable("the store's journal is closed"));
        }
        if let Some(s) = &settle {
            if !ledger.claim(&s.key, &s.rid) {
                ledger.settled(&s.key, &s.rid, s.actual, false, s.on.as_ref(), tokens);
                return Ok(Appended::Again);
            }
        }
        let seq = g.seq + 1;
        // The line is its number, then the body made before the lock was taken.
        let mut digits = [0u8; 20];
        let n = {
            let mut rest = &mut digits[..];
            let _ = write!(rest, "{seq}");
            20 - rest.len()
        };
        let line = [&digits[..n], &body[..]];
        if !g.file.append(&line) {
            // The file is full: the line starts the next one.
            let made = create(&self.dir, seq, n + body.len());
            let (file, path) = match made {
                Ok(f) => f,
                Err(e) => {
                    if let Some(s) = &settle {
                        ledger.unclaim(&s.key, &s.rid);
                    }
                    tracing::warn!(error = %e, "cannot start a new journal file");
                    return Err(e);
                }
            };
            g.file = file;
            g.files.push_back((seq, path));
            g.file.append(&line);
        }
        g.seq = seq;
        self.written.store(seq, Ordering::Release);
        if let Some(s) = &settle {
            ledger.settled(&s.key, &s.rid, s.actual, true, s.on.as_ref(), tokens);
        }
        (g.queue)(Entry { seq, settle, usage });
        Ok(Appended::Written)
    }

    /// Makes the pages the next appends will write writable now ([`MappedFile::ahead`]):
    /// called by the writer between its groups, so a request's append copies its line
    /// into a page that is ready instead of taking the page's fault. The journal's lock
    /// is held only to take the range.
    pub fn prepare_ahead(&self) {
        let ahead = self.inner.lock().file.ahead(AHEAD_BYTES);
        if let Some(a) = ahead {
            a.run();
        }
    }

    /// Takes no more entries (those written are still applied): after it, settles commit
    /// directly, and the store's directory can pass to another process.
    pub fn close(&self) {
        let _g = self.inner.lock();
        self.closed.store(true, Ordering::Release);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Keeps appends out while the writer applies every queued entry and reads figures
    /// into memory.
    pub fn hold(&self) -> impl Drop + '_ {
        self.inner.lock()
    }

    /// Entries written, and entries applied.
    pub fn marks(&self) -> (u64, u64) {
        (
            self.written.load(Ordering::Acquire),
            self.applied.load(Ordering::Acquire),
        )
    }

    /// Notes that every entry up to `seq` is committed, and deletes the files holding
    /// only such entries.
    pub fn applied(&self, seq: u64) {
        self.applied.fetch_max(seq, Ordering::AcqRel);
        let mut gone = Vec::new();
        {
            let mut g = self.inner.lock();
            while g.files.len() > 1 && g.files[1].0 <= seq + 1 {
                gone.extend(g.files.pop_front().map(|(_, p)| p));
            }
        }
        for p in gone {
            // A successor process may have applied and deleted it already.
            if let Err(e) = std::fs::remove_file(&p).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            }) {
                tracing::warn!(file = %p.display(), error = %e, "cannot delete a journal file");
            }
        }
    }
}

/// The journal files in `dir`, oldest first, and every complete entry in them in order.
pub fn recover(dir: &Path) -> StoreResult<(Vec<PathBuf>, Vec<Entry>)> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map_err(internal)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            first_of(&name).map(|n| (n, e.path()))
        })
        .collect();
    files.sort();
    let mut entries = Vec::new();
    for (_, path) in &files {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            // Deleted meanwhile by the server: every entry in it was applied.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(internal(e)),
        };
        // Only lines ended by their newline were written whole; the zeros after the last
        // one are the file's unwritten part.
        let end = memchr::memrchr(b'\n', &text).unwrap_or(0);
        let text = String::from_utf8_lossy(&text[..end]);
        for line in text.split('\n').filter(|l| !l.is_empty()) {
            // A line with a zero in it was being copied in (or cut short by a crash).
            match parse(line).filter(|_| !line.contains('\0')) {
                Some(e) => entries.push(e),
                None => tracing::warn!(file = %path.display(), "skipping a cut journal line"),
            }
        }
    }
    entries.sort_by_key(|e| e.seq);
    entries.dedup_by_key(|e| e.seq);
    Ok((files.into_iter().map(|(_, p)| p).collect(), entries))
}

/// The entries that follow `done` without a missing number: what may be applied beside
/// a server still appending (a later entry whole does not mean an earlier one is).
pub fn contiguous(entries: &[Entry], done: u64) -> &[Entry] {
    let start = entries.partition_point(|e| e.seq <= done);
    let run = entries[start..]
        .iter()
        .zip(done + 1..)
        .take_while(|(e, n)| e.seq == *n)
        .count();
    &entries[start..start + run]
}

/// The last entry committed to this database.
pub fn last_applied(c: &Connection) -> StoreResult<u64> {
    c.prepare_cached("SELECT seq FROM journal_applied WHERE id = 0")
        .and_then(|mut st| st.query_row([], |r| r.get::<_, i64>(0)))
        .map(|s| s.max(0) as u64)
        .map_err(internal)
}

/// Applies, inside the caller's transaction, the entries after the last one this
/// database has; returns the last entry it now has. Their charges are summed per counter
/// and written once each ([`Charges`]).
pub fn apply(c: &Connection, entries: &[Entry], rows: &UsageRows) -> StoreResult<u64> {
    let done = last_applied(c)?;
    let mut last = done;
    let mut charges = Charges::default();
    let mut usage = Vec::new();
    for e in entries.iter().filter(|e| e.seq > done) {
        if let Some(s) = &e.settle {
            if durable(&s.rid) {
                // Not journaled (a task's settle commits with its row); applied as one.
                let on = s.on.as_ref();
                settle_hold_in(
                    c,
                    s.now,
                    s.prune,
                    &s.key,
                    &s.rid,
                    s.actual,
                    on,
                    Once::Decided(true),
                )?;
            } else {
                if s.prune {
                    // In journal order: what came before is counted, then pruned.
                    std::mem::take(&mut charges).write(c)?;
                    prune_settled(c, s.now)?;
                }
                charges.add(&s.key, s.actual, s.on.as_ref());
            }
        }
        if let Some((key, text)) = &e.usage {
            usage.push((key.as_str(), text.as_str()));
        }
        last = last.max(e.seq);
    }
    charges.write(c)?;
    rows.insert_all(c, &usage)?;
    if last > done {
        exec(
            c,
            "UPDATE journal_applied SET seq = ?1 WHERE id = 0",
            [last as i64],
        )
        .map_err(internal)?;
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(rid: &str) -> Settle {
        Settle {
            now: 1_800_000_000,
            prune: false,
            key: "k1".into(),
            rid: rid.into(),
            actual: 42,
            on: Some(On {
                key: vec![("day:1".into(), 86_400)],
                group: Some("g".into()),
                group_periods: vec![],
            }),
        }
    }

    #[test]
    fn a_line_reads_back_as_written() {
        let s = settle("r1");
        let usage = r#"{"request_id":"r1","key_id":"k1","model":"m\tx"}"#.to_string();
        let b = body(Some(&s), Some(&usage)).unwrap();
        let line = format!("7{}", String::from_utf8(b).unwrap());
        let e = parse(line.trim_end_matches('\n')).unwrap();
        assert_eq!(e.seq, 7);
        assert_eq!(e.settle, Some(s));
        assert_eq!(e.usage, Some(("k1".into(), usage)));
        let b = body(None, None).unwrap();
        let e = parse(format!("8{}", String::from_utf8(b).unwrap()).trim_end()).unwrap();
        assert_eq!((e.settle, e.usage), (None, None));
        assert!(
            body(None, Some("{\"a\":\"\t\"}")).is_err(),
            "a raw tab would cut the line"
        );
    }

    /// A database with two keys (one in group `g`) and the group.
    fn counters_db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(super::super::sql::SCHEMA).unwrap();
        c.execute_batch(
            "INSERT INTO keys (id, hash, display, name, status, created_at, models, allow_ips)
               VALUES ('k1','h1','d','n','active',0,'[]','[]'), ('k2','h2','d','n','active',0,'[]','[]');
             INSERT INTO groups (id, name, status, created_at) VALUES ('g','g','active',0);",
        )
        .unwrap();
        c
    }

    /// Every counter's row, to compare two databases.
    fn counters(c: &Connection) -> Vec<String> {
        let mut out = Vec::new();
        for q in [
            "SELECT id || '=' || quota_used FROM keys ORDER BY id",
            "SELECT id || '=' || quota_used FROM groups ORDER BY id",
            "SELECT scope || '/' || label || '/' || period_end || '=' || used FROM period_spend ORDER BY scope, label",
            "SELECT CAST(count(*) AS TEXT) FROM usage",
        ] {
            let mut st = c.prepare(q).unwrap();
            let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
            out.extend(rows.map(Result::unwrap));
        }
        out
    }

    /// A commit's settles are summed per counter: applying a batch at once leaves every
    /// counter as applying its entries one at a time does, across keys, groups, period
    /// labels (a day rolling over inside the batch), zero and negative charges, and a prune between them.
    #[test]
    fn a_batch_charges_what_its_entries_charge_one_by_one() {
        let mut entries = Vec::new();
        for (i, (key, actual, day, group)) in [
            ("k1", 42, "day:1", true),
            ("k2", 7, "day:1", false),
            ("k1", 0, "day:1", true),
            ("k1", -5, "day:1", true),
            ("k1", 100, "day:2", true),
            ("k2", 3, "day:2", false),
            ("k1", 8, "day:2", true),
        ]
        .into_iter()
        .enumerate()
        {
            let mut s = settle(&format!("r{i}"));
            s.key = key.into();
            s.actual = actual;
            s.prune = i == 3;
            s.on = Some(On {
                key: vec![(day.into(), 86_400)],
                group: group.then(|| "g".to_string()),
                group_periods: if group {
                    vec![(format!("g{day}"), 86_400)]
                } else {
                    vec![]
                },
            });
            let usage = (key.to_string(), format!(r#"{{"request_id":"r{i}"}}"#));
            entries.push(Entry {
                seq: i as u64 + 1,
                settle: Some(s),
                usage: Some(usage),
            });
        }
        let rows = UsageRows::default();
        let (batch, single) = (counters_db(), counters_db());
        assert_eq!(apply(&batch, &entries, &rows).unwrap(), 7);
        for e in &entries {
            apply(&single, std::slice::from_ref(e), &UsageRows::default()).unwrap();
        }
        assert_eq!(counters(&batch), counters(&single));
        assert_eq!(
            counters(&batch)[..3],
            ["k1=150".to_string(), "k2=10".into(), "g=150".into()]
        );
        // Applied again (a successor replaying the files), nothing counts twice.
        assert_eq!(apply(&batch, &entries, &rows).unwrap(), 7);
        assert_eq!(counters(&batch), counters(&single));
    }

    #[test]
    fn recovery_keeps_whole_lines_in_order_and_drops_a_cut_one() {
        let dir = tempfile::tempdir().unwrap();
        let line = |seq: u64, rid: &str| {
            let mut l = seq.to_string().into_bytes();
            l.extend(body(Some(&settle(rid)), None).unwrap());
            l
        };
        let mut older = line(1, "a");
        older.extend(line(2, "b"));
        std::fs::write(dir.path().join(file_name(1)), older).unwrap();
        let mut newer = line(3, "c");
        let cut = line(4, "d");
        newer.extend(&cut[..cut.len() / 2]);
        std::fs::write(dir.path().join(file_name(3)), newer).unwrap();
        std::fs::write(dir.path().join("gateway.db"), b"not a journal").unwrap();
        let (files, entries) = recover(dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        let rids: Vec<_> = entries
            .iter()
            .map(|e| e.settle.as_ref().unwrap().rid.as_str())
            .collect();
        assert_eq!(rids, ["a", "b", "c"]);
    }

    fn line(seq: u64, rid: &str) -> Vec<u8> {
        let mut l = seq.to_string().into_bytes();
        l.extend(body(Some(&settle(rid)), None).unwrap());
        l
    }

    #[test]
    fn a_line_being_copied_in_is_skipped_and_nothing_after_a_gap_is_contiguous() {
        let dir = tempfile::tempdir().unwrap();
        // As a reader beside the server may see a mapped file: entry 2 half copied (its
        // middle still zeros), entry 3 whole, then the file's unwritten zeros.
        let mut text = line(1, "a");
        let mut half = line(2, "b");
        let (mid, last) = (half.len() / 2, half.len() - 1);
        half[mid..last].fill(0);
        text.extend(half);
        text.extend(line(3, "c"));
        text.extend(vec![0u8; 4096]);
        std::fs::write(dir.path().join(file_name(1)), text).unwrap();
        let (_, entries) = recover(dir.path()).unwrap();
        let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 3]);
        let seqs = |r: &[Entry]| r.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(seqs(contiguous(&entries, 0)), [1], "3 waits for 2");
        assert!(contiguous(&entries, 1).is_empty());
        assert_eq!(seqs(contiguous(&entries, 2)), [3]);
        assert!(contiguous(&entries, 3).is_empty());
    }

    #[test]
    fn appends_fill_mapped_files_and_read_back_across_them() {
        let dir = tempfile::tempdir().unwrap();
        let queued = std::sync::Arc::new(Mutex::new(Vec::new()));
        let q = queued.clone();
        let j = Journal::start(
            dir.path(),
            10,
            Box::new(move |e: Entry| q.lock().push(e.seq)),
        )
        .unwrap();
        let ledger = Ledger::new(Default::default());
        let usage = format!("{{\"key_id\":\"k1\",\"pad\":\"{}\"}}", "x".repeat(1_000));
        // Enough lines for three files, and one line larger than a whole file.
        let n = 3 * FILE_BYTES / 1_050;
        for _ in 0..n {
            let appended = j.append(&ledger, None, Some(("k1".into(), usage.clone())), None);
            assert_eq!(appended.unwrap(), Appended::Written);
        }
        let huge = format!(
            "{{\"key_id\":\"k1\",\"pad\":\"{}\"}}",
            "y".repeat(FILE_BYTES)
        );
        j.append(&ledger, None, Some(("k1".into(), huge.clone())), None)
            .unwrap();
        j.append(&ledger, None, Some(("k1".into(), usage.clone())), None)
            .unwrap();
        let (files, entries) = recover(dir.path()).unwrap();
        assert!(files.len() >= 4, "{} files", files.len());
        let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
        let want: Vec<u64> = (11..=10 + n as u64 + 2).collect();
        assert_eq!(seqs, want);
        assert_eq!(*queued.lock(), want);
        assert_eq!(entries[n].usage.as_ref().unwrap().1, huge);
        assert_eq!(entries[n + 1].usage.as_ref().unwrap().1, usage);
        // Applied up to a file's end: the files before it go.
        j.applied(10 + n as u64 + 1);
        let (left, _) = recover(dir.path()).unwrap();
        assert_eq!(left.len(), 1, "only the file being written");
    }
}
