//! Prices, cost, and the reserve-then-settle cycle.
//!
//! Money is integer micro-USD ([`Micros`]) in the store; prices are kept as pico-USD per
//! token so that cheap models (0.075 USD per 1M tokens) stay exact. A request's cost is
//! rounded *up* to the next micro-USD, once, at the end.
//!
//! Why the cap holds (spec 2.1): before the upstream call the gateway reserves the
//! request's worst case (an upper bound on its input tokens plus its output limit), in one
//! atomic store operation. If the key cannot afford that worst case, the store grants what
//! is left and the gateway lowers the request's output limit to fit, so the real cost can
//! never exceed what was reserved. Settling replaces the reservation by the real cost
//! from the upstream's usage.

mod bill;
pub mod calendar;
mod guard;
mod keeper;
mod price;
pub mod raw;

pub use crate::store::bill::{Bill, Kind, Line};
pub use calendar::{Calendar, Clock};
pub use guard::{reserve, ReservationGuard, SettleOutcome};
pub use price::{Multiplier, Price, Rates, Tier, DEFAULT_MAX_OUTPUT_TOKENS};

use crate::store::Micros;

/// The smallest useful answer: below this, a request is refused rather than truncated.
pub const MIN_OUTPUT_TOKENS: u64 = 16;
/// Allowance per image part: an image URL is a few bytes of JSON but up to a few thousand
/// tokens for the model.
const IMAGE_TOKEN_ALLOWANCE: u64 = 3_000;

/// An upper bound on the prompt tokens of a request: every tokenizer the gateway fronts
/// emits at most one token per byte of text, the JSON around the text only adds bytes,
/// and each image part gets a fixed allowance.
pub fn input_token_bound(body: &[u8]) -> u64 {
    // Built once: a searcher is costly to set up, and this runs several times a request.
    static IMAGE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"image"));
    let images = IMAGE.find_iter(body).count() as u64;
    body.len() as u64 + images * IMAGE_TOKEN_ALLOWANCE + 64
}

/// What to reserve for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Below this the request is refused (input bound plus the smallest useful answer).
    pub min: Micros,
    /// The worst case with the request's own output limit.
    pub max: Micros,
    pub input: Micros,
    pub output_tokens: u64,
}

impl Estimate {
    pub fn new(price: &Price, body: &[u8], requested_output: Option<u64>) -> Estimate {
        let output_tokens = requested_output.unwrap_or(price.max_output_tokens).max(1);
        let input = price.input_bound(body);
        Estimate {
            min: input.saturating_add(price.output_cost(output_tokens.min(MIN_OUTPUT_TOKENS))),
            max: input.saturating_add(price.output_cost(output_tokens)),
            input,
            output_tokens,
        }
    }

    /// The output limit that keeps the request within `granted`; `None` when the grant
    /// covers the request's own limit (nothing to rewrite).
    pub fn output_cap(&self, price: &Price, granted: Micros) -> Option<u64> {
        if granted >= self.max {
            return None;
        }
        let cap = price.affordable_output(granted - self.input);
        Some(cap.clamp(1, self.output_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::RawPrice;
    use crate::protocol::Usage;

    fn price(input: f64, output: f64, cached: Option<f64>) -> Price {
        Price::from_raw(&RawPrice {
            input: Some(input),
            output: Some(output),
            cached_input: cached,
            ..RawPrice::default()
        })
        .unwrap()
    }

    #[test]
    fn units_other_than_tokens() {
        let p = Price::from_raw(&RawPrice {
            per_image: [
                ("1024x1024".to_string(), 0.04),
                ("1024x1024/hd".into(), 0.08),
            ]
            .into_iter()
            .collect(),
            per_million_chars: Some(15.0),
            per_minute: Some(0.006),
            per_second: Some(0.1),
            ..RawPrice::default()
        })
        .unwrap();
        assert!(!p.per_token());
        assert_eq!(p.image("1024x1024", Some("hd")), Some(80_000));
        assert_eq!(p.image("1024x1024", Some("standard")), Some(40_000));
        assert_eq!(p.image("auto", None), Some(80_000));
        assert_eq!(p.image("1024x1024", Some("auto")), Some(80_000));
        assert_eq!(p.image("512x512", None), None);
        assert_eq!(p.chars(1000), Some(15_000));
        assert_eq!(p.seconds(60.0), Some(6_000));
        assert_eq!(p.seconds(0.5), Some(50));
        assert_eq!(p.video(4.0, 2), Some(800_000));
        assert_eq!(
            p.video(0.0001, 1),
            Some(100),
            "rounds up to the millisecond"
        );
        assert!(Price::from_raw(&RawPrice::default()).is_err());
    }

    #[test]
    fn cost_is_exact_and_rounds_up_once() {
        let p = price(0.15, 0.60, Some(0.075));
        let u = Usage {
            input_tokens: 1000,
            output_tokens: 500,
            cached_input_tokens: 200,
            ..Usage::default()
        };
        // 800*0.15 + 200*0.075 + 500*0.6 = 120 + 15 + 300 = 435 micro-USD
        assert_eq!(p.cost(&u), 435);
        let tiny = Usage {
            input_tokens: 1,
            ..Usage::default()
        };
        assert_eq!(p.cost(&tiny), 1, "0.15 micro-USD rounds up to 1");
        assert_eq!(p.cost(&Usage::default()), 0);
    }

    #[test]
    fn inconsistent_usage_never_underflows() {
        let p = price(1.0, 1.0, None);
        let u = Usage {
            input_tokens: 10,
            cached_input_tokens: 50,
            cache_creation_input_tokens: 50,
            ..Usage::default()
        };
        assert_eq!(p.cost(&u), 10);
    }

    #[test]
    fn estimate_bounds_and_cap() {
        let p = price(1.0, 2.0, None);
        let body = vec![b'a'; 936];
        let e = Estimate::new(&p, &body, Some(100));
        assert_eq!(e.input, 1000); // 936 + 64 tokens at 1 micro-USD each
        assert_eq!(e.max, 1200);
        assert_eq!(e.min, 1032);
        assert_eq!(e.output_cap(&p, 1200), None);
        assert_eq!(e.output_cap(&p, 1100), Some(50));
    }

    #[test]
    fn images_get_an_allowance() {
        let body = br#"{"content":[{"type":"image_url","image_url":{"url":"https://x"}}]}"#;
        assert!(input_token_bound(body) >= 2 * IMAGE_TOKEN_ALLOWANCE);
    }
}
