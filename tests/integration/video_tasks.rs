//! Video tasks through the gateway (spec 2.3, 2.4, 3, 4.8–4.16, 7): each client shape on
//! its own vendor and across vendors, unknown and foreign ids, failures and timeouts
//! refunded, and reservations a key cannot pay refused before the upstream sees anything.

use crate::gateway::{error_of, StoreKind, TestGateway};
use crate::redis_server::RedisServer;
use crate::video::{
    check_content, check_log, check_upstream_auth, config, config_with, download, png, status,
    status_raw, submit, submit_raw, wait_completed, wait_end, Client,
};
use crate::video_upstream::{
    self, b64_encode, form_file, form_text, image_bytes, Status, VideoUpstream, API_KEY,
};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------
// 1. Each client shape against its own vendor.

async fn each_shape_on_its_own_upstream(store: StoreKind) {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), store).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;

    // /v1/videos -> OpenAI-style upstream, model renamed.
    let id = submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "a cat surfing", "seconds": "4", "size": "1280x720"}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::Videos, &id).await;
    assert_eq!(rec["model"], "sora-2", "{rec}");
    assert_eq!(rec["seconds"], "4", "{rec}");
    assert_eq!(rec["size"], "1280x720", "{rec}");
    check_content(&gw, &key, Client::Videos, &id, &rec).await;
    let t = up.task_with_prompt("a cat surfing");
    assert_eq!(
        t.model, "sora-2-2025",
        "the mapped model reached the upstream"
    );
    assert_eq!((t.seconds, t.size.as_str()), (4.0, "1280x720"));
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path == "/v1/videos")
        .unwrap();
    if video_upstream::multipart(&sub).is_some() {
        assert_eq!(form_text(&sub, "seconds").as_deref(), Some("4"));
    }
    assert_eq!(gw.used_micros(&kid).await, 400_000, "0.10 USD x 4 s");

    // /video-a text2video -> Kling (which reports no frame rate, size or seed).
    let id = submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "kling-v1", "prompt": "a dog running", "duration": 5, "width": 1280,
               "height": 720, "fps": 24, "seed": 7, "n": 1,
               "metadata": {"negative_prompt": "blurry"}}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::A("text2video"), &id).await;
    let m = &rec["metadata"];
    assert_eq!(m["duration"].as_f64(), Some(5.042), "{rec}");
    check_content(&gw, &key, Client::A("text2video"), &id, &rec).await;
    let t = up.task_with_prompt("a dog running");
    assert_eq!(
        (t.kind.as_str(), t.model.as_str(), t.size.as_str()),
        ("text2video", "kling-v1-6", "16:9")
    );
    assert_eq!(t.seconds, 5.0);
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 250_000);

    // /video-a image2video with an image URL, no duration (default 5 s).
    let id = submit(
        &gw,
        &key,
        Client::A("image2video"),
        json!({"model": "kling-v1", "prompt": "make it move", "image": "https://img.example/in.png"}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::A("image2video"), &id).await;
    check_content(&gw, &key, Client::A("image2video"), &id, &rec).await;
    let t = up.task_with_prompt("make it move");
    assert_eq!(t.kind, "image2video");
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path == "/v1/videos/image2video")
        .unwrap();
    assert_eq!(sub.json()["image"], "https://img.example/in.png");
    assert!(
        sub.json().get("aspect_ratio").is_none(),
        "the image keeps its own"
    );
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 2 * 250_000);

    // video-b -> Jimeng, with a Base64 image.
    let img = b64_encode(&png());
    let id = submit(
        &gw,
        &key,
        Client::B,
        json!({"req_key": "jimeng-v30", "prompt": "a red kite", "binary_data_base64": [img], "duration": 5}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::B, &id).await;
    check_content(&gw, &key, Client::B, &id, &rec).await;
    let t = up.task_with_prompt("a red kite");
    assert_eq!(t.model, "jimeng_t2v_v30", "the channel's req_key");
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path.contains("CVSync2AsyncSubmitTask"))
        .unwrap();
    let sent = sub.json()["binary_data_base64"][0]
        .as_str()
        .map(|s| image_bytes(s).unwrap());
    assert_eq!(sent, Some(png()), "the image reached Jimeng");
    assert_eq!(sub.json()["frames"], 121, "5 s as Jimeng counts it");
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 2 * 250_000 + 100_000);

    // /v1/video/generations (no image: text-to-video) on kling-v1 -> Kling.
    let id = submit(
        &gw,
        &key,
        Client::Generations,
        json!({"model": "kling-v1", "prompt": "waves at dusk", "duration": 10}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::Generations, &id).await;
    assert_eq!(rec["metadata"]["duration"].as_f64(), Some(10.042), "{rec}");
    check_content(&gw, &key, Client::Generations, &id, &rec).await;
    assert_eq!(up.task_with_prompt("waves at dusk").kind, "text2video");
    let total = 400_000 + 2 * 250_000 + 100_000 + 500_000;
    assert_eq!(gw.used_micros(&kid).await, total);

    check_log(
        &gw,
        &key,
        &[
            ("sora-2", 400_000),
            ("kling-v1", 250_000),
            ("kling-v1", 250_000),
            ("jimeng-v30", 100_000),
            ("kling-v1", 500_000),
        ],
    )
    .await;
    assert_eq!(up.submits().len(), 5, "one upstream task per request");
    check_upstream_auth(&up, &key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_shape_on_its_own_upstream_shape_embedded() {
    each_shape_on_its_own_upstream(StoreKind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_shape_on_its_own_upstream_shape_redis() {
    let redis = RedisServer::start().await;
    each_shape_on_its_own_upstream(StoreKind::Redis(redis.url())).await;
}

// ---------------------------------------------------------------------------------
// 2. Any client shape on any vendor.

async fn cross_shapes(store: StoreKind) {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), store).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;
    let image = png();

    // /v1/video/generations with a Base64 image -> OpenAI-style upstream: a file part.
    let id = submit(
        &gw,
        &key,
        Client::Generations,
        json!({"model": "sora-2", "prompt": "gen to openai",
               "image": format!("data:image/png;base64,{}", b64_encode(&image)), "duration": 4}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::Generations, &id).await;
    check_content(&gw, &key, Client::Generations, &id, &rec).await;
    let t = up.task_with_prompt("gen to openai");
    assert_eq!((t.model.as_str(), t.seconds), ("sora-2-2025", 4.0));
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path == "/v1/videos")
        .unwrap();
    let file = form_file(&sub, "input_reference").unwrap_or_else(|| {
        panic!(
            "a multipart input_reference file; got {:?} {}",
            sub.header("content-type"),
            String::from_utf8_lossy(&sub.body)
        )
    });
    assert!(
        file.data == image,
        "the decoded image bytes reached the upstream"
    );
    assert_eq!(gw.used_micros(&kid).await, 400_000);

    // /v1/videos with an input_reference file -> Kling image2video: bare Base64.
    let id = submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "kling-v1", "prompt": "videos to a", "seconds": "5",
               "input_reference": b64_encode(&image)}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::Videos, &id).await;
    assert_eq!(rec["model"], "kling-v1", "{rec}");
    assert_eq!(rec["seconds"], "5", "{rec}");
    check_content(&gw, &key, Client::Videos, &id, &rec).await;
    let t = up.task_with_prompt("videos to a");
    assert_eq!((t.kind.as_str(), t.seconds), ("image2video", 5.0));
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path == "/v1/videos/image2video")
        .unwrap();
    let sent = sub.json()["image"]
        .as_str()
        .map(|s| image_bytes(s).unwrap());
    assert_eq!(
        sent,
        Some(image.clone()),
        "the file reached Kling as Base64"
    );
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 250_000);

    // video-b client (no duration, no req_key on the result call) -> Kling.
    let id = submit(
        &gw,
        &key,
        Client::B,
        json!({"req_key": "kling-v1", "prompt": "b to a"}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::B, &id).await;
    check_content(&gw, &key, Client::B, &id, &rec).await;
    let t = up.task_with_prompt("b to a");
    assert_eq!((t.kind.as_str(), t.seconds), ("text2video", 5.0));
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 2 * 250_000);

    // video-a client -> Jimeng (downloads go through the vendor's file URL).
    let id = submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "jimeng-v30", "prompt": "a to b", "duration": 5}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::A("text2video"), &id).await;
    check_content(&gw, &key, Client::A("text2video"), &id, &rec).await;
    assert_eq!(up.task_with_prompt("a to b").model, "jimeng_t2v_v30");

    // /v1/videos -> Jimeng: content through /v1/videos/{id}/content.
    let id = submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "jimeng-v30", "prompt": "videos to b", "seconds": "5"}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::Videos, &id).await;
    check_content(&gw, &key, Client::Videos, &id, &rec).await;
    let total = 400_000 + 2 * 250_000 + 2 * 100_000;
    assert_eq!(gw.used_micros(&kid).await, total);

    // An image URL cannot become the file the OpenAI videos API needs.
    let n = up.submits().len();
    let (s, text) = submit_raw(
        &gw,
        &key,
        Client::Generations,
        &json!({"model": "sora-2", "prompt": "url to openai", "image": "https://img.example/in.png"}),
    )
    .await;
    assert_eq!(s, 400, "{text}");
    assert_eq!(error_of(&text)["param"], "image");
    assert_eq!(up.submits().len(), n, "the upstream saw nothing");
    assert_eq!(gw.used_micros(&kid).await, total);
    check_upstream_auth(&up, &key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_client_shape_on_any_upstream_shape_embedded() {
    cross_shapes(StoreKind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_client_shape_on_any_upstream_shape_redis() {
    let redis = RedisServer::start().await;
    cross_shapes(StoreKind::Redis(redis.url())).await;
}

// ---------------------------------------------------------------------------------
// 3. Unknown ids and other keys' tasks.

const ALL_STATUS: [Client; 5] = [
    Client::Videos,
    Client::A("text2video"),
    Client::A("image2video"),
    Client::B,
    Client::Generations,
];

async fn check_not_found(gw: &TestGateway, key: &str, id: &str, what: &str) {
    for client in ALL_STATUS {
        let (s, text) = status_raw(gw, key, client, id).await;
        assert_eq!(s, 404, "{what}: {client:?} status of {id}: {text}");
        assert_eq!(
            error_of(&text)["code"],
            "task_not_found",
            "{what}: {client:?}: {text}"
        );
    }
    let (s, _, body) = download(gw, key, &gw.url(&format!("/v1/videos/{id}/content"))).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(s, 404, "{what}: content of {id}: {text}");
    assert_eq!(
        error_of(&text)["code"],
        "task_not_found",
        "{what}: content: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_and_other_keys_tasks_are_not_found() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (owner, _) = gw.create_key(json!({"quota_usd": 10})).await;
    let (other, _) = gw.create_key(json!({"quota_usd": 10})).await;

    for id in [
        "task_00000000000000000000000000000000",
        "task_unknown",
        "video_1",
        "a_1",
    ] {
        check_not_found(&gw, &owner, id, "unknown id").await;
    }

    // One finished and one open task of the owner, each through a different shape.
    let done = submit(
        &gw,
        &owner,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "owned", "seconds": "4"}),
    )
    .await;
    let rec = wait_completed(&gw, &owner, Client::Videos, &done).await;
    check_content(&gw, &owner, Client::Videos, &done, &rec).await;
    let open = submit(
        &gw,
        &owner,
        Client::A("text2video"),
        json!({"model": "kling-v1", "prompt": "owned forever", "duration": 5}),
    )
    .await;
    for id in [&done, &open] {
        check_not_found(&gw, &other, id, "another key's task").await;
    }
    // The owner sees it.
    status(&gw, &owner, Client::A("text2video"), &open).await;
    // The upstream's own ids are not gateway ids.
    let upstream_id = up.task_with_prompt("owned").id;
    check_not_found(&gw, &owner, &upstream_id, "an upstream id").await;
}

/// `GET /v1/videos/{id}/content` of the caller's own task that has no video (still open,
/// or failed): 404 with the default envelope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_not_found_until_the_task_completes() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"quota_usd": 10})).await;
    let open = submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "open forever", "seconds": "4"}),
    )
    .await;
    let open_a = submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "kling-v1", "prompt": "open forever a"}),
    )
    .await;
    let failed = submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "please fail", "seconds": "4"}),
    )
    .await;
    assert_eq!(
        wait_end(&gw, &key, Client::Videos, &failed).await["status"],
        "failed"
    );
    for (id, what) in [
        (&open, "an open task"),
        (&open_a, "an open video-a task"),
        (&failed, "a failed task"),
    ] {
        let (s, _, body) = download(&gw, &key, &gw.url(&format!("/v1/videos/{id}/content"))).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(s, 404, "content of {what}: {text}");
        error_of(&text);
    }
}

