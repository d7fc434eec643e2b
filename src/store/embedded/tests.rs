use super::*;
use crate::store::SETTLED_KEEP_SECS;
use std::time::Duration;

fn key(id: &str, quota: Micros) -> KeyRecord {
    key_record(id, Some(quota), None, Default::default())
}

/// An enabled key with this cap, group and policy (the policy tests' too).
pub(super) fn key_record(
    id: &str,
    quota: Option<Micros>,
    group: Option<&str>,
    policy: crate::store::Policy,
) -> KeyRecord {
    KeyRecord {
        group: group.map(Into::into),
        policy,
        ..KeyRecord::for_tests(id, format!("{:0>64}", 7), quota)
    }
}

fn rows(dir: &Path) -> i64 {
    let c = Connection::open(dir.join("gateway.db")).unwrap();
    c.query_row("SELECT COUNT(*) FROM reservations", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn request_reservations_stay_in_memory_and_task_reservations_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let r = s
        .reserve_ask("k", "req-1", &Ask::money_now(100, 600), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.amount, 600);
    assert_eq!(
        rows(dir.path()),
        0,
        "a request's reservation is not written"
    );
    let t = s
        .reserve_ask("k", "task_1", &Ask::money_now(300, 300), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows(dir.path()), 1, "a task's reservation is");
    // Both count against the cap: 1000 - 600 - 300 = 100 left.
    let last = s
        .reserve_ask("k", "req-2", &Ask::money_now(1, 500), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last.amount, 100);
    assert_eq!(
        s.reserve_ask("k", "req-3", &Ask::money_now(1, 1), 60)
            .await
            .unwrap(),
        Err(ReserveDenied::QuotaExhausted)
    );
    s.settle(&r, 250).await.unwrap();
    s.settle(&t, 0).await.unwrap();
    assert_eq!(rows(dir.path()), 0);
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 250);
    // 1000 - 250 used - 100 still held by req-2.
    let probe = s
        .reserve_ask("k", "req-4", &Ask::money_now(0, 1_000), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(probe.amount, 650);
    // Expired reservations are released: 60 s on, req-2 and req-4 are gone.
    s.advance_clock(60);
    let later = s
        .reserve_ask("k", "req-5", &Ask::money_now(0, 1_000), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(later.amount, 750);
}

#[tokio::test]
async fn settle_releases_the_held_amount_and_charges_the_actual() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let r = s
        .reserve_ask("k", "req-1", &Ask::money_now(0, 400), 60)
        .await
        .unwrap()
        .unwrap();
    s.settle(&r, 100).await.unwrap();
    let probe = s
        .reserve_ask("k", "p", &Ask::money_now(0, 1_000), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(probe.amount, 900, "400 released, 100 charged");
}

#[tokio::test]
async fn an_id_holds_once_and_settles_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let r = s
        .reserve_ask("k", "req-1", &Ask::money_now(0, 400), 60)
        .await
        .unwrap()
        .unwrap();
    let again = s
        .reserve_ask("k", "req-1", &Ask::money_now(0, 900), 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again, r,
        "a held id answers its grant again, holding nothing more"
    );
    s.settle(&r, 100).await.unwrap();
    s.settle(&r, 100).await.unwrap();
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 100);
    assert_eq!(
        s.reserve_ask("k", "req-1", &Ask::money_now(0, 400), 60)
            .await
            .unwrap(),
        Err(ReserveDenied::Released)
    );
    let tombstones = |dir: &Path| -> i64 {
        let c = Connection::open(dir.join("gateway.db")).unwrap();
        c.query_row("SELECT COUNT(*) FROM settled", [], |r| r.get(0))
            .unwrap()
    };
    // A request's id is settled once in memory: it leaves no row.
    assert_eq!(tombstones(dir.path()), 0);
    // A task's id leaves one, and a second settle of it charges nothing.
    let task = s
        .reserve_ask("k", "task_1", &Ask::money_now(0, 300), 60)
        .await
        .unwrap()
        .unwrap();
    s.settle(&task, 200).await.unwrap();
    s.settle(&task, 200).await.unwrap();
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 300);
    assert_eq!(tombstones(dir.path()), 1);
    // Tombstones older than the retention go with a later settle's pruning batch.
    s.advance_clock(SETTLED_KEEP_SECS + 1);
    for n in 0..PRUNE_EVERY {
        let id = format!("later-{n}");
        let r = s
            .reserve_ask("k", &id, &Ask::money_now(0, 1), 60)
            .await
            .unwrap()
            .unwrap();
        s.settle(&r, 0).await.unwrap();
    }
    assert_eq!(tombstones(dir.path()), 0);
}

