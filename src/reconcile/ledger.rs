//! The gateway's side: usage records of the selected channels, summed by UTC day and
//! upstream model (the name the channel sent, which is the name a provider reports).
//!
//! A record counts when its status is 2xx and its endpoint is one the provider's
//! completions/messages report covers (not embeddings, images, audio, moderations,
//! rerank or video, which providers report elsewhere). Its tokens come from its bill
//! lines, or from its prompt/completion/cached counts when it has none; its cost is its
//! provider cost (the channel's price, before the key's multiplier), or what the key
//! was charged for records older than that field.

use super::error::ReconcileError;
use super::{day_of_ms, day_start_ms, Provider, Range, Tokens};
use crate::billing::Kind;
use crate::channels::Channel;
use crate::store::usage_query::{Reader, UsageFilter, MAX_SCAN};
use crate::store::{Micros, Store, UsageRecord};
use jiff::civil::Date;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one channel added to a ledger row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Share {
    pub requests: u64,
    pub cost_micros: Micros,
    /// Records by the model name the caller used.
    pub models: BTreeMap<String, u64>,
}

/// One day and upstream model of the ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sums {
    pub tokens: Tokens,
    pub requests: u64,
    /// Records whose usage the gateway counted itself (the upstream reported none).
    pub estimated: u64,
    /// Records without a provider cost, whose charge was counted instead.
    pub charged_only: u64,
    pub cost: Micros,
    pub by_channel: BTreeMap<String, Share>,
}

pub type Ledger = BTreeMap<(Date, String), Sums>;

/// Endpoints whose usage a provider reports apart from completions and messages.
const REPORTED_ELSEWHERE: &[&str] = &[
    "/v1/embeddings",
    "/v1/engines/",
    "/v1/images/",
    "/v1/audio/",
    "/v1/moderations",
    "/v1/rerank",
    "/v1/videos",
];

pub fn in_report(endpoint: &str) -> bool {
    !REPORTED_ELSEWHERE.iter().any(|p| endpoint.starts_with(p))
}

/// A record's tokens by kind (before the provider's folding).
pub fn record_tokens(r: &UsageRecord) -> Tokens {
    let mut t = Tokens::default();
    if r.bill.is_empty() {
        let cached = r.cached_tokens.min(r.prompt_tokens);
        t.input = r.prompt_tokens - cached;
        t.cached_input = cached;
        t.output = r.completion_tokens;
        return t;
    }
    for l in &r.bill.lines {
        let slot = match l.kind {
            Kind::Input | Kind::ImageInput => &mut t.input,
            Kind::CachedInput => &mut t.cached_input,
            Kind::CacheWrite => &mut t.cache_write,
            Kind::CacheWrite1h => &mut t.cache_write_1h,
            Kind::AudioInput => &mut t.audio_input,
            Kind::Output | Kind::Reasoning | Kind::ImageOutput => &mut t.output,
            Kind::AudioOutput => &mut t.audio_output,
            Kind::WebSearch => &mut t.web_search,
            // Units of the endpoints reported elsewhere.
            Kind::SearchUnits | Kind::Images | Kind::Characters | Kind::AudioMs | Kind::VideoMs => {
                continue
            }
        };
        *slot = slot.saturating_add(l.units);
    }
    t
}

/// Adds one record to the ledger; `upstream` is the model name its channel sent.
pub fn add(ledger: &mut Ledger, provider: Provider, day: Date, upstream: &str, r: &UsageRecord) {
    let s = ledger.entry((day, upstream.to_string())).or_default();
    s.tokens.add(&provider.fold(record_tokens(r)));
    s.requests += 1;
    s.estimated += u64::from(r.estimated);
    let cost = match r.provider_cost {
        Some(c) => c,
        None => {
            s.charged_only += 1;
            r.cost
        }
    };
    s.cost = s.cost.saturating_add(cost);
    let share = s.by_channel.entry(r.channel.clone()).or_default();
    share.requests += 1;
    share.cost_micros = share.cost_micros.saturating_add(cost);
    *share.models.entry(r.model.clone()).or_default() += 1;
}

