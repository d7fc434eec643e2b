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
        .reserve("k", "req-1", 100, 600, 10, 60)
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
        .reserve("k", "task_1", 300, 300, 10, 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows(dir.path()), 1, "a task's reservation is");
    // Both count against the cap: 1000 - 600 - 300 = 100 left.
    let last = s
        .reserve("k", "req-2", 1, 500, 10, 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last.amount, 100);
    assert_eq!(
        s.reserve("k", "req-3", 1, 1, 10, 60).await.unwrap(),
        Err(ReserveDenied::QuotaExhausted)
    );
    s.settle(&r, 250).await.unwrap();
    s.settle(&t, 0).await.unwrap();
    assert_eq!(rows(dir.path()), 0);
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 250);
    // 1000 - 250 used - 100 still held by req-2.
    let probe = s
        .reserve("k", "req-4", 0, 1_000, 10, 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(probe.amount, 650);
    // Expired reservations are released: at t = 70, req-2 and req-4 are gone.
    let later = s
        .reserve("k", "req-5", 0, 1_000, 70, 60)
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
        .reserve("k", "req-1", 0, 400, 10, 60)
        .await
        .unwrap()
        .unwrap();
    s.settle(&r, 100).await.unwrap();
    let probe = s
        .reserve("k", "p", 0, 1_000, 10, 60)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(probe.amount, 900, "400 released, 100 charged");
}
