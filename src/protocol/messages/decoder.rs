//! A messages upstream's event stream → neutral events. Block indices are the
//! upstream's; tool calls are renumbered from 0 in the order they start, as
//! [`Event::ToolCallStart`] counts them.

use super::wire::answer::{ContentBlock, Delta, StreamEvent};
use super::{finish_reason, WireUsage};
use crate::protocol::ir::{Event, StreamBroken, StreamDecoder};
use crate::protocol::sse::{self, Fault};
use crate::protocol::translate::decode_view;
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
        let mut pending = std::mem::take(&mut self.pending);
        for ev in pending.drain(..) {
            let mut broken = self.broken;
            decode_view(&ev, &mut broken, events, |e: StreamEvent<'_>, out| {
                // The data's own `type` is authoritative; some relays drop the event line.
                let kind = e.kind.as_str().or(ev.event.as_deref()).unwrap_or("");
                self.one(kind, &e, out);
            });
            self.broken = broken;
        }
        // Kept for the next read.
        self.pending = pending;
    }

    fn one(&mut self, kind: &str, e: &StreamEvent<'_>, events: &mut Vec<Event>) {
        match kind {
            "message_start" => {
                if let Some(u) = e.message.object().and_then(|m| m.usage.object()) {
                    self.usage.merge(u);
                }
                events.push(Event::Usage(self.usage.to_usage()));
            }
            "content_block_start" => self.block_start(e, events),
            "content_block_delta" => self.block_delta(e, events),
            "message_delta" => {
                if let Some(u) = e.usage.object() {
                    self.usage.merge(u);
                }
                events.push(Event::Usage(self.usage.to_usage()));
                let delta = e.delta.object();
                if let Some(reason) = delta.and_then(|d| d.stop_reason.as_str()) {
                    let sequence = delta.and_then(|d| d.stop_sequence.as_str());
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

    fn block_start(&mut self, e: &StreamEvent<'_>, events: &mut Vec<Event>) {
        let Some(index) = e.index.0 else {
            return;
        };
        let none = ContentBlock::default();
        let b = e.content_block.object().unwrap_or(&none);
        let block = match b.kind.or_empty() {
            "text" => {
                // Text in the start event itself must not be lost.
                push_nonempty(events, b.text.or_empty(), Event::Text);
                Block::Text
            }
            "thinking" => {
                push_nonempty(events, b.thinking.or_empty(), Event::Thinking);
                push_nonempty(events, b.signature.or_empty(), Event::ThinkingSignature);
                Block::Thinking
            }
            "redacted_thinking" => {
                events.push(Event::RedactedThinking(b.data.or_empty().to_string()));
                Block::Other
            }
            "tool_use" => {
                let call = self.next_tool;
                self.next_tool += 1;
                events.push(Event::ToolCallStart {
                    index: call,
                    id: b.id.or_empty().to_string(),
                    name: b.name.or_empty().to_string(),
                    signature: None,
                });
                // Normally `{}` with the arguments following as deltas; arguments
                // given whole here are passed on as one fragment.
                if b.input.as_object().is_some_and(|o| !o.is_empty()) {
                    events.push(Event::ToolCallArgs {
                        index: call,
                        fragment: b.input.to_string(),
                    });
                }
                Block::Tool(call)
            }
            _ => Block::Other,
        };
        self.blocks.insert(index, block);
    }

    fn block_delta(&mut self, e: &StreamEvent<'_>, events: &mut Vec<Event>) {
        let block = e.index.0.and_then(|i| self.blocks.get(&i)).copied();
        let none = Delta::default();
        let d = e.delta.object().unwrap_or(&none);
        match (d.kind.or_empty(), block) {
            // Text and thinking need no block to be understood: kept even when the
            // upstream skipped the start event.
            ("text_delta", _) => push_nonempty(events, d.text.or_empty(), Event::Text),
            ("thinking_delta", _) => push_nonempty(events, d.thinking.or_empty(), Event::Thinking),
            ("signature_delta", _) => {
                push_nonempty(events, d.signature.or_empty(), Event::ThinkingSignature)
            }
            ("input_json_delta", Some(Block::Tool(index))) => {
                let fragment = d.partial_json.or_empty();
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
