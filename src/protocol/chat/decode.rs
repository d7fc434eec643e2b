//! A chat upstream's stream → pivot events, for a client of another protocol.
//!
//! Chat streams a tool call as pieces keyed by `index`: the first piece normally holds
//! the id and the name, later ones only argument text. Compatible servers vary (the
//! name a piece later, `index` left out, usage on every chunk), so a call opens once its
//! name is known, its earlier argument text is held until then, and usage is reported
//! only when it changes.

use super::response::{parse_finish, synth_call_id};
use super::wire::answer::{reasoning, Chunk, ChunkChoice, Content, ToolCallDelta};
use crate::protocol::ir::{Event, StreamBroken, StreamDecoder};
use crate::protocol::sse::{self, Fault};
use crate::protocol::translate::decode_view;
use crate::protocol::Usage;
use serde_json::Value;

pub fn decoder() -> Box<dyn StreamDecoder> {
    Box::new(Decoder::default())
}

#[derive(Default)]
struct Decoder {
    sse: sse::Decoder,
    pending: Vec<sse::Event>,
    calls: Vec<Call>,
    /// The answer's `id` and `created`, the seed of ids for calls that come without one.
    answer: Option<(Value, Value)>,
    usage: Option<Usage>,
    done: bool,
    /// The first event that could not be read.
    broken: Option<Fault>,
}

struct Call {
    /// The upstream's `index` for the call.
    key: u64,
    id: Option<String>,
    name: String,
    /// Argument text that came before the name.
    held_args: String,
    started: bool,
}

impl Decoder {
    fn drain(&mut self, events: &mut Vec<Event>) {
        let mut pending = std::mem::take(&mut self.pending);
        for ev in pending.drain(..) {
            if self.done {
                // Nothing after the end marker means anything.
                continue;
            }
            if ev.fault.is_none() && ev.data.trim() == "[DONE]" {
                if self.broken.is_none() {
                    self.open_all(events);
                }
                self.done = true;
                continue;
            }
            let mut broken = self.broken;
            decode_view(&ev, &mut broken, events, |c: Chunk<'_>, out| {
                self.chunk(c, out)
            });
            self.broken = broken;
        }
        // Kept for the next read.
        self.pending = pending;
    }

    fn chunk(&mut self, chunk: Chunk<'_>, events: &mut Vec<Event>) {
        if chunk.error.set() {
            events.push(Event::Error);
            return;
        }
        if self.answer.is_none() {
            self.answer = Some((chunk.id, chunk.created));
        }
        // Only the first choice is followed: the client asked for one.
        let choice = chunk.choices.items().iter().find(|c| c.index.get() == 0);
        if let Some(choice) = choice {
            self.choice(choice, events);
        }
        if let Some(u) = chunk.usage.object() {
            let u = u.to_usage();
            if self.usage != Some(u) {
                self.usage = Some(u);
                events.push(Event::Usage(u));
            }
        }
    }

    fn choice(&mut self, choice: &ChunkChoice<'_>, events: &mut Vec<Event>) {
        if let Some(delta) = choice.delta.object() {
            if let Some(r) = reasoning(&delta.reasoning_content, &delta.reasoning) {
                if !r.is_empty() {
                    events.push(Event::Thinking(r.to_string()));
                }
            }
            let text = match &delta.content {
                Content::Text(t) => Some(t.as_ref()),
                _ => None,
            };
            for t in [text, delta.refusal.as_str()].into_iter().flatten() {
                if !t.is_empty() {
                    events.push(Event::Text(t.to_string()));
                }
            }
            // Some compatible servers stream text parts instead of a string.
            if let Content::Parts(parts) = &delta.content {
                for p in parts.iter().filter(|p| p.kind.as_str() == Some("text")) {
                    if let Some(t) = p.text.as_str().filter(|t| !t.is_empty()) {
                        events.push(Event::Text(t.to_string()));
                    }
                }
            }
            for c in delta.tool_calls.items() {
                self.tool_call_piece(c, events);
            }
        }
        if let Some(reason) = choice.finish_reason.as_str() {
            self.open_all(events);
            events.push(Event::Finish(parse_finish(reason)));
        }
    }

    fn tool_call_piece(&mut self, c: &ToolCallDelta<'_>, events: &mut Vec<Event>) {
        let id = c.id.as_str().filter(|s| !s.is_empty());
        let key = match c.index.0 {
            Some(k) => k,
            // No index: a new id opens a new call, otherwise the piece continues the last.
            None => match id.and_then(|id| self.calls.iter().find(|k| k.id.as_deref() == Some(id)))
            {
                Some(known) => known.key,
                None if id.is_some() || self.calls.is_empty() => {
                    self.calls.iter().map(|k| k.key + 1).max().unwrap_or(0)
                }
                None => self.calls.last().map(|k| k.key).unwrap_or(0),
            },
        };
        let at = match self.calls.iter().position(|k| k.key == key) {
            Some(at) => at,
            None => {
                self.calls.push(Call {
                    key,
                    id: None,
                    name: String::new(),
                    held_args: String::new(),
                    started: false,
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[at];
        if call.id.is_none() {
            call.id = id.map(str::to_string);
        }
        let function = c.function.object();
        // Some servers repeat the whole name on every piece: take it once.
        if let Some(name) = function
            .and_then(|f| f.name.as_str())
            .filter(|n| !n.is_empty())
        {
            if call.name.is_empty() {
                call.name = name.to_string();
            }
        }
        let args = function
            .and_then(|f| f.arguments.as_str())
            .unwrap_or_default();
        if call.started {
            if !args.is_empty() {
                events.push(Event::ToolCallArgs {
                    index: at,
                    fragment: args.to_string(),
                });
            }
            return;
        }
        call.held_args.push_str(args);
        if !call.name.is_empty() {
            self.open(at, events);
        }
    }

    fn open(&mut self, at: usize, events: &mut Vec<Event>) {
        let (answer_id, created) = match &self.answer {
            Some((id, created)) => (id, created),
            None => (&Value::Null, &Value::Null),
        };
        let Some(call) = self.calls.get_mut(at) else {
            return;
        };
        if call.started {
            return;
        }
        call.started = true;
        let id = match &call.id {
            Some(id) => id.clone(),
            None => synth_call_id(answer_id, created, at, &call.name),
        };
        events.push(Event::ToolCallStart {
            index: at,
            id,
            name: call.name.clone(),
            signature: None,
        });
        if !call.held_args.is_empty() {
            events.push(Event::ToolCallArgs {
                index: at,
                fragment: std::mem::take(&mut call.held_args),
            });
        }
    }

    /// Opens calls still waiting for a name: the answer is ending, and a call shown
    /// without a name beats a call lost.
    fn open_all(&mut self, events: &mut Vec<Event>) {
        for at in 0..self.calls.len() {
            self.open(at, events);
        }
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
        if !self.done && self.broken.is_none() {
            self.open_all(events);
        }
        StreamBroken::check(self.broken)
    }

    fn complete(&self) -> bool {
        self.done && self.broken.is_none()
    }
}

#[cfg(test)]
mod tests;
