//! Kling's video API as the「Kling AI」API Specification describes it
//! (app.klingai.com/global/dev/document-api; docs.qingque.cn edition of 2024-12):
//!
//! - Authentication: `Authorization: Bearer <API Token>`, the token a JWT (RFC 7519)
//!   with header `{"alg":"HS256","typ":"JWT"}`, claims `iss` = the access key, `exp`
//!   (the example: now + 1800 s) and `nbf` (the example: now − 5 s), signed with the
//!   secret key. Failures: HTTP 401 with `code` 1000–1004 (1001 empty, 1002 invalid,
//!   1003 not yet valid, 1004 expired).
//! - `POST /v1/videos/text2video` and `POST /v1/videos/image2video`, JSON: `model_name`
//!   (default `kling-v1`), `prompt` (required for text, at most 2500 characters),
//!   `negative_prompt`, `cfg_scale`, `mode` (`std`/`pro`), `aspect_ratio` (`16:9`,
//!   `9:16`, `1:1`; text only), `duration` (`"5"` or `"10"`), `image` (image2video: a URL
//!   or Base64 "without any prefix such as data:image/png;base64,"), `callback_url`,
//!   `external_task_id`. Answer: `{code: 0, message, request_id, data: {task_id,
//!   task_status: "submitted", task_info, created_at, updated_at}}`.
//! - `GET /v1/videos/{text2video|image2video}/{task_id}`: `data.task_status` one of
//!   `submitted`, `processing`, `succeed`, `failed` (with `task_status_msg`), and on
//!   success `data.task_result.videos[] {id, url, duration}` (duration a string).
//! - Errors: an HTTP status with `{code, message, request_id}`: 400 / 1201 invalid
//!   parameters, 429 / 1302 requests too fast, 5xx / 5000 server error.
#![allow(dead_code)]

use crate::mock_upstream::{Recorded, Reply};
use crate::video_upstream::{after, file_url, now, split_path, Shape, Shared, Status};
use base64::Engine;
use ring::hmac;
use serde_json::{json, Value};

pub const ACCESS_KEY: &str = "kling-test-access-key";
pub const SECRET_KEY: &str = "kling-test-secret-key";
pub const DURATIONS: &[&str] = &["5", "10"];
pub const ASPECT_RATIOS: &[&str] = &["16:9", "9:16", "1:1"];

fn answer(status: u16, code: i64, message: &str, data: Value) -> Reply {
    Reply::json(
        status,
        json!({"code": code, "message": message, "request_id": "kling-req-1", "data": data}),
    )
}

fn bad(message: &str) -> Reply {
    answer(400, 1201, message, Value::Null)
}

/// Why a bearer token is not a valid API token, as Kling's codes say it.
fn check_token(auth: Option<&str>) -> Result<String, (i64, String)> {
    let token = auth
        .and_then(|a| a.strip_prefix("Bearer "))
        .filter(|t| !t.is_empty())
        .ok_or((1001, "Authorization is empty".to_string()))?;
    let invalid = |why: &str| (1002, format!("Authorization is invalid: {why}"));
    let parts: Vec<&str> = token.split('.').collect();
    let [h, p, sig] = parts.as_slice() else {
        return Err(invalid("not three parts"));
    };
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header: Value = b64
        .decode(h)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| invalid("header"))?;
    if header["alg"] != "HS256" {
        return Err(invalid("alg"));
    }
    let sig = b64.decode(sig).map_err(|_| invalid("signature encoding"))?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, SECRET_KEY.as_bytes());
    hmac::verify(&key, format!("{h}.{p}").as_bytes(), &sig).map_err(|_| invalid("signature"))?;
    let claims: Value = b64
        .decode(p)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| invalid("claims"))?;
    if claims["iss"] != ACCESS_KEY {
        return Err(invalid("iss"));
    }
    let t = now();
    let exp = claims["exp"].as_i64().ok_or_else(|| invalid("exp"))?;
    if exp <= t {
        return Err((1004, "Authorization has expired".into()));
    }
    if exp > t + 1800 + 5 {
        return Err(invalid("exp more than 30 minutes ahead"));
    }
    let nbf = claims["nbf"].as_i64().ok_or_else(|| invalid("nbf"))?;
    if nbf > t {
        return Err((1003, "Authorization is not yet valid".into()));
    }
    Ok(token.to_string())
}

