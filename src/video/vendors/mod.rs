//! The three video APIs a channel can speak, as pure functions: whether a [`VideoJob`] can
//! be expressed to the vendor at all (decided before anything is reserved), the request
//! that submits it, the one that polls the task, how each answer reads, and where the
//! video is fetched. No I/O here; `video::service` moves the bytes.
//!
//! - `openai` ([`openai`]): the OpenAI videos API.
//! - `video-a` ([`kling`]): Kling's video API.
//! - `video-b` ([`jimeng`]): Jimeng video generation on Volcengine's visual API.
//!
//! Each module cites the reference it follows. The signing both task vendors require is
//! the channel's (`channels::credentials`): it happens when the request is sent.

mod jimeng;
mod kling;
mod openai;

use super::job::{Image, VideoJob};
use crate::channels::ChannelProtocol;
use crate::store::tasks::{TaskRecord, TaskResult, TaskStatus};
use base64::Engine;
use bytes::Bytes;
use serde_json::Value;

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
    /// A URL the upstream gave (its storage host or CDN).
    Url(String),
}

/// How a job goes to one vendor: what it was checked to be able to express.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// Seconds asked of the upstream: what is reserved, and the most that is billed.
    pub seconds: f64,
    /// The frame in the vendor's terms (`WxH`, or an aspect ratio); `None`: its default.
    pub frame: Option<&'static str>,
}

/// Why a job cannot be expressed to a vendor: the 400 if no channel can take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    pub param: &'static str,
    pub message: String,
}

/// What a submission answer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// The upstream's task id.
    Task(String),
    /// Refused in a 2xx answer (a vendor `code`): as if with this HTTP status.
    Refused(u16),
    /// Not the vendor's answer at all.
    Unreadable,
}

/// A task that is still on its way, or done.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub status: TaskStatus,
    pub progress: Option<u8>,
    pub result: Option<TaskResult>,
}

/// A task the upstream will never finish: what the client is told, and the vendor's
/// own words for the operator's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub detail: String,
}

/// What a status answer means for the task.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled {
    Progress(Progress),
    Failed(Failure),
    /// Nothing to act on now (rate limit, server error, unreadable): ask again later.
    Retry(String),
}

/// Whether, and how, `job` can be sent to this vendor. `default_seconds`: the length
/// assumed when the job names none (the vendor gets the nearest length it takes).
pub fn plan(
    protocol: ChannelProtocol,
    job: &VideoJob,
    default_seconds: f64,
) -> Result<Plan, Unfit> {
    match protocol {
        ChannelProtocol::OpenAi => openai::plan(job, default_seconds),
        ChannelProtocol::VideoA => kling::plan(job, default_seconds),
        ChannelProtocol::VideoB => jimeng::plan(job, default_seconds),
        ChannelProtocol::Anthropic
        | ChannelProtocol::Gemini
        | ChannelProtocol::DashScope
        | ChannelProtocol::Vertex => Err(Unfit {
            param: "model",
            message: "This model is not served for video.".into(),
        }),
    }
}

/// The request that submits `job` as planned (model renamed to `model`), and the detail
/// the task must remember to be polled (`text2video` or `image2video` for Kling).
pub fn submit(
    protocol: ChannelProtocol,
    job: &VideoJob,
    plan: &Plan,
    model: &str,
) -> Option<(Call, String)> {
    match protocol {
        ChannelProtocol::OpenAi => Some((openai::submit(job, plan, model), String::new())),
        ChannelProtocol::VideoA => Some(kling::submit(job, plan, model)),
        ChannelProtocol::VideoB => Some((jimeng::submit(job, plan, model), String::new())),
        ChannelProtocol::Anthropic
        | ChannelProtocol::Gemini
        | ChannelProtocol::DashScope
        | ChannelProtocol::Vertex => None,
    }
}

/// Reads a 2xx submission answer.
pub fn submitted(protocol: ChannelProtocol, body: &[u8]) -> Submitted {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Submitted::Unreadable;
    };
    match protocol {
        ChannelProtocol::OpenAi => openai::submitted(&v),
        ChannelProtocol::VideoA => kling::submitted(&v),
        ChannelProtocol::VideoB => jimeng::submitted(&v),
        ChannelProtocol::Anthropic
        | ChannelProtocol::Gemini
        | ChannelProtocol::DashScope
        | ChannelProtocol::Vertex => Submitted::Unreadable,
    }
}

/// The request that asks the upstream how a task is doing.
pub fn poll(protocol: ChannelProtocol, t: &TaskRecord, model: &str) -> Call {
    match protocol {
        ChannelProtocol::VideoA => kling::poll(t),
        ChannelProtocol::VideoB => jimeng::poll(t, model),
        ChannelProtocol::OpenAi
        | ChannelProtocol::Anthropic
        | ChannelProtocol::Gemini
        | ChannelProtocol::DashScope
        | ChannelProtocol::Vertex => openai::poll(t),
    }
}

/// Reads a status answer of any HTTP status.
pub fn read_poll(protocol: ChannelProtocol, status: u16, body: &[u8]) -> Polled {
    match protocol {
        ChannelProtocol::VideoA => kling::read_poll(status, body),
        ChannelProtocol::VideoB => jimeng::read_poll(status, body),
        ChannelProtocol::OpenAi
        | ChannelProtocol::Anthropic
        | ChannelProtocol::Gemini
        | ChannelProtocol::DashScope
        | ChannelProtocol::Vertex => openai::read_poll(status, body),
    }
}

