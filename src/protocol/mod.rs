//! Wire protocols and the translations between them. Pure: no I/O, no Pingora types.
//!
//! The relay calls four functions: [`parse_request`] (syntax and required fields, the
//! 400s), [`translate_request`] (client protocol → upstream protocol and path),
//! [`translate_response`] (a whole upstream answer → the client's protocol, with usage)
//! and [`stream_translator`] (a state machine per stream, fed chunk by chunk).

pub mod chat;
pub mod sse;

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
}

/// Token usage normalised across protocols (spec 2.6). `input_tokens` counts all prompt
/// tokens, cached and cache-written ones included.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub reasoning_tokens: u64,
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
    NotJson,
    Shape(&'static str),
}

pub struct RequestOptions<'a> {
    /// The model name sent upstream (after the channel's model map).
    pub upstream_model: &'a str,
    pub stream: bool,
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
}

pub struct StreamContext {
    pub client_model: String,
    pub request_id: String,
    pub created: i64,
    pub client_wants_usage: bool,
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
}

fn unsupported(client: Protocol, upstream: Protocol) -> Invalid {
    Invalid {
        param: None,
        message: format!(
            "Translating {client:?} requests to a {upstream:?} upstream is not supported."
        ),
    }
}

/// Parses and validates a client request body.
pub fn parse_request(client: Protocol, body: &[u8]) -> Result<Value, Invalid> {
    let v: Value = serde_json::from_slice(body).map_err(|e| Invalid {
        param: None,
        message: format!("The request body is not valid JSON: {e}."),
    })?;
    match client {
        Protocol::Chat => chat::validate(&v)?,
        Protocol::Messages | Protocol::Gemini | Protocol::Responses => {
            if !v.is_object() {
                return Err(Invalid {
                    param: None,
                    message: "The request body must be a JSON object.".into(),
                });
            }
        }
    }
    Ok(v)
}

pub fn translate_request(
    client: Protocol,
    upstream: Protocol,
    body: Value,
    opts: &RequestOptions,
) -> Result<UpstreamRequest, Invalid> {
    match (client, upstream) {
        (Protocol::Chat, Protocol::Chat) => {
            let (body, client_wants_usage) =
                chat::passthrough_request(body, opts.upstream_model, opts.stream);
            Ok(UpstreamRequest {
                body,
                path: "/v1/chat/completions".into(),
                client_wants_usage,
            })
        }
        (c, u) => Err(unsupported(c, u)),
    }
}

pub fn translate_response(
    upstream: Protocol,
    client: Protocol,
    body: &[u8],
    ctx: &ResponseContext,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    match (upstream, client) {
        (Protocol::Chat, Protocol::Chat) => chat::passthrough_response(body, ctx.client_model),
        _ => Err(TranslateError::Shape("unsupported protocol pair")),
    }
}

pub fn stream_translator(
    upstream: Protocol,
    client: Protocol,
    ctx: StreamContext,
) -> Box<dyn StreamTranslator> {
    match (upstream, client) {
        (Protocol::Chat, Protocol::Chat) => Box::new(chat::Passthrough::new(ctx)),
        // translate_request refuses every other pair before a stream can start.
        _ => Box::new(chat::Passthrough::new(ctx)),
    }
}

/// The terminal error event of a client protocol's stream.
pub fn stream_error_event(client: Protocol, message: &str) -> Vec<u8> {
    match client {
        Protocol::Chat | Protocol::Messages | Protocol::Gemini | Protocol::Responses => {
            chat::error_event(message)
        }
    }
}
