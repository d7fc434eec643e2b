//! `model-gateway reconcile`: the gateway's ledger against a provider's own usage report.
//!
//! For a range of UTC days, the usage records of a provider's channels (2xx only) are
//! summed by day and upstream model ([`ledger`]); the provider's admin usage report for
//! the same days ([`openai`], [`anthropic`], fetched by [`fetch`] or read from a saved
//! file) is summed the same way; [`compare`] joins the two, prices the provider's tokens
//! at the channel's configured price and takes the difference; [`report`] prints it.
//!
//! A provider reports by model, not by the gateway's channel: a row is one day and one
//! upstream model, with every selected channel that sends that model upstream named on
//! it (see the README's "Reconciling with a provider").

mod anthropic;
mod compare;
mod error;
mod fetch;
mod ledger;
mod openai;
mod options;
mod report;

pub use compare::Row;
pub use error::{chain, ReconcileError};
pub use options::{
    day_of_ms, day_start_ms, parse_aliases, parse_max_diff, AdminKey, Options, Range, ReportFilter,
    Source, MAX_DAYS,
};
pub use report::Report;

use crate::channels::{Channel, ChannelProtocol};
use crate::config::Config;
use crate::store::Store;
use jiff::civil::Date;
use serde::Serialize;
use std::sync::Arc;

/// The provider whose report the ledger is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Anthropic,
}

impl Provider {
    pub fn parse(s: &str) -> Option<Provider> {
        match s {
            "openai" => Some(Provider::OpenAi),
            "anthropic" => Some(Provider::Anthropic),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The protocol of the channels whose upstream this provider is.
    pub fn protocol(self) -> ChannelProtocol {
        match self {
            Provider::OpenAi => ChannelProtocol::OpenAi,
            Provider::Anthropic => ChannelProtocol::Anthropic,
        }
    }

    /// The environment variable holding the organization's admin key.
    pub fn admin_key_var(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_ADMIN_KEY",
            Provider::Anthropic => "ANTHROPIC_ADMIN_KEY",
        }
    }

    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com",
            Provider::Anthropic => "https://api.anthropic.com",
        }
    }

    /// The ledger's tokens in the kinds this provider's report tells apart: a kind it
    /// counts inside another goes there.
    fn fold(self, t: Tokens) -> Tokens {
        match self {
            // The completions report counts cache writes inside `input_tokens` and has
            // no web search count.
            Provider::OpenAi => Tokens {
                input: t.input + t.cache_write + t.cache_write_1h,
                cache_write: 0,
                cache_write_1h: 0,
                ..t
            },
            // Messages have no audio; the report counts images in `uncached_input_tokens`.
            Provider::Anthropic => Tokens {
                input: t.input + t.audio_input,
                audio_input: 0,
                output: t.output + t.audio_output,
                audio_output: 0,
                ..t
            },
        }
    }

    /// The kinds shown in the table (the JSON has them all).
    fn columns(self) -> &'static [TokenKind] {
        match self {
            Provider::OpenAi => &[
                TokenKind::Input,
                TokenKind::CachedInput,
                TokenKind::AudioInput,
                TokenKind::Output,
                TokenKind::AudioOutput,
            ],
            Provider::Anthropic => &[
                TokenKind::Input,
                TokenKind::CachedInput,
                TokenKind::CacheWrite,
                TokenKind::CacheWrite1h,
                TokenKind::Output,
                TokenKind::WebSearch,
            ],
        }
    }
}

/// The kinds of usage a report and the ledger are compared in; each is apart from the
/// others (`input` is the prompt tokens of no other kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Input,
    CachedInput,
    CacheWrite,
    CacheWrite1h,
    AudioInput,
    Output,
    AudioOutput,
    WebSearch,
}

impl TokenKind {
    /// The table's column heading.
    fn heading(self) -> &'static str {
        match self {
            TokenKind::Input => "input",
            TokenKind::CachedInput => "cached",
            TokenKind::CacheWrite => "cache_w_5m",
            TokenKind::CacheWrite1h => "cache_w_1h",
            TokenKind::AudioInput => "audio_in",
            TokenKind::Output => "output",
            TokenKind::AudioOutput => "audio_out",
            TokenKind::WebSearch => "searches",
        }
    }
}

/// Tokens (and web searches) by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub cached_input: u64,
    /// Cache writes kept 5 minutes (or of no stated lifetime).
    pub cache_write: u64,
    pub cache_write_1h: u64,
    pub audio_input: u64,
    /// Generated tokens of no other kind (reasoning included: no report tells it apart).
    pub output: u64,
    pub audio_output: u64,
    pub web_search: u64,
}

