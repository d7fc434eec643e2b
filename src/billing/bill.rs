//! A token usage report priced line by line ([`crate::store::bill`]): each kind of usage
//! at its own rate, so that a charge can be recomputed by hand from its usage record and
//! the price table (README, "Pricing").

use super::price::{pico_to_micros, Price, Rates};
use crate::protocol::Usage;
use crate::store::bill::{Bill, Kind, Line};
use crate::store::Micros;

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
    use crate::billing::raw::RawPrice;

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
    fn offered_web_searches_are_reserved() {
        let p = Price::from_raw(&RawPrice {
            input: Some(1.0),
            output: Some(1.0),
            per_web_search: Some(0.01),
            ..RawPrice::default()
        })
        .unwrap();
        let with =
            br#"{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses": 3}]}"#;
        assert_eq!(p.web_search_bound(with), 30_000);
        let without_max = br#"{"tools":[{"type":"web_search_20250305","name":"web_search"}]}"#;
        assert_eq!(p.web_search_bound(without_max), 100_000);
        assert_eq!(p.web_search_bound(br#"{"messages":[]}"#), 0);
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
