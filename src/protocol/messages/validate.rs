//! The messages protocol's 400s (spec 4.17 and 8), checked before anything is reserved.
//! Every message names the field (the messages error envelope has no `param`, so the
//! name must be in the sentence the client reads).

use super::invalid;
use crate::protocol::Invalid;
use serde_json::{Map, Value};

/// An optional field: absent and `null` are the same.
fn opt<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub fn validate(body: &Value) -> Result<(), Invalid> {
    let obj = crate::protocol::body_object(body)?;
    crate::protocol::check_model(opt(obj, "model"))?;
    messages(opt(obj, "messages"))?;
    match opt(obj, "max_tokens") {
        Some(v) if v.as_u64().is_some_and(|n| n >= 1) => {}
        Some(_) => {
            return Err(invalid(
                "max_tokens",
                "`max_tokens` must be an integer of at least 1.",
            ))
        }
        None => return Err(invalid("max_tokens", "`max_tokens` is required.")),
    }
    if let Some(t) = opt(obj, "temperature") {
        if !t.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t)) {
            return Err(invalid(
                "temperature",
                "`temperature` must be a number from 0 to 1.",
            ));
        }
    }
    if opt(obj, "top_p").is_some_and(|v| !v.is_number()) {
        return Err(invalid("top_p", "`top_p` must be a number."));
    }
    if opt(obj, "top_k").is_some_and(|v| !v.is_u64()) {
        return Err(invalid("top_k", "`top_k` must be a non-negative integer."));
    }
    if opt(obj, "stream").is_some_and(|v| !v.is_boolean()) {
        return Err(invalid("stream", "`stream` must be a boolean."));
    }
    if let Some(s) = opt(obj, "stop_sequences") {
        let items = s.as_array().ok_or_else(|| {
            invalid(
                "stop_sequences",
                "`stop_sequences` must be an array of strings.",
            )
        })?;
        if let Some(i) = items.iter().position(|s| !s.is_string()) {
            let p = format!("stop_sequences[{i}]");
            return Err(invalid(&p, format!("`{p}` must be a string.")));
        }
    }
    system(opt(obj, "system"))?;
    tools(opt(obj, "tools"))?;
    tool_choice(opt(obj, "tool_choice"))?;
    thinking(opt(obj, "thinking"))?;
    if let Some(m) = opt(obj, "metadata") {
        let m = m
            .as_object()
            .ok_or_else(|| invalid("metadata", "`metadata` must be an object."))?;
        if opt(m, "user_id").is_some_and(|u| !u.is_string()) {
            return Err(invalid(
                "metadata.user_id",
                "`metadata.user_id` must be a string.",
            ));
        }
    }
    Ok(())
}

fn messages(v: Option<&Value>) -> Result<(), Invalid> {
    let list = match v {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(invalid("messages", "`messages` must be an array.")),
        None => return Err(invalid("messages", "`messages` is required.")),
    };
    if list.is_empty() {
        return Err(invalid(
            "messages",
            "`messages` must hold at least one message.",
        ));
    }
    for (i, m) in list.iter().enumerate() {
        let p = format!("messages[{i}]");
        let m = m
            .as_object()
            .ok_or_else(|| invalid(&p, format!("`{p}` must be an object.")))?;
        match m.get("role").and_then(Value::as_str) {
            Some("user" | "assistant") => {}
            _ => {
                let p = format!("{p}.role");
                return Err(invalid(
                    &p,
                    format!(
                        "`{p}` must be `user` or `assistant` (system instructions go in `system`)."
                    ),
                ));
            }
        }
        let p = format!("{p}.content");
        match m.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(blocks)) => blocks_have_types(&p, blocks)?,
            Some(_) => {
                return Err(invalid(
                    &p,
                    format!("`{p}` must be a string or an array of content blocks."),
                ))
            }
            None => return Err(invalid(&p, format!("`{p}` is required."))),
        }
    }
    Ok(())
}