impl Tokens {
    pub fn get(&self, k: TokenKind) -> u64 {
        match k {
            TokenKind::Input => self.input,
            TokenKind::CachedInput => self.cached_input,
            TokenKind::CacheWrite => self.cache_write,
            TokenKind::CacheWrite1h => self.cache_write_1h,
            TokenKind::AudioInput => self.audio_input,
            TokenKind::Output => self.output,
            TokenKind::AudioOutput => self.audio_output,
            TokenKind::WebSearch => self.web_search,
        }
    }

    pub fn add(&mut self, o: &Tokens) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.input, o.input);
        add(&mut self.cached_input, o.cached_input);
        add(&mut self.cache_write, o.cache_write);
        add(&mut self.cache_write_1h, o.cache_write_1h);
        add(&mut self.audio_input, o.audio_input);
        add(&mut self.output, o.output);
        add(&mut self.audio_output, o.audio_output);
        add(&mut self.web_search, o.web_search);
    }

    const ALL: [TokenKind; 8] = [
        TokenKind::Input,
        TokenKind::CachedInput,
        TokenKind::CacheWrite,
        TokenKind::CacheWrite1h,
        TokenKind::AudioInput,
        TokenKind::Output,
        TokenKind::AudioOutput,
        TokenKind::WebSearch,
    ];
}

/// One day of one model, as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUsage {
    pub day: Date,
    pub model: String,
    pub tokens: Tokens,
    /// Requests, where the report counts them (OpenAI does, Anthropic does not).
    pub requests: Option<u64>,
}

/// The channels a run covers: those named, or every channel of the provider's protocol.
pub fn select_channels(
    cfg: &Config,
    provider: Provider,
    names: &[String],
) -> Result<Vec<Arc<Channel>>, ReconcileError> {
    if names.is_empty() {
        let all: Vec<_> = cfg
            .channels
            .iter()
            .filter(|c| c.protocol == provider.protocol())
            .cloned()
            .collect();
        if all.is_empty() {
            return Err(ReconcileError::Argument {
                flag: "--provider",
                message: format!(
                    "the configuration has no `{}` channel",
                    provider.protocol().as_str()
                ),
            });
        }
        return Ok(all);
    }
    let mut out: Vec<Arc<Channel>> = Vec::new();
    for n in names {
        let c =
            cfg.channels
                .iter()
                .find(|c| c.name == *n)
                .ok_or_else(|| ReconcileError::Argument {
                    flag: "--channel",
                    message: format!("no channel is named `{n}`"),
                })?;
        if c.protocol != provider.protocol() {
            return Err(ReconcileError::Argument {
                flag: "--channel",
                message: format!(
                    "`{n}` is a `{}` channel, not `{}`",
                    c.protocol.as_str(),
                    provider.protocol().as_str()
                ),
            });
        }
        if !out.iter().any(|o| o.name == c.name) {
            out.push(c.clone());
        }
    }
    Ok(out)
}

/// Reads both sides and compares them.
pub async fn run(
    cfg: &Config,
    store: &dyn Store,
    opts: &Options,
) -> Result<Report, ReconcileError> {
    let channels = select_channels(cfg, opts.provider, &opts.channels)?;
    let ledger = ledger::read(store, opts.provider, &channels, &opts.range).await?;
    let reported = match opts.provider {
        Provider::OpenAi => openai::usage(&openai::pages(opts).await?)?,
        Provider::Anthropic => anthropic::usage(&anthropic::pages(opts).await?)?,
    };
    let reported = reported
        .into_iter()
        .filter(|u| opts.range.contains(u.day))
        .map(|mut u| {
            if let Some(to) = opts.aliases.get(&u.model) {
                u.model = to.clone();
            }
            u
        })
        .collect::<Vec<_>>();
    let rows = compare::rows(cfg, opts.provider, &channels, ledger, &reported);
    Ok(Report {
        provider: opts.provider,
        range: opts.range,
        channels: channels.iter().map(|c| c.name.clone()).collect(),
        max_diff: opts.max_diff,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_provider_folds_the_kinds_its_report_does_not_tell_apart() {
        let t = Tokens {
            input: 10,
            cached_input: 1,
            cache_write: 2,
            cache_write_1h: 3,
            audio_input: 4,
            output: 5,
            audio_output: 6,
            web_search: 7,
        };
        let o = Provider::OpenAi.fold(t);
        assert_eq!((o.input, o.cache_write, o.cache_write_1h), (15, 0, 0));
        assert_eq!((o.audio_input, o.audio_output, o.web_search), (4, 6, 7));
        let a = Provider::Anthropic.fold(t);
        assert_eq!(
            (a.input, a.audio_input, a.output, a.audio_output),
            (14, 0, 11, 0)
        );
        assert_eq!((a.cache_write, a.cache_write_1h, a.web_search), (2, 3, 7));
    }
}
