//! A video-generation upstream in the three shapes the gateway speaks to, on one server:
//! the OpenAI-style videos API (`/v1/videos`), the task-style API of "video-a"
//! (`/v1/videos/text2video|image2video`) and the `?Action=&Version=` API of "video-b".
//!
//! Tasks advance only when they are polled (a status request of their shape): poll 1
//! answers queued, poll 2 in progress, poll 3 and later completed. The prompt steers a
//! task: "fail" fails it at poll 2, "forever" keeps it in progress, "gated" keeps it in
//! progress until [`VideoUpstream::release`] and completes it at the next poll after that.
//! Every poll is logged with the time it arrived and the status it got, and may be
//! answered after a delay, so tests can prove no task is ever polled twice at once.
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The credential every request but a file download must carry.
pub const API_KEY: &str = "upstream-video-key";
/// The video-b API version this upstream accepts.
pub const B_VERSION: &str = "2022-08-31";
pub const VIDEO_LEN: usize = 256 * 1024;

/// The bytes of every video this upstream produces: an MP4 signature, then a fixed
/// pseudo-random pattern (every byte value occurs, CR/LF included).
pub fn video() -> &'static [u8] {
    static V: OnceLock<Vec<u8>> = OnceLock::new();
    V.get_or_init(|| {
        let mut v = b"\0\0\0\x18ftypmp42\0\0\0\0mp42isom".to_vec();
        let mut x: u32 = 0x1234_5678;
        while v.len() < VIDEO_LEN {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            v.push((x >> 24) as u8);
        }
        v
    })
}

/// Which of the three APIs a task was submitted through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    OpenAi,
    A,
    B,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Queued,
    InProgress,
    Completed,
    Failed,
}

/// One task as the upstream keeps it.
#[derive(Debug, Clone)]
pub struct Task {
    /// The upstream's id: `video_<n>`, `a_<n>` or `b_<n>`.
    pub id: String,
    pub shape: Shape,
    /// `video` (OpenAI-style), `text2video` / `image2video` (video-a) or `video-b`.
    pub kind: String,
    /// The model (or `req_key`) as the upstream received it.
    pub model: String,
    pub prompt: String,
    pub seconds: f64,
    pub width: u32,
    pub height: u32,
    pub created_at: i64,
    /// Status polls so far.
    pub polls: u32,
}

/// One status poll as it arrived.
#[derive(Debug, Clone)]
pub struct Poll {
    /// The upstream task id.
    pub task: String,
    pub at: Instant,
    /// What this poll answered.
    pub status: Status,
}

#[derive(Default)]
struct State {
    base: String,
    next: u64,
    tasks: HashMap<String, Task>,
    polls: Vec<Poll>,
    released: bool,
    poll_delay: Option<Duration>,
    /// Paths of requests refused for a missing or wrong credential.
    unauthorized: Vec<String>,
}

pub struct VideoUpstream {
    pub mock: MockUpstream,
    state: Arc<Mutex<State>>,
}

impl VideoUpstream {
    pub async fn start() -> VideoUpstream {
        Self::start_with(None).await
    }

    /// Every status poll is answered `delay` after it arrives.
    pub async fn start_with_poll_delay(delay: Duration) -> VideoUpstream {
        Self::start_with(Some(delay)).await
    }

    async fn start_with(poll_delay: Option<Duration>) -> VideoUpstream {
        let state = Arc::new(Mutex::new(State {
            poll_delay,
            ..State::default()
        }));
        let s = state.clone();
        let mock = MockUpstream::start(move |r| handle(&s, r)).await;
        state.lock().unwrap().base = mock.base_url();
        VideoUpstream { mock, state }
    }

    pub fn base_url(&self) -> String {
        self.mock.base_url()
    }

    /// Lets every "gated" task complete at its next poll.
    pub fn release(&self) {
        self.state.lock().unwrap().released = true;
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.mock.requests()
    }

    /// The task submissions received (of any shape, accepted or not).
    pub fn submits(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(is_submit).collect()
    }

    /// Every status poll, in arrival order.
    pub fn polls(&self) -> Vec<Poll> {
        self.state.lock().unwrap().polls.clone()
    }

