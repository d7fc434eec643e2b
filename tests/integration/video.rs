//! Asynchronous video tasks (spec 2.3, 2.4, 3, 4.8–4.16, 7): four client shapes on three
//! upstream shapes, polled in the background, billed once on completion, refunded on
//! failure or timeout, and never polled twice at once by several instances on one store.

use crate::gateway::{error_of, StoreKind, TestGateway};
use crate::redis_server::RedisServer;
use crate::video_upstream::{
    self, b64_encode, form_file, form_text, image_bytes, video, Status, VideoUpstream, API_KEY,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// A small "PNG": the real signature, then bytes a text-minded multipart reader would
/// mangle (CR, LF, NUL, high bytes, a fake boundary).
fn png() -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    v.extend_from_slice(b"\r\n--not-a-boundary\r\n\xff\xfe\x00\x01");
    v.extend((0..=255u8).rev());
    v
}

fn config_with(base: &str, timeout_secs: u64) -> String {
    format!(
        "video:\n\
         \x20 poll_interval_ms: 50\n\
         \x20 max_poll_interval_ms: 200\n\
         \x20 lease_ms: 2000\n\
         \x20 task_timeout_secs: {timeout_secs}\n\
         \x20 default_seconds: 5\n\
         \x20 max_seconds: 60\n\
         channels:\n\
         \x20 - {{ name: up-videos, protocol: openai, base_url: \"{base}\", api_key: {API_KEY}, models: [sora-2], model_map: {{ sora-2: sora-2-2025 }} }}\n\
         \x20 - {{ name: up-a, protocol: video-a, base_url: \"{base}\", api_key: {API_KEY}, models: [kling-v1] }}\n\
         \x20 - {{ name: up-b, protocol: video-b, base_url: \"{base}\", api_key: {API_KEY}, models: [jimeng-v30] }}\n\
         prices:\n\
         \x20 sora-2: {{ per_second: 0.10 }}\n\
         \x20 kling-v1: {{ per_second: 0.05 }}\n\
         \x20 jimeng-v30: {{ per_second: 0.02 }}\n"
    )
}

fn config(base: &str) -> String {
    config_with(base, 86400)
}

const SUBMIT_B: &str = "/video-b/?Action=CVSync2AsyncSubmitTask&Version=2022-08-31";
const RESULT_B: &str = "/video-b/?Action=CVSync2AsyncGetResult&Version=2022-08-31";

/// The four client shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// `/v1/videos` (2.4 records).
    Videos,
    /// `/video-a/v1/videos/{kind}` (2.3 records).
    A(&'static str),
    /// `/video-b/?Action=...` (2.3 records inside `data`).
    B,
    /// `/v1/video/generations` (2.3 records).
    Generations,
}

/// A multipart/form-data body: text fields, then an optional `input_reference` file.
fn form(fields: &[(&str, &str)], file: Option<&[u8]>) -> (String, Vec<u8>) {
    let boundary = "----video-test-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    if let Some(f) = file {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"input_reference\"; filename=\"ref.png\"\r\nContent-Type: image/png\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(f);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn post_form(
    gw: &TestGateway,
    key: &str,
    fields: &[(&str, &str)],
    file: Option<&[u8]>,
) -> (u16, String) {
    let (ct, body) = form(fields, file);
    let r = gw
        .http
        .post(gw.url("/v1/videos"))
        .bearer_auth(key)
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

async fn post_json(gw: &TestGateway, path: &str, key: &str, body: &Value) -> (u16, String) {
    let (s, _, t) = gw.post(path, key, body).await;
    (s, t)
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("JSON answer: {text}"))
}

/// Asserts a gateway task id: `task_` and 32 alphanumerics.
fn check_task_id(id: &str) {
    let rest = id
        .strip_prefix("task_")
        .unwrap_or_else(|| panic!("task id {id}"));
    assert!(
        rest.len() == 32 && rest.chars().all(|c| c.is_ascii_alphanumeric()),
        "task id {id}"
    );
}

