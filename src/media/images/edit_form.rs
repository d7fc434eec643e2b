//! `POST /v1/images/edits` in the shape the official OpenAI SDKs send: multipart/form-data
//! (OpenAI API reference, "Create image edit", platform.openai.com/docs/api-reference/images/createEdit):
//! `image` (one file, or several as `image[]`), optional `mask`, `prompt`, `model`, `n`,
//! `size`, `quality`, `response_format`, `background`, `output_format`,
//! `output_compression`, `input_fidelity`, `partial_images`, `stream`, `user`.
//!
//! The reference's per-model rules, with the families of spec 8: the smallest family
//! (`dall-e-2`) edits one square PNG under 4 MB, prompts up to 1000 characters, sizes
//! 256/512/1024 square, `response_format` its own; the newest (`gpt-image-1`) up to 16
//! PNG, WebP or JPEG images under 50 MB each, prompts up to 32000 characters, its four
//! sizes and qualities, and the GPT-image-only options. The middle family (`dall-e-3`)
//! does not edit. Without `model` the API uses `dall-e-2` unless a GPT-image-only option
//! is present; the gateway picks its smallest or newest family's first model the same way
//! and writes it into the form, so the upstream edits with the model that was priced.

use super::fields::{invalid, one_of};
use super::{Families, Family, ImageJob};
use crate::media::multipart::{self, FilePart, Form};
use crate::protocol::Invalid;
use bytes::Bytes;

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
const SMALLEST_MAX_BYTES: usize = 4 * 1024 * 1024;
const NEWEST_MAX_BYTES: usize = 50 * 1024 * 1024;
const NEWEST_MAX_IMAGES: usize = 16;
/// Options only the newest family takes; their presence also picks it as the default.
const NEWEST_ONLY: &[&str] = &[
    "background",
    "output_format",
    "output_compression",
    "input_fidelity",
    "partial_images",
];

/// A checked multipart edit: what is billed, the body to send (with `model` written in
/// when the client gave none) and its form.
#[derive(Debug)]
pub struct FormEdit {
    pub job: ImageJob,
    pub body: Bytes,
    pub form: Form,
}

fn text<'a>(form: &'a Form, name: &str) -> Option<&'a str> {
    form.field(name).filter(|v| !v.is_empty())
}

fn int(form: &Form, name: &str, min: i64, max: i64) -> Result<Option<i64>, Invalid> {
    let Some(v) = text(form, name) else {
        return Ok(None);
    };
    match v.trim().parse::<i64>() {
        Ok(i) if (min..=max).contains(&i) => Ok(Some(i)),
        _ => Err(invalid(
            name,
            format!("`{name}` must be an integer from {min} to {max}."),
        )),
    }
}

/// The files of the edit: `image`, or `image[]` as the SDKs name a list.
fn images(form: &Form) -> Vec<&FilePart> {
    form.files
        .iter()
        .filter(|f| f.name == "image" || f.name == "image[]")
        .collect()
}

fn kind(data: &[u8]) -> Option<&'static str> {
    if data.starts_with(PNG_SIGNATURE) {
        Some("png")
    } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("jpeg")
    } else if data.len() > 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        Some("webp")
    } else {
        None
    }
}

/// A PNG's width and height, from its header chunk.
fn png_size(data: &[u8]) -> Option<(u32, u32)> {
    if !data.starts_with(PNG_SIGNATURE) || data.get(12..16)? != b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes(data.get(16..20)?.try_into().ok()?);
    let h = u32::from_be_bytes(data.get(20..24)?.try_into().ok()?);
    Some((w, h))
}

