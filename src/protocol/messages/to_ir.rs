//! A client's messages request → the neutral request, for another protocol's upstream.
//! What the other protocols cannot carry and whose loss would change the answer
//! (documents, server tools, MCP servers, file references) is a 400 naming the field;
//! what only tunes delivery (`cache_control`, `citations`, `service_tier`) is dropped.

use super::invalid;
use crate::protocol::ir::{self, Part, Reasoning, ResponseFormat, Role, ToolChoice};
use crate::protocol::Invalid;
use serde_json::{Map, Value};

pub fn to_ir(body: &Value) -> Result<ir::Request, Invalid> {
    let obj = body.as_object().ok_or_else(|| Invalid {
        param: None,
        message: "The request body must be a JSON object.".into(),
    })?;
    let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
    if get("mcp_servers")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
    {
        return Err(invalid(
            "mcp_servers",
            "`mcp_servers` (remote MCP tools) cannot be used with this model's provider.",
        ));
    }
    let mut req = ir::Request {
        system: system(get("system"))?,
        max_tokens: super::wire::output_limit(obj),
        temperature: get("temperature").and_then(Value::as_f64),
        top_p: get("top_p").and_then(Value::as_f64),
        top_k: get("top_k").and_then(Value::as_u64),
        stop: get("stop_sequences")
            .and_then(Value::as_array)
            .map(|s| s.iter().filter_map(|s| s.as_str().map(str::to_string)))
            .into_iter()
            .flatten()
            .collect(),
        user: get("metadata")
            .and_then(|m| m.get("user_id"))
            .and_then(Value::as_str)
            .map(str::to_string),
        reasoning: get("thinking").and_then(thinking),
        response_format: output_format(obj),
        ..Default::default()
    };
    let messages = get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("messages", "`messages` is required."))?;
    for (i, m) in messages.iter().enumerate() {
        req.messages.push(message(i, m)?);
    }
    if let Some(tools) = get("tools").and_then(Value::as_array) {
        for (i, t) in tools.iter().enumerate() {
            req.tools.push(tool(i, t)?);
        }
    }
    if let Some(c) = get("tool_choice") {
        req.tool_choice = match c.get("type").and_then(Value::as_str) {
            Some("auto") => Some(ToolChoice::Auto),
            Some("any") => Some(ToolChoice::Required),
            Some("none") => Some(ToolChoice::None),
            Some("tool") => c
                .get("name")
                .and_then(Value::as_str)
                .map(|n| ToolChoice::Tool(n.to_string())),
            _ => None,
        };
        if c.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
            req.parallel_tool_calls = Some(false);
        }
    }
    Ok(req)
}

fn system(v: Option<&Value>) -> Result<Vec<String>, Invalid> {
    match v {
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![s.clone()]),
        Some(Value::Array(blocks)) => {
            let mut out = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => {
                        if !t.is_empty() {
                            out.push(t.clone());
                        }
                    }
                    _ => {
                        let p = format!("system[{i}]");
                        return Err(invalid(&p, format!("`{p}` must be a text block.")));
                    }
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

fn message(i: usize, m: &Value) -> Result<ir::Message, Invalid> {
    let role = match m.get("role").and_then(Value::as_str) {
        Some("assistant") => Role::Assistant,
        Some("user") => Role::User,
        _ => {
            let p = format!("messages[{i}].role");
            return Err(invalid(&p, format!("`{p}` must be `user` or `assistant`.")));
        }
    };
    let content = match m.get("content") {
        Some(Value::String(s)) => vec![Part::Text(s.clone())],
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                parts.push(block(&format!("messages[{i}].content[{j}]"), b)?);
            }
            parts
        }
        _ => {
            let p = format!("messages[{i}].content");
            return Err(invalid(&p, format!("`{p}` is required.")));
        }
    };
    Ok(ir::Message { role, content })
}

/// A string field of a block, or a 400 naming it.
fn text_field<'a>(path: &str, b: &'a Value, key: &str) -> Result<&'a str, Invalid> {
    b.get(key).and_then(Value::as_str).ok_or_else(|| {
        let p = format!("{path}.{key}");
        invalid(&p, format!("`{p}` must be a string."))
    })
}

