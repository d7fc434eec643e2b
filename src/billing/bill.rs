//! What a request cost, line by line: the units of each kind of usage, the rate each
//! was priced at, and their cost, so that a charge can be recomputed by hand from its
//! usage record and the price table (README, "Pricing").
//!
//! A line's cost is `units × pico_per_unit / per` pico-USD (`per` is 1 except for audio
//! and video, priced per minute and per second but counted in milliseconds); a request's
//! cost is the sum of its lines rounded up to the micro-USD, once.

use super::price::{pico_to_micros, Price, Rates};
use crate::protocol::Usage;
use crate::store::Micros;
use serde::{Deserialize, Serialize};

/// A kind of usage with a price of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Prompt tokens of no other kind.
    Input,
    CachedInput,
    /// Prompt-cache writes kept 5 minutes (or of no stated lifetime).
    CacheWrite,
    CacheWrite1h,
    AudioInput,
    ImageInput,
    /// Generated tokens of no other kind.
    Output,
    Reasoning,
    AudioOutput,
    ImageOutput,
    WebSearch,
    SearchUnits,
    Images,
    Characters,
    /// Milliseconds of audio, priced per minute.
    AudioMs,
    /// Milliseconds of video (times the videos), priced per second.
    VideoMs,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::CachedInput => "cached_input",
            Kind::CacheWrite => "cache_write",
            Kind::CacheWrite1h => "cache_write_1h",
            Kind::AudioInput => "audio_input",
            Kind::ImageInput => "image_input",
            Kind::Output => "output",
            Kind::Reasoning => "reasoning",
            Kind::AudioOutput => "audio_output",
            Kind::ImageOutput => "image_output",
            Kind::WebSearch => "web_search",
            Kind::SearchUnits => "search_units",
            Kind::Images => "images",
            Kind::Characters => "characters",
            Kind::AudioMs => "audio_ms",
            Kind::VideoMs => "video_ms",
        }
    }
}

fn is_one(v: &u64) -> bool {
    *v == 1
}

fn one() -> u64 {
    1
}

/// One kind of usage and its price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub kind: Kind,
    pub units: u64,
    /// pico-USD per unit (for tokens: micro-USD per 1M tokens, the configuration's USD
    /// per 1M × 10⁶); per `per` units when `per` is not 1.
    pub pico_per_unit: u64,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub per: u64,
}

impl Line {
    pub fn new(kind: Kind, units: u64, pico_per_unit: u64) -> Line {
        Line {
            kind,
            units,
            pico_per_unit,
            per: 1,
        }
    }

    /// This line's cost in pico-USD.
    pub fn pico(&self) -> u128 {
        (self.units as u128 * self.pico_per_unit as u128).div_ceil(self.per.max(1) as u128)
    }
}

/// The lines of one request's provider cost. `tier`: the prompt-size tier its token
/// rates came from, by its threshold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bill {
    pub lines: Vec<Line>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u64>,
}

