//! Generate-content client, generate-content upstream: the body goes through as it is
//! (speech and image configurations included); only the model changes (in the path on
//! the way up, `modelVersion` on the way down) and usage is read; each `usageMetadata`
//! carries its cost when the stream shows one.

use super::super::{cost, sse};
use super::super::{RequestOptions, StreamContext, StreamTranslator, TranslateError};
use super::super::{UpstreamRequest, Usage};
use super::wire::answer::GenerateContentResponse;
use super::wire::usage::UsageMetadata;
use super::wire::{model_path, ChunkWriter};
use serde::Deserialize;
use serde_json::Value;

pub fn passthrough_request(mut body: Value, opts: &RequestOptions) -> UpstreamRequest {
    merge_spellings(&mut body, "generationConfig", "generation_config");
    UpstreamRequest {
        body: serde_json::to_vec(&body).unwrap_or_default(),
        path: model_path(opts.upstream_model, opts.stream),
        client_wants_usage: false,
    }
}

/// A client may send the config under both names; the API refuses a body that names
/// one field twice. The settings of `generation_config` join the camelCase object, whose
/// values win (the order [`super::wire::Section`] reads them in).
fn merge_spellings(body: &mut Value, camel: &str, snake: &str) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    if !obj.get(camel).is_some_and(Value::is_object) {
        return;
    }
    let Some(Value::Object(theirs)) = obj.remove(snake) else {
        return;
    };
    if let Some(Value::Object(ours)) = obj.get_mut(camel) {
        for (k, v) in theirs {
            let camel_key = camel_case(&k);
            if !ours.contains_key(&k) && !ours.contains_key(&camel_key) {
                ours.insert(k, v);
            }
        }
    }
}

/// `max_output_tokens` → `maxOutputTokens`.
fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

pub fn passthrough_response(
    body: &[u8],
    client_model: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    let mut v: Value = serde_json::from_slice(body)?;
    if !v.is_object() {
        return Err(TranslateError::Shape("not an object"));
    }
    let read = GenerateContentResponse::deserialize(&v)?;
    if !read.is_answer() {
        return Err(TranslateError::Shape("not a GenerateContentResponse"));
    }
    let usage = usage_of(&read);
    let obj = v
        .as_object_mut()
        .ok_or(TranslateError::Shape("not an object"))?;
    if obj.contains_key("modelVersion") {
        obj.insert(
            "modelVersion".into(),
            Value::String(client_model.to_string()),
        );
    }
    Ok((serde_json::to_vec(&v)?, usage))
}

pub fn passthrough_stream(ctx: StreamContext) -> Box<dyn StreamTranslator> {
    Box::new(Passthrough {
        writer: ChunkWriter::new(ctx.client_sse),
        ctx,
        decoder: sse::Decoder::new(),
        events: Vec::new(),
        usage: Usage::default(),
        delivered: 0,
        done: false,
    })
}

struct Passthrough {
    ctx: StreamContext,
    writer: ChunkWriter,
    decoder: sse::Decoder,
    events: Vec<sse::Event>,
    usage: Usage,
    delivered: u64,
    /// A chunk with a `finishReason` arrived: the upstream finished its answer.
    done: bool,
}

impl Passthrough {
    fn fail(&mut self, what: &str, out: &mut Vec<u8>) {
        let message = format!("{what} (request id: {})", self.ctx.request_id);
        self.writer.fail(&message, out);
    }

    fn emit(&mut self, out: &mut Vec<u8>) {
        for ev in std::mem::take(&mut self.events) {
            let mut v = match ev.json() {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                // Half a chunk, bytes that are not text: the answer has a hole, so it ends
                // here rather than go on as if complete (after the last chunk, nothing
                // is missing).
                Err(fault) => {
                    if !self.done && !self.writer.closed() {
                        self.fail(fault.message(), out);
                    }
                    continue;
                }
            };
            // The members the gateway reads, typed; the chunk itself stays a tree (its
            // model and usage are rewritten, the rest goes out as it came).
            let Ok(read) = GenerateContentResponse::deserialize(&v) else {
                continue;
            };
            if read.usage_metadata.object().is_some() {
                // Usage still counts after the client's stream closed.
                self.usage = usage_of(&read);
            }
            if self.writer.closed() {
                continue;
            }
            if read.error.present() {
                // Spec 7.2: the provider's own error text does not reach the client.
                self.fail("The upstream provider reported an error mid-stream.", out);
                continue;
            }
            let finished =
                read.candidates().iter().any(|c| c.finish_reason.is_there()) || read.blocked();
            self.done |= finished;
            self.delivered += content_bytes(&read);
            drop(read);
            if let Some(m) = v.get_mut("usageMetadata").filter(|m| m.is_object()) {
                // Every chunk's usage shows the cost of its own figures: the last one,
                // the final usage, the stream's cost.
                cost::add(m, self.ctx.cost_of(&self.usage));
            }
            if let Some(obj) = v.as_object_mut() {
                if obj.contains_key("modelVersion") {
                    obj.insert(
                        "modelVersion".into(),
                        Value::String(self.ctx.client_model.clone()),
                    );
                }
            }
            self.writer.chunk(&v, out);
        }
    }
}

/// The usage an answer states; zeros when it states none.
fn usage_of(read: &GenerateContentResponse<'_>) -> Usage {
    read.usage_metadata
        .object()
        .map(UsageMetadata::to_usage)
        .unwrap_or_default()
}

/// The generated text of a chunk, every candidate: text and thought parts, function
/// call arguments (as the JSON text a translation would carry).
fn content_bytes(chunk: &GenerateContentResponse<'_>) -> u64 {
    let parts = chunk.candidates().iter().flat_map(|c| c.parts());
    parts
        .map(|p| {
            let text = p.text.as_str().map_or(0, str::len);
            let args = match p.function_call.get().map(|c| &c.args) {
                Some(Value::Null) => 2, // `{}`
                Some(a) => a.to_string().len(),
                None => 0,
            };
            (text + args) as u64
        })
        .sum()
}

impl StreamTranslator for Passthrough {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.decoder.feed(chunk, &mut self.events);
        self.emit(out);
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        self.decoder.flush(&mut self.events);
        self.emit(out);
        if self.writer.closed() {
            return;
        }
        if self.done {
            self.writer.close(out);
            return;
        }
        match error {
            Some(message) => self.writer.fail(message, out),
            None => self.fail(
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
