//! An incremental WebSocket frame reader (RFC 6455 section 5), fed the bytes of one
//! direction as they pass, in whatever pieces the network delivers them.
//!
//! It never holds more than it must: a frame header (at most 14 bytes) and, when asked
//! to collect them, the text messages that may matter, up to a cap. Everything else
//! (binary payloads, control payloads, text the caller does not want) is counted past,
//! not copied. The bytes themselves are never changed: the caller forwards its own copy.

use std::ops::ControlFlow;

/// What the caller thinks of a text message from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// Collect it to the end.
    Keep,
    /// Not interesting: count past the rest.
    Skip,
    /// Cannot tell yet; ask again with more bytes.
    NeedMore,
}

/// Which text messages to collect, and the largest one held in memory.
#[derive(Debug, Clone, Copy)]
pub struct Collect {
    /// A larger message is skipped (counted in [`FrameReader::oversize`]), never an error:
    /// one odd message must not break a session.
    pub cap: usize,
    pub sniff: fn(&[u8]) -> Sniff,
}

/// A stream that is not RFC 6455 framing (or not the framing negotiated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError {
    /// Offset in the chunk where the problem was found.
    pub at: usize,
    pub reason: &'static str,
}

/// How a [`FrameReader::feed`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// The whole chunk was read.
    All,
    /// The callback stopped after the frame ending at this offset; the rest of the chunk
    /// was not read (the reader is at a frame boundary).
    Stopped(usize),
}

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const MAX_CONTROL_PAYLOAD: u64 = 125;
/// Collected text above this capacity is released after each message, so one large
/// message does not pin its buffer for the rest of a long session.
const RETAINED_CAPACITY: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Message {
    None,
    Binary,
    Text { keep: Sniff },
}

#[derive(Debug)]
pub struct FrameReader {
    collect: Option<Collect>,
    /// Header bytes of the frame being read, while `in_payload` is false.
    head: [u8; 14],
    head_len: usize,
    in_payload: bool,
    /// Payload bytes of the current frame still to come.
    remaining: u64,
    fin: bool,
    data_frame: bool,
    /// The current frame is a close frame.
    close_frame: bool,
    mask: Option<[u8; 4]>,
    /// Payload bytes of the current frame already read (the mask's phase).
    payload_pos: u64,
    message: Message,
    text: Vec<u8>,
    broken: bool,
    frames: u64,
    oversize: u64,
    closed: bool,
}

impl FrameReader {
    /// A reader that collects text messages as `collect` says; `None` only follows frames.
    pub fn new(collect: Option<Collect>) -> FrameReader {
        FrameReader {
            collect,
            head: [0; 14],
            head_len: 0,
            in_payload: false,
            remaining: 0,
            fin: false,
            data_frame: false,
            close_frame: false,
            mask: None,
            payload_pos: 0,
            message: Message::None,
            text: Vec::new(),
            broken: false,
            frames: 0,
            oversize: 0,
            closed: false,
        }
    }

    /// Between two frames (a close frame may be placed here without breaking the stream).
    pub fn at_boundary(&self) -> bool {
        !self.broken && !self.in_payload && self.head_len == 0
    }

    /// Complete frames read so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// A whole close frame has been read: this side started or answered the closing
    /// handshake (RFC 6455 5.5.1) and sends nothing more.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Text messages skipped for exceeding the cap.
    pub fn oversize(&self) -> u64 {
        self.oversize
    }

    /// Reads `chunk`. `on_frame(end, text)` runs after every complete frame, `end` being
    /// the offset just past it in `chunk`, with `text` the whole message when the frame
    /// completed a collected text message. Returning `Break` stops reading there.
    pub fn feed<F>(&mut self, chunk: &[u8], mut on_frame: F) -> Result<Fed, FrameError>
    where
        F: FnMut(usize, Option<&[u8]>) -> ControlFlow<()>,
    {
        if self.broken {
            return Err(FrameError {
                at: 0,
                reason: "the stream is already broken",
            });
        }
        let mut i = 0;
        loop {
            if !self.in_payload {
                if i == chunk.len() {
                    return Ok(Fed::All);
                }
                i = self
                    .read_header(chunk, i)
                    .inspect_err(|_| self.broken = true)?;
                if !self.in_payload {
                    // The header is still incomplete: the chunk is used up.
                    return Ok(Fed::All);
                }
            }
            let n = self.remaining.min((chunk.len() - i) as u64) as usize;
            self.payload(&chunk[i..i + n]);
            i += n;
            self.remaining -= n as u64;
            if self.remaining > 0 {
                return Ok(Fed::All);
            }
            self.in_payload = false;
            self.frames += 1;
            self.closed |= self.close_frame;
            let flow = self.end_frame(|text| on_frame(i, text));
            if flow.is_break() {
                return Ok(Fed::Stopped(i));
            }
        }
    }

    /// Consumes header bytes from `chunk[i..]`; sets `in_payload` once the header is whole.
    fn read_header(&mut self, chunk: &[u8], mut i: usize) -> Result<usize, FrameError> {
        while i < chunk.len() {
            let need = header_len(&self.head[..self.head_len]);
            if self.head_len >= need {
                break;
            }
            let take = (need - self.head_len).min(chunk.len() - i);
            self.head[self.head_len..self.head_len + take].copy_from_slice(&chunk[i..i + take]);
            self.head_len += take;
            i += take;
            if self.head_len == 2 {
                self.check_first_two(i)?;
            }
        }
        let need = header_len(&self.head[..self.head_len]);
        if self.head_len < need {
            return Ok(i);
        }
        self.start_payload(i)?;
        Ok(i)
    }

