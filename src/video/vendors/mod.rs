//! The three upstream shapes a video channel can speak, as pure functions: the request
//! that submits a [`VideoJob`], the one that polls a task, the one that fetches its
//! video, and how each answer reads. No I/O here; `video::service` moves the bytes.
//!
//! - `openai`: `POST /v1/videos` (multipart), `GET /v1/videos/{id}`,
//!   `GET /v1/videos/{id}/content`.
//! - `video-a`: `POST /v1/videos/{text2video|image2video}` (JSON of spec 4.12),
//!   `GET /v1/videos/{kind}/{id}` (the record of spec 2.3), the video at its `url`.
//! - `video-b`: `POST /?Action=CVSync2AsyncSubmitTask&Version=..` and
//!   `POST /?Action=CVSync2AsyncGetResult&Version=..`, answers `{code, message, data}`
//!   with `code` 10000 for success; the video at `data.video_url`.

use super::job::{seconds_text, Image, VideoJob};
use crate::channels::ChannelProtocol;
use crate::store::tasks::{TaskRecord, TaskResult, TaskStatus};
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};

/// The API version sent to `video-b` upstreams.
pub const VIDEO_B_VERSION: &str = "2022-08-31";
/// `code` of a successful `video-b` answer.
pub const VIDEO_B_OK: i64 = 10000;

/// One request to an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    /// Path and query after the channel's prefix.
    pub path: String,
    pub content_type: String,
    pub body: Bytes,
}

impl Call {
    fn json(path: String, body: &Value) -> Call {
        Call {
            method: "POST",
            path,
            content_type: "application/json".into(),
            body: Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
        }
    }

    fn get(path: String) -> Call {
        Call {
            method: "GET",
            path,
            content_type: String::new(),
            body: Bytes::new(),
        }
    }
}

/// Where a finished video is fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A path on the task's channel.
    Channel(String),
    /// A URL the upstream gave (often a storage host of its own).
    Url(String),
}

/// What a status answer says.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub status: TaskStatus,
    pub progress: Option<u8>,
    pub result: Option<TaskResult>,
    /// The upstream's own words on a failure (for the operator's log only).
    pub failure: Option<String>,
}

