//! The four client shapes of a video submission (spec 4.8, 4.10–4.15), read into one
//! neutral [`VideoJob`] with every 400 of the issue checked before anything is reserved.

use crate::media::multipart::Form;
use crate::protocol::{invalid, Invalid};
use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value};

/// Videos one request may ask for.
pub const MAX_N: u64 = 4;

/// A reference image: a URL the upstream fetches itself, or the image's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    Url(String),
    Bytes {
        data: Bytes,
        content_type: String,
        filename: String,
    },
}

/// A video request, whatever shape it came in.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoJob {
    pub model: String,
    pub prompt: String,
    /// Seconds per video, when the request names it.
    pub seconds: Option<f64>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub fps: Option<u32>,
    pub seed: Option<i64>,
    pub n: u32,
    pub image: Option<Image>,
    /// Fields passed on as they are to upstreams that take them (`metadata`,
    /// `response_format`, `user`, `negative_prompt`, ...).
    pub extra: Map<String, Value>,
    /// What the client called the fields an upstream may not be able to express, so a
    /// 400 names the one the client sent.
    pub names: Names,
}

/// The client's names for the duration, the frame size and the reference image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names {
    pub seconds: &'static str,
    /// `size` (`WxH`), or `width` where width and height are separate fields.
    pub size: &'static str,
    pub image: &'static str,
}

impl Names {
    /// The task-style bodies (4.12, 4.15).
    pub const TASK: Names = Names {
        seconds: "duration",
        size: "width",
        image: "image",
    };
    /// `/v1/videos` (4.8).
    pub const VIDEOS: Names = Names {
        seconds: "seconds",
        size: "size",
        image: "input_reference",
    };
}

/// Limits that come from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_seconds: f64,
}

/// Seconds as the videos API writes them: `"4"`, or `"2.5"`.
pub fn seconds_text(s: f64) -> String {
    if s.fract() == 0.0 && s < 1e15 {
        format!("{}", s as i64)
    } else {
        format!("{s}")
    }
}

impl VideoJob {
    /// `WxH`, when both sides are known.
    pub fn size(&self) -> Option<String> {
        Some(format!("{}x{}", self.width?, self.height?))
    }
}

fn required_text(v: Option<&str>, name: &str) -> Result<String, Invalid> {
    match v {
        Some(s) if !s.trim().is_empty() => Ok(s.to_string()),
        _ => Err(invalid(
            name,
            format!("`{name}` is required and must be a non-empty string."),
        )),
    }
}

fn text_field<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, Invalid> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(name, format!("`{name}` must be a string."))),
    }
}

/// A duration: a number, or a string holding one (`"8"`), positive and within bounds.
fn seconds_value(v: &Value, name: &str, b: Bounds) -> Result<f64, Invalid> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match n {
        Some(s) if s.is_finite() && s > 0.0 && s <= b.max_seconds => Ok(s),
        Some(s) if s.is_finite() && s > b.max_seconds => Err(invalid(
            name,
            format!("`{name}` must be at most {} seconds.", b.max_seconds),
        )),
        _ => Err(invalid(
            name,
            format!("`{name}` must be a positive number of seconds."),
        )),
    }
}

fn positive_int(obj: &Map<String, Value>, name: &str) -> Result<Option<u32>, Invalid> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=u32::MAX as u64).contains(n))
            .map(|n| Some(n as u32))
            .ok_or_else(|| invalid(name, format!("`{name}` must be a positive integer."))),
    }
}

fn seed(obj: &Map<String, Value>) -> Result<Option<i64>, Invalid> {
    match obj.get("seed") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| invalid("seed", "`seed` must be an integer.")),
    }
}

fn count(obj: &Map<String, Value>) -> Result<u32, Invalid> {
    match obj.get("n") {
        None | Some(Value::Null) => Ok(1),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_N).contains(n))
            .map(|n| n as u32)
            .ok_or_else(|| invalid("n", format!("`n` must be an integer from 1 to {MAX_N}."))),
    }
}

