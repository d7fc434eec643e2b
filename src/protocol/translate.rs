//! A cross-protocol stream: the upstream's decoder and the client's encoder, joined by
//! [`ir::Event`]s. This is where a stream's end is decided: a clean end only when the
//! upstream's own end marker arrived; anything else (a cut, an event that cannot be read,
//! an error event) closes the client's stream with its protocol's terminal error, never a
//! hang, and never a truncated answer marked complete.

use super::ir::{Event, StreamBroken, StreamDecoder, StreamEncoder};
use super::sse::{self, Fault};
use super::{StreamTranslator, Usage};

pub struct Translated {
    decoder: Box<dyn StreamDecoder>,
    encoder: Box<dyn StreamEncoder>,
    events: Vec<Event>,
    usage: Usage,
    request_id: String,
    ended: bool,
    delivered: u64,
}

impl Translated {
    pub fn new(
        decoder: Box<dyn StreamDecoder>,
        encoder: Box<dyn StreamEncoder>,
        request_id: String,
    ) -> Translated {
        Translated {
            decoder,
            encoder,
            events: Vec::new(),
            usage: Usage::default(),
            request_id,
            ended: false,
            delivered: 0,
        }
    }

    fn end_with_error(&mut self, what: &str, out: &mut Vec<u8>) {
        if !self.ended {
            self.ended = true;
            let message = format!("{what} (request id: {})", self.request_id);
            self.encoder.finish(Some(&message), out);
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>) {
        // Taken out and put back: the buffer is kept across reads, not grown anew.
        let mut events = std::mem::take(&mut self.events);
        for ev in events.drain(..) {
            if let Event::Usage(u) = &ev {
                self.usage = *u;
            }
            if self.ended {
                // Usage after the client's stream closed still counts for billing.
                continue;
            }
            let ends = match &ev {
                Event::Error => Some("The upstream provider reported an error mid-stream."),
                Event::Broken(fault) => Some(fault.message()),
                _ => None,
            };
            if let Some(what) = ends {
                self.end_with_error(what, out);
                continue;
            }
            if let Event::Text(t) | Event::Thinking(t) | Event::ToolCallArgs { fragment: t, .. } =
                &ev
            {
                self.delivered += t.len() as u64;
            }
            self.encoder.event(&ev, out);
        }
        self.events = events;
    }
}

impl StreamTranslator for Translated {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let fed = self.decoder.feed(chunk, &mut self.events);
        self.emit(out);
        if let Err(StreamBroken(fault)) = fed {
            self.end_with_error(fault.message(), out);
        }
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        let flushed = self.decoder.flush(&mut self.events);
        self.emit(out);
        if let Err(StreamBroken(fault)) = flushed {
            self.end_with_error(fault.message(), out);
        }
        if self.ended {
            return;
        }
        match error {
            Some(message) => {
                self.ended = true;
                self.encoder.finish(Some(message), out);
            }
            None if self.decoder.complete() => {
                self.ended = true;
                self.encoder.finish(None, out);
            }
            None => self.end_with_error(
                "The upstream provider ended the stream before it was complete.",
                out,
            ),
        }
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn delivered_bytes(&self) -> u64 {
        self.delivered
    }
}

/// As [`super::ir::decode_json`], with the event's data read straight into `T` (a typed
/// view of the few members the decoder needs, borrowing its strings) instead of a tree
/// first: the same events, the same faults. Data that is JSON yet not what `T` reads is
/// skipped, as a view that cannot read a parsed tree is.
pub(crate) fn decode_view<'a, T, D>(
    ev: &'a sse::Event,
    broken: &mut Option<Fault>,
    events: &mut Vec<Event>,
    mut decode: D,
) where
    T: serde::Deserialize<'a>,
    D: FnMut(T, &mut Vec<Event>),
{
    let fault = match ev.fault {
        Some(f) => Some(f),
        None if ev.data.trim().is_empty() => return,
        None => match serde_json::from_str::<T>(&ev.data) {
            Ok(view) => {
                if broken.is_none() {
                    decode(view, events);
                } else {
                    let mut later = Vec::new();
                    decode(view, &mut later);
                    events.extend(later.into_iter().filter(|e| matches!(e, Event::Usage(_))));
                }
                return;
            }
            Err(_) if serde_json::from_str::<serde::de::IgnoredAny>(&ev.data).is_ok() => return,
            Err(e) => {
                tracing::debug!(error = %e, fault = ?ev.unreadable(), "upstream event data is not JSON");
                Some(ev.unreadable())
            }
        },
    };
    if let Some(f) = fault {
        if broken.is_none() {
            *broken = Some(f);
            events.push(Event::Broken(f));
        }
    }
}
