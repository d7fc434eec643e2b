//! What clients see of a task: the video job record of spec 2.4 (`/v1/videos`), the
//! status record of spec 2.3 (every task-style endpoint), and the submission answers.
//! The upstream's id and URLs never appear; the video is downloaded through the gateway.

use super::job::seconds_text;
use crate::store::tasks::{TaskRecord, TaskStatus};
use serde_json::{json, Map, Value};

/// How long a finished video stays downloadable, as the job record announces it.
pub const CONTENT_TTL_SECS: i64 = 24 * 3600;

/// `metadata` of spec 2.3: what the finished video is.
fn metadata(t: &TaskRecord) -> Option<Value> {
    let r = t.result.as_ref()?;
    let mut m = Map::new();
    m.insert("duration".into(), json!(r.duration.unwrap_or(t.seconds)));
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    put("fps", r.fps.map(Value::from));
    put("width", r.width.map(Value::from));
    put("height", r.height.map(Value::from));
    put("seed", r.seed.map(Value::from));
    Some(Value::Object(m))
}

/// Spec 2.4.
pub fn job_record(t: &TaskRecord) -> Value {
    let mut v = json!({
        "id": t.id,
        "object": "video",
        "model": t.model,
        "status": t.status.as_str(),
        "progress": t.progress,
        "created_at": t.created_at,
        "seconds": seconds_text(t.seconds),
    });
    let o = v.as_object_mut().expect("an object");
    if let Some(s) = &t.size {
        o.insert("size".into(), json!(s));
    }
    if let Some(done) = t.completed_at {
        o.insert("completed_at".into(), json!(done));
        if t.status == TaskStatus::Completed {
            o.insert("expires_at".into(), json!(done + CONTENT_TTL_SECS));
        }
    }
    if let Some(e) = &t.error {
        o.insert(
            "error".into(),
            json!({"code": e.code, "message": e.message}),
        );
    }
    if let Some(m) = metadata(t) {
        o.insert("metadata".into(), m);
    }
    v
}

/// The integer `error.code` of spec 2.3.
fn numeric_code(code: &str) -> u16 {
    match code {
        "task_timeout" => 504,
        _ => 500,
    }
}

/// Spec 2.3. `content_url`: where the client downloads the video (through the gateway).
pub fn status_record(t: &TaskRecord, content_url: &str) -> Value {
    let mut v = json!({
        "task_id": t.id,
        "status": t.status.as_str(),
        "progress": t.progress,
    });
    let o = v.as_object_mut().expect("an object");
    if t.status == TaskStatus::Completed {
        o.insert("url".into(), json!(content_url));
        let format = t
            .result
            .as_ref()
            .and_then(|r| r.format.clone())
            .unwrap_or_else(|| "mp4".into());
        o.insert("format".into(), json!(format));
    }
    if let Some(m) = metadata(t) {
        o.insert("metadata".into(), m);
    }
    if let Some(e) = &t.error {
        o.insert(
            "error".into(),
            json!({"code": numeric_code(&e.code), "message": e.message}),
        );
    }
    v
}

/// Spec 2.3: the submission answer of the task-style endpoints.
pub fn submitted(t: &TaskRecord) -> Value {
    json!({"task_id": t.id, "status": t.status.as_str()})
}

/// `code` of a successful answer in the `/video-b/` client shape (spec 4.14).
const VIDEO_B_SUCCESS: i64 = 10000;

/// Spec 4.14: the `{code, message, data}` envelope of the second vendor's shape.
pub fn video_b(data: Value, request_id: &str) -> Value {
    json!({
        "code": VIDEO_B_SUCCESS,
        "message": "Success",
        "data": data,
        "request_id": request_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tasks::{TaskError, TaskResult};

    fn task() -> TaskRecord {
        TaskRecord {
            id: "task_abc".into(),
            key_id: "key_1".into(),
            endpoint: "/v1/videos".into(),
            model: "sora-2".into(),
            channel: "c".into(),
            upstream_id: "video_secret_upstream".into(),
            upstream_kind: String::new(),
            status: TaskStatus::Queued,
            progress: 0,
            created_at: 1_700_000_000,
            completed_at: None,
            deadline: 1_700_086_400,
            seconds: 4.0,
            size: Some("1280x720".into()),
            n: 1,
            reserved: 400_000,
            cost: 0,
            multiplier_ppm: None,
            polls: 0,
            result: None,
            error: None,
        }
    }

    #[test]
    fn job_record_has_the_required_fields_and_no_upstream_id() {
        let v = job_record(&task());
        for f in [
            "id",
            "object",
            "model",
            "status",
            "progress",
            "created_at",
            "seconds",
        ] {
            assert!(v.get(f).is_some(), "{f}");
        }
        assert_eq!(v["seconds"], "4");
        assert_eq!(v["status"], "queued");
        assert!(!v.to_string().contains("secret_upstream"));
    }

    #[test]
    fn status_record_on_success_and_failure() {
        let mut t = task();
        t.status = TaskStatus::Completed;
        t.progress = 100;
        t.completed_at = Some(1_700_000_100);
        t.result = Some(TaskResult {
            upstream_url: Some("https://cdn.upstream.example/v.mp4".into()),
            format: Some("mp4".into()),
            duration: Some(4.0),
            fps: Some(24),
            width: Some(1280),
            height: Some(720),
            seed: Some(7),
        });
        let v = status_record(&t, "https://gw/v1/videos/task_abc/content");
        assert_eq!(v["url"], "https://gw/v1/videos/task_abc/content");
        assert_eq!(v["metadata"]["fps"], 24);
        assert!(!v.to_string().contains("cdn.upstream"));
        let j = job_record(&t);
        assert_eq!(j["expires_at"], 1_700_000_100 + CONTENT_TTL_SECS);

        let mut f = task();
        f.status = TaskStatus::Failed;
        f.error = Some(TaskError {
            code: "task_timeout".into(),
            message: "m".into(),
        });
        let v = status_record(&f, "u");
        assert_eq!(v["error"]["code"], 504);
        assert!(v.get("url").is_none());
        assert_eq!(job_record(&f)["error"]["code"], "task_timeout");
    }
}
