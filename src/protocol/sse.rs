//! A bounded server-sent-events decoder: bytes in, whole events out, whatever the
//! network's read boundaries (an event may span many reads; a read may hold many
//! events, or end inside a UTF-8 sequence or between `\r` and `\n`).

/// An event larger than this is an upstream fault, not something to buffer forever.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge;

#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Where to resume looking for a line end.
    scanned: usize,
    event: Option<String>,
    data: Vec<String>,
    has_data: bool,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Feeds bytes; appends every completed event to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Event>) -> Result<(), TooLarge> {
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                // A `\r` at the very end may be the first half of `\r\n`: wait for more.
                if b == b'\r' && i + 1 == self.buf.len() {
                    break;
                }
                let line = String::from_utf8_lossy(&self.buf[start..i]).into_owned();
                let next = if b == b'\r' && self.buf.get(i + 1) == Some(&b'\n') {
                    i + 2
                } else {
                    i + 1
                };
                self.line(&line, out);
                start = next;
                i = next;
            } else {
                i += 1;
            }
        }
        self.buf.drain(..start);
        self.scanned = i - start;
        let pending: usize = self.data.iter().map(String::len).sum::<usize>() + self.buf.len();
        if pending > MAX_EVENT_BYTES {
            self.buf.clear();
            self.scanned = 0;
            self.data.clear();
            return Err(TooLarge);
        }
        Ok(())
    }

    fn line(&mut self, line: &str, out: &mut Vec<Event>) {
        if line.is_empty() {
            if self.has_data || self.event.is_some() {
                out.push(Event {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data).join("\n"),
                });
            }
            self.has_data = false;
            return;
        }
        if line.starts_with(':') {
            return; // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push(value.to_string());
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
    }

    /// Whatever an upstream left unterminated at the end of its stream, as a last event.
    pub fn flush(&mut self, out: &mut Vec<Event>) {
        if !self.buf.is_empty() {
            let line = String::from_utf8_lossy(&self.buf).into_owned();
            self.buf.clear();
            self.scanned = 0;
            self.line(line.trim_end_matches('\r'), out);
        }
        self.line("", out);
    }
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
            d.feed(piece, &mut out).unwrap();
        }
        d.flush(&mut out);
        out
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let input = "event: a\r\ndata: {\"x\": \"é\"}\r\n\r\n: keep-alive\n\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        let whole = decode_in_pieces(input.as_bytes(), input.len());
        assert_eq!(
            whole,
            vec![
                Event {
                    event: Some("a".into()),
                    data: "{\"x\": \"é\"}".into()
                },
                Event {
                    event: None,
                    data: "one\ntwo".into()
                },
                Event {
                    event: None,
                    data: "[DONE]".into()
                },
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
        assert_eq!(
            decode_in_pieces(b"data: tail", 3),
            vec![Event {
                event: None,
                data: "tail".into()
            }]
        );
    }

    #[test]
    fn oversized_event_is_an_error() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(d.feed(&big, &mut out), Err(TooLarge));
    }
}
