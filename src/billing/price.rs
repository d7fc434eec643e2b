//! A model's price: a rate for every kind of usage the vendors bill apart, the tiers some
//! models price long prompts at, and the units the non-chat endpoints are billed in.
//!
//! Rates are pico-USD per token (= micro-USD per 1M tokens), so cheap models (0.075 USD
//! per 1M tokens) stay exact. A rate the configuration leaves out falls back to the rate
//! it is a kind of (cached input to input, reasoning to output, ...): see
//! [`Rates::from_raw`] and the README's configuration reference.

use super::raw::{RawPrice, RawRates};
use crate::store::Micros;
use std::collections::BTreeMap;

/// Output tokens reserved when neither the request nor the price names a limit.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 16_384;

/// USD amounts within this bound convert to integers without loss of meaning.
const MAX_USD: f64 = 1_000_000.0;

pub(super) fn usd_to_micros(usd: f64, what: &str, unit: &str) -> Result<u64, String> {
    if !(0.0..=MAX_USD).contains(&usd) {
        return Err(format!(
            "{what} must be a non-negative number of USD {unit}"
        ));
    }
    Ok((usd * 1_000_000.0).round() as u64)
}

/// pico-USD per token of each kind of usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rates {
    pub input: u64,
    pub cached_input: u64,
    /// Prompt-cache writes kept 5 minutes (or of no stated lifetime).
    pub cache_write: u64,
    /// Prompt-cache writes kept an hour.
    pub cache_write_1h: u64,
    pub audio_input: u64,
    pub image_input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub audio_output: u64,
    pub image_output: u64,
}

impl Rates {
    /// Each rate, with the documented fallbacks: `cached_input`, `cache_write`,
    /// `audio_input`, `image_input` → `input`; `cache_write_1h` → `cache_write`;
    /// `reasoning`, `audio_output`, `image_output` → `output`.
    fn from_raw(r: &RawRates, at: &str) -> Result<Rates, String> {
        let per_m = |v: Option<f64>, what: &str| -> Result<Option<u64>, String> {
            v.map(|v| usd_to_micros(v, &format!("{at}{what}"), "per 1M tokens"))
                .transpose()
        };
        let input = per_m(r.input, "input")?.unwrap_or(0);
        let output = per_m(r.output, "output")?.unwrap_or(0);
        let cache_write = per_m(r.cache_write, "cache_write")?.unwrap_or(input);
        Ok(Rates {
            input,
            cached_input: per_m(r.cached_input, "cached_input")?.unwrap_or(input),
            cache_write,
            cache_write_1h: per_m(r.cache_write_1h, "cache_write_1h")?.unwrap_or(cache_write),
            audio_input: per_m(r.audio_input, "audio_input")?.unwrap_or(input),
            image_input: per_m(r.image_input, "image_input")?.unwrap_or(input),
            output,
            reasoning: per_m(r.reasoning, "reasoning")?.unwrap_or(output),
            audio_output: per_m(r.audio_output, "audio_output")?.unwrap_or(output),
            image_output: per_m(r.image_output, "image_output")?.unwrap_or(output),
        })
    }