impl Bill {
    pub fn one(line: Line) -> Bill {
        Bill {
            lines: vec![line],
            tier: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn pico(&self) -> u128 {
        self.lines.iter().map(Line::pico).sum()
    }

    /// The cost, rounded up to the micro-USD once.
    pub fn micros(&self) -> Micros {
        pico_to_micros(self.pico())
    }
}

/// The token usage split into its priced kinds, each within its total (a report whose
/// shares exceed their total is clamped, never billed below zero).
fn token_lines(u: &Usage, r: &Rates, mut line: impl FnMut(Kind, u64, u64)) {
    let cached = u.cached_input_tokens.min(u.input_tokens);
    let written = u.cache_creation_input_tokens.min(u.input_tokens - cached);
    let written_1h = u.cache_write_1h_tokens.min(written);
    let rest = u.input_tokens - cached - written;
    let audio_in = u.audio_input_tokens.min(rest);
    let image_in = u.image_input_tokens.min(rest - audio_in);
    line(Kind::Input, rest - audio_in - image_in, r.input);
    line(Kind::CachedInput, cached, r.cached_input);
    line(Kind::CacheWrite, written - written_1h, r.cache_write);
    line(Kind::CacheWrite1h, written_1h, r.cache_write_1h);
    line(Kind::AudioInput, audio_in, r.audio_input);
    line(Kind::ImageInput, image_in, r.image_input);
    let reasoning = u.reasoning_tokens.min(u.output_tokens);
    let rest = u.output_tokens - reasoning;
    let audio_out = u.audio_output_tokens.min(rest);
    let image_out = u.image_output_tokens.min(rest - audio_out);
    line(Kind::Output, rest - audio_out - image_out, r.output);
    line(Kind::Reasoning, reasoning, r.reasoning);
    line(Kind::AudioOutput, audio_out, r.audio_output);
    line(Kind::ImageOutput, image_out, r.image_output);
}

impl Price {
    /// The provider cost of a token usage report, rounded up to a micro-USD. Allocates
    /// nothing: streams ask for it as each usage report arrives.
    pub fn cost(&self, u: &Usage) -> Micros {
        let (rates, _) = self.rates_for(u.input_tokens);
        let mut pico = u.web_search_requests as u128 * self.per_web_search_pico as u128;
        token_lines(u, rates, |_, units, rate| {
            pico += units as u128 * rate as u128
        });
        pico_to_micros(pico)
    }

    /// The same cost as [`Price::cost`], line by line (the kinds that occurred).
    pub fn bill(&self, u: &Usage) -> Bill {
        let (rates, tier) = self.rates_for(u.input_tokens);
        let mut lines = Vec::new();
        token_lines(u, rates, |kind, units, rate| {
            if units > 0 {
                lines.push(Line::new(kind, units, rate));
            }
        });
        if u.web_search_requests > 0 {
            lines.push(Line::new(
                Kind::WebSearch,
                u.web_search_requests,
                self.per_web_search_pico,
            ));
        }
        Bill { lines, tier }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::RawPrice;

    #[test]
    fn bill_and_cost_agree_and_each_kind_has_its_rate() {
        let p = Price::from_raw(&RawPrice {
            input: Some(3.0),
            output: Some(15.0),
            cached_input: Some(0.3),
            cache_write: Some(3.75),
            cache_write_1h: Some(6.0),
            audio_input: Some(40.0),
            reasoning: Some(20.0),
            per_web_search: Some(0.01),
            ..RawPrice::default()
        })
        .unwrap();
        let u = Usage {
            input_tokens: 1000,
            cached_input_tokens: 100,
            cache_creation_input_tokens: 300,
            cache_write_1h_tokens: 200,
            audio_input_tokens: 50,
            output_tokens: 400,
            reasoning_tokens: 150,
            web_search_requests: 2,
            ..Usage::default()
        };
        let b = p.bill(&u);
        let by = |k: Kind| {
            b.lines
                .iter()
                .find(|l| l.kind == k)
                .map(|l| (l.units, l.pico_per_unit))
        };
        assert_eq!(by(Kind::Input), Some((550, 3_000_000)));
        assert_eq!(by(Kind::CachedInput), Some((100, 300_000)));
        assert_eq!(by(Kind::CacheWrite), Some((100, 3_750_000)));
        assert_eq!(by(Kind::CacheWrite1h), Some((200, 6_000_000)));
        assert_eq!(by(Kind::AudioInput), Some((50, 40_000_000)));
        assert_eq!(by(Kind::Output), Some((250, 15_000_000)));
        assert_eq!(by(Kind::Reasoning), Some((150, 20_000_000)));
        assert_eq!(by(Kind::WebSearch), Some((2, 10_000_000_000)));
        assert_eq!(b.micros(), p.cost(&u));
    }

    #[test]
    fn a_long_prompt_takes_its_tier_for_input_and_output() {
        let raw: RawPrice = serde_yaml::from_str(
            "{input: 1.25, output: 10, cached_input: 0.125, tiers: [{above_input_tokens: 200000, input: 2.5, output: 15, cached_input: 0.25}]}",
        )
        .unwrap();
        let p = Price::from_raw(&raw).unwrap();
        let short = Usage {
            input_tokens: 200_000,
            output_tokens: 1000,
            ..Usage::default()
        };
        assert_eq!(p.cost(&short), 250_000 + 10_000);
        assert_eq!(p.bill(&short).tier, None);
        let long = Usage {
            input_tokens: 200_001,
            cached_input_tokens: 1,
            output_tokens: 1000,
            ..Usage::default()
        };
        // 200,000 × 2.5 + 1 × 0.25 + 1000 × 15 micro-USD
        assert_eq!(p.cost(&long), 500_000 + 1 + 15_000);
        assert_eq!(p.bill(&long).tier, Some(200_000));
        assert_eq!(p.input_worst_pico(), 2_500_000);
        assert_eq!(p.output_worst_pico(), 15_000_000);
    }
}

#[cfg(test)]
#[path = "bill_props.rs"]
mod props;
