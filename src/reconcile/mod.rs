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
mod report;

pub use compare::Row;
pub use error::{chain, ReconcileError};
pub use report::Report;

use crate::channels::{Channel, ChannelProtocol};
use crate::config::Config;
use crate::store::{Micros, Store};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Longest range one run reads: a year of days.
pub const MAX_DAYS: i64 = 366;

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

/// An inclusive range of UTC days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from: Date,
    pub to: Date,
}

impl Range {
    /// `from` and `to` as `YYYY-MM-DD`, `to` not before `from`, at most [`MAX_DAYS`].
    pub fn parse(from: &str, to: &str) -> Result<Range, ReconcileError> {
        let day = |flag: &'static str, s: &str| {
            s.parse::<Date>().map_err(|e| ReconcileError::Argument {
                flag,
                message: format!("`{s}` is not a day (YYYY-MM-DD): {e}"),
            })
        };
        let r = Range {
            from: day("--from", from)?,
            to: day("--to", to)?,
        };
        if r.to < r.from {
            return Err(ReconcileError::Argument {
                flag: "--to",
                message: "is before --from".into(),
            });
        }
        if r.days().len() as i64 > MAX_DAYS {
            return Err(ReconcileError::Argument {
                flag: "--to",
                message: format!("the range is longer than {MAX_DAYS} days"),
            });
        }
        Ok(r)
    }

    pub fn days(&self) -> Vec<Date> {
        let mut out = Vec::new();
        let mut d = self.from;
        while d <= self.to && out.len() as i64 <= MAX_DAYS {
            out.push(d);
            match d.tomorrow() {
                Ok(n) => d = n,
                Err(_) => break,
            }
        }
        out
    }

    pub fn contains(&self, d: Date) -> bool {
        self.from <= d && d <= self.to
    }
}

/// Midnight UTC of `d`, in unix milliseconds.
pub fn day_start_ms(d: Date) -> Result<i64, ReconcileError> {
    d.to_zoned(TimeZone::UTC)
        .map(|z| z.timestamp().as_millisecond())
        .map_err(|e| ReconcileError::Argument {
            flag: "--from",
            message: format!("{d} has no UTC midnight: {e}"),
        })
}

/// The UTC day of a unix time in milliseconds.
pub fn day_of_ms(ms: i64) -> Option<Date> {
    jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(|t| t.to_zoned(TimeZone::UTC).date())
}

/// The admin key, kept out of `Debug` and every message.
#[derive(Clone)]
pub struct AdminKey(String);

impl AdminKey {
    pub fn new(s: String) -> AdminKey {
        AdminKey(s)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AdminKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminKey(..)")
    }
}

/// Where the provider's report comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A saved answer of the API: one page, or an array of pages.
    File(PathBuf),
    /// The API itself, at this base URL (no trailing `/v1`).
    Api { base_url: String, key: AdminKey },
}

impl Source {
    /// A saved file when `file` is given, else the API at `base_url` (default: the
    /// vendor's host) with the admin key read from the provider's variable (`key`).
    pub fn choose(
        provider: Provider,
        file: Option<PathBuf>,
        base_url: Option<String>,
        key: Option<String>,
    ) -> Result<Source, ReconcileError> {
        if let Some(path) = file {
            if base_url.is_some() {
                return Err(ReconcileError::Argument {
                    flag: "--base-url",
                    message: "has no use with --file".into(),
                });
            }
            return Ok(Source::File(path));
        }
        let base_url = base_url.unwrap_or_else(|| provider.default_base_url().into());
        match url::Url::parse(&base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
            _ => {
                return Err(ReconcileError::Argument {
                    flag: "--base-url",
                    message: format!("`{base_url}` is not an http or https URL with a host"),
                })
            }
        }
        let key = key
            .filter(|k| !k.trim().is_empty())
            .ok_or(ReconcileError::NoAdminKey {
                var: provider.admin_key_var(),
            })?;
        Ok(Source::Api {
            base_url,
            key: AdminKey::new(key),
        })
    }
}

/// `--max-diff-usd`: a non-negative amount of USD, to the micro-USD.
pub fn parse_max_diff(s: &str) -> Result<Micros, ReconcileError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => {
            Ok((v * 1_000_000.0).round() as Micros)
        }
        _ => Err(ReconcileError::Argument {
            flag: "--max-diff-usd",
            message: format!("`{s}` is not a non-negative amount of USD"),
        }),
    }
}

