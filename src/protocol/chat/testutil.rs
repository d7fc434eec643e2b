//! Helpers for this folder's tests.

use crate::protocol::ir::{Event, StreamDecoder};
use crate::protocol::StreamContext;

pub fn stream_ctx(wants_usage: bool) -> StreamContext {
    StreamContext {
        client_model: "my-alias".into(),
        request_id: "req_7f3a".into(),
        created: 1_735_689_600,
        client_wants_usage: wants_usage,
        client_sse: true,
        charge: None,
    }
}

/// Splits `input` into pieces of pseudo-random sizes (1 to 40 bytes), deterministic per
/// seed, so a failure replays.
pub fn random_pieces(input: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    let mut out = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let n = (1 + (state % 40) as usize).min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

/// Every way of cutting `input` this folder checks: whole, 1 byte at a time, and
/// several random splits.
pub fn splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut all = vec![vec![input], input.chunks(1).collect()];
    all.extend((1..=8).map(|seed| random_pieces(input, seed)));
    all
}

/// Decodes `pieces` with a fresh decoder; the events and whether the stream completed
/// (a stream that ends in half an event did not).
pub fn decode(mut d: Box<dyn StreamDecoder>, pieces: &[&[u8]]) -> (Vec<Event>, bool) {
    let mut events = Vec::new();
    for p in pieces {
        d.feed(p, &mut events).unwrap();
    }
    let flushed = d.flush(&mut events);
    (events, flushed.is_ok() && d.complete())
}
