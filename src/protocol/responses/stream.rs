//! [`ir::Event`]s → a Responses API event stream, in the order the official SDK's stream
//! accumulator requires: `response.created` first, every item added before its content
//! and done before `response.completed`, `output_index` counting items as added, and a
//! `sequence_number` on every event.

use super::response::{
    client_call_id, function_call_item, item_id, message_item, output_text_part, reasoning_item,
    redacted_encrypted, response_object, summary_part, Meta, Status,
};
use crate::protocol::ir::{Event, FinishReason, StreamEncoder};
use crate::protocol::{cost, ChargeOf, StreamContext, Usage};
use serde_json::{json, Map, Value};

pub fn encoder(ctx: &StreamContext) -> Box<dyn StreamEncoder> {
    Box::new(Encoder {
        request_id: ctx.request_id.clone(),
        model: ctx.client_model.clone(),
        created: ctx.created,
        seq: 0,
        started: false,
        finished: false,
        items: Vec::new(),
        open_message: None,
        open_reasoning: None,
        calls: Vec::new(),
        usage: Usage::default(),
        reported: false,
        charge: ctx.charge.clone(),
        finish: None,
    })
}

/// The terminal `error` event on its own (a stream that broke before any encoder ran).
pub fn error_event(message: &str) -> Vec<u8> {
    error_event_at(0, message)
}

/// The `error` event with a given sequence number (a stream's next one).
pub(super) fn error_event_at(seq: u64, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_event(&mut out, "error", seq, error_fields(message));
    out
}

/// The `error` event's fields. The top-level `error` object is what makes the openai SDK
/// raise instead of yielding the event.
fn error_fields(message: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("code".into(), "upstream_error".into());
    m.insert("message".into(), message.into());
    m.insert("param".into(), Value::Null);
    m.insert(
        "error".into(),
        json!({"type": "upstream_error", "code": "upstream_error", "message": message}),
    );
    m
}

fn write_event(out: &mut Vec<u8>, kind: &str, seq: u64, fields: Map<String, Value>) {
    let mut data = Map::with_capacity(fields.len() + 2);
    data.insert("type".into(), kind.into());
    data.insert("sequence_number".into(), seq.into());
    data.extend(fields);
    crate::protocol::sse::write_event(out, Some(kind), &Value::Object(data).to_string());
}

struct Encoder {
    request_id: String,
    model: String,
    created: i64,
    seq: u64,
    started: bool,
    finished: bool,
    /// Every output item so far, by output index.
    items: Vec<Item>,
    open_message: Option<usize>,
    open_reasoning: Option<usize>,
    /// (tool call index, output index) of every call started.
    calls: Vec<(usize, usize)>,
    usage: Usage,
    /// Whether the upstream reported usage.
    reported: bool,
    /// Prices the usage for `cost_usd` on the final response, when the stream shows it.
    charge: Option<ChargeOf>,
    finish: Option<FinishReason>,
}

struct Item {
    id: String,
    open: bool,
    kind: Kind,
}

enum Kind {
    Message {
        text: String,
    },
    Reasoning {
        text: String,
        encrypted: Option<String>,
        /// Whether a summary part was announced (not for signature-only items).
        has_part: bool,
    },
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
}

impl Item {
    fn json(&self) -> Value {
        let status = if self.open {
            "in_progress"
        } else {
            "completed"
        };
        match &self.kind {
            Kind::Message { text } => message_item(&self.id, status, vec![output_text_part(text)]),
            Kind::Reasoning {
                text, encrypted, ..
            } => reasoning_item(&self.id, text, encrypted.as_deref()),
            Kind::Call {
                call_id,
                name,
                arguments,
            } => function_call_item(&self.id, call_id, name, arguments, status),
        }
    }
}

