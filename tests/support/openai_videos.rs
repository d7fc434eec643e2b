//! The OpenAI videos API as its reference describes it (platform.openai.com/docs/api-reference/videos,
//! OpenAPI document 2.3.0): `POST /v1/videos` (multipart/form-data: `prompt` required,
//! `model`, `seconds` one of "4", "8", "12" (default "4"), `size` one of `720x1280`,
//! `1280x720`, `1024x1792`, `1792x1024` (default `720x1280`), `input_reference` a file),
//! `GET /v1/videos/{video_id}` (the video object: `id`, `object`, `model`, `status`
//! `queued|in_progress|completed|failed`, `progress`, `created_at`, `completed_at`,
//! `expires_at`, `seconds`, `size`, `error {code, message}`), and
//! `GET /v1/videos/{video_id}/content`. `Authorization: Bearer <key>` on every call;
//! errors in the API's `{"error": {message, type, param, code}}` envelope.
#![allow(dead_code)]

use crate::mock_upstream::{Recorded, Reply};
use crate::video_upstream::{
    after, form_file, form_text, multipart, now, split_path, video_reply, Shape, Shared, Status,
    Task, API_KEY,
};
use serde_json::{json, Value};

pub const SECONDS: &[&str] = &["4", "8", "12"];
pub const SIZES: &[&str] = &["720x1280", "1280x720", "1024x1792", "1792x1024"];

fn error(status: u16, kind: &str, param: Option<&str>, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"error": {"message": message, "type": kind, "param": param, "code": null}}),
    )
}

/// Answers the requests of this API; `None` for a path that is not its.
pub fn route(s: &Shared, r: &Recorded) -> Option<Reply> {
    let (path, query) = split_path(&r.path);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ours = matches!(
        (r.method.as_str(), segs.as_slice()),
        ("POST", ["v1", "videos"])
            | ("GET", ["v1", "videos", _])
            | ("GET", ["v1", "videos", _, "content"])
    );
    if !ours {
        return None;
    }
    if r.header("authorization") != Some(&format!("Bearer {API_KEY}")) {
        s.refuse(&r.path, "no OpenAI bearer key");
        return Some(error(
            401,
            "invalid_request_error",
            None,
            "Incorrect API key provided.",
        ));
    }
    Some(match segs.as_slice() {
        ["v1", "videos"] => create(s, r),
        ["v1", "videos", id] => retrieve(s, id),
        [_, _, id, _] => content(s, id, query),
        _ => unreachable!("matched above"),
    })
}

fn create(s: &Shared, r: &Recorded) -> Reply {
    if multipart(r).is_none() {
        return error(
            400,
            "invalid_request_error",
            None,
            "Expected multipart/form-data.",
        );
    }
    let Some(prompt) = form_text(r, "prompt") else {
        return error(
            400,
            "invalid_request_error",
            Some("prompt"),
            "Missing required parameter: 'prompt'.",
        );
    };
    let model = form_text(r, "model").unwrap_or_else(|| "sora-2".into());
    let seconds = form_text(r, "seconds").unwrap_or_else(|| "4".into());
    if !SECONDS.contains(&seconds.as_str()) {
        return error(
            400,
            "invalid_request_error",
            Some("seconds"),
            &format!("Invalid value: '{seconds}'. Supported values are: '4', '8', and '12'."),
        );
    }
    let size = form_text(r, "size").unwrap_or_else(|| "720x1280".into());
    if !SIZES.contains(&size.as_str()) {
        return error(
            400,
            "invalid_request_error",
            Some("size"),
            &format!("Invalid value: '{size}'. Supported values are: '720x1280', '1280x720', '1024x1792', and '1792x1024'."),
        );
    }
    if let Some(f) = form_file(r, "input_reference") {
        if f.data.is_empty() {
            return error(
                400,
                "invalid_request_error",
                Some("input_reference"),
                "The reference file is empty.",
            );
        }
    } else if form_text(r, "input_reference").is_some() {
        return error(
            400,
            "invalid_request_error",
            Some("input_reference"),
            "'input_reference' must be a file.",
        );
    }
    let t = s.create(
        Shape::OpenAi,
        "video",
        &model,
        &prompt,
        seconds.parse().unwrap(),
        &size,
    );
    Reply::json(200, object(&t, Status::Queued))
}

fn retrieve(s: &Shared, id: &str) -> Reply {
    let Some(p) = s.poll(id, Shape::OpenAi, None) else {
        return not_found(id);
    };
    let reply = match p.status {
        Status::Vanished => not_found(id),
        Status::Transient => error(
            429,
            "requests",
            None,
            "Rate limit reached for requests. Please try again in 1s.",
        ),
        st => Reply::json(200, object(&p.task, st)),
    };
    after(p.delay, reply)
}

fn not_found(id: &str) -> Reply {
    error(
        404,
        "invalid_request_error",
        None,
        &format!("Video with id '{id}' not found."),
    )
}

fn content(s: &Shared, id: &str, query: &str) -> Reply {
    if !query.is_empty() && query != "variant=video" {
        return error(
            400,
            "invalid_request_error",
            Some("variant"),
            "Only the video variant exists here.",
        );
    }
    match s.peek(id) {
        Some((t, Status::Completed)) if t.shape == Shape::OpenAi => video_reply(),
        Some(_) => error(
            404,
            "invalid_request_error",
            None,
            "Video is not ready yet.",
        ),
        None => not_found(id),
    }
}

/// The video object.
fn object(t: &Task, s: Status) -> Value {
    let (status, progress) = match s {
        Status::Queued => ("queued", 0),
        Status::InProgress | Status::Hang | Status::Transient => ("in_progress", 50),
        Status::Completed => ("completed", 100),
        Status::Failed | Status::QuietlyFailed | Status::Expired | Status::Vanished => {
            ("failed", 50)
        }
    };
    let mut v = json!({
        "id": t.id, "object": "video", "model": t.model, "status": status,
        "progress": progress, "created_at": t.created_at, "completed_at": null,
        "expires_at": null, "seconds": crate::video_upstream::seconds_text(t.seconds),
        "size": t.size, "remixed_from_video_id": null, "error": null,
    });
    if s == Status::Completed {
        v["completed_at"] = json!(now());
        v["expires_at"] = json!(now() + 3600);
    }
    if status == "failed" {
        v["error"] = json!({"code": "moderation_blocked",
            "message": "blocked by filter on gpu-node-7.internal (upstream-video-key)"});
    }
    v
}
