//! Wire protocols and the translations between them. Pure: no I/O, no Pingora types.
//!
//! The relay calls four functions: [`parse_request`] (syntax and required fields, the
//! 400s), [`translate_request`] (client protocol → upstream protocol and path),
//! [`translate_response`] (a whole upstream answer → the client's protocol, with usage)
//! and [`stream_translator`] (a state machine per stream, fed chunk by chunk).

pub mod chat;
pub mod converse;
mod cost;
pub mod gemini;
pub mod ir;
mod lenient;
pub mod limit;
pub mod messages;
pub mod responses;
pub mod shallow;
pub mod sse;
#[cfg(test)]
mod stream_tests;
mod translate;

use serde_json::Value;

/// A wire protocol, on either side of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// The default chat protocol (Chat Completions).
    Chat,
    /// The messages protocol (`/v1/messages`).
    Messages,
    /// The generate-content protocol (`/v1beta/models/{m}:generateContent`).
    Gemini,
    /// The responses protocol (`/v1/responses`).
    Responses,
    /// Amazon Bedrock's Converse API (`/model/{id}/converse`), upstream only: no client
    /// speaks it, and every client-side entry point refuses it.
    Converse,
}

/// Token usage normalised across protocols (spec 2.6), by the kinds vendors price apart.
/// `input_tokens` counts all prompt tokens, and `output_tokens` all generated ones; the
/// other counts are shares of one of them (each within its total), or units of their own.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input read from a prompt cache.
    pub cached_input_tokens: u64,
    /// Input written to a prompt cache, at any lifetime (1-hour writes included).
    pub cache_creation_input_tokens: u64,
    /// The share of the cache writes kept for an hour (Anthropic `ephemeral_1h_input_tokens`).
    pub cache_write_1h_tokens: u64,
    /// Output spent thinking (OpenAI `reasoning_tokens`, Gemini `thoughtsTokenCount`).
    pub reasoning_tokens: u64,
    /// Input and output that were audio (OpenAI `audio_tokens`, Gemini's `AUDIO` modality).
    /// The input shares leave out what was read from a cache when the vendor says how
    /// much of it was audio or image (Realtime, Gemini): a cached token is priced as one.
    pub audio_input_tokens: u64,
    pub audio_output_tokens: u64,
    /// Input and output that were images (gpt-image `image_tokens`).
    pub image_input_tokens: u64,
    pub image_output_tokens: u64,
    /// Server-side web searches the upstream ran (Anthropic `server_tool_use`), billed per
    /// request.
    pub web_search_requests: u64,
}

impl Usage {
    /// Adds another report's counts (a realtime session's responses, summed).
    pub fn add(&mut self, o: &Usage) {
        let Usage {
            input_tokens,
            output_tokens,
            cached_input_tokens,
            cache_creation_input_tokens,
            cache_write_1h_tokens,
            reasoning_tokens,
            audio_input_tokens,
            audio_output_tokens,
            image_input_tokens,
            image_output_tokens,
            web_search_requests,
        } = *o;
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.input_tokens, input_tokens);
        add(&mut self.output_tokens, output_tokens);
        add(&mut self.cached_input_tokens, cached_input_tokens);
        add(
            &mut self.cache_creation_input_tokens,
            cache_creation_input_tokens,
        );
        add(&mut self.cache_write_1h_tokens, cache_write_1h_tokens);
        add(&mut self.reasoning_tokens, reasoning_tokens);
        add(&mut self.audio_input_tokens, audio_input_tokens);
        add(&mut self.audio_output_tokens, audio_output_tokens);
        add(&mut self.image_input_tokens, image_input_tokens);
        add(&mut self.image_output_tokens, image_output_tokens);
        add(&mut self.web_search_requests, web_search_requests);
    }
}

/// A client request the spec rejects (400); `param` names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub param: Option<String>,
    pub message: String,
}

/// An upstream answer that is not what its protocol promises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranslateError {
    /// Not JSON; the parser's error (its `source()`) says where.
    NotJson(JsonError),
    Shape(&'static str),
}

/// The parser's error beneath [`TranslateError::NotJson`]: shared, so the error stays
/// `Clone`, and equal to another that says the same (tests compare translation errors).
#[derive(Debug, Clone)]
pub struct JsonError(std::sync::Arc<serde_json::Error>);

