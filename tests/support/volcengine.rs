//! Jimeng video generation on Volcengine's visual API, as Volcengine documents it:
//!
//! - Signing ("签名方法", volcengine.com/docs/6369/67269): `Authorization: HMAC-SHA256
//!   Credential={AccessKeyId}/{YYYYMMDD}/{region}/{service}/request,
//!   SignedHeaders={names}, Signature={hex}`, with `X-Date` (`YYYYMMDD'T'HHMMSS'Z'`) and
//!   `X-Content-Sha256`. The signature is HMAC-SHA256 of the string to sign
//!   (`HMAC-SHA256\n{X-Date}\n{scope}\n{hex sha256 of the canonical request}`) under the
//!   key derived from the secret through the date, region, service and `request`; the
//!   canonical request is method, path, the query sorted by name (RFC 3986 encoded), the
//!   signed headers (`name:value\n`, names lower case, sorted), their names joined by `;`,
//!   and the hex SHA-256 of the body. `host` and `x-date` must be signed. This server
//!   recomputes it and refuses any mismatch with HTTP 401 and `ResponseMetadata.Error`.
//! - Jimeng video 3.0 (volcengine.com/docs/85621/1792710, "即梦AI-视频生成3.0 720P"):
//!   `POST https://visual.volcengineapi.com?Action=CVSync2AsyncSubmitTask&Version=2022-08-31`
//!   with `req_key`, `prompt`, `seed` (default -1), `frames` (121 = 5 s or 241 = 10 s,
//!   default 121), `aspect_ratio` (`16:9`, `4:3`, `1:1`, `3:4`, `9:16`, `21:9`),
//!   `binary_data_base64` / `image_urls` (arrays); answers `{code: 10000, message,
//!   request_id, data: {task_id}}`. `Action=CVSync2AsyncGetResult` with `{req_key,
//!   task_id}` answers `data.status` one of `in_queue`, `generating`, `done` (with
//!   `video_url`), `not_found`, `expired`. A failure is a `code` other than 10000, with
//!   HTTP 400 or without (e.g. 50516 "Post Video Risk Not Pass", 50412 "Text Risk Not
//!   Pass"); 50429 (API limit) and 50500 (internal error) are worth a retry.
#![allow(dead_code)]

use crate::mock_upstream::{Recorded, Reply};
use crate::video_upstream::{after, file_url, now, query_param, split_path, Shape, Shared, Status};
use ring::{digest, hmac};
use serde_json::{json, Value};

