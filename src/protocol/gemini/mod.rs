//! The generate-content protocol (`/v1beta/models/{m}:generateContent`, spec 4.18):
//! validation, conversion to and from [`ir`], streams, and same-protocol passthrough with
//! usage capture.
//!
//! The model is named in the URL path, never in the body. The API accepts each field
//! under its JSON name (`inlineData`) or its proto name (`inline_data`); requests are read
//! under both and everything written uses the JSON name.

mod client_request;
mod passthrough;
mod response;
mod stream;
mod upstream_request;
mod validation;
pub mod wire;

#[cfg(test)]
mod tests;

use super::ir::{self, StreamDecoder, StreamEncoder};
use super::{
    Invalid, RequestOptions, ResponseContext, StreamContext, StreamTranslator, TranslateError,
    UpstreamRequest, Usage,
};
use serde_json::Value;

// ---- client side ----

/// Spec 4.18: `contents` (array) required; field types. `param` names the field.
pub fn validate(body: &Value) -> Result<(), Invalid> {
    validation::validate(body)
}

/// A client request for an upstream of another protocol (see `client_request`).
pub fn to_ir(body: Value) -> Result<ir::Request, Invalid> {
    client_request::to_ir(body)
}

/// A whole answer as a `GenerateContentResponse`, named with the client's model.
pub fn render_response(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    response::render_response(resp, ctx)
}

/// Events → the client's stream: SSE chunks with `alt=sse`, else one JSON array.
pub fn encoder(ctx: &StreamContext) -> Box<dyn StreamEncoder> {
    stream::encoder(ctx)
}

/// The terminal error event of a generate-content stream (an `{"error": ...}` chunk).
pub fn error_event(message: &str) -> Vec<u8> {
    wire::error_event(message)
}

// ---- upstream side ----

/// The pivot request as a generate-content request and its path.
pub fn from_ir(req: &ir::Request, opts: &RequestOptions) -> Result<UpstreamRequest, Invalid> {
    upstream_request::from_ir(req, opts)
}

/// A generate-content answer as a pivot response.
pub fn parse_response(body: &[u8]) -> Result<ir::Response, TranslateError> {
    response::parse_response(body)
}

/// A generate-content SSE stream → events.
pub fn decoder() -> Box<dyn StreamDecoder> {
    stream::decoder()
}

// ---- same protocol ----

pub fn passthrough_request(body: Value, opts: &RequestOptions) -> UpstreamRequest {
    passthrough::passthrough_request(body, opts)
}

pub fn passthrough_response(
    body: &[u8],
    client_model: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    passthrough::passthrough_response(body, client_model)
}

pub fn passthrough_stream(ctx: StreamContext) -> Box<dyn StreamTranslator> {
    passthrough::passthrough_stream(ctx)
}
