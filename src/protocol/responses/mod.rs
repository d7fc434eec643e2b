//! The responses protocol (`/v1/responses`, spec 4.4, 4.5, 2.5, 2.6): client side
//! (validation, conversion to [`ir`](super::ir), rendering and streaming of response
//! objects, compaction) and same-protocol passthrough to channels that serve it natively.
//!
//! - `validate`: the 400s every responses request gets, whatever serves it;
//! - `request`: a request → [`ir::Request`](super::ir::Request) for other upstreams;
//! - `response`: [`ir::Response`](super::ir::Response) → response / compaction objects;
//! - `stream`: [`ir::Event`](super::ir::Event)s → the Responses event stream;
//! - `passthrough`: native Responses API channels;
//! - `state`: conversations the gateway stores (`previous_response_id`).

mod passthrough;
mod request;
mod response;
pub mod state;
mod stream;
mod validate;
pub mod wire;

#[cfg(test)]
mod tests;

pub use passthrough::{passthrough_request, passthrough_response, passthrough_stream};
pub use request::{compact_to_ir, to_ir};
pub use response::{render_compaction, render_response};
pub use stream::{encoder, error_event};
pub use validate::validate;

/// Marks a reasoning item's `encrypted_content` as redacted thinking (messages
/// `redacted_thinking` data) rather than the signature of visible thinking: the responses
/// protocol has one field for both, and the two must go back upstream differently.
const REDACTED_PREFIX: &str = "redacted_thinking:";

use super::invalid;
