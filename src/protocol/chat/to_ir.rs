//! A chat client's request → the pivot, for an upstream of another protocol.
//!
//! What the other protocols can carry is translated; what they cannot and whose loss
//! would change the answer (audio, files, `n` > 1, server-side tools, legacy
//! `function_call`) is a 400 naming the field; harmless extras (`logit_bias`, `store`,
//! `metadata`, message `name`...) are left behind.

use super::invalid;
use crate::protocol::ir::{self, Effort, Part, Reasoning, ResponseFormat, Role, ToolChoice};
use crate::protocol::Invalid;
use serde_json::{Map, Value};

/// Client request fields that only make sense to an OpenAI upstream, each with why.
const UNTRANSLATABLE: &[(&str, &str)] = &[
    (
        "functions",
        "Legacy `functions` are not supported here; use `tools`.",
    ),
    (
        "function_call",
        "Legacy `function_call` is not supported here; use `tool_choice`.",
    ),
    ("audio", "Audio output is not available for this model."),
    (
        "web_search_options",
        "Built-in web search is not available for this model.",
    ),
];

pub fn to_ir(body: Value) -> Result<ir::Request, Invalid> {
    let Value::Object(obj) = body else {
        return Err(Invalid {
            param: None,
            message: "The request body must be a JSON object.".into(),
        });
    };
    refuse_untranslatable(&obj)?;
    let mut req = ir::Request::default();
    if let Some(Value::Array(messages)) = obj.get("messages") {
        convert_messages(messages, &mut req)?;
    }
    // The rule the reservation was sized by (the smaller of the two members).
    req.max_tokens = super::wire::output_limit_in(|f| u64_field(&obj, f));
    sampling(&obj, &mut req);
    if let Some(Value::Array(tools)) = obj.get("tools") {
        req.tools = tools
            .iter()
            .enumerate()
            .map(|(i, t)| tool(i, t))
            .collect::<Result<_, _>>()?;
    }
    req.tool_choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(v) => Some(tool_choice(v)?),
    };
    req.parallel_tool_calls = obj.get("parallel_tool_calls").and_then(Value::as_bool);
    req.reasoning = reasoning_effort(obj.get("reasoning_effort"))?;
    req.response_format = match obj.get("response_format") {
        None | Some(Value::Null) => None,
        Some(v) => Some(response_format(v)?),
    };
    req.user = ["user", "safety_identifier"]
        .iter()
        .find_map(|f| obj.get(*f).and_then(Value::as_str))
        .map(str::to_string);
    Ok(req)
}

/// The 400s for what another protocol cannot carry without changing the answer:
/// [`UNTRANSLATABLE`] fields, more than one choice, log probabilities, output other
/// than text.
fn refuse_untranslatable(obj: &Map<String, Value>) -> Result<(), Invalid> {
    for (field, why) in UNTRANSLATABLE {
        if obj.get(*field).is_some_and(|v| !v.is_null()) {
            return Err(invalid(field, *why));
        }
    }
    if super::wire::choices_in(|f| u64_field(obj, f)) > 1 {
        return Err(invalid(
            "n",
            "Only one choice (`n` = 1) is available for this model.",
        ));
    }
    if obj.get("logprobs").and_then(Value::as_bool) == Some(true) {
        return Err(invalid(
            "logprobs",
            "Log probabilities are not available for this model.",
        ));
    }
    if let Some(Value::Array(m)) = obj.get("modalities") {
        if m.iter().any(|x| x.as_str() != Some("text")) {
            return Err(invalid(
                "modalities",
                "Only text output is available for this model.",
            ));
        }
    }
    Ok(())
}

/// The sampling settings: temperature, `top_p`, stop sequences, seed and penalties
/// (each left out when it is not of its type).
fn sampling(obj: &Map<String, Value>, req: &mut ir::Request) {
    req.temperature = obj.get("temperature").and_then(Value::as_f64);
    req.top_p = obj.get("top_p").and_then(Value::as_f64);
    req.stop = match obj.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    req.seed = obj.get("seed").and_then(Value::as_i64);
    req.presence_penalty = obj.get("presence_penalty").and_then(Value::as_f64);
    req.frequency_penalty = obj.get("frequency_penalty").and_then(Value::as_f64);
}

