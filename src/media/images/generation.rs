//! `POST /v1/images/generations` (spec 4.6 and the limits of spec 8). Field names and the
//! values spec 4.6 leaves out follow the OpenAI Images API the spec describes.

use super::fields::{invalid, listing, one_of, opt_bool, opt_int, opt_str, present};
use super::{Families, Family, ImageJob};
use crate::protocol::Invalid;
use serde_json::{Map, Value};

/// What spec 8 allows each family.
struct Rules {
    /// Prompt length in characters (Unicode scalar values).
    max_prompt_chars: usize,
    max_n: i64,
    sizes: &'static [&'static str],
    default_size: &'static str,
    qualities: &'static [&'static str],
    default_quality: &'static str,
}

const SMALLEST: Rules = Rules {
    max_prompt_chars: 1000,
    max_n: 10,
    sizes: &["256x256", "512x512", "1024x1024"],
    default_size: "1024x1024",
    qualities: &["standard"],
    default_quality: "standard",
};

// Spec 8: the middle model makes one image per request.
const MIDDLE: Rules = Rules {
    max_prompt_chars: 4000,
    max_n: 1,
    sizes: &["1024x1024", "1792x1024", "1024x1792"],
    default_size: "1024x1024",
    qualities: &["standard", "hd"],
    default_quality: "standard",
};

const NEWEST: Rules = Rules {
    max_prompt_chars: 32000,
    max_n: 10,
    sizes: &["1024x1024", "1536x1024", "1024x1536", "auto"],
    default_size: "auto",
    qualities: &["low", "medium", "high", "auto"],
    default_quality: "auto",
};

fn rules(family: Family) -> &'static Rules {
    match family {
        Family::Smallest => &SMALLEST,
        Family::Middle => &MIDDLE,
        Family::Newest => &NEWEST,
    }
}

/// Spec 4.6: parameters only the newest family takes. Their presence also picks the
/// newest family as the default model. The OpenAI reference marks the output format and
/// compression (and partial images) as GPT-image-only too.
const NEWEST_ONLY: &[&str] = &[
    "background",
    "moderation",
    "output_format",
    "output_compression",
    "partial_images",
];

/// The size an image of a model outside the families is priced at when none is asked.
const GENERIC_DEFAULT_SIZE: &str = "1024x1024";

/// Spec 4.6 and 8: validates a generations body and fills in `model` when it is absent.
pub fn check_generation(body: &mut Value, families: &Families) -> Result<ImageJob, Invalid> {
    let Some(obj) = body.as_object_mut() else {
        return Err(Invalid {
            param: None,
            message: "The request body must be a JSON object.".into(),
        });
    };
    let model = match present(obj, "model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return Err(invalid("model", "`model` must be a non-empty string.")),
        None => {
            let model = default_model(obj, families)?;
            obj.insert("model".into(), Value::String(model.clone()));
            model
        }
    };
    let obj: &Map<String, Value> = obj;
    let family = families.family_of(&model);
    let prompt = prompt(obj)?;
    let n = opt_int(obj, "n", "n", 1..=10)?.unwrap_or(1);
    let size = opt_str(obj, "size", "size")?;
    let quality = opt_str(obj, "quality", "quality")?;
    check_stream(obj)?;
    let Some(family) = family else {
        // A model outside the configured families: the upstream knows its own rules.
        return Ok(ImageJob {
            model,
            family: None,
            n: n.unsigned_abs(),
            size: size.unwrap_or(GENERIC_DEFAULT_SIZE).to_string(),
            quality: quality.map(str::to_string),
        });
    };
    let rules = rules(family);
    let whom = format!(" for `{model}`");
    if prompt.len() > rules.max_prompt_chars && prompt.chars().count() > rules.max_prompt_chars {
        return Err(invalid(
            "prompt",
            format!(
                "`prompt` must be at most {} characters{whom}.",
                rules.max_prompt_chars
            ),
        ));
    }
    if n > rules.max_n {
        return Err(invalid("n", format!("`n` must be 1{whom}.")));
    }
    let size = size.unwrap_or(rules.default_size);
    one_of(size, rules.sizes, "size", &whom)?;
    let quality = quality.unwrap_or(rules.default_quality);
    one_of(quality, rules.qualities, "quality", &whom)?;
    match family {
        Family::Newest => check_newest(obj, &whom)?,
        Family::Smallest | Family::Middle => refuse_newest_only(obj, &model, families)?,
    }
    check_style(obj, family, &whom)?;
    check_response_format(obj, family, &whom)?;
    opt_str(obj, "user", "user")?;
    Ok(ImageJob {
        model,
        family: Some(family),
        n: n.unsigned_abs(),
        size: size.to_string(),
        quality: Some(quality.to_string()),
    })
}

