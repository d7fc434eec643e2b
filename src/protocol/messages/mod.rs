//! The messages protocol (`/v1/messages`, spec 4.17): validation, conversion to and
//! from [`ir`], streams, and same-protocol passthrough with usage capture.

use super::ir::{self, StreamDecoder, StreamEncoder};
use super::{
    Invalid, RequestOptions, ResponseContext, StreamContext, StreamTranslator, TranslateError,
    UpstreamRequest, Usage,
};
use serde_json::Value;

// ---- client side ----

/// Spec 4.17 and 8: `model`, `messages`, `max_tokens` >= 1 required; roles
/// `user|assistant`; `temperature` in 0..=1; field types. `param` names the field.
pub fn validate(body: &Value) -> Result<(), Invalid> {
    todo!()
}
pub fn to_ir(body: Value) -> Result<ir::Request, Invalid> {
    todo!()
}
pub fn render_response(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    todo!()
}
pub fn encoder(ctx: &StreamContext) -> Box<dyn StreamEncoder> {
    todo!()
}
/// The terminal error event of a messages stream (`event: error`).
pub fn error_event(message: &str) -> Vec<u8> {
    todo!()
}

// ---- upstream side ----

pub fn from_ir(req: &ir::Request, opts: &RequestOptions) -> Result<UpstreamRequest, Invalid> {
    todo!()
}
pub fn parse_response(body: &[u8]) -> Result<ir::Response, TranslateError> {
    todo!()
}
pub fn decoder() -> Box<dyn StreamDecoder> {
    todo!()
}

// ---- same protocol ----

pub fn passthrough_request(body: Value, opts: &RequestOptions) -> UpstreamRequest {
    todo!()
}
pub fn passthrough_response(
    body: &[u8],
    client_model: &str,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    todo!()
}
pub fn passthrough_stream(ctx: StreamContext) -> Box<dyn StreamTranslator> {
    todo!()
}