// ---------------------------------------------------------------------------------
// 4. Failures refund everything (each vendor's own failure shapes).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_tasks_are_refunded_and_sanitized() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    // Exactly one sora-2 task of 4 s: every submission below is admitted only if the
    // failed tasks before it gave their reservations back.
    let (key, kid) = gw.create_key(json!({"quota_usd": 0.4})).await;
    let cases = [
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "please fail openai", "seconds": "4"}),
        ),
        (
            Client::A("text2video"),
            json!({"model": "kling-v1", "prompt": "please fail a", "duration": 5}),
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "please fail b"}),
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "please quiet fail b"}),
        ),
        (
            Client::Generations,
            json!({"model": "sora-2", "prompt": "please fail generations", "duration": 4}),
        ),
    ];
    for (client, body) in cases {
        let id = submit(&gw, &key, client, body.clone()).await;
        let rec = wait_end(&gw, &key, client, &id).await;
        assert_eq!(rec["status"], "failed", "{client:?} {body}: {rec}");
        let msg = rec["error"]["message"].as_str().unwrap();
        assert!(!msg.is_empty(), "{rec}");
        let text = rec.to_string();
        for secret in ["gpu-node-7", "internal-host-9", API_KEY, "sora-2-2025"] {
            assert!(
                !text.contains(secret),
                "upstream detail {secret} leaked: {text}"
            );
        }
        if client != Client::Videos {
            assert!(rec.get("url").is_none_or(Value::is_null), "{rec}");
        }
        assert_eq!(gw.used_micros(&kid).await, 0, "{client:?}: refunded");
    }
    // The whole quota is free again.
    submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "after failures forever", "seconds": "4"}),
    )
    .await;
    check_log(&gw, &key, &[]).await;
    check_upstream_auth(&up, &key);
}

