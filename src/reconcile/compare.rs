//! Joining the two sides: one row per UTC day and upstream model, the provider's tokens
//! priced at the configured price of a channel that sends that model.
//!
//! Attribution: a provider reports by model, so a row names every selected channel that
//! sends its model upstream (from the configuration, and from the ledger for models a
//! channel no longer lists), and the ledger side sums them all. The provider's tokens are
//! priced at the price of the (channel, caller's model) pair with the most records that
//! day, else the first such pair in the configuration; when the pairs' prices differ
//! the row says so. A reported model no selected channel sends is shown but not counted.

use super::ledger::{Ledger, Share, Sums};
use super::{Provider, ProviderUsage, Tokens};
use crate::billing::{Bill, Kind, Line, Price};
use crate::channels::Channel;
use crate::config::Config;
use crate::store::Micros;
use jiff::civil::Date;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One side of a row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Side {
    /// `None` where that side does not count requests (Anthropic's report).
    pub requests: Option<u64>,
    pub tokens: Tokens,
    /// `None` when the provider's tokens have no price to be costed at.
    pub cost_micros: Option<Micros>,
}

/// The channel and caller's model whose price costed the provider's tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PricedAs {
    pub channel: String,
    pub model: String,
}

/// Something a reader of a row should know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// No selected channel sends the model: the row is shown, not counted.
    NotServed,
    /// No price for the model on its channels: the provider's cost is unknown.
    NoPrice,
    /// The row's channels (or caller's models) price the model differently.
    MixedPrices,
    /// The price has prompt-size tiers; a day's sum cannot tell which applied.
    Tiered,
    /// Records whose usage the gateway counted itself.
    Estimated(u64),
    /// Records without a provider cost (their charge counted instead).
    ChargedOnly(u64),
}

impl Note {
    pub fn text(&self, priced_as: Option<&PricedAs>) -> String {
        let busiest = priced_as.map_or(String::new(), |p| format!(" ({}/{})", p.channel, p.model));
        match self {
            Note::NotServed => {
                "no selected channel sends this model upstream: shown, not counted".into()
            }
            Note::NoPrice => "no configured price: the provider's cost is unknown".into(),
            Note::MixedPrices => format!(
                "its channels or models are priced differently: costed at the busiest pair's price{busiest}"
            ),
            Note::Tiered => {
                "the price has prompt-size tiers: the provider's tokens are costed at the base rates".into()
            }
            Note::Estimated(n) => {
                format!("{n} record(s) with usage counted by the gateway (the upstream reported none)")
            }
            Note::ChargedOnly(n) => {
                format!("{n} record(s) without a provider cost: their charge is counted")
            }
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Note::NotServed => "not_served",
            Note::NoPrice => "no_price",
            Note::MixedPrices => "mixed_prices",
            Note::Tiered => "tiered_price",
            Note::Estimated(_) => "estimated_records",
            Note::ChargedOnly(_) => "charged_only_records",
        }
    }
}

/// One day and upstream model on both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub day: Date,
    /// The upstream model name (the provider's, after `--alias`).
    pub model: String,
    pub channels: Vec<String>,
    pub ledger: Side,
    pub provider: Side,
    pub by_channel: BTreeMap<String, Share>,
    pub priced_as: Option<PricedAs>,
    pub notes: Vec<Note>,
}

impl Row {
    /// Whether the row takes part in the totals and the exit code.
    pub fn counted(&self) -> bool {
        !self.notes.contains(&Note::NotServed)
    }

    /// Provider minus ledger, in micro-USD; `None` when the provider's cost is unknown.
    pub fn diff_micros(&self) -> Option<Micros> {
        Some(
            self.provider
                .cost_micros?
                .saturating_sub(self.ledger.cost_micros.unwrap_or(0)),
        )
    }

    /// A counted row whose difference is larger than `max` (or cannot be known).
    pub fn past(&self, max: Micros) -> bool {
        self.counted()
            && self
                .diff_micros()
                .is_none_or(|d| d.unsigned_abs() > max.unsigned_abs())
    }
}

/// A (channel, caller's model) pair that sends the row's model upstream.
struct Candidate<'a> {
    channel: &'a str,
    model: &'a str,
    price: Option<&'a Price>,
}

fn candidates<'a>(
    cfg: &'a Config,
    channels: &'a [Arc<Channel>],
    upstream: &str,
    ledger: Option<&'a Sums>,
) -> Vec<Candidate<'a>> {
    let mut out: Vec<Candidate<'a>> = Vec::new();
    for c in channels {
        for m in &c.models {
            if c.upstream_model(m) == upstream {
                out.push(Candidate {
                    channel: &c.name,
                    model: m,
                    price: cfg.channel_price(&c.name, m),
                });
            }
        }
    }
    // Models a channel no longer lists, seen in the ledger.
    for (ch, share) in ledger.map(|s| &s.by_channel).into_iter().flatten() {
        for m in share.models.keys() {
            if !out.iter().any(|c| c.channel == ch && c.model == m) {
                out.push(Candidate {
                    channel: ch,
                    model: m,
                    price: cfg.channel_price(ch, m),
                });
            }
        }
    }
    out
}