/// Whether the job can be sent to this upstream shape as it is.
pub fn accepts(protocol: ChannelProtocol, job: &VideoJob) -> bool {
    match protocol {
        // The videos API takes the reference only as an uploaded file.
        ChannelProtocol::OpenAi => !matches!(job.image, Some(Image::Url(_))),
        ChannelProtocol::VideoA | ChannelProtocol::VideoB => true,
        ChannelProtocol::Anthropic | ChannelProtocol::Gemini => false,
    }
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A multipart/form-data body.
struct FormBody {
    boundary: String,
    buf: Vec<u8>,
}

impl FormBody {
    fn new() -> FormBody {
        let boundary = format!(
            "----mg{:016x}{:016x}",
            crate::ids::fast_random(),
            crate::ids::fast_random()
        );
        FormBody {
            boundary,
            buf: Vec::new(),
        }
    }

    fn field(&mut self, name: &str, value: &str) {
        self.buf.extend_from_slice(
            format!(
                "--{}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n",
                self.boundary
            )
            .as_bytes(),
        );
    }

    fn file(&mut self, name: &str, filename: &str, content_type: &str, data: &[u8]) {
        let filename = filename.replace(['"', '\r', '\n'], "_");
        self.buf.extend_from_slice(
            format!(
                "--{}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: {content_type}\r\n\r\n",
                self.boundary
            )
            .as_bytes(),
        );
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(b"\r\n");
    }

    fn finish(mut self, path: String) -> Call {
        self.buf
            .extend_from_slice(format!("--{}--\r\n", self.boundary).as_bytes());
        Call {
            method: "POST",
            path,
            content_type: format!("multipart/form-data; boundary={}", self.boundary),
            body: Bytes::from(self.buf),
        }
    }
}

/// The request that submits `job` (with the model renamed to `model`), and the
/// upstream-shape detail the task must remember to be polled (`text2video` or
/// `image2video` for `video-a`; empty otherwise). `seconds`: the duration the gateway
/// reserved for, sent when the request named none so the upstream cannot make more.
pub fn submit(
    protocol: ChannelProtocol,
    job: &VideoJob,
    model: &str,
    seconds: f64,
) -> Option<(Call, String)> {
    if !accepts(protocol, job) {
        return None;
    }
    match protocol {
        ChannelProtocol::OpenAi => {
            let mut f = FormBody::new();
            f.field("model", model);
            f.field("prompt", &job.prompt);
            f.field("seconds", &seconds_text(seconds));
            if let Some(size) = job.size() {
                f.field("size", &size);
            }
            if let Some(Image::Bytes {
                data,
                content_type,
                filename,
            }) = &job.image
            {
                f.file("input_reference", filename, content_type, data);
            }
            Some((f.finish("/v1/videos".into()), String::new()))
        }
        ChannelProtocol::VideoA => {
            let mut body = Map::new();
            body.insert("model".into(), json!(model));
            body.insert("prompt".into(), json!(job.prompt));
            let kind = match &job.image {
                Some(Image::Url(u)) => {
                    body.insert("image".into(), json!(u));
                    "image2video"
                }
                Some(Image::Bytes { data, .. }) => {
                    body.insert("image".into(), json!(b64(data)));
                    "image2video"
                }
                None => "text2video",
            };
            put_shape(&mut body, job, seconds);
            if job.n != 1 {
                body.insert("n".into(), json!(job.n));
            }
            for (k, v) in &job.extra {
                body.entry(k.clone()).or_insert_with(|| v.clone());
            }
            Some((
                Call::json(format!("/v1/videos/{kind}"), &Value::Object(body)),
                kind.to_string(),
            ))
        }
        ChannelProtocol::VideoB => {
            let mut body = Map::new();
            body.insert("req_key".into(), json!(model));
            body.insert("prompt".into(), json!(job.prompt));
            match &job.image {
                Some(Image::Bytes { data, .. }) => {
                    body.insert("binary_data_base64".into(), json!([b64(data)]));
                }
                Some(Image::Url(u)) => {
                    body.insert("image_urls".into(), json!([u]));
                }
                None => {}
            }
            put_shape(&mut body, job, seconds);
            Some((
                Call::json(
                    format!("/?Action=CVSync2AsyncSubmitTask&Version={VIDEO_B_VERSION}"),
                    &Value::Object(body),
                ),
                String::new(),
            ))
        }
        ChannelProtocol::Anthropic | ChannelProtocol::Gemini => None,
    }
}

/// Duration, frame size, frame rate and seed, as both task-style APIs name them.
fn put_shape(body: &mut Map<String, Value>, job: &VideoJob, seconds: f64) {
    body.insert("duration".into(), json!(seconds));
    for (k, v) in [
        ("width", job.width),
        ("height", job.height),
        ("fps", job.fps),
    ] {
        if let Some(v) = v {
            body.insert(k.into(), json!(v));
        }
    }
    if let Some(s) = job.seed {
        body.insert("seed".into(), json!(s));
    }
}

fn nonempty(v: &Value) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The upstream's task id from a successful (2xx) submission answer.
pub fn submitted(protocol: ChannelProtocol, body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match protocol {
        ChannelProtocol::OpenAi => nonempty(&v["id"]),
        ChannelProtocol::VideoA => nonempty(&v["task_id"]).or_else(|| nonempty(&v["id"])),
        ChannelProtocol::VideoB => {
            if v["code"].as_i64() != Some(VIDEO_B_OK) {
                return None;
            }
            nonempty(&v["data"]["task_id"])
        }
        ChannelProtocol::Anthropic | ChannelProtocol::Gemini => None,
    }
}

/// The request that asks the upstream how a task is doing.
pub fn poll(protocol: ChannelProtocol, t: &TaskRecord, model: &str) -> Call {
    match protocol {
        ChannelProtocol::VideoA => {
            let kind = if t.upstream_kind.is_empty() {
                "text2video"
            } else {
                &t.upstream_kind
            };
            Call::get(format!("/v1/videos/{kind}/{}", t.upstream_id))
        }
        ChannelProtocol::VideoB => Call::json(
            format!("/?Action=CVSync2AsyncGetResult&Version={VIDEO_B_VERSION}"),
            &json!({"req_key": model, "task_id": t.upstream_id}),
        ),
        ChannelProtocol::OpenAi | ChannelProtocol::Anthropic | ChannelProtocol::Gemini => {
            Call::get(format!("/v1/videos/{}", t.upstream_id))
        }
    }
}

fn status_word(s: &str) -> Option<TaskStatus> {
    match s.to_ascii_lowercase().as_str() {
        "queued" | "pending" | "submitted" | "in_queue" | "waiting" => Some(TaskStatus::Queued),
        "in_progress" | "processing" | "running" | "generating" => Some(TaskStatus::InProgress),
        "completed" | "succeeded" | "success" | "done" => Some(TaskStatus::Completed),
        "failed" | "failure" | "error" | "cancelled" | "canceled" | "expired" | "not_found" => {
            Some(TaskStatus::Failed)
        }
        _ => None,
    }
}

fn num_u32(v: &Value) -> Option<u32> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .and_then(|n| u32::try_from(n).ok())
}

