//! Jimeng video generation on Volcengine's visual API (volcengine.com/docs/85621/1792710,
//! "即梦AI-视频生成3.0"; version 2022-08-31):
//!
//! - `POST /?Action=CVSync2AsyncSubmitTask&Version=2022-08-31`, JSON: `req_key` (the
//!   model), `prompt`, `seed`, `frames` (121 for 5 s, 241 for 10 s), `aspect_ratio`
//!   (`16:9`, `4:3`, `1:1`, `3:4`, `9:16`, `21:9`), and a reference image as
//!   `binary_data_base64` or `image_urls` (arrays). Answer: `{code: 10000, message,
//!   request_id, data: {task_id}}`.
//! - `POST /?Action=CVSync2AsyncGetResult&Version=2022-08-31` with `{req_key, task_id}`:
//!   `data.status` is `in_queue`, `generating`, `done` (with `data.video_url`),
//!   `not_found` or `expired`.
//! - Anything but `code` 10000 is a failure, with HTTP 400 or without (e.g. 50412 "Text
//!   Risk Not Pass", 50516 "Post Video Risk Not Pass"); the API's limits (50429, 50430)
//!   and internal errors (50500, 50501) are worth asking again.

use super::{
    excerpt, failed, image_base64, lost, nonempty, one_video, pick_ratio, pick_seconds, progress,
    result, Call, Plan, Polled, Submitted, Unfit,
};
use crate::store::tasks::{TaskRecord, TaskStatus};
use crate::video::job::{Image, VideoJob};
use serde_json::{json, Map, Value};

/// The API version of the Jimeng actions.
pub const VERSION: &str = "2022-08-31";
/// `code` of a successful answer.
const OK: i64 = 10000;
/// Codes that say "later", not "never".
const TRANSIENT: &[i64] = &[50429, 50430, 50500, 50501];
const SECONDS: &[f64] = &[5.0, 10.0];
const RATIOS: &[(&str, u32, u32)] = &[
    ("16:9", 16, 9),
    ("4:3", 4, 3),
    ("1:1", 1, 1),
    ("3:4", 3, 4),
    ("9:16", 9, 16),
    ("21:9", 21, 9),
];

pub fn plan(job: &VideoJob, default_seconds: f64) -> Result<Plan, Unfit> {
    one_video(job)?;
    let seconds = pick_seconds(SECONDS, job, default_seconds)?;
    let frame = pick_ratio(RATIOS, job)?;
    Ok(Plan { seconds, frame })
}

/// 24 frames a second, plus the first.
fn frames(seconds: f64) -> u32 {
    (seconds * 24.0).round() as u32 + 1
}

pub fn submit(job: &VideoJob, plan: &Plan, model: &str) -> Call {
    let mut body = Map::new();
    body.insert("req_key".into(), json!(model));
    body.insert("prompt".into(), json!(job.prompt));
    body.insert("frames".into(), json!(frames(plan.seconds)));
    if let Some(ratio) = plan.frame {
        body.insert("aspect_ratio".into(), json!(ratio));
    }
    if let Some(seed) = job.seed {
        body.insert("seed".into(), json!(seed));
    }
    match &job.image {
        Some(Image::Url(u)) => {
            body.insert("image_urls".into(), json!([u]));
        }
        Some(bytes) => {
            body.insert(
                "binary_data_base64".into(),
                json!([image_base64(bytes).unwrap_or_default()]),
            );
        }
        None => {}
    }
    Call::json(
        format!("/?Action=CVSync2AsyncSubmitTask&Version={VERSION}"),
        &Value::Object(body),
    )
}

/// A non-10000 `code` in a 2xx answer, as the HTTP status it amounts to.
fn code_status(code: i64) -> u16 {
    match code {
        50429 | 50430 => 429,
        50500 | 50501 => 500,
        _ => 400,
    }
}

pub fn submitted(v: &Value) -> Submitted {
    match v["code"].as_i64() {
        Some(OK) => match nonempty(&v["data"]["task_id"]) {
            Some(id) => Submitted::Task(id),
            None => Submitted::Unreadable,
        },
        Some(code) => Submitted::Refused(code_status(code)),
        None => Submitted::Unreadable,
    }
}

pub fn poll(t: &TaskRecord, model: &str) -> Call {
    Call::json(
        format!("/?Action=CVSync2AsyncGetResult&Version={VERSION}"),
        &json!({"req_key": model, "task_id": t.upstream_id}),
    )
}

/// Why a task failed, in words, from the vendor's code: the content checks on the way in
/// (504xx) and on the way out (505xx) are named; other codes are shown as numbers.
fn reason(code: i64, vendor_message: &str) -> String {
    let risk = vendor_message.contains("Risk");
    match code {
        50400..=50499 if risk => format!(
            "The upstream's content check refused the prompt or reference image ({vendor}); it was refunded.",
            vendor = known_words(vendor_message)
        ),
        50500..=50599 if risk => format!(
            "The upstream's content check refused the generated video ({vendor}); it was refunded.",
            vendor = known_words(vendor_message)
        ),
        _ => format!("The upstream could not generate this video (code {code}); it was refunded."),
    }
}

/// The vendor's message when it is one of its short fixed phrases ("Post Video Risk Not
/// Pass"); anything else is not repeated to the client.
fn known_words(m: &str) -> String {
    let plain = m.len() <= 48 && m.bytes().all(|b| b.is_ascii_alphabetic() || b == b' ');
    if plain {
        m.to_string()
    } else {
        "content policy".into()
    }
}

pub fn read_poll(status: u16, body: &[u8]) -> Polled {
    let v = serde_json::from_slice::<Value>(body).ok();
    let code = v.as_ref().and_then(|v| v["code"].as_i64());
    let Some(code) = code else {
        // Not the API's envelope (a proxy's page, a signing refusal): nothing known
        // about the task.
        return Polled::Retry(format!("HTTP {status}: {}", excerpt(body)));
    };
    let v = v.unwrap_or_default();
    if TRANSIENT.contains(&code) || status == 429 || status >= 500 {
        return Polled::Retry(format!("HTTP {status}, code {code}: {}", excerpt(body)));
    }
    if code != OK {
        // Failed, whether the HTTP status says so (400) or not (200).
        return failed(
            reason(code, v["message"].as_str().unwrap_or("")),
            excerpt(body),
        );
    }
    let d = &v["data"];
    match d["status"].as_str() {
        Some("in_queue") => progress(TaskStatus::Queued, None, None),
        Some("generating") => progress(TaskStatus::InProgress, None, None),
        Some("done") => match nonempty(&d["video_url"]) {
            Some(url) => progress(
                TaskStatus::Completed,
                None,
                Some(result(Some(url), None, None, None)),
            ),
            None => failed(
                "The upstream finished without a video; it was refunded.",
                excerpt(body),
            ),
        },
        Some("not_found") => lost(excerpt(body)),
        Some("expired") => failed(
            "The upstream's task expired before its video was collected; it was refunded.",
            excerpt(body),
        ),
        _ => Polled::Retry(format!("unknown status: {}", excerpt(body))),
    }
}
