//! The neutral request → a Converse request (Amazon Bedrock API Reference: Converse).
//! Converse is strict where other protocols are loose: roles alternate, text blocks are
//! not blank, tool use ids match `[a-zA-Z0-9_-]+`, images are inline bytes of a named
//! format. This is where a request from another protocol is made acceptable without
//! changing what it asks for.

use super::wire::{
    CachePointBlock, ContentBlock, ImageBlock, ImageSource, InferenceConfiguration, Message,
    ReasoningContentBlock, ReasoningTextBlock, Request, SystemContentBlock, Tool,
    ToolConfiguration, ToolResultBlock, ToolResultContentBlock, ToolSpecification, ToolUseBlock,
};
use super::CacheMarks;
use crate::protocol::ir::{self, Part, Role, ToolChoice};
use crate::protocol::{invalid, Invalid, RequestOptions, UpstreamRequest};
use serde_json::{json, Map, Value};

/// Claude on Bedrock refuses smaller thinking budgets.
const MIN_THINKING_BUDGET: u64 = 1024;
/// With thinking on, Claude only accepts `top_p` from here to 1.
const MIN_TOP_P_WITH_THINKING: f64 = 0.95;
/// The longest tool use id Converse takes.
const MAX_TOOL_ID: usize = 64;

pub fn from_ir(
    req: &ir::Request,
    opts: &RequestOptions,
    marks: &CacheMarks,
) -> Result<UpstreamRequest, Invalid> {
    // Reservation safety: the client's limit (or the one the reservation was sized for)
    // is sent as it is, never raised.
    let max_tokens = req.max_tokens.unwrap_or(opts.default_max_tokens);
    let messages = messages(&req.messages, marks)?;
    let claude = is_claude(opts.upstream_model);
    let thinking = if claude {
        thinking_budget(req, max_tokens, &messages)
    } else {
        None
    };

    let mut body = Request {
        messages,
        ..Request::default()
    };
    for s in req.system.iter().filter(|s| !s.trim().is_empty()) {
        body.system.push(SystemContentBlock {
            text: Some(s.clone()),
            cache_point: None,
        });
    }
    if marks.system && !body.system.is_empty() {
        body.system.push(SystemContentBlock {
            text: None,
            cache_point: Some(CachePointBlock::default_point()),
        });
    }
    let mut config = InferenceConfiguration {
        max_tokens: Some(max_tokens),
        stop_sequences: req.stop.clone(),
        ..Default::default()
    };
    // With thinking on, Claude refuses changed sampling: the reasoning the client asked
    // for is kept and the sampling it cannot have is left out.
    if let Some(t) = req.temperature {
        let t = if claude { t.clamp(0.0, 1.0) } else { t };
        if thinking.is_none() || t == 1.0 {
            config.temperature = Some(t);
        }
    }
    if let Some(p) = req.top_p {
        if thinking.is_none() || p >= MIN_TOP_P_WITH_THINKING {
            config.top_p = Some(p);
        }
    }
    body.inference_config = Some(config);
    body.tool_config = tool_config(req, &body.messages, marks);
    if let Some(budget) = thinking {
        body.additional_model_request_fields.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    } else if let (true, Some(k)) = (claude, req.top_k) {
        body.additional_model_request_fields
            .insert("top_k".into(), json!(k));
    }
    // `response_format`, `seed`, the penalties and `user` have no Converse member.
    Ok(UpstreamRequest {
        body: serde_json::to_vec(&body).unwrap_or_default(),
        path: super::path(opts.upstream_model, opts.stream),
        client_wants_usage: false,
    })
}

/// Anthropic's models on Bedrock (`anthropic.claude-...`, inference profiles
/// `us.anthropic.claude-...`, ARNs naming them): the ones whose reasoning and `top_k`
/// go in `additionalModelRequestFields` in the messages API's shape.
fn is_claude(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    m.contains("anthropic") || m.contains("claude")
}

/// Turns as Converse wants them: no empty turns, consecutive turns of one role merged
/// (it requires alternation), tool results first in a user turn, a `cachePoint` closing
/// each turn that holds a message the client marked for caching.
fn messages(msgs: &[ir::Message], marks: &CacheMarks) -> Result<Vec<Message>, Invalid> {
    let mut turns: Vec<(Role, Vec<ContentBlock>, bool)> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let mut blocks = Vec::new();
        for part in &m.content {
            if let Some(b) = block(i, part)? {
                blocks.push(b);
            }
        }
        if blocks.is_empty() {
            continue;
        }
        let cached = marks.messages.contains(&i);
        match turns.last_mut() {
            Some((role, b, c)) if *role == m.role => {
                b.extend(blocks);
                *c |= cached;
            }
            _ => turns.push((m.role, blocks, cached)),
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, mut content, cached)| {
            if role == Role::User {
                // Stable: the order among results and among the rest is kept.
                content.sort_by_key(|b| b.tool_result.is_none());
            }
            if cached {
                content.push(ContentBlock {
                    cache_point: Some(CachePointBlock::default_point()),
                    ..Default::default()
                });
            }
            Message {
                role: match role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                }
                .into(),
                content,
                rest: Map::new(),
            }
        })
        .collect())
}