fn block(path: &str, b: &Value) -> Result<Part, Invalid> {
    let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
    Ok(match kind {
        "text" => Part::Text(text_field(path, b, "text")?.to_string()),
        "image" => Part::Image(image(path, b)?),
        "tool_use" => {
            // The id may carry a generate-content signature we issued (ir::join_call_id).
            let (id, signature) = ir::split_call_id(text_field(path, b, "id")?);
            Part::ToolCall(ir::ToolCall {
                id: id.to_string(),
                name: text_field(path, b, "name")?.to_string(),
                arguments: match b.get("input") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(input) => input.to_string(),
                },
                signature: signature.map(str::to_string),
            })
        }
        "tool_result" => Part::ToolResult(tool_result(path, b)?),
        "thinking" => Part::Thinking {
            text: text_field(path, b, "thinking")?.to_string(),
            signature: b
                .get("signature")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        },
        "redacted_thinking" => Part::RedactedThinking(text_field(path, b, "data")?.to_string()),
        other => {
            let p = format!("{path}.type");
            return Err(invalid(
                &p,
                format!("`{p}`: content blocks of type `{other}` cannot be sent to this model's provider."),
            ));
        }
    })
}

fn image(path: &str, b: &Value) -> Result<ir::Image, Invalid> {
    let src_path = format!("{path}.source");
    let src = b
        .get("source")
        .filter(|s| s.is_object())
        .ok_or_else(|| invalid(&src_path, format!("`{src_path}` must be an object.")))?;
    match src.get("type").and_then(Value::as_str) {
        Some("base64") => Ok(ir::Image::Base64 {
            media_type: text_field(&src_path, src, "media_type")?.to_string(),
            data: text_field(&src_path, src, "data")?.to_string(),
        }),
        Some("url") => Ok(ir::Image::from_url(text_field(&src_path, src, "url")?)),
        _ => {
            let p = format!("{src_path}.type");
            Err(invalid(
                &p,
                format!("`{p}` must be `base64` or `url` for this model's provider."),
            ))
        }
    }
}

fn tool_result(path: &str, b: &Value) -> Result<ir::ToolResult, Invalid> {
    let (call_id, _signature) = ir::split_call_id(text_field(path, b, "tool_use_id")?);
    let content = match b.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![Part::Text(s.clone())],
        Some(Value::Array(items)) => {
            let mut parts = Vec::with_capacity(items.len());
            for (k, item) in items.iter().enumerate() {
                let p = format!("{path}.content[{k}]");
                match item.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        parts.push(Part::Text(text_field(&p, item, "text")?.to_string()))
                    }
                    Some("image") => parts.push(Part::Image(image(&p, item)?)),
                    other => {
                        let p = format!("{p}.type");
                        return Err(invalid(
                            &p,
                            format!(
                                "`{p}`: tool results of type `{}` cannot be sent to this model's provider.",
                                other.unwrap_or("(missing)")
                            ),
                        ));
                    }
                }
            }
            parts
        }
        Some(_) => {
            let p = format!("{path}.content");
            return Err(invalid(
                &p,
                format!("`{p}` must be a string or an array of blocks."),
            ));
        }
    };
    Ok(ir::ToolResult {
        call_id: call_id.to_string(),
        name: None,
        content,
        is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn tool(i: usize, t: &Value) -> Result<ir::Tool, Invalid> {
    let p = format!("tools[{i}]");
    match t.get("type").and_then(Value::as_str) {
        None | Some("custom") => {}
        Some(other) => {
            let p = format!("{p}.type");
            // Server tools (web search, code execution, computer use...) run at the
            // provider: no other protocol can run them.
            return Err(invalid(
                &p,
                format!(
                    "`{p}`: the server tool `{other}` cannot be used with this model's provider."
                ),
            ));
        }
    }
    Ok(ir::Tool {
        name: text_field(&p, t, "name")?.to_string(),
        description: t
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        parameters: match t.get("input_schema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => Value::Object(Map::from_iter([(
                "type".to_string(),
                Value::String("object".into()),
            )])),
        },
    })
}

fn thinking(t: &Value) -> Option<Reasoning> {
    match t.get("type").and_then(Value::as_str) {
        Some("enabled") => Some(Reasoning {
            budget_tokens: t.get("budget_tokens").and_then(Value::as_u64),
            ..Default::default()
        }),
        Some("disabled") => Some(Reasoning {
            disabled: true,
            ..Default::default()
        }),
        _ => None,
    }
}

/// Structured outputs: `output_config.format` (and the earlier beta `output_format`),
/// `{type: json_schema, schema}`. Dropping it would change the answer's shape.
fn output_format(obj: &Map<String, Value>) -> Option<ResponseFormat> {
    let f = obj
        .get("output_config")
        .and_then(|c| c.get("format"))
        .filter(|f| f.is_object())
        .or_else(|| obj.get("output_format").filter(|f| f.is_object()))?;
    match f.get("type").and_then(Value::as_str) {
        Some("json_schema") => Some(ResponseFormat::JsonSchema {
            name: "response".into(),
            schema: f.get("schema").cloned().unwrap_or(Value::Null),
            strict: None,
        }),
        _ => None,
    }
}

#[cfg(test)]
#[path = "to_ir_tests.rs"]
mod tests;
