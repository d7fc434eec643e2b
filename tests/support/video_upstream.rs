//! One server that speaks the three video vendors' APIs, each written from that vendor's
//! published reference (see the modules): the OpenAI videos API ([`crate::openai_videos`],
//! `/v1/videos`), Kling ([`crate::kling`], `/v1/videos/text2video|image2video`, JWT) and
//! Jimeng on Volcengine's visual API ([`crate::volcengine`], `/?Action=...`, signed).
//! This file holds what they share: the tasks and how they move on.
//!
//! Tasks advance only when they are polled (a status request of their API): poll 1
//! answers queued, poll 2 in progress, poll 3 and later completed. The prompt steers a
//! task: "fail" fails it at poll 2 in the vendor's own failure shape; "quiet fail" too,
//! where the vendor has a second shape (Jimeng: HTTP 200 with a non-10000 `code`);
//! "expire" and "vanish" end it the vendor's way of saying the task is gone; "flaky" answers
//! polls 1 and 2 with a transient error (rate limit or server error); "hang" never
//! answers a poll in time; "forever" stays in progress; "gated" stays in progress until
//! [`VideoUpstream::release`] and completes at the next poll after that. Every poll is
//! logged with the time it arrived and the status it got, and may be answered after a
//! delay, so tests can prove no task is ever polled twice at once.
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The bearer key of the OpenAI videos API.
pub const API_KEY: &str = "upstream-video-key";
pub const VIDEO_LEN: usize = 256 * 1024;
/// How long a "hang" poll waits before answering: longer than the test channels' read
/// timeout, so the gateway gives up first.
pub const HANG: Duration = Duration::from_secs(20);

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

/// Which API a task was submitted through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    OpenAi,
    Kling,
    Jimeng,
}

/// What a poll shows, before each vendor writes it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Queued,
    InProgress,
    Completed,
    Failed,
    /// Failed, told the second way the vendor has (Jimeng: HTTP 200, non-10000 `code`).
    QuietlyFailed,
    /// The vendor no longer keeps the task (Jimeng `expired`).
    Expired,
    /// The vendor does not know the task (Jimeng `not_found`, OpenAI 404).
    Vanished,
    /// A rate limit or server error; the task itself is fine.
    Transient,
    /// No answer in time.
    Hang,
}

/// One task as the upstream keeps it.
#[derive(Debug, Clone)]
pub struct Task {
    /// Order of submission.
    pub seq: u64,
    /// The upstream's id: `video_<n>`, `<n>` (Kling) or `<n>` (Jimeng), unique here.
    pub id: String,
    pub shape: Shape,
    /// `video` (OpenAI), `text2video` / `image2video` (Kling) or `jimeng`.
    pub kind: String,
    /// The model (`model`, `model_name` or `req_key`) as the upstream received it.
    pub model: String,
    pub prompt: String,
    pub seconds: f64,
    /// Width and height (OpenAI), or the aspect ratio (Kling, Jimeng) as sent.
    pub size: String,
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
    /// Requests refused for a missing or wrong credential: path and why.
    unauthorized: Vec<(String, String)>,
    /// Kling tokens seen, in order.
    tokens: Vec<String>,
}

/// The state the three vendor modules share.
#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<State>>);

/// A poll counted: the task as it now stands, what it shows, and the delay to answer
/// after.
pub struct Polled {
    pub task: Task,
    pub status: Status,
    pub delay: Option<Duration>,
}

impl Shared {
    pub fn base(&self) -> String {
        self.0.lock().unwrap().base.clone()
    }

    pub fn refuse(&self, path: &str, why: &str) {
        self.0
            .lock()
            .unwrap()
            .unauthorized
            .push((path.to_string(), why.to_string()));
    }

    pub fn token_seen(&self, token: &str) {
        self.0.lock().unwrap().tokens.push(token.to_string());
    }

    pub fn create(
        &self,
        shape: Shape,
        kind: &str,
        model: &str,
        prompt: &str,
        seconds: f64,
        size: &str,
    ) -> Task {
        let mut st = self.0.lock().unwrap();
        st.next += 1;
        let id = match shape {
            Shape::OpenAi => format!("video_{}", st.next),
            // Both vendors hand out numeric ids.
            Shape::Kling => format!("8{:017}", st.next),
            Shape::Jimeng => format!("7{:018}", st.next),
        };
        let t = Task {
            seq: st.next,
            id,
            shape,
            kind: kind.to_string(),
            model: model.to_string(),
            prompt: prompt.to_string(),
            seconds,
            size: size.to_string(),
            created_at: now(),
            polls: 0,
        };
        st.tasks.insert(t.id.clone(), t.clone());
        t
    }

    /// Counts and logs a poll of task `id` of this shape (and kind); `None` for a task
    /// this API does not know.
    pub fn poll(&self, id: &str, shape: Shape, kind: Option<&str>) -> Option<Polled> {
        let mut st = self.0.lock().unwrap();
        let released = st.released;
        let delay = st.poll_delay;
        let t = st.tasks.get_mut(id)?;
        if t.shape != shape || kind.is_some_and(|k| k != t.kind) {
            return None;
        }
        t.polls += 1;
        let status = status_of(t, released);
        let task = t.clone();
        st.polls.push(Poll {
            task: task.id.clone(),
            at: Instant::now(),
            status,
        });
        let delay = if status == Status::Hang {
            Some(HANG)
        } else {
            delay
        };
        Some(Polled {
            task,
            status,
            delay,
        })
    }

