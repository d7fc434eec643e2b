//! Unit tests of the generate-content adapter, with payloads in the API's wire format.

mod client_request;
mod passthrough;
mod response;
mod stream;
mod upstream_request;
mod usage;

use super::super::{RequestOptions, ResponseContext, StreamContext};

/// Splits `input` into pieces of pseudo-random sizes (1 to 23 bytes), the same for the
/// same seed, to stand for arbitrary network reads.
pub(super) fn pieces(input: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut out = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let n = ((state >> 33) % 23 + 1) as usize;
        let (head, tail) = rest.split_at(n.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

/// Every way the tests cut a stream: whole, byte by byte, and several random splits.
pub(super) fn splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut all = vec![vec![input], input.chunks(1).collect()];
    all.extend((1..=5).map(|seed| pieces(input, seed)));
    all
}

pub(super) fn opts(model: &str, stream: bool) -> RequestOptions<'_> {
    RequestOptions {
        upstream_model: model,
        stream,
        default_max_tokens: 4096,
        chat_limit_field: "max_completion_tokens",
        compact: false,
    }
}

pub(super) fn stream_ctx(sse: bool) -> StreamContext {
    StreamContext {
        client_model: "my-gemini".into(),
        request_id: "req123".into(),
        created: 1_700_000_000,
        client_wants_usage: false,
        client_sse: sse,
        charge: None,
    }
}

pub(super) fn response_ctx() -> ResponseContext<'static> {
    ResponseContext {
        client_model: "my-gemini",
        request_id: "req123",
        created: 1_700_000_000,
        compact: false,
    }
}
