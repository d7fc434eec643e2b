//! The budget, each line judged against the bare Pingora passthrough measured in the same
//! run: CPU per request of the proxy (from `/proc`), Redis work, memory per idle stream,
//! streams never held back, copies of a large body. Throughput ratios and open-loop
//! latencies are reported as figures, not judged: they depend on who else uses the cores.
//! Scenarios kept in files of their own add their lines through [`Section`]. The Markdown
//! report and the chart are in `markdown.rs`.

use super::scenarios::{us, Closed, Idle, Open, Streams};
use super::targets::Kind;

pub struct Big {
    /// What was sent: `chat → chat`, `messages → chat`.
    pub label: &'static str,
    pub closed: Closed,
    pub body: usize,
    /// Heap bytes the whole process allocated per request (client and upstream reuse
    /// their buffers, so this is the proxy's).
    pub alloc_per_req: f64,
    /// Body bytes the upstream received per request (the relay delivered the body).
    pub upstream_per_req: f64,
}

/// CPU the proxy's threads spent per request in the closed loop (all rounds).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// The proxy's runtime (Pingora, the relay, a Redis store's connections and leases).
    pub proxy_us: f64,
    /// The embedded store's own threads (writer, readers, checkpoints).
    pub store_us: f64,
}

/// What Redis did per request of a scenario (from `INFO all` before and after).
#[derive(Debug, Clone, Copy, Default)]
pub struct RedisPer {
    pub requests: u64,
    pub scripts: f64,
    pub commands: f64,
    pub cpu_us: f64,
    /// Of which inside commands.
    pub command_us: f64,
}

pub struct TargetResult {
    pub name: &'static str,
    pub kind: Kind,
    /// Small chat, closed loop: the round with the median rate.
    pub closed: Option<Closed>,
    pub cpu: Option<Cpu>,
    pub redis: Option<RedisPer>,
    /// Small chat, open loop: the round with the median p50.
    pub open: Option<Open>,
    pub redis_open: Option<RedisPer>,
    /// Streams from a fast upstream, closed loop: the round with the median rate.
    pub flow: Option<Streams>,
    /// Paced streams: time to first byte and gaps.
    pub streams: Option<Streams>,
    pub big: Vec<Big>,
    pub idle: Vec<Idle>,
}

impl TargetResult {
    pub fn new(name: &'static str, kind: Kind) -> TargetResult {
        TargetResult {
            name,
            kind,
            closed: None,
            cpu: None,
            redis: None,
            open: None,
            redis_open: None,
            flow: None,
            streams: None,
            big: Vec::new(),
            idle: Vec::new(),
        }
    }
}

pub struct Meta {
    pub machine: String,
    pub command: &'static str,
    pub settings: Vec<String>,
    pub notes: Vec<String>,
    /// Process RSS once every target was up, before any load.
    pub rss_base: u64,
    /// The largest idle-stream count measured.
    pub idle_big: usize,
    /// Rounds of the closed, open and streaming scenarios (medians are reported).
    pub rounds: usize,
}

pub struct Line {
    pub text: String,
    pub measured: String,
    /// `None`: not measured in this run (the note says why), or a figure.
    pub pass: Option<bool>,
    /// Reported, not judged (throughput ratios and latencies depend on who else uses
    /// the cores; the budget is CPU per request).
    pub figure: bool,
}

impl Line {
    pub fn judged(text: String, measured: String, pass: Option<bool>) -> Line {
        Line {
            text,
            measured,
            pass,
            figure: false,
        }
    }

    pub fn figure(text: String, measured: String) -> Line {
        Line {
            text,
            measured,
            pass: None,
            figure: true,
        }
    }

    pub fn verdict(&self) -> &'static str {
        match (self.figure, self.pass) {
            (true, _) => "figure",
            (false, Some(true)) => "PASS",
            (false, Some(false)) => "FAIL",
            (false, None) => "n/a",
        }
    }
}

/// A scenario kept in a file of its own (`long.rs`, …): its lines in the budget and its
/// table in the report, after the scenarios of this harness.
pub trait Section {
    fn lines(&self) -> Vec<Line>;
    fn markdown(&self, out: &mut String);
    /// What went wrong, for the smoke run (a scenario that never succeeded, errors).
    fn failures(&self) -> Vec<String>;
}

pub fn find(rs: &[TargetResult], kind: Kind) -> Option<&TargetResult> {
    rs.iter().find(|r| r.kind == kind)
}

fn gateways(rs: &[TargetResult]) -> impl Iterator<Item = &TargetResult> {
    rs.iter().filter(|r| r.kind == Kind::Gateway)
}

