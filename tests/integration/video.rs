//! What the video tests share: the channels (one per vendor API, on one mock server),
//! the four client shapes, and reading their answers (spec 2.3, 2.4, 3, 4.8–4.16, 7).
//! The tests are in `video_tasks.rs` (shapes, failures, timeouts, quota), `video_checks.rs`
//! (400s before anything is reserved), `video_instances.rs` (several instances, restarts)
//! and `video_vendors.rs` (each vendor's API as published, every client shape on each).
#![allow(dead_code)]

use crate::gateway::TestGateway;
use crate::video_upstream::{image_bytes, video, VideoUpstream};
use crate::{kling, volcengine};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// A small "PNG": the real signature, then bytes a text-minded multipart reader would
/// mangle (CR, LF, NUL, high bytes, a fake boundary).
pub fn png() -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    v.extend_from_slice(b"\r\n--not-a-boundary\r\n\xff\xfe\x00\x01");
    v.extend((0..=255u8).rev());
    v
}

/// The three vendor channels on one mock server: `sora-2` on the OpenAI videos API (model
/// renamed), `kling-v1` on Kling's API, `jimeng-v30` on Jimeng (the `req_key` the
/// vendor knows). Key pairs come from the environment, with the mock's keys as the
/// default. Reads give up after a second, so a vendor that hangs is a timeout.
pub fn channels(base: &str) -> String {
    let ak = kling::ACCESS_KEY;
    let sk = kling::SECRET_KEY;
    let vak = volcengine::ACCESS_KEY_ID;
    let vsk = volcengine::SECRET_ACCESS_KEY;
    let key = crate::video_upstream::API_KEY;
    format!(
        "  - {{ name: up-videos, protocol: openai, base_url: \"{base}\", api_key: {key}, models: [sora-2], model_map: {{ sora-2: sora-2-2025 }}, read_timeout_secs: 1 }}\n\
         \x20 - {{ name: up-kling, protocol: video-a, base_url: \"{base}\", access_key: \"${{MG_TEST_KLING_ACCESS_KEY:-{ak}}}\", secret_key: \"${{MG_TEST_KLING_SECRET_KEY:-{sk}}}\", models: [kling-v1], model_map: {{ kling-v1: kling-v1-6 }}, read_timeout_secs: 1 }}\n\
         \x20 - {{ name: up-jimeng, protocol: video-b, base_url: \"{base}\", access_key: \"${{MG_TEST_VOLC_ACCESS_KEY:-{vak}}}\", secret_key: \"${{MG_TEST_VOLC_SECRET_KEY:-{vsk}}}\", models: [jimeng-v30], model_map: {{ jimeng-v30: jimeng_t2v_v30 }}, read_timeout_secs: 1 }}\n"
    )
}

pub const PRICES: &str = "prices:\n\
    \x20 sora-2: { per_second: 0.10 }\n\
    \x20 kling-v1: { per_second: 0.05 }\n\
    \x20 jimeng-v30: { per_second: 0.02 }\n";

pub fn video_section(timeout_secs: u64) -> String {
    format!(
        "video:\n\
         \x20 poll_interval_ms: 50\n\
         \x20 max_poll_interval_ms: 200\n\
         \x20 lease_ms: 2000\n\
         \x20 task_timeout_secs: {timeout_secs}\n\
         \x20 default_seconds: 5\n\
         \x20 max_seconds: 60\n"
    )
}

pub fn config_with(base: &str, timeout_secs: u64) -> String {
    format!(
        "{}channels:\n{}{PRICES}",
        video_section(timeout_secs),
        channels(base)
    )
}

pub fn config(base: &str) -> String {
    config_with(base, 86400)
}

pub const SUBMIT_B: &str = "/video-b/?Action=CVSync2AsyncSubmitTask&Version=2022-08-31";
pub const RESULT_B: &str = "/video-b/?Action=CVSync2AsyncGetResult&Version=2022-08-31";

/// The four client shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
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
pub fn form(fields: &[(&str, &str)], file: Option<&[u8]>) -> (String, Vec<u8>) {
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

pub async fn post_form(
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

pub async fn post_json(gw: &TestGateway, path: &str, key: &str, body: &Value) -> (u16, String) {
    let (s, _, t) = gw.post(path, key, body).await;
    (s, t)
}

pub fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("JSON answer: {text}"))
}

