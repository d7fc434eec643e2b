//! [`ir::Request`] → a generate-content upstream request (`/v1beta/models/{m}:...`).

use super::super::ir::{self, Image, Part, ResponseFormat, ToolChoice};
use super::super::{Invalid, RequestOptions, UpstreamRequest};
use super::wire::model_path;
use serde_json::{json, Map, Value};

pub fn from_ir(req: &ir::Request, opts: &RequestOptions) -> Result<UpstreamRequest, Invalid> {
    let mut body = Map::new();
    let contents = contents(req)?;
    if contents.is_empty() {
        return Err(Invalid {
            param: None,
            message: "The request has no content to send to the model.".into(),
        });
    }
    body.insert("contents".into(), Value::Array(contents));
    let system: Vec<Value> = req
        .system
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| json!({"text": s}))
        .collect();
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": system}));
    }
    let config = generation_config(req);
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req.tools.iter().map(declaration).collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
        if let Some(choice) = &req.tool_choice {
            body.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": calling_config(choice) }),
            );
        }
    }
    Ok(UpstreamRequest {
        body: serde_json::to_vec(&Value::Object(body)).unwrap_or_default(),
        path: model_path(opts.upstream_model, opts.stream),
        client_wants_usage: false,
    })
}

/// The value the API documents for function calls that carry no signature of its own
/// (history written by another model, or a client that dropped it): Gemini 3 refuses a
/// model turn whose first function call is unsigned, and accepts this one.
pub const UNSIGNED_CALL: &str = "skip_thought_signature_validator";

/// Marks the first function call of a model turn as unsigned-on-purpose when it has no
/// signature; the calls that follow it need none.
fn sign_first_call(parts: &mut [Value]) {
    if let Some(first) = parts.iter_mut().find(|p| p.get("functionCall").is_some()) {
        if first.get("thoughtSignature").is_none() {
            first["thoughtSignature"] = Value::String(UNSIGNED_CALL.into());
        }
    }
}

fn contents(req: &ir::Request) -> Result<Vec<Value>, Invalid> {
    let mut out: Vec<(ir::Role, Vec<Value>)> = Vec::new();
    // Every call seen so far, for results that do not name their function.
    let mut call_names: Vec<(&str, &str)> = Vec::new();
    for m in &req.messages {
        let mut parts = Vec::new();
        let mut media = Vec::new();
        for p in &m.content {
            match p {
                Part::Text(t) if !t.is_empty() => parts.push(json!({"text": t})),
                Part::Text(_) => {}
                Part::Image(img) => parts.push(image(img)),
                Part::ToolCall(c) => {
                    call_names.push((&c.id, &c.name));
                    let mut part = json!({
                        "functionCall": {"name": c.name, "args": ir::arguments_object(&c.arguments)}
                    });
                    if let Some(sig) = c.signature.as_deref().filter(|s| !s.is_empty()) {
                        part["thoughtSignature"] = Value::String(sig.to_string());
                    }
                    parts.push(part);
                }
                Part::ToolResult(r) => {
                    parts.push(function_response(r, &call_names)?);
                    // Images a tool returned travel as parts of the same turn, after the
                    // responses, which every model version accepts.
                    media.extend(r.content.iter().filter_map(|c| match c {
                        Part::Image(img) => Some(image(img)),
                        _ => None,
                    }));
                }
                // Only signatures riding on function calls mean anything to this API;
                // another provider's reasoning and signatures do not.
                Part::Thinking { .. } | Part::RedactedThinking(_) => {}
            }
        }
        parts.extend(media);
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((role, ps)) if *role == m.role => ps.extend(parts),
            _ => out.push((m.role, parts)),
        }
    }
    Ok(out
        .into_iter()
        .map(|(role, mut parts)| {
            if role == ir::Role::Assistant {
                sign_first_call(&mut parts);
            }
            let role = match role {
                ir::Role::User => "user",
                ir::Role::Assistant => "model",
            };
            json!({"role": role, "parts": parts})
        })
        .collect())
}

fn image(img: &Image) -> Value {
    match img {
        Image::Base64 { media_type, data } => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
        Image::Url(url) => json!({
            "fileData": {"mimeType": Image::guess_media_type(url), "fileUri": url}
        }),
    }
}

fn function_response(r: &ir::ToolResult, calls: &[(&str, &str)]) -> Result<Value, Invalid> {
    let name = match &r.name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => calls
            .iter()
            .rev()
            .find(|(id, _)| *id == r.call_id)
            .map(|(_, n)| n.to_string())
            .ok_or_else(|| Invalid {
                param: None,
                message: format!(
                    "The tool result for call `{}` does not follow a tool call with that id.",
                    r.call_id
                ),
            })?,
    };
    let text: Vec<&str> = r
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let text = text.join("\n");
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(v @ Value::Object(_)) => v,
        _ if r.is_error => json!({"error": text}),
        _ => json!({"result": text}),
    };
    // No `id`: the public API pairs responses with calls by order and name.
    Ok(json!({"functionResponse": {"name": name, "response": response}}))
}

fn generation_config(req: &ir::Request) -> Map<String, Value> {
    let mut g = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            g.insert(k.to_string(), v);
        }
    };
    put("temperature", req.temperature.map(Value::from));
    put("topP", req.top_p.map(Value::from));
    put("topK", req.top_k.map(Value::from));
    put("maxOutputTokens", req.max_tokens.map(Value::from));
    put(
        "stopSequences",
        (!req.stop.is_empty()).then(|| Value::from(req.stop.clone())),
    );
    put("seed", req.seed.map(Value::from));
    put("presencePenalty", req.presence_penalty.map(Value::from));
    put("frequencyPenalty", req.frequency_penalty.map(Value::from));
    match &req.response_format {
        Some(ResponseFormat::JsonObject) => {
            put("responseMimeType", Some("application/json".into()))
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            put("responseMimeType", Some("application/json".into()));
            put("responseJsonSchema", Some(schema.clone()));
        }
        Some(ResponseFormat::Text) | None => {}
    }
    if let Some(r) = &req.reasoning {
        let budget = r.budget();
        let thinking = if budget == 0 {
            json!({"thinkingBudget": 0})
        } else {
            json!({"thinkingBudget": budget, "includeThoughts": true})
        };
        put("thinkingConfig", Some(thinking));
    }
    g
}

fn declaration(t: &ir::Tool) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), Value::String(t.name.clone()));
    if let Some(desc) = t.description.as_deref().filter(|d| !d.is_empty()) {
        d.insert("description".into(), Value::String(desc.to_string()));
    }
    if !t.parameters.is_null() {
        d.insert("parametersJsonSchema".into(), t.parameters.clone());
    }
    Value::Object(d)
}

fn calling_config(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    }
}
