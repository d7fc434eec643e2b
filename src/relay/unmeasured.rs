//! Inputs the gateway cannot measure from the request body: content stored at the
//! provider and named by reference. Its size is unknown before the call, so no worst case
//! can be reserved for it; a key with a spending cap cannot use it (spec 2.1: the cap
//! holds). Keys without a cap are not affected.

use crate::errors::GatewayError;
use serde_json::Value;

/// Member names that refer to content held elsewhere, anywhere in the body.
const BY_REFERENCE: &[&str] = &[
    // responses: the conversation so far, stored by the provider (with the gateway's own
    // storage on, the relay has replaced it by the conversation itself before this check)
    "previous_response_id",
    // chat, responses, messages: uploaded files
    "file_id",
    // responses: a file by URL
    "file_url",
    // generate-content: files by URI, and cached context
    "fileUri",
    "file_uri",
    "cachedContent",
    "cached_content",
];

/// The first member of `body` that refers to unmeasurable content, by name.
pub fn find(raw: &[u8]) -> Option<&'static str> {
    // Cheap refusal of the common case: none of the names appears in the bytes at all.
    // The searchers are built once, not per request.
    static SEARCHERS: std::sync::LazyLock<Vec<memchr::memmem::Finder<'static>>> =
        std::sync::LazyLock::new(|| {
            BY_REFERENCE
                .iter()
                .chain(&["document"])
                .map(|n| memchr::memmem::Finder::new(n.as_bytes()))
                .collect()
        });
    if !SEARCHERS.iter().any(|f| f.find(raw).is_some()) {
        return None;
    }
    let v: Value = serde_json::from_slice(raw).ok()?;
    walk(&v, 0)
}

/// A 400 naming the member, for a key with a cap.
pub fn check(raw: &[u8], capped: bool) -> Result<(), GatewayError> {
    if !capped {
        return Ok(());
    }
    match find(raw) {
        None => Ok(()),
        Some(name) => Err(GatewayError::bad_request(
            Some(name),
            format!(
                "`{name}` refers to content whose size the gateway cannot measure before the call; a key with a spending cap cannot use it. Send the content itself instead."
            ),
        )),
    }
}

fn walk(v: &Value, depth: usize) -> Option<&'static str> {
    if depth > 64 {
        return None;
    }
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if let Some(name) = BY_REFERENCE.iter().find(|n| **n == k.as_str()) {
                    if !child.is_null() {
                        return Some(name);
                    }
                }
            }
            // messages: a document block whose source is a URL.
            if m.get("type").and_then(Value::as_str) == Some("document")
                && m.get("source")
                    .and_then(|s| s.get("type"))
                    .and_then(Value::as_str)
                    == Some("url")
            {
                return Some("source.url");
            }
            m.values().find_map(|c| walk(c, depth + 1))
        }
        Value::Array(a) => a.iter().find_map(|c| walk(c, depth + 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reference_is_found() {
        let cases = [
            (
                r#"{"previous_response_id":"resp_1","input":"x"}"#,
                "previous_response_id",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f"}}]}]}"#,
                "file_id",
            ),
            (
                r#"{"contents":[{"parts":[{"fileData":{"fileUri":"gs://x"}}]}]}"#,
                "fileUri",
            ),
            (
                r#"{"cachedContent":"cachedContents/1","contents":[]}"#,
                "cachedContent",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://x"}}]}]}"#,
                "source.url",
            ),
            (
                r#"{"input":[{"role":"user","content":[{"type":"input_file","file_url":"https://x"}]}]}"#,
                "file_url",
            ),
        ];
        for (body, name) in cases {
            assert_eq!(find(body.as_bytes()), Some(name), "{body}");
            let e = check(body.as_bytes(), true).unwrap_err();
            assert_eq!(e.status(), 400);
            assert!(check(body.as_bytes(), false).is_ok(), "uncapped keys may");
        }
    }

    #[test]
    fn measurable_bodies_pass() {
        for body in [
            r#"{"messages":[{"role":"user","content":"a document about file_id"}]}"#,
            r#"{"previous_response_id":null,"input":"x"}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","data":"AA=="}}]}]}"#,
        ] {
            assert_eq!(find(body.as_bytes()), None, "{body}");
        }
    }
}
