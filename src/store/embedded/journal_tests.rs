//! The settle journal of a store that holds its lock: settles answer before the writer
//! applies them, a crash before it does loses nothing, and nothing counts twice.

use super::policy_tests::usage;
use super::tests::key_record;
use super::*;
use std::time::Duration;

/// A store as the server opens it (locked, journaling), without the checkpoint thread
/// so that its files can be copied while its writer is held.
fn serving(dir: &Path) -> EmbeddedStore {
    let s = EmbeddedStore::open_with(dir, false).unwrap();
    s.lock_exclusive().unwrap();
    s
}

/// What a crash leaves: the store's files as they are now (nothing is being committed:
/// the caller holds the writer).
fn crash_copy(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name != "LOCK" {
            std::fs::copy(e.path(), to.path().join(name)).unwrap();
        }
    }
    to
}

fn journal_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("journal-")
        })
        .count()
}

fn used_on_disk(dir: &Path) -> (i64, i64) {
    let c = Connection::open(dir.join("gateway.db")).unwrap();
    let used = c
        .query_row("SELECT quota_used FROM keys WHERE id = 'k'", [], |r| {
            r.get(0)
        })
        .unwrap();
    let rows = c
        .query_row("SELECT COUNT(*) FROM usage", [], |r| r.get(0))
        .unwrap();
    (used, rows)
}

/// A serving store with key `k` (a cap of 1,000) and three requests' holds on it, made
/// before any test holds the writer (the key is loaded by it).
async fn serving_with_three_holds(dir: &Path) -> (EmbeddedStore, Vec<Reservation>) {
    let s = serving(dir);
    s.create_key(&key_record("k", Some(1_000), None, Default::default()))
        .await
        .unwrap();
    let mut holds = Vec::new();
    for n in 0..3 {
        let id = format!("req-{n}");
        holds.push(
            s.reserve_ask("k", &id, &Ask::money_now(0, 400), 60)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    (s, holds)
}

/// What a new request may be granted on key `k` (asking for up to 1,000).
async fn left(s: &EmbeddedStore, rid: &str) -> Micros {
    s.reserve_ask("k", rid, &Ask::money_now(0, 1_000), 60)
        .await
        .unwrap()
        .unwrap()
        .amount
}

async fn settle_each(s: &EmbeddedStore, holds: &[Reservation]) {
    for r in holds {
        s.settle_logged(r, 100, &usage("k", &r.id, 3, 4, 100))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_answer_before_the_writer_applies_them_and_count_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (s, holds) = serving_with_three_holds(dir.path()).await;
    let held = s.writer.busy();
    tokio::time::timeout(Duration::from_secs(10), settle_each(&s, &holds))
        .await
        .expect("a settle does not wait for the writer");
    assert_eq!(used_on_disk(dir.path()), (0, 0), "not applied yet");
    // Memory has them: holds released, charges counted.
    assert_eq!(left(&s, "probe").await, 700);
    drop(held);
    // A read waits for what was journaled before it.
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 300);
    assert_eq!(s.recent_usage("k", 10).await.unwrap().len(), 3);
    assert_eq!(used_on_disk(dir.path()), (300, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_writer_applies_loses_nothing_and_counts_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (s, holds) = serving_with_three_holds(dir.path()).await;
    let held = s.writer.busy();
    settle_each(&s, &holds).await;
    // A settle of an id already settled writes nothing more.
    let again = Reservation {
        id: "req-0".into(),
        key_id: "k".into(),
        amount: 400,
    };
    s.settle(&again, 100).await.unwrap();
    let crashed = crash_copy(dir.path());
    let journal_then = crash_copy(dir.path());
    assert_eq!(used_on_disk(crashed.path()), (0, 0));
    drop(held);

    // The next server applies the journal before it serves, then deletes it.
    let next = serving(crashed.path());
    assert_eq!(used_on_disk(crashed.path()), (300, 3));
    assert_eq!(journal_files(crashed.path()), 1, "only the new, empty file");
    assert_eq!(left(&next, "p").await, 700, "memory read after the replay");
    drop(next);

    // The old journal found again beside a database that has applied it (a process that
    // was leaving applied it while its successor replayed): nothing counts twice.
    for e in std::fs::read_dir(journal_then.path()).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with("journal-") {
            std::fs::copy(e.path(), crashed.path().join(e.file_name())).unwrap();
        }
    }
    let last = serving(crashed.path());
    assert_eq!(used_on_disk(crashed.path()), (300, 3));
    assert_eq!(journal_files(crashed.path()), 1);
    drop(last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_read_again_while_settles_wait_count_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let (s, holds) = serving_with_three_holds(dir.path()).await;
    let held = s.writer.busy();
    settle_each(&s, &holds).await;
    // Another process (the CLI) renames the key meanwhile: the writer reads the accounts
    // in memory again, with the waiting settles applied first.
    let other = Connection::open(dir.path().join("gateway.db")).unwrap();
    other.busy_timeout(Duration::from_secs(5)).unwrap();
    other
        .execute("UPDATE keys SET name = 'renamed' WHERE id = 'k'", [])
        .unwrap();
    drop(held);
    s.sync().await.unwrap();
    assert_eq!(left(&s, "p").await, 700, "300 charged once");
    assert_eq!(s.get_key("k").await.unwrap().unwrap().name, "renamed");

    // A key forgotten (created anew) and loaded again while settles of it wait.
    let r = s
        .reserve_ask("k", "late", &Ask::money_now(0, 100), 60)
        .await
        .unwrap()
        .unwrap();
    let held = s.writer.busy();
    s.settle(&r, 50).await.unwrap();
    s.ledger.forget("k");
    drop(held);
    // `p` went with the account; 300 + 50 are charged.
    assert_eq!(left(&s, "p2").await, 650, "loaded with the waiting settle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_applies_the_journal_and_gives_the_directory_up() {
    let dir = tempfile::tempdir().unwrap();
    let (s, holds) = serving_with_three_holds(dir.path()).await;
    settle_each(&s, &holds).await;
    s.close().await.unwrap();
    assert_eq!(used_on_disk(dir.path()), (300, 3));
    // Still works, committing directly.
    let r = s
        .reserve_ask("k", "after", &Ask::money_now(0, 100), 60)
        .await
        .unwrap()
        .unwrap();
    s.settle(&r, 10).await.unwrap();
    assert_eq!(used_on_disk(dir.path()).0, 310);
    // The next server takes the directory while this one is still open.
    let next = serving(dir.path());
    assert_eq!(next.get_key("k").await.unwrap().unwrap().quota_used, 310);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_applies_what_the_server_has_not_yet_and_nothing_counts_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (s, holds) = serving_with_three_holds(dir.path()).await;
    let held = s.writer.busy();
    settle_each(&s, &holds).await;
    // The CLI, opened while the server's writer has applied nothing of them.
    let cli = EmbeddedStore::open(dir.path()).unwrap();
    cli.catch_up_with_journal().unwrap();
    assert_eq!(cli.get_key("k").await.unwrap().unwrap().quota_used, 300);
    assert_eq!(journal_files(dir.path()), 1, "the server's file stays");
    drop(held);
    // The server's writer finds them applied.
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 300);
    assert_eq!(used_on_disk(dir.path()), (300, 3));
    assert_eq!(left(&s, "p").await, 700);
}