impl PartialEq for JsonError {
    fn eq(&self, other: &JsonError) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for JsonError {}

impl From<serde_json::Error> for TranslateError {
    fn from(e: serde_json::Error) -> TranslateError {
        TranslateError::NotJson(JsonError(std::sync::Arc::new(e)))
    }
}

impl std::fmt::Display for TranslateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TranslateError::NotJson(_) => f.write_str("not JSON"),
            TranslateError::Shape(what) => write!(f, "not the protocol's shape: {what}"),
        }
    }
}

impl std::error::Error for TranslateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TranslateError::NotJson(e) => Some(&*e.0),
            TranslateError::Shape(_) => None,
        }
    }
}

pub struct RequestOptions<'a> {
    /// The model name sent upstream (after the channel's model map).
    pub upstream_model: &'a str,
    pub stream: bool,
    /// The output limit to send when the request names none and the upstream protocol
    /// requires one (messages `max_tokens`): the limit the reservation was sized for.
    pub default_max_tokens: u64,
    /// How a chat upstream spells the output limit: `max_completion_tokens` (current
    /// models) or `max_tokens` (servers that know only that one). A channel option.
    pub chat_limit_field: &'a str,
    /// `/v1/responses/compact` (spec 4.5).
    pub compact: bool,
}

pub struct UpstreamRequest {
    pub body: Vec<u8>,
    /// Path and query after the channel's base URL.
    pub path: String,
    /// Chat streams: whether the client itself asked for `stream_options.include_usage`.
    pub client_wants_usage: bool,
}

pub struct ResponseContext<'a> {
    pub client_model: &'a str,
    pub request_id: &'a str,
    pub created: i64,
    /// `/v1/responses/compact`: the answer is a `response.compaction` object.
    pub compact: bool,
}

#[derive(Debug, Clone)]
pub struct StreamContext {
    pub client_model: String,
    pub request_id: String,
    pub created: i64,
    /// Chat clients: whether the client asked for the usage chunk.
    pub client_wants_usage: bool,
    /// Generate-content clients: `alt=sse` (server-sent events); without it the stream is
    /// a JSON array written element by element.
    pub client_sse: bool,
    /// What the key is charged for a usage report: when set, the usage object of the
    /// stream's usage event carries it as `cost_usd` (README, "The cost on the answer").
    pub charge: Option<ChargeOf>,
}

/// The relay's pricing of a usage report: micro-USD charged to the key (the key's
/// multiplier applied, never above what was reserved). Protocols only print it.
#[derive(Clone)]
pub struct ChargeOf(pub std::sync::Arc<dyn Fn(&Usage) -> i64 + Send + Sync>);

impl std::fmt::Debug for ChargeOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChargeOf")
    }
}

impl ChargeOf {
    pub fn of(&self, u: &Usage) -> i64 {
        (self.0)(u)
    }
}

/// `n` in decimal digits, written at the end of `buf` (without `format!`, for the
/// per-request headers and texts that showed it in the profile).
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Micro-USD as a decimal number of USD, exact (`435` → `0.000435`): the form of the
/// cost header and of `cost_usd` in usage objects.
pub fn usd_text(micros: i64) -> String {
    // Written digit by digit into one buffer: it goes on every answer of a key with a
    // budget (three times), where `format!` showed in the profile.
    let m = micros.unsigned_abs();
    let mut digits = [0u8; 20];
    let mut out = String::with_capacity(28);
    if micros < 0 {
        out.push('-');
    }
    out.extend(
        decimal(m / 1_000_000, &mut digits)
            .iter()
            .map(|&d| char::from(d)),
    );
    let mut frac = m % 1_000_000;
    if frac != 0 {
        out.push('.');
        let mut place = 100_000;
        while frac != 0 {
            out.push(char::from(b'0' + (frac / place) as u8));
            frac %= place;
            place /= 10;
        }
    }
    out
}

/// [`usd_text`] as a JSON number (for a usage object's `cost_usd`).
pub fn usd_json(micros: i64) -> Value {
    serde_json::from_str(&usd_text(micros)).unwrap_or(Value::Null)
}

