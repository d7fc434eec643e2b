//! The comparison as a person reads it (a table, three lines a row: ledger, provider,
//! difference) or as a program does (`--json`).

use super::compare::{Row, Side};
use super::{Provider, Range, TokenKind, Tokens};
use crate::store::Micros;
use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub struct Report {
    pub provider: Provider,
    pub range: Range,
    pub channels: Vec<String>,
    pub max_diff: Micros,
    pub rows: Vec<Row>,
}

/// Sums of the counted rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub ledger: Side,
    pub provider: Side,
    /// Counted rows the provider's cost of which is unknown (left out of its sum).
    pub unpriced: usize,
}

/// `-0.000123`, `+1.500000`: micro-USD as USD, exact.
pub fn usd(m: Micros, signed: bool) -> String {
    let sign = match (m < 0, signed && m > 0) {
        (true, _) => "-",
        (false, true) => "+",
        (false, false) => "",
    };
    let a = m.unsigned_abs();
    format!("{sign}{}.{:06}", a / 1_000_000, a % 1_000_000)
}

fn signed(d: i128) -> String {
    if d > 0 {
        format!("+{d}")
    } else {
        d.to_string()
    }
}

fn usd_value(m: Micros) -> Value {
    json!(m as f64 / 1_000_000.0)
}

