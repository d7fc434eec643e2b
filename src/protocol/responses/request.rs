//! A responses request → [`ir::Request`], for upstreams that do not serve the Responses
//! API themselves (spec 4.4, 4.5). What only a native Responses API can do (server-side
//! state, built-in tools, file ids) is a 400 naming the field, never silently dropped.

use super::{invalid, REDACTED_PREFIX};
use crate::protocol::ir::{self, Part, Role};
use crate::protocol::Invalid;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Asked of the model on `/v1/responses/compact` when the upstream has no native
/// compaction: the answer replaces the conversation, so it must stand on its own.
const COMPACT_PROMPT: &str = "\
Summarise the conversation so far into a compact context that will replace it. \
The conversation must be able to continue from your summary alone, with nothing else \
available. Preserve, concisely and precisely:
- the user's goals and the current task, and what has been completed so far;
- the decisions made and the reasons given for them;
- facts, names, numbers, identifiers, file paths, code and other specifics that were \
established, quoted exactly where exactness matters;
- the results of tool calls that are still relevant (what was called, what it returned);
- open tasks, unanswered questions and the next steps that were planned;
- the user's stated preferences, constraints and instructions.
Leave out pleasantries, repetition and anything that no longer matters. Do not call \
tools, and do not continue the conversation: write only the summary.";

/// The body's object and its conversation, refusing server-side state and an empty
/// conversation (`empty` says why one is needed).
fn conversation_of(
    body: Value,
    empty: &str,
) -> Result<(serde_json::Map<String, Value>, ir::Request), Invalid> {
    let Value::Object(mut obj) = body else {
        return Err(Invalid {
            param: None,
            message: "The request body must be a JSON object.".into(),
        });
    };
    refuse_server_state(&obj)?;
    let req = conversation(&mut obj)?;
    if req.messages.is_empty() {
        return Err(invalid("input", empty));
    }
    Ok((obj, req))
}

pub fn to_ir(body: Value) -> Result<ir::Request, Invalid> {
    let (obj, mut req) = conversation_of(
        body,
        "`input` must hold at least one message for this model.",
    )?;
    req.max_tokens = super::wire::output_limit(&obj);
    req.temperature = obj.get("temperature").and_then(Value::as_f64);
    req.top_p = obj.get("top_p").and_then(Value::as_f64);
    req.tools = tools(obj.get("tools"))?;
    req.tool_choice = tool_choice(obj.get("tool_choice"))?;
    req.parallel_tool_calls = obj.get("parallel_tool_calls").and_then(Value::as_bool);
    req.reasoning = reasoning(obj.get("reasoning"));
    req.response_format = response_format(obj.get("text"))?;
    // `safety_identifier` is the newer name of `user`.
    req.user = ["user", "safety_identifier"]
        .iter()
        .find_map(|f| obj.get(*f).and_then(Value::as_str))
        .map(str::to_string);
    Ok(req)
}

/// `/v1/responses/compact` for an upstream without a native Responses API: the same
/// conversation, then a request to summarise it.
pub fn compact_to_ir(body: Value) -> Result<ir::Request, Invalid> {
    let (obj, mut req) = conversation_of(body, "`input` must hold the conversation to compact.")?;
    // Function definitions stay when the client sent them: some upstreams refuse a
    // history with tool calls but no tools. The summary itself must not call any, so
    // built-in tools, which could not be translated, are simply left out.
    let functions = obj.get("tools").and_then(Value::as_array).map(|t| {
        Value::Array(
            t.iter()
                .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
                .cloned()
                .collect(),
        )
    });
    req.tools = tools(functions.as_ref())?;
    if !req.tools.is_empty() {
        req.tool_choice = Some(ir::ToolChoice::None);
    }
    req.max_tokens = super::wire::output_limit(&obj);
    req.messages.push(ir::Message {
        role: Role::User,
        content: vec![Part::Text(COMPACT_PROMPT.into())],
    });
    Ok(req)
}

