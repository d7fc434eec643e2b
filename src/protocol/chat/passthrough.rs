//! Chat client, chat upstream: the stream's events pass through with the client's model
//! name; the usage-only chunk is dropped unless the client asked for it. Usage is read
//! on the way, after a fault too, for the bill.

use super::response::reasoning_text;
use super::{error_event, usage_of};
use crate::protocol::sse::{Decoder, Event};
use crate::protocol::{StreamContext, StreamTranslator, Usage};
use serde_json::Value;

pub struct Passthrough {
    ctx: StreamContext,
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
            if ev.fault.is_none() && ev.data.trim() == "[DONE]" {
                if !self.failed {
                    out.extend_from_slice(b"data: [DONE]\n\n");
                }
                self.done = true;
                continue;
            }
            let mut v = match ev.json() {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                // Half an event, bytes that are not text: the answer has a hole, so it
                // ends here rather than go on as if complete.
                Err(fault) => {
                    self.fail(fault.message(), out);
                    continue;
                }
            };
            if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                self.usage = usage_of(u);
            }
            if self.failed {
                continue;
            }
            if v.get("error").is_some_and(Value::is_object) {
                // spec 7.2: the provider's own words never reach the client.
                self.fail("The upstream provider reported an error mid-stream.", out);
                continue;
            }
            self.delivered += content_bytes(&v);
            let usage_only = v
                .get("choices")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
                && v.get("usage").is_some_and(Value::is_object);
            if usage_only && !self.ctx.client_wants_usage {
                continue;
            }
            if let Some(obj) = v.as_object_mut() {
                if !self.ctx.client_wants_usage {
                    obj.remove("usage");
                }
                if obj.get("model").and_then(Value::as_str) != Some(self.ctx.client_model.as_str())
                    && obj.contains_key("model")
                {
                    obj.insert("model".into(), Value::String(self.ctx.client_model.clone()));
                }
            }
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(v.to_string().as_bytes());
            out.extend_from_slice(b"\n\n");
        }
    }
}

/// The generated text of a chunk, every choice: content, refusal, reasoning and tool
/// call arguments.
fn content_bytes(chunk: &Value) -> u64 {
    let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
        return 0;
    };
    let len = |v: &Value| v.as_str().map_or(0, str::len) as u64;
    let mut n = 0;
    for c in choices {
        let d = &c["delta"];
        n += len(&d["content"]) + len(&d["refusal"]);
        n += reasoning_text(d).map_or(0, str::len) as u64;
        if let Some(parts) = d["content"].as_array() {
            n += parts.iter().map(|p| len(&p["text"])).sum::<u64>();
        }
        if let Some(calls) = d["tool_calls"].as_array() {
            n += calls
                .iter()
                .map(|t| len(&t["function"]["arguments"]))
                .sum::<u64>();
        }
        n += len(&d["function_call"]["arguments"]);
    }
    n
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
    fn a_stream_without_done_ends_with_an_error_event() {
        let cut = &STREAM[..STREAM.find("data: [DONE]").unwrap()];
        let (out, usage) = run(false, 5, cut);
        assert!(out.trim_end().ends_with("}}"), "{out}");
        assert!(out.contains("\"type\":\"upstream_error\""));
        assert!(out.contains("request id: rid"));
        assert_eq!(usage.output_tokens, 1);
    }
}