    /// The polls of one upstream task, in arrival order.
    pub fn polls_of(&self, task: &str) -> Vec<Poll> {
        self.polls()
            .into_iter()
            .filter(|p| p.task == task)
            .collect()
    }

    /// All tasks, in submission order.
    pub fn tasks(&self) -> Vec<Task> {
        let mut v: Vec<Task> = self.state.lock().unwrap().tasks.values().cloned().collect();
        v.sort_by_key(|t| t.id[t.id.find('_').unwrap() + 1..].parse::<u64>().unwrap());
        v
    }

    /// The only task with this prompt.
    pub fn task_with_prompt(&self, prompt: &str) -> Task {
        let v: Vec<Task> = self
            .tasks()
            .into_iter()
            .filter(|t| t.prompt == prompt)
            .collect();
        assert_eq!(
            v.len(),
            1,
            "one upstream task with prompt {prompt:?}: {v:?}"
        );
        v[0].clone()
    }

    /// Paths of the requests refused for a missing or wrong credential.
    pub fn unauthorized(&self) -> Vec<String> {
        self.state.lock().unwrap().unauthorized.clone()
    }
}

/// Whether a request is a task submission of one of the three shapes.
pub fn is_submit(r: &Recorded) -> bool {
    let (path, query) = split_path(&r.path);
    r.method == "POST"
        && (matches!(
            path,
            "/v1/videos" | "/v1/videos/text2video" | "/v1/videos/image2video"
        ) || query_param(query, "Action").as_deref() == Some("CVSync2AsyncSubmitTask"))
}

fn split_path(p: &str) -> (&str, &str) {
    p.split_once('?').unwrap_or((p, ""))
}

pub fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The status a task shows after `t.polls` polls.
fn status_of(t: &Task, released: bool) -> Status {
    if t.polls <= 1 {
        Status::Queued
    } else if t.prompt.contains("fail") {
        Status::Failed
    } else if t.prompt.contains("forever") {
        Status::InProgress
    } else if t.prompt.contains("gated") {
        if released {
            Status::Completed
        } else {
            Status::InProgress
        }
    } else if t.polls == 2 {
        Status::InProgress
    } else {
        Status::Completed
    }
}

fn error(status: u16, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"error": {"message": message, "type": "invalid_request_error"}}),
    )
}

fn video_reply() -> Reply {
    let v = video();
    Reply::Chunked {
        status: 200,
        content_type: "video/mp4".into(),
        pieces: v.chunks(v.len().div_ceil(4)).map(<[u8]>::to_vec).collect(),
        interval: Duration::from_millis(1),
        end: End::Clean,
    }
}