fn seconds_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .filter(|s: &f64| s.is_finite() && *s >= 0.0)
}

fn size_of(v: &Value) -> (Option<u32>, Option<u32>) {
    v.as_str()
        .and_then(|s| s.split_once('x'))
        .map(|(w, h)| (w.parse().ok(), h.parse().ok()))
        .unwrap_or((None, None))
}

fn failure_text(v: &Value) -> Option<String> {
    let e = &v["error"];
    nonempty(&e["message"])
        .or_else(|| nonempty(e))
        .or_else(|| nonempty(&v["message"]))
}

/// Reads a 2xx status answer; `None` when it is not the shape's answer at all.
pub fn progress(protocol: ChannelProtocol, body: &[u8]) -> Option<Progress> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match protocol {
        ChannelProtocol::VideoB => {
            if v["code"].as_i64() != Some(VIDEO_B_OK) {
                return Some(Progress {
                    status: TaskStatus::Failed,
                    progress: None,
                    result: None,
                    failure: Some(format!(
                        "code {}: {}",
                        v["code"],
                        v["message"].as_str().unwrap_or("")
                    )),
                });
            }
            let d = &v["data"];
            let mut status = status_word(d["status"].as_str()?)?;
            let url = nonempty(&d["video_url"]).or_else(|| nonempty(&d["url"]));
            if status == TaskStatus::Completed && url.is_none() {
                status = TaskStatus::Failed;
            }
            let result = (status == TaskStatus::Completed).then(|| TaskResult {
                upstream_url: url,
                format: Some("mp4".into()),
                duration: seconds_of(&d["duration"]),
                fps: num_u32(&d["fps"]),
                width: num_u32(&d["width"]),
                height: num_u32(&d["height"]),
                seed: d["seed"].as_i64(),
            });
            Some(Progress {
                status,
                progress: d["progress"].as_u64().map(|p| p.min(100) as u8),
                result,
                failure: (status == TaskStatus::Failed).then(|| format!("status {}", d["status"])),
            })
        }
        ChannelProtocol::VideoA => {
            let mut status = status_word(v["status"].as_str()?)?;
            let url = nonempty(&v["url"]).or_else(|| nonempty(&v["video_url"]));
            if status == TaskStatus::Completed && url.is_none() {
                status = TaskStatus::Failed;
            }
            let m = &v["metadata"];
            let result = (status == TaskStatus::Completed).then(|| TaskResult {
                upstream_url: url,
                format: nonempty(&v["format"]).or(Some("mp4".into())),
                duration: seconds_of(&m["duration"]),
                fps: num_u32(&m["fps"]),
                width: num_u32(&m["width"]),
                height: num_u32(&m["height"]),
                seed: m["seed"].as_i64(),
            });
            Some(Progress {
                status,
                progress: v["progress"].as_u64().map(|p| p.min(100) as u8),
                result,
                failure: (status == TaskStatus::Failed)
                    .then(|| failure_text(&v).unwrap_or_else(|| "completed without a url".into())),
            })
        }
        ChannelProtocol::OpenAi | ChannelProtocol::Anthropic | ChannelProtocol::Gemini => {
            let status = status_word(v["status"].as_str()?)?;
            let (width, height) = size_of(&v["size"]);
            let result = (status == TaskStatus::Completed).then(|| TaskResult {
                upstream_url: None,
                format: Some("mp4".into()),
                duration: seconds_of(&v["seconds"]),
                fps: None,
                width,
                height,
                seed: None,
            });
            Some(Progress {
                status,
                progress: v["progress"].as_u64().map(|p| p.min(100) as u8),
                result,
                failure: (status == TaskStatus::Failed)
                    .then(|| failure_text(&v).unwrap_or_default()),
            })
        }
    }
}

/// Where the finished video of `t` is fetched. `variant`: the videos API's
/// `?variant=` (`video`, `thumbnail`, `spritesheet`), passed through.
pub fn content(protocol: ChannelProtocol, t: &TaskRecord, variant: Option<&str>) -> Option<Source> {
    match protocol {
        ChannelProtocol::OpenAi => {
            let mut path = format!("/v1/videos/{}/content", t.upstream_id);
            if let Some(v) =
                variant.filter(|v| v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            {
                path.push_str("?variant=");
                path.push_str(v);
            }
            Some(Source::Channel(path))
        }
        _ => t
            .result
            .as_ref()
            .and_then(|r| r.upstream_url.clone())
            .map(Source::Url),
    }
}

#[cfg(test)]
#[path = "vendors_tests.rs"]
mod tests;