/// An event's fields after `type` and `sequence_number`.
fn fields(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl Encoder {
    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, v: Value) {
        write_event(out, kind, self.seq, fields(v));
        self.seq += 1;
    }

    fn meta(&self) -> Meta<'_> {
        Meta {
            request_id: &self.request_id,
            model: &self.model,
            created: self.created,
        }
    }

    fn output(&self) -> Vec<Value> {
        self.items.iter().map(Item::json).collect()
    }

    /// `response.created` and `response.in_progress`, before anything else.
    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = response_object(&self.meta(), &Status::InProgress, Vec::new(), None);
        self.emit(out, "response.created", json!({ "response": r.clone() }));
        self.emit(out, "response.in_progress", json!({ "response": r }));
    }

    fn add_item(&mut self, prefix: &str, kind: Kind, out: &mut Vec<u8>) -> usize {
        let n = self.items.len();
        let id = item_id(prefix, &self.request_id, n);
        let added = match &kind {
            Kind::Message { .. } => message_item(&id, "in_progress", Vec::new()),
            Kind::Reasoning { encrypted, .. } => reasoning_item(&id, "", encrypted.as_deref()),
            Kind::Call { call_id, name, .. } => {
                function_call_item(&id, call_id, name, "", "in_progress")
            }
        };
        self.items.push(Item {
            id,
            open: true,
            kind,
        });
        self.emit(
            out,
            "response.output_item.added",
            json!({"output_index": n, "item": added}),
        );
        n
    }

    /// Text and reasoning items end when another item begins; function calls stay open
    /// until the end, since parallel calls' argument fragments may interleave.
    fn close_text_items(&mut self, out: &mut Vec<u8>) {
        if let Some(n) = self.open_message.take() {
            self.close(n, out);
        }
        if let Some(n) = self.open_reasoning.take() {
            self.close(n, out);
        }
    }

    fn close(&mut self, n: usize, out: &mut Vec<u8>) {
        let Some(item) = self.items.get_mut(n) else {
            return;
        };
        if !item.open {
            return;
        }
        item.open = false;
        let id = item.id.clone();
        let done = item.json();
        match &self.items[n].kind {
            Kind::Message { text } => {
                let text = text.clone();
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0, "text": text, "logprobs": []}),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0, "part": output_text_part(&text)}),
                );
            }
            Kind::Reasoning { text, has_part, .. } => {
                if *has_part {
                    let text = text.clone();
                    self.emit(
                        out,
                        "response.reasoning_summary_text.done",
                        json!({"item_id": id, "output_index": n, "summary_index": 0, "text": text}),
                    );
                    self.emit(
                        out,
                        "response.reasoning_summary_part.done",
                        json!({"item_id": id, "output_index": n, "summary_index": 0, "part": summary_part(&text)}),
                    );
                }
            }
            Kind::Call {
                name, arguments, ..
            } => {
                let (name, arguments) = (name.clone(), arguments.clone());
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": n, "name": name, "arguments": arguments}),
                );
            }
        }
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": n, "item": done}),
        );
    }

    fn text(&mut self, delta: &str, out: &mut Vec<u8>) {
        let n = match self.open_message {
            Some(n) => n,
            None => {
                self.close_text_items(out);
                let n = self.add_item(
                    "msg",
                    Kind::Message {
                        text: String::new(),
                    },
                    out,
                );
                let id = self.items[n].id.clone();
                self.emit(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": n, "content_index": 0, "part": output_text_part("")}),
                );
                self.open_message = Some(n);
                n
            }
        };
        if let Some(Item {
            kind: Kind::Message { text },
            ..
        }) = self.items.get_mut(n)
        {
            text.push_str(delta);
        }
        let id = self.items[n].id.clone();
        self.emit(
            out,
            "response.output_text.delta",
            json!({"item_id": id, "output_index": n, "content_index": 0, "delta": delta, "logprobs": []}),
        );
    }

    fn thinking(&mut self, delta: &str, out: &mut Vec<u8>) {
        let n = match self.open_reasoning {
            Some(n) => n,
            None => {
                self.close_text_items(out);
                let kind = Kind::Reasoning {
                    text: String::new(),
                    encrypted: None,
                    has_part: true,
                };
                let n = self.add_item("rs", kind, out);
                let id = self.items[n].id.clone();
                self.emit(
                    out,
                    "response.reasoning_summary_part.added",
                    json!({"item_id": id, "output_index": n, "summary_index": 0, "part": summary_part("")}),
                );
                self.open_reasoning = Some(n);
                n
            }
        };
        if let Some(Item {
            kind: Kind::Reasoning { text, .. },
            ..
        }) = self.items.get_mut(n)
        {
            text.push_str(delta);
        }
        let id = self.items[n].id.clone();
        self.emit(
            out,
            "response.reasoning_summary_text.delta",
            json!({"item_id": id, "output_index": n, "summary_index": 0, "delta": delta}),
        );
    }

    /// A signature ends its thinking block; one with no thinking before it (or redacted
    /// thinking) is a reasoning item with no summary.
    fn signature(&mut self, sig: String, out: &mut Vec<u8>) {
        if let Some(n) = self.open_reasoning.take() {
            if let Some(Item {
                kind: Kind::Reasoning { encrypted, .. },
                ..
            }) = self.items.get_mut(n)
            {
                *encrypted = Some(sig);
            }
            self.close(n, out);
            return;
        }
        self.close_text_items(out);
        let kind = Kind::Reasoning {
            text: String::new(),
            encrypted: Some(sig),
            has_part: false,
        };
        let n = self.add_item("rs", kind, out);
        self.close(n, out);
    }

    fn tool_call_start(
        &mut self,
        index: usize,
        id: &str,
        name: &str,
        sig: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        if self.calls.iter().any(|(i, _)| *i == index) {
            return;
        }
        self.close_text_items(out);
        let kind = Kind::Call {
            call_id: client_call_id(&self.request_id, index, id, sig),
            name: name.to_string(),
            arguments: String::new(),
        };
        let n = self.add_item("fc", kind, out);
        self.calls.push((index, n));
    }

    fn tool_call_args(&mut self, index: usize, fragment: &str, out: &mut Vec<u8>) {
        // Fragments of a call that never started have no item to belong to.
        let Some(&(_, n)) = self.calls.iter().find(|(i, _)| *i == index) else {
            return;
        };
        let Some(item) = self.items.get_mut(n) else {
            return;
        };
        if !item.open {
            return;
        }
        if let Kind::Call { arguments, .. } = &mut item.kind {
            arguments.push_str(fragment);
        }
        let id = item.id.clone();
        self.emit(
            out,
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": n, "delta": fragment}),
        );
    }
}