fn handle(state: &Mutex<State>, r: &Recorded) -> Reply {
    let (path, query) = split_path(&r.path);
    // File downloads (video-a and video-b result URLs) need no credential.
    if r.method == "GET" {
        if let Some(file) = path.strip_prefix("/files/") {
            let st = state.lock().unwrap();
            let id = file.strip_suffix(".mp4").unwrap_or("");
            return match st.tasks.get(id) {
                Some(t) if status_of(t, st.released) == Status::Completed => video_reply(),
                _ => error(404, "no such file"),
            };
        }
    }
    if r.header("authorization") != Some(&format!("Bearer {API_KEY}")) {
        state.lock().unwrap().unauthorized.push(r.path.clone());
        return error(401, "invalid upstream credential");
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (r.method.as_str(), segs.as_slice()) {
        ("POST", ["v1", "videos"]) => openai_submit(state, r),
        ("GET", ["v1", "videos", id]) => poll(state, id, Shape::OpenAi, None),
        ("GET", ["v1", "videos", id, "content"]) => {
            let st = state.lock().unwrap();
            match st.tasks.get(*id) {
                Some(t)
                    if t.shape == Shape::OpenAi
                        && status_of(t, st.released) == Status::Completed =>
                {
                    video_reply()
                }
                Some(_) => error(404, "video is not ready"),
                None => error(404, "no such video"),
            }
        }
        ("POST", ["v1", "videos", kind @ ("text2video" | "image2video")]) => {
            a_submit(state, r, kind)
        }
        ("GET", ["v1", "videos", kind @ ("text2video" | "image2video"), id]) => {
            poll(state, id, Shape::A, Some(kind))
        }
        ("POST", [""]) => b_call(state, r, query),
        _ => error(404, "no such path"),
    }
}

/// A form part of a multipart body.
#[derive(Debug, Clone)]
pub struct Part {
    pub name: String,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub data: Vec<u8>,
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from > hay.len() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// The parts of a multipart/form-data request (binary-safe); `None` if it is not one.
pub fn multipart(r: &Recorded) -> Option<Vec<Part>> {
    let ct = r.header("content-type")?;
    if !ct.to_ascii_lowercase().starts_with("multipart/form-data") {
        return None;
    }
    let boundary = ct
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))?
        .trim_matches('"');
    let delim = format!("--{boundary}").into_bytes();
    let body = &r.body;
    let mut parts = Vec::new();
    let mut pos = find(body, &delim, 0)? + delim.len();
    loop {
        if body[pos..].starts_with(b"--") {
            return Some(parts);
        }
        // Skip the CRLF after the delimiter.
        pos = find(body, b"\r\n", pos)? + 2;
        let head_end = find(body, b"\r\n\r\n", pos)?;
        let head = String::from_utf8_lossy(&body[pos..head_end]).to_string();
        let data_start = head_end + 4;
        let mut next_delim = b"\r\n".to_vec();
        next_delim.extend_from_slice(&delim);
        let data_end = find(body, &next_delim, data_start)?;
        let mut part = Part {
            name: String::new(),
            filename: None,
            content_type: None,
            data: body[data_start..data_end].to_vec(),
        };
        for line in head.split("\r\n") {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            if k.trim().eq_ignore_ascii_case("content-disposition") {
                for p in v.split(';').map(str::trim) {
                    if let Some(n) = p.strip_prefix("name=") {
                        part.name = n.trim_matches('"').to_string();
                    } else if let Some(f) = p.strip_prefix("filename=") {
                        part.filename = Some(f.trim_matches('"').to_string());
                    }
                }
            } else if k.trim().eq_ignore_ascii_case("content-type") {
                part.content_type = Some(v.trim().to_string());
            }
        }
        parts.push(part);
        pos = data_end + next_delim.len();
    }
}

/// A text field of a multipart request.
pub fn form_text(r: &Recorded, name: &str) -> Option<String> {
    multipart(r)?
        .into_iter()
        .find(|p| p.name == name && p.filename.is_none())
        .map(|p| String::from_utf8_lossy(&p.data).to_string())
}

/// A file part of a multipart request.
pub fn form_file(r: &Recorded, name: &str) -> Option<Part> {
    multipart(r)?
        .into_iter()
        .find(|p| p.name == name && p.filename.is_some())
}

/// A number given as a JSON number or a numeric string.
fn number(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse::<f64>().ok()))
}

/// `12` for 12.0, `2.5` for 2.5.
pub fn seconds_text(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{}", s as i64)
    } else {
        format!("{s}")
    }
}

fn parse_size(s: &str) -> Option<(u32, u32)> {
    let (w, h) = s.split_once('x')?;
    Some((w.parse().ok()?, h.parse().ok()?))
}

#[allow(clippy::too_many_arguments)]
fn new_task(
    state: &Mutex<State>,
    prefix: &str,
    shape: Shape,
    kind: &str,
    model: &str,
    prompt: &str,
    seconds: f64,
    (width, height): (u32, u32),
) -> Task {
    let mut st = state.lock().unwrap();
    st.next += 1;
    let t = Task {
        id: format!("{prefix}_{}", st.next),
        shape,
        kind: kind.to_string(),
        model: model.to_string(),
        prompt: prompt.to_string(),
        seconds,
        width,
        height,
        created_at: now(),
        polls: 0,
    };
    st.tasks.insert(t.id.clone(), t.clone());
    t
}

