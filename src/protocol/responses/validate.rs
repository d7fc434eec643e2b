//! Request validation (spec 4.4, 4.5): the 400s a responses request gets before anything
//! is reserved, whichever channel serves it. Only shapes are checked here; whether a
//! field can be translated for a non-native upstream is decided in `request`.

use super::invalid;
use crate::protocol::Invalid;
use serde_json::{Map, Value};

/// A field, its type check, and the type's name for the message.
type TypedField = (&'static str, fn(&Value) -> bool, &'static str);

const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

/// Spec 4.4/4.5: `model` required; field types. `param` names the field.
pub fn validate(body: &Value) -> Result<(), Invalid> {
    let obj = crate::protocol::body_object(body)?;
    crate::protocol::check_model(obj.get("model"))?;
    let typed: &[TypedField] = &[
        ("instructions", Value::is_string, "a string"),
        ("temperature", Value::is_number, "a number"),
        ("top_p", Value::is_number, "a number"),
        ("stream", Value::is_boolean, "a boolean"),
        ("tools", Value::is_array, "an array"),
        ("reasoning", Value::is_object, "an object"),
        ("previous_response_id", Value::is_string, "a string"),
        ("text", Value::is_object, "an object"),
        ("parallel_tool_calls", Value::is_boolean, "a boolean"),
        ("user", Value::is_string, "a string"),
    ];
    for (field, ok, what) in typed {
        if let Some(v) = present(obj, field) {
            if !ok(v) {
                return Err(invalid(field, format!("`{field}` must be {what}.")));
            }
        }
    }
    if let Some(v) = present(obj, "max_output_tokens") {
        if v.as_u64().is_none_or(|n| n < 1) {
            return Err(invalid(
                "max_output_tokens",
                "`max_output_tokens` must be an integer of at least 1.",
            ));
        }
    }
    if let Some(v) = present(obj, "tool_choice") {
        if !v.is_string() && !v.is_object() {
            return Err(invalid(
                "tool_choice",
                "`tool_choice` must be a string or an object.",
            ));
        }
    }
    if let Some(v) = present(obj, "truncation") {
        if !matches!(v.as_str(), Some("auto" | "disabled")) {
            return Err(invalid(
                "truncation",
                "`truncation` must be `auto` or `disabled`.",
            ));
        }
    }
    if let Some(Value::Array(tools)) = obj.get("tools") {
        for (i, t) in tools.iter().enumerate() {
            if !t.is_object() {
                return Err(invalid(
                    format!("tools[{i}]"),
                    "Each tool must be an object.",
                ));
            }
        }
    }
    if let Some(Value::Object(r)) = obj.get("reasoning") {
        reasoning(r)?;
    }
    match present(obj, "input") {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| input_item(i, item)),
        Some(_) => Err(invalid(
            "input",
            "`input` must be a string or an array of input items.",
        )),
    }
}

/// A field that is there and not `null` (a `null` optional field means "not set").
fn present<'a>(obj: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    obj.get(field).filter(|v| !v.is_null())
}

fn reasoning(r: &Map<String, Value>) -> Result<(), Invalid> {
    if let Some(e) = present(r, "effort") {
        if !e.as_str().is_some_and(|e| EFFORTS.contains(&e)) {
            return Err(invalid(
                "reasoning.effort",
                "`reasoning.effort` must be one of `none`, `minimal`, `low`, `medium`, `high`, `xhigh`.",
            ));
        }
    }
    if let Some(s) = present(r, "summary") {
        if !s.is_string() {
            return Err(invalid(
                "reasoning.summary",
                "`reasoning.summary` must be a string.",
            ));
        }
    }
    Ok(())
}

/// The shapes of the item types the gateway reads; other types are left to the upstream
/// (a native channel understands them; `to_ir` refuses them for the others).
fn input_item(i: usize, item: &Value) -> Result<(), Invalid> {
    let at = |field: &str| format!("input[{i}].{field}");
    let Some(obj) = item.as_object() else {
        return Err(invalid(
            format!("input[{i}]"),
            "Each input item must be an object.",
        ));
    };
    let kind = match present(obj, "type") {
        None => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(_) => return Err(invalid(at("type"), "`type` must be a string.")),
    };
    let string = |field: &str| match obj.get(field) {
        Some(Value::String(_)) => Ok(()),
        _ => Err(invalid(at(field), format!("`{field}` must be a string."))),
    };
    match kind {
        None | Some("message") => {
            if !obj.contains_key("role") && kind.is_none() {
                return Err(invalid(
                    at("type"),
                    "Each input item needs a `type` (or a `role` for a message).",
                ));
            }
            match obj.get("role").and_then(Value::as_str) {
                Some("user" | "assistant" | "system" | "developer") => {}
                _ => {
                    return Err(invalid(
                        at("role"),
                        "`role` must be one of `user`, `assistant`, `system`, `developer`.",
                    ))
                }
            }
            match obj.get("content") {
                Some(Value::String(_)) => Ok(()),
                Some(Value::Array(parts)) => {
                    for (j, p) in parts.iter().enumerate() {
                        if !p.get("type").is_some_and(Value::is_string) {
                            return Err(invalid(
                                format!("input[{i}].content[{j}]"),
                                "Each content part must be an object with a string `type`.",
                            ));
                        }
                    }
                    Ok(())
                }
                _ => Err(invalid(
                    at("content"),
                    "`content` must be a string or an array of content parts.",
                )),
            }
        }
        Some("function_call") => {
            string("call_id")?;
            string("name")?;
            string("arguments")
        }
        Some("function_call_output") => {
            string("call_id")?;
            match obj.get("output") {
                Some(Value::String(_) | Value::Array(_)) => Ok(()),
                _ => Err(invalid(
                    at("output"),
                    "`output` must be a string or an array of content parts.",
                )),
            }
        }
        Some("reasoning") => match present(obj, "summary") {
            None | Some(Value::Array(_)) => Ok(()),
            Some(_) => Err(invalid(at("summary"), "`summary` must be an array.")),
        },
        Some(_) => Ok(()),
    }
}