/// Spec 4.6: the smallest family's first model, or the newest family's when a parameter
/// only it takes is present.
fn default_model(obj: &Map<String, Value>, families: &Families) -> Result<String, Invalid> {
    let wants_newest = NEWEST_ONLY.iter().any(|k| present(obj, k).is_some());
    let family = if wants_newest {
        Family::Newest
    } else {
        Family::Smallest
    };
    match families.models(family).first() {
        Some(m) => Ok(m.clone()),
        None => Err(invalid(
            "model",
            "`model` is required: no default image model is configured.",
        )),
    }
}

fn prompt(obj: &Map<String, Value>) -> Result<&str, Invalid> {
    match present(obj, "prompt") {
        Some(Value::String(p)) if !p.is_empty() => Ok(p),
        Some(Value::String(_)) => Err(invalid("prompt", "`prompt` must not be empty.")),
        Some(_) => Err(invalid("prompt", "`prompt` must be a string.")),
        None => Err(invalid("prompt", "`prompt` is required.")),
    }
}

/// The relay bills from one JSON answer; a streamed image answer carries no `data` array
/// to count, so it is refused rather than relayed unbilled.
fn check_stream(obj: &Map<String, Value>) -> Result<(), Invalid> {
    if opt_bool(obj, "stream", "stream")? == Some(true) {
        return Err(invalid(
            "stream",
            "Streaming image generation is not supported; omit `stream` or set it to false.",
        ));
    }
    Ok(())
}

fn refuse_newest_only(
    obj: &Map<String, Value>,
    model: &str,
    families: &Families,
) -> Result<(), Invalid> {
    let Some(key) = NEWEST_ONLY.iter().find(|k| present(obj, k).is_some()) else {
        return Ok(());
    };
    let newest: Vec<&str> = families.newest.iter().map(String::as_str).collect();
    let which = if newest.is_empty() {
        String::new()
    } else {
        format!(" ({})", listing(&newest))
    };
    Err(invalid(
        *key,
        format!("`{key}` is only supported by the newest image models{which}, not by `{model}`."),
    ))
}

fn check_newest(obj: &Map<String, Value>, whom: &str) -> Result<(), Invalid> {
    let background = opt_str(obj, "background", "background")?;
    if let Some(b) = background {
        one_of(b, &["transparent", "opaque", "auto"], "background", whom)?;
    }
    if let Some(m) = opt_str(obj, "moderation", "moderation")? {
        one_of(m, &["low", "auto"], "moderation", whom)?;
    }
    let format = opt_str(obj, "output_format", "output_format")?.unwrap_or("png");
    one_of(format, &["png", "webp", "jpeg"], "output_format", whom)?;
    // Spec 4.6: a transparent background needs a format that has transparency.
    if background == Some("transparent") && format == "jpeg" {
        return Err(invalid(
            "output_format",
            "`output_format` must be `png` or `webp` when `background` is `transparent`: `jpeg` has no transparency.",
        ));
    }
    // The OpenAI reference: compression applies to `webp` and `jpeg` only.
    if opt_int(obj, "output_compression", "output_compression", 0..=100)?.is_some()
        && format == "png"
    {
        return Err(invalid(
            "output_compression",
            "`output_compression` applies only to `output_format` `webp` or `jpeg`, not `png`.",
        ));
    }
    opt_int(obj, "partial_images", "partial_images", 0..=3)?;
    Ok(())
}

fn check_style(obj: &Map<String, Value>, family: Family, whom: &str) -> Result<(), Invalid> {
    let Some(style) = opt_str(obj, "style", "style")? else {
        return Ok(());
    };
    if family != Family::Middle {
        return Err(invalid(
            "style",
            format!("`style` is only supported by the middle image models, not{whom}."),
        ));
    }
    one_of(style, &["vivid", "natural"], "style", whom)
}

fn check_response_format(
    obj: &Map<String, Value>,
    family: Family,
    whom: &str,
) -> Result<(), Invalid> {
    let Some(format) = opt_str(obj, "response_format", "response_format")? else {
        return Ok(());
    };
    if family == Family::Newest {
        return Err(invalid(
            "response_format",
            format!("`response_format` is not supported{whom}, which always returns `b64_json`."),
        ));
    }
    one_of(format, &["url", "b64_json"], "response_format", whom)
}

#[cfg(test)]
mod tests;