    fn check_first_two(&self, at: usize) -> Result<(), FrameError> {
        let err = |reason| Err(FrameError { at, reason });
        let (b0, b1) = (self.head[0], self.head[1]);
        if b0 & 0x70 != 0 {
            return err("reserved bits set (no extension was negotiated)");
        }
        let opcode = b0 & 0x0F;
        let fin = b0 & 0x80 != 0;
        match opcode {
            OP_CONTINUATION if self.message == Message::None => {
                err("continuation frame outside a message")
            }
            OP_TEXT | OP_BINARY if self.message != Message::None => {
                err("new message before the previous one ended")
            }
            OP_CONTINUATION | OP_TEXT | OP_BINARY => Ok(()),
            0x8..=0xA if !fin => err("fragmented control frame"),
            0x8..=0xA if u64::from(b1 & 0x7F) > MAX_CONTROL_PAYLOAD => {
                err("control frame longer than 125 bytes")
            }
            0x8..=0xA => Ok(()),
            _ => err("reserved opcode"),
        }
    }

    fn start_payload(&mut self, at: usize) -> Result<(), FrameError> {
        let h = &self.head[..self.head_len];
        let (b0, b1) = (h[0], h[1]);
        let (len, mask_at) = match b1 & 0x7F {
            126 => (u64::from(u16::from_be_bytes([h[2], h[3]])), 4),
            127 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&h[2..10]);
                let len = u64::from_be_bytes(b);
                if len >> 63 != 0 {
                    self.broken = true;
                    return Err(FrameError {
                        at,
                        reason: "64-bit length with its top bit set",
                    });
                }
                (len, 10)
            }
            n => (u64::from(n), 2),
        };
        self.mask =
            (b1 & 0x80 != 0).then(|| [h[mask_at], h[mask_at + 1], h[mask_at + 2], h[mask_at + 3]]);
        let opcode = b0 & 0x0F;
        self.fin = b0 & 0x80 != 0;
        self.data_frame = opcode < 0x8;
        self.close_frame = opcode == OP_CLOSE;
        match opcode {
            OP_TEXT => {
                let keep = if self.collect.is_some() {
                    Sniff::NeedMore
                } else {
                    Sniff::Skip
                };
                self.text.clear();
                self.message = Message::Text { keep };
            }
            OP_BINARY => self.message = Message::Binary,
            _ => {}
        }
        self.remaining = len;
        self.payload_pos = 0;
        self.head_len = 0;
        self.in_payload = true;
        Ok(())
    }

    /// One piece of the current frame's payload.
    fn payload(&mut self, piece: &[u8]) {
        let Message::Text { keep } = self.message else {
            return;
        };
        let Some(collect) = self.collect else {
            return;
        };
        if !self.data_frame || keep == Sniff::Skip || piece.is_empty() {
            self.payload_pos += piece.len() as u64;
            return;
        }
        if self.text.len() + piece.len() > collect.cap {
            self.oversize += 1;
            self.skip_text();
            self.payload_pos += piece.len() as u64;
            return;
        }
        let start = self.text.len();
        self.text.extend_from_slice(piece);
        if let Some(mask) = self.mask {
            for (k, b) in self.text[start..].iter_mut().enumerate() {
                *b ^= mask[((self.payload_pos + k as u64) % 4) as usize];
            }
        }
        self.payload_pos += piece.len() as u64;
        if keep == Sniff::NeedMore {
            match (collect.sniff)(&self.text) {
                Sniff::Skip => self.skip_text(),
                decided => self.message = Message::Text { keep: decided },
            }
        }
    }

    fn skip_text(&mut self) {
        self.message = Message::Text { keep: Sniff::Skip };
        self.release_text();
    }

    fn release_text(&mut self) {
        self.text.clear();
        if self.text.capacity() > RETAINED_CAPACITY {
            self.text = Vec::new();
        }
    }

    fn end_frame<F>(&mut self, mut f: F) -> ControlFlow<()>
    where
        F: FnMut(Option<&[u8]>) -> ControlFlow<()>,
    {
        if !self.data_frame || !self.fin {
            return f(None);
        }
        let done = std::mem::replace(&mut self.message, Message::None);
        let flow = match done {
            // Undecided at the end: the message is shorter than the sniff needs.
            Message::Text {
                keep: Sniff::Keep | Sniff::NeedMore,
            } if self.collect.is_some() => f(Some(&self.text)),
            _ => f(None),
        };
        self.release_text();
        flow
    }
}

/// Header length implied by the bytes seen so far (2 until the second byte is known).
fn header_len(h: &[u8]) -> usize {
    if h.len() < 2 {
        return 2;
    }
    let ext = match h[1] & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if h[1] & 0x80 != 0 { 4 } else { 0 };
    2 + ext + mask
}

/// A close frame as a server sends it (unmasked). `reason` is cut to fit 123 bytes.
pub fn server_close(code: u16, reason: &str) -> Vec<u8> {
    let payload = close_payload(code, reason);
    let mut out = Vec::with_capacity(2 + payload.len());
    out.push(0x88);
    out.push(payload.len() as u8);
    out.extend_from_slice(&payload);
    out
}

/// A close frame as a client sends it: masked with `mask` (RFC 6455 5.3).
pub fn client_close(code: u16, mask: [u8; 4]) -> Vec<u8> {
    let payload = code.to_be_bytes();
    let mut out = vec![0x88, 0x80 | payload.len() as u8];
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_CONTROL_PAYLOAD as usize - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(&reason.as_bytes()[..end]);
    p
}

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
