//! A chat stream chunk read in one pass over its bytes, building nothing: where its
//! top-level members are, and the generated text its `choices` carry (counted as
//! [`super::delivered::choices_bytes`] counts it). The same-protocol stream relay reads
//! every chunk of an answer; this keeps that read to one pass with no allocation, for
//! the chunks upstreams actually write.
//!
//! Only a *plain* chunk is read here: a JSON object written compactly at its top level
//! (no whitespace between its members), every member name distinct and without escapes,
//! no `\u` escape anywhere, no number with an exponent, nesting under [`MAX_DEPTH`]. Its JSON is checked as
//! strictly as `serde_json` checks it. Anything else answers `None`, and the caller reads
//! the chunk the general way ([`crate::protocol::shallow::Shallow`]). For a plain chunk
//! both ways give the same answer, so which one reads it never shows.

use std::ops::Range;

/// Nesting beyond this is left to the general reader (and its recursion limit).
const MAX_DEPTH: u32 = 100;
/// Numbers longer than this are left to the general reader.
const MAX_NUMBER: usize = 300;
/// Top-level members beyond this are left to the general reader.
const MAX_MEMBERS: usize = 32;

/// One top-level member: where it starts (its name's opening quote) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub start: usize,
    pub value: Range<usize>,
}

/// What one pass over a plain chunk found (byte ranges into the chunk's text).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plain {
    pub model: Option<Member>,
    pub usage: Option<Member>,
    pub error: Option<Member>,
    pub choices: Option<Member>,
    /// Bytes of generated text in `choices`.
    pub delivered: u64,
}

/// Not plain, or not JSON: the general reader decides.
struct NotPlain;

type R<T> = Result<T, NotPlain>;

struct Cur<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
}

/// A chunk's text read in one pass; `None` unless it is plain (module docs).
pub fn scan(data: &str) -> Option<Plain> {
    let mut c = Cur {
        b: data.as_bytes(),
        i: 0,
        depth: 0,
    };
    c.top().ok()
}