/// CPU per small chat request (whole answer) the gateway may add to the passthrough's.
pub const SMALL_CHAT_ADDED_US: f64 = 35.0;
pub const SCRIPTS_MAX: f64 = 0.1;
pub const REDIS_CPU_US_MAX: f64 = 5.0;
/// Memory the gateway may hold per idle stream beyond what the passthrough holds.
pub const IDLE_KIB_MAX: f64 = 16.0;
/// Short gaps (< half the upstream interval) allowed beyond the passthrough's share:
/// CPU contention on 2 cores delays an event now and then, and the next one then
/// follows closely. Buffering would show as a far larger share, or a longer median gap.
pub const COALESCED_SLACK: f64 = 0.02;
/// The median gap may differ from the passthrough's by this fraction.
pub const GAP_MEDIAN_SLACK: f64 = 0.10;
/// Copies of the body a 1 MiB same-protocol request may allocate beyond the read buffer:
/// one, plus slack for small allocations.
pub const COPIES_MAX: f64 = 1.25;
/// The gateway's read buffer, in bodies. The route is chosen from the body, so the
/// gateway reads it whole before anything goes upstream (the passthrough streams it
/// through fixed buffers); the goal counts the copies beyond that buffer.
pub const READ_BUFFER: f64 = 1.0;

pub fn idle_at(r: &TargetResult, n: usize) -> Option<&Idle> {
    r.idle.iter().find(|i| i.wanted == n)
}

pub fn delta(i: &Idle) -> i64 {
    i.rss_open as i64 - i.rss_before as i64
}

/// Bytes per stream a target holds beyond `base` (its RSS growth less `base`'s, over the
/// streams opened).
pub fn beyond(rs: &[TargetResult], g: &TargetResult, base: Kind, n: usize) -> Option<f64> {
    let gi = idle_at(g, n)?;
    let bi = idle_at(find(rs, base)?, n)?;
    Some((delta(gi) - delta(bi)) as f64 / gi.opened.max(1) as f64)
}

pub fn coalesced_share(s: &Streams) -> f64 {
    let gaps = s.gaps.len();
    if gaps == 0 {
        0.0
    } else {
        s.coalesced as f64 / gaps as f64
    }
}

/// A throughput ratio: a figure, not a verdict (the load generator shares the cores).
fn ratio_line(text: String, got: Option<(f64, f64, u64)>, unit: &str) -> Line {
    let measured = match got {
        Some((a, b, errors)) if b > 0.0 => format!(
            "{a:.0} vs {b:.0} {unit} = {:.0} %{}",
            a / b * 100.0,
            if errors > 0 {
                format!(", {errors} errors")
            } else {
                String::new()
            }
        ),
        _ => "not measured".into(),
    };
    Line::figure(text, measured)
}

/// CPU per request the proxy process spends (its runtime and its store's threads).
pub fn cpu_total(c: &Cpu) -> f64 {
    c.proxy_us + c.store_us
}

