//! Whole answers: [`ir::Response`] → a `GenerateContentResponse` for the client, and a
//! generate-content upstream's answer → [`ir::Response`].

use super::super::ir::{self, FinishReason, Part};
use super::super::{ResponseContext, TranslateError};
use super::wire::answer::{Candidate, FunctionCall, GenerateContentResponse, Part as WirePart};
use super::wire::usage::UsageMetadata;
use super::wire::{
    client_signature, finish_from_wire, finish_to_wire, signature_from_upstream, upstream_call_id,
    usage_metadata,
};
use crate::protocol::lenient::Member;
use serde_json::{json, Map, Value};

pub fn render_response(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    let parts: Vec<Value> = resp.content.iter().filter_map(render_part).collect();
    let mut content = Map::new();
    content.insert("role".into(), "model".into());
    // An answer with nothing in it has no `parts`, as the API sends it.
    if !parts.is_empty() {
        content.insert("parts".into(), Value::Array(parts));
    }
    let v = json!({
        "candidates": [{
            "content": content,
            "finishReason": finish_to_wire(resp.finish.as_ref()),
            "index": 0,
        }],
        "usageMetadata": usage_metadata(&resp.usage),
        "modelVersion": ctx.client_model,
        "responseId": ctx.request_id,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// One part of a client-facing answer. The API has a field for the signature of a
/// function call, so ids are not joined with it here. Redacted thinking has no form in
/// this protocol and is left out.
pub(super) fn render_part(p: &Part) -> Option<Value> {
    match p {
        Part::Text(t) => Some(json!({"text": t})),
        Part::Thinking { text, signature } => {
            let mut v = json!({"text": text, "thought": true});
            if let Some(s) = client_signature(signature.as_deref()) {
                v["thoughtSignature"] = Value::String(s.to_string());
            }
            Some(v)
        }
        Part::ToolCall(c) => Some(function_call_part(
            &c.id,
            &c.name,
            &c.arguments,
            c.signature.as_deref(),
        )),
        Part::Image(_) | Part::ToolResult(_) | Part::RedactedThinking(_) => None,
    }
}

pub(super) fn function_call_part(
    id: &str,
    name: &str,
    arguments: &str,
    signature: Option<&str>,
) -> Value {
    let mut v = json!({
        "functionCall": {"id": id, "name": name, "args": ir::arguments_object(arguments)}
    });
    if let Some(s) = client_signature(signature) {
        v["thoughtSignature"] = Value::String(s.to_string());
    }
    v
}

pub fn parse_response(body: &[u8]) -> Result<ir::Response, TranslateError> {
    let v: Member<GenerateContentResponse<'_>> = serde_json::from_slice(body)?;
    let v = v.object().ok_or(TranslateError::Shape("not an object"))?;
    if !v.is_answer() {
        return Err(TranslateError::Shape("not a GenerateContentResponse"));
    }
    let response_id = v.response_id.or_empty();
    let none = Candidate::default();
    let candidate = v.candidates().first().unwrap_or(&none);
    let mut content = Vec::new();
    let mut calls = 0;
    for p in candidate.parts() {
        if let Some(call) = p.function_call.get() {
            content.push(Part::ToolCall(tool_call(call, p, response_id, calls)));
            calls += 1;
        } else if let Some(text) = p.text.as_str() {
            push_text(&mut content, p, text);
        }
    }
    let finish = match candidate.finish_reason() {
        Some(r) => Some(finish_from_wire(r, calls > 0)),
        None if v.blocked() => Some(FinishReason::ContentFilter),
        None => None,
    };
    Ok(ir::Response {
        content,
        finish,
        usage: v
            .usage_metadata
            .object()
            .map(UsageMetadata::to_usage)
            .unwrap_or_default(),
    })
}

/// A `functionCall` part as a pivot call: its own `id` when the API gave one, else a
/// deterministic one (the `index`-th call of the answer).
pub(super) fn tool_call(
    call: &FunctionCall<'_>,
    part: &WirePart<'_>,
    response_id: &str,
    index: usize,
) -> ir::ToolCall {
    let name = call.name.or_empty();
    let arguments = match &call.args {
        Value::Null => "{}".to_string(),
        a => a.to_string(),
    };
    let id = match call.id.as_str() {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => upstream_call_id(response_id, name, &arguments, index),
    };
    ir::ToolCall {
        id,
        name: name.to_string(),
        arguments,
        signature: signature_of(part),
    }
}

pub(super) fn signature_of(part: &WirePart<'_>) -> Option<String> {
    part.thought_signature
        .as_str()
        .filter(|s| !s.is_empty())
        .map(signature_from_upstream)
}

/// Text and thoughts, merged with the part before when they continue it (a thought is
/// continued until a signature closes it). A signature on a plain text part has no place
/// in the pivot and is not needed back by the API.
fn push_text(content: &mut Vec<Part>, part: &WirePart<'_>, text: &str) {
    let thought = part.thought.0 == Some(true);
    if thought {
        let signature = signature_of(part);
        if let Some(Part::Thinking {
            text: t,
            signature: s @ None,
        }) = content.last_mut()
        {
            t.push_str(text);
            *s = signature;
        } else if !text.is_empty() || signature.is_some() {
            content.push(Part::Thinking {
                text: text.to_string(),
                signature,
            });
        }
    } else if !text.is_empty() {
        if let Some(Part::Text(t)) = content.last_mut() {
            t.push_str(text);
        } else {
            content.push(Part::Text(text.to_string()));
        }
    }
}