/// Spec 4.7 and 8 on the SDK's multipart shape. `raw` is the body as received.
pub fn check_edit_form(
    raw: Bytes,
    boundary: &str,
    families: &Families,
) -> Result<FormEdit, Invalid> {
    let form = multipart::parse(&raw, boundary)?;
    if form.file("model").is_some() || form.file("prompt").is_some() {
        return Err(invalid(
            "prompt",
            "`model` and `prompt` must be text fields.",
        ));
    }
    let named = text(&form, "model").map(str::to_string);
    let model = match &named {
        Some(m) => m.clone(),
        None => default_model(&form, families)?,
    };
    let family = families.family_of(&model);
    let prompt = text(&form, "prompt").ok_or_else(|| invalid("prompt", "`prompt` is required."))?;
    let files = images(&form);
    if files.is_empty() {
        return Err(invalid(
            "image",
            "`image` is required: the image file to edit.",
        ));
    }
    if files.iter().any(|f| f.range.is_empty()) {
        return Err(invalid("image", "`image` is an empty file."));
    }
    let n = int(&form, "n", 1, 10)?.unwrap_or(1);
    if form.field("stream") == Some("true") {
        return Err(invalid(
            "stream",
            "Streaming image edits are not supported; omit `stream` or set it to false.",
        ));
    }
    let (size, quality) = match family {
        Some(Family::Middle) => {
            return Err(invalid(
                "model",
                format!("`{model}` does not edit images; use an image model that does."),
            ))
        }
        Some(Family::Smallest) => smallest(&raw, &form, &files, prompt, &model)?,
        Some(Family::Newest) => newest(&raw, &form, &files, prompt, &model)?,
        None => (
            text(&form, "size").unwrap_or("1024x1024").to_string(),
            text(&form, "quality").map(str::to_string),
        ),
    };
    let (body, form) = match named {
        Some(_) => (raw, form),
        None => {
            let body = with_field(&raw, &form, boundary, "model", &model)?;
            let form = multipart::parse(&body, boundary)?;
            (body, form)
        }
    };
    Ok(FormEdit {
        job: ImageJob {
            model,
            family,
            n: n.unsigned_abs(),
            size,
            quality,
        },
        body,
        form,
    })
}

fn default_model(form: &Form, families: &Families) -> Result<String, Invalid> {
    let newest = NEWEST_ONLY.iter().any(|k| text(form, k).is_some());
    let family = if newest {
        Family::Newest
    } else {
        Family::Smallest
    };
    families.models(family).first().cloned().ok_or_else(|| {
        invalid(
            "model",
            "`model` is required: no default image model is configured.",
        )
    })
}

fn prompt_within(prompt: &str, max: usize, model: &str) -> Result<(), Invalid> {
    if prompt.len() > max && prompt.chars().count() > max {
        return Err(invalid(
            "prompt",
            format!("`prompt` must be at most {max} characters for `{model}`."),
        ));
    }
    Ok(())
}

/// The smallest family: one square PNG under 4 MB, and no newest-only option.
fn smallest(
    raw: &[u8],
    form: &Form,
    files: &[&FilePart],
    prompt: &str,
    model: &str,
) -> Result<(String, Option<String>), Invalid> {
    let whom = format!(" for `{model}`");
    prompt_within(prompt, 1000, model)?;
    if files.len() > 1 {
        return Err(invalid("image", format!("`image` must be one file{whom}.")));
    }
    let data = &raw[files[0].range.clone()];
    if data.len() >= SMALLEST_MAX_BYTES || kind(data) != Some("png") {
        return Err(invalid(
            "image",
            format!("`image` must be a PNG file of less than 4 MB{whom}."),
        ));
    }
    let dims = png_size(data);
    if dims.is_some_and(|(w, h)| w != h) {
        return Err(invalid("image", format!("`image` must be square{whom}.")));
    }
    check_mask(raw, form, dims, &whom)?;
    if let Some(key) = NEWEST_ONLY.iter().find(|k| text(form, k).is_some()) {
        return Err(invalid(
            *key,
            format!("`{key}` is only supported by the newest image models, not by `{model}`."),
        ));
    }
    let size = text(form, "size").unwrap_or("1024x1024");
    one_of(size, &["256x256", "512x512", "1024x1024"], "size", &whom)?;
    let quality = text(form, "quality").unwrap_or("standard");
    one_of(quality, &["standard"], "quality", &whom)?;
    if let Some(f) = text(form, "response_format") {
        one_of(f, &["url", "b64_json"], "response_format", &whom)?;
    }
    Ok((size.to_string(), Some(quality.to_string())))
}

