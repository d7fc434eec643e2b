//! The OpenAI videos API (platform.openai.com/docs/api-reference/videos; OpenAPI
//! document 2.3.0): `POST /v1/videos` as multipart/form-data with `model`, `prompt`,
//! `seconds` (one of "4", "8", "12"; default "4"), `size` (one of `720x1280`,
//! `1280x720`, `1024x1792`, `1792x1024`) and `input_reference` (a file);
//! `GET /v1/videos/{id}` answers the video object (`status` `queued`, `in_progress`,
//! `completed` or `failed` with `error {code, message}`; `progress`; `seconds`; `size`);
//! `GET /v1/videos/{id}/content[?variant=]` is the video.

use super::{
    excerpt, failed, frame_size, lost, nonempty, one_video, pick_seconds, progress, progress_of,
    result, seconds_of, Call, Plan, Polled, Source, Submitted, Unfit,
};
use crate::store::tasks::{TaskRecord, TaskStatus};
use crate::video::job::{seconds_text, Image, VideoJob};
use bytes::Bytes;
use serde_json::Value;

const SECONDS: &[f64] = &[4.0, 8.0, 12.0];
const SIZES: &[&str] = &["720x1280", "1280x720", "1024x1792", "1792x1024"];

pub fn plan(job: &VideoJob, default_seconds: f64) -> Result<Plan, Unfit> {
    one_video(job)?;
    if let Some(Image::Url(_)) = job.image {
        // The API takes the reference only as an uploaded file.
        return Err(Unfit {
            param: job.names.image,
            message: "This model takes its reference image as a file or Base64 data, not as a URL."
                .into(),
        });
    }
    let seconds = pick_seconds(SECONDS, job, default_seconds)?;
    let frame = match frame_size(job)? {
        None => None,
        Some((w, h)) => {
            let size = format!("{w}x{h}");
            let known = SIZES.iter().find(|s| **s == size).copied();
            Some(known.ok_or_else(|| Unfit {
                param: job.names.size,
                message: format!(
                    "The frame {size} is not one this model makes: {}.",
                    SIZES.join(", ")
                ),
            })?)
        }
    };
    Ok(Plan { seconds, frame })
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

pub fn submit(job: &VideoJob, plan: &Plan, model: &str) -> Call {
    let mut f = FormBody::new();
    f.field("model", model);
    f.field("prompt", &job.prompt);
    f.field("seconds", &seconds_text(plan.seconds));
    if let Some(size) = plan.frame {
        f.field("size", size);
    }
    if let Some(Image::Bytes {
        data,
        content_type,
        filename,
    }) = &job.image
    {
        f.file("input_reference", filename, content_type, data);
    }
    f.finish("/v1/videos".into())
}

pub fn submitted(v: &Value) -> Submitted {
    match nonempty(&v["id"]) {
        Some(id) => Submitted::Task(id),
        None => Submitted::Unreadable,
    }
}

pub fn poll(t: &TaskRecord) -> Call {
    Call::get(format!("/v1/videos/{}", t.upstream_id))
}

fn size_of(v: &Value) -> (Option<u32>, Option<u32>) {
    v.as_str()
        .and_then(|s| s.split_once('x'))
        .map(|(w, h)| (w.parse().ok(), h.parse().ok()))
        .unwrap_or((None, None))
}

pub fn read_poll(status: u16, body: &[u8]) -> Polled {
    if status == 404 || status == 410 {
        return lost(excerpt(body));
    }
    if !(200..300).contains(&status) {
        return Polled::Retry(format!("HTTP {status}: {}", excerpt(body)));
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Polled::Retry(format!("not JSON: {}", excerpt(body)));
    };
    let state = match v["status"].as_str() {
        Some("queued") => TaskStatus::Queued,
        Some("in_progress") => TaskStatus::InProgress,
        Some("completed") => TaskStatus::Completed,
        Some("failed") => {
            // The error code is the API's own word (`moderation_blocked`, ...); its
            // message is free text and stays in the log.
            let code = nonempty(&v["error"]["code"]).filter(|c| {
                c.len() <= 64 && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            });
            let message = match code {
                Some(c) => {
                    format!("The upstream could not generate this video ({c}); it was refunded.")
                }
                None => "The upstream could not generate this video; it was refunded.".into(),
            };
            return failed(message, excerpt(body));
        }
        _ => return Polled::Retry(format!("unknown status: {}", excerpt(body))),
    };
    let done = (state == TaskStatus::Completed).then(|| {
        let (width, height) = size_of(&v["size"]);
        result(None, seconds_of(&v["seconds"]), width, height)
    });
    progress(state, progress_of(&v["progress"]), done)
}

pub fn content(t: &TaskRecord, variant: Option<&str>) -> Source {
    let mut path = format!("/v1/videos/{}/content", t.upstream_id);
    if let Some(v) = variant.filter(|v| v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) {
        path.push_str("?variant=");
        path.push_str(v);
    }
    Source::Channel(path)
}