/// `WxH` with both sides positive.
fn size(s: &str) -> Result<(u32, u32), Invalid> {
    const FORM: &str = "`size` must look like `1280x720`";
    let bad = || invalid("size", format!("{FORM}."));
    let side = |v: &str, which: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|e| invalid("size", format!("{FORM} ({which}: {e}).")))
    };
    let (w, h) = s.split_once(['x', 'X', '*']).ok_or_else(bad)?;
    let (w, h) = (side(w, "width")?, side(h, "height")?);
    if w == 0 || h == 0 {
        return Err(bad());
    }
    Ok((w, h))
}

/// The media type of an image, from its first bytes.
pub fn sniff(data: &[u8]) -> &'static str {
    if data.starts_with(b"\x89PNG") {
        "image/png"
    } else if data.starts_with(&[0xFF, 0xD8]) {
        "image/jpeg"
    } else if data.len() > 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        "image/webp"
    } else if data.starts_with(b"GIF8") {
        "image/gif"
    } else {
        "application/octet-stream"
    }
}

fn image_bytes(data: Vec<u8>) -> Image {
    let content_type = sniff(&data).to_string();
    let ext = content_type
        .strip_prefix("image/")
        .unwrap_or("bin")
        .to_string();
    Image::Bytes {
        data: Bytes::from(data),
        content_type,
        filename: format!("reference.{ext}"),
    }
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let clean: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engines = [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .iter()
        .find_map(|e| e.decode(&clean).ok())
        .filter(|d| !d.is_empty())
}

/// An image given as text: an `http(s)` URL, a `data:` URL, or bare Base64.
pub fn image_text(s: &str, name: &str) -> Result<Image, Invalid> {
    let s = s.trim();
    let bad = || {
        invalid(
            name,
            format!("`{name}` must be an http(s) URL or Base64 image data."),
        )
    };
    if s.starts_with("http://") || s.starts_with("https://") {
        return url::Url::parse(s)
            .ok()
            .filter(|u| u.host_str().is_some())
            .map(|_| Image::Url(s.to_string()))
            .ok_or_else(bad);
    }
    let b64 = match s.strip_prefix("data:") {
        Some(rest) => rest
            .split_once(";base64,")
            .map(|(_, data)| data)
            .ok_or_else(bad)?,
        None => s,
    };
    decode_base64(b64).map(image_bytes).ok_or_else(bad)
}

/// The duration, frame and count fields the task-style bodies share (4.12, 4.14).
fn task_job(
    obj: &Map<String, Value>,
    model: String,
    prompt: String,
    image: Option<Image>,
    extra: Map<String, Value>,
    mut names: Names,
    b: Bounds,
) -> Result<VideoJob, Invalid> {
    let seconds = match (obj.get("duration"), obj.get("seconds")) {
        (Some(v), _) if !v.is_null() => Some(seconds_value(v, "duration", b)?),
        (_, Some(v)) if !v.is_null() => {
            names.seconds = "seconds";
            Some(seconds_value(v, "seconds", b)?)
        }
        _ => None,
    };
    Ok(VideoJob {
        model,
        prompt,
        seconds,
        width: positive_int(obj, "width")?,
        height: positive_int(obj, "height")?,
        fps: positive_int(obj, "fps")?,
        seed: seed(obj)?,
        n: count(obj)?,
        image,
        extra,
        names,
    })
}

/// Fields of the 4.12 body that are read into the job, not passed on as extras.
const TASK_FIELDS: &[&str] = &[
    "model", "prompt", "image", "duration", "seconds", "width", "height", "fps", "seed", "n",
];

/// Spec 4.12 (and 4.10, 4.15): the task-style JSON body. `needs_image`: image-to-video.
pub fn from_task_json(body: &Value, needs_image: bool, b: Bounds) -> Result<VideoJob, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = required_text(text_field(obj, "model")?, "model")?;
    let prompt = required_text(text_field(obj, "prompt")?, "prompt")?;
    let image = match text_field(obj, "image")? {
        Some(s) => Some(image_text(s, "image")?),
        None if needs_image => {
            return Err(invalid("image", "`image` is required for image-to-video."))
        }
        None => None,
    };
    let extra = obj
        .iter()
        .filter(|(k, _)| !TASK_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    task_job(obj, model, prompt, image, extra, Names::TASK, b)
}

/// The fields of spec 4.8, however they were sent; the reference image is read last, so
/// a missing `model` or `prompt` is the error named first.
fn videos_job(
    model: Option<&str>,
    prompt: Option<&str>,
    seconds: Option<Value>,
    size_text: Option<&str>,
    image: impl FnOnce() -> Result<Option<Image>, Invalid>,
    b: Bounds,
) -> Result<VideoJob, Invalid> {
    let model = required_text(model, "model")?;
    let prompt = required_text(prompt, "prompt")?;
    let seconds = match seconds {
        None | Some(Value::Null) => None,
        Some(v) => Some(seconds_value(&v, "seconds", b)?),
    };
    let (width, height) = match size_text.filter(|s| !s.is_empty()) {
        Some(s) => size(s).map(|(w, h)| (Some(w), Some(h)))?,
        None => (None, None),
    };
    Ok(VideoJob {
        model,
        prompt,
        seconds,
        width,
        height,
        fps: None,
        seed: None,
        n: 1,
        image: image()?,
        extra: Map::new(),
        names: Names::VIDEOS,
    })
}

/// Spec 4.8: `POST /v1/videos` as multipart/form-data.
pub fn from_videos_form(raw: &Bytes, form: &Form, b: Bounds) -> Result<VideoJob, Invalid> {
    let image = || match form.file("input_reference") {
        Some(f) if !f.range.is_empty() => {
            let data = raw.slice(f.range.clone());
            let content_type = f
                .content_type
                .clone()
                .filter(|c| c.starts_with("image/"))
                .unwrap_or_else(|| sniff(&data).to_string());
            Ok(Some(Image::Bytes {
                data,
                content_type,
                filename: f
                    .filename
                    .clone()
                    .unwrap_or_else(|| "reference".to_string()),
            }))
        }
        Some(_) => Err(invalid(
            "input_reference",
            "`input_reference` is an empty file.",
        )),
        None => form
            .field("input_reference")
            .map(|s| image_text(s, "input_reference"))
            .transpose(),
    };
    videos_job(
        form.field("model"),
        form.field("prompt"),
        form.field("seconds").map(|s| Value::String(s.to_string())),
        form.field("size"),
        image,
        b,
    )
}

/// Spec 4.8 sent as JSON (the same fields; `input_reference` as a URL or Base64).
pub fn from_videos_json(body: &Value, b: Bounds) -> Result<VideoJob, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let reference = text_field(obj, "input_reference")?;
    videos_job(
        text_field(obj, "model")?,
        text_field(obj, "prompt")?,
        obj.get("seconds").cloned(),
        text_field(obj, "size")?,
        || {
            reference
                .map(|s| image_text(s, "input_reference"))
                .transpose()
        },
        b,
    )
}

