//! A bounded server-sent-events decoder: bytes in, whole events out, whatever the
//! network's read boundaries (an event may span many reads; a read may hold many
//! events, or end inside a UTF-8 sequence or between `\r` and `\n`).
//!
//! An event that cannot be read (larger than [`MAX_EVENT_BYTES`], or not UTF-8) comes
//! out in its place in the sequence, as soon as it is seen, marked with its [`Fault`], so
//! whoever reads the stream ends it there instead of skipping a piece of the answer. The
//! rest of that event is dropped as it arrives (memory stays bounded) and decoding
//! resumes after the blank line that ends it, so later events (the upstream's usage
//! report) are still read. The output is the same whatever the split.

use serde_json::Value;

/// An event larger than this is an upstream fault, not something to buffer forever.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// Why an upstream event could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Larger than [`MAX_EVENT_BYTES`].
    TooLarge,
    /// Bytes that are not UTF-8.
    BadUtf8,
    /// Data that is not what the protocol carries (a JSON object, a known marker): half
    /// an event, for instance.
    NotJson,
    /// The stream ended inside an event (no blank line after it) that is not whole.
    Cut,
}

impl Fault {
    /// What the client is told (the request id is added by the caller).
    pub fn message(self) -> &'static str {
        match self {
            Fault::TooLarge => "The upstream sent an oversized event.",
            Fault::BadUtf8 | Fault::NotJson => "The upstream sent an event that could not be read.",
            Fault::Cut => "The upstream provider ended the stream before it was complete.",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// Set when the event could not be read; `event` and `data` are empty then.
    pub fault: Option<Fault>,
    /// The stream ended before the blank line that ends this event.
    pub cut: bool,
}

impl Event {
    /// The data as JSON: `None` for an event with no data (a keep-alive), the fault for an
    /// unreadable event or data that is not JSON.
    pub fn json(&self) -> Result<Option<Value>, Fault> {
        if let Some(f) = self.fault {
            return Err(f);
        }
        if self.data.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&self.data).map(Some).map_err(|e| {
            // Debug, not warn: an upstream that breaks one event often breaks every one
            // after it; the client's error event already says the stream failed.
            tracing::debug!(error = %e, fault = ?self.unreadable(), "upstream event data is not JSON");
            self.unreadable()
        })
    }

    /// Why data that is not JSON could not be read: the stream was cut inside it, or
    /// it is not JSON.
    pub fn unreadable(&self) -> Fault {
        if self.cut {
            Fault::Cut
        } else {
            Fault::NotJson
        }
    }
}