/// A stream's state machine: upstream bytes in, client bytes out.
pub trait StreamTranslator: Send {
    /// Upstream bytes in (any split); bytes for the client appended to `out`.
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>);
    /// The upstream stream ended; `error` is set (sanitized, with the request id) when it
    /// broke. Appends what the client needs to finish: never a hang, never half an event.
    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>);
    /// Usage reported so far.
    fn usage(&self) -> Usage;
    /// Bytes of generated output the stream has carried to the client so far: the text,
    /// reasoning and tool-call arguments (decoded, without the protocol's framing). An
    /// upper bound of the output tokens at one token per byte, to bill a stream whose
    /// upstream reported no usage.
    fn delivered_bytes(&self) -> u64;
}

/// The answer of a client-side entry point asked about an upstream-only protocol.
fn not_a_client(p: Protocol) -> Invalid {
    Invalid {
        param: None,
        message: format!("{p:?} is not a protocol clients speak to the gateway."),
    }
}

fn unsupported(client: Protocol, upstream: Protocol) -> Invalid {
    Invalid {
        param: None,
        message: format!(
            "Translating {client:?} requests to a {upstream:?} upstream is not supported."
        ),
    }
}

/// A 400 naming `param`.
pub(crate) fn invalid(param: impl AsRef<str>, message: impl Into<String>) -> Invalid {
    Invalid {
        param: Some(param.as_ref().to_string()),
        message: message.into(),
    }
}

/// The body as a JSON object, or the 400 every protocol answers when it is not one.
pub(crate) fn body_object(body: &Value) -> Result<&serde_json::Map<String, Value>, Invalid> {
    body.as_object().ok_or_else(|| Invalid {
        param: None,
        message: "The request body must be a JSON object.".into(),
    })
}

/// `model` as the JSON protocols require it: a non-empty string.
pub(crate) fn check_model(model: Option<&Value>) -> Result<(), Invalid> {
    match model {
        Some(Value::String(m)) if !m.is_empty() => Ok(()),
        Some(_) => Err(invalid("model", "`model` must be a non-empty string.")),
        None => Err(invalid("model", "`model` is required.")),
    }
}

/// Same-protocol requests: the body as it came, with only the model renamed.
pub(crate) fn with_model(mut body: Value, model: &str) -> Vec<u8> {
    if let Some(obj) = body.as_object_mut() {
        obj.insert("model".into(), Value::String(model.to_string()));
    }
    serde_json::to_vec(&body).unwrap_or_default()
}

/// An upstream's answer read one level deep (same-protocol answers are relayed from
/// this: only the members the gateway changes are rewritten, the rest copied as sent).
pub(crate) fn answer_shallow(body: &[u8]) -> Result<shallow::Shallow<'_>, TranslateError> {
    match serde_json::from_slice::<shallow::Shallow<'_>>(body) {
        Ok(top) => Ok(top),
        Err(_) if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() => {
            Err(TranslateError::Shape("not an object"))
        }
        Err(e) => Err(e.into()),
    }
}

/// Same-protocol answers: the upstream body as a JSON object.
pub(crate) fn answer_object(body: &[u8]) -> Result<Value, TranslateError> {
    let v: Value = serde_json::from_slice(body)?;
    if v.is_object() {
        Ok(v)
    } else {
        Err(TranslateError::Shape("not an object"))
    }
}

/// Parses and validates a client request body (the 400s, before anything is reserved).
pub fn parse_request(client: Protocol, body: &[u8]) -> Result<Value, Invalid> {
    let v: Value = serde_json::from_slice(body).map_err(|e| Invalid {
        param: None,
        message: format!("The request body is not valid JSON: {e}."),
    })?;
    if !v.is_object() {
        return Err(Invalid {
            param: None,
            message: "The request body must be a JSON object.".into(),
        });
    }
    match client {
        Protocol::Chat => chat::validate(&v)?,
        Protocol::Messages => messages::validate(&v)?,
        Protocol::Gemini => gemini::validate(&v)?,
        Protocol::Responses => responses::validate(&v)?,
        Protocol::Converse => return Err(not_a_client(client)),
    }
    Ok(v)
}

/// The output limit the client asked for, by its protocol's rule (`None`: it named none).
pub fn output_limit(p: Protocol, body: &Value) -> Option<u64> {
    match p {
        Protocol::Chat => chat::wire::output_limit(body),
        Protocol::Messages => body.as_object().and_then(messages::wire::output_limit),
        Protocol::Gemini => gemini::wire::output_limit(body),
        Protocol::Responses => body.as_object().and_then(responses::wire::output_limit),
        Protocol::Converse => None,
    }
}

