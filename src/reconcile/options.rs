//! What one run is asked to do, checked before anything is read: the days, where the
//! provider's report comes from, how it is narrowed, and the threshold.

use super::error::ReconcileError;
use super::Provider;
use crate::store::Micros;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Longest range one run reads: a year of days.
pub const MAX_DAYS: i64 = 366;

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
}