pub const ACCESS_KEY_ID: &str = "AKLTvolcengine-test-id";
pub const SECRET_ACCESS_KEY: &str = "volcengine-test-secret";
pub const VERSION: &str = "2022-08-31";
pub const REGION: &str = "cn-north-1";
pub const SERVICE: &str = "cv";
pub const ASPECT_RATIOS: &[&str] = &["16:9", "4:3", "1:1", "3:4", "9:16", "21:9"];
/// How far `X-Date` may be from the server's clock.
const MAX_SKEW_SECS: i64 = 15 * 60;

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(digest::digest(&digest::SHA256, data))
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn uri_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Checks the request's signature; the error says what is wrong.
fn verify(r: &Recorded) -> Result<(), String> {
    let auth = r.header("authorization").ok_or("no Authorization")?;
    let rest = auth.strip_prefix("HMAC-SHA256 ").ok_or("not HMAC-SHA256")?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',').map(str::trim) {
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        }
    }
    let (credential, signed, signature) = (
        credential.ok_or("no Credential")?,
        signed.ok_or("no SignedHeaders")?,
        signature.ok_or("no Signature")?,
    );
    let scope: Vec<&str> = credential.split('/').collect();
    let [ak, date, region, service, "request"] = scope.as_slice() else {
        return Err(format!("bad credential scope {credential}"));
    };
    if *ak != ACCESS_KEY_ID {
        return Err("unknown access key".into());
    }
    if (*region, *service) != (REGION, SERVICE) {
        return Err(format!("wrong region or service {region}/{service}"));
    }
    let x_date = r.header("x-date").ok_or("no X-Date")?;
    if !x_date.starts_with(date) {
        return Err("X-Date and credential date differ".into());
    }
    let when = chrono::NaiveDateTime::parse_from_str(x_date, "%Y%m%dT%H%M%SZ")
        .map_err(|_| "X-Date is not YYYYMMDDTHHMMSSZ")?
        .and_utc()
        .timestamp();
    if (when - now()).abs() > MAX_SKEW_SECS {
        return Err("X-Date too far from now".into());
    }
    let names: Vec<&str> = signed.split(';').collect();
    if !names.contains(&"host") || !names.contains(&"x-date") {
        return Err("host and x-date must be signed".into());
    }
    let body_hash = sha256_hex(&r.body);
    if let Some(claimed) = r.header("x-content-sha256") {
        if claimed != body_hash {
            return Err("X-Content-Sha256 is not the body's hash".into());
        }
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    if sorted != names {
        return Err("SignedHeaders not sorted".into());
    }
    let mut canonical_headers = String::new();
    for n in &names {
        let v = r
            .header(n)
            .ok_or_else(|| format!("signed header {n} missing"))?;
        canonical_headers.push_str(&format!("{n}:{}\n", v.trim()));
    }
    let (path, query) = split_path(&r.path);
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (uri_encode(&k), uri_encode(&v)))
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let canonical_query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed}\n{body_hash}",
        r.method,
        if path.is_empty() { "/" } else { path },
        canonical_query.join("&"),
    );
    let string_to_sign = format!(
        "HMAC-SHA256\n{x_date}\n{date}/{region}/{service}/request\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let mut key = hmac_sha256(SECRET_ACCESS_KEY.as_bytes(), date.as_bytes());
    for part in [*region, *service, "request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let expected = hex::encode(hmac_sha256(&key, string_to_sign.as_bytes()));
    if expected != signature {
        return Err("SignatureDoesNotMatch".into());
    }
    Ok(())
}

/// The answer envelope of the visual API.
fn answer(http: u16, code: i64, message: &str, data: Value) -> Reply {
    Reply::json(
        http,
        json!({"code": code, "message": message, "data": data, "request_id": "2025jimeng0001",
               "status": code, "time_elapsed": "12.5ms"}),
    )
}

fn bad(message: &str) -> Reply {
    answer(400, 50400, message, Value::Null)
}

/// Answers the requests of this API; `None` for a path that is not its.
pub fn route(s: &Shared, r: &Recorded) -> Option<Reply> {
    let (path, query) = split_path(&r.path);
    if r.method != "POST"
        || !(path.is_empty() || path == "/")
        || query_param(query, "Action").is_none()
    {
        return None;
    }
    let action = query_param(query, "Action").unwrap_or_default();
    if let Err(why) = verify(r) {
        s.refuse(&r.path, &why);
        return Some(Reply::json(
            401,
            json!({"ResponseMetadata": {"RequestId": "2025jimeng0401", "Action": action,
                "Version": query_param(query, "Version"), "Service": SERVICE, "Region": REGION,
                "Error": {"CodeN": 100010, "Code": "SignatureDoesNotMatch", "Message": why}}}),
        ));
    }
    if query_param(query, "Version").as_deref() != Some(VERSION) {
        return Some(bad("Invalid Version"));
    }
    let Ok(Value::Object(b)) = serde_json::from_slice::<Value>(&r.body) else {
        return Some(bad("body is not a JSON object"));
    };
    Some(match action.as_str() {
        "CVSync2AsyncSubmitTask" => submit(s, &b),
        "CVSync2AsyncGetResult" => result(s, &b),
        _ => bad("Invalid Action"),
    })
}

fn submit(s: &Shared, b: &serde_json::Map<String, Value>) -> Reply {
    let Some(req_key) = b.get("req_key").and_then(Value::as_str) else {
        return bad("req_key is required");
    };
    let prompt = b.get("prompt").and_then(Value::as_str).unwrap_or("");
    let frames = match b.get("frames") {
        None | Some(Value::Null) => 121,
        Some(v) => match v.as_i64() {
            Some(f @ (121 | 241)) => f,
            _ => return bad("frames must be 121 or 241"),
        },
    };
    let aspect = match b.get("aspect_ratio") {
        None | Some(Value::Null) => "16:9",
        Some(Value::String(a)) if ASPECT_RATIOS.contains(&a.as_str()) => a.as_str(),
        Some(_) => return bad("aspect_ratio is not supported"),
    };
    if b.get("seed").is_some_and(|v| !v.is_i64()) {
        return bad("seed must be an integer");
    }
    for list in ["binary_data_base64", "image_urls"] {
        match b.get(list) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {}
            Some(_) => return bad(&format!("{list} must be a list of strings")),
        }
    }
    if let Some(Value::Array(items)) = b.get("binary_data_base64") {
        if items.iter().any(|i| {
            let i = i.as_str().unwrap_or("");
            i.starts_with("data:") || crate::video_upstream::b64_decode(i).is_none()
        }) {
            return bad("binary_data_base64 must hold bare Base64");
        }
    }
    if prompt.is_empty() && b.get("binary_data_base64").is_none() && b.get("image_urls").is_none() {
        return bad("prompt is required");
    }
    let seconds = if frames == 241 { 10.0 } else { 5.0 };
    let t = s.create(Shape::Jimeng, "jimeng", req_key, prompt, seconds, aspect);
    answer(200, 10000, "Success", json!({"task_id": t.id}))
}

fn result(s: &Shared, b: &serde_json::Map<String, Value>) -> Reply {
    let Some(id) = b.get("task_id").and_then(Value::as_str) else {
        return bad("task_id is required");
    };
    let Some(req_key) = b.get("req_key").and_then(Value::as_str) else {
        return bad("req_key is required");
    };
    let Some(p) = s.poll(id, Shape::Jimeng, None) else {
        return answer(
            200,
            10000,
            "Success",
            json!({"status": "not_found", "video_url": ""}),
        );
    };
    if p.task.model != req_key {
        return after(p.delay, bad("req_key does not match the task"));
    }
    let ok = |status: &str, url: &str| {
        answer(
            200,
            10000,
            "Success",
            json!({"status": status, "video_url": url, "aigc_meta_tagged": false}),
        )
    };
    let reply = match p.status {
        Status::Queued => ok("in_queue", ""),
        Status::InProgress | Status::Hang => ok("generating", ""),
        Status::Completed => ok("done", &file_url(&s.base(), &p.task.id)),
        Status::Expired => ok("expired", ""),
        Status::Vanished => ok("not_found", ""),
        Status::Failed => answer(400, 50516, "Post Video Risk Not Pass", Value::Null),
        Status::QuietlyFailed => answer(200, 50412, "Text Risk Not Pass", Value::Null),
        Status::Transient if p.task.polls % 2 == 1 => answer(
            429,
            50429,
            "Request Has Reached API Limit, Please Try Later",
            Value::Null,
        ),
        Status::Transient => answer(500, 50500, "Internal Error", Value::Null),
    };
    after(p.delay, reply)
}