/// How many answers the request asks for (each is billed, so each is reserved).
pub fn choices(p: Protocol, body: &Value) -> u64 {
    match p {
        Protocol::Chat => chat::wire::choices(body),
        Protocol::Gemini => gemini::wire::choices(body),
        Protocol::Messages | Protocol::Responses | Protocol::Converse => 1,
    }
}

/// Lowers (never raises) the request's output limit to `cap` in the member(s) its
/// protocol uses, adding it when absent, so no upstream writes more than was reserved.
/// `chat_field`: the member a chat upstream reads the limit from.
pub fn set_output_limit(
    p: Protocol,
    body: &mut Value,
    cap: u64,
    chat_field: &str,
) -> Result<(), serde_json::Error> {
    match p {
        Protocol::Chat => limit::edit(body, |r: &mut chat::wire::Request| {
            r.set_output_limit(cap, chat_field)
        }),
        Protocol::Messages => limit::edit(body, |r: &mut messages::wire::Request| {
            r.set_output_limit(cap)
        }),
        Protocol::Gemini => limit::edit(body, |r: &mut gemini::wire::Request| {
            r.set_output_limit(cap)
        }),
        Protocol::Responses => limit::edit(body, |r: &mut responses::wire::Request| {
            r.set_output_limit(cap)
        }),
        // Upstream only: its requests are written from the neutral one, limit included.
        Protocol::Converse => Ok(()),
    }
}

/// The client's request in the upstream's protocol. Same protocol: passed through with
/// only the model rewritten (unknown fields survive). Otherwise: through [`ir`].
pub fn translate_request(
    client: Protocol,
    upstream: Protocol,
    body: Value,
    opts: &RequestOptions,
) -> Result<UpstreamRequest, Invalid> {
    if client == upstream {
        return Ok(match client {
            Protocol::Chat => chat::passthrough_request(body, opts),
            Protocol::Messages => messages::passthrough_request(body, opts),
            Protocol::Gemini => gemini::passthrough_request(body, opts),
            Protocol::Responses => responses::passthrough_request(body, opts),
            Protocol::Converse => return Err(not_a_client(client)),
        });
    }
    // The messages protocol's cache marks, which the neutral request does not carry.
    let cache_marks = if client == Protocol::Messages && upstream == Protocol::Converse {
        converse::cache_marks(&body)
    } else {
        converse::CacheMarks::default()
    };
    let client_wants_usage = client == Protocol::Chat && chat::wire::wants_usage(&body);
    let req = match client {
        Protocol::Chat => chat::to_ir(body)?,
        Protocol::Messages => messages::to_ir(body)?,
        Protocol::Gemini => gemini::to_ir(body)?,
        Protocol::Responses if opts.compact => responses::compact_to_ir(body)?,
        Protocol::Responses => responses::to_ir(body)?,
        Protocol::Converse => return Err(not_a_client(client)),
    };
    let mut out = match upstream {
        Protocol::Chat => chat::from_ir(&req, opts)?,
        Protocol::Messages => messages::from_ir(&req, opts)?,
        Protocol::Gemini => gemini::from_ir(&req, opts)?,
        Protocol::Converse => converse::from_ir(&req, opts, &cache_marks)?,
        Protocol::Responses => return Err(unsupported(client, upstream)),
    };
    out.client_wants_usage = client_wants_usage;
    Ok(out)
}

/// A whole upstream answer in the client's protocol, and the usage it reports.
pub fn translate_response(
    upstream: Protocol,
    client: Protocol,
    body: &[u8],
    ctx: &ResponseContext,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    if upstream == client {
        return match client {
            Protocol::Chat => chat::passthrough_response(body, ctx.client_model),
            Protocol::Messages => messages::passthrough_response(body, ctx.client_model),
            Protocol::Gemini => gemini::passthrough_response(body, ctx.client_model),
            Protocol::Responses => {
                responses::passthrough_response(body, ctx.client_model, ctx.request_id)
            }
            Protocol::Converse => Err(TranslateError::Shape("not a client protocol")),
        };
    }
    let resp = match upstream {
        Protocol::Chat => chat::parse_response(body)?,
        Protocol::Messages => messages::parse_response(body)?,
        Protocol::Gemini => gemini::parse_response(body)?,
        Protocol::Converse => converse::parse_response(body)?,
        Protocol::Responses => return Err(TranslateError::Shape("unsupported protocol pair")),
    };
    let out = match client {
        Protocol::Chat => chat::render_response(&resp, ctx),
        Protocol::Messages => messages::render_response(&resp, ctx),
        Protocol::Gemini => gemini::render_response(&resp, ctx),
        Protocol::Responses if ctx.compact => responses::render_compaction(&resp, ctx),
        Protocol::Responses => responses::render_response(&resp, ctx),
        Protocol::Converse => return Err(TranslateError::Shape("not a client protocol")),
    };
    Ok((out, resp.usage))
}

