use super::*;

fn key(id: &str, quota: Micros) -> KeyRecord {
    KeyRecord {
        id: id.into(),
        hash: format!("{:0>64}", 7),
        display: "sk-a…b".into(),
        name: "t".into(),
        status: KeyStatus::Enabled,
        created_at: 0,
        expires_at: None,
        models: vec![],
        allow_ips: vec![],
        rpm: None,
        quota_limit: Some(quota),
        quota_used: 0,
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
        .reserve("k", "req-1", 100, 600, 60)
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
        .reserve("k", "task_1", 300, 300, 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows(dir.path()), 1, "a task's reservation is");
    // Both count against the cap: 1000 - 600 - 300 = 100 left.
    let last = s.reserve("k", "req-2", 1, 500, 60).await.unwrap().unwrap();
    assert_eq!(last.amount, 100);
    assert_eq!(
        s.reserve("k", "req-3", 1, 1, 60).await.unwrap(),
        Err(ReserveDenied::QuotaExhausted)
    );
    s.settle(&r, 250).await.unwrap();
    s.settle(&t, 0).await.unwrap();
    assert_eq!(rows(dir.path()), 0);
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 250);
    // 1000 - 250 used - 100 still held by req-2.
    let probe = s
        .reserve("k", "req-4", 0, 1_000, 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(probe.amount, 650);
    // Expired reservations are released: 60 s on, req-2 and req-4 are gone.
    s.advance_clock(60);
    let later = s
        .reserve("k", "req-5", 0, 1_000, 60)
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
    let r = s.reserve("k", "req-1", 0, 400, 60).await.unwrap().unwrap();
    s.settle(&r, 100).await.unwrap();
    let probe = s.reserve("k", "p", 0, 1_000, 60).await.unwrap().unwrap();
    assert_eq!(probe.amount, 900, "400 released, 100 charged");
}

#[tokio::test]
async fn an_id_holds_once_and_settles_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let r = s.reserve("k", "req-1", 0, 400, 60).await.unwrap().unwrap();
    let again = s.reserve("k", "req-1", 0, 900, 60).await.unwrap().unwrap();
    assert_eq!(
        again, r,
        "a held id answers its grant again, holding nothing more"
    );
    s.settle(&r, 100).await.unwrap();
    s.settle(&r, 100).await.unwrap();
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 100);
    assert_eq!(
        s.reserve("k", "req-1", 0, 400, 60).await.unwrap(),
        Err(ReserveDenied::Released)
    );
    let tombstones = |dir: &Path| -> i64 {
        let c = Connection::open(dir.join("gateway.db")).unwrap();
        c.query_row("SELECT COUNT(*) FROM settled", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(tombstones(dir.path()), 1);
    // Tombstones older than the retention go with a later settle's pruning batch.
    s.advance_clock(SETTLED_KEEP_SECS + 1);
    for n in 0..PRUNE_EVERY {
        let id = format!("later-{n}");
        let r = s.reserve("k", &id, 0, 1, 60).await.unwrap().unwrap();
        s.settle(&r, 0).await.unwrap();
    }
    assert_eq!(tombstones(dir.path()), PRUNE_EVERY as i64);
}

#[tokio::test]
async fn extend_pushes_a_live_hold_and_revives_none() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.create_key(&key("k", 1_000)).await.unwrap();
    let held = s.reserve("k", "req-1", 0, 300, 10).await.unwrap().unwrap();
    let task = s.reserve("k", "task_1", 0, 300, 10).await.unwrap().unwrap();
    let lapsed = s.reserve("k", "req-2", 0, 300, 10).await.unwrap().unwrap();
    s.advance_clock(8);
    s.extend(&held, 10).await.unwrap();
    s.extend(&task, 10).await.unwrap();
    s.advance_clock(8); // 16 s in: req-2 expired, the two extended ones hold until 18
    s.extend(&lapsed, 10).await.unwrap();
    let probe = s
        .reserve("k", "probe-1", 0, 1_000, 10)
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
        .reserve("k", "probe-2", 0, 1_000, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        probe.amount, 1_000,
        "extended holds expire too once no one extends them"
    );
}
