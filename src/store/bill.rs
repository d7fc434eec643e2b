//! The lines of a request's provider cost as its usage record keeps them: the units of
//! each kind of usage, the rate each was priced at, and their cost (priced by
//! `billing`; README, "Pricing").
//!
//! A line's cost is `units × pico_per_unit / per` pico-USD (`per` is 1 except for audio
//! and video, priced per minute and per second but counted in milliseconds); a request's
//! cost is the sum of its lines rounded up to the micro-USD, once.

use super::Micros;
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

    /// A line priced in micro-USD per `per` units (an image; a minute or a second of
    /// audio or video counted in milliseconds).
    pub fn at_micros(kind: Kind, units: u64, micros: u64, per: u64) -> Line {
        Line {
            kind,
            units,
            pico_per_unit: micros.saturating_mul(1_000_000),
            per,
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
        self.pico().div_ceil(1_000_000).min(Micros::MAX as u128) as Micros
    }
}