/// The ledger of `channels` over the range, read a day at a time so that no query holds
/// more than a day of records.
pub async fn read(
    store: &dyn Store,
    provider: Provider,
    channels: &[Arc<Channel>],
    range: &Range,
) -> Result<Ledger, ReconcileError> {
    let reader = Reader::of(store);
    let limit = MAX_SCAN as usize;
    let mut ledger = Ledger::new();
    for day in range.days() {
        let from = day_start_ms(day)?;
        let filter = UsageFilter {
            status: Some((200, 299)),
            from_ms: Some(from),
            to_ms: Some(from + 86_400_000),
            ..UsageFilter::default()
        };
        let records = reader.get().find_usage(&filter, limit).await?;
        if records.len() >= limit {
            return Err(ReconcileError::TooManyRecords {
                day: day.to_string(),
                limit,
            });
        }
        for r in &records {
            let Some(c) = channels.iter().find(|c| c.name == r.channel) else {
                continue;
            };
            if !in_report(&r.endpoint) {
                continue;
            }
            let day = day_of_ms(r.time_ms).unwrap_or(day);
            add(&mut ledger, provider, day, c.upstream_model(&r.model), r);
        }
    }
    Ok(ledger)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::billing::{Bill, Line};

    pub(crate) fn record(channel: &str, model: &str, t: i64) -> UsageRecord {
        UsageRecord {
            request_id: format!("r{t}"),
            time_ms: t,
            key_id: "k".into(),
            endpoint: "/v1/chat/completions".into(),
            model: model.into(),
            channel: channel.into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            cached_tokens: 2,
            cost: 120,
            estimated: false,
            overrun: 0,
            provider_cost: Some(100),
            bill: Bill::default(),
            multiplier_ppm: Some(1_200_000),
            status: 200,
            latency_ms: 1,
            stream: false,
            group: None,
        }
    }

    #[test]
    fn tokens_come_from_bill_lines_else_from_the_counts() {
        let mut r = record("c", "m", 0);
        let t = record_tokens(&r);
        assert_eq!((t.input, t.cached_input, t.output), (8, 2, 5));
        r.bill = Bill {
            lines: vec![
                Line::new(Kind::Input, 6, 1),
                Line::new(Kind::ImageInput, 1, 1),
                Line::new(Kind::CachedInput, 2, 1),
                Line::new(Kind::CacheWrite1h, 40, 1),
                Line::new(Kind::Output, 3, 1),
                Line::new(Kind::Reasoning, 2, 1),
                Line::new(Kind::WebSearch, 1, 1),
                Line::new(Kind::Characters, 99, 1),
            ],
            tier: None,
        };
        let t = record_tokens(&r);
        assert_eq!(
            t,
            Tokens {
                input: 7,
                cached_input: 2,
                cache_write_1h: 40,
                output: 5,
                web_search: 1,
                ..Tokens::default()
            }
        );
    }

    #[test]
    fn rows_sum_by_day_and_upstream_model_and_keep_each_channel_s_share() {
        let day: Date = "2025-08-01".parse().unwrap();
        let mut l = Ledger::new();
        let a = record("a", "gpt-x", 1);
        let mut b = record("b", "gpt-x-alias", 2);
        b.provider_cost = None;
        b.estimated = true;
        add(&mut l, Provider::OpenAi, day, "gpt-x-2025", &a);
        add(&mut l, Provider::OpenAi, day, "gpt-x-2025", &b);
        let s = &l[&(day, "gpt-x-2025".to_string())];
        assert_eq!((s.requests, s.estimated, s.charged_only), (2, 1, 1));
        assert_eq!(s.cost, 100 + 120, "provider cost, else the charge");
        assert_eq!(s.tokens.input, 16);
        assert_eq!(s.by_channel["a"].models["gpt-x"], 1);
        assert_eq!(s.by_channel["b"].cost_micros, 120);
    }

    #[test]
    fn endpoints_reported_elsewhere_are_left_out() {
        for e in [
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/responses",
            "/v1/realtime",
        ] {
            assert!(in_report(e), "{e}");
        }
        for e in [
            "/v1/embeddings",
            "/v1/images/generations",
            "/v1/audio/speech",
            "/v1/videos",
        ] {
            assert!(!in_report(e), "{e}");
        }
    }
}
