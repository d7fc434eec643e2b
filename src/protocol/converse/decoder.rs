//! A ConverseStream answer → neutral events. The body is AWS's event-stream framing
//! (Amazon Bedrock API Reference: ConverseStream; AWS event stream encoding): binary
//! messages, each a prelude (total length, headers length, the prelude's CRC32),
//! headers (`:message-type`, `:event-type`, `:exception-type`, `:content-type`), a JSON
//! payload and the message's CRC32. Frames are read with AWS's own codec
//! (`aws-smithy-eventstream`) as the bytes arrive, whatever the reads' boundaries: only
//! the unfinished frame is held, never the whole stream, and a frame larger than
//! [`MAX_FRAME_BYTES`] or whose checksums do not match breaks the stream there.

use super::wire::{
    ContentBlockDeltaEvent, ContentBlockStartEvent, MessageStopEvent, MetadataEvent,
};
use super::{finish_reason, usage};
use crate::protocol::ir::{Event, FinishReason, StreamBroken, StreamDecoder};
use crate::protocol::sse::{Fault, MAX_EVENT_BYTES};
use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use bytes::{Buf, BytesMut};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

/// The largest frame read: as large as the largest server-sent event the other
/// protocols' streams take.
pub const MAX_FRAME_BYTES: usize = MAX_EVENT_BYTES;

/// Prelude: total length, headers length, prelude CRC32.
const PRELUDE_BYTES: usize = 12;
/// The smallest frame: a prelude and the message CRC32.
const MIN_FRAME_BYTES: usize = PRELUDE_BYTES + 4;

/// Why event-stream bytes could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A frame announced more than [`MAX_FRAME_BYTES`], or less than a frame can be.
    BadLength,
    /// A checksum that does not match, or headers that cannot be read.
    Invalid,
}

/// Event-stream frames out of bytes fed in any split.
#[derive(Default)]
pub struct FrameDecoder {
    buf: BytesMut,
    frames: MessageFrameDecoder,
    /// The codec holds the current frame's prelude (it was taken from `buf`).
    in_frame: bool,
    failed: Option<FrameError>,
}

impl FrameDecoder {
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Bytes in; whole frames appended to `out`. After the first error every call
    /// answers it again (a binary stream cannot be resynchronised).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Message>) -> Result<(), FrameError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        self.buf.extend_from_slice(chunk);
        loop {
            if !self.in_frame {
                if self.buf.len() < PRELUDE_BYTES {
                    return Ok(());
                }
                let total = (&self.buf[..4]).get_u32() as usize;
                if !(MIN_FRAME_BYTES..=MAX_FRAME_BYTES).contains(&total) {
                    return self.fail(FrameError::BadLength);
                }
                self.in_frame = true;
            }
            match self.frames.decode_frame(&mut self.buf) {
                Ok(DecodedFrame::Complete(m)) => {
                    self.in_frame = false;
                    out.push(m);
                }
                Ok(DecodedFrame::Incomplete) => return Ok(()),
                Err(_) => return self.fail(FrameError::Invalid),
            }
        }
    }

    /// Whether part of a frame was read and not the rest.
    pub fn pending(&self) -> bool {
        self.in_frame || !self.buf.is_empty()
    }

    fn fail(&mut self, e: FrameError) -> Result<(), FrameError> {
        self.failed = Some(e);
        self.buf = BytesMut::new();
        Err(e)
    }
}

/// A string header of a frame.
fn header<'a>(m: &'a Message, name: &str) -> Option<&'a str> {
    m.headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            HeaderValue::String(s) => Some(s.as_str()),
            _ => None,
        })
}