fn openai_submit(state: &Mutex<State>, r: &Recorded) -> Reply {
    let (model, prompt, seconds, size) = if multipart(r).is_some() {
        (
            form_text(r, "model"),
            form_text(r, "prompt"),
            form_text(r, "seconds"),
            form_text(r, "size"),
        )
    } else if let Ok(b) = serde_json::from_slice::<Value>(&r.body) {
        let text = |k: &str| match &b[k] {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        (text("model"), text("prompt"), text("seconds"), text("size"))
    } else {
        return error(400, "expected multipart/form-data or JSON");
    };
    let (Some(model), Some(prompt)) = (model, prompt) else {
        return error(400, "model and prompt are required");
    };
    let seconds = match seconds {
        None => 4.0,
        Some(s) => match s.parse::<f64>() {
            Ok(v) if v > 0.0 => v,
            _ => return error(400, "seconds must be a positive number"),
        },
    };
    let size = match size {
        None => (1280, 720),
        Some(s) => match parse_size(&s) {
            Some(wh) => wh,
            None => return error(400, "size must be WxH"),
        },
    };
    let t = new_task(
        state,
        "video",
        Shape::OpenAi,
        "video",
        &model,
        &prompt,
        seconds,
        size,
    );
    Reply::json(200, openai_object(&t, Status::Queued))
}

fn openai_object(t: &Task, s: Status) -> Value {
    let (status, progress) = match s {
        Status::Queued => ("queued", 0),
        Status::InProgress => ("in_progress", 50),
        Status::Completed => ("completed", 100),
        Status::Failed => ("failed", 50),
    };
    let mut v = json!({
        "id": t.id, "object": "video", "model": t.model, "status": status,
        "progress": progress, "created_at": t.created_at,
        "seconds": seconds_text(t.seconds), "size": format!("{}x{}", t.width, t.height),
    });
    if s == Status::Completed {
        v["completed_at"] = json!(now());
        v["expires_at"] = json!(now() + 3600);
    }
    if s == Status::Failed {
        v["error"] = json!({"code": "moderation_blocked",
            "message": "blocked by filter on gpu-node-7.internal (upstream-video-key)"});
    }
    v
}

fn a_submit(state: &Mutex<State>, r: &Recorded, kind: &str) -> Reply {
    let Ok(b) = serde_json::from_slice::<Value>(&r.body) else {
        return error(400, "body is not JSON");
    };
    let Some(model) = b["model"].as_str() else {
        return error(400, "model is required");
    };
    let prompt = b["prompt"].as_str().unwrap_or("");
    if kind == "text2video" && prompt.is_empty() {
        return error(400, "prompt is required");
    }
    if kind == "image2video" && !b["image"].is_string() {
        return error(400, "image is required");
    }
    let seconds = match &b["duration"] {
        Value::Null => 5.0,
        v => match number(v) {
            Some(s) if s > 0.0 => s,
            _ => return error(400, "duration must be a positive number"),
        },
    };
    let dim = |k: &str, d: u32| b[k].as_u64().map_or(d, |v| v as u32);
    let t = new_task(
        state,
        "a",
        Shape::A,
        kind,
        model,
        prompt,
        seconds,
        (dim("width", 1280), dim("height", 720)),
    );
    Reply::json(200, json!({"task_id": t.id, "status": "queued"}))
}

fn a_record(t: &Task, s: Status, base: &str) -> Value {
    let status = match s {
        Status::Queued => "queued",
        Status::InProgress => "in_progress",
        Status::Completed => "completed",
        Status::Failed => "failed",
    };
    let mut v = json!({"task_id": t.id, "status": status});
    if s == Status::Completed {
        v["url"] = json!(format!("{base}/files/{}.mp4", t.id));
        v["format"] = json!("mp4");
        v["metadata"] = json!({"duration": t.seconds, "fps": 24, "width": t.width,
            "height": t.height, "seed": 42});
    }
    if s == Status::Failed {
        v["error"] = json!({"code": 500,
            "message": "render worker crashed on internal-host-9 (upstream-video-key)"});
    }
    v
}

fn b_error(status: u16, code: u64, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"code": code, "message": message, "data": null}),
    )
}

