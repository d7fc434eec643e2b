//! Keeping secrets out of the log. An upstream's error body may echo what it was sent
//! (the channel's key, an `Authorization` header, a URL with `?key=`); the operator's log
//! gets the body with every configured secret and every credential-shaped value
//! replaced, and cut to a bounded length. Configuration types print their secrets as
//! [`Hidden`] in `Debug`. A leaf: nothing here knows the rest of the gateway.

use std::fmt;

/// Longest piece of an upstream body written to the log.
pub const LOG_BODY_BYTES: usize = 512;

/// What a secret is replaced with.
const MASK: &str = "[redacted]";

/// Secrets shorter than this are not looked for: replacing every occurrence of a few
/// characters would mangle the text without protecting anything real.
const MIN_SECRET_LEN: usize = 4;

/// A secret in `Debug` output: whether it is set, never its value.
pub struct Hidden<'a>(pub &'a str);

impl fmt::Debug for Hidden<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str(MASK)
        }
    }
}

/// A URL in `Debug` output, with the password of its userinfo (`redis://:pw@host`)
/// hidden.
pub fn url(u: &str) -> String {
    let Some((scheme, rest)) = u.split_once("://") else {
        return u.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:{MASK}@{}", &rest[at + 1..])
        }
        None => u.to_string(),
    }
}

/// The configured secrets to look for in text bound for the log.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Longest first, so a secret that contains another is replaced whole.
    list: Vec<String>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} hidden)", self.list.len())
    }
}

impl Secrets {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Secrets {
        let mut list: Vec<String> = secrets
            .into_iter()
            .map(str::trim)
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .map(str::to_string)
            .collect();
        list.sort_by_key(|s| std::cmp::Reverse(s.len()));
        list.dedup();
        Secrets { list }
    }

    /// An upstream body as it may be logged: text (invalid UTF-8 replaced), every
    /// configured secret, bearer token and `key=` value replaced, at most
    /// [`LOG_BODY_BYTES`] long. Secrets are replaced before the cut, so a secret that
    /// straddles it leaves no prefix behind.
    pub fn body(&self, body: &[u8]) -> String {
        // A secret can only be found in the first bytes plus its own length.
        let longest = self.list.first().map_or(0, String::len);
        let window = &body[..body.len().min(LOG_BODY_BYTES * 4 + longest)];
        let mut text = String::from_utf8_lossy(window).into_owned();
        for s in &self.list {
            if text.contains(s.as_str()) {
                text = text.replace(s.as_str(), MASK);
            }
        }
        let text = mask_after(&text, "bearer ", is_token_byte);
        let text = mask_after(&text, "key=", is_query_byte);
        truncate(text, LOG_BODY_BYTES)
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

fn is_query_byte(b: u8) -> bool {
    !b"&#\"' \t\r\n<>,;".contains(&b)
}

/// Replaces the value after each case-insensitive occurrence of `marker` (the run of
/// bytes `keep` accepts) with the mask. Only ASCII is compared, so char boundaries hold.
fn mask_after(text: &str, marker: &str, keep: fn(u8) -> bool) -> String {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(at) = lower[from..].find(marker) {
        let start = from + at + marker.len();
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii() && keep(**b))
                .count();
        if end > start && &text[start..end] != MASK {
            out.push_str(&text[copied..start]);
            out.push_str(MASK);
            copied = end;
        }
        from = end.max(start);
    }
    out.push_str(&text[copied..]);
    out
}

/// At most `limit` bytes, cut at a char boundary, with a marker when cut.
fn truncate(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("…[truncated]");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_secrets_bearer_tokens_and_key_parameters_are_replaced() {
        let s = Secrets::new(["sk-upstream-0123456789", "adm", "admin-token-abcdefgh"]);
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-upstream-0123456789. Authorization: Bearer eyJhbGciOi.x-y_z, see https://h/v1?alt=sse&key=AIzaSyA-secret&x=1; admin-token-abcdefgh (adm)"}}"#;
        let out = s.body(body);
        for secret in [
            "sk-upstream-0123456789",
            "eyJhbGciOi.x-y_z",
            "AIzaSyA-secret",
            "admin-token-abcdefgh",
        ] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert!(out.contains("Bearer [redacted]"), "{out}");
        assert!(out.contains("key=[redacted]&x=1"), "{out}");
        assert!(out.contains("(adm)"), "short values are not secrets: {out}");
    }

    #[test]
    fn long_bodies_are_cut_after_their_secrets_are_gone() {
        let key = "k".repeat(40);
        let s = Secrets::new([key.as_str()]);
        let mut body = "é".repeat(LOG_BODY_BYTES / 2 - 10).into_bytes();
        body.extend_from_slice(key.as_bytes());
        body.extend(vec![b'x'; 100_000]);
        let out = s.body(&body);
        assert!(!out.contains("kkkk"), "no prefix of the key is left");
        assert!(out.len() <= LOG_BODY_BYTES + "…[truncated]".len());
        assert!(out.ends_with("…[truncated]"));
        assert_eq!(s.body(b"\xff short"), "\u{fffd} short");
    }

    #[test]
    fn debug_output_hides_values() {
        assert_eq!(format!("{:?}", Hidden("secret")), "[redacted]");
        assert_eq!(format!("{:?}", Hidden("")), "\"\"");
        assert_eq!(
            url("redis://:pw@127.0.0.1:6379/0"),
            "redis://:[redacted]@127.0.0.1:6379/0"
        );
        assert_eq!(
            url("rediss://user:pw@h:1?x=@"),
            "rediss://user:[redacted]@h:1?x=@"
        );
        assert_eq!(url("redis://h:1"), "redis://h:1");
        assert_eq!(
            format!("{:?}", Secrets::new(["abcdef"])),
            "Secrets(1 hidden)"
        );
    }
}
