//! Chat client, chat upstream: the stream's events pass through with the client's model
//! name; the usage-only chunk is dropped unless the client asked for it. Usage is read
//! on the way, after a fault too, for the bill; the usage the client sees carries its
//! cost when the stream shows one.

use super::delivered::choices_bytes;
use super::scan::{scan, Member, Plain};
use super::usage::usage_text;
use super::{error_event, usage_raw};
use crate::protocol::shallow::Shallow;
use crate::protocol::sse::{self, Decoder, Event, Fault};
use crate::protocol::{
    answer_shallow, cost, StreamContext, StreamTranslator, TranslateError, Usage,
};
use serde_json::value::RawValue;
use serde_json::Value;
use std::ops::Range;

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
        let mut events = std::mem::take(&mut self.events);
        for ev in events.drain(..) {
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
            self.event(&ev.data, ev.cut, out);
        }
        // Kept for the next read: no allocation per read.
        self.events = events;
    }

    /// One event's data (`cut`: the stream ended inside it).
    fn event(&mut self, data: &str, cut: bool, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        let data = data.trim();
        if data == "[DONE]" {
            if !self.failed {
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            self.done = true;
            return;
        }
        if data.is_empty() {
            return;
        }
        match scan(data) {
            Some(plain) => self.plain(data, &plain, out),
            None => self.general(data, cut, out),
        }
    }

    /// A plain chunk (see [`scan`]): written as it came, with the model name spliced in
    /// and the usage member dropped or priced, as [`Passthrough::general`] would write it.
    fn plain(&mut self, data: &str, p: &Plain, out: &mut Vec<u8>) {
        let text = |m: &Member| value_of(data, m);
        let usage = p.usage.as_ref().filter(|u| text(u).starts_with('{'));
        if let Some(u) = usage {
            self.usage = usage_text(text(u));
        }
        if self.failed {
            return;
        }
        if p.error.as_ref().is_some_and(|e| text(e).starts_with('{')) {
            // spec 7.2: the provider's own words never reach the client.
            self.fail("The upstream provider reported an error mid-stream.", out);
            return;
        }
        self.delivered += p.delivered;
        let usage_only =
            p.choices.as_ref().is_some_and(|c| is_empty_array(text(c))) && usage.is_some();
        let wants = self.ctx.client_wants_usage;
        if usage_only && !wants {
            return;
        }
        let priced = match usage {
            Some(u) if wants => self.priced(text(u)),
            _ => None,
        };
        // At most two edits, in the order they appear: the model's value, and the usage
        // member (dropped) or its value (priced).
        let mut edits: [Option<(Range<usize>, &str)>; 2] = [None, None];
        if let Some(m) = &p.model {
            edits[0] = Some((m.value.clone(), self.model.as_str()));
        }
        if let Some(u) = &p.usage {
            if !wants {
                edits[1] = Some((member_span(data, u), ""));
            } else if let Some(priced) = &priced {
                edits[1] = Some((u.value.clone(), priced.as_str()));
            }
        }
        let swapped = matches!(&edits, [Some(a), Some(b)] if b.0.start < a.0.start);
        if swapped {
            edits.swap(0, 1);
        }
        out.extend_from_slice(b"data: ");
        let mut at = 0;
        for (range, with) in edits.iter().flatten() {
            out.extend_from_slice(&data.as_bytes()[at..range.start]);
            out.extend_from_slice(with.as_bytes());
            at = range.end;
        }
        out.extend_from_slice(&data.as_bytes()[at..]);
        out.extend_from_slice(b"\n\n");
    }

    /// The usage the client sees, with its cost (the figures of this chunk).
    fn priced(&self, usage: &str) -> Option<String> {
        let raw = serde_json::from_str::<&RawValue>(usage).ok()?;
        self.ctx
            .cost_of(&self.usage)
            .and_then(|c| cost::add_raw(raw, &c))
    }

    /// Any other chunk, read one level deep: it goes out with its members as the
    /// upstream wrote them, with only `model` rewritten and `usage` left out when the
    /// client did not ask for it.
    fn general(&mut self, data: &str, cut: bool, out: &mut Vec<u8>) {
        let top = match answer_shallow(data.as_bytes()) {
            Ok(top) => top,
            Err(TranslateError::Shape(_)) => {
                // JSON, not an object: nothing in it to read or change.
                if !self.failed {
                    self.write(data.as_bytes(), out);
                }
                return;
            }
            Err(_) => {
                let fault = if cut { Fault::Cut } else { Fault::NotJson };
                self.fail(fault.message(), out);
                return;
            }
        };
        let usage = top.get("usage").filter(|u| Shallow::is_object(u));
        if let Some(u) = usage {
            self.usage = usage_raw(u);
        }
        if self.failed {
            return;
        }
        if top.get("error").is_some_and(Shallow::is_object) {
            // spec 7.2: the provider's own words never reach the client.
            self.fail("The upstream provider reported an error mid-stream.", out);
            return;
        }
        let choices = top.get("choices");
        self.delivered += choices.map_or(0, choices_bytes);
        let usage_only = choices.is_some_and(|c| is_empty_array(c.get())) && usage.is_some();
        if usage_only && !self.ctx.client_wants_usage {
            return;
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
        let priced = match usage {
            Some(u) if self.ctx.client_wants_usage => self.priced(u.get()),
            _ => None,
        };
        if let Some(u) = &priced {
            set.push(("usage", u));
        }
        let chunk = top.rewrite(&set, drop, 0);
        self.write(&chunk, out);
    }

    fn write(&self, data: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\n\n");
    }

    /// Reads a read's whole plain events straight from its bytes, while the decoder
    /// holds nothing; the rest goes through the decoder a line at a time until it
    /// holds nothing again. The events, and so the output, are the decoder's whatever
    /// the split: an event taken here is one the decoder would give as it is.
    fn take(&mut self, mut chunk: &[u8], out: &mut Vec<u8>) {
        while !chunk.is_empty() {
            if self.decoder.idle() {
                if let Some((data, used)) = sse::whole_data_event(chunk) {
                    self.event(data, false, out);
                    chunk = &chunk[used..];
                    continue;
                }
            }
            // Up to the next line end (or all of it): the decoder may be idle after it.
            let line = memchr::memchr(b'\n', chunk).map_or(chunk.len(), |i| i + 1);
            self.decoder.feed(&chunk[..line], &mut self.events);
            self.emit(out);
            chunk = &chunk[line..];
        }
    }
}

/// A member's value's text.
fn value_of<'d>(data: &'d str, m: &Member) -> &'d str {
    &data[m.value.clone()]
}

