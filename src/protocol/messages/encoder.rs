//! Neutral stream events → a messages event stream: `message_start`, content blocks
//! (`content_block_start` / `content_block_delta` / `content_block_stop`, indices from 0,
//! one open at a time), then `message_delta` and `message_stop`.
//!
//! Tool calls: the messages protocol streams one block at a time, but some upstreams
//! interleave the argument fragments of parallel calls. The call being streamed stays
//! open until its arguments form a whole JSON value; a call that starts before that is
//! held (arguments buffered) and sent as a whole block once the open one is complete or
//! other content starts. Sequential calls stream live; interleaved ones lose nothing.

use super::response::CallIds;
use super::{error_event, stop_reason, write_event, WireUsage};
use crate::protocol::ir::{Event, FinishReason, StreamEncoder};
use crate::protocol::{cost, ChargeOf, StreamContext, Usage};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};

pub struct Encoder {
    id: String,
    model: String,
    ids: CallIds,
    started: bool,
    ended: bool,
    next_block: usize,
    open: Option<Open>,
    /// Tool calls by their index in the answer.
    calls: BTreeMap<usize, Call>,
    /// Held calls, in the order they started.
    queue: VecDeque<usize>,
    /// Argument fragments that came before their call's start.
    early: BTreeMap<usize, String>,
    saw_tool_call: bool,
    finish: Option<FinishReason>,
    /// The latest usage report; `None` until the upstream reports.
    usage: Option<Usage>,
    /// Prices the usage for `cost_usd`, when the stream shows it.
    charge: Option<ChargeOf>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Open {
    Text(usize),
    Thinking(usize),
    Tool { block: usize, call: usize },
}

struct Call {
    id: String,
    name: String,
    state: CallState,
    /// The block it was streamed in, once started.
    block: usize,
    /// Arguments not sent yet.
    held: String,
    end: JsonEnd,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CallState {
    Held,
    Live,
    Done,
}

impl Encoder {
    pub fn new(ctx: &StreamContext) -> Encoder {
        Encoder {
            id: format!("msg_{}", ctx.request_id),
            model: ctx.client_model.clone(),
            ids: CallIds::new(&ctx.request_id),
            started: false,
            ended: false,
            next_block: 0,
            open: None,
            calls: BTreeMap::new(),
            queue: VecDeque::new(),
            early: BTreeMap::new(),
            saw_tool_call: false,
            finish: None,
            usage: None,
            charge: ctx.charge.clone(),
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        // The final usage comes with `message_delta`, which the SDKs apply on top.
        let message = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        write_event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
    }

    fn block_start(&mut self, block: Value, out: &mut Vec<u8>) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        write_event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
        index
    }

