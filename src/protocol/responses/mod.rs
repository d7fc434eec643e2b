//! The responses protocol (`/v1/responses`, spec 4.4, 4.5, 2.5, 2.6): client side
//! (validation, conversion to [`ir`], rendering and streaming of response objects,
//! compaction) and same-protocol passthrough to channels that serve it natively.

use super::ir::{self, StreamDecoder, StreamEncoder};
use super::{
    Invalid, RequestOptions, ResponseContext, StreamContext, StreamTranslator, TranslateError,
    UpstreamRequest, Usage,
};
use serde_json::Value;

// ---- client side ----

/// Spec 4.4/4.5: `model` required; field types. `param` names the field.
pub fn validate(body: &Value) -> Result<(), Invalid> {
    todo!()
}
pub fn to_ir(body: Value) -> Result<ir::Request, Invalid> {
    todo!()
}
/// `/v1/responses/compact` for an upstream without a native Responses API.
pub fn compact_to_ir(body: Value) -> Result<ir::Request, Invalid> {
    todo!()
}
pub fn render_response(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    todo!()
}
pub fn render_compaction(resp: &ir::Response, ctx: &ResponseContext) -> Vec<u8> {
    todo!()
}
pub fn encoder(ctx: &StreamContext) -> Box<dyn StreamEncoder> {
    todo!()
}
pub fn error_event(message: &str) -> Vec<u8> {
    todo!()
}

// ---- same protocol (native Responses API channels) ----

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