#[tokio::test]
async fn extend_pushes_a_live_hold_and_revives_none() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let held = s
        .reserve_ask("k", "req-1", &Ask::money_now(0, 300), 10)
        .await
        .unwrap()
        .unwrap();
    let task = s
        .reserve_ask("k", "task_1", &Ask::money_now(0, 300), 10)
        .await
        .unwrap()
        .unwrap();
    let lapsed = s
        .reserve_ask("k", "req-2", &Ask::money_now(0, 300), 10)
        .await
        .unwrap()
        .unwrap();
    s.advance_clock(8);
    s.extend(&held, 10).await.unwrap();
    s.extend(&task, 10).await.unwrap();
    s.advance_clock(8); // 16 s in: req-2 expired, the two extended ones hold until 18
    s.extend(&lapsed, 10).await.unwrap();
    let probe = s
        .reserve_ask("k", "probe-1", &Ask::money_now(0, 1_000), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        probe.amount, 400,
        "1000 - 300 - 300: the lapsed hold stays released"
    );
    s.settle(&probe, 0).await.unwrap();
    s.advance_clock(3);
    let probe = s
        .reserve_ask("k", "probe-2", &Ask::money_now(0, 1_000), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        probe.amount, 1_000,
        "extended holds expire too once no one extends them"
    );
}

#[tokio::test]
async fn key_lookups_and_reserves_never_reach_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let (jobs, _) = s.writer_counts();
    for n in 0..50 {
        assert_eq!(s.get_key(&format!("unknown-{n}")).await.unwrap(), None);
    }
    assert!(s.get_key("k").await.unwrap().is_some());
    assert_eq!(
        s.writer_counts().0,
        jobs,
        "lookups ran on the read connections"
    );
    // The first reserve of a key loads its account on the writer, once; the others and
    // their extends are decided in memory.
    let first = s
        .reserve_ask("k", "req-0", &Ask::money_now(0, 10), 60)
        .await
        .unwrap()
        .unwrap();
    let loaded = s.writer_counts().0;
    assert_eq!(loaded, jobs + 1);
    for n in 1..20 {
        let r = s
            .reserve_ask("k", &format!("req-{n}"), &Ask::money_now(0, 10), 60)
            .await
            .unwrap()
            .unwrap();
        s.extend(&r, 120).await.unwrap();
    }
    assert_eq!(s.writer_counts().0, loaded);
    // Settling is a write: committed before it answers.
    s.settle(&first, 7).await.unwrap();
    assert_eq!(s.writer_counts().0, loaded + 1);
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 7);
}

/// Settles that arrive while a group is being committed all wait for the writer thread,
/// which carries them in one commit (or two: the first may be taken before the others
/// arrive).
#[tokio::test]
async fn concurrent_settles_share_commits() {
    use std::future::Future;
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000_000)).await.unwrap();
    let mut held = Vec::new();
    for n in 0..64 {
        held.push(
            s.reserve_ask("k", &format!("req-{n}"), &Ask::money_now(0, 10), 60)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let (jobs, commits) = s.writer_counts();
    let busy = s.writer.busy();
    let mut settles: Vec<_> = held.iter().map(|r| Box::pin(s.settle(r, 3))).collect();
    for f in settles.iter_mut() {
        let waiting =
            std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx).is_pending()))
                .await;
        assert!(waiting, "a settle committed while the connection was busy");
    }
    drop(busy);
    for f in settles {
        f.await.unwrap();
    }
    let (jobs2, commits2) = s.writer_counts();
    assert_eq!(jobs2 - jobs, 64);
    assert!(
        commits2 - commits <= 2,
        "{} commits for 64 settles",
        commits2 - commits
    );
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 192);
}

