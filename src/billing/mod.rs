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

mod guard;

pub use guard::{ReservationGuard, SettleOutcome};

use crate::config::raw::RawPrice;
use crate::protocol::Usage;
use crate::store::Micros;

/// Output tokens reserved when neither the request nor the price names a limit.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 16_384;
/// The smallest useful answer: below this, a request is refused rather than truncated.
pub const MIN_OUTPUT_TOKENS: u64 = 16;
/// Allowance per image part: an image URL is a few bytes of JSON but up to a few thousand
/// tokens for the model.
const IMAGE_TOKEN_ALLOWANCE: u64 = 3_000;

/// A model's price, in pico-USD per token (= micro-USD per 1M tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input_pico: u64,
    pub output_pico: u64,
    pub cached_input_pico: u64,
    pub cache_write_pico: u64,
    pub max_output_tokens: u64,
}

impl Price {
    pub fn from_raw(p: &RawPrice) -> Result<Price, String> {
        let conv = |usd_per_m: f64, what: &str| -> Result<u64, String> {
            if !(0.0..=1_000_000.0).contains(&usd_per_m) {
                return Err(format!(
                    "{what} must be a non-negative number of USD per 1M tokens"
                ));
            }
            // USD per 1M tokens == micro-USD per token; keep 6 more digits as pico.
            Ok((usd_per_m * 1_000_000.0).round() as u64)
        };
        let input_pico = conv(p.input, "input")?;
        Ok(Price {
            input_pico,
            output_pico: conv(p.output, "output")?,
            cached_input_pico: match p.cached_input {
                Some(v) => conv(v, "cached_input")?,
                None => input_pico,
            },
            cache_write_pico: match p.cache_write {
                Some(v) => conv(v, "cache_write")?,
                None => input_pico,
            },
            max_output_tokens: p.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        })
    }

    /// The real cost of a request from its normalised usage, rounded up to a micro-USD.
    pub fn cost(&self, u: &Usage) -> Micros {
        let cached = u.cached_input_tokens.min(u.input_tokens);
        let written = u.cache_creation_input_tokens.min(u.input_tokens - cached);
        let plain = u.input_tokens - cached - written;
        let pico = plain as u128 * self.input_pico as u128
            + cached as u128 * self.cached_input_pico as u128
            + written as u128 * self.cache_write_pico as u128
            + u.output_tokens as u128 * self.output_pico as u128;
        pico_to_micros(pico)
    }

    /// Upper bound of the input cost of a request body of this size.
    pub fn input_bound(&self, body: &[u8]) -> Micros {
        pico_to_micros(
            input_token_bound(body) as u128 * self.input_pico.max(self.cache_write_pico) as u128,
        )
    }

    /// Cost of `n` output tokens.
    pub fn output_cost(&self, n: u64) -> Micros {
        pico_to_micros(n as u128 * self.output_pico as u128)
    }

    /// How many output tokens `budget` micro-USD buys (rounded down).
    pub fn affordable_output(&self, budget: Micros) -> u64 {
        if self.output_pico == 0 {
            return u64::MAX;
        }
        let pico = budget.max(0) as u128 * 1_000_000;
        (pico / self.output_pico as u128).min(u64::MAX as u128) as u64
    }
}

fn pico_to_micros(pico: u128) -> Micros {
    let micros = pico.div_ceil(1_000_000);
    micros.min(Micros::MAX as u128) as Micros
}

/// An upper bound on the prompt tokens of a request: every tokenizer the gateway fronts
/// emits at most one token per byte of text, the JSON around the text only adds bytes,
/// and each image part gets a fixed allowance.
pub fn input_token_bound(body: &[u8]) -> u64 {
    let images = memchr::memmem::find_iter(body, b"image").count() as u64;
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

    fn price(input: f64, output: f64, cached: Option<f64>) -> Price {
        Price::from_raw(&RawPrice {
            input,
            output,
            cached_input: cached,
            cache_write: None,
            max_output_tokens: None,
        })
        .unwrap()
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
