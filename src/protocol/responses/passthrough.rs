//! Responses client → a channel that serves the Responses API natively: the body goes as
//! it came (unknown fields, built-in tools and `previous_response_id` included), only the
//! model name is swapped on the way up and back, and usage is read for billing (and
//! shown with its cost on the final response when the stream shows one).

use super::stream::error_event_at;
use super::wire::answer::{ResponseUsage, StreamEvent};
use crate::protocol::cost;
use crate::protocol::sse::{self, Decoder};
use crate::protocol::{
    RequestOptions, StreamContext, StreamTranslator, TranslateError, UpstreamRequest, Usage,
};
use serde::Deserialize;
use serde_json::Value;

pub fn passthrough_request(body: Value, opts: &RequestOptions) -> UpstreamRequest {
    UpstreamRequest {
        body: crate::protocol::with_model(body, opts.upstream_model),
        path: if opts.compact {
            "/v1/responses/compact".into()
        } else {
            "/v1/responses".into()
        },
        client_wants_usage: false,
    }
}

/// Usage of a response object, read through its typed view ([`ResponseUsage`], which
/// says what each count is).
pub(super) fn usage_of(u: &Value) -> Usage {
    ResponseUsage::deserialize(u).map_or_else(|_| Usage::default(), |u| u.to_usage())
}

/// A whole response (or compaction) object, shown with the client's model name and, for
/// a response, the gateway's own id (`resp_` and the request id).
pub fn passthrough_response(
    body: &[u8],
    client_model: &str,
    request_id: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    let mut v = crate::protocol::answer_object(body)?;
    let obj = v
        .as_object_mut()
        .ok_or(TranslateError::Shape("not an object"))?;
    if !obj.contains_key("output") {
        return Err(TranslateError::Shape("no output"));
    }
    let usage = obj
        .get("usage")
        .filter(|u| u.is_object())
        .map(usage_of)
        .unwrap_or_default();
    if obj.contains_key("model") {
        obj.insert("model".into(), Value::String(client_model.to_string()));
    }
    if obj.get("object").and_then(Value::as_str) == Some("response") {
        obj.insert("id".into(), Value::String(format!("resp_{request_id}")));
    }
    Ok((serde_json::to_vec(&v)?, usage))
}

pub fn passthrough_stream(ctx: StreamContext) -> Box<dyn StreamTranslator> {
    Box::new(Passthrough {
        ctx,
        decoder: Decoder::new(),
        events: Vec::new(),
        usage: Usage::default(),
        delivered: 0,
        ended: false,
        next_seq: 0,
        held: Vec::new(),
    })
}

/// Events that end a Responses stream; the first three carry the final response object.
const TERMINAL: &[&str] = &[
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

struct Passthrough {
    ctx: StreamContext,
    decoder: Decoder,
    events: Vec<sse::Event>,
    usage: Usage,
    delivered: u64,
    /// A terminal event went to the client: nothing more is sent.
    ended: bool,
    /// The sequence number our own closing `error` event takes, so the client's
    /// sequence stays increasing.
    next_seq: u64,
    /// The terminal event, sent when the upstream's body ends ([`StreamTranslator::finish`]):
    /// the response is settled and stored before the client reads that it is complete.
    held: Vec<u8>,
}

impl Passthrough {
    /// What the client is told when the upstream reports a failure.
    fn reported(&self) -> String {
        format!(
            "The upstream provider reported an error mid-stream. (request id: {})",
            self.ctx.request_id
        )
    }

    /// Ends the client's stream with the protocol's `error` event, once.
    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        if !self.ended {
            self.ended = true;
            out.extend_from_slice(&error_event_at(self.next_seq, message));
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>) {
        for ev in std::mem::take(&mut self.events) {
            let mut v = match ev.json() {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                // The answer has a hole: it ends here rather than go on as if complete.
                Err(fault) => {
                    let message =
                        format!("{} (request id: {})", fault.message(), self.ctx.request_id);
                    self.fail(&message, out);
                    continue;
                }
            };
            // The members the gateway reads, typed; the event itself stays a tree (the
            // model, an error's message and the cost are rewritten in it).
            let Ok(read) = StreamEvent::deserialize(&v) else {
                continue;
            };
            let kind = ev
                .event
                .clone()
                .or_else(|| read.kind.as_str().map(str::to_string));
            let terminal = TERMINAL.contains(&kind.as_deref().unwrap_or(""));
            let response_usage = read.response.object().and_then(|r| r.usage.object());
            if terminal {
                // Usage counts for the bill even after the client's stream ended.
                if let Some(u) = response_usage {
                    self.usage = u.to_usage();
                }
            }
            let sequence_number = read.sequence_number.0;
            let delta = read.delta.as_str().map_or(0, str::len) as u64;
            drop(read);
            // The final response's usage carries its cost (not a failure's: what a
            // broken answer is billed, the relay decides).
            if matches!(
                kind.as_deref(),
                Some("response.completed" | "response.incomplete")
            ) {
                if let Some(u) = v["response"].get_mut("usage").filter(|u| u.is_object()) {
                    cost::add(u, self.ctx.cost_of(&self.usage));
                }
            }
            if self.ended {
                continue;
            }
            if let Some(n) = sequence_number {
                self.next_seq = self.next_seq.max(n.saturating_add(1));
            }
            if kind.as_deref() == Some("error") {
                // Spec 7.2: the upstream's own words do not reach the client.
                let seq = sequence_number.unwrap_or(self.next_seq);
                out.extend_from_slice(&error_event_at(seq, &self.reported()));
                self.ended = true;
                continue;
            }
            if kind.as_deref().is_some_and(|k| k.ends_with(".delta")) {
                self.delivered += delta;
            }
            let reported = self.reported();
            let mut data = ev.data;
            if let Some(r) = v.get_mut("response").and_then(Value::as_object_mut) {
                if let Some(e) = r.get_mut("error").and_then(Value::as_object_mut) {
                    e.insert("message".into(), Value::String(reported));
                }
                if r.contains_key("model") {
                    r.insert("model".into(), Value::String(self.ctx.client_model.clone()));
                }
                // The gateway's own id, never the upstream's.
                r.insert(
                    "id".into(),
                    Value::String(format!("resp_{}", self.ctx.request_id)),
                );
                data = v.to_string();
            }
            if terminal {
                sse::write_event(&mut self.held, kind.as_deref(), &data);
                self.ended = true;
            } else {
                sse::write_event(out, kind.as_deref(), &data);
            }
        }
    }
}

impl StreamTranslator for Passthrough {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.decoder.feed(chunk, &mut self.events);
        self.emit(out);
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        self.decoder.flush(&mut self.events);
        self.emit(out);
        out.append(&mut self.held);
        let message = error.map(str::to_string).unwrap_or_else(|| {
            format!(
                "The upstream provider ended the stream before it was complete. (request id: {})",
                self.ctx.request_id
            )
        });
        self.fail(&message, out);
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn delivered_bytes(&self) -> u64 {
        self.delivered
    }
}