#[derive(Debug, Default)]
pub struct Decoder {
    /// The line not yet ended.
    buf: Vec<u8>,
    /// Where to resume looking for a line end in `buf`.
    scanned: usize,
    event: Option<String>,
    /// The `data:` lines so far, joined with `\n`.
    data: String,
    has_data: bool,
    /// Bytes of the lines of the current event so far.
    size: usize,
    /// The current event could not be read (its fault is out): its lines are dropped
    /// until the blank line that ends it.
    spoiled: bool,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Feeds bytes; appends every completed event (unreadable ones included) to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Event>) {
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        // Where the next search for a line end begins; the end of the buffer once
        // there is none.
        let mut i = self.scanned;
        loop {
            let Some(at) = memchr::memchr2(b'\n', b'\r', &self.buf[i..]) else {
                i = self.buf.len();
                break;
            };
            let end = i + at;
            let next = if self.buf[end] == b'\r' {
                match self.buf.get(end + 1) {
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                    // A `\r` at the very end may be the first half of `\r\n`: wait.
                    None => {
                        i = end;
                        break;
                    }
                }
            } else {
                end + 1
            };
            let buf = std::mem::take(&mut self.buf);
            self.line(&buf[start..end], out);
            self.buf = buf;
            start = next;
            i = next;
        }
        self.buf.drain(..start);
        self.scanned = i - start;
        // The unended line, without a `\r` that may be half of a line end, counts
        // against the bound now: an endless line must not grow the buffer forever.
        let open = self.buf.len() - usize::from(self.buf.last() == Some(&b'\r'));
        if !self.spoiled && self.size + open > MAX_EVENT_BYTES {
            self.spoil(Fault::TooLarge, out);
        }
        if self.spoiled {
            self.shrink_open_line();
        }
    }

    /// While an event is spoiled its open line is never read: keep only what decides
    /// where lines end (whether it is empty, and a trailing `\r`).
    fn shrink_open_line(&mut self) {
        let cr = self.buf.last() == Some(&b'\r');
        let body = self.buf.len() - usize::from(cr);
        if body > 1 {
            self.buf.clear();
            self.buf.push(b'x');
            if cr {
                self.buf.push(b'\r');
            }
            self.scanned = self.buf.len() - usize::from(cr);
        }
    }

    fn spoil(&mut self, fault: Fault, out: &mut Vec<Event>) {
        out.push(Event {
            fault: Some(fault),
            ..Event::default()
        });
        self.spoiled = true;
        self.event = None;
        self.data.clear();
        self.has_data = false;
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<Event>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if self.spoiled {
            return;
        }
        self.size += line.len();
        if self.size > MAX_EVENT_BYTES {
            self.spoil(Fault::TooLarge, out);
            return;
        }
        let Ok(line) = std::str::from_utf8(line) else {
            self.spoil(Fault::BadUtf8, out);
            return;
        };
        if line.starts_with(':') {
            return; // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
    }

    /// The blank line that ends an event.
    fn dispatch(&mut self, out: &mut Vec<Event>) {
        if !std::mem::take(&mut self.spoiled) && (self.has_data || self.event.is_some()) {
            out.push(Event {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
                fault: None,
                cut: false,
            });
        }
        self.event = None;
        self.data.clear();
        self.has_data = false;
        self.size = 0;
    }

    /// Nothing held: no part of a line or of an event. The next bytes start an event.
    pub fn idle(&self) -> bool {
        self.buf.is_empty()
            && self.event.is_none()
            && !self.has_data
            && self.size == 0
            && !self.spoiled
    }

    /// Whatever an upstream left unterminated at the end of its stream, as a last event.
    pub fn flush(&mut self, out: &mut Vec<Event>) {
        if !self.buf.is_empty() {
            let mut line = std::mem::take(&mut self.buf);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.scanned = 0;
            self.line(&line, out);
        }
        let before = out.len();
        self.dispatch(out);
        if let Some(last) = out.get_mut(before..).and_then(|e| e.first_mut()) {
            last.cut = true;
        }
    }
}

/// The event at the start of `bytes` when it is whole there and is one `data:` line
/// (then the blank line that ends it): its data and the bytes it takes. What a [`Decoder`]
/// holding nothing gives for those bytes, without copying them; `None` for anything else
/// (another field, a comment, `\r`, bytes that are not UTF-8, an event not whole yet).
pub fn whole_data_event(bytes: &[u8]) -> Option<(&str, usize)> {
    let rest = bytes.strip_prefix(b"data:")?;
    let end = memchr::memchr(b'\n', rest)?;
    if rest.get(end + 1) != Some(&b'\n') {
        return None;
    }
    let value = &rest[..end];
    if value.len() + 5 > MAX_EVENT_BYTES || memchr::memchr(b'\r', value).is_some() {
        return None;
    }
    let value = value.strip_prefix(b" ").unwrap_or(value);
    let data = std::str::from_utf8(value).ok()?;
    Some((data, 5 + end + 2))
}

