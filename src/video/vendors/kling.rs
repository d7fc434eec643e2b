//! Kling's video API, as the「Kling AI」API Specification describes it
//! (app.klingai.com/global/dev/document-api, "Video Generation"):
//!
//! - `POST /v1/videos/text2video` and `/v1/videos/image2video`, JSON: `model_name`,
//!   `prompt`, `duration` (the string `"5"` or `"10"`), `aspect_ratio` (`16:9`, `9:16`,
//!   `1:1`; text-to-video only, an image keeps its own), `image` (a URL, or Base64 "without
//!   any prefix such as data:image/png;base64,"), and options such as `negative_prompt`,
//!   `cfg_scale`, `mode`, `camera_control`. No `n`, frame rate or seed.
//! - Every answer is `{code, message, request_id, data}`, `code` 0 on success; the
//!   submission's `data` holds `task_id` and `task_status`.
//! - `GET /v1/videos/{text2video|image2video}/{task_id}`: `data.task_status` is
//!   `submitted`, `processing`, `succeed` or `failed` (then `task_status_msg` says why);
//!   a finished task lists `data.task_result.videos[] {id, url, duration}`, the duration
//!   a string of seconds.
//! - Errors are an HTTP status with a `code`: 401 for the token (1000–1004), 429 for
//!   account and rate limits (1100–1304), 5xx for the server (5000–5002).

use super::{
    excerpt, failed, image_base64, lost, nonempty, one_video, pick_ratio, pick_seconds, progress,
    result, seconds_of, Call, Plan, Polled, Submitted, Unfit,
};
use crate::store::tasks::{TaskRecord, TaskStatus};
use crate::video::job::{seconds_text, Image, VideoJob};
use serde_json::{json, Map, Value};

const SECONDS: &[f64] = &[5.0, 10.0];
const RATIOS: &[(&str, u32, u32)] = &[("16:9", 16, 9), ("9:16", 9, 16), ("1:1", 1, 1)];
/// Options a client may give (at the top level or in 4.12's `metadata`) that Kling takes
/// as they are. Not `callback_url` (the gateway polls; a callback would tell a third
/// party) nor `external_task_id` (unique per vendor account, not per client).
const OPTIONS: &[&str] = &[
    "negative_prompt",
    "cfg_scale",
    "mode",
    "camera_control",
    "image_tail",
    "static_mask",
    "dynamic_masks",
];

pub fn plan(job: &VideoJob, default_seconds: f64) -> Result<Plan, Unfit> {
    one_video(job)?;
    let seconds = pick_seconds(SECONDS, job, default_seconds)?;
    let frame = pick_ratio(RATIOS, job)?;
    Ok(Plan { seconds, frame })
}

pub fn submit(job: &VideoJob, plan: &Plan, model: &str) -> (Call, String) {
    let mut body = Map::new();
    body.insert("model_name".into(), json!(model));
    body.insert("prompt".into(), json!(job.prompt));
    body.insert("duration".into(), json!(seconds_text(plan.seconds)));
    let kind = match &job.image {
        Some(image) => {
            let value = match image {
                Image::Url(u) => u.clone(),
                bytes => image_base64(bytes).unwrap_or_default(),
            };
            body.insert("image".into(), json!(value));
            "image2video"
        }
        None => {
            if let Some(ratio) = plan.frame {
                body.insert("aspect_ratio".into(), json!(ratio));
            }
            "text2video"
        }
    };
    let metadata = job.extra.get("metadata").and_then(Value::as_object);
    for name in OPTIONS {
        let given = job
            .extra
            .get(*name)
            .or_else(|| metadata.and_then(|m| m.get(*name)));
        if let Some(v) = given.filter(|v| !v.is_null()) {
            body.insert((*name).into(), v.clone());
        }
    }
    (
        Call::json(format!("/v1/videos/{kind}"), &Value::Object(body)),
        kind.to_string(),
    )
}

pub fn submitted(v: &Value) -> Submitted {
    if v["code"].as_i64() != Some(0) {
        return Submitted::Unreadable;
    }
    match nonempty(&v["data"]["task_id"]) {
        Some(id) => Submitted::Task(id),
        None => Submitted::Unreadable,
    }
}

pub fn poll(t: &TaskRecord) -> Call {
    let kind = if t.upstream_kind.is_empty() {
        "text2video"
    } else {
        &t.upstream_kind
    };
    Call::get(format!("/v1/videos/{kind}/{}", t.upstream_id))
}

pub fn read_poll(status: u16, body: &[u8]) -> Polled {
    if status == 404 {
        return lost(excerpt(body));
    }
    // Token, account and rate-limit refusals and server errors pass: the task itself
    // is not known to have failed.
    if !(200..300).contains(&status) {
        return Polled::Retry(format!("HTTP {status}: {}", excerpt(body)));
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Polled::Retry(format!("not JSON: {}", excerpt(body)));
    };
    if v["code"].as_i64() != Some(0) {
        return Polled::Retry(format!("code {}: {}", v["code"], excerpt(body)));
    }
    let d = &v["data"];
    match d["task_status"].as_str() {
        Some("submitted") => progress(TaskStatus::Queued, None, None),
        Some("processing") => progress(TaskStatus::InProgress, None, None),
        Some("succeed") => {
            let video = &d["task_result"]["videos"][0];
            match nonempty(&video["url"]) {
                Some(url) => progress(
                    TaskStatus::Completed,
                    None,
                    Some(result(
                        Some(url),
                        seconds_of(&video["duration"]),
                        None,
                        None,
                    )),
                ),
                None => failed(
                    "The upstream finished without a video; it was refunded.",
                    excerpt(body),
                ),
            }
        }
        Some("failed") => failed(
            "The upstream could not generate this video; it was refunded.",
            d["task_status_msg"].as_str().unwrap_or_default(),
        ),
        _ => Polled::Retry(format!("unknown task_status: {}", excerpt(body))),
    }
}