/// Submits a task in a client shape; returns the gateway's task id, checking the
/// submission answer's shape.
async fn submit(gw: &TestGateway, key: &str, client: Client, body: Value) -> String {
    let (s, text) = submit_raw(gw, key, client, &body).await;
    assert_eq!(s, 200, "{client:?} {body}: {text}");
    let v = parse(&text);
    let id = match client {
        Client::Videos => {
            assert_eq!(v["object"], "video", "{text}");
            assert_eq!(v["status"], "queued", "{text}");
            assert_eq!(v["progress"], 0, "{text}");
            assert_eq!(v["model"], body["model"], "the client's model name: {text}");
            assert!(v["created_at"].is_i64(), "{text}");
            assert!(v["seconds"].is_string(), "{text}");
            v["id"].as_str().unwrap().to_string()
        }
        Client::A(_) | Client::Generations => {
            let keys: HashSet<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys, HashSet::from(["task_id", "status"]), "{text}");
            assert_eq!(v["status"], "queued", "{text}");
            v["task_id"].as_str().unwrap().to_string()
        }
        Client::B => {
            assert_eq!(v["code"], 10000, "{text}");
            assert_eq!(v["message"], "Success", "{text}");
            v["data"]["task_id"].as_str().unwrap().to_string()
        }
    };
    check_task_id(&id);
    id
}

/// Submits a task: `body` is JSON for the JSON shapes, and for `Videos` an object of
/// string fields (plus `input_reference` as Base64, sent as a file).
async fn submit_raw(gw: &TestGateway, key: &str, client: Client, body: &Value) -> (u16, String) {
    match client {
        Client::Videos => {
            let mut fields = Vec::new();
            let mut file = None;
            for (k, v) in body.as_object().unwrap() {
                if k == "input_reference" {
                    file = Some(image_bytes(v.as_str().unwrap()).unwrap());
                } else {
                    fields.push((k.as_str(), v.as_str().unwrap()));
                }
            }
            post_form(gw, key, &fields, file.as_deref()).await
        }
        Client::A(kind) => post_json(gw, &format!("/video-a/v1/videos/{kind}"), key, body).await,
        Client::B => post_json(gw, SUBMIT_B, key, body).await,
        Client::Generations => post_json(gw, "/v1/video/generations", key, body).await,
    }
}