/// Asserts a gateway task id: `task_` and 32 alphanumerics.
pub fn check_task_id(id: &str) {
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
pub async fn submit(gw: &TestGateway, key: &str, client: Client, body: Value) -> String {
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
pub async fn submit_raw(
    gw: &TestGateway,
    key: &str,
    client: Client,
    body: &Value,
) -> (u16, String) {
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
/// The status path of a client that reads its tasks with a GET (`B` asks with a POST).
fn status_path(client: Client, id: &str) -> Option<String> {
    match client {
        Client::Videos => Some(format!("/v1/videos/{id}")),
        Client::A(kind) => Some(format!("/video-a/v1/videos/{kind}/{id}")),
        Client::Generations => Some(format!("/v1/video/generations/{id}")),
        Client::B => None,
    }
}

pub async fn status_raw(gw: &TestGateway, key: &str, client: Client, id: &str) -> (u16, String) {
    let Some(path) = status_path(client, id) else {
        return post_json(gw, RESULT_B, key, &json!({"task_id": id})).await;
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
pub async fn status(gw: &TestGateway, key: &str, client: Client, id: &str) -> Value {
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

pub fn rank(status: &str) -> u8 {
    match status {
        "queued" => 0,
        "in_progress" => 1,
        _ => 2,
    }
}

/// Polls the client status endpoint until the task has ended (a 20 s deadline); checks
/// the status never goes back. Returns the final record.
pub async fn wait_end(gw: &TestGateway, key: &str, client: Client, id: &str) -> Value {
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

pub async fn wait_completed(gw: &TestGateway, key: &str, client: Client, id: &str) -> Value {
    let rec = wait_end(gw, key, client, id).await;
    assert_eq!(rec["status"], "completed", "{client:?} {id}: {rec}");
    check_completed(client, id, &rec);
    rec
}

/// The fields of a completed record.
pub fn check_completed(client: Client, id: &str, rec: &Value) {
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
pub async fn download(gw: &TestGateway, key: &str, url: &str) -> (u16, String, Vec<u8>) {
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
pub async fn check_content(gw: &TestGateway, key: &str, client: Client, id: &str, rec: &Value) {
    let url = match client {
        Client::Videos => gw.url(&format!("/v1/videos/{id}/content")),
        _ => rec["url"].as_str().unwrap().to_string(),
    };
    let (s, ct, bytes) = download(gw, key, &url).await;
    assert_eq!(s, 200, "{url}: {}", String::from_utf8_lossy(&bytes));
    assert!(ct.starts_with("video/mp4"), "content type {ct}");
    assert_eq!(bytes.len(), video().len(), "{url}");
    assert!(bytes == video(), "{url}: the upstream's video bytes");
    // A HEAD answers as the GET does, without the body: the download and the status.
    let r = gw.http.head(&url).bearer_auth(key).send().await.unwrap();
    assert_eq!(r.status(), 200, "HEAD {url}");
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("video/mp4"), "HEAD {url}: content type {ct}");
    if let Some(len) = r.headers().get("content-length") {
        assert_eq!(len.to_str().unwrap(), video().len().to_string(), "{url}");
    }
    assert!(
        r.bytes().await.unwrap().is_empty(),
        "HEAD {url} has no body"
    );
    if let Some(path) = status_path(client, id) {
        let get_len = status_raw(gw, key, client, id).await.1.len();
        let r = gw
            .http
            .head(gw.url(&path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "HEAD {path}");
        assert_eq!(r.headers()["content-type"], "application/json", "{path}");
        assert_eq!(
            r.headers()["content-length"],
            get_len.to_string().as_str(),
            "{path}"
        );
        assert!(
            r.bytes().await.unwrap().is_empty(),
            "HEAD {path} has no body"
        );
    }
    // A task the key does not own is as unknown to a HEAD as to a GET.
    let r = gw
        .http
        .head(gw.url("/v1/videos/task_unknown/content"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// The caller's usage records.
pub async fn log(gw: &TestGateway, key: &str) -> Vec<Value> {
    let (s, v) = gw.get("/api/log/token?limit=100", key).await;
    assert_eq!(s, 200, "{v}");
    v["data"].as_array().unwrap().clone()
}

/// Checks the usage log holds exactly these (model, cost) records, in any order.
pub async fn check_log(gw: &TestGateway, key: &str, expected: &[(&str, i64)]) {
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
pub fn check_upstream_auth(up: &VideoUpstream, client_key: &str) {
    assert_eq!(
        up.unauthorized(),
        Vec::<(String, String)>::new(),
        "requests refused for their credential"
    );
    for r in up.requests() {
        assert!(
            !r.headers.iter().any(|(_, v)| v.contains(client_key)),
            "client key forwarded to {}",
            r.path
        );
    }
}