/// The span of a member with one of the commas around it: what removing it takes to
/// leave the object as if it had never had it.
fn member_span(data: &str, m: &Member) -> Range<usize> {
    let b = data.as_bytes();
    if b[m.start - 1] == b',' {
        m.start - 1..m.value.end
    } else if b.get(m.value.end) == Some(&b',') {
        m.start..m.value.end + 1
    } else {
        m.start..m.value.end
    }
}

/// `[]`, with any whitespace inside.
fn is_empty_array(v: &str) -> bool {
    v.strip_prefix('[')
        .is_some_and(|rest| rest.trim_start().starts_with(']'))
}

impl StreamTranslator for Passthrough {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.take(chunk, out);
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

    /// A plain chunk comes out of the one-pass read exactly as the general read writes
    /// it: the same bytes, usage, count and state, asked for usage or not, priced or not.
    #[test]
    fn plain_chunks_go_out_as_the_general_read_writes_them() {
        let chunks = [
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Q"}"#,
            r#"{"usage":null,"id":"c","model":"up","choices":[{"delta":{"content":"a\nb"}}]}"#,
            r#"{"id":"c","choices":[{"delta":{"content":"x"}}],"usage":null}"#,
            r#"{"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}},"model":"m"}"#,
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"cost_usd":7},"model":"m"}"#,
            r#"{"choices":[],"usage":null}"#,
            r#"{"error":{"message":"secret words"},"model":"m"}"#,
            r#"{"error":"a string is not an error object","model":"m"}"#,
            r#"{"model":"m"}"#,
            r#"{}"#,
        ];
        for wants in [false, true] {
            for priced in [false, true] {
                for data in chunks {
                    assert!(scan(data).is_some(), "{data}");
                    let mut c = ctx(wants);
                    if priced {
                        c.charge = Some(crate::protocol::cost::test_charge());
                    }
                    let (mut fast, mut general) =
                        (Passthrough::new(c.clone()), Passthrough::new(c));
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    // Twice: the second sees the state the first left.
                    for _ in 0..2 {
                        fast.event(data, false, &mut a);
                        general.general(data, false, &mut b);
                    }
                    let show = |v: &[u8]| String::from_utf8(v.to_vec()).unwrap();
                    assert_eq!(show(&a), show(&b), "{data} wants {wants} priced {priced}");
                    assert_eq!(fast.usage, general.usage, "{data}");
                    assert_eq!(fast.delivered, general.delivered, "{data}");
                    assert_eq!(fast.failed, general.failed, "{data}");
                }
            }
        }
    }

    /// Whole events taken straight from a read and events put together by the decoder
    /// give the same stream, however the reads fall.
    #[test]
    fn any_split_gives_the_same_stream() {
        let input = concat!(
            "data: {\"id\":\"c\",\"model\":\"up\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
            ": keep-alive\n\n",
            "data: {\"id\": \"c\", \"model\": \"up\", \"choices\": [{\"delta\": {\"content\": \"spaced\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"\\u00e9\"}}],\"model\":\"up\"}\r\n\r\n",
            "event: x\ndata: {\"choices\":[{\"delta\":{\"content\":\"named\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n",
            "data: [DONE]\n\n",
            "data: {\"after\":1}\n\n",
        );
        let whole = run(true, input.len(), input);
        assert!(
            whole.0.contains("spaced") && whole.0.contains("named"),
            "{}",
            whole.0
        );
        assert_eq!(whole.1.output_tokens, 4);
        for step in 1..input.len() {
            assert_eq!(run(true, step, input), whole, "step {step}");
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