/// `reasoning_effort`: `none` turns reasoning off (the newer models' spelling), unlike
/// `minimal`; an unknown effort is a 400.
fn reasoning_effort(v: Option<&Value>) -> Result<Option<Reasoning>, Invalid> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "none" => Ok(Some(Reasoning {
            disabled: true,
            ..Default::default()
        })),
        Some(Value::String(s)) => match Effort::parse(s) {
            Some(e) => Ok(Some(Reasoning {
                effort: Some(e),
                ..Default::default()
            })),
            None => Err(invalid(
                "reasoning_effort",
                format!("Unknown `reasoning_effort` `{s}`."),
            )),
        },
        Some(_) => Err(invalid(
            "reasoning_effort",
            "`reasoning_effort` must be a string.",
        )),
    }
}

fn u64_field(obj: &Map<String, Value>, field: &str) -> Option<u64> {
    obj.get(field).and_then(Value::as_u64)
}

fn convert_messages(messages: &[Value], req: &mut ir::Request) -> Result<(), Invalid> {
    // Tool results and the user message right after them share one User turn, results
    // first: the messages protocol wants them together, and it is the same turn anyway.
    let mut after_tool = false;
    for (i, m) in messages.iter().enumerate() {
        let at = |field: &str| format!("messages[{i}].{field}");
        let role = m["role"].as_str().unwrap_or_default();
        if m.get("function_call").is_some_and(|v| !v.is_null()) {
            return Err(invalid(
                at("function_call"),
                "Legacy `function_call` messages are not supported here; use `tool_calls`.",
            ));
        }
        match role {
            "system" | "developer" => {
                for text in text_parts(&m["content"], &at("content"))? {
                    if !text.is_empty() {
                        req.system.push(text);
                    }
                }
                after_tool = false;
            }
            "user" => {
                let content = user_content(&m["content"], &at("content"))?;
                match req.messages.last_mut() {
                    Some(last) if after_tool => last.content.extend(content),
                    _ => req.messages.push(ir::Message {
                        role: Role::User,
                        content,
                    }),
                }
                after_tool = false;
            }
            "assistant" => {
                let content = assistant_content(m, i)?;
                // An empty turn says nothing, and other protocols reject empty turns.
                if !content.is_empty() {
                    req.messages.push(ir::Message {
                        role: Role::Assistant,
                        content,
                    });
                }
                after_tool = false;
            }
            "tool" => {
                let result = tool_result(m, &at)?;
                match req.messages.last_mut() {
                    Some(last) if after_tool => last.content.push(result),
                    _ => req.messages.push(ir::Message {
                        role: Role::User,
                        content: vec![result],
                    }),
                }
                after_tool = true;
            }
            "function" => {
                return Err(invalid(
                    at("role"),
                    "Legacy `function` messages are not supported here; use `tool` messages.",
                ))
            }
            other => {
                return Err(invalid(
                    at("role"),
                    format!("Unknown message role `{other}`."),
                ))
            }
        }
    }
    Ok(())
}

/// A `tool` message as the result of the call it names.
fn tool_result(m: &Value, at: &dyn Fn(&str) -> String) -> Result<Part, Invalid> {
    let Some(call_id) = m["tool_call_id"].as_str() else {
        return Err(invalid(
            at("tool_call_id"),
            "A `tool` message needs a string `tool_call_id`.",
        ));
    };
    let content = text_parts(&m["content"], &at("content"))?
        .into_iter()
        .map(Part::Text)
        .collect();
    Ok(Part::ToolResult(ir::ToolResult {
        call_id: ir::split_call_id(call_id).0.to_string(),
        name: None,
        content,
        is_error: false,
    }))
}