// ---------------------------------------------------------------------------------
// 5. Timeouts refund everything.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_past_the_timeout_fail_and_are_refunded() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config_with(&up.base_url(), 1), StoreKind::Embedded).await;
    // Exactly the two tasks below.
    let (key, kid) = gw.create_key(json!({"quota_usd": 0.65})).await;
    let v = submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "render forever", "seconds": "4"}),
    )
    .await;
    let a = submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "kling-v1", "prompt": "render forever too", "duration": 5}),
    )
    .await;
    let (s, text) = submit_raw(
        &gw,
        &key,
        Client::B,
        &json!({"req_key": "jimeng-v30", "prompt": "one more", "duration": 5}),
    )
    .await;
    assert_eq!(s, 403, "both open tasks hold their reservations: {text}");
    let rec = wait_end(&gw, &key, Client::Videos, &v).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rec["error"]["code"], "task_timeout", "{rec}");
    let rec = wait_end(&gw, &key, Client::A("text2video"), &a).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(rec["error"]["code"].is_i64(), "{rec}");
    assert_eq!(gw.used_micros(&kid).await, 0);
    // Both reservations were given back: the same two tasks are admitted again.
    submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "again forever", "seconds": "4"}),
    )
    .await;
    submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "kling-v1", "prompt": "again forever too", "duration": 5}),
    )
    .await;
    let polls = up.polls();
    assert!(
        polls.iter().all(|p| p.status != Status::Completed),
        "forever tasks never complete upstream"
    );
}

