//! A bounded, zero-copy `multipart/form-data` reader: text fields and file parts as
//! byte ranges of the body as received, so an upload is forwarded byte-exact.
//!
//! RFC 7578 on top of the RFC 2046 framing: a delimiter is CRLF `--boundary`, followed by
//! `--` (the close) or optional spaces and CRLF (the next part). Bare LF is tolerated
//! wherever CRLF is expected, because some clients send it.

use crate::protocol::Invalid;
use memchr::memmem;
use std::ops::Range;

/// More parts than any real form has: each costs a header parse and a `Vec` slot.
const MAX_PARTS: usize = 256;
/// A part's header block, blank line included.
const MAX_HEADER_BYTES: usize = 16 * 1024;
/// A text field's value; file parts are not limited here (the body limit bounds them).
const MAX_FIELD_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub value: String,
    /// Where the value lies in the body.
    pub range: Range<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    pub name: String,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    /// Where the file's bytes lie in the body.
    pub range: Range<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Form {
    pub fields: Vec<Field>,
    pub files: Vec<FilePart>,
}

impl Form {
    /// The first text field with that name.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value.as_str())
    }

    /// Every text field with that name, in body order (`timestamp_granularities[]`).
    pub fn field_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |f| f.name == name)
            .map(|f| f.value.as_str())
    }

    /// The first file part with that name.
    pub fn file(&self, name: &str) -> Option<&FilePart> {
        self.files.iter().find(|f| f.name == name)
    }
}

/// The boundary of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Option<String> {
    let (media_type, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !media_type
        .trim()
        .eq_ignore_ascii_case("multipart/form-data")
    {
        return None;
    }
    parameters(params)
        .ok()?
        .into_iter()
        .find(|(name, _)| name == "boundary")
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// Parses a whole multipart body.
pub fn parse(body: &[u8], boundary: &str) -> Result<Form, Invalid> {
    if boundary.is_empty() || boundary.contains(['\r', '\n']) {
        return Err(malformed(
            "The multipart boundary is empty or contains a line break.",
        ));
    }
    let mut needle = Vec::with_capacity(boundary.len() + 3);
    needle.extend_from_slice(b"\n--");
    needle.extend_from_slice(boundary.as_bytes());
    let delimiters = Delimiters {
        finder: memmem::Finder::new(&needle),
        boundary,
    };

    // A preamble before the first boundary line is allowed (RFC 2046 5.1.1).
    let at_start = if body.starts_with(&needle[1..]) {
        after_delimiter(body, needle.len() - 1)
    } else {
        After::NotDelimiter
    };
    let mut next = match at_start {
        After::NotDelimiter if delimiters.finder.find(body).is_none() => {
            return Err(malformed(format!(
                "The multipart body does not contain its boundary `--{boundary}`."
            )));
        }
        After::NotDelimiter => delimiters.find(body, 0)?.1,
        After::Truncated => return Err(delimiters.not_closed()),
        first => first,
    };
    let mut form = Form::default();
    let mut count = 0;
    loop {
        let start = match next {
            After::Part(start) => start,
            // Anything after the close is the epilogue, ignored. (`Delimiters::find`
            // answers only `Close` or `Part`.)
            _ => return Ok(form),
        };
        count += 1;
        if count > MAX_PARTS {
            return Err(malformed(format!(
                "The multipart body has more than {MAX_PARTS} parts."
            )));
        }
        let (headers, content_start) = read_headers(body, start, count)?;
        let (content_end, after) = delimiters.find(body, content_start.saturating_sub(1))?;
        let range = content_start..content_end.max(content_start);
        next = after;
        push_part(&mut form, body, headers, range, count)?;
    }
}

/// The body with one text field's value replaced, every other byte as it was. `None`
/// when there is no such field, or when `value` has a line break (it could then end
/// the part early and change the form's meaning).
pub fn replace_field(body: &[u8], form: &Form, name: &str, value: &str) -> Option<Vec<u8>> {
    let field = form.fields.iter().find(|f| f.name == name)?;
    if value.contains(['\r', '\n']) {
        return None;
    }
    let before = body.get(..field.range.start)?;
    let after = body.get(field.range.end..)?;
    let mut out = Vec::with_capacity(before.len() + value.len() + after.len());
    out.extend_from_slice(before);
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(after);
    Some(out)
}

fn malformed(message: impl Into<String>) -> Invalid {
    Invalid {
        param: None,
        message: message.into(),
    }
}

/// What follows a `--boundary` candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// `--boundary--`: the last part ended.
    Close,
    /// A new part whose headers start at this index.
    Part(usize),
    /// The body ends right after the candidate.
    Truncated,
    /// Other bytes follow: the candidate is content, not a delimiter (as Go's and
    /// Python's readers treat it).
    NotDelimiter,
}

