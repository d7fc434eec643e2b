//! `POST /v1/images/edits` in the native image-model shape of spec 4.7: instructions and
//! images as chat-like messages under `input`, options under `parameters`.

use super::fields::{invalid, opt_bool, opt_int, opt_str, present};
use super::{Families, Family, ImageJob};
use crate::protocol::Invalid;
use serde_json::{Map, Value};

/// Each side of a `WxH` / `W*H` size, in pixels.
const MIN_SIDE: u32 = 256;
const MAX_SIDE: u32 = 4096;
const MAX_NEGATIVE_PROMPT_CHARS: usize = 500;
/// The native API's seed range.
const MAX_SEED: i64 = 2_147_483_647;
const DEFAULT_SIZE: &str = "1024x1024";

/// Spec 4.7: validates the native edit shape.
pub fn check_edit(body: &Value, families: &Families) -> Result<ImageJob, Invalid> {
    let Some(obj) = body.as_object() else {
        return Err(Invalid {
            param: None,
            message: "The request body must be a JSON object.".into(),
        });
    };
    let model = match present(obj, "model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return Err(invalid("model", "`model` must be a non-empty string.")),
        None => return Err(invalid("model", "`model` is required.")),
    };
    let input = match present(obj, "input") {
        Some(Value::Object(input)) => input,
        Some(_) => return Err(invalid("input", "`input` must be an object.")),
        None => return Err(invalid("input", "`input` is required.")),
    };
    check_messages(input)?;
    let family = families.family_of(&model);
    let (n, size) = match present(obj, "parameters") {
        None => (1, DEFAULT_SIZE.to_string()),
        Some(Value::Object(p)) => check_parameters(p, family, &model)?,
        Some(_) => return Err(invalid("parameters", "`parameters` must be an object.")),
    };
    Ok(ImageJob {
        model,
        family,
        n,
        size,
        quality: None,
    })
}

/// Every message and content part well typed, and the request as a whole carries at
/// least one image (what is edited) and one text (the instruction).
fn check_messages(input: &Map<String, Value>) -> Result<(), Invalid> {
    const PARAM: &str = "input.messages";
    let messages = match present(input, "messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(invalid(PARAM, "`input.messages` must be an array.")),
        None => return Err(invalid(PARAM, "`input.messages` is required.")),
    };
    if messages.is_empty() {
        return Err(invalid(PARAM, "`input.messages` must not be empty."));
    }
    let (mut images, mut texts) = (0usize, 0usize);
    for (i, message) in messages.iter().enumerate() {
        let at = format!("{PARAM}[{i}]");
        let Value::Object(message) = message else {
            return Err(invalid(&at, format!("`{at}` must be an object.")));
        };
        opt_str(message, "role", &format!("{at}.role"))?;
        let content = match present(message, "content") {
            None => continue,
            Some(Value::Array(c)) => c,
            Some(_) => {
                let param = format!("{at}.content");
                return Err(invalid(&param, format!("`{param}` must be an array.")));
            }
        };
        for (j, part) in content.iter().enumerate() {
            let at = format!("{at}.content[{j}]");
            let Value::Object(part) = part else {
                return Err(invalid(&at, format!("`{at}` must be an object.")));
            };
            let image = opt_str(part, "image", &format!("{at}.image"))?;
            let text = opt_str(part, "text", &format!("{at}.text"))?;
            if image.is_none() && text.is_none() {
                return Err(invalid(
                    &at,
                    format!("`{at}` must have an `image` or a `text`."),
                ));
            }
            if let Some(image) = image {
                check_image(image, &format!("{at}.image"))?;
                images += 1;
            }
            if text.is_some_and(|t| !t.trim().is_empty()) {
                texts += 1;
            }
        }
    }
    if images == 0 {
        return Err(invalid(
            PARAM,
            "An edit needs at least one `image` in `input.messages[].content`.",
        ));
    }
    if texts == 0 {
        return Err(invalid(
            PARAM,
            "An edit needs at least one non-empty `text` in `input.messages[].content` saying what to change.",
        ));
    }
    Ok(())
}

/// Spec 4.7: an image is an image URL; the native API also takes a `data:` URL or bare
/// base64. A shape check only: whether it decodes is the upstream's answer.
fn check_image(image: &str, param: &str) -> Result<(), Invalid> {
    let ok = if let Some(rest) = strip_prefix_ci(image, "data:") {
        // `data:image/png;base64,<payload>`
        match rest.split_once(',') {
            Some((header, payload)) => {
                strip_prefix_ci(header, "image/").is_some()
                    && header.to_ascii_lowercase().ends_with(";base64")
                    && is_base64(payload)
            }
            None => false,
        }
    } else if let Some((scheme, rest)) = image.split_once("://") {
        ["http", "https", "oss"]
            .iter()
            .any(|s| scheme.eq_ignore_ascii_case(s))
            && !rest.is_empty()
    } else {
        is_base64(image)
    };
    if ok {
        return Ok(());
    }
    Err(invalid(
        param,
        format!(
            "`{param}` must be an image URL (http or https), a `data:image/...;base64,` URL or base64 image data."
        ),
    ))
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        s.get(prefix.len()..)
    } else {
        None
    }
}

/// Standard or URL-safe base64 alphabet, `=` padding only at the end.
fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    !body.is_empty()
        && s.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
}

/// The native `parameters`; returns the images asked for and the size as `WxH`.
fn check_parameters(
    p: &Map<String, Value>,
    family: Option<Family>,
    model: &str,
) -> Result<(u64, String), Invalid> {
    let n = opt_int(p, "n", "parameters.n", 1..=10)?.unwrap_or(1);
    // Spec 8: the middle model makes one image per request.
    if family == Some(Family::Middle) && n != 1 {
        return Err(invalid(
            "parameters.n",
            format!("`parameters.n` must be 1 for `{model}`."),
        ));
    }
    if let Some(negative) = opt_str(p, "negative_prompt", "parameters.negative_prompt")? {
        if negative.chars().count() > MAX_NEGATIVE_PROMPT_CHARS {
            return Err(invalid(
                "parameters.negative_prompt",
                format!(
                    "`parameters.negative_prompt` must be at most {MAX_NEGATIVE_PROMPT_CHARS} characters."
                ),
            ));
        }
    }
    opt_bool(p, "prompt_extend", "parameters.prompt_extend")?;
    opt_bool(p, "watermark", "parameters.watermark")?;
    opt_int(p, "seed", "parameters.seed", 0..=MAX_SEED)?;
    let size = match opt_str(p, "size", "parameters.size")? {
        None => DEFAULT_SIZE.to_string(),
        Some(size) => match parse_size(size) {
            Some((w, h)) => format!("{w}x{h}"),
            None => {
                return Err(invalid(
                    "parameters.size",
                    format!(
                        "`parameters.size` must be `WIDTHxHEIGHT` or `WIDTH*HEIGHT` (for example `1024*1024`), each side from {MIN_SIDE} to {MAX_SIDE} pixels."
                    ),
                ))
            }
        },
    };
    Ok((n.unsigned_abs(), size))
}

/// `1024x768` or `1024*768` (the native spelling), each side within bounds.
fn parse_size(size: &str) -> Option<(u32, u32)> {
    let (w, h) = size.split_once(['x', '*'])?;
    let side = |s: &str| -> Option<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<u32>()
            .ok()
            .filter(|v| (MIN_SIDE..=MAX_SIDE).contains(v))
    };
    Some((side(w)?, side(h)?))
}

#[cfg(test)]
mod tests;
