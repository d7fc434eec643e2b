//! Pivot events → a chat client's stream (`data: <chunk>\n\n` ... `data: [DONE]\n\n`),
//! in the shape the official SDKs accumulate: the role on the first delta, tool calls
//! opened with id, type and name then fed argument pieces by `index`, the finish reason
//! on its own empty delta, and the usage chunk (empty `choices`) only when asked for.

use super::error_event;
use super::response::{finish_reason_str, usage_json};
use crate::protocol::ir::{self, Event, FinishReason, StreamEncoder};
use crate::protocol::{cost, StreamContext, Usage};
use serde_json::{json, Map, Value};

pub fn encoder(ctx: &StreamContext) -> Box<dyn StreamEncoder> {
    let id = format!("chatcmpl-{}", ctx.request_id);
    // What every chunk begins with, up to the delta's members: the members written by
    // `Encoder::chunk` in its order, then the choice's `index` and `delta`.
    let mut head = b"data: {\"id\":".to_vec();
    json_str(&mut head, &id);
    head.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
    head.extend_from_slice(ctx.created.to_string().as_bytes());
    head.extend_from_slice(b",\"model\":");
    json_str(&mut head, &ctx.client_model);
    head.extend_from_slice(b",\"choices\":[{\"index\":0,\"delta\":{");
    Box::new(Encoder {
        ctx: ctx.clone(),
        id,
        head,
        started: false,
        tool_calls: false,
        finish: None,
        usage: None,
        finished: false,
    })
}

/// A JSON string, escaped as `serde_json` writes one.
fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// What follows the delta's one member in a text chunk.
const TEXT_TAIL: &[u8] = b"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";

struct Encoder {
    ctx: StreamContext,
    id: String,
    /// The bytes a chunk starts with, up to its delta's members.
    head: Vec<u8>,
    /// Whether the first delta (the one with the role) went out.
    started: bool,
    /// Whether any tool call was streamed (decides `tool_calls` over `stop`).
    tool_calls: bool,
    /// Held until the end: chat reports it once, after all deltas.
    finish: Option<FinishReason>,
    /// Held until the end: the usage chunk comes last. `None` until the upstream reports.
    usage: Option<Usage>,
    finished: bool,
}

impl Encoder {
    fn chunk(&self, choices: Value, usage: Option<Value>, out: &mut Vec<u8>) {
        let mut c = Map::new();
        c.insert("id".into(), self.id.as_str().into());
        c.insert("object".into(), "chat.completion.chunk".into());
        c.insert("created".into(), self.ctx.created.into());
        c.insert("model".into(), self.ctx.client_model.as_str().into());
        c.insert("choices".into(), choices);
        if let Some(u) = usage {
            c.insert("usage".into(), u);
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(Value::Object(c).to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn delta(&mut self, mut delta: Map<String, Value>, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            // The SDKs take the role and start the content from the first delta.
            let mut first = one("role", "assistant".into());
            let content = delta.remove("content").unwrap_or_else(|| "".into());
            first.insert("content".into(), content);
            first.extend(delta);
            delta = first;
        }
        let choice = json!([{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": null,
        }]);
        self.chunk(choice, None, out);
    }
}

impl Encoder {
    /// A chunk whose delta is one string member, once the first delta went out: the
    /// bytes [`Encoder::delta`] writes for it, without building it.
    fn text(&self, key: &str, text: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        json_str(out, key);
        out.push(b':');
        json_str(out, text);
        out.extend_from_slice(TEXT_TAIL);
    }
}

fn one(key: &str, v: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(key.into(), v);
    m
}

impl StreamEncoder for Encoder {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        match ev {
            // Text after the first delta: the chunk `delta` would write, written straight.
            Event::Text(t) if !t.is_empty() && self.started => self.text("content", t, out),
            Event::Thinking(t) if !t.is_empty() && self.started => {
                self.text("reasoning_content", t, out)
            }
            Event::Text(t) if !t.is_empty() => self.delta(one("content", t.as_str().into()), out),
            Event::Thinking(t) if !t.is_empty() => {
                self.delta(one("reasoning_content", t.as_str().into()), out)
            }
            Event::ToolCallStart {
                index,
                id,
                name,
                signature,
            } => {
                self.tool_calls = true;
                let call = json!([{
                    "index": index,
                    "id": ir::join_call_id(id, signature.as_deref()),
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]);
                self.delta(one("tool_calls", call), out);
            }
            Event::ToolCallArgs { index, fragment } if !fragment.is_empty() => {
                let call = json!([{"index": index, "function": {"arguments": fragment}}]);
                self.delta(one("tool_calls", call), out);
            }
            Event::Finish(reason) => self.finish = Some(reason.clone()),
            Event::Usage(u) => self.usage = Some(*u),
            // Signatures and redacted thinking have no chat field (chat clients cannot
            // send thinking back); errors end the stream through `finish`.
            _ => {}
        }
        // Whatever opened the stream, even an event with nothing to show, the client
        // gets its role right away.
        if !self.started {
            self.delta(Map::new(), out);
        }
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(message) = error {
            out.extend_from_slice(&error_event(message));
            return;
        }
        if !self.started {
            self.delta(Map::new(), out);
        }
        let reason = finish_reason_str(self.finish.as_ref(), self.tool_calls);
        let choice = json!([{
            "index": 0,
            "delta": {},
            "logprobs": null,
            "finish_reason": reason,
        }]);
        self.chunk(choice, None, out);
        if self.ctx.client_wants_usage {
            let mut usage = usage_json(&self.usage.unwrap_or_default());
            let cost = cost::of_reported(self.ctx.charge.as_ref(), self.usage.as_ref());
            cost::add(&mut usage, cost);
            self.chunk(json!([]), Some(usage), out);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
}

#[cfg(test)]
mod tests;