/// `at` is the index just past `--boundary`.
fn after_delimiter(body: &[u8], at: usize) -> After {
    let Some(rest) = body.get(at..) else {
        return After::NotDelimiter;
    };
    if rest.starts_with(b"--") {
        return After::Close;
    }
    // RFC 2046 transport padding: spaces and tabs before the line break.
    let padding = rest
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(rest.len());
    match &rest[padding..] {
        [] | [b'\r'] => After::Truncated,
        [b'\n', ..] => After::Part(at + padding + 1),
        [b'\r', b'\n', ..] => After::Part(at + padding + 2),
        _ => After::NotDelimiter,
    }
}

struct Delimiters<'a> {
    /// Searches `\n--boundary`: the CR of CRLF is checked apart so bare LF works too.
    finder: memmem::Finder<'a>,
    boundary: &'a str,
}

impl Delimiters<'_> {
    fn not_closed(&self) -> Invalid {
        malformed(format!(
            "The multipart body ends without its closing boundary `--{}--`.",
            self.boundary
        ))
    }

    /// The next delimiter at or after `from` (the LF that ends the previous line):
    /// where the content before it ends, and what follows it.
    fn find(&self, body: &[u8], from: usize) -> Result<(usize, After), Invalid> {
        let mut at = from;
        loop {
            let lf = at
                + self
                    .finder
                    .find(&body[at..])
                    .ok_or_else(|| self.not_closed())?;
            match after_delimiter(body, lf + self.finder.needle().len()) {
                After::NotDelimiter => at = lf + 1,
                After::Truncated => return Err(self.not_closed()),
                after => {
                    let crlf = lf > from && body[lf - 1] == b'\r';
                    return Ok((if crlf { lf - 1 } else { lf }, after));
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct Headers {
    disposition: Option<String>,
    content_type: Option<String>,
}

/// Which header a folded continuation line belongs to.
#[derive(Clone, Copy)]
enum Last {
    None,
    Disposition,
    ContentType,
    Other,
}

/// Reads a part's header lines up to the blank line; returns them and where the
/// content starts.
fn read_headers(body: &[u8], start: usize, part: usize) -> Result<(Headers, usize), Invalid> {
    let limit = body.len().min(start + MAX_HEADER_BYTES);
    let mut headers = Headers::default();
    let mut last = Last::None;
    let mut at = start;
    loop {
        let Some(lf) = memchr::memchr(b'\n', &body[at..limit]) else {
            return Err(malformed(if limit < body.len() {
                format!("The headers of part {part} are longer than 16 KiB.")
            } else {
                format!("The multipart body ends inside the headers of part {part}.")
            }));
        };
        let line = &body[at..at + lf];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        at += lf + 1;
        if line.is_empty() {
            return Ok((headers, at));
        }
        let text = String::from_utf8_lossy(line);
        if line[0] == b' ' || line[0] == b'\t' {
            // Obsolete line folding: the line continues the previous header.
            let target = match last {
                Last::Disposition => headers.disposition.as_mut(),
                Last::ContentType => headers.content_type.as_mut(),
                Last::Other => continue,
                Last::None => None,
            };
            let target = target.ok_or_else(|| {
                malformed(format!(
                    "Part {part} starts its headers with a folded line."
                ))
            })?;
            target.push(' ');
            target.push_str(text.trim());
            continue;
        }
        let (name, value) = text.split_once(':').ok_or_else(|| {
            malformed(format!(
                "Part {part} has a header line without a colon: `{}`.",
                text.chars().take(80).collect::<String>()
            ))
        })?;
        let name = name.trim();
        let value = value.trim().to_string();
        let (slot, which) = if name.eq_ignore_ascii_case("content-disposition") {
            (&mut headers.disposition, Last::Disposition)
        } else if name.eq_ignore_ascii_case("content-type") {
            (&mut headers.content_type, Last::ContentType)
        } else {
            last = Last::Other;
            continue;
        };
        if slot.is_some() {
            return Err(malformed(format!("Part {part} repeats its {name} header.")));
        }
        *slot = Some(value);
        last = which;
    }
}

fn push_part(
    form: &mut Form,
    body: &[u8],
    headers: Headers,
    range: Range<usize>,
    part: usize,
) -> Result<(), Invalid> {
    let disposition = headers
        .disposition
        .ok_or_else(|| malformed(format!("Part {part} has no Content-Disposition header.")))?;
    let (kind, params) = disposition.split_once(';').unwrap_or((&disposition, ""));
    if !kind.trim().eq_ignore_ascii_case("form-data") {
        return Err(malformed(format!(
            "Part {part} has Content-Disposition `{}`; expected `form-data`.",
            kind.trim()
        )));
    }
    let params = parameters(params).map_err(|why| {
        malformed(format!(
            "The Content-Disposition header of part {part} is malformed: {why}."
        ))
    })?;
    let param = |wanted: &str| {
        params
            .iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, value)| value.clone())
    };
    let name = param("name").ok_or_else(|| {
        malformed(format!(
            "The Content-Disposition header of part {part} has no `name`."
        ))
    })?;
    // RFC 6266: `filename*` (percent-encoded UTF-8) is preferred over `filename`.
    let filename = param("filename*")
        .and_then(|v| extended_value(&v))
        .or_else(|| param("filename"));
    // RFC 7578 4.4: a part's type defaults to text/plain; one declared as anything
    // else is data even without a filename (`curl -F 'file=<a.mp3;type=audio/mpeg'`).
    let binary_type = headers.content_type.as_deref().is_some_and(|t| {
        !t.trim_start()
            .get(..5)
            .is_some_and(|p| p.eq_ignore_ascii_case("text/"))
    });
    if filename.is_some() || binary_type {
        form.files.push(FilePart {
            name,
            filename,
            content_type: headers.content_type,
            range,
        });
        return Ok(());
    }
    let bytes = &body[range.clone()];
    if bytes.len() > MAX_FIELD_BYTES {
        return Err(Invalid {
            message: format!("The form field `{name}` is longer than 64 KiB."),
            param: Some(name),
        });
    }
    let Ok(value) = std::str::from_utf8(bytes) else {
        return Err(Invalid {
            message: format!("The form field `{name}` is not valid UTF-8."),
            param: Some(name),
        });
    };
    form.fields.push(Field {
        name,
        value: value.to_string(),
        range,
    });
    Ok(())
}

/// `; name=value` parameters (RFC 9110 5.6.6): names lowercased, values unquoted with
/// backslash escapes. Parameters without `=` are skipped.
fn parameters(mut rest: &str) -> Result<Vec<(String, String)>, &'static str> {
    let mut out = Vec::new();
    loop {
        rest = rest.trim_start_matches([';', ' ', '\t']);
        if rest.is_empty() {
            return Ok(out);
        }
        let end = rest.find([';', '=']).unwrap_or(rest.len());
        if rest.as_bytes().get(end) != Some(&b'=') {
            rest = &rest[end..];
            continue;
        }
        let name = rest[..end].trim().to_ascii_lowercase();
        rest = rest[end + 1..].trim_start();
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let (value, after) = quoted_string(quoted)?;
            rest = after.trim_start();
            if !(rest.is_empty() || rest.starts_with(';')) {
                return Err("text follows a quoted value");
            }
            value
        } else {
            let end = rest.find(';').unwrap_or(rest.len());
            let value = rest[..end].trim().to_string();
            rest = &rest[end..];
            value
        };
        out.push((name, value));
    }
}

/// The inside of a quoted string (after its opening quote) and the text after it.
fn quoted_string(s: &str) -> Result<(String, &str), &'static str> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, escaped)) => value.push(escaped),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("a quoted value is not closed")
}

/// An RFC 8187 extended value (`UTF-8''na%C3%AFve.wav`); `None` for other charsets.
fn extended_value(value: &str) -> Option<String> {
    let mut pieces = value.splitn(3, '\'');
    let charset = pieces.next()?;
    let _language = pieces.next()?;
    let encoded = pieces.next()?.as_bytes();
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        if encoded[i] == b'%' {
            let hex = std::str::from_utf8(encoded.get(i + 1..i + 3)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            bytes.push(encoded[i]);
            i += 1;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
#[path = "multipart_tests.rs"]
mod tests;