fn block(i: usize, part: &Part) -> Result<Option<ContentBlock>, Invalid> {
    let mut b = ContentBlock::default();
    match part {
        // Converse refuses blank text blocks.
        Part::Text(t) if t.trim().is_empty() => return Ok(None),
        Part::Text(t) => b.text = Some(t.clone()),
        Part::Image(img) => b.image = Some(image(i, img)?),
        Part::ToolCall(c) => {
            b.tool_use = Some(ToolUseBlock {
                tool_use_id: tool_id(&c.id),
                name: c.name.clone(),
                input: ir::arguments_object(&c.arguments),
            })
        }
        Part::ToolResult(r) => b.tool_result = Some(tool_result(i, r)?),
        // Unsigned thinking is another protocol's visible reasoning: Claude refuses
        // reasoning it did not sign, so it stays out of the history.
        Part::Thinking { text, signature } => match signature.as_deref() {
            Some(s) if !s.is_empty() => {
                b.reasoning_content = Some(ReasoningContentBlock {
                    reasoning_text: Some(ReasoningTextBlock {
                        text: text.clone(),
                        signature: Some(s.to_string()),
                    }),
                    redacted_content: None,
                })
            }
            _ => return Ok(None),
        },
        Part::RedactedThinking(data) => {
            b.reasoning_content = Some(ReasoningContentBlock {
                reasoning_text: None,
                redacted_content: Some(data.clone()),
            })
        }
    }
    Ok(Some(b))
}

/// An image as Converse takes it: inline bytes (base64 in JSON) of a named format.
fn image(i: usize, img: &ir::Image) -> Result<ImageBlock, Invalid> {
    let param = format!("messages[{i}].content");
    let (media_type, data) = match img {
        ir::Image::Base64 { media_type, data } => (media_type.as_str(), data),
        ir::Image::Url(_) => {
            return Err(invalid(
                param,
                "This model's provider takes images as inline data only (a base64 `data:` URL), not by URL.",
            ))
        }
    };
    let format = match media_type.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        other => {
            return Err(invalid(
                param,
                format!("Images of type `{other}` cannot be sent to this model's provider (png, jpeg, gif, webp)."),
            ))
        }
    };
    Ok(ImageBlock {
        format: format.into(),
        source: ImageSource {
            bytes: Some(data.clone()),
            rest: Map::new(),
        },
    })
}

fn tool_result(i: usize, r: &ir::ToolResult) -> Result<ToolResultBlock, Invalid> {
    let mut content = Vec::new();
    for p in &r.content {
        match p {
            Part::Text(t) => content.push(ToolResultContentBlock {
                text: Some(t.clone()),
                ..Default::default()
            }),
            Part::Image(img) => content.push(ToolResultContentBlock {
                image: Some(image(i, img)?),
                ..Default::default()
            }),
            _ => {}
        }
    }
    Ok(ToolResultBlock {
        tool_use_id: tool_id(&r.call_id),
        content,
        status: r.is_error.then(|| "error".to_string()),
    })
}

/// A tool use id as Converse accepts it (`[a-zA-Z0-9_-]+`, at most 64): the same id
/// always gives the same answer, so a call and its result still match.
fn tool_id(id: &str) -> String {
    let (id, _) = ir::split_call_id(id);
    let mut out: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_ID)
        .collect();
    if out.is_empty() {
        out.push_str("tool");
    }
    out
}

fn tool_config(
    req: &ir::Request,
    messages: &[Message],
    marks: &CacheMarks,
) -> Option<ToolConfiguration> {
    if req.tools.is_empty() {
        return None;
    }
    let history_has_tools = messages
        .iter()
        .flat_map(|m| &m.content)
        .any(|b| b.tool_use.is_some() || b.tool_result.is_some());
    let choice = match &req.tool_choice {
        None | Some(ToolChoice::Auto) => None,
        Some(ToolChoice::Required) => Some(json!({"any": {}})),
        Some(ToolChoice::Tool(name)) => Some(json!({"tool": {"name": name}})),
        // Converse has no `none`: the tools are left out, unless the history uses them
        // (Converse then requires their definitions).
        Some(ToolChoice::None) if !history_has_tools => return None,
        Some(ToolChoice::None) => None,
    };
    let mut tools: Vec<Tool> = req
        .tools
        .iter()
        .map(|t| {
            // An object schema; one without `type` is read as one.
            let mut schema = match &t.parameters {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            if !schema.contains_key("type") {
                schema.insert("type".into(), json!("object"));
            }
            Tool {
                tool_spec: Some(ToolSpecification {
                    name: t.name.clone(),
                    description: t.description.clone().filter(|d| !d.is_empty()),
                    input_schema: json!({ "json": Value::Object(schema) }),
                }),
                cache_point: None,
            }
        })
        .collect();
    if marks.tools {
        tools.push(Tool {
            tool_spec: None,
            cache_point: Some(CachePointBlock::default_point()),
        });
    }
    Some(ToolConfiguration {
        tools,
        tool_choice: choice,
    })
}

/// The thinking budget to send to a Claude model, if any: 1024 <= budget < maxTokens,
/// lowered to fit (never maxTokens raised), and left out where Claude would refuse the
/// request: with a forced tool call, and when the last assistant turn uses tools without
/// the signed reasoning that must open it (history from a protocol that does not keep it).
fn thinking_budget(req: &ir::Request, max_tokens: u64, messages: &[Message]) -> Option<u64> {
    let r = req.reasoning.as_ref().filter(|r| !r.disabled)?;
    let budget = r.budget().min(max_tokens.saturating_sub(1));
    if budget < MIN_THINKING_BUDGET {
        return None;
    }
    if !req.tools.is_empty()
        && matches!(
            req.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Tool(_))
        )
    {
        return None;
    }
    if let Some(last) = messages.iter().rev().find(|m| m.role == "assistant") {
        let uses_tools = last.content.iter().any(|b| b.tool_use.is_some());
        let opens_with_reasoning = last
            .content
            .first()
            .is_some_and(|b| b.reasoning_content.is_some());
        if uses_tools && !opens_with_reasoning {
            return None;
        }
    }
    Some(budget)
}
