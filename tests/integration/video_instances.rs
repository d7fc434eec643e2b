//! Video tasks across instances and restarts: two gateways on one Redis never poll one
//! task at once, and a task submitted before a restart completes and is charged once.

use crate::gateway::{StoreKind, TestGateway};
use crate::redis_server::RedisServer;
use crate::video::{
    check_completed, check_content, check_log, check_upstream_auth, config, status, submit,
    submit_raw, wait_completed, Client,
};
use crate::video_upstream::{self, Status, VideoUpstream};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------
// Two instances on one Redis never poll one task at once.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_never_poll_a_task_twice_at_once() {
    let delay = Duration::from_millis(100);
    let redis = RedisServer::start().await;
    let up = VideoUpstream::start_with_poll_delay(delay).await;
    let cfg = config(&up.base_url());
    let a = TestGateway::start(&cfg, StoreKind::Redis(redis.url())).await;
    let b = TestGateway::start(&cfg, StoreKind::Redis(redis.url())).await;
    let gws = [&a, &b];
    let (key, kid) = a.create_key(json!({"quota_usd": 10})).await;

    let mut tasks = Vec::new();
    let mut expected = Vec::new();
    for i in 0..6 {
        let gw = gws[i % 2];
        let prompt = format!("shared task {i}");
        let (client, body, model, cost) = match i % 3 {
            0 => (
                Client::Videos,
                json!({"model": "sora-2", "prompt": prompt, "seconds": "4"}),
                "sora-2",
                400_000,
            ),
            1 => (
                Client::A("text2video"),
                json!({"model": "kling-v1", "prompt": prompt, "duration": 5}),
                "kling-v1",
                250_000,
            ),
            _ => (
                Client::B,
                json!({"req_key": "jimeng-v30", "prompt": prompt, "duration": 5}),
                "jimeng-v30",
                100_000,
            ),
        };
        let id = submit(gw, &key, client, body).await;
        tasks.push((client, id, prompt));
        expected.push((model, cost));
    }
    // Clients keep asking both instances (a status request may refresh a stale task).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut done = vec![false; tasks.len()];
    let mut round = 0;
    while done.iter().any(|d| !d) {
        for (i, (client, id, _)) in tasks.iter().enumerate() {
            if done[i] {
                continue;
            }
            let rec = status(gws[(i + round) % 2], &key, *client, id).await;
            assert_ne!(rec["status"], "failed", "{rec}");
            if rec["status"] == "completed" {
                check_completed(*client, id, &rec);
                done[i] = true;
            }
        }
        round += 1;
        assert!(
            Instant::now() < deadline,
            "tasks did not complete: {done:?}; polls {:?}",
            up.polls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both instances show every task completed.
    for (client, id, _) in &tasks {
        for gw in gws {
            assert_eq!(status(gw, &key, *client, id).await["status"], "completed");
        }
    }

    let mut by_task: BTreeMap<String, Vec<video_upstream::Poll>> = BTreeMap::new();
    for p in up.polls() {
        by_task.entry(p.task.clone()).or_default().push(p);
    }
    assert_eq!(by_task.len(), tasks.len(), "every task was polled");
    for (task, polls) in &by_task {
        for w in polls.windows(2) {
            let gap = w[1].at.duration_since(w[0].at);
            assert!(
                gap >= delay,
                "task {task}: a poll started {gap:?} after the previous one, which took {delay:?} to answer (double polling): {polls:?}"
            );
        }
        let first_done = polls
            .iter()
            .position(|p| p.status == Status::Completed)
            .unwrap_or_else(|| panic!("task {task} never completed upstream: {polls:?}"));
        assert_eq!(
            first_done,
            polls.len() - 1,
            "task {task} polled after it completed: {polls:?}"
        );
    }
    let total: i64 = expected.iter().map(|(_, c)| c).sum();
    assert_eq!(a.used_micros(&kid).await, total, "each task charged once");
    assert_eq!(b.used_micros(&kid).await, total);
    check_log(&a, &key, &expected).await;
    check_upstream_auth(&up, &key);
}

// ---------------------------------------------------------------------------------
// A restart in the middle of a task.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_survives_a_restart_and_is_charged_once() {
    let up = VideoUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::EmbeddedAt(dir.path().join("data"));
    let cfg = config(&up.base_url());

    let gw = TestGateway::start(&cfg, store.clone()).await;
    // Room for the task (0.40) and 0.30 more.
    let (key, kid) = gw.create_key(json!({"quota_usd": 0.7})).await;
    let id = submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "gated restart", "seconds": "4"}),
    )
    .await;
    // Wait until the upstream reports it in progress, and the gateway shows it.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rec = status(&gw, &key, Client::Videos, &id).await;
        assert!(
            rec["status"] == "queued" || rec["status"] == "in_progress",
            "{rec}"
        );
        if rec["status"] == "in_progress" {
            break;
        }
        assert!(Instant::now() < deadline, "never in progress: {rec}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(gw.used_micros(&kid).await, 0, "nothing settled while open");
    gw.running.shutdown();
    drop(gw);

    let gw = TestGateway::start(&cfg, store.clone()).await;
    // The open task's reservation survived the restart: 0.40 more does not fit.
    let (s, text) = submit_raw(
        &gw,
        &key,
        Client::Videos,
        &json!({"model": "sora-2", "prompt": "does not fit", "seconds": "4"}),
    )
    .await;
    assert_eq!(
        s, 403,
        "the reservation is still held after a restart: {text}"
    );
    up.release();
    let rec = wait_completed(&gw, &key, Client::Videos, &id).await;
    assert_eq!(rec["model"], "sora-2");
    check_content(&gw, &key, Client::Videos, &id, &rec).await;
    assert_eq!(gw.used_micros(&kid).await, 400_000, "charged exactly once");
    check_log(&gw, &key, &[("sora-2", 400_000)]).await;
    // The reservation became the charge (not both): 0.30 fits, 0.40 does not.
    let (s, text) = submit_raw(
        &gw,
        &key,
        Client::Videos,
        &json!({"model": "sora-2", "prompt": "still does not fit", "seconds": "4"}),
    )
    .await;
    assert_eq!(s, 403, "{text}");
    // 0.25 (Kling, 5 s) fits.
    submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "kling-v1", "prompt": "fits forever", "seconds": "5"}),
    )
    .await;
    drop(gw);

    let gw = TestGateway::start(&cfg, store).await;
    let rec = status(&gw, &key, Client::Videos, &id).await;
    assert_eq!(rec["status"], "completed", "{rec}");
    assert_eq!(gw.used_micros(&kid).await, 400_000);
    check_log(&gw, &key, &[("sora-2", 400_000)]).await;
    assert_eq!(up.submits().len(), 2);
    let polls = up.polls();
    assert_eq!(
        polls
            .iter()
            .filter(|p| p.status == Status::Completed)
            .count(),
        1,
        "polled to completion once: {polls:?}"
    );
}