/// A status request in a client shape; the raw answer.
async fn status_raw(gw: &TestGateway, key: &str, client: Client, id: &str) -> (u16, String) {
    let path = match client {
        Client::Videos => format!("/v1/videos/{id}"),
        Client::A(kind) => format!("/video-a/v1/videos/{kind}/{id}"),
        Client::Generations => format!("/v1/video/generations/{id}"),
        Client::B => return post_json(gw, RESULT_B, key, &json!({"task_id": id})).await,
    };
    let r = gw
        .http
        .get(gw.url(&path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// The task's record (2.4 for `Videos`, else 2.3), checking the shape.
async fn status(gw: &TestGateway, key: &str, client: Client, id: &str) -> Value {
    let (s, text) = status_raw(gw, key, client, id).await;
    assert_eq!(s, 200, "{client:?} status of {id}: {text}");
    let v = parse(&text);
    let rec = if client == Client::B {
        assert_eq!(v["code"], 10000, "{text}");
        assert_eq!(v["message"], "Success", "{text}");
        v["data"].clone()
    } else {
        v
    };
    let st = rec["status"].as_str().unwrap_or_else(|| panic!("{text}"));
    assert!(
        ["queued", "in_progress", "completed", "failed"].contains(&st),
        "spec 3 statuses only: {text}"
    );
    if client == Client::Videos {
        assert_eq!(rec["id"], id, "{text}");
        assert_eq!(rec["object"], "video", "{text}");
        assert!(rec["created_at"].is_i64(), "{text}");
        assert!(rec["seconds"].is_string(), "{text}");
        assert!(rec["progress"].as_u64().is_some_and(|p| p <= 100), "{text}");
        if st == "failed" {
            assert!(
                rec["error"]["code"].is_string(),
                "2.4 error code is a string: {text}"
            );
            assert!(rec["error"]["message"].is_string(), "{text}");
        }
    } else {
        assert_eq!(rec["task_id"], id, "{text}");
        if st == "failed" {
            assert!(
                rec["error"]["code"].is_i64(),
                "2.3 error code is an integer: {text}"
            );
            assert!(rec["error"]["message"].is_string(), "{text}");
        }
        if st != "completed" {
            assert!(
                rec.get("url").is_none_or(Value::is_null),
                "url only on success: {text}"
            );
        }
    }
    rec
}

fn rank(status: &str) -> u8 {
    match status {
        "queued" => 0,
        "in_progress" => 1,
        _ => 2,
    }
}

/// Polls the client status endpoint until the task has ended (a 20 s deadline); checks
/// the status never goes back. Returns the final record.
async fn wait_end(gw: &TestGateway, key: &str, client: Client, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = 0;
    let mut seen = Vec::new();
    loop {
        let rec = status(gw, key, client, id).await;
        let st = rec["status"].as_str().unwrap().to_string();
        assert!(rank(&st) >= last, "status went back: {seen:?} then {rec}");
        last = rank(&st);
        seen.push(st.clone());
        if st == "completed" || st == "failed" {
            return rec;
        }
        assert!(
            Instant::now() < deadline,
            "{client:?} task {id} did not end in 20 s; statuses seen {seen:?}, last {rec}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn wait_completed(gw: &TestGateway, key: &str, client: Client, id: &str) -> Value {
    let rec = wait_end(gw, key, client, id).await;
    assert_eq!(rec["status"], "completed", "{client:?} {id}: {rec}");
    check_completed(client, id, &rec);
    rec
}

/// The fields of a completed record.
fn check_completed(client: Client, id: &str, rec: &Value) {
    match client {
        Client::Videos => {
            assert_eq!(rec["progress"], 100, "{rec}");
            let done = rec["completed_at"]
                .as_i64()
                .unwrap_or_else(|| panic!("{rec}"));
            assert!(done >= rec["created_at"].as_i64().unwrap(), "{rec}");
            assert!(rec.get("error").is_none_or(Value::is_null), "{rec}");
        }
        _ => {
            let url = rec["url"].as_str().unwrap_or_else(|| panic!("{rec}"));
            assert!(
                url.ends_with(&format!("/v1/videos/{id}/content")),
                "the gateway's download URL, not the upstream's: {rec}"
            );
            assert!(
                url.starts_with("http://") || url.starts_with("https://"),
                "{rec}"
            );
            assert_eq!(rec["format"], "mp4", "{rec}");
            if let Some(p) = rec.get("progress") {
                assert_eq!(p, 100, "{rec}");
            }
            assert!(rec.get("error").is_none_or(Value::is_null), "{rec}");
        }
    }
}

/// Downloads a URL with the key: status, content type, bytes.
async fn download(gw: &TestGateway, key: &str, url: &str) -> (u16, String, Vec<u8>) {
    let r = gw.http.get(url).bearer_auth(key).send().await.unwrap();
    let s = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (s, ct, r.bytes().await.unwrap().to_vec())
}

/// Downloads the task's video through the gateway and compares it with the upstream's.
async fn check_content(gw: &TestGateway, key: &str, client: Client, id: &str, rec: &Value) {
    let url = match client {
        Client::Videos => gw.url(&format!("/v1/videos/{id}/content")),
        _ => rec["url"].as_str().unwrap().to_string(),
    };
    let (s, ct, bytes) = download(gw, key, &url).await;
    assert_eq!(s, 200, "{url}: {}", String::from_utf8_lossy(&bytes));
    assert!(ct.starts_with("video/mp4"), "content type {ct}");
    assert_eq!(bytes.len(), video().len(), "{url}");
    assert!(bytes == video(), "{url}: the upstream's video bytes");
}

/// The caller's usage records.
async fn log(gw: &TestGateway, key: &str) -> Vec<Value> {
    let (s, v) = gw.get("/api/log/token?limit=100", key).await;
    assert_eq!(s, 200, "{v}");
    v["data"].as_array().unwrap().clone()
}

/// Checks the usage log holds exactly these (model, cost) records, in any order.
async fn check_log(gw: &TestGateway, key: &str, expected: &[(&str, i64)]) {
    let recs = log(gw, key).await;
    let mut got: Vec<(String, i64)> = recs
        .iter()
        .filter(|r| r["cost_micro_usd"].as_i64().unwrap_or(0) > 0)
        .map(|r| {
            (
                r["model"].as_str().unwrap_or("").to_string(),
                r["cost_micro_usd"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<(String, i64)> = expected.iter().map(|(m, c)| (m.to_string(), *c)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "charged usage records: {recs:?}");
}

/// Every upstream request carried the channel's credential, never the client's key.
fn check_upstream_auth(up: &VideoUpstream, client_key: &str) {
    assert_eq!(
        up.unauthorized(),
        Vec::<String>::new(),
        "requests without the channel key"
    );
    for r in up.requests() {
        assert!(
            !r.headers.iter().any(|(_, v)| v.contains(client_key)),
            "client key forwarded to {}",
            r.path
        );
    }
}

// ---------------------------------------------------------------------------------
// 1. Each client shape against its own upstream shape.

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
    assert_eq!((t.seconds, t.width, t.height), (4.0, 1280, 720));
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path == "/v1/videos")
        .unwrap();
    if video_upstream::multipart(&sub).is_some() {
        assert_eq!(form_text(&sub, "seconds").as_deref(), Some("4"));
    }
    assert_eq!(gw.used_micros(&kid).await, 400_000, "0.10 USD x 4 s");

    // /video-a text2video -> video-a upstream.
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
    assert_eq!(m["duration"].as_f64(), Some(5.0), "{rec}");
    assert_eq!(
        (m["fps"].as_i64(), m["seed"].as_i64()),
        (Some(24), Some(42)),
        "{rec}"
    );
    assert_eq!(
        (m["width"].as_i64(), m["height"].as_i64()),
        (Some(1280), Some(720)),
        "{rec}"
    );
    check_content(&gw, &key, Client::A("text2video"), &id, &rec).await;
    let t = up.task_with_prompt("a dog running");
    assert_eq!(
        (t.kind.as_str(), t.model.as_str()),
        ("text2video", "kling-v1")
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
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 2 * 250_000);

    // video-b -> video-b upstream, with a Base64 image.
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
    assert_eq!(t.model, "jimeng-v30");
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path.contains("CVSync2AsyncSubmitTask"))
        .unwrap();
    let sent = sub.json()["binary_data_base64"][0]
        .as_str()
        .map(|s| image_bytes(s).unwrap());
    assert_eq!(sent, Some(png()), "the image reached video-b");
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 2 * 250_000 + 100_000);

    // /v1/video/generations (no image: text-to-video) on kling-v1 -> video-a upstream.
    let id = submit(
        &gw,
        &key,
        Client::Generations,
        json!({"model": "kling-v1", "prompt": "waves at dusk", "duration": 2}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::Generations, &id).await;
    assert_eq!(rec["metadata"]["duration"].as_f64(), Some(2.0), "{rec}");
    check_content(&gw, &key, Client::Generations, &id, &rec).await;
    assert_eq!(up.task_with_prompt("waves at dusk").kind, "text2video");
    let total = 400_000 + 2 * 250_000 + 100_000 + 100_000;
    assert_eq!(gw.used_micros(&kid).await, total);

    check_log(
        &gw,
        &key,
        &[
            ("sora-2", 400_000),
            ("kling-v1", 250_000),
            ("kling-v1", 250_000),
            ("jimeng-v30", 100_000),
            ("kling-v1", 100_000),
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
// 2. Any client shape on any upstream shape.

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

    // /v1/videos with an input_reference file -> video-a image2video: Base64 image.
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
        "the file reached video-a as Base64"
    );
    assert_eq!(gw.used_micros(&kid).await, 400_000 + 250_000);

    // video-b client (no duration, no req_key on the result call) -> video-a upstream.
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

    // video-a client -> video-b upstream (downloads go through the upstream's file URL).
    let id = submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "jimeng-v30", "prompt": "a to b", "duration": 5}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::A("text2video"), &id).await;
    check_content(&gw, &key, Client::A("text2video"), &id, &rec).await;
    assert_eq!(up.task_with_prompt("a to b").model, "jimeng-v30");

    // /v1/videos -> video-b upstream: content through /v1/videos/{id}/content.
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

    // An image URL cannot become the file the OpenAI-style upstream needs.
    let n = up.submits().len();
    let (s, text) = submit_raw(
        &gw,
        &key,
        Client::Generations,
        &json!({"model": "sora-2", "prompt": "url to openai", "image": "https://img.example/in.png"}),
    )
    .await;
    assert_eq!(s, 400, "{text}");
    error_of(&text);
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
// 4. Failures refund everything.

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
        &json!({"req_key": "jimeng-v30", "prompt": "one more", "duration": 1}),
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
        // 0.05 x 5 s x 2 = 0.50
        (
            Client::A("text2video"),
            json!({"model": "kling-v1", "prompt": "too many", "duration": 5, "n": 2}),
        ),
        // 0.10 x 5 s (the default) = 0.50
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

// ---------------------------------------------------------------------------------
// 7. Validation.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_400_before_any_upstream_call() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;
    let ok_image = format!("data:image/png;base64,{}", b64_encode(&png()));
    let a_t = Client::A("text2video");
    let a_i = Client::A("image2video");
    let cases: Vec<(Client, Value, &str)> = vec![
        (
            Client::Videos,
            json!({"prompt": "p", "seconds": "4"}),
            "missing model",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "seconds": "4"}),
            "missing prompt",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "abc"}),
            "seconds abc",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "61"}),
            "seconds above max",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "0"}),
            "seconds 0",
        ),
        (a_t, json!({"prompt": "p"}), "missing model"),
        (a_t, json!({"model": "kling-v1"}), "missing prompt"),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "duration": "abc"}),
            "duration abc",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "duration": 61}),
            "duration above max",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "n": 0}),
            "n 0",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "n": 5}),
            "n 5",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "width": 0}),
            "width 0",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "height": -720}),
            "height negative",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "fps": 0}),
            "fps 0",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p"}),
            "image2video without image",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p", "image": "not an image!"}),
            "image neither URL nor Base64",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p", "image": "ftp://img.example/in.png"}),
            "image ftp URL",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p", "image": "data:image/png;base64,@@@@"}),
            "bad data URL",
        ),
        (Client::Generations, json!({"prompt": "p"}), "missing model"),
        (
            Client::Generations,
            json!({"model": "kling-v1"}),
            "missing prompt",
        ),
        (
            Client::Generations,
            json!({"model": "kling-v1", "prompt": "p", "n": 5}),
            "n 5",
        ),
        (
            Client::Generations,
            json!({"model": "kling-v1", "prompt": "p", "duration": "abc"}),
            "duration abc",
        ),
        (
            Client::Generations,
            json!({"model": "kling-v1", "prompt": "p", "image": "%%%"}),
            "bad image",
        ),
        (Client::B, json!({"prompt": "p"}), "missing req_key"),
        (
            Client::B,
            json!({"req_key": "jimeng-v30"}),
            "missing prompt",
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "p", "duration": "abc"}),
            "duration abc",
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "p", "binary_data_base64": ["***"]}),
            "bad Base64",
        ),
        // A good image in the same shapes is accepted (below): the rejections are about the image.
    ];
    for (client, body, what) in &cases {
        let (s, text) = submit_raw(&gw, &key, *client, body).await;
        assert_eq!(s, 400, "{what}: {client:?} {body}: {text}");
        error_of(&text);
    }
    // video-b: the Action and Version query parameters.
    let body = json!({"req_key": "jimeng-v30", "prompt": "p"});
    for path in [
        "/video-b/?Version=2022-08-31",
        "/video-b/?Action=&Version=2022-08-31",
        "/video-b/?Action=DeleteTask&Version=2022-08-31",
        "/video-b/?Action=CVSync2AsyncSubmitTask",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=2022-8-31",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=latest",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=2022-08-31x",
        "/video-b/?Action=CVSync2AsyncGetResult&Version=22-08-31",
        "/video-b/",
    ] {
        let (s, text) = post_json(&gw, path, &key, &body).await;
        assert_eq!(s, 400, "{path}: {text}");
        error_of(&text);
    }
    assert!(
        up.requests().is_empty(),
        "no rejected request reached the upstream: {:?}",
        up.requests().iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert_eq!(gw.used_micros(&kid).await, 0);

    // The same shapes with valid values pass validation.
    for (client, body) in [
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "ok data url", "image": ok_image}),
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "ok plain", "image": b64_encode(&png()), "n": 4}),
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "ok b", "duration": "5"}),
        ),
    ] {
        submit(&gw, &key, client, body).await;
    }
    assert!(
        up.submits().len() >= 3,
        "the valid requests reached the upstream"
    );
}

// ---------------------------------------------------------------------------------
// 8. Two instances on one Redis never poll one task at once.

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
// 9. A restart in the middle of a task.

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
    submit(
        &gw,
        &key,
        Client::Videos,
        json!({"model": "sora-2", "prompt": "fits forever", "seconds": "3"}),
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