    /// The dearest a prompt token of any kind can cost.
    fn input_worst(&self) -> u64 {
        [
            self.input,
            self.cached_input,
            self.cache_write,
            self.cache_write_1h,
            self.audio_input,
            self.image_input,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// The dearest a generated token of any kind can cost.
    fn output_worst(&self) -> u64 {
        [
            self.output,
            self.reasoning,
            self.audio_output,
            self.image_output,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    fn scaled(&self, m: Multiplier) -> Rates {
        let s = |r: u64| m.apply_pico(r);
        Rates {
            input: s(self.input),
            cached_input: s(self.cached_input),
            cache_write: s(self.cache_write),
            cache_write_1h: s(self.cache_write_1h),
            audio_input: s(self.audio_input),
            image_input: s(self.image_input),
            output: s(self.output),
            reasoning: s(self.reasoning),
            audio_output: s(self.audio_output),
            image_output: s(self.image_output),
        }
    }
}

/// Rates that replace the base ones for a request whose prompt is longer than
/// `above_input_tokens` (Gemini's prompts above 200k tokens), for input and output alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub above_input_tokens: u64,
    pub rates: Rates,
}

/// A model's price, in pico-USD per token (= micro-USD per 1M tokens), and the other
/// units the non-chat endpoints are billed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Price {
    /// The rates of a prompt no tier applies to.
    pub rates: Rates,
    /// Longer prompts' rates, by ascending threshold.
    pub tiers: Vec<Tier>,
    pub max_output_tokens: u64,
    /// The model's context window in tokens, when configured.
    pub context_window: Option<u64>,
    /// Whether `input` / `output` were configured (an unpriced unit is not free: the
    /// endpoints that need it refuse the model).
    pub input_priced: bool,
    pub output_priced: bool,
    /// pico-USD per server-side web search (Anthropic's `web_search_requests`).
    pub per_web_search_pico: u64,
    /// pico-USD per search unit (Cohere's rerank `billed_units.search_units`).
    pub per_search_unit_pico: Option<u64>,
    /// micro-USD per image, by `size`, `size/quality` or `*`.
    pub per_image: BTreeMap<String, Micros>,
    /// pico-USD per character of speech input (= micro-USD per 1M characters).
    pub per_char_pico: Option<u64>,
    /// micro-USD per minute of audio.
    pub per_minute_micros: Option<u64>,
    /// micro-USD per second of video.
    pub per_second_micros: Option<u64>,
}

impl Price {
    pub fn from_raw(p: &RawPrice) -> Result<Price, String> {
        let base = p.rates();
        let rates = Rates::from_raw(&base, "")?;
        let mut tiers = Vec::new();
        for (i, t) in p.tiers.iter().enumerate() {
            let at = format!("tiers[{i}].");
            if t.input.is_none() || t.output.is_none() {
                return Err(format!("{at}input and {at}output are required"));
            }
            if tiers
                .last()
                .is_some_and(|l: &Tier| l.above_input_tokens >= t.above_input_tokens)
            {
                return Err(format!(
                    "{at}above_input_tokens must be larger than the tier before it"
                ));
            }
            tiers.push(Tier {
                above_input_tokens: t.above_input_tokens,
                rates: Rates::from_raw(&t.rates(), &at)?,
            });
        }
        if !tiers.is_empty() && (base.input.is_none() || base.output.is_none()) {
            return Err("tiers need the base `input` and `output` prices".into());
        }
        let mut per_image = BTreeMap::new();
        for (k, v) in &p.per_image {
            let m = usd_to_micros(*v, &format!("per_image.{k}"), "per image")?;
            per_image.insert(k.clone(), m.min(Micros::MAX as u64) as Micros);
        }
        let pico_each = |v: Option<f64>, what: &str, unit: &str| -> Result<Option<u64>, String> {
            v.map(|v| usd_to_micros(v, what, unit).map(|m| m.saturating_mul(1_000_000)))
                .transpose()
        };
        let per_web_search_pico = pico_each(p.per_web_search, "per_web_search", "per search")?;
        let per_search_unit_pico = pico_each(p.per_search_unit, "per_search_unit", "per unit")?;
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
        if base.input.is_none()
            && base.output.is_none()
            && per_image.is_empty()
            && per_char_pico.is_none()
            && per_minute_micros.is_none()
            && per_second_micros.is_none()
            && per_search_unit_pico.is_none()
        {
            return Err(
                "names no price: set `input`/`output`, `per_image`, `per_million_chars`, `per_minute`, `per_second` or `per_search_unit`"
                    .into(),
            );
        }
        Ok(Price {
            rates,
            tiers,
            max_output_tokens: p.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
            context_window: p.context_window,
            input_priced: base.input.is_some(),
            output_priced: base.output.is_some(),
            per_web_search_pico: per_web_search_pico.unwrap_or(0),
            per_search_unit_pico,
            per_image,
            per_char_pico,
            per_minute_micros,
            per_second_micros,
        })
    }

    /// This price with every rate multiplied by `m` (a channel's contract).
    pub fn scaled(&self, m: Multiplier) -> Price {
        if m == Multiplier::ONE {
            return self.clone();
        }
        Price {
            rates: self.rates.scaled(m),
            tiers: self
                .tiers
                .iter()
                .map(|t| Tier {
                    above_input_tokens: t.above_input_tokens,
                    rates: t.rates.scaled(m),
                })
                .collect(),
            per_web_search_pico: m.apply_pico(self.per_web_search_pico),
            per_search_unit_pico: self.per_search_unit_pico.map(|p| m.apply_pico(p)),
            per_image: self
                .per_image
                .iter()
                .map(|(k, v)| (k.clone(), m.apply_micros(*v)))
                .collect(),
            per_char_pico: self.per_char_pico.map(|p| m.apply_pico(p)),
            per_minute_micros: self.per_minute_micros.map(|p| m.apply_pico(p)),
            per_second_micros: self.per_second_micros.map(|p| m.apply_pico(p)),
            ..self.clone()
        }
    }

    /// Each rate the dearer of the two (the worst case over several channels' prices).
    pub fn dearest(&self, other: &Price) -> Price {
        let mut p = self.clone();
        // A flat price that covers every tier of both: the worst case of any prompt.
        let (a, b) = (self.worst_rates(), other.worst_rates());
        p.rates = Rates {
            input: a.input.max(b.input),
            cached_input: a.cached_input.max(b.cached_input),
            cache_write: a.cache_write.max(b.cache_write),
            cache_write_1h: a.cache_write_1h.max(b.cache_write_1h),
            audio_input: a.audio_input.max(b.audio_input),
            image_input: a.image_input.max(b.image_input),
            output: a.output.max(b.output),
            reasoning: a.reasoning.max(b.reasoning),
            audio_output: a.audio_output.max(b.audio_output),
            image_output: a.image_output.max(b.image_output),
        };
        p.tiers.clear();
        p.per_web_search_pico = p.per_web_search_pico.max(other.per_web_search_pico);
        p.per_search_unit_pico = p.per_search_unit_pico.max(other.per_search_unit_pico);
        for (k, v) in &other.per_image {
            let e = p.per_image.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
        p.per_char_pico = p.per_char_pico.max(other.per_char_pico);
        p.per_minute_micros = p.per_minute_micros.max(other.per_minute_micros);
        p.per_second_micros = p.per_second_micros.max(other.per_second_micros);
        p.max_output_tokens = p.max_output_tokens.max(other.max_output_tokens);
        // The smallest window any of them has: the conversation must fit whichever answers.
        p.context_window = match (p.context_window, other.context_window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        p
    }

    /// Each rate at its dearest over the base and every tier.
    fn worst_rates(&self) -> Rates {
        let mut w = self.rates;
        for t in &self.tiers {
            let r = t.rates;
            w.input = w.input.max(r.input);
            w.cached_input = w.cached_input.max(r.cached_input);
            w.cache_write = w.cache_write.max(r.cache_write);
            w.cache_write_1h = w.cache_write_1h.max(r.cache_write_1h);
            w.audio_input = w.audio_input.max(r.audio_input);
            w.image_input = w.image_input.max(r.image_input);
            w.output = w.output.max(r.output);
            w.reasoning = w.reasoning.max(r.reasoning);
            w.audio_output = w.audio_output.max(r.audio_output);
            w.image_output = w.image_output.max(r.image_output);
        }
        w
    }

    /// The rates a request with this many prompt tokens is billed at, and the tier's
    /// threshold when a tier applies.
    pub fn rates_for(&self, input_tokens: u64) -> (&Rates, Option<u64>) {
        match self
            .tiers
            .iter()
            .rev()
            .find(|t| input_tokens > t.above_input_tokens)
        {
            Some(t) => (&t.rates, Some(t.above_input_tokens)),
            None => (&self.rates, None),
        }
    }

    /// Priced per token both ways (chat, responses, realtime, token-billed images).
    pub fn per_token(&self) -> bool {
        self.input_priced && self.output_priced
    }

    /// pico-USD per prompt token at its dearest (any kind, any tier): what an input bound
    /// is reserved at.
    pub fn input_worst_pico(&self) -> u64 {
        self.worst_rates().input_worst()
    }

    /// pico-USD per generated token at its dearest (any kind, any tier).
    pub fn output_worst_pico(&self) -> u64 {
        self.worst_rates().output_worst()
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

    /// Upper bound of the cost of `tokens` prompt tokens of any kind.
    pub fn input_cost_bound(&self, tokens: u64) -> Micros {
        pico_to_micros(tokens as u128 * self.input_worst_pico() as u128)
    }

    /// Upper bound of the input cost of a request body of this size.
    pub fn input_bound(&self, body: &[u8]) -> Micros {
        self.input_cost_bound(super::input_token_bound(body))
    }

    /// Upper bound of what the server-side web searches a request offers can cost: its
    /// `max_uses` (Anthropic's web search tool), or [`DEFAULT_WEB_SEARCHES`] when it sets
    /// none; nothing when the request offers no web search or searches are not priced.
    pub fn web_search_bound(&self, body: &[u8]) -> Micros {
        if self.per_web_search_pico == 0 {
            return 0;
        }
        let Some(at) = memchr::memmem::find(body, b"\"web_search") else {
            return 0;
        };
        let searches = max_uses(&body[at..]).unwrap_or(DEFAULT_WEB_SEARCHES);
        pico_to_micros(searches as u128 * self.per_web_search_pico as u128)
    }

    /// Upper bound of the cost of `n` output tokens (of any kind).
    pub fn output_cost(&self, n: u64) -> Micros {
        pico_to_micros(n as u128 * self.output_worst_pico() as u128)
    }

    /// How many output tokens `budget` micro-USD buys at least (rounded down).
    pub fn affordable_output(&self, budget: Micros) -> u64 {
        let rate = self.output_worst_pico();
        if rate == 0 {
            return u64::MAX;
        }
        let pico = budget.max(0) as u128 * 1_000_000;
        (pico / rate as u128).min(u64::MAX as u128) as u64
    }
}

/// Web searches reserved for a request that offers the tool without `max_uses`.
pub const DEFAULT_WEB_SEARCHES: u64 = 10;

/// The `max_uses` number that follows in a web search tool's definition.
fn max_uses(tool: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(tool, b"\"max_uses\"")? + b"\"max_uses\"".len();
    let rest = &tool[at..];
    let digits: Vec<u8> = rest
        .iter()
        .skip_while(|b| b.is_ascii_whitespace() || **b == b':')
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

pub(super) fn pico_to_micros(pico: u128) -> Micros {
    let micros = pico.div_ceil(1_000_000);
    micros.min(Micros::MAX as u128) as Micros
}

/// A price multiplier, in parts per million (1.25 = 1,250,000): a channel's contract
/// against the list price, or what a reseller charges a key or group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Multiplier(pub u64);

impl Default for Multiplier {
    fn default() -> Self {
        Multiplier::ONE
    }
}

impl Multiplier {
    pub const ONE: Multiplier = Multiplier(1_000_000);
    /// The largest multiplier accepted (a typo such as 120 for 1.2 is refused).
    pub const MAX: f64 = 100.0;

    pub fn from_f64(v: f64) -> Result<Multiplier, String> {
        if !(v.is_finite() && v > 0.0 && v <= Self::MAX) {
            return Err(format!(
                "must be a number above 0 and at most {}",
                Self::MAX
            ));
        }
        Ok(Multiplier((v * 1_000_000.0).round().max(1.0) as u64))
    }

    pub fn as_f64(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }

    /// `micros` × this, rounded up to the micro-USD.
    pub fn apply_micros(self, micros: Micros) -> Micros {
        if self == Multiplier::ONE || micros <= 0 {
            return micros.max(0);
        }
        let v = (micros as u128 * self.0 as u128).div_ceil(1_000_000);
        v.min(Micros::MAX as u128) as Micros
    }

    /// The most `micros` (a charge) buys at this multiplier: the inverse of
    /// [`Multiplier::apply_micros`], rounded down.
    pub fn unapply_micros(self, micros: Micros) -> Micros {
        if self == Multiplier::ONE || micros <= 0 {
            return micros.max(0);
        }
        (micros as u128 * 1_000_000 / self.0 as u128) as Micros
    }

    /// A rate × this, rounded up.
    fn apply_pico(self, pico: u64) -> u64 {
        (pico as u128 * self.0 as u128)
            .div_ceil(1_000_000)
            .min(u64::MAX as u128) as u64
    }
}