/// A write that arrives alone commits on its caller's thread; one that arrives while a
/// group is being committed waits for the writer thread, which takes it into the next.
#[tokio::test]
async fn a_lone_write_commits_on_its_own_thread_and_one_behind_a_group_queues() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let here = std::thread::current().id();
    let on = |_: &Connection| Ok(std::thread::current());
    let ran = s.write_plain(on, |_, _| {}).await.unwrap();
    assert_eq!(ran.id(), here);
    let (_, commits) = s.writer_counts();
    let busy = s.writer.busy();
    let mut write = Box::pin(s.write_plain(on, |_, _| {}));
    let waiting = std::future::poll_fn(|cx| {
        use std::future::Future;
        std::task::Poll::Ready(write.as_mut().poll(cx).is_pending())
    })
    .await;
    assert!(waiting, "committed while the connection was busy");
    assert_eq!(s.writer_counts().1, commits);
    drop(busy);
    let ran = write.await.unwrap();
    assert_eq!(ran.name(), Some("embedded-store"));
    assert_eq!(s.writer_counts().1, commits + 1);
}

/// While another process holds the write lock (the CLI changing a key), a request's
/// write does not wait for it on the request's thread: it queues, and the writer thread
/// waits and commits it once the lock is free.
#[tokio::test]
async fn a_write_behind_another_process_s_lock_waits_on_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let cli = Connection::open(dir.path().join("gateway.db")).unwrap();
    cli.execute_batch("BEGIN IMMEDIATE").unwrap();
    let on = |_: &Connection| Ok(std::thread::current());
    let mut write = Box::pin(s.write_plain(on, |_, _| {}));
    let waiting = std::future::poll_fn(|cx| {
        use std::future::Future;
        std::task::Poll::Ready(write.as_mut().poll(cx).is_pending())
    })
    .await;
    assert!(waiting, "the write finished on the request's thread");
    cli.execute_batch("COMMIT").unwrap();
    let ran = write.await.unwrap();
    assert_eq!(ran.name(), Some("embedded-store"));
}

/// Another process (the CLI) disables a key and lowers its cap: the accounts the server
/// holds in memory follow within the writer's idle check.
#[tokio::test]
async fn another_process_s_changes_reach_the_reserves() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let r = s
        .reserve_ask("k", "req-1", &Ask::money_now(0, 100), 60)
        .await
        .unwrap()
        .unwrap();
    s.settle(&r, 100).await.unwrap();
    let other = Connection::open(dir.path().join("gateway.db")).unwrap();
    other
        .execute("UPDATE keys SET quota_limit = 300 WHERE id = 'k'", [])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let probe = s
            .reserve_ask(
                "k",
                &crate::ids::request_id(),
                &Ask::money_now(0, 1_000),
                60,
            )
            .await
            .unwrap()
            .unwrap();
        s.settle(&probe, 0).await.unwrap();
        if probe.amount == 200 {
            break;
        }
        assert_eq!(probe.amount, 900, "either the old cap or the new one");
        assert!(
            std::time::Instant::now() < deadline,
            "the new cap never applied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other
        .execute("UPDATE keys SET status = 'disabled' WHERE id = 'k'", [])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s
        .reserve_ask("k", &crate::ids::request_id(), &Ask::money_now(0, 1), 60)
        .await
        .unwrap()
        != Err(ReserveDenied::Disabled)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the key was never disabled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 100);
}

