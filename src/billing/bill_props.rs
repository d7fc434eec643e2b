//! For random usage reports and prices: the charge equals the hand formula (each kind's
//! tokens at its own rate, summed, rounded up once, times the key's multiplier) and never
//! exceeds what the request reserved.

use super::super::{Multiplier, Price};
use crate::billing::raw::RawPrice;
use crate::protocol::Usage;
use proptest::prelude::*;

fn rate() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        Just(None),
        (0u32..200_000).prop_map(|c| Some(c as f64 / 1000.0))
    ]
}

prop_compose! {
    fn price()(
        r in proptest::collection::vec(rate(), 10),
        input in 0u32..200_000,
        output in 0u32..200_000,
        search in rate(),
    ) -> RawPrice {
        RawPrice {
            input: Some(input as f64 / 1000.0),
            output: Some(output as f64 / 1000.0),
            cached_input: r[0],
            cache_write: r[1],
            cache_write_1h: r[2],
            audio_input: r[3],
            image_input: r[4],
            reasoning: r[5],
            audio_output: r[6],
            image_output: r[7],
            per_web_search: search,
            ..RawPrice::default()
        }
    }
}

prop_compose! {
    fn usage()(v in proptest::collection::vec(0u64..3_000_000, 11)) -> Usage {
        Usage {
            input_tokens: v[0],
            output_tokens: v[1],
            cached_input_tokens: v[2],
            cache_creation_input_tokens: v[3],
            cache_write_1h_tokens: v[4],
            reasoning_tokens: v[5],
            audio_input_tokens: v[6],
            audio_output_tokens: v[7],
            image_input_tokens: v[8],
            image_output_tokens: v[9],
            web_search_requests: v[10] % 50,
        }
    }
}

/// USD per 1M as pico-USD per token, as a reader of the price table would convert it.
fn pico(usd_per_m: Option<f64>, fallback: f64) -> u128 {
    (usd_per_m.unwrap_or(fallback) * 1_000_000.0).round() as u128
}

/// The README's rule, written out: cache reads, then cache writes (the 1-hour share of
/// them), then audio and image input come out of the prompt; reasoning, audio and image
/// output out of the output; each share is at most what is left of its total.
fn by_hand(p: &RawPrice, u: &Usage) -> i64 {
    let (input, output) = (p.input.unwrap(), p.output.unwrap());
    let mut left = u.input_tokens;
    let mut take = |n: u64| {
        let t = n.min(left);
        left -= t;
        t as u128
    };
    let cached = take(u.cached_input_tokens);
    let written = take(u.cache_creation_input_tokens);
    let audio_in = take(u.audio_input_tokens);
    let image_in = take(u.image_input_tokens);
    let plain_in = left as u128;
    let written_1h = (u.cache_write_1h_tokens as u128).min(written);
    let mut left = u.output_tokens;
    let mut take = |n: u64| {
        let t = n.min(left);
        left -= t;
        t as u128
    };
    let reasoning = take(u.reasoning_tokens);
    let audio_out = take(u.audio_output_tokens);
    let image_out = take(u.image_output_tokens);
    let plain_out = left as u128;
    let write_5m = pico(p.cache_write, input);
    let total = plain_in * pico(None, input)
        + cached * pico(p.cached_input, input)
        + (written - written_1h) * write_5m
        + written_1h * pico(p.cache_write_1h, p.cache_write.unwrap_or(input))
        + audio_in * pico(p.audio_input, input)
        + image_in * pico(p.image_input, input)
        + plain_out * pico(None, output)
        + reasoning * pico(p.reasoning, output)
        + audio_out * pico(p.audio_output, output)
        + image_out * pico(p.image_output, output)
        + u.web_search_requests as u128 * pico(p.per_web_search, 0.0) * 1_000_000;
    total.div_ceil(1_000_000) as i64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_charge_is_the_hand_formula(raw in price(), u in usage(), m in 1u64..5_000_000) {
        let p = Price::from_raw(&raw).unwrap();
        let provider = by_hand(&raw, &u);
        prop_assert_eq!(p.cost(&u), provider);
        prop_assert_eq!(p.bill(&u).micros(), provider);
        let m = Multiplier(m);
        let hand = (provider as u128 * m.0 as u128).div_ceil(1_000_000) as i64;
        prop_assert_eq!(m.apply_micros(provider), hand);
    }

    /// A request whose prompt is within its input bound and whose output is within the
    /// limit written upstream costs at most what was reserved for it, at any multiplier.
    #[test]
    fn a_charge_never_exceeds_its_reservation(
        raw in price(),
        u in usage(),
        bound in 0u64..3_000_000,
        cap in 0u64..3_000_000,
        m in 1u64..5_000_000,
    ) {
        let p = Price::from_raw(&raw).unwrap();
        let mut u = u;
        u.input_tokens = u.input_tokens.min(bound);
        u.output_tokens = u.output_tokens.min(cap);
        u.web_search_requests = 0; // billed per request, not bounded by tokens
        let reserved = p.input_cost_bound(bound).saturating_add(p.output_cost(cap));
        prop_assert!(p.cost(&u) <= reserved);
        let m = Multiplier(m);
        let held = m.apply_micros(reserved);
        prop_assert!(m.apply_micros(p.cost(&u)) <= held);
        // What the grant lets the request spend, taken back out of the key's money.
        prop_assert!(m.unapply_micros(held) >= reserved.saturating_sub(1));
    }
}