pub struct Decoder {
    frames: FrameDecoder,
    /// Upstream block index → the tool call it holds.
    tools: BTreeMap<u64, usize>,
    next_tool: usize,
    /// `messageStop`'s reason, given out after the usage that follows it (`metadata`),
    /// as the other upstreams give theirs.
    finish: Option<FinishReason>,
    stopped: bool,
    broken: Option<Fault>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            frames: FrameDecoder::new(),
            tools: BTreeMap::new(),
            next_tool: 0,
            finish: None,
            stopped: false,
            broken: None,
        }
    }

    fn breaks(&mut self, fault: Fault, events: &mut Vec<Event>) {
        if self.broken.is_none() {
            self.broken = Some(fault);
            events.push(Event::Broken(fault));
        }
    }

    fn message(&mut self, m: &Message, events: &mut Vec<Event>) {
        match header(m, ":message-type") {
            Some("event") => {}
            // `exception` (throttlingException, modelStreamErrorException,
            // validationException, ...) and `error`: the upstream gave up mid-stream.
            Some(_) => {
                if self.broken.is_none() {
                    events.push(Event::Error);
                }
                return;
            }
            None => return self.breaks(Fault::NotJson, events),
        }
        let payload = m.payload();
        let kind = header(m, ":event-type").unwrap_or("");
        if self.broken.is_some() {
            // Only the usage report still counts (for the bill).
            if kind == "metadata" {
                if let Some(u) = parse::<MetadataEvent>(payload).and_then(|e| e.usage) {
                    events.push(Event::Usage(usage(&u)));
                }
            }
            return;
        }
        let ok = match kind {
            "contentBlockStart" => parse::<ContentBlockStartEvent>(payload).map(|e| {
                if let Some(t) = e.start.tool_use {
                    let call = self.next_tool;
                    self.next_tool += 1;
                    self.tools.insert(e.content_block_index, call);
                    events.push(Event::ToolCallStart {
                        index: call,
                        id: t.tool_use_id,
                        name: t.name,
                        signature: None,
                    });
                }
            }),
            "contentBlockDelta" => parse::<ContentBlockDeltaEvent>(payload).map(|e| {
                let d = e.delta;
                if let Some(t) = d.text.filter(|t| !t.is_empty()) {
                    events.push(Event::Text(t));
                }
                if let Some(u) = d.tool_use {
                    if let Some(&index) = self.tools.get(&e.content_block_index) {
                        events.push(Event::ToolCallArgs {
                            index,
                            fragment: u.input,
                        });
                    }
                }
                if let Some(r) = d.reasoning_content {
                    if let Some(t) = r.text.filter(|t| !t.is_empty()) {
                        events.push(Event::Thinking(t));
                    }
                    if let Some(s) = r.signature.filter(|s| !s.is_empty()) {
                        events.push(Event::ThinkingSignature(s));
                    }
                    if let Some(data) = r.redacted_content {
                        events.push(Event::RedactedThinking(data));
                    }
                }
            }),
            "messageStop" => parse::<MessageStopEvent>(payload).map(|e| {
                self.finish = Some(finish_reason(&e.stop_reason));
                self.stopped = true;
            }),
            "metadata" => parse::<MetadataEvent>(payload).map(|e| {
                if let Some(u) = e.usage {
                    events.push(Event::Usage(usage(&u)));
                }
                if let Some(f) = self.finish.take() {
                    events.push(Event::Finish(f));
                }
            }),
            // `messageStart`, `contentBlockStop` and event types added later carry
            // nothing the neutral stream needs.
            _ => Some(()),
        };
        if ok.is_none() {
            self.breaks(Fault::NotJson, events);
        }
    }
}

fn parse<T: DeserializeOwned>(payload: &[u8]) -> Option<T> {
    serde_json::from_slice(payload).ok()
}

impl StreamDecoder for Decoder {
    fn feed(&mut self, chunk: &[u8], events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        let mut frames = Vec::new();
        let read = self.frames.feed(chunk, &mut frames);
        for m in &frames {
            self.message(m, events);
        }
        if let Err(e) = read {
            let fault = match e {
                FrameError::BadLength => Fault::TooLarge,
                FrameError::Invalid => Fault::NotJson,
            };
            self.breaks(fault, events);
        }
        StreamBroken::check(self.broken)
    }

    fn flush(&mut self, events: &mut Vec<Event>) -> Result<(), StreamBroken> {
        if self.frames.pending() {
            self.breaks(Fault::Cut, events);
        }
        if self.broken.is_none() {
            if let Some(f) = self.finish.take() {
                events.push(Event::Finish(f));
            }
        }
        StreamBroken::check(self.broken)
    }

    fn complete(&self) -> bool {
        self.stopped && self.broken.is_none()
    }
}
