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

pub mod calendar;
mod guard;
mod keeper;

pub use calendar::{Calendar, Clock};
pub use guard::{reserve, ReservationGuard, SettleOutcome};

use crate::config::raw::RawPrice;
use crate::protocol::Usage;
use crate::store::Micros;
use std::collections::BTreeMap;

/// Output tokens reserved when neither the request nor the price names a limit.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 16_384;
/// The smallest useful answer: below this, a request is refused rather than truncated.
pub const MIN_OUTPUT_TOKENS: u64 = 16;
/// Allowance per image part: an image URL is a few bytes of JSON but up to a few thousand
/// tokens for the model.
const IMAGE_TOKEN_ALLOWANCE: u64 = 3_000;

/// A model's price, in pico-USD per token (= micro-USD per 1M tokens), and the other
/// units the non-chat endpoints are billed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Price {
    pub input_pico: u64,
    pub output_pico: u64,
    pub cached_input_pico: u64,
    pub cache_write_pico: u64,
    pub max_output_tokens: u64,
    /// Whether `input` / `output` were configured (an unpriced unit is not free: the
    /// endpoints that need it refuse the model).
    pub input_priced: bool,
    pub output_priced: bool,
    /// micro-USD per image, by `size`, `size/quality` or `*`.
    pub per_image: BTreeMap<String, Micros>,
    /// pico-USD per character of speech input (= micro-USD per 1M characters).
    pub per_char_pico: Option<u64>,
    /// micro-USD per minute of audio.
    pub per_minute_micros: Option<u64>,
    /// micro-USD per second of video.
    pub per_second_micros: Option<u64>,
}

/// USD amounts within this bound convert to integers without loss of meaning.
const MAX_USD: f64 = 1_000_000.0;

fn usd_to_micros(usd: f64, what: &str, unit: &str) -> Result<u64, String> {
    if !(0.0..=MAX_USD).contains(&usd) {
        return Err(format!(
            "{what} must be a non-negative number of USD {unit}"
        ));
    }
    Ok((usd * 1_000_000.0).round() as u64)
}

impl Price {
    pub fn from_raw(p: &RawPrice) -> Result<Price, String> {
        // USD per 1M tokens == micro-USD per token; keep 6 more digits as pico.
        let per_m = |v: Option<f64>, what: &str| -> Result<Option<u64>, String> {
            v.map(|v| usd_to_micros(v, what, "per 1M tokens"))
                .transpose()
        };
        let input = per_m(p.input, "input")?;
        let output = per_m(p.output, "output")?;
        let input_pico = input.unwrap_or(0);
        let mut per_image = BTreeMap::new();
        for (k, v) in &p.per_image {
            let m = usd_to_micros(*v, &format!("per_image.{k}"), "per image")?;
            per_image.insert(k.clone(), m.min(Micros::MAX as u64) as Micros);
        }
        let per_char_pico = p
            .per_million_chars
            .map(|v| usd_to_micros(v, "per_million_chars", "per 1M characters"))
            .transpose()?;
        let per_minute_micros = p
            .per_minute
            .map(|v| usd_to_micros(v, "per_minute", "per minute"))
            .transpose()?;
        let per_second_micros = p
            .per_second
            .map(|v| usd_to_micros(v, "per_second", "per second"))
            .transpose()?;
        if input.is_none()
            && output.is_none()
            && per_image.is_empty()
            && per_char_pico.is_none()
            && per_minute_micros.is_none()
            && per_second_micros.is_none()
        {
            return Err(
                "names no price: set `input`/`output`, `per_image`, `per_million_chars`, `per_minute` or `per_second`"
                    .into(),
            );
        }
        Ok(Price {
            input_pico,
            output_pico: output.unwrap_or(0),
            cached_input_pico: per_m(p.cached_input, "cached_input")?.unwrap_or(input_pico),
            cache_write_pico: per_m(p.cache_write, "cache_write")?.unwrap_or(input_pico),
            max_output_tokens: p.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
            input_priced: input.is_some(),
            output_priced: output.is_some(),
            per_image,
            per_char_pico,
            per_minute_micros,
            per_second_micros,
        })
    }

    /// Priced per token both ways (chat, responses, realtime, token-billed images).
    pub fn per_token(&self) -> bool {
        self.input_priced && self.output_priced
    }

    /// The price of one image of this size and quality: `size/quality`, then `size`,
    /// then `*`. `auto` (the size is the model's choice) takes the dearest entry.
    pub fn image(&self, size: &str, quality: Option<&str>) -> Option<Micros> {
        if size == "auto" {
            return self.per_image.values().copied().max();
        }
        if quality == Some("auto") {
            // The model picks the quality: the dearest this size can cost.
            let prefix = format!("{size}/");
            return self
                .per_image
                .iter()
                .filter(|(k, _)| k.as_str() == size || k.as_str() == "*" || k.starts_with(&prefix))
                .map(|(_, v)| *v)
                .max();
        }
        quality
            .and_then(|q| self.per_image.get(&format!("{size}/{q}")))
            .or_else(|| self.per_image.get(size))
            .or_else(|| self.per_image.get("*"))
            .copied()
    }

    /// Speech: the cost of `chars` characters of input.
    pub fn chars(&self, chars: u64) -> Option<Micros> {
        self.per_char_pico
            .map(|p| pico_to_micros(chars as u128 * p as u128))
    }

    /// Audio: the cost of `seconds` of audio (rounded up to the micro-USD).
    pub fn seconds(&self, seconds: f64) -> Option<Micros> {
        let per_minute = self.per_minute_micros?;
        let millis = (seconds.max(0.0) * 1000.0).ceil() as u128;
        let micros = (millis * per_minute as u128).div_ceil(60_000);
        Some(micros.min(Micros::MAX as u128) as Micros)
    }

    /// Video: the cost of `seconds` seconds of video, each of `n` videos, rounded up.
    pub fn video(&self, seconds: f64, n: u32) -> Option<Micros> {
        let per_second = self.per_second_micros?;
        let millis = (seconds.max(0.0) * 1000.0).ceil() as u128 * n as u128;
        let micros = (millis * per_second as u128).div_ceil(1000);
        Some(micros.min(Micros::MAX as u128) as Micros)
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

    fn price(input: f64, output: f64, cached: Option<f64>) -> Price {
        Price::from_raw(&RawPrice {
            input: Some(input),
            output: Some(output),
            cached_input: cached,
            cache_write: None,
            max_output_tokens: None,
            per_image: BTreeMap::new(),
            per_million_chars: None,
            per_minute: None,
            per_second: None,
        })
        .unwrap()
    }

    #[test]
    fn units_other_than_tokens() {
        let p = Price::from_raw(&RawPrice {
            input: None,
            output: None,
            cached_input: None,
            cache_write: None,
            max_output_tokens: None,
            per_image: [
                ("1024x1024".to_string(), 0.04),
                ("1024x1024/hd".into(), 0.08),
            ]
            .into_iter()
            .collect(),
            per_million_chars: Some(15.0),
            per_minute: Some(0.006),
            per_second: Some(0.1),
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
        assert!(Price::from_raw(&RawPrice {
            input: None,
            output: None,
            cached_input: None,
            cache_write: None,
            max_output_tokens: None,
            per_image: BTreeMap::new(),
            per_million_chars: None,
            per_minute: None,
            per_second: None,
        })
        .is_err());
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
