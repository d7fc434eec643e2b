//! Streams: pivot events → a generate-content client's chunks (SSE or a JSON array), and a
//! generate-content upstream's SSE chunks → pivot events.

use super::super::ir::{
    decode_json, Event, FinishReason, StreamBroken, StreamDecoder, StreamEncoder,
};
use super::super::sse::{self, Fault};
use super::super::{cost, ChargeOf, StreamContext, Usage};
use super::response::{function_call_part, signature_of, tool_call};
use super::wire::answer::{Candidate, GenerateContentResponse, Part as WirePart};
use super::wire::{
    client_signature, finish_from_wire, finish_to_wire, usage_metadata, ChunkWriter,
};
use serde::Deserialize;
use serde_json::{json, Value};

pub fn encoder(ctx: &StreamContext) -> Box<dyn StreamEncoder> {
    Box::new(Encoder {
        model: ctx.client_model.clone(),
        response_id: ctx.request_id.clone(),
        writer: ChunkWriter::new(ctx.client_sse),
        calls: Vec::new(),
        finish: None,
        usage: None,
        charge: ctx.charge.clone(),
    })
}

/// A function call being assembled from its start and argument pieces.
struct PendingCall {
    index: usize,
    id: String,
    name: String,
    signature: Option<String>,
    arguments: String,
}

struct Encoder {
    model: String,
    response_id: String,
    writer: ChunkWriter,
    /// The API streams function calls whole, parallel ones in one chunk: calls are held
    /// until something else (text, thought, the end) shows they are complete.
    calls: Vec<PendingCall>,
    /// Held for the last chunk, which carries both (as the API's does).
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    /// Prices the usage for `cost_usd`, when the stream shows it.
    charge: Option<ChargeOf>,
}

impl Encoder {
    fn chunk(&mut self, parts: Vec<Value>, end: bool, out: &mut Vec<u8>) {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}});
        if end {
            candidate["finishReason"] = finish_to_wire(self.finish.as_ref()).into();
        }
        candidate["index"] = 0.into();
        let mut v = json!({"candidates": [candidate]});
        if end {
            if let Some(u) = &self.usage {
                let mut m = usage_metadata(u);
                cost::add(&mut m, cost::of_reported(self.charge.as_ref(), Some(u)));
                v["usageMetadata"] = m;
            }
        }
        v["modelVersion"] = self.model.as_str().into();
        v["responseId"] = self.response_id.as_str().into();
        self.writer.chunk(&v, out);
    }

    fn call_parts(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .map(|c| function_call_part(&c.id, &c.name, &c.arguments, c.signature.as_deref()))
            .collect()
    }

    fn flush_calls(&mut self, out: &mut Vec<u8>) {
        if !self.calls.is_empty() {
            let parts = self.call_parts();
            self.chunk(parts, false, out);
        }
    }

    fn part(&mut self, part: Value, out: &mut Vec<u8>) {
        self.flush_calls(out);
        self.chunk(vec![part], false, out);
    }
}

impl StreamEncoder for Encoder {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        match ev {
            Event::Text(t) if !t.is_empty() => self.part(json!({"text": t}), out),
            Event::Thinking(t) if !t.is_empty() => {
                self.part(json!({"text": t, "thought": true}), out)
            }
            // The signature closes the thought streamed before it; a client that keeps
            // every part sends them back together and they are joined again on the way in.
            Event::ThinkingSignature(s) => {
                if let Some(s) = client_signature(Some(s)) {
                    let part = json!({"text": "", "thought": true, "thoughtSignature": s});
                    self.part(part, out);
                }
            }
            Event::ToolCallStart {
                index,
                id,
                name,
                signature,
            } => self.calls.push(PendingCall {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                signature: signature.clone(),
                arguments: String::new(),
            }),
            Event::ToolCallArgs { index, fragment } => {
                if let Some(c) = self.calls.iter_mut().find(|c| c.index == *index) {
                    c.arguments.push_str(fragment);
                }
            }
            Event::Usage(u) => self.usage = Some(*u),
            Event::Finish(f) => self.finish = Some(f.clone()),
            // Redacted reasoning has no form in this protocol; errors end the stream
            // through `finish`.
            Event::Text(_)
            | Event::Thinking(_)
            | Event::RedactedThinking(_)
            | Event::Error
            | Event::Broken(_) => {}
        }
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        if let Some(message) = error {
            // A call cut short is not shown: its arguments may be incomplete.
            self.calls.clear();
            self.writer.fail(message, out);
            return;
        }
        let mut parts = self.call_parts();
        if parts.is_empty() {
            // Clients print `chunk.text` for every chunk; an empty text keeps it a string.
            parts.push(json!({"text": ""}));
        }
        self.chunk(parts, true, out);
        self.writer.close(out);
    }
}