/// The provider's tokens at a price's base rates, rounded up to the micro-USD once.
pub fn cost_at(p: &Price, t: &Tokens) -> Micros {
    let r = &p.rates;
    let lines = [
        (Kind::Input, t.input, r.input),
        (Kind::CachedInput, t.cached_input, r.cached_input),
        (Kind::CacheWrite, t.cache_write, r.cache_write),
        (Kind::CacheWrite1h, t.cache_write_1h, r.cache_write_1h),
        (Kind::AudioInput, t.audio_input, r.audio_input),
        (Kind::Output, t.output, r.output),
        (Kind::AudioOutput, t.audio_output, r.audio_output),
        (Kind::WebSearch, t.web_search, p.per_web_search_pico),
    ];
    Bill {
        lines: lines
            .into_iter()
            .map(|(k, units, rate)| Line::new(k, units, rate))
            .collect(),
        tier: None,
    }
    .micros()
}

/// The report's sums by day and model (a report grouped finer adds up here).
fn reported_sums(reported: &[ProviderUsage]) -> BTreeMap<(Date, String), (Tokens, Option<u64>)> {
    let mut out: BTreeMap<(Date, String), (Tokens, Option<u64>)> = BTreeMap::new();
    for u in reported {
        let e = out.entry((u.day, u.model.clone())).or_default();
        e.0.add(&u.tokens);
        e.1 = match (e.1, u.requests) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (None, b) => b,
            (a, None) => a,
        };
    }
    out
}

/// One row per UTC day and upstream model seen on either side, in that order.
pub fn rows(
    cfg: &Config,
    provider: Provider,
    channels: &[Arc<Channel>],
    mut ledger: Ledger,
    reported: &[ProviderUsage],
) -> Vec<Row> {
    let mut reported = reported_sums(reported);
    let keys: BTreeSet<(Date, String)> = ledger.keys().chain(reported.keys()).cloned().collect();
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let sums = ledger.remove(&key);
        let (tokens, requests) = reported.remove(&key).unwrap_or_default();
        let priced = priced(cfg, channels, &key.1, sums.as_ref(), &tokens);
        let provider = Side {
            requests: match provider {
                Provider::OpenAi => Some(requests.unwrap_or(0)),
                Provider::Anthropic => requests,
            },
            tokens,
            cost_micros: priced.cost,
        };
        out.push(row(key, sums.unwrap_or_default(), provider, priced));
    }
    out
}

/// How a row's provider tokens are costed, and what qualifies that cost.
struct Priced {
    /// Every channel that sends the row's model, in configuration order.
    channels: Vec<String>,
    priced_as: Option<PricedAs>,
    cost: Option<Micros>,
    notes: Vec<Note>,
}

/// Costs the provider's `tokens` of an upstream model at the price of the pair the ledger
/// served it through most (see the module's doc).
fn priced(
    cfg: &Config,
    channels: &[Arc<Channel>],
    upstream: &str,
    sums: Option<&Sums>,
    tokens: &Tokens,
) -> Priced {
    let cands = candidates(cfg, channels, upstream, sums);
    let count = |c: &Candidate| {
        sums.and_then(|s| s.by_channel.get(c.channel))
            .and_then(|sh| sh.models.get(c.model))
            .copied()
            .unwrap_or(0)
    };
    // The busiest pair; the first in configuration order on a tie.
    let chosen = cands
        .iter()
        .enumerate()
        .max_by_key(|(i, c)| (count(c), std::cmp::Reverse(*i)))
        .map(|(_, c)| c);
    let mut notes = Vec::new();
    if cands.is_empty() {
        notes.push(Note::NotServed);
    }
    let price = chosen.and_then(|c| c.price);
    let cost = match price {
        _ if *tokens == Tokens::default() => Some(0),
        Some(p) => Some(cost_at(p, tokens)),
        None => None,
    };
    if !cands.is_empty() && cost.is_none() {
        notes.push(Note::NoPrice);
    }
    let priced: Vec<&Price> = cands.iter().filter_map(|c| c.price).collect();
    if priced.windows(2).any(|w| w[0] != w[1]) {
        notes.push(Note::MixedPrices);
    }
    if price.is_some_and(|p| !p.tiers.is_empty()) {
        notes.push(Note::Tiered);
    }
    let mut names: Vec<String> = Vec::new();
    for c in &cands {
        if !names.iter().any(|n| n == c.channel) {
            names.push(c.channel.to_string());
        }
    }
    let priced_as = chosen.filter(|c| c.price.is_some()).map(|c| PricedAs {
        channel: c.channel.to_string(),
        model: c.model.to_string(),
    });
    Priced {
        channels: names,
        priced_as,
        cost,
        notes,
    }
}

/// One day and model: the ledger's sums beside the provider's side.
fn row(key: (Date, String), sums: Sums, provider: Side, priced: Priced) -> Row {
    let mut notes = priced.notes;
    if sums.estimated > 0 {
        notes.push(Note::Estimated(sums.estimated));
    }
    if sums.charged_only > 0 {
        notes.push(Note::ChargedOnly(sums.charged_only));
    }
    Row {
        day: key.0,
        model: key.1,
        channels: priced.channels,
        ledger: Side {
            requests: Some(sums.requests),
            tokens: sums.tokens,
            cost_micros: Some(sums.cost),
        },
        provider,
        by_channel: sums.by_channel,
        priced_as: priced.priced_as,
        notes,
    }
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