impl Report {
    /// Counted rows whose difference is past the threshold.
    pub fn past(&self) -> usize {
        self.rows.iter().filter(|r| r.past(self.max_diff)).count()
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            ledger: Side {
                requests: Some(0),
                cost_micros: Some(0),
                ..Side::default()
            },
            provider: Side {
                requests: Some(0),
                cost_micros: Some(0),
                ..Side::default()
            },
            unpriced: 0,
        };
        let add = |s: &mut Side, r: &Side| {
            s.tokens.add(&r.tokens);
            s.requests = match (s.requests, r.requests) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
            if let (Some(a), Some(b)) = (s.cost_micros, r.cost_micros) {
                s.cost_micros = Some(a.saturating_add(b));
            }
        };
        for r in self.rows.iter().filter(|r| r.counted()) {
            add(&mut t.ledger, &r.ledger);
            add(&mut t.provider, &r.provider);
            t.unpriced += usize::from(r.provider.cost_micros.is_none());
        }
        t
    }

    pub fn table(&self) -> String {
        let cells = Cells {
            kinds: self.provider.columns(),
        };
        let mut head = vec!["day", "model", "channels", "side", "requests"];
        head.extend(cells.kinds.iter().map(|k| k.heading()));
        head.extend(["cost_usd", ""]);
        let mut lines: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
        let mut notes = Vec::new();
        for r in &self.rows {
            let channels = if r.channels.is_empty() {
                "(none)".to_string()
            } else {
                r.channels.join(",")
            };
            let mark = if r.past(self.max_diff) {
                "!"
            } else if !r.counted() {
                "(not counted)"
            } else {
                ""
            };
            let lead = [r.day.to_string(), r.model.clone(), channels];
            cells.three_lines(&mut lines, lead, &r.ledger, &r.provider, mark);
            for n in &r.notes {
                notes.push(format!(
                    "{} {}: {}",
                    r.day,
                    r.model,
                    n.text(r.priced_as.as_ref())
                ));
            }
        }
        let t = self.totals();
        let lead = ["total".to_string(), String::new(), String::new()];
        cells.three_lines(&mut lines, lead, &t.ledger, &t.provider, "");
        if t.unpriced > 0 {
            notes.push(format!(
                "{} row(s) have no provider cost; the provider total leaves them out",
                t.unpriced
            ));
        }
        let mut out = format!(
            "{} usage {}..{} (UTC days), channels {}; diff = provider - ledger\n\n",
            self.provider.as_str(),
            self.range.from,
            self.range.to,
            self.channels.join(",")
        );
        out.push_str(&align(&lines, 4));
        if !notes.is_empty() {
            out.push('\n');
            for n in notes {
                out.push_str(&format!("* {n}\n"));
            }
        }
        out.push('\n');
        out.push_str(&self.verdict());
        out
    }

    /// The table's last line: every difference within the threshold, or how many not.
    fn verdict(&self) -> String {
        let past = self.past();
        if past == 0 {
            format!(
                "every difference is within {} USD\n",
                usd(self.max_diff, false)
            )
        } else {
            format!(
                "{past} row(s) differ by more than {} USD (marked !)\n",
                usd(self.max_diff, false)
            )
        }
    }

    pub fn json(&self) -> Value {
        let side = |s: &Side| {
            json!({
                "requests": s.requests,
                "tokens": s.tokens,
                "cost_micros": s.cost_micros,
                "cost_usd": s.cost_micros.map(usd_value),
            })
        };
        let diff = |l: &Side, p: &Side| {
            let tokens: serde_json::Map<String, Value> = Tokens::ALL
                .iter()
                .map(|k| {
                    (
                        json_name(*k).to_string(),
                        json!(p.tokens.get(*k) as i128 - l.tokens.get(*k) as i128),
                    )
                })
                .collect();
            let cost = match (l.cost_micros, p.cost_micros) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            };
            json!({
                "requests": match (l.requests, p.requests) {
                    (Some(a), Some(b)) => Some(b as i128 - a as i128),
                    _ => None,
                },
                "tokens": tokens,
                "cost_micros": cost,
                "cost_usd": cost.map(usd_value),
            })
        };
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut ledger = side(&r.ledger);
                ledger["by_channel"] = json!(r.by_channel);
                let mut provider = side(&r.provider);
                provider["priced_as"] = json!(r.priced_as);
                json!({
                    "day": r.day.to_string(),
                    "model": r.model,
                    "channels": r.channels,
                    "counted": r.counted(),
                    "past_threshold": r.past(self.max_diff),
                    "ledger": ledger,
                    "provider": provider,
                    "diff": diff(&r.ledger, &r.provider),
                    "notes": r.notes.iter().map(|n| json!({
                        "code": n.code(),
                        "text": n.text(r.priced_as.as_ref()),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let t = self.totals();
        json!({
            "provider": self.provider.as_str(),
            "from": self.range.from.to_string(),
            "to": self.range.to.to_string(),
            "channels": self.channels,
            "max_diff_micros": self.max_diff,
            "max_diff_usd": usd_value(self.max_diff),
            "rows": rows,
            "totals": {
                "ledger": side(&t.ledger),
                "provider": side(&t.provider),
                "diff": diff(&t.ledger, &t.provider),
                "unpriced_rows": t.unpriced,
            },
            "past_threshold": self.past(),
        })
    }
}

/// The member name of a kind in [`Tokens`]' JSON.
fn json_name(k: TokenKind) -> &'static str {
    match k {
        TokenKind::Input => "input",
        TokenKind::CachedInput => "cached_input",
        TokenKind::CacheWrite => "cache_write",
        TokenKind::CacheWrite1h => "cache_write_1h",
        TokenKind::AudioInput => "audio_input",
        TokenKind::Output => "output",
        TokenKind::AudioOutput => "audio_output",
        TokenKind::WebSearch => "web_search",
    }
}

/// The cells of a table row's three lines, for the provider's token columns.
struct Cells {
    kinds: &'static [TokenKind],
}

impl Cells {
    /// The ledger, provider and diff lines of one row (or of the totals), the first
    /// led by `lead` (day, model, channels), the others by blanks.
    fn three_lines(
        &self,
        lines: &mut Vec<Vec<String>>,
        lead: [String; 3],
        ledger: &Side,
        provider: &Side,
        mark: &str,
    ) {
        let blank = || vec![String::new(); 3];
        lines.push(
            lead.into_iter()
                .chain(self.side("ledger", ledger))
                .collect(),
        );
        lines.push(
            blank()
                .into_iter()
                .chain(self.side("provider", provider))
                .collect(),
        );
        lines.push(
            blank()
                .into_iter()
                .chain(self.diff(ledger, provider, mark))
                .collect(),
        );
    }

    fn side(&self, name: &str, s: &Side) -> Vec<String> {
        let mut v = vec![
            name.to_string(),
            s.requests.map_or("-".into(), |n| n.to_string()),
        ];
        v.extend(self.kinds.iter().map(|k| s.tokens.get(*k).to_string()));
        v.push(s.cost_micros.map_or("?".into(), |m| usd(m, false)));
        v
    }

    fn diff(&self, l: &Side, p: &Side, mark: &str) -> Vec<String> {
        let mut v = vec![
            "diff".to_string(),
            match (l.requests, p.requests) {
                (Some(a), Some(b)) => signed(b as i128 - a as i128),
                _ => "-".into(),
            },
        ];
        v.extend(
            self.kinds
                .iter()
                .map(|k| signed(p.tokens.get(*k) as i128 - l.tokens.get(*k) as i128)),
        );
        v.push(match (l.cost_micros, p.cost_micros) {
            (Some(a), Some(b)) => usd(b.saturating_sub(a), true),
            _ => "?".into(),
        });
        v.push(mark.to_string());
        v
    }
}

/// Columns padded to their widest cell: the first `left` to the left, the rest (numbers)
/// to the right; trailing blanks trimmed.
fn align(lines: &[Vec<String>], left: usize) -> String {
    let cols = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            lines
                .iter()
                .filter_map(|l| l.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in lines {
        let mut s = String::new();
        for (i, c) in l.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if i < left || i + 1 == cols {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::compare::{Note, PricedAs};

    fn row(ledger_cost: Micros, provider_cost: Option<Micros>, notes: Vec<Note>) -> Row {
        let t = Tokens {
            input: 8,
            cached_input: 2,
            output: 5,
            ..Tokens::default()
        };
        Row {
            day: "2025-08-01".parse().unwrap(),
            model: "gpt-x-2025".into(),
            channels: vec!["oa".into()],
            ledger: Side {
                requests: Some(1),
                tokens: t,
                cost_micros: Some(ledger_cost),
            },
            provider: Side {
                requests: Some(2),
                tokens: Tokens { input: 16, ..t },
                cost_micros: provider_cost,
            },
            by_channel: Default::default(),
            priced_as: Some(PricedAs {
                channel: "oa".into(),
                model: "gpt-x".into(),
            }),
            notes,
        }
    }

    fn report(rows: Vec<Row>) -> Report {
        Report {
            provider: Provider::OpenAi,
            range: Range::parse("2025-08-01", "2025-08-01").unwrap(),
            channels: vec!["oa".into()],
            max_diff: 10_000,
            rows,
        }
    }

    #[test]
    fn usd_is_exact_and_signed_on_request() {
        assert_eq!(usd(0, true), "0.000000");
        assert_eq!(usd(1_500_000, true), "+1.500000");
        assert_eq!(usd(-19, true), "-0.000019");
        assert_eq!(usd(10_000, false), "0.010000");
    }

    #[test]
    fn the_table_shows_both_sides_the_difference_and_marks_rows_past_the_threshold() {
        let mut over = row(19, Some(20_019), vec![]);
        over.model = "gpt-y".into();
        let rep = report(vec![row(19, Some(27), vec![]), over]);
        let t = rep.table();
        assert!(
            t.starts_with("openai usage 2025-08-01..2025-08-01 (UTC days), channels oa;"),
            "{t}"
        );
        let lines: Vec<&str> = t.lines().collect();
        let head = lines.iter().find(|l| l.starts_with("day")).unwrap();
        for col in [
            "requests",
            "input",
            "cached",
            "audio_in",
            "output",
            "audio_out",
            "cost_usd",
        ] {
            assert!(head.contains(col), "{head}");
        }
        assert!(
            !head.contains("cache_w_1h"),
            "OpenAI reports no cache writes apart"
        );
        let diff = lines.iter().find(|l| l.contains("  diff  ")).unwrap();
        assert!(
            diff.contains("+1") && diff.contains("+8") && diff.ends_with("+0.000008"),
            "{diff}"
        );
        let marked: Vec<_> = lines.iter().filter(|l| l.ends_with('!')).collect();
        assert_eq!(marked.len(), 1, "{t}");
        assert!(marked[0].contains("+0.020000"));
        assert!(t.contains("total"));
        assert!(
            t.ends_with("1 row(s) differ by more than 0.010000 USD (marked !)\n"),
            "{t}"
        );
        assert_eq!(rep.past(), 1);
    }

    #[test]
    fn rows_not_counted_stay_out_of_totals_and_notes_are_listed() {
        let rep = report(vec![
            row(19, Some(19), vec![Note::Estimated(1)]),
            row(0, None, vec![Note::NotServed]),
        ]);
        let t = rep.totals();
        assert_eq!(t.ledger.cost_micros, Some(19));
        assert_eq!(t.provider.requests, Some(2));
        assert_eq!(rep.past(), 0);
        let text = rep.table();
        assert!(text.contains("(not counted)"), "{text}");
        assert!(
            text.contains("* 2025-08-01 gpt-x-2025: 1 record(s) with usage counted"),
            "{text}"
        );
        assert!(
            text.ends_with("every difference is within 0.010000 USD\n"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_provider_cost_fails_the_row() {
        let rep = report(vec![row(19, None, vec![Note::NoPrice])]);
        assert_eq!(rep.past(), 1);
        assert_eq!(rep.totals().unpriced, 1);
        assert!(rep.table().contains("have no provider cost"));
    }

    #[test]
    fn json_has_every_row_with_both_sides_and_the_difference() {
        let rep = report(vec![row(19, Some(27), vec![Note::MixedPrices])]);
        let v = rep.json();
        assert_eq!(v["provider"], "openai");
        assert_eq!(v["past_threshold"], 0);
        let r = &v["rows"][0];
        assert_eq!(r["day"], "2025-08-01");
        assert_eq!(r["ledger"]["tokens"]["cached_input"], 2);
        assert_eq!(r["provider"]["priced_as"]["model"], "gpt-x");
        assert_eq!(r["diff"]["tokens"]["input"], 8);
        assert_eq!(r["diff"]["cost_micros"], 8);
        assert_eq!(r["diff"]["requests"], 1);
        assert_eq!(r["notes"][0]["code"], "mixed_prices");
        assert_eq!(v["totals"]["diff"]["cost_micros"], 8);
    }
}