/// The newest family: up to 16 PNG, WebP or JPEG images under 50 MB each.
fn newest(
    raw: &[u8],
    form: &Form,
    files: &[&FilePart],
    prompt: &str,
    model: &str,
) -> Result<(String, Option<String>), Invalid> {
    let whom = format!(" for `{model}`");
    prompt_within(prompt, 32000, model)?;
    if files.len() > NEWEST_MAX_IMAGES {
        return Err(invalid(
            "image",
            format!("`image` takes at most {NEWEST_MAX_IMAGES} files{whom}."),
        ));
    }
    for f in files {
        let data = &raw[f.range.clone()];
        if data.len() >= NEWEST_MAX_BYTES || kind(data).is_none() {
            return Err(invalid(
                "image",
                format!("Each `image` must be a PNG, WebP or JPEG file of less than 50 MB{whom}."),
            ));
        }
    }
    let first = png_size(&raw[files[0].range.clone()]);
    check_mask(raw, form, first, &whom)?;
    if text(form, "response_format").is_some() {
        return Err(invalid(
            "response_format",
            format!("`response_format` is not supported{whom}, which always returns `b64_json`."),
        ));
    }
    let size = text(form, "size").unwrap_or("auto");
    one_of(
        size,
        &["1024x1024", "1536x1024", "1024x1536", "auto"],
        "size",
        &whom,
    )?;
    let quality = text(form, "quality").unwrap_or("auto");
    one_of(
        quality,
        &["low", "medium", "high", "auto"],
        "quality",
        &whom,
    )?;
    let background = text(form, "background");
    if let Some(b) = background {
        one_of(b, &["transparent", "opaque", "auto"], "background", &whom)?;
    }
    let format = text(form, "output_format").unwrap_or("png");
    one_of(format, &["png", "webp", "jpeg"], "output_format", &whom)?;
    if background == Some("transparent") && format == "jpeg" {
        return Err(invalid(
            "output_format",
            "`output_format` must be `png` or `webp` when `background` is `transparent`: `jpeg` has no transparency.",
        ));
    }
    if int(form, "output_compression", 0, 100)?.is_some() && format == "png" {
        return Err(invalid(
            "output_compression",
            "`output_compression` applies only to `output_format` `webp` or `jpeg`, not `png`.",
        ));
    }
    if let Some(f) = text(form, "input_fidelity") {
        one_of(f, &["high", "low"], "input_fidelity", &whom)?;
    }
    int(form, "partial_images", 0, 3)?;
    Ok((size.to_string(), Some(quality.to_string())))
}

/// The mask: a PNG under 4 MB, of the image's dimensions when both are known.
fn check_mask(
    raw: &[u8],
    form: &Form,
    image: Option<(u32, u32)>,
    whom: &str,
) -> Result<(), Invalid> {
    let Some(mask) = form.file("mask") else {
        if form.field("mask").is_some() {
            return Err(invalid("mask", "`mask` must be a file."));
        }
        return Ok(());
    };
    let data = &raw[mask.range.clone()];
    if data.len() >= SMALLEST_MAX_BYTES || kind(data) != Some("png") {
        return Err(invalid(
            "mask",
            format!("`mask` must be a PNG file of less than 4 MB{whom}."),
        ));
    }
    if let (Some(m), Some(i)) = (png_size(data), image) {
        if m != i {
            return Err(invalid(
                "mask",
                format!(
                    "`mask` is {}x{} but the image is {}x{}: they must match.",
                    m.0, m.1, i.0, i.1
                ),
            ));
        }
    }
    Ok(())
}

/// The body with one more text field, appended after the last part (every other byte
/// as it was).
fn with_field(
    raw: &[u8],
    form: &Form,
    boundary: &str,
    name: &str,
    value: &str,
) -> Result<Bytes, Invalid> {
    let end = form
        .fields
        .iter()
        .map(|f| f.range.end)
        .chain(form.files.iter().map(|f| f.range.end))
        .max()
        .ok_or_else(|| invalid("image", "`image` is required: the image file to edit."))?;
    if value.contains(['\r', '\n', '"']) {
        return Err(invalid(name, format!("`{name}` is not a valid value.")));
    }
    let part = format!(
        "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}"
    );
    let mut out = Vec::with_capacity(raw.len() + part.len());
    out.extend_from_slice(&raw[..end]);
    out.extend_from_slice(part.as_bytes());
    out.extend_from_slice(&raw[end..]);
    Ok(Bytes::from(out))
}

#[cfg(test)]
#[path = "edit_form_tests.rs"]
mod tests;
