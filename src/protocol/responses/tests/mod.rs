//! Tests of the responses protocol, by concern, with realistic wire payloads.

mod passthrough;
mod request;
mod response;
mod stream;
mod usage;
mod validate;

use crate::protocol::{ResponseContext, StreamContext};
use serde_json::Value;

const RID: &str = "req123";

fn rctx() -> ResponseContext<'static> {
    ResponseContext {
        client_model: "my-model",
        request_id: RID,
        created: 1_741_476_542,
        compact: false,
    }
}

fn sctx() -> StreamContext {
    StreamContext {
        client_model: "my-model".into(),
        request_id: RID.into(),
        created: 1_741_476_542,
        client_wants_usage: false,
        client_sse: true,
        charge: None,
    }
}

/// Splits `input` into pieces of pseudo-random sizes (1..=max), deterministically.
fn random_pieces(input: &[u8], seed: u64, max: usize) -> Vec<&[u8]> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = 1 + (state >> 33) as usize % max;
        let (a, b) = rest.split_at(n.min(rest.len()));
        out.push(a);
        rest = b;
    }
    out
}

/// `(event name, data)` of every event of a client stream, checking the SSE framing.
fn events(stream: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(stream).expect("utf-8");
    assert!(text.is_empty() || text.ends_with("\n\n"), "{text}");
    text.split_terminator("\n\n")
        .map(|block| {
            let mut lines = block.lines();
            let name = lines
                .next()
                .and_then(|l| l.strip_prefix("event: "))
                .unwrap_or_else(|| panic!("no event line: {block}"))
                .to_string();
            let data = lines
                .next()
                .and_then(|l| l.strip_prefix("data: "))
                .unwrap_or_else(|| panic!("no data line: {block}"));
            let v: Value = serde_json::from_str(data).expect("json data");
            assert_eq!(v["type"], name.as_str(), "{block}");
            (name, v)
        })
        .collect()
}

#[test]
fn random_pieces_cover_the_input() {
    let input = b"abcdefghijklmnopqrstuvwxyz";
    for seed in 0..5 {
        assert_eq!(random_pieces(input, seed, 7).concat(), input.to_vec());
    }
}