pub fn decoder() -> Box<dyn StreamDecoder> {
    Box::new(Decoder::default())
}

#[derive(Default)]
struct Decoder {
    sse: sse::Decoder,
    pending: Vec<sse::Event>,
    /// Function calls so far: the next call's index.
    calls: usize,
    last_usage: Option<Usage>,
    complete: bool,
    /// The first event that could not be read.
    broken: Option<Fault>,
}

impl Decoder {
    fn decode(&mut self, events: &mut Vec<Event>) {
        for ev in std::mem::take(&mut self.pending) {
            let mut broken = self.broken;
            decode_json(&ev, &mut broken, events, |v, out| self.chunk(v, out));
            self.broken = broken;
        }
    }

    fn chunk(&mut self, v: &Value, events: &mut Vec<Event>) {
        let Ok(v) = GenerateContentResponse::deserialize(v) else {
            return;
        };
        if v.error.present() {
            events.push(Event::Error);
            return;
        }
        let response_id = v.response_id.or_empty();
        let none = Candidate::default();
        let candidate = v.candidates().first().unwrap_or(&none);
        for p in candidate.parts() {
            self.part(p, response_id, events);
        }
        if let Some(m) = v.usage_metadata.object() {
            let u = m.to_usage();
            if self.last_usage != Some(u) {
                self.last_usage = Some(u);
                events.push(Event::Usage(u));
            }
        }
        let finish = match candidate.finish_reason() {
            Some(r) => Some(finish_from_wire(r, self.calls > 0)),
            None if v.blocked() => Some(FinishReason::ContentFilter),
            None => None,
        };
        if let Some(f) = finish {
            // A stream that broke before its end is not complete, whatever follows.
            self.complete = self.broken.is_none();
            events.push(Event::Finish(f));
        }
    }

    fn part(&mut self, p: &WirePart<'_>, response_id: &str, events: &mut Vec<Event>) {
        if let Some(call) = p.function_call.get() {
            let c = tool_call(call, p, response_id, self.calls);
            events.push(Event::ToolCallStart {
                index: self.calls,
                id: c.id,
                name: c.name,
                signature: c.signature,
            });
            events.push(Event::ToolCallArgs {
                index: self.calls,
                fragment: c.arguments,
            });
            self.calls += 1;
            return;
        }
        let Some(text) = p.text.as_str() else {
            return;
        };
        if p.thought.0 == Some(true) {
            if !text.is_empty() {
                events.push(Event::Thinking(text.to_string()));
            }
            if let Some(s) = signature_of(p) {
                events.push(Event::ThinkingSignature(s));
            }
        } else if !text.is_empty() {
            events.push(Event::Text(text.to_string()));
        }
    }
}

impl StreamDecoder for Decoder {
    fn feed(&mut self, chunk: &[u8], events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        self.sse.feed(chunk, &mut self.pending);
        self.decode(events);
        StreamBroken::check(self.broken)
    }

    fn flush(&mut self, events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        self.sse.flush(&mut self.pending);
        self.decode(events);
        StreamBroken::check(self.broken)
    }

    fn complete(&self) -> bool {
        self.complete
    }
}
