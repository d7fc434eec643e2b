//! A generate-content client's request → [`ir::Request`], for an upstream of another
//! protocol. Anything that would change the answer if silently dropped (audio or image
//! output, server-side tools, several candidates, non-image media, cached content) is a
//! 400 naming the field; same-protocol traffic never comes here and keeps all of it.

use super::super::ir::{self, Effort, Image, Part, Reasoning, ResponseFormat, ToolChoice};
use super::super::Invalid;
use super::wire::{field, invalid, signature_from_client, Section};
use serde_json::{json, Value};

pub fn to_ir(body: Value) -> Result<ir::Request, Invalid> {
    if field(&body, "cachedContent").is_some() {
        return Err(invalid(
            "cachedContent",
            "Cached content lives on the generate-content service and cannot be used with this model.",
        ));
    }
    let messages = messages(&body)?;
    if messages.is_empty() {
        return Err(invalid("contents", "`contents` has no parts to send."));
    }
    let mut req = ir::Request {
        system: system(&body),
        messages,
        ..Default::default()
    };
    generation_config(&body, &mut req)?;
    tools(&body, &mut req)?;
    tool_config(&body, &mut req);
    Ok(req)
}

fn parts_of(content: &Value) -> &[Value] {
    field(content, "parts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn str_field<'a>(obj: &'a Value, camel: &str) -> Option<&'a str> {
    field(obj, camel).and_then(Value::as_str)
}

fn system(body: &Value) -> Vec<String> {
    let Some(s) = field(body, "systemInstruction") else {
        return Vec::new();
    };
    parts_of(s)
        .iter()
        .filter_map(|p| str_field(p, "text"))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// Function calls of the latest model turn that no `functionResponse` answered yet, so
/// that a response without an `id` pairs with the call of its name, in order.
#[derive(Default)]
struct Pending(Vec<(String, String)>);

impl Pending {
    fn take_id(&mut self, id: &str) {
        if let Some(k) = self.0.iter().position(|(i, _)| i == id) {
            self.0.remove(k);
        }
    }

    fn take_name(&mut self, name: &str) -> Option<String> {
        let k = self.0.iter().position(|(_, n)| n == name)?;
        Some(self.0.remove(k).0)
    }
}

fn messages(body: &Value) -> Result<Vec<ir::Message>, Invalid> {
    let contents = field(body, "contents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out: Vec<ir::Message> = Vec::new();
    let mut pending = Pending::default();
    let mut previous_was_model = false;
    for (i, c) in contents.iter().enumerate() {
        let role = match str_field(c, "role") {
            Some("model") => ir::Role::Assistant,
            _ => ir::Role::User,
        };
        let is_model = role == ir::Role::Assistant;
        if is_model && !previous_was_model {
            // Responses answer the model turn just before them; older calls are settled.
            pending.0.clear();
        }
        previous_was_model = is_model;
        let mut parts = Vec::new();
        for (j, p) in parts_of(c).iter().enumerate() {
            let at = Position { i, j };
            convert_part(p, at, &mut pending, &mut parts)?;
        }
        if parts.is_empty() {
            continue;
        }
        // Consecutive turns of one role are one turn: some upstreams insist on
        // alternation, and parallel function responses must stay together.
        match out.last_mut() {
            Some(m) if m.role == role => m.content.extend(parts),
            _ => out.push(ir::Message {
                role,
                content: parts,
            }),
        }
    }
    Ok(out)
}

#[derive(Clone, Copy)]
struct Position {
    i: usize,
    j: usize,
}

impl Position {
    fn path(self, rest: &str) -> String {
        format!("contents[{}].parts[{}].{rest}", self.i, self.j)
    }
}

fn convert_part(
    p: &Value,
    at: Position,
    pending: &mut Pending,
    out: &mut Vec<Part>,
) -> Result<(), Invalid> {
    let signature = str_field(p, "thoughtSignature")
        .filter(|s| !s.is_empty())
        .map(signature_from_client);
    if let Some(text) = field(p, "text") {
        let text = text
            .as_str()
            .ok_or_else(|| invalid(at.path("text"), "`text` must be a string."))?;
        if field(p, "thought").and_then(Value::as_bool) == Some(true) {
            push_thinking(out, text, signature);
        } else if !text.is_empty() {
            out.push(Part::Text(text.to_string()));
        }
        return Ok(());
    }
    if let Some(d) = field(p, "inlineData") {
        out.push(Part::Image(inline_image(d, &at.path("inlineData"))?));
        return Ok(());
    }
    if let Some(f) = field(p, "fileData") {
        out.push(Part::Image(file_image(f, &at.path("fileData"))?));
        return Ok(());
    }
    if let Some(call) = field(p, "functionCall") {
        let name = str_field(call, "name")
            .ok_or_else(|| invalid(at.path("functionCall.name"), "`name` is required."))?;
        let (id, id_signature) = match str_field(call, "id").filter(|s| !s.is_empty()) {
            Some(given) => {
                let (id, sig) = ir::split_call_id(given);
                (id.to_string(), sig.map(signature_from_client))
            }
            // Deterministic and unique within the request: its position.
            None => (format!("call_{}_{}", at.i, at.j), None),
        };
        let arguments = field(call, "args")
            .map(Value::to_string)
            .unwrap_or_else(|| "{}".into());
        pending.0.push((id.clone(), name.to_string()));
        out.push(Part::ToolCall(ir::ToolCall {
            id,
            name: name.to_string(),
            arguments,
            signature: signature.or(id_signature),
        }));
        return Ok(());
    }
    if let Some(resp) = field(p, "functionResponse") {
        out.push(Part::ToolResult(tool_result(resp, at, pending)?));
        return Ok(());
    }
    for kind in ["executableCode", "codeExecutionResult"] {
        if field(p, kind).is_some() {
            return Err(invalid(
                at.path(kind),
                format!("`{kind}` parts come from code execution, which only the generate-content service runs."),
            ));
        }
    }
    if field(p, "thought").and_then(Value::as_bool) == Some(true) {
        push_thinking(out, "", signature);
    }
    Ok(())
}

/// Streams split one thought into many parts and put its signature on the last one:
/// consecutive thought parts are one thinking block until a signature closes it.
fn push_thinking(out: &mut Vec<Part>, text: &str, signature: Option<String>) {
    if let Some(Part::Thinking {
        text: t,
        signature: s @ None,
    }) = out.last_mut()
    {
        t.push_str(text);
        *s = signature;
        return;
    }
    if text.is_empty() && signature.is_none() {
        return;
    }
    out.push(Part::Thinking {
        text: text.to_string(),
        signature,
    });
}

fn inline_image(d: &Value, path: &str) -> Result<Image, Invalid> {
    let mime = str_field(d, "mimeType").unwrap_or_default();
    if !mime.starts_with("image/") {
        return Err(invalid(
            path,
            format!("Inline data of type `{mime}` cannot be sent to this model; only images can."),
        ));
    }
    let data = str_field(d, "data")
        .ok_or_else(|| invalid(format!("{path}.data"), "`data` must be a base64 string."))?;
    Ok(Image::Base64 {
        media_type: mime.to_string(),
        data: data.to_string(),
    })
}

const IMAGE_EXTENSIONS: [&str; 7] = [".png", ".jpg", ".jpeg", ".gif", ".webp", ".heic", ".heif"];

fn file_image(f: &Value, path: &str) -> Result<Image, Invalid> {
    let uri = str_field(f, "fileUri")
        .ok_or_else(|| invalid(format!("{path}.fileUri"), "`fileUri` is required."))?;
    let is_image = match str_field(f, "mimeType") {
        Some(mime) => mime.starts_with("image/"),
        // No type given: only an image by its extension (a video link is not).
        None => {
            let p = uri.split(['?', '#']).next().unwrap_or(uri);
            let p = p.to_ascii_lowercase();
            IMAGE_EXTENSIONS.iter().any(|e| p.ends_with(e))
        }
    };
    if !is_image {
        return Err(invalid(path, "Only image files can be sent to this model."));
    }
    Ok(Image::Url(uri.to_string()))
}

fn tool_result(
    resp: &Value,
    at: Position,
    pending: &mut Pending,
) -> Result<ir::ToolResult, Invalid> {
    let name = str_field(resp, "name")
        .ok_or_else(|| invalid(at.path("functionResponse.name"), "`name` is required."))?;
    let call_id = match str_field(resp, "id").filter(|s| !s.is_empty()) {
        Some(given) => {
            let id = ir::split_call_id(given).0;
            pending.take_id(id);
            id.to_string()
        }
        None => pending.take_name(name).ok_or_else(|| {
            invalid(
                at.path("functionResponse"),
                format!("This `{name}` functionResponse answers no functionCall of the model turn before it."),
            )
        })?,
    };
    let (text, is_error) = result_text(field(resp, "response").unwrap_or(&Value::Null));
    let mut content = vec![Part::Text(text)];
    // Multimodal function responses carry their media beside the JSON.
    for (k, p) in parts_of(resp).iter().enumerate() {
        if let Some(d) = field(p, "inlineData") {
            let path = at.path(&format!("functionResponse.parts[{k}].inlineData"));
            content.push(Part::Image(inline_image(d, &path)?));
        } else if let Some(f) = field(p, "fileData") {
            let path = at.path(&format!("functionResponse.parts[{k}].fileData"));
            content.push(Part::Image(file_image(f, &path)?));
        }
    }
    Ok(ir::ToolResult {
        call_id,
        name: Some(name.to_string()),
        content,
        is_error,
    })
}

/// `{"result": "..."}` and `{"output": "..."}` are how a plain string comes back (the
/// upstream side writes `result`); `{"error": "..."}` is a failed call. Anything else is
/// the function's JSON as it is.
fn result_text(response: &Value) -> (String, bool) {
    if let Some(o) = response.as_object().filter(|o| o.len() == 1) {
        for (key, is_error) in [("result", false), ("output", false), ("error", true)] {
            if let Some(Value::String(s)) = o.get(key) {
                return (s.clone(), is_error);
            }
        }
    }
    match response {
        Value::Null => ("{}".into(), false),
        v => (v.to_string(), false),
    }
}

fn generation_config(body: &Value, req: &mut ir::Request) -> Result<(), Invalid> {
    let g = Section::of(body, "generationConfig");
    let f64_of = |k: &str| g.get(k).and_then(Value::as_f64);
    req.temperature = f64_of("temperature");
    req.top_p = f64_of("topP");
    req.presence_penalty = f64_of("presencePenalty");
    req.frequency_penalty = f64_of("frequencyPenalty");
    req.top_k = g.get("topK").and_then(Value::as_u64);
    req.max_tokens = super::wire::output_limit(body);
    req.seed = g.get("seed").and_then(Value::as_i64);
    req.stop = g
        .get("stopSequences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if super::wire::choices(body) > 1 {
        return Err(invalid(
            "generationConfig.candidateCount",
            "This model generates one candidate per request.",
        ));
    }
    let modalities = g.get("responseModalities").and_then(Value::as_array);
    if modalities.is_some_and(|m| {
        m.iter()
            .filter_map(Value::as_str)
            .any(|s| s.eq_ignore_ascii_case("AUDIO") || s.eq_ignore_ascii_case("IMAGE"))
    }) {
        return Err(invalid(
            "generationConfig.responseModalities",
            "Audio and image output need a generate-content model.",
        ));
    }
    if g.get("speechConfig").is_some() {
        return Err(invalid(
            "generationConfig.speechConfig",
            "Speech output needs a generate-content model.",
        ));
    }
    req.response_format = response_format(&g)?;
    req.reasoning = g.get("thinkingConfig").and_then(reasoning);
    Ok(())
}

fn response_format(g: &Section) -> Result<Option<ResponseFormat>, Invalid> {
    match g.get("responseMimeType").and_then(Value::as_str) {
        None | Some("text/plain") => Ok(None),
        Some("application/json") => {
            let schema = g
                .get("responseJsonSchema")
                .cloned()
                .or_else(|| g.get("responseSchema").cloned().map(json_schema));
            Ok(Some(match schema {
                Some(schema) => ResponseFormat::JsonSchema {
                    name: "response".into(),
                    schema,
                    strict: None,
                },
                None => ResponseFormat::JsonObject,
            }))
        }
        Some(other) => Err(invalid(
            "generationConfig.responseMimeType",
            format!("`{other}` output needs a generate-content model; use application/json or text/plain."),
        )),
    }
}

/// `thinkingBudget`: 0 is off, -1 lets the model decide (a medium effort elsewhere), n
/// is a budget; `thinkingLevel` is an effort.
fn reasoning(t: &Value) -> Option<Reasoning> {
    if let Some(b) = field(t, "thinkingBudget").and_then(Value::as_i64) {
        return Some(match b {
            0 => Reasoning {
                disabled: true,
                ..Default::default()
            },
            b if b < 0 => Reasoning {
                effort: Some(Effort::Medium),
                ..Default::default()
            },
            b => Reasoning {
                budget_tokens: Some(b.unsigned_abs()),
                ..Default::default()
            },
        });
    }
    let level = str_field(t, "thinkingLevel")?.to_ascii_lowercase();
    Effort::parse(&level).map(|e| Reasoning {
        effort: Some(e),
        ..Default::default()
    })
}

/// The API's OpenAPI-style schemas name types in capitals (`OBJECT`); JSON Schema, which
/// the other protocols take, writes them in lower case.
pub(super) fn json_schema(mut s: Value) -> Value {
    lower_types(&mut s);
    s
}

fn lower_types(s: &mut Value) {
    let Some(o) = s.as_object_mut() else {
        return;
    };
    match o.get_mut("type") {
        Some(Value::String(t)) => *t = t.to_ascii_lowercase(),
        Some(Value::Array(ts)) => {
            for t in ts {
                if let Value::String(t) = t {
                    *t = t.to_ascii_lowercase();
                }
            }
        }
        _ => {}
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = o.get_mut(key) {
            lower_types(v);
        }
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(m)) = o.get_mut(key) {
            m.values_mut().for_each(lower_types);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(a)) = o.get_mut(key) {
            a.iter_mut().for_each(lower_types);
        }
    }
}

fn tools(body: &Value, req: &mut ir::Request) -> Result<(), Invalid> {
    let Some(tools) = field(body, "tools").and_then(Value::as_array) else {
        return Ok(());
    };
    for (i, t) in tools.iter().enumerate() {
        let Some(obj) = t.as_object() else { continue };
        for (k, v) in obj {
            if !v.is_null() && k != "functionDeclarations" && k != "function_declarations" {
                return Err(invalid(
                    format!("tools[{i}].{k}"),
                    format!("The `{k}` tool runs on the generate-content service only and cannot be used with this model."),
                ));
            }
        }
        let decls = field(t, "functionDeclarations")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (j, d) in decls.iter().enumerate() {
            let name = str_field(d, "name").ok_or_else(|| {
                invalid(
                    format!("tools[{i}].functionDeclarations[{j}].name"),
                    "`name` is required.",
                )
            })?;
            let parameters = field(d, "parametersJsonSchema")
                .cloned()
                .or_else(|| field(d, "parameters").cloned().map(json_schema))
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            req.tools.push(ir::Tool {
                name: name.to_string(),
                description: str_field(d, "description").map(str::to_string),
                parameters,
            });
        }
    }
    Ok(())
}

fn tool_config(body: &Value, req: &mut ir::Request) {
    let Some(fc) = field(body, "toolConfig").and_then(|t| field(t, "functionCallingConfig")) else {
        return;
    };
    let allowed: Vec<&str> = field(fc, "allowedFunctionNames")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mode = str_field(fc, "mode")
        .unwrap_or_default()
        .to_ascii_uppercase();
    req.tool_choice = match mode.as_str() {
        "AUTO" | "VALIDATED" => Some(ToolChoice::Auto),
        "NONE" => Some(ToolChoice::None),
        "ANY" if allowed.len() == 1 => Some(ToolChoice::Tool(allowed[0].to_string())),
        "ANY" => {
            // Calls restricted to some functions: the others are not offered at all.
            if !allowed.is_empty() {
                req.tools.retain(|t| allowed.contains(&t.name.as_str()));
            }
            Some(ToolChoice::Required)
        }
        _ => None,
    };
}