/// Content that may only hold text: a string or an array of `text` parts.
fn text_parts(content: &Value, at: &str) -> Result<Vec<String>, Invalid> {
    match content {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match (p["type"].as_str(), p["text"].as_str()) {
                (Some("text"), Some(t)) => Ok(t.to_string()),
                _ => Err(invalid(
                    format!("{at}[{j}]"),
                    "Only text parts are allowed here.",
                )),
            })
            .collect(),
        _ => Err(invalid(
            at,
            "`content` must be a string or an array of parts.",
        )),
    }
}

fn user_content(content: &Value, at: &str) -> Result<Vec<Part>, Invalid> {
    let parts = match content {
        Value::Null => return Ok(Vec::new()),
        Value::String(s) => return Ok(vec![Part::Text(s.clone())]),
        Value::Array(parts) => parts,
        _ => {
            return Err(invalid(
                at,
                "`content` must be a string or an array of parts.",
            ))
        }
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let here = format!("{at}[{j}]");
        match p["type"].as_str() {
            Some("text") => match p["text"].as_str() {
                Some(t) => out.push(Part::Text(t.to_string())),
                None => return Err(invalid(&here, "A `text` part needs a string `text`.")),
            },
            Some("image_url") => {
                // `detail` has no counterpart elsewhere; the image itself is what matters.
                let url = match &p["image_url"] {
                    Value::String(u) => Some(u.as_str()),
                    v => v["url"].as_str(),
                };
                match url {
                    Some(u) if !u.is_empty() => out.push(Part::Image(ir::Image::from_url(u))),
                    _ => return Err(invalid(&here, "An `image_url` part needs `image_url.url`.")),
                }
            }
            Some("input_audio") => {
                return Err(invalid(
                    &here,
                    "Audio input is not available for this model.",
                ))
            }
            Some("file") => {
                return Err(invalid(
                    &here,
                    "File input is not available for this model.",
                ))
            }
            Some(other) => {
                return Err(invalid(
                    &here,
                    format!("Unknown content part type `{other}`."),
                ))
            }
            None => return Err(invalid(&here, "Each content part needs a `type`.")),
        }
    }
    Ok(out)
}

fn assistant_content(m: &Value, i: usize) -> Result<Vec<Part>, Invalid> {
    let at = |field: &str| format!("messages[{i}].{field}");
    if m.get("audio").is_some_and(|v| !v.is_null()) {
        return Err(invalid(
            at("audio"),
            "Earlier audio answers cannot be sent to this model.",
        ));
    }
    let mut out = Vec::new();
    // DeepSeek-style reasoning: it came before the answer, and has no signature.
    if let Some(r) = m["reasoning_content"].as_str().filter(|r| !r.is_empty()) {
        out.push(Part::Thinking {
            text: r.to_string(),
            signature: None,
        });
    }
    match &m["content"] {
        Value::Null => {}
        Value::String(s) => out.push(Part::Text(s.clone())),
        Value::Array(parts) => {
            for (j, p) in parts.iter().enumerate() {
                match (
                    p["type"].as_str(),
                    p["text"].as_str(),
                    p["refusal"].as_str(),
                ) {
                    (Some("text"), Some(t), _) | (Some("refusal"), _, Some(t)) => {
                        out.push(Part::Text(t.to_string()))
                    }
                    _ => {
                        return Err(invalid(
                            format!("{}[{j}]", at("content")),
                            "Assistant content may hold only `text` and `refusal` parts.",
                        ))
                    }
                }
            }
        }
        _ => {
            return Err(invalid(
                at("content"),
                "`content` must be a string or an array of parts.",
            ))
        }
    }
    if let Some(r) = m["refusal"].as_str().filter(|r| !r.is_empty()) {
        if !out.iter().any(|p| matches!(p, Part::Text(_))) {
            out.push(Part::Text(r.to_string()));
        }
    }
    // An empty text beside tool calls is a placeholder, and other protocols reject
    // empty text blocks.
    out.retain(|p| !matches!(p, Part::Text(t) if t.is_empty()));
    if let Some(calls) = m.get("tool_calls").filter(|v| !v.is_null()) {
        let Some(calls) = calls.as_array() else {
            return Err(invalid(at("tool_calls"), "`tool_calls` must be an array."));
        };
        for (k, c) in calls.iter().enumerate() {
            out.push(Part::ToolCall(tool_call(
                c,
                &format!("{}[{k}]", at("tool_calls")),
            )?));
        }
    }
    Ok(out)
}