/// Answers the requests of this API; `None` for a path that is not its.
pub fn route(s: &Shared, r: &Recorded) -> Option<Reply> {
    let (path, _) = split_path(&r.path);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (kind, id) = match (r.method.as_str(), segs.as_slice()) {
        ("POST", ["v1", "videos", k @ ("text2video" | "image2video")]) => (*k, None),
        ("GET", ["v1", "videos", k @ ("text2video" | "image2video"), id]) => (*k, Some(*id)),
        _ => return None,
    };
    match check_token(r.header("authorization")) {
        Ok(token) => s.token_seen(&token),
        Err((code, message)) => {
            s.refuse(&r.path, &message);
            return Some(answer(401, code, &message, Value::Null));
        }
    }
    Some(match id {
        None => create(s, r, kind),
        Some(id) => query(s, kind, id),
    })
}

fn create(s: &Shared, r: &Recorded, kind: &str) -> Reply {
    let Ok(Value::Object(b)) = serde_json::from_slice::<Value>(&r.body) else {
        return bad("request body is not a JSON object");
    };
    let text = |k: &str| -> Result<Option<String>, Reply> {
        match b.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(&format!("{k} must be a string"))),
        }
    };
    let fields = (|| {
        Ok::<_, Reply>((
            text("model_name")?,
            text("prompt")?,
            text("duration")?,
            text("aspect_ratio")?,
            text("mode")?,
            text("image")?,
        ))
    })();
    let (model, prompt, duration, aspect, mode, image) = match fields {
        Ok(f) => f,
        Err(reply) => return reply,
    };
    let prompt = prompt.unwrap_or_default();
    if kind == "text2video" && prompt.is_empty() {
        return bad("prompt is required");
    }
    if prompt.chars().count() > 2500 {
        return bad("prompt cannot exceed 2500 characters");
    }
    let duration = duration.unwrap_or_else(|| "5".into());
    if !DURATIONS.contains(&duration.as_str()) {
        return bad("duration must be 5 or 10");
    }
    let aspect = aspect.unwrap_or_else(|| "16:9".into());
    if !ASPECT_RATIOS.contains(&aspect.as_str()) {
        return bad("aspect_ratio must be 16:9, 9:16 or 1:1");
    }
    if mode.as_deref().is_some_and(|m| m != "std" && m != "pro") {
        return bad("mode must be std or pro");
    }
    if kind == "image2video" {
        match image.as_deref() {
            None | Some("") => return bad("image is required"),
            Some(i) if i.starts_with("data:") => {
                return bad("image Base64 must not carry a data: prefix")
            }
            Some(i) if i.starts_with("http://") || i.starts_with("https://") => {}
            Some(i) if crate::video_upstream::b64_decode(i).is_some() => {}
            Some(_) => return bad("image is neither a URL nor Base64"),
        }
    } else if image.is_some() {
        return bad("text2video takes no image");
    }
    let model = model.unwrap_or_else(|| "kling-v1".into());
    let t = s.create(
        Shape::Kling,
        kind,
        &model,
        &prompt,
        duration.parse().unwrap(),
        &aspect,
    );
    let ms = t.created_at * 1000;
    answer(
        200,
        0,
        "SUCCEED",
        json!({"task_id": t.id, "task_status": "submitted", "task_info": {},
               "created_at": ms, "updated_at": ms}),
    )
}

fn query(s: &Shared, kind: &str, id: &str) -> Reply {
    let Some(p) = s.poll(id, Shape::Kling, Some(kind)) else {
        return answer(404, 1203, "task not found", Value::Null);
    };
    let t = &p.task;
    let ms = t.created_at * 1000;
    let mut data = json!({"task_id": t.id, "task_info": {}, "task_status_msg": "",
                          "created_at": ms, "updated_at": now() * 1000});
    let status = match p.status {
        Status::Transient => {
            return after(
                p.delay,
                answer(
                    429,
                    1302,
                    "The API request is too fast, please slow down",
                    Value::Null,
                ),
            )
        }
        Status::Vanished => {
            return after(p.delay, answer(404, 1203, "task not found", Value::Null))
        }
        Status::Queued => "submitted",
        Status::InProgress | Status::Hang => "processing",
        Status::Completed => {
            // Kling reports the length it made, a little over the whole seconds.
            data["task_result"] = json!({"videos": [{"id": format!("v{}", t.id),
                "url": file_url(&s.base(), &t.id), "duration": format!("{:.3}", t.seconds + 0.042)}]});
            "succeed"
        }
        Status::Failed | Status::QuietlyFailed | Status::Expired => {
            data["task_status_msg"] =
                json!("render worker crashed on internal-host-9 (upstream-video-key)");
            "failed"
        }
    };
    data["task_status"] = json!(status);
    after(p.delay, answer(200, 0, "SUCCEED", data))
}