/// Where the finished video of `t` is fetched. `variant`: the videos API's
/// `?variant=` (`video`, `thumbnail`, `spritesheet`), passed through.
pub fn content(protocol: ChannelProtocol, t: &TaskRecord, variant: Option<&str>) -> Option<Source> {
    match protocol {
        ChannelProtocol::OpenAi => Some(openai::content(t, variant)),
        _ => t
            .result
            .as_ref()
            .and_then(|r| r.upstream_url.clone())
            .map(Source::Url),
    }
}

// Shared by the vendor modules.

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn nonempty(v: &Value) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// Seconds as a number or a numeric string (`"5.042"`).
fn seconds_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|s: &f64| s.is_finite() && *s >= 0.0)
}

fn progress_of(v: &Value) -> Option<u8> {
    v.as_u64().map(|p| p.min(100) as u8)
}

/// The first 512 bytes of an answer, for the operator's log.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned()
}

fn failed(message: impl Into<String>, detail: impl Into<String>) -> Polled {
    Polled::Failed(Failure {
        message: message.into(),
        detail: detail.into(),
    })
}

/// The upstream says it does not know the task.
fn lost(detail: impl Into<String>) -> Polled {
    failed(
        "The upstream no longer knows this task; it was refunded.",
        detail,
    )
}

/// `n` above 1: none of the three APIs makes several videos in one task, and billing
/// `n` videos for one would overcharge.
fn one_video(job: &VideoJob) -> Result<(), Unfit> {
    if job.n == 1 {
        return Ok(());
    }
    Err(Unfit {
        param: "n",
        message: "`n` must be 1 for this model: its upstream makes one video per task.".into(),
    })
}

/// `allowed` in words: `4, 8 or 12`.
fn listing(allowed: &[f64]) -> String {
    let words: Vec<String> = allowed
        .iter()
        .map(|s| super::job::seconds_text(*s))
        .collect();
    match words.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => words.join(""),
    }
}

/// The length to ask for: the one the job names, if the vendor takes it; else the
/// longest it takes within `default` (the shortest, if none is).
fn pick_seconds(allowed: &[f64], job: &VideoJob, default: f64) -> Result<f64, Unfit> {
    let takes = |s: f64| allowed.iter().copied().find(|a| (a - s).abs() < 1e-9);
    match job.seconds {
        Some(s) => takes(s).ok_or_else(|| Unfit {
            param: job.names.seconds,
            message: format!(
                "`{}` must be {} seconds for this model.",
                job.names.seconds,
                listing(allowed)
            ),
        }),
        None => Ok(allowed
            .iter()
            .copied()
            .filter(|a| *a <= default + 1e-9)
            .fold(None, |best: Option<f64>, a| {
                Some(best.map_or(a, |b| b.max(a)))
            })
            .or_else(|| allowed.iter().copied().reduce(f64::min))
            .unwrap_or(default)),
    }
}

/// Width and height, when the job names a frame; one without the other cannot be
/// expressed to any of the vendors.
fn frame_size(job: &VideoJob) -> Result<Option<(u32, u32)>, Unfit> {
    match (job.width, job.height) {
        (None, None) => Ok(None),
        (Some(w), Some(h)) => Ok(Some((w, h))),
        _ => Err(Unfit {
            param: job.names.size,
            message: "`width` and `height` must be given together for this model.".into(),
        }),
    }
}

/// The aspect ratio among `allowed` (name, width, height) that the frame has, within 1 %.
fn pick_ratio(
    allowed: &[(&'static str, u32, u32)],
    job: &VideoJob,
) -> Result<Option<&'static str>, Unfit> {
    let Some((w, h)) = frame_size(job)? else {
        return Ok(None);
    };
    let r = w as f64 / h as f64;
    allowed
        .iter()
        .find(|(_, aw, ah)| ((*aw as f64 / *ah as f64) / r - 1.0).abs() < 0.01)
        .map(|(name, _, _)| Some(*name))
        .ok_or_else(|| {
            let names: Vec<&str> = allowed.iter().map(|(n, _, _)| *n).collect();
            Unfit {
                param: job.names.size,
                message: format!(
                    "The frame {w}x{h} must have an aspect ratio of {} for this model.",
                    names.join(", ")
                ),
            }
        })
}

/// A completed task's result.
fn result(
    url: Option<String>,
    duration: Option<f64>,
    width: Option<u32>,
    height: Option<u32>,
) -> TaskResult {
    TaskResult {
        upstream_url: url,
        format: Some("mp4".into()),
        duration,
        fps: None,
        width,
        height,
        seed: None,
    }
}

fn progress(status: TaskStatus, progress: Option<u8>, result: Option<TaskResult>) -> Polled {
    Polled::Progress(Progress {
        status,
        progress,
        result,
    })
}

/// The image as bare Base64 (the task APIs take it without a `data:` prefix).
fn image_base64(image: &Image) -> Option<String> {
    match image {
        Image::Bytes { data, .. } => Some(b64(data)),
        Image::Url(_) => None,
    }
}

#[cfg(test)]
mod tests;
