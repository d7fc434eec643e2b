//! The default chat protocol (Chat Completions): validation, same-protocol passthrough
//! of requests, responses and streams with usage capture, and conversion to and from
//! [`ir`](super::ir) for the other protocols, on both sides of the gateway:
//!
//! - a chat client: [`to_ir`] (its request), [`render_response`] and [`encoder`] (the
//!   answer, whole or streamed);
//! - a chat upstream: [`from_ir`] (the request it gets), [`parse_response`] and
//!   [`decoder`] (its answer, whole or streamed).

mod decode;
mod delivered;
mod encode;
mod from_ir;
mod passthrough;
mod response;
mod scan;
#[cfg(test)]
mod testutil;
mod to_ir;
mod usage;
#[cfg(test)]
#[path = "usage_tests.rs"]
mod usage_tests;
pub mod wire;

pub use decode::decoder;
pub use encode::encoder;
pub use from_ir::from_ir;
pub use passthrough::Passthrough;
pub use response::{parse_response, render_response};
pub use to_ir::to_ir;
pub use usage::usage_raw;

use super::{Invalid, RequestOptions, TranslateError, UpstreamRequest, Usage};
use serde_json::{json, Map, Value};

use super::invalid;
use super::shallow::Shallow;

/// A field, its type check, and the type's name for the message.
type TypedField = (&'static str, fn(&Value) -> bool, &'static str);

/// The common optional fields and the JSON types they must have.
const TYPED: &[TypedField] = &[
    ("stream", Value::is_boolean, "a boolean"),
    ("temperature", Value::is_number, "a number"),
    ("top_p", Value::is_number, "a number"),
    ("max_tokens", Value::is_u64, "a non-negative integer"),
    (
        "max_completion_tokens",
        Value::is_u64,
        "a non-negative integer",
    ),
    ("n", Value::is_u64, "a non-negative integer"),
    ("tools", Value::is_array, "an array"),
    ("stream_options", Value::is_object, "an object"),
];

fn messages_not_array() -> Invalid {
    invalid("messages", "`messages` must be an array.")
}

fn messages_missing() -> Invalid {
    invalid("messages", "`messages` is required.")
}

fn messages_empty() -> Invalid {
    invalid("messages", "`messages` must not be empty.")
}

fn message_not_object(i: usize) -> Invalid {
    invalid(format!("messages[{i}]"), "Each message must be an object.")
}

fn message_without_role(i: usize) -> Invalid {
    invalid(
        format!("messages[{i}].role"),
        "Each message needs a string `role`.",
    )
}

fn message_without_content(i: usize) -> Invalid {
    invalid(
        format!("messages[{i}].content"),
        "Each message needs `content`.",
    )
}

fn mistyped(field: &str, what: &str) -> Invalid {
    invalid(field, format!("`{field}` must be {what}."))
}

/// The most choices one request may ask for (OpenAI documents 128). Each is a whole
/// answer, so an unbounded `n` would be an unbounded bill.
pub const MAX_CHOICES: u64 = 128;

/// `n`, once its type is known to be right: 1 to [`MAX_CHOICES`].
fn check_choices(n: Option<&Value>) -> Result<(), Invalid> {
    match n.and_then(Value::as_u64) {
        Some(n) if !(1..=MAX_CHOICES).contains(&n) => Err(invalid(
            "n",
            format!("`n` must be between 1 and {MAX_CHOICES}; it is {n}."),
        )),
        _ => Ok(()),
    }
}

/// Spec 2.2a: `model` (string) and `messages` (array of objects with `role` and
/// `content`); the common optional fields must have their JSON types.
pub fn validate(body: &Value) -> Result<(), Invalid> {
    let obj = super::body_object(body)?;
    super::check_model(obj.get("model"))?;
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(messages_not_array()),
        None => return Err(messages_missing()),
    };
    if messages.is_empty() {
        return Err(messages_empty());
    }
    for (i, m) in messages.iter().enumerate() {
        let m = m.as_object().ok_or_else(|| message_not_object(i))?;
        if !matches!(m.get("role"), Some(Value::String(_))) {
            return Err(message_without_role(i));
        }
        if !m.contains_key("content") && !m.contains_key("tool_calls") {
            return Err(message_without_content(i));
        }
    }
    for (field, ok, what) in TYPED {
        if let Some(v) = obj.get(*field) {
            if !v.is_null() && !ok(v) {
                return Err(mistyped(field, what));
            }
        }
    }
    check_choices(obj.get("n"))
}

