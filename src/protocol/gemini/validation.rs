//! Spec 4.18: the shape of a generate-content request, checked before anything is
//! reserved. Semantic refusals (a part another protocol cannot carry) belong to `to_ir`:
//! the same request is fine for a generate-content upstream.

use super::super::Invalid;
use super::wire::{field, invalid, Section};
use serde_json::Value;

/// A field, its type check, and the type's name for the message.
type TypedField = (&'static str, fn(&Value) -> bool, &'static str);

fn is_string_array(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
}

fn is_object_array(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(Value::is_object))
}

pub fn validate(body: &Value) -> Result<(), Invalid> {
    if !body.is_object() {
        return Err(Invalid {
            param: None,
            message: "The request body must be a JSON object.".into(),
        });
    }
    let contents = match field(body, "contents") {
        Some(Value::Array(c)) => c,
        Some(_) => return Err(invalid("contents", "`contents` must be an array.")),
        None => return Err(invalid("contents", "`contents` is required.")),
    };
    if contents.is_empty() {
        return Err(invalid("contents", "`contents` must not be empty."));
    }
    for (i, c) in contents.iter().enumerate() {
        check_content(c, &format!("contents[{i}]"), true)?;
    }
    if let Some(s) = field(body, "systemInstruction") {
        // Its role is not read (the API ignores it), so it is not checked either.
        check_content(s, "systemInstruction", false)?;
    }
    let top: &[TypedField] = &[
        ("generationConfig", Value::is_object, "an object"),
        ("tools", is_object_array, "an array of objects"),
        ("toolConfig", Value::is_object, "an object"),
        ("safetySettings", Value::is_array, "an array"),
    ];
    check_types(body, "", top)?;
    let config: &[TypedField] = &[
        ("temperature", Value::is_number, "a number"),
        ("topP", Value::is_number, "a number"),
        ("topK", Value::is_u64, "a non-negative integer"),
        ("maxOutputTokens", Value::is_u64, "a non-negative integer"),
        ("candidateCount", Value::is_u64, "a non-negative integer"),
        ("seed", Value::is_i64, "an integer"),
        ("presencePenalty", Value::is_number, "a number"),
        ("frequencyPenalty", Value::is_number, "a number"),
        ("stopSequences", is_string_array, "an array of strings"),
        ("responseModalities", is_string_array, "an array of strings"),
        ("responseMimeType", Value::is_string, "a string"),
        ("thinkingConfig", Value::is_object, "an object"),
        ("speechConfig", Value::is_object, "an object"),
    ];
    let g = Section::of(body, "generationConfig");
    for (name, ok, what) in config {
        if let Some(v) = g.get(name) {
            if !ok(v) {
                let param = format!("generationConfig.{name}");
                return Err(invalid(&param, format!("`{param}` must be {what}.")));
            }
        }
    }
    // Vertex AI's GenerationConfig reference caps candidateCount at 8. Each candidate is a
    // whole answer the reservation must cover, so an unbounded count is refused here.
    if g.get("candidateCount")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > MAX_CANDIDATES)
    {
        return Err(invalid(
            "generationConfig.candidateCount",
            format!("`generationConfig.candidateCount` must be at most {MAX_CANDIDATES}."),
        ));
    }
    Ok(())
}

/// The most candidates one request may ask for.
pub const MAX_CANDIDATES: u64 = 8;

fn check_types(obj: &Value, prefix: &str, fields: &[TypedField]) -> Result<(), Invalid> {
    for (name, ok, what) in fields {
        if let Some(v) = field(obj, name) {
            if !ok(v) {
                let param = format!("{prefix}{name}");
                return Err(invalid(&param, format!("`{param}` must be {what}.")));
            }
        }
    }
    Ok(())
}

/// A `Content`: an object with an optional `role` (`user` or `model`) and optional
/// `parts`, an array of objects.
fn check_content(c: &Value, path: &str, check_role: bool) -> Result<(), Invalid> {
    if !c.is_object() {
        return Err(invalid(path, format!("`{path}` must be an object.")));
    }
    match field(c, "role") {
        None => {}
        Some(_) if !check_role => {}
        Some(Value::String(r)) if r == "user" || r == "model" => {}
        Some(_) => {
            return Err(invalid(
                format!("{path}.role"),
                format!("`{path}.role` must be \"user\" or \"model\"."),
            ))
        }
    }
    match field(c, "parts") {
        None => {}
        Some(Value::Array(parts)) => {
            if let Some(j) = parts.iter().position(|p| !p.is_object()) {
                let param = format!("{path}.parts[{j}]");
                return Err(invalid(&param, format!("`{param}` must be an object.")));
            }
        }
        Some(_) => {
            let param = format!("{path}.parts");
            return Err(invalid(&param, format!("`{param}` must be an array.")));
        }
    }
    Ok(())
}
