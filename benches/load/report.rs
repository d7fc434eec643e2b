//! The budget of issue 14 (and the lines of issue 6 that still stand), each judged
//! against the bare Pingora passthrough measured in the same run. The Markdown report and
//! the chart are in `markdown.rs`.

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
    /// `None`: not measured in this run (the note says why).
    pub pass: Option<bool>,
}

impl Line {
    pub fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "n/a",
        }
    }
}

pub fn find(rs: &[TargetResult], kind: Kind) -> Option<&TargetResult> {
    rs.iter().find(|r| r.kind == kind)
}

fn gateways(rs: &[TargetResult]) -> impl Iterator<Item = &TargetResult> {
    rs.iter().filter(|r| r.kind == Kind::Gateway)
}

/// Share of the passthrough's closed-loop throughput each gateway needs, by store.
fn throughput_goal(name: &str) -> f64 {
    if name.contains("redis") {
        0.75
    } else {
        0.85
    }
}

pub const STREAM_GOAL: f64 = 0.80;
pub const ADDED_P50_US: f64 = 100.0;
pub const ADDED_P99_US: f64 = 1000.0;
pub const SCRIPTS_MAX: f64 = 0.1;
pub const REDIS_CPU_US_MAX: f64 = 5.0;
/// Memory the gateway may hold per idle stream beyond what the passthrough holds.
pub const IDLE_KIB_MAX: f64 = 8.0;
pub const TTFB_ADDED_P99_US: f64 = 1000.0;
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

fn ratio_line(text: String, goal: f64, got: Option<(f64, f64, u64)>, unit: &str) -> Line {
    let (measured, pass) = match got {
        Some((a, b, errors)) if b > 0.0 => (
            format!("{a:.0} vs {b:.0} {unit} = {:.0} %", a / b * 100.0),
            Some(a / b >= goal && errors == 0),
        ),
        _ => ("not measured".into(), None),
    };
    Line {
        text,
        measured,
        pass,
    }
}

pub fn budget(rs: &[TargetResult], meta: &Meta) -> Vec<Line> {
    let mut lines = Vec::new();
    let Some(pt) = find(rs, Kind::Passthrough) else {
        return lines;
    };
    for g in gateways(rs) {
        let goal = throughput_goal(g.name);
        let got = g
            .closed
            .as_ref()
            .zip(pt.closed.as_ref())
            .map(|(a, b)| (a.rate(), b.rate(), a.errors));
        lines.push(ratio_line(
            format!(
                "Throughput, small chat, {}: ≥ {:.0} % of the passthrough's",
                g.name,
                goal * 100.0
            ),
            goal,
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
                "Throughput, streaming chat, {}: ≥ {:.0} % of the passthrough's",
                g.name,
                STREAM_GOAL * 100.0
            ),
            STREAM_GOAL,
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
        lines.push(Line {
            text: format!(
                "Redis work per request at steady state (closed loop), {}: ≤ {SCRIPTS_MAX} script calls and ≤ {REDIS_CPU_US_MAX:.0} µs of redis-server CPU",
                g.name
            ),
            measured,
            pass,
        });
    }
    for g in gateways(rs) {
        let (measured, pass) = match (&g.open, &pt.open) {
            (Some(a), Some(b)) => {
                let d50 = us(&a.latency, 0.5) - us(&b.latency, 0.5);
                let d99 = us(&a.latency, 0.99) - us(&b.latency, 0.99);
                (
                    format!("p50 {d50:+.0} µs, p99 {d99:+.0} µs"),
                    Some(d50 <= ADDED_P50_US && d99 <= ADDED_P99_US && a.errors == 0),
                )
            }
            _ => ("not measured".into(), None),
        };
        lines.push(Line {
            text: format!(
                "Added latency at {:.0} req/s (open loop), {}: p50 ≤ {ADDED_P50_US:.0} µs, p99 ≤ 1 ms",
                pt.open.as_ref().map_or(0.0, |o| o.rate),
                g.name
            ),
            measured,
            pass,
        });
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
        lines.push(Line {
            text: format!(
                "Idle streams, {}: ≤ {IDLE_KIB_MAX:.0} KiB per stream beyond the passthrough, zero errors",
                g.name
            ),
            measured,
            pass,
        });
    }
    for g in gateways(rs) {
        let (m1, p1, m2, p2) = match (&g.streams, &pt.streams) {
            (Some(a), Some(b)) => {
                let d99 = us(&a.ttfb, 0.99) - us(&b.ttfb, 0.99);
                let share = coalesced_share(a);
                (
                    format!("TTFB p99 {d99:+.0} µs"),
                    Some(d99 <= TTFB_ADDED_P99_US && a.errors == 0),
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
            _ => ("not measured".into(), None, "not measured".into(), None),
        };
        lines.push(Line {
            text: format!(
                "Streaming, {}: time to first byte ≤ 1 ms above the passthrough at p99",
                g.name
            ),
            measured: m1,
            pass: p1,
        });
        lines.push(Line {
            text: format!(
                "Streaming, {}: chunks leave as they arrive (no coalescing)",
                g.name
            ),
            measured: m2,
            pass: p2,
        });
    }
    let base_alloc = pt.big.first().map(|b| b.alloc_per_req);
    for g in gateways(rs) {
        for b in g.big.iter().filter(|b| b.label == "chat → chat") {
            let extra = base_alloc.map(|p| (b.alloc_per_req - p) / b.body as f64);
            lines.push(Line {
                text: format!(
                    "1 MiB request ({}), {}: at most one copy of the body beyond the read buffer",
                    b.label, g.name
                ),
                measured: extra.map_or("not measured".into(), |x| {
                    format!(
                        "{:.2} copies beyond the read buffer ({x:.2} × the body allocated beyond the passthrough's, {READ_BUFFER:.0} of them the read buffer)",
                        x - READ_BUFFER
                    )
                }),
                pass: extra.map(|x| x - READ_BUFFER <= COPIES_MAX),
            });
        }
    }
    lines
}
