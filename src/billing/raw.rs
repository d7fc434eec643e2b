//! Prices as the configuration file spells them (stage one: plain data, unknown fields
//! refused); [`super::Price::from_raw`] validates them.

use serde::Deserialize;
use std::collections::BTreeMap;

/// USD per 1M tokens of each kind of usage (see `billing::price::Rates` for the
/// fallbacks of the ones left out). Shared by a price and its tiers.
#[derive(Debug, Default, Clone, Copy)]
pub struct RawRates {
    pub input: Option<f64>,
    pub output: Option<f64>,
    pub cached_input: Option<f64>,
    pub cache_write: Option<f64>,
    pub cache_write_1h: Option<f64>,
    pub audio_input: Option<f64>,
    pub image_input: Option<f64>,
    pub reasoning: Option<f64>,
    pub audio_output: Option<f64>,
    pub image_output: Option<f64>,
}

/// The rate members a price and a tier both have (`deny_unknown_fields` does not mix with
/// `flatten`, so each struct spells them out and hands them over as [`RawRates`]).
macro_rules! rate_fields {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)* }) => {
        $(#[$m])*
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
            /// USD per 1M input tokens.
            pub input: Option<f64>,
            /// USD per 1M output tokens (of no other kind).
            pub output: Option<f64>,
            /// USD per 1M input tokens read from a prompt cache; default: `input`.
            pub cached_input: Option<f64>,
            /// USD per 1M tokens written to a prompt cache (5-minute writes); default: `input`.
            pub cache_write: Option<f64>,
            /// USD per 1M tokens written to a 1-hour prompt cache; default: `cache_write`.
            pub cache_write_1h: Option<f64>,
            /// USD per 1M audio input tokens; default: `input`.
            pub audio_input: Option<f64>,
            /// USD per 1M image input tokens; default: `input`.
            pub image_input: Option<f64>,
            /// USD per 1M reasoning (thinking) tokens; default: `output`.
            pub reasoning: Option<f64>,
            /// USD per 1M audio output tokens; default: `output`.
            pub audio_output: Option<f64>,
            /// USD per 1M image output tokens; default: `output`.
            pub image_output: Option<f64>,
        }

        impl $name {
            pub fn rates(&self) -> RawRates {
                RawRates {
                    input: self.input,
                    output: self.output,
                    cached_input: self.cached_input,
                    cache_write: self.cache_write,
                    cache_write_1h: self.cache_write_1h,
                    audio_input: self.audio_input,
                    image_input: self.image_input,
                    reasoning: self.reasoning,
                    audio_output: self.audio_output,
                    image_output: self.image_output,
                }
            }
        }
    };
}

rate_fields! {
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawPrice {
        /// Output tokens reserved when a request names no limit of its own.
        pub max_output_tokens: Option<u64>,
        /// The model's context window in tokens: what a chained responses request's
        /// `truncation` fits the conversation to.
        pub context_window: Option<u64>,
        /// Rates for prompts longer than a threshold, for input and output alike.
        #[serde(default)]
        pub tiers: Vec<RawTier>,
        /// USD per server-side web search the upstream ran; default: 0.
        pub per_web_search: Option<f64>,
        /// USD per search unit (Cohere-style rerank answers bill these, not tokens).
        pub per_search_unit: Option<f64>,
        /// USD per image, by `size` or `size/quality` (`*` matches any size).
        #[serde(default)]
        pub per_image: BTreeMap<String, f64>,
        /// USD per 1M characters of speech input.
        pub per_million_chars: Option<f64>,
        /// USD per minute of audio transcribed or translated.
        pub per_minute: Option<f64>,
        /// USD per second of generated video (times the number of videos).
        pub per_second: Option<f64>,
    }
}

rate_fields! {
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawTier {
        /// The tier applies to requests whose prompt has more tokens than this.
        pub above_input_tokens: u64,
    }
}