    /// A task and what it shows now, without counting a poll.
    pub fn peek(&self, id: &str) -> Option<(Task, Status)> {
        let st = self.0.lock().unwrap();
        let t = st.tasks.get(id)?;
        Some((t.clone(), status_of(t, st.released)))
    }
}

pub struct VideoUpstream {
    pub mock: MockUpstream,
    shared: Shared,
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
        let shared = Shared::default();
        shared.0.lock().unwrap().poll_delay = poll_delay;
        let s = shared.clone();
        let mock = MockUpstream::start(move |r| handle(&s, r)).await;
        shared.0.lock().unwrap().base = mock.base_url();
        VideoUpstream { mock, shared }
    }

    pub fn base_url(&self) -> String {
        self.mock.base_url()
    }

    /// Lets every "gated" task complete at its next poll.
    pub fn release(&self) {
        self.shared.0.lock().unwrap().released = true;
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.mock.requests()
    }

    /// The task submissions received (of any API, accepted or not).
    pub fn submits(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(is_submit).collect()
    }

    /// Every status poll, in arrival order.
    pub fn polls(&self) -> Vec<Poll> {
        self.shared.0.lock().unwrap().polls.clone()
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
        let mut v: Vec<Task> = self
            .shared
            .0
            .lock()
            .unwrap()
            .tasks
            .values()
            .cloned()
            .collect();
        v.sort_by_key(|t| t.seq);
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

    /// Requests refused for a missing or wrong credential: path and why.
    pub fn unauthorized(&self) -> Vec<(String, String)> {
        self.shared.0.lock().unwrap().unauthorized.clone()
    }

    /// The Kling tokens the gateway sent, in order.
    pub fn kling_tokens(&self) -> Vec<String> {
        self.shared.0.lock().unwrap().tokens.clone()
    }
}

/// Whether a request is a task submission of one of the three APIs.
pub fn is_submit(r: &Recorded) -> bool {
    let (path, query) = split_path(&r.path);
    r.method == "POST"
        && (matches!(
            path,
            "/v1/videos" | "/v1/videos/text2video" | "/v1/videos/image2video"
        ) || query_param(query, "Action").as_deref() == Some("CVSync2AsyncSubmitTask"))
}

pub fn split_path(p: &str) -> (&str, &str) {
    p.split_once('?').unwrap_or((p, ""))
}

pub fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The status a task shows after `t.polls` polls.
fn status_of(t: &Task, released: bool) -> Status {
    let p = t.prompt.as_str();
    if p.contains("hang") {
        return Status::Hang;
    }
    if p.contains("flaky") {
        return match t.polls {
            0..=2 => Status::Transient,
            _ => Status::Completed,
        };
    }
    if t.polls <= 1 {
        Status::Queued
    } else if p.contains("quiet fail") {
        Status::QuietlyFailed
    } else if p.contains("fail") {
        Status::Failed
    } else if p.contains("expire") {
        Status::Expired
    } else if p.contains("vanish") {
        Status::Vanished
    } else if p.contains("forever") {
        Status::InProgress
    } else if p.contains("gated") {
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

/// A reply after the poll's delay, if any.
pub fn after(delay: Option<Duration>, reply: Reply) -> Reply {
    match delay {
        Some(d) => Reply::Delayed(d, Box::new(reply)),
        None => reply,
    }
}

pub fn video_reply() -> Reply {
    let v = video();
    Reply::Chunked {
        status: 200,
        content_type: "video/mp4".into(),
        pieces: v.chunks(v.len().div_ceil(4)).map(<[u8]>::to_vec).collect(),
        interval: Duration::from_millis(1),
        end: End::Clean,
    }
}

/// Where a finished Kling or Jimeng video is downloaded: a storage path of this server
/// (the vendors hand out their CDN's URLs), no credential needed.
pub fn file_url(base: &str, id: &str) -> String {
    format!("{base}/files/{id}.mp4")
}

fn handle(s: &Shared, r: &Recorded) -> Reply {
    let (path, _) = split_path(&r.path);
    if r.method == "GET" {
        if let Some(file) = path.strip_prefix("/files/") {
            let id = file.strip_suffix(".mp4").unwrap_or("");
            return match s.peek(id) {
                Some((_, Status::Completed)) => video_reply(),
                _ => Reply::json(404, json!({"message": "no such file"})),
            };
        }
    }
    crate::volcengine::route(s, r)
        .or_else(|| crate::kling::route(s, r))
        .or_else(|| crate::openai_videos::route(s, r))
        .unwrap_or_else(|| Reply::json(404, json!({"error": {"message": "no such path"}})))
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

/// `12` for 12.0, `2.5` for 2.5.
pub fn seconds_text(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{}", s as i64)
    } else {
        format!("{s}")
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
