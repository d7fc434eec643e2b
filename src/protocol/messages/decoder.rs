//! A messages upstream's event stream → neutral events. Block indices are the
//! upstream's; tool calls are renumbered from 0 in the order they start, as
//! [`Event::ToolCallStart`] counts them.

use super::{finish_reason, WireUsage};
use crate::protocol::ir::{decode_json, Event, StreamBroken, StreamDecoder};
use crate::protocol::sse::{self, Fault};
use serde_json::Value;
use std::collections::BTreeMap;

pub struct Decoder {
    sse: sse::Decoder,
    pending: Vec<sse::Event>,
    /// Upstream block index → what the block holds.
    blocks: BTreeMap<u64, Block>,
    next_tool: usize,
    usage: WireUsage,
    complete: bool,
    /// The first event that could not be read.
    broken: Option<Fault>,
}

#[derive(Debug, Clone, Copy)]
enum Block {
    Text,
    Thinking,
    Tool(usize),
    /// Redacted thinking (whole in its start event) and server-side blocks.
    Other,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            sse: sse::Decoder::new(),
            pending: Vec::new(),
            blocks: BTreeMap::new(),
            next_tool: 0,
            usage: WireUsage::default(),
            complete: false,
            broken: None,
        }
    }

    fn drain(&mut self, events: &mut Vec<Event>) {
        for ev in std::mem::take(&mut self.pending) {
            let mut broken = self.broken;
            decode_json(&ev, &mut broken, events, |v, out| {
                // The data's own `type` is authoritative; some relays drop the event line.
                let kind = v
                    .get("type")
                    .and_then(Value::as_str)
                    .or(ev.event.as_deref())
                    .unwrap_or("");
                self.one(kind, v, out);
            });
            self.broken = broken;
        }
    }

    fn one(&mut self, kind: &str, v: &Value, events: &mut Vec<Event>) {
        match kind {
            "message_start" => {
                self.usage.merge(&v["message"]["usage"]);
                events.push(Event::Usage(self.usage.to_usage()));
            }
            "content_block_start" => self.block_start(v, events),
            "content_block_delta" => self.block_delta(v, events),
            "message_delta" => {
                self.usage.merge(&v["usage"]);
                events.push(Event::Usage(self.usage.to_usage()));
                if let Some(reason) = v["delta"]["stop_reason"].as_str() {
                    let sequence = v["delta"]["stop_sequence"].as_str();
                    events.push(Event::Finish(finish_reason(reason, sequence)));
                }
            }
            // A stream that broke before its end is not complete, whatever follows.
            "message_stop" => self.complete = self.broken.is_none(),
            "error" => events.push(Event::Error),
            // `ping`, `content_block_stop` and event types added later carry nothing
            // the neutral stream needs.
            _ => {}
        }
    }

    fn block_start(&mut self, v: &Value, events: &mut Vec<Event>) {
        let Some(index) = v["index"].as_u64() else {
            return;
        };
        let b = &v["content_block"];
        let str_of = |k: &str| b[k].as_str().unwrap_or("");
        let block = match b["type"].as_str().unwrap_or("") {
            "text" => {
                // Text in the start event itself must not be lost.
                push_nonempty(events, str_of("text"), Event::Text);
                Block::Text
            }
            "thinking" => {
                push_nonempty(events, str_of("thinking"), Event::Thinking);
                push_nonempty(events, str_of("signature"), Event::ThinkingSignature);
                Block::Thinking
            }
            "redacted_thinking" => {
                events.push(Event::RedactedThinking(str_of("data").to_string()));
                Block::Other
            }
            "tool_use" => {
                let call = self.next_tool;
                self.next_tool += 1;
                events.push(Event::ToolCallStart {
                    index: call,
                    id: str_of("id").to_string(),
                    name: str_of("name").to_string(),
                    signature: None,
                });
                // Normally `{}` with the arguments following as deltas; arguments
                // given whole here are passed on as one fragment.
                if b["input"].as_object().is_some_and(|o| !o.is_empty()) {
                    events.push(Event::ToolCallArgs {
                        index: call,
                        fragment: b["input"].to_string(),
                    });
                }
                Block::Tool(call)
            }
            _ => Block::Other,
        };
        self.blocks.insert(index, block);
    }

    fn block_delta(&mut self, v: &Value, events: &mut Vec<Event>) {
        let block = v["index"]
            .as_u64()
            .and_then(|i| self.blocks.get(&i))
            .copied();
        let d = &v["delta"];
        let str_of = |k: &str| d[k].as_str().unwrap_or("");
        match (d["type"].as_str().unwrap_or(""), block) {
            // Text and thinking need no block to be understood: kept even when the
            // upstream skipped the start event.
            ("text_delta", _) => push_nonempty(events, str_of("text"), Event::Text),
            ("thinking_delta", _) => push_nonempty(events, str_of("thinking"), Event::Thinking),
            ("signature_delta", _) => {
                push_nonempty(events, str_of("signature"), Event::ThinkingSignature)
            }
            ("input_json_delta", Some(Block::Tool(index))) => {
                let fragment = str_of("partial_json");
                if !fragment.is_empty() {
                    events.push(Event::ToolCallArgs {
                        index,
                        fragment: fragment.to_string(),
                    });
                }
            }
            // Server tool input, citations: not part of the neutral answer.
            _ => {}
        }
    }
}

fn push_nonempty(events: &mut Vec<Event>, s: &str, make: fn(String) -> Event) {
    if !s.is_empty() {
        events.push(make(s.to_string()));
    }
}

impl StreamDecoder for Decoder {
    fn feed(&mut self, chunk: &[u8], events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        self.sse.feed(chunk, &mut self.pending);
        self.drain(events);
        StreamBroken::check(self.broken)
    }

    fn flush(&mut self, events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        self.sse.flush(&mut self.pending);
        self.drain(events);
        StreamBroken::check(self.broken)
    }

    fn complete(&self) -> bool {
        self.complete
    }
}

#[cfg(test)]
#[path = "decoder_tests.rs"]
mod tests;