/// Spec 4.14, `CVSync2AsyncSubmitTask`: `req_key` names the model (a `model` field, when
/// sent, wins); the first of `binary_data_base64` (or `image_urls`) is the reference.
pub fn from_video_b(body: &Value, b: Bounds) -> Result<VideoJob, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = match text_field(obj, "model")? {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => required_text(text_field(obj, "req_key")?, "req_key")?,
    };
    let prompt = required_text(text_field(obj, "prompt")?, "prompt")?;
    let list = |name: &str| -> Result<Vec<String>, Invalid> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        invalid(name, format!("`{name}` must be a list of strings."))
                    })
                })
                .collect(),
            Some(_) => Err(invalid(
                name,
                format!("`{name}` must be a list of strings."),
            )),
        }
    };
    let mut names = Names {
        image: "binary_data_base64",
        ..Names::TASK
    };
    let image = match list("binary_data_base64")?.first() {
        Some(s) => {
            let img = image_text(s, "binary_data_base64")?;
            if matches!(img, Image::Url(_)) {
                return Err(invalid(
                    "binary_data_base64",
                    "`binary_data_base64` must hold Base64 image data.",
                ));
            }
            Some(img)
        }
        None => match list("image_urls")?.first() {
            Some(u) => {
                names.image = "image_urls";
                Some(image_text(u, "image_urls")?)
            }
            None => None,
        },
    };
    task_job(obj, model, prompt, image, Map::new(), names, b)
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