/// Fields that only make sense against stored server-side state the gateway does not
/// keep (`previous_response_id` is replaced by the conversation it names before this,
/// unless the operator turned storage off).
fn refuse_server_state(obj: &Map<String, Value>) -> Result<(), Invalid> {
    let native = "it needs a channel that serves the Responses API natively.";
    if obj
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null())
    {
        return Err(invalid(
            "previous_response_id",
            format!("`previous_response_id` is not supported for this model: response storage is turned off on this gateway; {native}"),
        ));
    }
    if obj.get("conversation").is_some_and(|v| !v.is_null()) {
        return Err(invalid(
            "conversation",
            format!("`conversation` is not supported for this model: the gateway keeps no conversation state; {native}"),
        ));
    }
    if obj.get("prompt").is_some_and(|v| !v.is_null()) {
        return Err(invalid(
            "prompt",
            format!("Stored prompts are not supported for this model; {native}"),
        ));
    }
    if obj.get("background").and_then(Value::as_bool) == Some(true) {
        return Err(invalid(
            "background",
            format!("Background responses are not supported for this model; {native}"),
        ));
    }
    Ok(())
}

/// `instructions` and `input` → system and turns.
fn conversation(obj: &mut Map<String, Value>) -> Result<ir::Request, Invalid> {
    let mut req = ir::Request::default();
    if let Some(Value::String(s)) = obj.get("instructions") {
        if !s.is_empty() {
            req.system.push(s.clone());
        }
    }
    match obj.remove("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => req.messages.push(ir::Message {
            role: Role::User,
            content: vec![Part::Text(s)],
        }),
        Some(Value::Array(items)) => {
            let mut b = Builder {
                req: &mut req,
                names: HashMap::new(),
            };
            for (i, item) in items.into_iter().enumerate() {
                b.item(i, item)?;
            }
        }
        Some(_) => {
            return Err(invalid(
                "input",
                "`input` must be a string or an array of input items.",
            ))
        }
    }
    Ok(req)
}

struct Builder<'a> {
    req: &'a mut ir::Request,
    /// Function names by call id, so tool results can say which function answered
    /// (generate-content needs the name).
    names: HashMap<String, String>,
}