/// [`validate`] on a body read one level deep: the same checks, in the same order,
/// with the same messages, without owning a copy of the body.
pub fn validate_shallow(top: &Shallow<'_>) -> Result<(), Invalid> {
    super::shallow::check_model(top)?;
    let raw = top.get("messages").ok_or_else(messages_missing)?;
    if !well_shaped(raw) {
        messages_refusal(raw)?;
    }
    for (field, ok, what) in TYPED {
        let Some(raw) = top.get(field) else {
            continue;
        };
        let fine = match *field {
            // Possibly large: judged by their first character.
            "tools" => Shallow::is_array(raw),
            "stream_options" => Shallow::is_object(raw),
            _ => serde_json::from_str::<Value>(raw.get()).is_ok_and(|v| ok(&v)),
        };
        if !Shallow::is_null(raw) && !fine {
            return Err(mistyped(field, what));
        }
    }
    check_choices(top.value("n").as_ref())
}

/// Whether `messages` is a non-empty array of objects each with a string `role` and a
/// `content` or `tool_calls`: one pass over the array ([`MessageShape`]). When it is
/// not, [`messages_refusal`] finds what is wrong and says so.
fn well_shaped(raw: &serde_json::value::RawValue) -> bool {
    serde_json::from_str::<Vec<MessageShape>>(raw.get())
        .is_ok_and(|ms| !ms.is_empty() && ms.iter().all(MessageShape::fine))
}

/// What the check needs of one message, read in the array's pass: an object (never an
/// array, which a derived reading would also take), its last `role` as written, and
/// whether `content` or `tool_calls` is there at all (`null` included).
struct MessageShape {
    role_is_string: bool,
    has_content: bool,
}

impl MessageShape {
    fn fine(&self) -> bool {
        self.role_is_string && self.has_content
    }
}

impl<'de> serde::Deserialize<'de> for MessageShape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MessageShape;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a message object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<MessageShape, A::Error> {
                let mut shape = MessageShape {
                    role_is_string: false,
                    has_content: false,
                };
                while let Some(name) = m.next_key::<super::shallow::Name<'de>>()? {
                    match name.0.as_ref() {
                        "role" => {
                            let v = m.next_value::<&'de serde_json::value::RawValue>()?;
                            shape.role_is_string = Shallow::is_string(v);
                        }
                        "content" | "tool_calls" => {
                            m.next_value::<IgnoredAny>()?;
                            shape.has_content = true;
                        }
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(shape)
            }
        }
        d.deserialize_map(V)
    }
}

/// The refusal of a `messages` that is not well shaped, item by item.
fn messages_refusal(raw: &serde_json::value::RawValue) -> Result<(), Invalid> {
    let messages = if Shallow::is_array(raw) {
        Shallow::items(raw).ok_or_else(messages_not_array)?
    } else {
        return Err(messages_not_array());
    };
    if messages.is_empty() {
        return Err(messages_empty());
    }
    for (i, m) in messages.iter().enumerate() {
        let m = Shallow::object(m).ok_or_else(|| message_not_object(i))?;
        if !m.get("role").is_some_and(Shallow::is_string) {
            return Err(message_without_role(i));
        }
        if !m.contains("content") && !m.contains("tool_calls") {
            return Err(message_without_content(i));
        }
    }
    Ok(())
}