/// A request's write that fails undoes its whole group: nothing half-done is committed.
#[tokio::test]
async fn a_failed_plain_write_undoes_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let failed = s
        .write_plain(
            |c| {
                exec(
                    c,
                    "INSERT INTO usage (key_id, record) VALUES ('k', '{}')",
                    [],
                )
                .map_err(internal)?;
                Err::<(), _>(StoreError::internal("disk full"))
            },
            |_, _| {},
        )
        .await;
    assert_eq!(failed, Err(StoreError::internal("disk full")));
    s.append_usage(&UsageRecord {
        request_id: "r".into(),
        time_ms: 1,
        key_id: "k".into(),
        endpoint: "/v1/chat/completions".into(),
        model: "m".into(),
        channel: "c".into(),
        prompt_tokens: 1,
        completion_tokens: 1,
        cached_tokens: 0,
        cost: 1,
        estimated: false,
        overrun: 0,
        provider_cost: None,
        bill: Default::default(),
        multiplier_ppm: None,
        status: 200,
        latency_ms: 1,
        stream: false,
        group: None,
    })
    .await
    .unwrap();
    assert_eq!(s.recent_usage("k", 10).await.unwrap().len(), 1);
}

/// Under steady writes, a checkpoint still lets the write-ahead log start again from its
/// beginning: the log holds about what arrived since the last checkpoint, not every
/// commit since the store opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_starts_again_under_steady_writes() {
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    // The only checkpoints are the test's own: another connection in the log at the
    // first write after a checkpoint would put the new start off to the next one.
    let s = Arc::new(EmbeddedStore::open_with(dir.path(), false).unwrap());
    let conn = Connection::open(dir.path().join("gateway.db")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Commits that never pause, each a page or two of usage record.
    let writes = tokio::spawn({
        let (s, stop) = (s.clone(), stop.clone());
        async move {
            let text = "x".repeat(3_000);
            while !stop.load(Ordering::Relaxed) {
                let t = text.clone();
                s.write_plain(
                    move |c| {
                        exec(
                            c,
                            "INSERT INTO usage (key_id, record) VALUES ('k', ?1)",
                            [t],
                        )
                        .map_err(internal)
                    },
                    |_, _| {},
                )
                .await
                .unwrap();
            }
        }
    });
    // Past this many frames a checkpoint pauses the writer for its last pass (the store's
    // own checkpoints wait for more; 800 commits write more than this).
    const RESTART: i64 = 1_024;
    // Each checkpoint's log in frames, and the commits made since the one before: a round
    // may run long on a busy machine (this loop is slow to see the count), so the log is
    // measured per commit of its round.
    let mut logs = Vec::new();
    let mut since = s.writer_counts().1;
    for _ in 0..6 {
        while s.writer_counts().1 < since + 800 {
            assert!(!writes.is_finished(), "the writes stopped");
            tokio::task::yield_now().await;
        }
        let (log, copied) = writer::checkpoint(&conn, &s.writer, RESTART).unwrap();
        assert_eq!(copied, log, "a checkpoint copied the whole log");
        let now = s.writer_counts().1;
        // -1: this checkpoint could not run (SQLite's answer while the log is being
        // started again); its round's commits stay in the log for the next one.
        if log >= 0 {
            logs.push((log, now - since));
            since = now;
        }
    }
    assert!(logs.len() >= 3, "most checkpoints ran: {logs:?}");
    stop.store(true, Ordering::Relaxed);
    writes.await.unwrap();
    // Each checkpoint finds about its own round of commits in the log (a few frames
    // each), not all of them since the start: a log that never started again would hold
    // 1, 2, … 6 rounds' frames per round's commits.
    // One checkpoint may land just after the writer started the log again and find only
    // part of its round there: the comparison is with the second smallest, so one low
    // round is not taken for growth, while a growing log (1, 2, … 6 rounds' frames)
    // still fails it.
    let mut per_commit: Vec<f64> = logs.iter().map(|&(l, n)| l as f64 / n as f64).collect();
    per_commit.sort_by(f64::total_cmp);
    let low = per_commit[1];
    assert!(
        per_commit.iter().all(|&p| p < 2.0 * low),
        "the log kept growing: {logs:?} (frames, commits)"
    );
    let largest = logs.iter().map(|&(l, _)| l).max().unwrap_or(0).max(RESTART);
    let size = std::fs::metadata(dir.path().join("gateway.db-wal"))
        .unwrap()
        .len();
    assert!(
        (size as i64) < 2 * largest * 4_200,
        "the log file is {size} bytes after checkpoints of {logs:?} (frames, commits)"
    );
}
