//! A cross-protocol stream: the upstream's decoder and the client's encoder, joined by
//! [`ir::Event`]s. This is where a stream's end is decided: a clean end only when the
//! upstream's own end marker arrived; anything else (a cut, an oversized event, an error
//! event) closes the client's stream with its protocol's terminal error, never a hang.

use super::ir::{Event, StreamDecoder, StreamEncoder};
use super::{StreamTranslator, Usage};

pub struct Translated {
    decoder: Box<dyn StreamDecoder>,
    encoder: Box<dyn StreamEncoder>,
    events: Vec<Event>,
    usage: Usage,
    request_id: String,
    ended: bool,
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
        for ev in std::mem::take(&mut self.events) {
            if let Event::Usage(u) = &ev {
                self.usage = *u;
            }
            if self.ended {
                // Usage after the client's stream closed still counts for billing.
                continue;
            }
            if ev == Event::Error {
                self.end_with_error("The upstream provider reported an error mid-stream.", out);
                continue;
            }
            self.encoder.event(&ev, out);
        }
    }
}

impl StreamTranslator for Translated {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let broken = self.decoder.feed(chunk, &mut self.events).is_err();
        self.emit(out);
        if broken {
            self.end_with_error("The upstream sent an oversized event.", out);
        }
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        self.decoder.flush(&mut self.events);
        self.emit(out);
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
}