/// [`passthrough_request`] from a body read one level deep: the body is written once,
/// with `model` renamed and, for streams, `stream_options.include_usage` set.
/// `extra`: further members to set (the output limit the reservation pays for).
pub fn passthrough_shallow(
    top: &Shallow<'_>,
    opts: &RequestOptions,
    extra: &[(&str, &str)],
) -> UpstreamRequest {
    let model = Value::String(opts.upstream_model.to_string()).to_string();
    let mut wants_usage = false;
    let mut stream_options = None;
    if opts.stream {
        match top.value("stream_options") {
            None => stream_options = Some(json!({"include_usage": true}).to_string()),
            Some(Value::Object(mut so)) => {
                wants_usage = so
                    .get("include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                so.insert("include_usage".into(), Value::Bool(true));
                stream_options = Some(Value::Object(so).to_string());
            }
            // `null` stays as it is, as in the parsed path.
            Some(_) => {}
        }
    }
    let mut changes = vec![("model", model.as_str())];
    if let Some(so) = &stream_options {
        changes.push(("stream_options", so.as_str()));
    }
    changes.extend_from_slice(extra);
    UpstreamRequest {
        body: top.write(&changes, 0),
        path: "/v1/chat/completions".into(),
        client_wants_usage: wants_usage,
    }
}

/// Same-protocol request: only the model is rewritten, and streams ask for usage.
/// Returns the body and whether the client itself asked for usage.
pub fn passthrough_request(mut body: Value, opts: &RequestOptions) -> UpstreamRequest {
    let mut wants_usage = false;
    if let Some(obj) = body.as_object_mut() {
        if opts.stream {
            let so = obj
                .entry("stream_options")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(so) = so.as_object_mut() {
                wants_usage = so
                    .get("include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                so.insert("include_usage".into(), Value::Bool(true));
            }
        }
    }
    UpstreamRequest {
        body: super::with_model(body, opts.upstream_model),
        path: "/v1/chat/completions".into(),
        client_wants_usage: wants_usage,
    }
}

/// A chat `usage` object, parsed, read through its typed view
/// ([`wire::usage::CompletionUsage`], which says what each count is).
pub fn usage_of(u: &Value) -> Usage {
    use serde::Deserialize;
    wire::usage::CompletionUsage::deserialize(u).map_or_else(|_| Usage::default(), |u| u.to_usage())
}

/// A complete upstream response, shown with the client's model name.
pub fn passthrough_response(
    body: &[u8],
    client_model: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    let top = super::answer_shallow(body)?;
    if !top.contains("choices") {
        return Err(TranslateError::Shape("no choices"));
    }
    let usage = top.get("usage").map(usage_raw).unwrap_or_default();
    let model = serde_json::to_string(client_model)?;
    Ok((top.write(&[("model", &model)], 0), usage))
}

/// The terminal error event of a chat stream; the SDKs raise it as an API error.
pub fn error_event(message: &str) -> Vec<u8> {
    let v = json!({"error": {"message": message, "type": "upstream_error", "param": null, "code": null}});
    format!("data: {v}\n\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A same-protocol answer keeps every member as the upstream wrote it, in its order,
    /// with the client's model name; its usage is read; what is not an answer is refused.
    #[test]
    fn a_chat_answer_is_relayed_as_written_with_the_clients_model() {
        let body = br#"{"id":"c1","object":"chat.completion","model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"h\u00e9 1.50"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}},"x_extra":1.50}"#;
        let (out, usage) = passthrough_response(body, "my \"model\"").unwrap();
        let want = String::from_utf8(body.to_vec())
            .unwrap()
            .replace(r#""model":"up-model""#, r#""model":"my \"model\"""#);
        assert_eq!(String::from_utf8(out).unwrap(), want);
        let counted = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.reasoning_tokens,
        );
        assert_eq!(counted, (7, 3, 2, 1));
        // No model in the answer: the client's is added.
        let (out, _) = passthrough_response(br#"{"choices":[]}"#, "m").unwrap();
        assert_eq!(out, br#"{"choices":[],"model":"m"}"#);
        let refused = |body: &[u8]| passthrough_response(body, "m").err();
        let not_json = refused(b"oops");
        assert!(matches!(not_json, Some(TranslateError::NotJson(_))));
        // The parser's error stays the cause: the relay's log line says where.
        let why = not_json.as_ref().map(|e| crate::store::chain(e));
        assert_eq!(
            why.as_deref(),
            Some("not JSON: expected value at line 1 column 1")
        );
        assert_eq!(
            refused(b"[1]"),
            Some(TranslateError::Shape("not an object"))
        );
        assert_eq!(
            refused(br#"{"error":{}}"#),
            Some(TranslateError::Shape("no choices"))
        );
    }

    /// The shallow reading answers every body exactly as the parsed one does.
    #[test]
    fn shallow_validation_matches_the_parsed_one() {
        let bodies = [
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","messages":[{"role":"assistant","tool_calls":[]}],"stream":true,"tools":[],"stream_options":null}"#,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":7,"messages":[]}"#,
            r#"{"model":"m"}"#,
            r#"{"model":"m","messages":{}}"#,
            r#"{"model":"m","messages":[]}"#,
            r#"{"model":"m","messages":[1]}"#,
            r#"{"model":"m","messages":[{"content":"x"}]}"#,
            r#"{"model":"m","messages":[{"role":5,"content":"x"}]}"#,
            r#"{"model":"m","messages":[{"role":"user"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.5}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":128}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":129}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":1000000000}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":0}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":null}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":[]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_p":null}"#,
            // The one-pass reading of the messages: an array is not a message, the last
            // `role` counts, a `null` content is there, an escaped name is its name.
            r#"{"model":"m","messages":[["user","x"]]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"x"},"s"]}"#,
            r#"{"model":"m","messages":[{"role":"user","role":5,"content":"x"}]}"#,
            r#"{"model":"m","messages":[{"role":5,"role":"user","content":"x"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":null}]}"#,
            r#"{"model":"m","messages":[{"role":null,"content":"x"}]}"#,
            r#"{"model":"m","messages":[{"r\u006fle":"user","c\u006fntent":"x"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","tool_calls":null},{"role":"tool"}]}"#,
            r#"{"model":"m","messages":null}"#,
        ];
        for b in bodies {
            let parsed: Value = serde_json::from_str(b).unwrap();
            let top = Shallow::parse(b.as_bytes()).unwrap();
            assert_eq!(validate(&parsed), validate_shallow(&top), "{b}");
        }
    }

    /// Written once from the shallow reading, the body is what the parsed path sends.
    #[test]
    fn shallow_passthrough_matches_the_parsed_one() {
        let bodies = [
            r#"{"model":"m","messages":[{"role":"user","content":"a \"quoted\" \u00e9"}],"x-unknown":{"k":[1,2]}}"#,
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":{"other":1},"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":null,"messages":[]}"#,
        ];
        for b in bodies {
            for stream in [false, true] {
                let opts = RequestOptions {
                    upstream_model: "up-model",
                    stream,
                    default_max_tokens: 16,
                    chat_limit_field: "max_completion_tokens",
                    compact: false,
                };
                let parsed = passthrough_request(serde_json::from_str(b).unwrap(), &opts);
                let shallow =
                    passthrough_shallow(&Shallow::parse(b.as_bytes()).unwrap(), &opts, &[]);
                // The same JSON, members in the same order; the shallow body keeps the
                // client's own spelling of the values it did not change.
                let as_text = |body: &[u8]| {
                    serde_json::to_string(&serde_json::from_slice::<Value>(body).unwrap()).unwrap()
                };
                assert_eq!(
                    as_text(&shallow.body),
                    as_text(&parsed.body),
                    "{b} stream={stream}"
                );
                assert_eq!(shallow.client_wants_usage, parsed.client_wants_usage);
            }
        }
    }

    #[test]
    fn validation_names_fields() {
        let p = |v: Value| validate(&v).unwrap_err().param;
        assert_eq!(p(json!({"messages": []})), Some("model".into()));
        assert_eq!(p(json!({"model": "m"})), Some("messages".into()));
        assert_eq!(
            p(json!({"model": "m", "messages": [{"content": "x"}]})),
            Some("messages[0].role".into())
        );
        assert_eq!(
            p(
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"})
            ),
            Some("stream".into())
        );
        assert!(
            validate(&json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}))
                .is_ok()
        );
        let n = |n: u64| {
            validate(&json!({"model": "m", "n": n, "messages": [{"role": "user", "content": "x"}]}))
        };
        assert_eq!(n(1_000_000_000).unwrap_err().param, Some("n".into()));
        assert_eq!(n(0).unwrap_err().param, Some("n".into()));
        assert!(n(128).is_ok() && n(1).is_ok());
    }

    #[test]
    fn passthrough_asks_for_usage() {
        let opts = RequestOptions {
            upstream_model: "b",
            stream: true,
            default_max_tokens: 100,
            chat_limit_field: "max_completion_tokens",
            compact: false,
        };
        let r = passthrough_request(json!({"model": "a", "stream": true}), &opts);
        let (v, wants): (Value, bool) = (
            serde_json::from_slice(&r.body).unwrap(),
            r.client_wants_usage,
        );
        assert_eq!(v["model"], "b");
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert!(!wants);
    }
}