/// The state machine for one stream, upstream bytes in, client bytes out.
pub fn stream_translator(
    upstream: Protocol,
    client: Protocol,
    ctx: StreamContext,
) -> Box<dyn StreamTranslator> {
    if client == Protocol::Converse {
        return Box::new(NotAClient);
    }
    if upstream == client {
        return match client {
            Protocol::Chat => Box::new(chat::Passthrough::new(ctx)),
            Protocol::Messages => messages::passthrough_stream(ctx),
            Protocol::Gemini => gemini::passthrough_stream(ctx),
            Protocol::Responses => responses::passthrough_stream(ctx),
            Protocol::Converse => Box::new(NotAClient),
        };
    }
    let decoder = match upstream {
        Protocol::Chat => chat::decoder(),
        Protocol::Messages => messages::decoder(),
        Protocol::Gemini => gemini::decoder(),
        Protocol::Converse => converse::decoder(),
        // translate_request refuses this pair before a stream can start.
        Protocol::Responses => chat::decoder(),
    };
    let encoder = match client {
        Protocol::Chat => chat::encoder(&ctx),
        Protocol::Messages => messages::encoder(&ctx),
        Protocol::Gemini => gemini::encoder(&ctx),
        Protocol::Responses => responses::encoder(&ctx),
        Protocol::Converse => return Box::new(NotAClient),
    };
    Box::new(translate::Translated::new(decoder, encoder, ctx.request_id))
}

/// The terminal error event of a client protocol's stream.
pub fn stream_error_event(client: Protocol, message: &str) -> Vec<u8> {
    match client {
        Protocol::Chat => chat::error_event(message),
        Protocol::Messages => messages::error_event(message),
        Protocol::Gemini => gemini::error_event(message),
        Protocol::Responses => responses::error_event(message),
        // Never a client's: the default error event.
        Protocol::Converse => chat::error_event(message),
    }
}

/// The stream of a client of an upstream-only protocol, which the relay never starts
/// ([`parse_request`] refuses the protocol first): it answers nothing but its end, an
/// error.
struct NotAClient;

impl StreamTranslator for NotAClient {
    fn feed(&mut self, _chunk: &[u8], _out: &mut Vec<u8>) {}

    fn finish(&mut self, _error: Option<&str>, out: &mut Vec<u8>) {
        out.extend(chat::error_event(
            "Converse is not a protocol clients speak to the gateway.",
        ));
    }

    fn usage(&self) -> Usage {
        Usage::default()
    }

    fn delivered_bytes(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod usd_text_tests {
    use super::{decimal, usd_text};
    use proptest::prelude::*;

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 65_536, 1_048_576, u64::MAX] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }

    #[test]
    fn dollars_with_the_fraction_trimmed() {
        assert_eq!(usd_text(0), "0");
        assert_eq!(usd_text(1), "0.000001");
        assert_eq!(usd_text(10), "0.00001");
        assert_eq!(usd_text(1_000_000), "1");
        assert_eq!(usd_text(1_500_000), "1.5");
        assert_eq!(usd_text(123_456_789), "123.456789");
        assert_eq!(usd_text(-2_050_000), "-2.05");
        assert_eq!(usd_text(i64::MIN), "-9223372036854.775808");
        assert_eq!(usd_text(i64::MAX), "9223372036854.775807");
    }

    proptest! {
        /// The text reads back as the same number of micro-dollars.
        #[test]
        fn reads_back_as_the_same_amount(m in any::<i64>()) {
            let t = usd_text(m);
            let (whole, frac) = t.trim_start_matches('-').split_once('.').unwrap_or((t.trim_start_matches('-'), ""));
            prop_assert!(!frac.ends_with('0') && frac.len() <= 6);
            let back = whole.parse::<i128>().unwrap() * 1_000_000
                + format!("{frac:0<6}").parse::<i128>().unwrap();
            prop_assert_eq!(if m < 0 { -back } else { back }, i128::from(m));
        }
    }
}