fn tool_call(c: &Value, at: &str) -> Result<ir::ToolCall, Invalid> {
    if c["type"].as_str().is_some_and(|t| t != "function") {
        return Err(invalid(
            format!("{at}.type"),
            "Only `function` tool calls are supported here.",
        ));
    }
    let Some(id) = c["id"].as_str().filter(|s| !s.is_empty()) else {
        return Err(invalid(
            format!("{at}.id"),
            "A tool call needs a string `id`.",
        ));
    };
    let Some(name) = c["function"]["name"].as_str() else {
        return Err(invalid(
            format!("{at}.function.name"),
            "A tool call needs `function.name`.",
        ));
    };
    let arguments = match &c["function"]["arguments"] {
        Value::String(s) => s.clone(),
        Value::Null => "{}".to_string(),
        v => v.to_string(),
    };
    // The signature an earlier answer carried inside the id goes back on the call.
    let (id, signature) = ir::split_call_id(id);
    Ok(ir::ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments,
        signature: signature.map(str::to_string),
    })
}

fn tool(i: usize, t: &Value) -> Result<ir::Tool, Invalid> {
    let at = format!("tools[{i}]");
    match t["type"].as_str() {
        Some("function") => {}
        Some(other) => {
            return Err(invalid(
                format!("{at}.type"),
                format!(
                "Tool type `{other}` is not available for this model; only `function` tools are."
            ),
            ))
        }
        None => return Err(invalid(format!("{at}.type"), "Each tool needs a `type`.")),
    }
    let f = &t["function"];
    let Some(name) = f["name"].as_str().filter(|s| !s.is_empty()) else {
        return Err(invalid(
            format!("{at}.function.name"),
            "Each tool needs `function.name`.",
        ));
    };
    let parameters = match &f["parameters"] {
        // No parameters: a function of no arguments, which other protocols must spell out.
        Value::Null => serde_json::json!({"type": "object", "properties": {}}),
        v => v.clone(),
    };
    Ok(ir::Tool {
        name: name.to_string(),
        description: f["description"].as_str().map(str::to_string),
        parameters,
    })
}

fn tool_choice(v: &Value) -> Result<ToolChoice, Invalid> {
    match v {
        Value::String(s) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => Err(invalid(
                "tool_choice",
                format!("Unknown `tool_choice` `{other}`."),
            )),
        },
        Value::Object(_) if v["type"] == "function" => match v["function"]["name"].as_str() {
            Some(name) => Ok(ToolChoice::Tool(name.to_string())),
            None => Err(invalid(
                "tool_choice.function.name",
                "`tool_choice` needs `function.name`.",
            )),
        },
        _ => Err(invalid(
            "tool_choice",
            "`tool_choice` must be `none`, `auto`, `required` or a function.",
        )),
    }
}

fn response_format(v: &Value) -> Result<ResponseFormat, Invalid> {
    match v["type"].as_str() {
        Some("text") => Ok(ResponseFormat::Text),
        Some("json_object") => Ok(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let js = &v["json_schema"];
            let Some(schema) = js.get("schema").filter(|s| s.is_object()) else {
                return Err(invalid(
                    "response_format.json_schema.schema",
                    "`json_schema.schema` must be an object.",
                ));
            };
            Ok(ResponseFormat::JsonSchema {
                name: js["name"].as_str().unwrap_or("response").to_string(),
                schema: schema.clone(),
                strict: js["strict"].as_bool(),
            })
        }
        _ => Err(invalid(
            "response_format.type",
            "`response_format.type` must be `text`, `json_object` or `json_schema`.",
        )),
    }
}

#[cfg(test)]
mod tests;