/// Writes one event: `event: NAME` (when named), then every line of `data` as a
/// `data:` line, then the blank line that ends it.
pub fn write_event(out: &mut Vec<u8>, name: Option<&str>, data: &str) {
    if let Some(n) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(n.as_bytes());
        out.push(b'\n');
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], step: usize) -> Vec<Event> {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            d.feed(piece, &mut out);
        }
        d.flush(&mut out);
        out
    }

    fn ev(event: Option<&str>, data: &str) -> Event {
        Event {
            event: event.map(str::to_string),
            data: data.into(),
            ..Event::default()
        }
    }

    fn fault(f: Fault) -> Event {
        Event {
            fault: Some(f),
            ..Event::default()
        }
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let input = "event: a\r\ndata: {\"x\": \"é\"}\r\n\r\n: keep-alive\n\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        let whole = decode_in_pieces(input.as_bytes(), input.len());
        assert_eq!(
            whole,
            vec![
                ev(Some("a"), "{\"x\": \"é\"}"),
                ev(None, "one\ntwo"),
                ev(None, "[DONE]"),
            ]
        );
        for step in 1..input.len() {
            assert_eq!(
                decode_in_pieces(input.as_bytes(), step),
                whole,
                "step {step}"
            );
        }
    }

    #[test]
    fn unterminated_last_event_is_flushed() {
        let cut = Event {
            cut: true,
            ..ev(None, "tail")
        };
        assert_eq!(decode_in_pieces(b"data: tail", 3), vec![cut]);
        let out = decode_in_pieces(b"data: {\"a\":1}\n\ndata: {\"b\"", 3);
        assert_eq!(out[0].json(), Ok(Some(serde_json::json!({"a": 1}))));
        assert_eq!(
            out[1].json(),
            Err(Fault::Cut),
            "half an event at the end is a cut"
        );
    }

    #[test]
    fn an_oversized_event_comes_out_as_a_fault_in_its_place() {
        let mut input = b"data: before\n\ndata: ".to_vec();
        input.extend(vec![b'x'; MAX_EVENT_BYTES]);
        input.extend_from_slice(b"\ndata: more\n\ndata: after\n\n");
        let expected = vec![
            ev(None, "before"),
            fault(Fault::TooLarge),
            ev(None, "after"),
        ];
        for step in [input.len(), 1 << 20, 4096 + 7] {
            assert_eq!(decode_in_pieces(&input, step), expected, "step {step}");
        }
    }

    #[test]
    fn an_event_with_bytes_that_are_not_utf8_is_a_fault() {
        let input =
            b"data: {\"a\":1}\n\ndata: {\"t\":\"\xff\xfe\"}\ndata: x\n\ndata: {\"b\":2}\n\n";
        let expected = vec![
            ev(None, "{\"a\":1}"),
            fault(Fault::BadUtf8),
            ev(None, "{\"b\":2}"),
        ];
        for step in 1..input.len() {
            assert_eq!(decode_in_pieces(input, step), expected, "step {step}");
        }
        assert_eq!(expected[1].json(), Err(Fault::BadUtf8));
    }

    /// A line that never ends does not grow the buffer past the bound.
    #[test]
    fn an_endless_line_is_dropped_as_it_comes() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let mb = vec![b'x'; 1 << 20];
        for _ in 0..20 {
            d.feed(&mb, &mut out);
            assert!(d.buf.len() <= MAX_EVENT_BYTES + mb.len());
        }
        assert!(d.buf.len() < 4, "{}", d.buf.len());
        d.feed(b"\r", &mut out);
        d.feed(b"\n\ndata: ok\n\n", &mut out);
        assert_eq!(out, vec![fault(Fault::TooLarge), ev(None, "ok")]);
    }

    /// An event taken straight from the bytes is the one a decoder holding nothing
    /// gives for them, and the decoder holds nothing after it.
    #[test]
    fn a_whole_data_event_is_what_the_decoder_gives() {
        let inputs: &[&[u8]] = &[
            b"data: {\"a\":1}\n\nrest",
            b"data:{\"a\":1}\n\n",
            b"data:  two spaces\n\n",
            b"data: \n\n",
            b"data:\n\n",
            b"data: caf\xc3\xa9\n\n",
            b"data: [DONE]\n\ndata: x",
        ];
        for input in inputs {
            let (data, used) = whole_data_event(input).expect("whole");
            let mut d = Decoder::new();
            let mut out = Vec::new();
            d.feed(&input[..used], &mut out);
            assert_eq!(
                out,
                vec![ev(None, data)],
                "{:?}",
                String::from_utf8_lossy(input)
            );
            assert!(d.idle());
        }
        let not_taken: &[&[u8]] = &[
            b"data: x\n",
            b"data: x\ndata: y\n\n",
            b"data: x\r\n\r\n",
            b"data: x\r\n\n",
            b"event: e\ndata: x\n\n",
            b": keep-alive\n\n",
            b"\ndata: x\n\n",
            b"data: \xff\n\n",
            b"id: 1\n\n",
            b"dat",
        ];
        for input in not_taken {
            assert_eq!(
                whole_data_event(input),
                None,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        let mut d = Decoder::new();
        let mut out = Vec::new();
        assert!(d.idle());
        for (piece, idle) in [
            (&b"data: x\n"[..], false),
            (b"\n", true),
            (b"event: e\n", false),
            (b"\n", true),
            (b": c\n", false),
            (b"\n", true),
            (b"data: y\r", false),
            (b"\n\n", true),
        ] {
            d.feed(piece, &mut out);
            assert_eq!(d.idle(), idle, "{:?}", String::from_utf8_lossy(piece));
        }
    }

    #[test]
    fn half_an_event_is_not_json() {
        let out = decode_in_pieces(b"data: {\"choices\":[{\"del\n\ndata: \n\n", 5);
        assert_eq!(out[0].json(), Err(Fault::NotJson));
        assert_eq!(out[1].json(), Ok(None), "an empty event carries nothing");
    }
}