// ---------------------------------------------------------------------------------
// 6. Quota.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_cannot_pay_the_reservation_gets_403_and_the_upstream_sees_nothing() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 0.3})).await;
    let refused = [
        // 0.10 x 4 s = 0.40
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "too dear", "seconds": "4"}),
        ),
        // 0.05 x 10 s = 0.50
        (
            Client::A("text2video"),
            json!({"model": "kling-v1", "prompt": "too long", "duration": 10}),
        ),
        // 0.10 x 4 s (the API's nearest to the 5 s default) = 0.40
        (
            Client::Generations,
            json!({"model": "sora-2", "prompt": "default too long"}),
        ),
    ];
    for (client, body) in &refused {
        let (s, text) = submit_raw(&gw, &key, *client, body).await;
        assert_eq!(s, 403, "{client:?} {body}: {text}");
        assert_eq!(error_of(&text)["code"], "insufficient_quota", "{text}");
    }
    assert!(up.submits().is_empty(), "the upstream saw no submit");

    // 0.05 x 5 s (default) = 0.25 fits; while it is open, a second one does not.
    let id = submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "kling-v1", "prompt": "fits forever"}),
    )
    .await;
    status(&gw, &key, Client::A("text2video"), &id).await;
    let (s, text) = submit_raw(
        &gw,
        &key,
        Client::A("text2video"),
        &json!({"model": "kling-v1", "prompt": "second"}),
    )
    .await;
    assert_eq!(s, 403, "the open task's reservation counts: {text}");
    error_of(&text);
    assert_eq!(up.submits().len(), 1);
    assert_eq!(gw.used_micros(&kid).await, 0, "nothing settled yet");
}