fn blocks_have_types(path: &str, blocks: &[Value]) -> Result<(), Invalid> {
    for (j, b) in blocks.iter().enumerate() {
        let p = format!("{path}[{j}]");
        let b = b
            .as_object()
            .ok_or_else(|| invalid(&p, format!("`{p}` must be an object.")))?;
        if !b.get("type").is_some_and(Value::is_string) {
            let p = format!("{p}.type");
            return Err(invalid(&p, format!("`{p}` must be a string.")));
        }
    }
    Ok(())
}

fn system(v: Option<&Value>) -> Result<(), Invalid> {
    match v {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => blocks_have_types("system", blocks),
        Some(_) => Err(invalid(
            "system",
            "`system` must be a string or an array of text blocks.",
        )),
    }
}

fn tools(v: Option<&Value>) -> Result<(), Invalid> {
    let Some(v) = v else { return Ok(()) };
    let list = v
        .as_array()
        .ok_or_else(|| invalid("tools", "`tools` must be an array."))?;
    for (i, t) in list.iter().enumerate() {
        let p = format!("tools[{i}]");
        let t = t
            .as_object()
            .ok_or_else(|| invalid(&p, format!("`{p}` must be an object.")))?;
        if !t.get("name").is_some_and(Value::is_string) {
            let p = format!("{p}.name");
            return Err(invalid(&p, format!("`{p}` must be a string.")));
        }
    }
    Ok(())
}

fn tool_choice(v: Option<&Value>) -> Result<(), Invalid> {
    let Some(v) = v else { return Ok(()) };
    let c = v
        .as_object()
        .ok_or_else(|| invalid("tool_choice", "`tool_choice` must be an object."))?;
    match c.get("type").and_then(Value::as_str) {
        Some("auto" | "any" | "none") => Ok(()),
        Some("tool") if c.get("name").is_some_and(Value::is_string) => Ok(()),
        Some("tool") => Err(invalid(
            "tool_choice.name",
            "`tool_choice.name` must be a string when `tool_choice.type` is `tool`.",
        )),
        _ => Err(invalid(
            "tool_choice.type",
            "`tool_choice.type` must be `auto`, `any`, `tool` or `none`.",
        )),
    }
}