pub fn budget(rs: &[TargetResult], meta: &Meta) -> Vec<Line> {
    let mut lines = Vec::new();
    let Some(pt) = find(rs, Kind::Passthrough) else {
        return lines;
    };
    for g in gateways(rs) {
        let (measured, pass) = match (&g.cpu, &pt.cpu, &g.closed) {
            (Some(a), Some(b), Some(c)) => {
                let added = cpu_total(a) - cpu_total(b);
                (
                    format!(
                        "{added:+.1} µs ({:.1} µs: proxy {:.1} + store threads {:.1}, vs {:.1} µs)",
                        cpu_total(a),
                        a.proxy_us,
                        a.store_us,
                        cpu_total(b)
                    ),
                    Some(added <= SMALL_CHAT_ADDED_US && c.errors == 0),
                )
            }
            _ => ("not measured".into(), None),
        };
        lines.push(Line::judged(
            format!(
                "CPU per request, small chat (whole answer, closed loop), {}: ≤ {SMALL_CHAT_ADDED_US:.0} µs above the passthrough's",
                g.name
            ),
            measured,
            pass,
        ));
    }
    for g in gateways(rs) {
        let got = g
            .closed
            .as_ref()
            .zip(pt.closed.as_ref())
            .map(|(a, b)| (a.rate(), b.rate(), a.errors));
        lines.push(ratio_line(
            format!(
                "Throughput, small chat, {}: share of the passthrough's",
                g.name
            ),
            got,
            "req/s",
        ));
    }
    for g in gateways(rs) {
        let got = g
            .flow
            .as_ref()
            .zip(pt.flow.as_ref())
            .map(|(a, b)| (a.rate(), b.rate(), a.errors));
        lines.push(ratio_line(
            format!(
                "Throughput, streaming chat, {}: share of the passthrough's",
                g.name
            ),
            got,
            "streams/s",
        ));
    }
    for g in gateways(rs).filter(|g| g.name.contains("redis")) {
        let (measured, pass) = match &g.redis {
            Some(w) if w.requests > 0 => (
                format!(
                    "{:.3} script calls, {:.2} commands, {:.1} µs of redis-server CPU per request ({} requests)",
                    w.scripts, w.commands, w.cpu_us, w.requests
                ),
                Some(w.scripts <= SCRIPTS_MAX && w.cpu_us <= REDIS_CPU_US_MAX),
            ),
            _ => ("not measured".into(), None),
        };
        lines.push(Line::judged(
            format!(
                "Redis work per request at steady state (closed loop), {}: ≤ {SCRIPTS_MAX} script calls and ≤ {REDIS_CPU_US_MAX:.0} µs of redis-server CPU",
                g.name
            ),
            measured,
            pass,
        ));
    }
    for g in gateways(rs) {
        let measured = match (&g.open, &pt.open) {
            (Some(a), Some(b)) => {
                let d50 = us(&a.latency, 0.5) - us(&b.latency, 0.5);
                let d99 = us(&a.latency, 0.99) - us(&b.latency, 0.99);
                format!("p50 {d50:+.0} µs, p99 {d99:+.0} µs; {} errors", a.errors)
            }
            _ => "not measured".into(),
        };
        lines.push(Line::figure(
            format!(
                "Added latency at {:.0} req/s (open loop), {}",
                pt.open.as_ref().map_or(0.0, |o| o.rate),
                g.name
            ),
            measured,
        ));
    }
    for g in gateways(rs) {
        let n = meta.idle_big;
        let (measured, pass) = match (idle_at(g, n), beyond(rs, g, Kind::Passthrough, n)) {
            (Some(i), Some(b)) => (
                format!(
                    "{:.1} KiB per stream beyond the passthrough's {:.1} KiB, at {} streams; {} errors",
                    b / 1024.0,
                    idle_at(pt, n).map_or(f64::NAN, |p| delta(p) as f64 / 1024.0 / p.opened.max(1) as f64),
                    i.opened,
                    i.errors + (i.wanted as u64).saturating_sub(i.opened)
                ),
                Some(b / 1024.0 <= IDLE_KIB_MAX && i.errors == 0 && i.opened == n as u64),
            ),
            _ => ("not measured".into(), None),
        };
        lines.push(Line::judged(
            format!(
                "Idle streams, {}: ≤ {IDLE_KIB_MAX:.0} KiB per stream beyond the passthrough, zero errors",
                g.name
            ),
            measured,
            pass,
        ));
    }
    for g in gateways(rs) {
        let (m1, m2, p2) = match (&g.streams, &pt.streams) {
            (Some(a), Some(b)) => {
                let d50 = us(&a.ttfb, 0.5) - us(&b.ttfb, 0.5);
                let d99 = us(&a.ttfb, 0.99) - us(&b.ttfb, 0.99);
                let share = coalesced_share(a);
                (
                    format!("p50 {d50:+.0} µs, p99 {d99:+.0} µs; {} errors", a.errors),
                    format!(
                        "{:.2} % of gaps < half the interval (passthrough {:.2} %); gap p50 {:.2} ms (passthrough {:.2} ms)",
                        share * 100.0,
                        coalesced_share(b) * 100.0,
                        us(&a.gaps, 0.5) / 1e3,
                        us(&b.gaps, 0.5) / 1e3
                    ),
                    Some(
                        share <= coalesced_share(b) + COALESCED_SLACK
                            && (us(&a.gaps, 0.5) / us(&b.gaps, 0.5) - 1.0).abs() <= GAP_MEDIAN_SLACK
                            && a.errors == 0,
                    ),
                )
            }
            _ => ("not measured".into(), "not measured".into(), None),
        };
        lines.push(Line::figure(
            format!(
                "Streaming, {}: time to first byte added to the passthrough's",
                g.name
            ),
            m1,
        ));
        lines.push(Line::judged(
            format!(
                "Streaming, {}: chunks leave as they arrive (no coalescing)",
                g.name
            ),
            m2,
            p2,
        ));
    }
    let base_alloc = pt.big.first().map(|b| b.alloc_per_req);
    for g in gateways(rs) {
        for b in g.big.iter().filter(|b| b.label == "chat → chat") {
            let extra = base_alloc.map(|p| (b.alloc_per_req - p) / b.body as f64);
            lines.push(Line::judged(
                format!(
                    "1 MiB request ({}), {}: at most one copy of the body beyond the read buffer",
                    b.label, g.name
                ),
                extra.map_or("not measured".into(), |x| {
                    format!(
                        "{:.2} copies beyond the read buffer ({x:.2} × the body allocated beyond the passthrough's, {READ_BUFFER:.0} of them the read buffer)",
                        x - READ_BUFFER
                    )
                }),
                extra.map(|x| x - READ_BUFFER <= COPIES_MAX),
            ));
        }
    }
    lines
}
