//! Chat client, chat upstream: the stream's events pass through with the client's model
//! name; the usage-only chunk is dropped unless the client asked for it. Usage is read
//! on the way, after a fault too, for the bill; the usage the client sees carries its
//! cost when the stream shows one.

use super::delivered::choices_bytes;
use super::{error_event, usage_raw};
use crate::protocol::shallow::Shallow;
use crate::protocol::sse::{Decoder, Event};
use crate::protocol::{
    answer_shallow, cost, StreamContext, StreamTranslator, TranslateError, Usage,
};
use serde_json::value::RawValue;
use serde_json::Value;

pub struct Passthrough {
    ctx: StreamContext,
    /// The client's model name as JSON text, written into every chunk that names one.
    model: String,
    decoder: Decoder,
    events: Vec<Event>,
    usage: Usage,
    delivered: u64,
    done: bool,
    failed: bool,
}

impl Passthrough {
    pub fn new(ctx: StreamContext) -> Passthrough {
        Passthrough {
            model: Value::String(ctx.client_model.clone()).to_string(),
            ctx,
            decoder: Decoder::new(),
            events: Vec::new(),
            usage: Usage::default(),
            delivered: 0,
            done: false,
            failed: false,
        }
    }

    /// Ends the client's stream with the protocol's error event, once.
    fn fail(&mut self, what: &str, out: &mut Vec<u8>) {
        if !self.failed && !self.done {
            self.failed = true;
            out.extend_from_slice(&error_event(&format!(
                "{what} (request id: {})",
                self.ctx.request_id
            )));
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>) {
        for ev in std::mem::take(&mut self.events) {
            if self.done {
                // Nothing after the end marker means anything.
                continue;
            }
            if let Some(fault) = ev.fault {
                // Half an event, bytes that are not text: the answer has a hole, so it
                // ends here rather than go on as if complete.
                self.fail(fault.message(), out);
                continue;
            }
            let data = ev.data.trim();
            if data == "[DONE]" {
                if !self.failed {
                    out.extend_from_slice(b"data: [DONE]\n\n");
                }
                self.done = true;
                continue;
            }
            if data.is_empty() {
                continue;
            }
            // Read one level deep: the chunk goes out as the upstream wrote it, with only
            // `model` rewritten and `usage` left out when the client did not ask for it.
            let top = match answer_shallow(data.as_bytes()) {
                Ok(top) => top,
                Err(TranslateError::Shape(_)) => {
                    // JSON, not an object: nothing in it to read or change.
                    if !self.failed {
                        self.write(data.as_bytes(), out);
                    }
                    continue;
                }
                Err(_) => {
                    self.fail(ev.unreadable().message(), out);
                    continue;
                }
            };
            let usage = top.get("usage").filter(|u| Shallow::is_object(u));
            if let Some(u) = usage {
                self.usage = usage_raw(u);
            }
            if self.failed {
                continue;
            }
            if top.get("error").is_some_and(Shallow::is_object) {
                // spec 7.2: the provider's own words never reach the client.
                self.fail("The upstream provider reported an error mid-stream.", out);
                continue;
            }
            let choices = top.get("choices");
            self.delivered += choices.map_or(0, choices_bytes);
            let usage_only = choices.is_some_and(is_empty_array) && usage.is_some();
            if usage_only && !self.ctx.client_wants_usage {
                continue;
            }
            let mut set: Vec<(&str, &str)> = Vec::with_capacity(2);
            if top.contains("model") {
                set.push(("model", &self.model));
            }
            let drop: &[&str] = if self.ctx.client_wants_usage {
                &[]
            } else {
                &["usage"]
            };
            // The usage the client sees carries its cost (the figures of this chunk).
            let priced = match usage {
                Some(u) if self.ctx.client_wants_usage => self
                    .ctx
                    .cost_of(&self.usage)
                    .and_then(|c| cost::add_raw(u, &c)),
                _ => None,
            };
            if let Some(u) = &priced {
                set.push(("usage", u));
            }
            let chunk = top.rewrite(&set, drop, 0);
            self.write(&chunk, out);
        }
    }

    fn write(&self, data: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\n\n");
    }
}

/// `[]`, with any whitespace inside.
fn is_empty_array(v: &RawValue) -> bool {
    v.get()
        .strip_prefix('[')
        .is_some_and(|rest| rest.trim_start().starts_with(']'))
}

impl StreamTranslator for Passthrough {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.decoder.feed(chunk, &mut self.events);
        self.emit(out);
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        self.decoder.flush(&mut self.events);
        self.emit(out);
        if self.done || self.failed {
            return;
        }
        let message = error.map(str::to_string).unwrap_or_else(|| {
            format!(
                "The upstream provider ended the stream before it was complete. (request id: {})",
                self.ctx.request_id
            )
        });
        out.extend_from_slice(&error_event(&message));
        self.failed = true;
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn delivered_bytes(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(wants: bool) -> StreamContext {
        StreamContext {
            client_model: "gpt-4o".into(),
            request_id: "rid".into(),
            created: 0,
            client_wants_usage: wants,
            client_sse: true,
            charge: None,
        }
    }

    const STREAM: &str = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"model\":\"gpt-4o-2024-08-06\"}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":2}},\"model\":\"gpt-4o-2024-08-06\"}\n\n",
        "data: [DONE]\n\n"
    );

    fn run(wants: bool, step: usize, input: &str) -> (String, Usage) {
        let mut t = Passthrough::new(ctx(wants));
        let mut out = Vec::new();
        for p in input.as_bytes().chunks(step) {
            t.feed(p, &mut out);
        }
        t.finish(None, &mut out);
        (String::from_utf8(out).unwrap(), t.usage())
    }

    #[test]
    fn drops_usage_chunk_unless_asked_and_rewrites_model() {
        for step in [1, 7, STREAM.len()] {
            let (out, usage) = run(false, step, STREAM);
            assert!(!out.contains("usage"), "{out}");
            assert!(!out.contains("2024-08-06"));
            assert!(out.ends_with("data: [DONE]\n\n"));
            assert_eq!(usage.input_tokens, 3);
            assert_eq!(usage.cached_input_tokens, 2);
            let (out, _) = run(true, step, STREAM);
            assert!(out.contains("\"usage\""));
        }
    }

    #[test]
    fn a_chunk_leaves_as_written_but_for_model_and_usage() {
        let input = concat!(
            "data: {\"id\": \"c1\", \"model\": \"up\", \"choices\": [{\"delta\": {\"content\": \"caf\\u00e9\"}}], \"usage\": {\"prompt_tokens\": 4}}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
            "data: 7\n\n",
            "data: [DONE]\n\n"
        );
        let (out, usage) = run(false, 3, input);
        assert_eq!(
            out,
            concat!(
                "data: {\"id\":\"c1\",\"model\":\"gpt-4o\",\"choices\":[{\"delta\": {\"content\": \"caf\\u00e9\"}}]}\n\n",
                "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
                "data: 7\n\n",
                "data: [DONE]\n\n"
            )
        );
        assert_eq!(usage.input_tokens, 4);
        let mut t = Passthrough::new(ctx(false));
        let mut out = Vec::new();
        t.feed(input.as_bytes(), &mut out);
        // "café" and "x": the bytes of text delivered.
        assert_eq!(t.delivered_bytes(), 6);
        let (out, _) = run(false, 4, "data: {\"choices\": [\n\n");
        assert!(out.contains("could not be read"), "{out}");
    }

    #[test]
    fn a_stream_without_done_ends_with_an_error_event() {
        let cut = &STREAM[..STREAM.find("data: [DONE]").unwrap()];
        let (out, usage) = run(false, 5, cut);
        assert!(out.trim_end().ends_with("}}"), "{out}");
        assert!(out.contains("\"type\":\"upstream_error\""));
        assert!(out.contains("request id: rid"));
        assert_eq!(usage.output_tokens, 1);
    }
}