/// `--alias REPORTED=UPSTREAM`, each given once.
pub fn parse_aliases(pairs: &[String]) -> Result<BTreeMap<String, String>, ReconcileError> {
    let mut out = BTreeMap::new();
    for p in pairs {
        let bad = |message: String| ReconcileError::Argument {
            flag: "--alias",
            message,
        };
        let (from, to) = p
            .split_once('=')
            .filter(|(a, b)| !a.is_empty() && !b.is_empty())
            .ok_or_else(|| bad(format!("`{p}` is not REPORTED=UPSTREAM")))?;
        if out.insert(from.to_string(), to.to_string()).is_some() {
            return Err(bad(format!("`{from}` is given twice")));
        }
    }
    Ok(out)
}

/// Narrows the provider's report to part of the organization.
#[derive(Debug, Clone, Default)]
pub struct ReportFilter {
    /// Upstream API key ids (both providers).
    pub api_key_ids: Vec<String>,
    /// OpenAI project ids.
    pub projects: Vec<String>,
    /// Anthropic workspace ids.
    pub workspaces: Vec<String>,
}

/// One run, validated.
#[derive(Debug, Clone)]
pub struct Options {
    pub provider: Provider,
    pub range: Range,
    /// Channel names as given; empty for every channel of the provider's protocol.
    pub channels: Vec<String>,
    pub source: Source,
    pub filter: ReportFilter,
    /// The report's model name → the upstream model name the channels send.
    pub aliases: BTreeMap<String, String>,
    /// A row whose cost difference is larger than this (in absolute value) fails the run.
    pub max_diff: Micros,
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
    fn a_range_is_inclusive_and_bounded() {
        let r = Range::parse("2025-01-30", "2025-02-02").unwrap();
        assert_eq!(r.days().len(), 4);
        assert!(r.contains("2025-02-02".parse().unwrap()));
        assert!(!r.contains("2025-02-03".parse().unwrap()));
        assert_eq!(
            day_start_ms("1970-01-02".parse().unwrap()).unwrap(),
            86_400_000
        );
        assert_eq!(
            day_of_ms(86_400_000 - 1),
            Some("1970-01-01".parse().unwrap())
        );
        for (from, to, flag) in [
            ("2025-02-02", "2025-02-01", "--to"),
            ("2025-13-01", "2025-12-01", "--from"),
            ("2024-01-01", "2025-01-02", "--to"),
        ] {
            match Range::parse(from, to) {
                Err(ReconcileError::Argument { flag: f, .. }) => assert_eq!(f, flag),
                other => panic!("{from}..{to}: {other:?}"),
            }
        }
        assert!(Range::parse("2024-01-01", "2024-12-31").is_ok(), "366 days");
    }

    #[test]
    fn flags_are_checked_before_anything_is_read() {
        assert_eq!(parse_max_diff("0.01").unwrap(), 10_000);
        assert_eq!(parse_max_diff("0").unwrap(), 0);
        for bad in ["-1", "abc", "NaN", "inf"] {
            assert!(parse_max_diff(bad).is_err(), "{bad}");
        }
        let a = parse_aliases(&["gpt-4o-2024-08-06=gpt-4o".into()]).unwrap();
        assert_eq!(a["gpt-4o-2024-08-06"], "gpt-4o");
        assert!(parse_aliases(&["x".into()]).is_err());
        assert!(parse_aliases(&["a=b".into(), "a=c".into()]).is_err());

        let p = Provider::Anthropic;
        match Source::choose(p, None, None, None) {
            Err(ReconcileError::NoAdminKey { var }) => assert_eq!(var, "ANTHROPIC_ADMIN_KEY"),
            other => panic!("{other:?}"),
        }
        match Source::choose(p, None, None, Some("sk-ant-admin-1".into())).unwrap() {
            Source::Api { base_url, key } => {
                assert_eq!(base_url, "https://api.anthropic.com");
                assert_eq!(format!("{key:?}"), "AdminKey(..)", "never shown");
            }
            other => panic!("{other:?}"),
        }
        assert!(Source::choose(p, None, Some("ftp://x".into()), Some("k".into())).is_err());
        assert!(Source::choose(p, Some("f.json".into()), Some("http://x".into()), None).is_err());
        assert!(matches!(
            Source::choose(p, Some("f.json".into()), None, None),
            Ok(Source::File(_))
        ));
    }

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