fn b_call(state: &Mutex<State>, r: &Recorded, query: &str) -> Reply {
    if query_param(query, "Version").as_deref() != Some(B_VERSION) {
        return b_error(400, 50400, "Invalid Version");
    }
    let Ok(b) = serde_json::from_slice::<Value>(&r.body) else {
        return b_error(400, 50400, "body is not JSON");
    };
    match query_param(query, "Action").as_deref() {
        Some("CVSync2AsyncSubmitTask") => {
            let Some(model) = b["req_key"].as_str() else {
                return b_error(400, 50400, "req_key is required");
            };
            let Some(prompt) = b["prompt"].as_str() else {
                return b_error(400, 50400, "prompt is required");
            };
            if !(b["binary_data_base64"].is_null() || b["binary_data_base64"].is_array()) {
                return b_error(400, 50400, "binary_data_base64 must be a list");
            }
            let seconds = match &b["duration"] {
                Value::Null => 5.0,
                v => match number(v) {
                    Some(s) if s > 0.0 => s,
                    _ => return b_error(400, 50400, "duration must be a positive number"),
                },
            };
            let dim = |k: &str, d: u32| b[k].as_u64().map_or(d, |v| v as u32);
            let t = new_task(
                state,
                "b",
                Shape::B,
                "video-b",
                model,
                prompt,
                seconds,
                (dim("width", 1280), dim("height", 720)),
            );
            Reply::json(
                200,
                json!({"code": 10000, "message": "Success", "data": {"task_id": t.id},
                       "request_id": "b-req-1", "status": 10000, "time_elapsed": "12ms"}),
            )
        }
        Some("CVSync2AsyncGetResult") => {
            let Some(id) = b["task_id"].as_str() else {
                return b_error(400, 50400, "task_id is required");
            };
            {
                let st = state.lock().unwrap();
                match st.tasks.get(id) {
                    Some(t) if t.shape == Shape::B => {
                        if let Some(k) = b["req_key"].as_str() {
                            if k != t.model {
                                return b_error(400, 50400, "req_key does not match the task");
                            }
                        }
                    }
                    _ => return b_error(400, 50400, "Invalid task_id"),
                }
            }
            poll(state, id, Shape::B, None)
        }
        _ => b_error(400, 50400, "Invalid Action"),
    }
}

/// A status poll: counts it, logs it, answers in the task's shape (after the poll delay).
fn poll(state: &Mutex<State>, id: &str, shape: Shape, kind: Option<&str>) -> Reply {
    let mut st = state.lock().unwrap();
    let released = st.released;
    let delay = st.poll_delay;
    let base = st.base.clone();
    let Some(t) = st.tasks.get_mut(id) else {
        return error(404, "no such task");
    };
    if t.shape != shape || kind.is_some_and(|k| k != t.kind) {
        return error(404, "no such task");
    }
    t.polls += 1;
    let s = status_of(t, released);
    let t = t.clone();
    st.polls.push(Poll {
        task: t.id.clone(),
        at: Instant::now(),
        status: s,
    });
    drop(st);
    let reply = match shape {
        Shape::OpenAi => Reply::json(200, openai_object(&t, s)),
        Shape::A => Reply::json(200, a_record(&t, s, &base)),
        Shape::B => match s {
            Status::Failed => b_error(200, 50412, "Output Video Risk Not Pass"),
            _ => {
                let status = match s {
                    Status::Queued => "in_queue",
                    Status::InProgress => "generating",
                    _ => "done",
                };
                let mut data = json!({"status": status});
                if s == Status::Completed {
                    data["video_url"] = json!(format!("{base}/files/{}.mp4", t.id));
                }
                Reply::json(
                    200,
                    json!({"code": 10000, "message": "Success", "data": data,
                           "request_id": "b-req-2", "status": 10000}),
                )
            }
        },
    };
    match delay {
        Some(d) => Reply::Delayed(d, Box::new(reply)),
        None => reply,
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard Base64 with padding.
pub fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (c.get(1).copied().unwrap_or(0) as u32) << 8
            | c.get(2).copied().unwrap_or(0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard or URL-safe Base64, padding optional; `None` for anything else.
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The bytes of an image given as plain Base64 or a `data:...;base64,` URL.
pub fn image_bytes(s: &str) -> Option<Vec<u8>> {
    let b64 = match s.strip_prefix("data:") {
        Some(rest) => rest.split_once(";base64,")?.1,
        None => s,
    };
    b64_decode(b64)
}