impl Builder<'_> {
    fn item(&mut self, i: usize, item: Value) -> Result<(), Invalid> {
        let Value::Object(mut item) = item else {
            return Err(invalid(
                format!("input[{i}]"),
                "Each input item must be an object.",
            ));
        };
        let kind = item.get("type").and_then(Value::as_str).map(str::to_string);
        match kind.as_deref() {
            None | Some("message") => self.message(i, &mut item),
            Some("function_call") => {
                let call_id = str_field(&item, "call_id");
                let (id, signature) = ir::split_call_id(call_id);
                let name = str_field(&item, "name").to_string();
                self.names.insert(id.to_string(), name.clone());
                let call = ir::ToolCall {
                    id: id.to_string(),
                    name,
                    arguments: str_field(&item, "arguments").to_string(),
                    signature: signature.map(str::to_string),
                };
                self.assistant(vec![Part::ToolCall(call)]);
                Ok(())
            }
            Some("function_call_output") => {
                let call_id = str_field(&item, "call_id").to_string();
                let (id, _) = ir::split_call_id(&call_id);
                let content = match item.remove("output") {
                    Some(Value::String(s)) => vec![Part::Text(s)],
                    Some(Value::Array(parts)) => self.parts(&format!("input[{i}].output"), parts)?,
                    _ => {
                        return Err(invalid(
                            format!("input[{i}].output"),
                            "`output` must be a string or an array of content parts.",
                        ))
                    }
                };
                let result = ir::ToolResult {
                    call_id: id.to_string(),
                    name: self.names.get(id).cloned(),
                    content,
                    is_error: false,
                };
                self.tool_result(result);
                Ok(())
            }
            Some("reasoning") => {
                if let Some(part) = reasoning_part(&item) {
                    self.assistant(vec![part]);
                }
                Ok(())
            }
            Some(other) => Err(invalid(
                format!("input[{i}]"),
                format!("Input items of type `{other}` are not supported for this model; they need a channel that serves the Responses API natively."),
            )),
        }
    }

    fn message(&mut self, i: usize, item: &mut Map<String, Value>) -> Result<(), Invalid> {
        let role = item
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let at = format!("input[{i}].content");
        let content = match item.remove("content") {
            Some(Value::String(s)) => vec![Part::Text(s)],
            Some(Value::Array(parts)) => self.parts(&at, parts)?,
            _ => {
                return Err(invalid(
                    &at,
                    "`content` must be a string or an array of content parts.",
                ))
            }
        };
        match role.as_str() {
            "system" | "developer" => {
                let mut texts = Vec::new();
                for (j, p) in content.into_iter().enumerate() {
                    match p {
                        Part::Text(t) => texts.push(t),
                        _ => {
                            return Err(invalid(
                                format!("{at}[{j}]"),
                                "System and developer messages may only hold text.",
                            ))
                        }
                    }
                }
                self.req.system.push(texts.join("\n"));
            }
            "user" if content.is_empty() => {}
            "user" => self.req.messages.push(ir::Message {
                role: Role::User,
                content,
            }),
            "assistant" => {
                if let Some(j) = content.iter().position(|p| matches!(p, Part::Image(_))) {
                    return Err(invalid(
                        format!("{at}[{j}]"),
                        "Assistant messages may only hold text.",
                    ));
                }
                self.assistant(content);
            }
            _ => {
                return Err(invalid(
                    format!("input[{i}].role"),
                    "`role` must be one of `user`, `assistant`, `system`, `developer`.",
                ))
            }
        }
        Ok(())
    }

    /// Content parts of a message or a tool output.
    fn parts(&self, at: &str, parts: Vec<Value>) -> Result<Vec<Part>, Invalid> {
        let mut out = Vec::with_capacity(parts.len());
        for (j, p) in parts.into_iter().enumerate() {
            let here = format!("{at}[{j}]");
            let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
            match kind {
                "input_text" | "output_text" | "text" => {
                    out.push(Part::Text(str_field_v(&p, "text").to_string()))
                }
                "refusal" => out.push(Part::Text(str_field_v(&p, "refusal").to_string())),
                "input_image" => match p.get("image_url").and_then(Value::as_str) {
                    Some(url) if !url.is_empty() => out.push(Part::Image(ir::Image::from_url(url))),
                    _ if p.get("file_id").is_some_and(|f| !f.is_null()) => {
                        return Err(invalid(
                            &here,
                            "Images given by `file_id` are not supported for this model; send `image_url` (a URL or a data URL).",
                        ))
                    }
                    _ => return Err(invalid(&here, "`input_image` needs an `image_url`.")),
                },
                "input_file" | "input_audio" => {
                    return Err(invalid(
                        &here,
                        format!("Content parts of type `{kind}` are not supported for this model."),
                    ))
                }
                _ => {
                    return Err(invalid(
                        &here,
                        format!("Unknown content part type `{kind}`."),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Assistant-side items (messages, reasoning, function calls) join the assistant
    /// turn right before them: one model turn is one assistant message upstream.
    fn assistant(&mut self, parts: Vec<Part>) {
        if parts.is_empty() {
            return;
        }
        match self.req.messages.last_mut() {
            Some(m) if m.role == Role::Assistant => m.content.extend(parts),
            _ => self.req.messages.push(ir::Message {
                role: Role::Assistant,
                content: parts,
            }),
        }
    }

    /// Tool results join the user turn right before them, ahead of its other content:
    /// the messages protocol wants results first, right after the calls.
    fn tool_result(&mut self, result: ir::ToolResult) {
        match self.req.messages.last_mut() {
            Some(m) if m.role == Role::User => {
                let at = m
                    .content
                    .iter()
                    .take_while(|p| matches!(p, Part::ToolResult(_)))
                    .count();
                m.content.insert(at, Part::ToolResult(result));
            }
            _ => self.req.messages.push(ir::Message {
                role: Role::User,
                content: vec![Part::ToolResult(result)],
            }),
        }
    }
}

/// A `reasoning` item: its summary is the visible thinking, `encrypted_content` the
/// signature the upstream gave it (or, with [`REDACTED_PREFIX`], redacted thinking).
fn reasoning_part(item: &Map<String, Value>) -> Option<Part> {
    let signature = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    if let Some(data) = signature.and_then(|s| s.strip_prefix(REDACTED_PREFIX)) {
        return Some(Part::RedactedThinking(data.to_string()));
    }
    let texts = |field: &str| -> Vec<String> {
        item.get(field)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.get("text").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut text = texts("summary");
    if text.is_empty() {
        // Open-weight reasoning models return their reasoning as `content` instead.
        text = texts("content");
    }
    let text = text.join("\n\n");
    if text.is_empty() && signature.is_none() {
        return None;
    }
    Some(Part::Thinking {
        text,
        signature: signature.map(str::to_string),
    })
}

fn tools(v: Option<&Value>) -> Result<Vec<ir::Tool>, Invalid> {
    let Some(Value::Array(tools)) = v else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            return Err(invalid(
                &at,
                format!("Tools of type `{kind}` are not supported for this model; they need a channel that serves the Responses API natively."),
            ));
        }
        let name = match t.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => {
                return Err(invalid(
                    format!("{at}.name"),
                    "Each function tool needs a `name`.",
                ))
            }
        };
        let parameters = match t.get("parameters") {
            Some(p @ Value::Object(_)) => p.clone(),
            _ => serde_json::json!({"type": "object", "properties": {}}),
        };
        out.push(ir::Tool {
            name,
            description: t
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_string),
            parameters,
        });
    }
    Ok(out)
}

fn tool_choice(v: Option<&Value>) -> Result<Option<ir::ToolChoice>, Invalid> {
    let bad = || {
        invalid(
            "tool_choice",
            "`tool_choice` must be `auto`, `none`, `required` or `{\"type\": \"function\", \"name\": ...}` for this model.",
        )
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(Some(ir::ToolChoice::Auto)),
            "none" => Ok(Some(ir::ToolChoice::None)),
            "required" => Ok(Some(ir::ToolChoice::Required)),
            _ => Err(bad()),
        },
        Some(Value::Object(o)) => match (o.get("type").and_then(Value::as_str), o.get("name")) {
            (Some("function"), Some(Value::String(n))) if !n.is_empty() => {
                Ok(Some(ir::ToolChoice::Tool(n.clone())))
            }
            _ => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

/// `reasoning.effort` → an effort; `none` turns reasoning off. A `summary` asked for
/// without an effort still asks for reasoning, at the upstream's default effort.
fn reasoning(v: Option<&Value>) -> Option<ir::Reasoning> {
    let r = v?.as_object()?;
    match r.get("effort").and_then(Value::as_str) {
        Some("none") => Some(ir::Reasoning {
            disabled: true,
            effort: Some(ir::Effort::Minimal),
            budget_tokens: None,
        }),
        Some(e) => Some(ir::Reasoning {
            effort: ir::Effort::parse(e),
            ..Default::default()
        }),
        None if r.get("summary").is_some_and(Value::is_string) => Some(ir::Reasoning::default()),
        None => None,
    }
}

fn response_format(text: Option<&Value>) -> Result<Option<ir::ResponseFormat>, Invalid> {
    let Some(format) = text.and_then(|t| t.get("format")).filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(Some(ir::ResponseFormat::Text)),
        Some("json_object") => Ok(Some(ir::ResponseFormat::JsonObject)),
        Some("json_schema") => {
            let schema = match format.get("schema") {
                Some(s @ Value::Object(_)) => s.clone(),
                _ => {
                    return Err(invalid(
                        "text.format.schema",
                        "`text.format.schema` must be a JSON Schema object.",
                    ))
                }
            };
            Ok(Some(ir::ResponseFormat::JsonSchema {
                name: format
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("response")
                    .to_string(),
                schema,
                strict: format.get("strict").and_then(Value::as_bool),
            }))
        }
        _ => Err(invalid(
            "text.format",
            "`text.format.type` must be `text`, `json_object` or `json_schema`.",
        )),
    }
}

fn str_field<'a>(obj: &'a Map<String, Value>, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

fn str_field_v<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}