impl StreamEncoder for Encoder {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        self.start(out);
        match ev {
            Event::Text(t) if !t.is_empty() => self.text(t, out),
            Event::Thinking(t) if !t.is_empty() => self.thinking(t, out),
            Event::ThinkingSignature(s) if !s.is_empty() => self.signature(s.clone(), out),
            Event::RedactedThinking(d) => self.signature(redacted_encrypted(d), out),
            Event::ToolCallStart {
                index,
                id,
                name,
                signature,
            } => self.tool_call_start(*index, id, name, signature.as_deref(), out),
            Event::ToolCallArgs { index, fragment } if !fragment.is_empty() => {
                self.tool_call_args(*index, fragment, out)
            }
            Event::Usage(u) => {
                self.usage = *u;
                self.reported = true;
            }
            Event::Finish(r) => self.finish = Some(r.clone()),
            // The stream translator turns an upstream error into `finish(Some(..))`.
            _ => {}
        }
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        self.start(out);
        self.finished = true;
        if let Some(message) = error {
            let r = response_object(
                &self.meta(),
                &Status::Failed(message),
                self.output(),
                Some(&self.usage),
            );
            self.emit(out, "response.failed", json!({ "response": r }));
            let seq = self.seq;
            self.seq += 1;
            write_event(out, "error", seq, error_fields(message));
            return;
        }
        self.open_message = None;
        self.open_reasoning = None;
        for n in 0..self.items.len() {
            self.close(n, out);
        }
        let status = Status::of(self.finish.as_ref());
        let mut r = response_object(&self.meta(), &status, self.output(), Some(&self.usage));
        let reported = self.reported.then_some(&self.usage);
        cost::add(
            &mut r["usage"],
            cost::of_reported(self.charge.as_ref(), reported),
        );
        let kind = match status {
            Status::Incomplete(_) => "response.incomplete",
            _ => "response.completed",
        };
        self.emit(out, kind, json!({ "response": r }));
    }
}