    fn delta(index: usize, delta: Value, out: &mut Vec<u8>) {
        write_event(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
    }

    fn block_stop(index: usize, out: &mut Vec<u8>) {
        write_event(
            out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
    }

    /// Closes the open block, if any.
    fn close(&mut self, out: &mut Vec<u8>) {
        match self.open.take() {
            Some(Open::Text(i) | Open::Thinking(i)) => Self::block_stop(i, out),
            Some(Open::Tool { block, call }) => {
                Self::block_stop(block, out);
                if let Some(c) = self.calls.get_mut(&call) {
                    c.state = CallState::Done;
                }
            }
            None => {}
        }
    }

    /// Closes the open block and sends every held call whole: other content starts.
    fn close_all(&mut self, out: &mut Vec<u8>) {
        self.close(out);
        while let Some(k) = self.queue.pop_front() {
            self.go_live(k, out);
            self.close(out);
        }
    }

    fn go_live(&mut self, index: usize, out: &mut Vec<u8>) {
        let Some(c) = self.calls.get(&index) else {
            return;
        };
        let block = json!({"type": "tool_use", "id": c.id, "name": c.name, "input": {}});
        let b = self.block_start(block, out);
        self.open = Some(Open::Tool {
            block: b,
            call: index,
        });
        if let Some(c) = self.calls.get_mut(&index) {
            c.state = CallState::Live;
            c.block = b;
            let held = std::mem::take(&mut c.held);
            if !held.is_empty() {
                c.end.feed(&held);
                Self::delta(
                    b,
                    json!({"type": "input_json_delta", "partial_json": held}),
                    out,
                );
            }
        }
    }

    /// While the open call's arguments are whole, the next held call takes its place.
    fn advance(&mut self, out: &mut Vec<u8>) {
        loop {
            let Some(Open::Tool { call, .. }) = self.open else {
                return;
            };
            let complete = self.calls.get(&call).is_some_and(|c| c.end.complete());
            if !complete {
                return;
            }
            let Some(next) = self.queue.pop_front() else {
                return;
            };
            self.close(out);
            self.go_live(next, out);
        }
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        let index = match self.open {
            Some(Open::Text(i)) => i,
            _ => {
                self.close_all(out);
                let i = self.block_start(json!({"type": "text", "text": ""}), out);
                self.open = Some(Open::Text(i));
                i
            }
        };
        Self::text_delta(index, "text_delta", "text", text, out);
    }

    /// A delta of one string member: the bytes [`Encoder::delta`] writes for
    /// `{"type": kind, key: text}`, without building it.
    fn text_delta(index: usize, kind: &str, key: &str, text: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":",
        );
        // Writing into a Vec cannot fail.
        let _ = std::io::Write::write_fmt(out, format_args!("{index}"));
        out.extend_from_slice(b",\"delta\":{\"type\":");
        json_str(out, kind);
        out.push(b',');
        json_str(out, key);
        out.push(b':');
        json_str(out, text);
        out.extend_from_slice(b"}}\n\n");
    }

    fn thinking_block(&mut self, out: &mut Vec<u8>) -> usize {
        match self.open {
            Some(Open::Thinking(i)) => i,
            _ => {
                self.close_all(out);
                let block = json!({"type": "thinking", "thinking": "", "signature": ""});
                let i = self.block_start(block, out);
                self.open = Some(Open::Thinking(i));
                i
            }
        }
    }

    fn tool_start(
        &mut self,
        index: usize,
        id: &str,
        name: &str,
        sig: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        if self.calls.contains_key(&index) {
            return;
        }
        self.saw_tool_call = true;
        let call = Call {
            id: self.ids.client_id(id, sig),
            name: name.to_string(),
            state: CallState::Held,
            block: 0,
            held: self.early.remove(&index).unwrap_or_default(),
            end: JsonEnd::default(),
        };
        self.calls.insert(index, call);
        let open_incomplete = match self.open {
            Some(Open::Tool { call, .. }) => {
                self.calls.get(&call).is_some_and(|c| !c.end.complete())
            }
            _ => false,
        };
        if open_incomplete || !self.queue.is_empty() {
            // Interleaving is possible: hold this call until the open one is whole.
            self.queue.push_back(index);
        } else {
            self.close_all(out);
            self.go_live(index, out);
        }
    }

    fn tool_args(&mut self, index: usize, fragment: &str, out: &mut Vec<u8>) {
        if fragment.is_empty() {
            return;
        }
        let Some(c) = self.calls.get_mut(&index) else {
            self.early.entry(index).or_default().push_str(fragment);
            return;
        };
        match c.state {
            CallState::Held => c.held.push_str(fragment),
            CallState::Live => {
                c.end.feed(fragment);
                let delta = json!({"type": "input_json_delta", "partial_json": fragment});
                Self::delta(c.block, delta, out);
                self.advance(out);
            }
            // After a whole JSON value only whitespace can validly follow. Anything else
            // (arguments resumed after other content started) still goes to the call's
            // own block: the SDKs look blocks up by index, so nothing is lost.
            CallState::Done if fragment.trim().is_empty() => {}
            CallState::Done => {
                let delta = json!({"type": "input_json_delta", "partial_json": fragment});
                Self::delta(c.block, delta, out);
            }
        }
    }
}

impl StreamEncoder for Encoder {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        self.start(out);
        match ev {
            Event::Text(t) if t.is_empty() => {}
            Event::Text(t) => self.text(t, out),
            Event::Thinking(t) if t.is_empty() => {}
            Event::Thinking(t) => {
                let i = self.thinking_block(out);
                Self::text_delta(i, "thinking_delta", "thinking", t, out);
            }
            Event::ThinkingSignature(s) if s.is_empty() => {}
            Event::ThinkingSignature(s) => {
                // A signature alone (no thinking text) still opens a block: it must
                // come back on the next turn.
                let i = self.thinking_block(out);
                Self::delta(i, json!({"type": "signature_delta", "signature": s}), out);
                self.close(out);
            }
            Event::RedactedThinking(data) => {
                self.close_all(out);
                let i = self.block_start(json!({"type": "redacted_thinking", "data": data}), out);
                Self::block_stop(i, out);
            }
            Event::ToolCallStart {
                index,
                id,
                name,
                signature,
            } => self.tool_start(*index, id, name, signature.as_deref(), out),
            Event::ToolCallArgs { index, fragment } => self.tool_args(*index, fragment, out),
            Event::Usage(u) => self.usage = Some(*u),
            Event::Finish(f) => self.finish = Some(f.clone()),
            // The translator ends the stream through `finish(Some(..))`.
            Event::Error | Event::Broken(_) => {}
        }
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        self.start(out);
        self.ended = true;
        if let Some(message) = error {
            self.close(out);
            out.extend_from_slice(&error_event(message));
            return;
        }
        self.close_all(out);
        let (reason, sequence) = stop_reason(self.finish.as_ref(), self.saw_tool_call);
        let usage = self.usage.unwrap_or_default();
        let u = WireUsage::from_usage(&usage);
        let mut wire = Map::new();
        wire.insert("input_tokens".into(), u.input.into());
        wire.insert("output_tokens".into(), u.output.into());
        wire.insert("cache_read_input_tokens".into(), u.cache_read.into());
        wire.insert(
            "cache_creation_input_tokens".into(),
            u.cache_creation.into(),
        );
        u.add_details(&mut wire);
        let mut wire = Value::Object(wire);
        let cost = cost::of_reported(self.charge.as_ref(), self.usage.as_ref());
        cost::add(&mut wire, cost);
        write_event(
            out,
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": wire,
            }),
        );
        write_event(out, "message_stop", &json!({"type": "message_stop"}));
    }
}

/// A JSON string, escaped as `serde_json` writes one.
fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Whether streamed JSON text has closed its top-level object or array, one byte at a
/// time (no re-parsing, so long arguments stay linear). Structural characters are ASCII,
/// which never occurs inside a multi-byte UTF-8 sequence.
#[derive(Debug, Default)]
struct JsonEnd {
    depth: u32,
    opened: bool,
    in_string: bool,
    escaped: bool,
    /// Not a single object or array: completeness cannot be told, so never claimed.
    spoiled: bool,
}

impl JsonEnd {
    fn feed(&mut self, s: &str) {
        for b in s.bytes() {
            if self.spoiled {
                return;
            }
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            if b.is_ascii_whitespace() {
                continue;
            }
            if !self.opened {
                self.opened = true;
                match b {
                    b'{' | b'[' => self.depth = 1,
                    _ => self.spoiled = true,
                }
                continue;
            }
            if self.depth == 0 {
                self.spoiled = true;
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => self.depth -= 1,
                _ => {}
            }
        }
    }

    fn complete(&self) -> bool {
        self.opened && self.depth == 0 && !self.in_string && !self.spoiled
    }
}

#[cfg(test)]
#[path = "encoder_tests.rs"]
mod tests;