impl<'a> Cur<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> R<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(NotPlain)
        }
    }

    fn top(&mut self) -> R<Plain> {
        let mut plain = Plain::default();
        let mut names: [&'a [u8]; MAX_MEMBERS] = [&[]; MAX_MEMBERS];
        let mut n = 0;
        self.eat(b'{')?;
        self.depth = 1;
        if self.peek() == Some(b'}') {
            self.i += 1;
        } else {
            loop {
                let start = self.i;
                let (name, escaped) = self.string_raw()?;
                if escaped || n == MAX_MEMBERS || names[..n].contains(&name) {
                    return Err(NotPlain);
                }
                names[n] = name;
                n += 1;
                self.eat(b':')?;
                let at = self.i;
                if name == b"choices" {
                    plain.delivered = self.choices()?;
                } else {
                    self.value()?;
                }
                let member = Member {
                    start,
                    value: at..self.i,
                };
                match name {
                    b"model" => plain.model = Some(member),
                    b"usage" => plain.usage = Some(member),
                    b"error" => plain.error = Some(member),
                    b"choices" => plain.choices = Some(member),
                    _ => {}
                }
                match self.peek() {
                    Some(b',') => self.i += 1,
                    Some(b'}') => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err(NotPlain),
                }
            }
        }
        if self.i == self.b.len() {
            Ok(plain)
        } else {
            Err(NotPlain)
        }
    }

    /// A string at the cursor: its raw text (between the quotes) and whether it holds
    /// escapes. A `\u` escape is left to the general reader.
    fn string_raw(&mut self) -> R<(&'a [u8], bool)> {
        let (start, _, escaped) = self.string()?;
        let b: &'a [u8] = self.b;
        Ok((&b[start..self.i - 1], escaped))
    }

    /// A string at the cursor: where its text starts, its length once unescaped, and
    /// whether it holds escapes.
    fn string(&mut self) -> R<(usize, u64, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut shrink = 0u64;
        loop {
            let Some(c) = self.peek() else {
                return Err(NotPlain);
            };
            match c {
                b'"' => {
                    let len = (self.i - start) as u64 - shrink;
                    self.i += 1;
                    return Ok((start, len, shrink > 0));
                }
                b'\\' => match self.b.get(self.i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                        self.i += 2;
                        shrink += 1;
                    }
                    _ => return Err(NotPlain),
                },
                0..=0x1f => return Err(NotPlain),
                _ => self.i += 1,
            }
        }
    }

    fn nest(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(NotPlain)
        } else {
            Ok(())
        }
    }

    /// The members of an object at the cursor, each name given (raw) to `member`, which
    /// reads the value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &[u8]) -> R<()>) -> R<()> {
        self.nest()?;
        self.eat(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.ws();
            let (name, escaped) = self.string_raw()?;
            if escaped {
                // Names are compared unescaped by the general reader.
                return Err(NotPlain);
            }
            self.ws();
            self.eat(b':')?;
            self.ws();
            member(self, name)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(NotPlain),
            }
        }
    }

    /// The items of an array at the cursor, each read by `item`.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> R<()>) -> R<()> {
        self.nest()?;
        self.eat(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.ws();
            item(self)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(NotPlain),
            }
        }
    }

    /// Any value, checked and skipped.
    fn value(&mut self) -> R<()> {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'{') => self.object(|c, _| c.value()),
            Some(b'[') => self.array(Self::value),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(NotPlain),
        }
    }

    fn literal(&mut self, word: &[u8]) -> R<()> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(NotPlain)
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - from
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?`. An exponent, or a number too long for an `f64`
    /// (which the counting reader would refuse), is left to the general reader.
    fn number(&mut self) -> R<()> {
        let from = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(NotPlain),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(NotPlain);
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            return Err(NotPlain);
        }
        if self.i - from > MAX_NUMBER {
            return Err(NotPlain);
        }
        Ok(())
    }

    // The generated text of `choices`, read as `delivered.rs` reads it: a value of an
    // unexpected type counts 0 (and is still checked).

    /// A string's unescaped length; `None` for any other value.
    fn text(&mut self) -> R<Option<u64>> {
        if self.peek() == Some(b'"') {
            return self.string().map(|(_, len, _)| Some(len));
        }
        self.value().map(|()| None)
    }

    /// The sum of `count` over the members named `name` of an object; 0 for any other
    /// value.
    fn members_named(&mut self, name: &[u8], count: fn(&mut Self) -> R<u64>) -> R<u64> {
        if self.peek() != Some(b'{') {
            return self.value().map(|()| 0);
        }
        let mut n = 0;
        self.object(|c, k| {
            if k == name {
                n += count(c)?;
                Ok(())
            } else {
                c.value()
            }
        })?;
        Ok(n)
    }

    /// The sum of `count` over an array's items; 0 for any other value.
    fn each(&mut self, count: fn(&mut Self) -> R<u64>) -> R<u64> {
        if self.peek() != Some(b'[') {
            return self.value().map(|()| 0);
        }
        let mut n = 0;
        self.array(|c| {
            n += count(c)?;
            Ok(())
        })?;
        Ok(n)
    }

    fn choices(&mut self) -> R<u64> {
        self.each(|c| c.members_named(b"delta", Self::delta))
    }

    fn text_bytes(&mut self) -> R<u64> {
        self.text().map(|t| t.unwrap_or(0))
    }

    fn function(&mut self) -> R<u64> {
        self.members_named(b"arguments", Self::text_bytes)
    }

    fn content(&mut self) -> R<u64> {
        match self.peek() {
            Some(b'"') => self.text_bytes(),
            Some(b'[') => self.each(|c| c.members_named(b"text", Self::text_bytes)),
            _ => self.value().map(|()| 0),
        }
    }

    fn delta(&mut self) -> R<u64> {
        if self.peek() != Some(b'{') {
            return self.value().map(|()| 0);
        }
        let (mut n, mut reasoning_content, mut reasoning) = (0, None, None);
        self.object(|c, k| {
            match k {
                b"content" => n += c.content()?,
                b"refusal" => n += c.text_bytes()?,
                b"reasoning_content" => reasoning_content = c.text()?,
                b"reasoning" => reasoning = c.text()?,
                b"tool_calls" => n += c.each(|c| c.members_named(b"function", Self::function))?,
                b"function_call" => n += c.function()?,
                _ => c.value()?,
            }
            Ok(())
        })?;
        Ok(n + reasoning_content.or(reasoning).unwrap_or(0))
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