fn thinking(v: Option<&Value>) -> Result<(), Invalid> {
    let Some(v) = v else { return Ok(()) };
    let t = v
        .as_object()
        .ok_or_else(|| invalid("thinking", "`thinking` must be an object."))?;
    match t.get("type").and_then(Value::as_str) {
        Some("disabled") => Ok(()),
        Some("enabled") if t.get("budget_tokens").is_some_and(Value::is_u64) => Ok(()),
        Some("enabled") => Err(invalid(
            "thinking.budget_tokens",
            "`thinking.budget_tokens` must be a non-negative integer when thinking is enabled.",
        )),
        _ => Err(invalid(
            "thinking.type",
            "`thinking.type` must be `enabled` or `disabled`.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Hello"}]
        })
    }

    fn with(field: &str, v: Value) -> Value {
        let mut b = base();
        b[field] = v;
        b
    }

    /// The field named by the 400, which must also appear in its sentence.
    fn param(body: Value) -> String {
        let e = validate(&body).unwrap_err();
        let p = e.param.clone().unwrap();
        assert!(e.message.contains(&p), "{e:?}");
        p
    }

    #[test]
    fn a_full_realistic_request_is_valid() {
        let body = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 2048,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "w", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}
            ],
            "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stream": true,
            "stop_sequences": ["END"],
            "tools": [{"name": "w", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "u-1"}
        });
        assert_eq!(validate(&body), Ok(()));
        // Optional fields sent as null are absent.
        assert_eq!(validate(&with("temperature", Value::Null)), Ok(()));
    }

    #[test]
    fn required_fields() {
        let mut b = base();
        b.as_object_mut().unwrap().remove("model");
        assert_eq!(param(b), "model");
        assert_eq!(param(with("model", json!(""))), "model");
        let mut b = base();
        b.as_object_mut().unwrap().remove("messages");
        assert_eq!(param(b), "messages");
        assert_eq!(param(with("messages", json!([]))), "messages");
        assert_eq!(param(with("messages", json!("hi"))), "messages");
        let mut b = base();
        b.as_object_mut().unwrap().remove("max_tokens");
        assert_eq!(param(b), "max_tokens");
        assert_eq!(param(with("max_tokens", json!(0))), "max_tokens");
        assert_eq!(param(with("max_tokens", json!(1.5))), "max_tokens");
        assert_eq!(param(with("max_tokens", json!(-3))), "max_tokens");
        assert_eq!(validate(&with("max_tokens", json!(1))), Ok(()));
    }

    #[test]
    fn messages_are_checked_item_by_item() {
        let m = |msgs: Value| param(with("messages", msgs));
        let ok = json!({"role": "user", "content": "x"});
        assert_eq!(
            m(json!([ok, ok, {"role": "system", "content": "x"}])),
            "messages[2].role"
        );
        assert_eq!(m(json!([{"content": "x"}])), "messages[0].role");
        assert_eq!(m(json!(["hi"])), "messages[0]");
        assert_eq!(m(json!([{"role": "user"}])), "messages[0].content");
        assert_eq!(
            m(json!([{"role": "user", "content": 5}])),
            "messages[0].content"
        );
        assert_eq!(
            m(json!([{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}])),
            "messages[0].content[1].type"
        );
        assert_eq!(
            m(json!([{"role": "user", "content": ["b"]}])),
            "messages[0].content[0]"
        );
    }

    #[test]
    fn optional_fields_have_types_and_ranges() {
        assert_eq!(param(with("temperature", json!(1.5))), "temperature");
        assert_eq!(param(with("temperature", json!(-0.1))), "temperature");
        assert_eq!(param(with("temperature", json!("hot"))), "temperature");
        assert_eq!(validate(&with("temperature", json!(1))), Ok(()));
        assert_eq!(param(with("top_p", json!("x"))), "top_p");
        assert_eq!(param(with("top_k", json!(-1))), "top_k");
        assert_eq!(param(with("top_k", json!(2.5))), "top_k");
        assert_eq!(param(with("stream", json!("yes"))), "stream");
        assert_eq!(
            param(with("stop_sequences", json!("END"))),
            "stop_sequences"
        );
        assert_eq!(
            param(with("stop_sequences", json!(["a", 1]))),
            "stop_sequences[1]"
        );
        assert_eq!(param(with("system", json!(3))), "system");
        assert_eq!(
            param(with("system", json!([{"text": "x"}]))),
            "system[0].type"
        );
        assert_eq!(validate(&with("system", json!("Be brief."))), Ok(()));
        assert_eq!(param(with("metadata", json!("u"))), "metadata");
        assert_eq!(
            param(with("metadata", json!({"user_id": 7}))),
            "metadata.user_id"
        );
    }

    #[test]
    fn tools_tool_choice_and_thinking() {
        assert_eq!(param(with("tools", json!({"name": "x"}))), "tools");
        assert_eq!(
            param(with("tools", json!([{"name": "a"}, {}]))),
            "tools[1].name"
        );
        assert_eq!(param(with("tools", json!([1]))), "tools[0]");
        assert_eq!(param(with("tool_choice", json!("auto"))), "tool_choice");
        assert_eq!(
            param(with("tool_choice", json!({"type": "required"}))),
            "tool_choice.type"
        );
        assert_eq!(
            param(with("tool_choice", json!({"type": "tool"}))),
            "tool_choice.name"
        );
        for t in ["auto", "any", "none"] {
            assert_eq!(validate(&with("tool_choice", json!({"type": t}))), Ok(()));
        }
        assert_eq!(
            validate(&with("tool_choice", json!({"type": "tool", "name": "w"}))),
            Ok(())
        );
        assert_eq!(param(with("thinking", json!(true))), "thinking");
        assert_eq!(
            param(with("thinking", json!({"type": "on"}))),
            "thinking.type"
        );
        assert_eq!(
            param(with("thinking", json!({"type": "enabled"}))),
            "thinking.budget_tokens"
        );
        assert_eq!(
            validate(&with("thinking", json!({"type": "disabled"}))),
            Ok(())
        );
    }
}
