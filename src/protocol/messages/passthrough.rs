//! Messages client to messages upstream: bodies and events pass through as they came
//! (unknown fields and event types included), with only the model name rewritten,
//! usage read on the way, and its cost added to the `message_delta` usage when the
//! stream shows one.

use super::wire::answer::StreamEvent;
use super::{error_event, WireUsage, PATH};
use crate::protocol::lenient::{Member, Text};
use crate::protocol::{cost, sse};
use crate::protocol::{
    RequestOptions, StreamContext, StreamTranslator, TranslateError, UpstreamRequest, Usage,
};
use serde::Deserialize;
use serde_json::Value;

pub fn request(body: Value, opts: &RequestOptions) -> UpstreamRequest {
    UpstreamRequest {
        body: crate::protocol::with_model(body, opts.upstream_model),
        path: PATH.into(),
        client_wants_usage: false,
    }
}

pub fn response(body: &[u8], client_model: &str) -> Result<(Vec<u8>, Usage), TranslateError> {
    let mut v = crate::protocol::answer_object(body)?;
    let obj = v
        .as_object_mut()
        .ok_or(TranslateError::Shape("not an object"))?;
    if obj.get("type").and_then(Value::as_str) != Some("message") {
        return Err(TranslateError::Shape("not a message"));
    }
    let usage = match obj.get("usage") {
        Some(u) => WireUsage::of(&Member::deserialize(u)?).to_usage(),
        None => Usage::default(),
    };
    obj.insert("model".into(), Value::String(client_model.to_string()));
    Ok((serde_json::to_vec(&v)?, usage))
}

/// The stream state machine. It ends cleanly only after the upstream's `message_stop`;
/// an upstream `error` event ends it (forwarded with a sanitized message); anything
/// else (a cut, an event that cannot be read) ends with the protocol's error event.
pub struct Stream {
    ctx: StreamContext,
    sse: sse::Decoder,
    pending: Vec<sse::Event>,
    usage: WireUsage,
    delivered: u64,
    done: bool,
    failed: bool,
}

impl Stream {
    pub fn new(ctx: StreamContext) -> Stream {
        Stream {
            ctx,
            sse: sse::Decoder::new(),
            pending: Vec::new(),
            usage: WireUsage::default(),
            delivered: 0,
            done: false,
            failed: false,
        }
    }

    /// Ends the client's stream with the protocol's error event, once.
    fn fail(&mut self, what: &str, out: &mut Vec<u8>) {
        if !self.done && !self.failed {
            self.failed = true;
            out.extend_from_slice(&error_event(&format!(
                "{what} (request id: {})",
                self.ctx.request_id
            )));
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>) {
        for ev in std::mem::take(&mut self.pending) {
            if self.done {
                continue;
            }
            let mut parsed = match ev.json() {
                Ok(v) => v,
                // The answer has a hole: it ends here rather than go on as if complete.
                Err(fault) => {
                    self.fail(fault.message(), out);
                    continue;
                }
            };
            let Read {
                kind,
                delivered,
                error_type,
            } = self.read(parsed.as_ref());
            if self.failed {
                continue;
            }
            // The SDKs dispatch on the event line: restore it from the data when a
            // relay upstream dropped it.
            let name = ev.event.clone().or_else(|| kind.clone());
            let mut data = None;
            match (kind.as_deref(), parsed.as_mut()) {
                (Some("message_start"), Some(v)) => {
                    if let Some(m) = v.get_mut("message").and_then(Value::as_object_mut) {
                        m.insert("model".into(), Value::String(self.ctx.client_model.clone()));
                    }
                    data = Some(v.to_string());
                }
                (Some("content_block_start" | "content_block_delta"), Some(_)) => {
                    self.delivered += delivered;
                }
                (Some("message_delta"), Some(_)) => data = self.priced(&ev.data),
                (Some("message_stop"), _) => self.done = true,
                (Some("error"), Some(_)) => {
                    // Spec 7.2: the upstream's own text stays here; its error type (which
                    // the SDKs map to retry behaviour) goes through.
                    self.failed = true;
                    let message = format!(
                        "The upstream provider reported an error mid-stream. (request id: {})",
                        self.ctx.request_id
                    );
                    let body = serde_json::json!({"type": "error", "error": {"type": error_type, "message": message}});
                    data = Some(body.to_string());
                }
                _ => {}
            }
            sse::write_event(out, name.as_deref(), data.as_deref().unwrap_or(&ev.data));
        }
    }

    /// Reads the members of an event the gateway acts on through its typed view, and
    /// adds the usage it states to the bill (even after the client's stream ended).
    fn read(&mut self, parsed: Option<&Value>) -> Read {
        let e = parsed
            .map(StreamEvent::deserialize)
            .transpose()
            .ok()
            .flatten()
            .unwrap_or_default();
        let kind = e.kind.as_str().map(str::to_string);
        let usage = match kind.as_deref() {
            Some("message_start") => e.message.object().map(|m| &m.usage),
            Some("message_delta") => Some(&e.usage),
            _ => None,
        };
        if let Some(u) = usage.and_then(Member::object) {
            self.usage.merge(u);
        }
        let error_type = e.error.object().and_then(|x| x.kind.as_str());
        Read {
            delivered: content_bytes(&e),
            error_type: error_type.unwrap_or("api_error").to_string(),
            kind,
        }
    }

    /// A `message_delta` whose usage carries its cost: the totals merged so far (a delta
    /// may state only the output). Every other member is copied as it came; `None` (the
    /// event as it came) when the stream shows no cost or the event has no usage object.
    fn priced(&self, data: &str) -> Option<String> {
        let cost = self.ctx.cost_of(&self.usage.to_usage())?;
        let top = crate::protocol::answer_shallow(data.as_bytes()).ok()?;
        let usage = cost::add_raw(top.get("usage")?, &cost)?;
        String::from_utf8(top.write(&[("usage", &usage)], 0)).ok()
    }
}

/// What the gateway reads of one event.
struct Read {
    /// The data's `type` (the SDKs dispatch on it).
    kind: Option<String>,
    /// The generated text a block's start or delta carries.
    delivered: u64,
    /// An `error` event's type, which the SDKs map to retry behaviour.
    error_type: String,
}

/// The generated text a block's start or delta carries: text, thinking, tool input.
fn content_bytes(e: &StreamEvent<'_>) -> u64 {
    let len = |t: &Text<'_>| t.as_str().map_or(0, str::len) as u64;
    let delta = e.delta.object().map_or(0, |d| {
        len(&d.text) + len(&d.thinking) + len(&d.partial_json)
    });
    let block = e.content_block.object().map_or(0, |b| {
        let input = match b.input.as_object() {
            Some(o) if !o.is_empty() => b.input.to_string().len() as u64,
            _ => 0,
        };
        len(&b.text) + len(&b.thinking) + input
    });
    delta + block
}

impl StreamTranslator for Stream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.sse.feed(chunk, &mut self.pending);
        self.emit(out);
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        self.sse.flush(&mut self.pending);
        self.emit(out);
        if self.done || self.failed {
            return;
        }
        self.failed = true;
        let message = error.map(str::to_string).unwrap_or_else(|| {
            format!(
                "The upstream provider ended the stream before it was complete. (request id: {})",
                self.ctx.request_id
            )
        });
        out.extend_from_slice(&error_event(&message));
    }

    fn usage(&self) -> Usage {
        self.usage.to_usage()
    }

    fn delivered_bytes(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
#[path = "passthrough_tests.rs"]
mod tests;
