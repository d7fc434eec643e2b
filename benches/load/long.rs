//! Streams of a real answer's length: [`LONG_PIECES`] content events from a fast
//! upstream (no pause between its writes), closed loop, in three cases:
//! - the same protocol in and out (a chat client on a chat upstream);
//! - translated: a messages client on a chat upstream;
//! - translated: a chat client on a messages upstream (text deltas).
//!
//! The budget is CPU per request of each part of the process, read from `/proc` (user +
//! system, all threads of the group) over each round: what the proxy spends does not
//! depend on who else uses the cores, where its throughput does. The passthrough
//! relays the very answer the gateway reads (the upstream answers by model name), so
//! the difference is what the gateway adds: metering, translation, the settlement.

use super::http;
use super::report::{Line, Section};
use super::scenarios::{self, Streams};
use super::sys;
use super::targets::{Kind, Target};
use super::upstream::LONG_PIECES;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Chat,
    Messages,
}

impl Proto {
    /// The event that ends a stream of this protocol.
    fn end_mark(self) -> &'static [u8] {
        match self {
            Proto::Chat => scenarios::DONE,
            Proto::Messages => b"message_stop",
        }
    }
}

pub struct Case {
    pub label: &'static str,
    client: Proto,
    upstream: Proto,
    /// CPU per request the gateway may add to the passthrough's.
    budget_us: f64,
    /// How the budget reads in the report.
    budget_text: &'static str,
}

/// CPU a translated stream may add per content event.
const TRANSLATED_PER_EVENT_US: f64 = 1.5;

pub const CASES: [Case; 3] = [
    Case {
        label: "chat → chat",
        client: Proto::Chat,
        upstream: Proto::Chat,
        budget_us: 80.0,
        budget_text: "≤ 80 µs",
    },
    Case {
        label: "messages client, chat upstream",
        client: Proto::Messages,
        upstream: Proto::Chat,
        budget_us: TRANSLATED_PER_EVENT_US * LONG_PIECES as f64,
        budget_text: "≤ 1.5 µs an event (300 µs)",
    },
    Case {
        label: "chat client, messages upstream",
        client: Proto::Chat,
        upstream: Proto::Messages,
        budget_us: TRANSLATED_PER_EVENT_US * LONG_PIECES as f64,
        budget_text: "≤ 1.5 µs an event (300 µs)",
    },
];

impl Case {
    /// The request a client of `target` sends: the model names the upstream's protocol
    /// (the gateway routes it to the channel of that protocol; the mock upstream answers
    /// in it whoever asks).
    fn request(&self, target: &Target) -> Arc<Vec<u8>> {
        let model = match self.upstream {
            Proto::Chat => "bench-long",
            Proto::Messages => "bench-anthropic",
        };
        let host = target.host();
        let mut headers = target.headers();
        headers.push(("Accept", "text/event-stream"));
        let req = match self.client {
            Proto::Chat => http::post(
                "/v1/chat/completions",
                &host,
                &headers,
                &crate::chat_body(model, true),
            ),
            Proto::Messages => {
                headers.push(("anthropic-version", "2023-06-01"));
                let body = serde_json::json!({
                    "model": model, "max_tokens": 1024, "stream": true,
                    "system": crate::SYSTEM,
                    "messages": [{"role": "user", "content": "Write a haiku about network latency."}]
                });
                http::post(
                    "/v1/messages",
                    &host,
                    &headers,
                    &serde_json::to_vec(&body).unwrap_or_default(),
                )
            }
        };
        Arc::new(req)
    }

    /// The end the client waits for: the gateway answers in the client's protocol, a
    /// proxy relays the upstream's.
    fn end_mark(&self, kind: Kind) -> &'static [u8] {
        match kind {
            Kind::Gateway => self.client.end_mark(),
            Kind::Direct | Kind::Passthrough => self.upstream.end_mark(),
        }
    }
}

pub struct Plan {
    pub conns: usize,
    pub dur: Duration,
    pub warmup: Duration,
    pub rounds: usize,
}

/// One round of one case against one target.
struct Round {
    streams: Streams,
    /// CPU per stream of the proxies' runtime and of the embedded store's threads.
    proxy_us: f64,
    store_us: f64,
    /// The mock upstream's and the load generator's, as context.
    upstream_us: f64,
    client_us: f64,
}

impl Round {
    fn total(&self) -> f64 {
        self.proxy_us + self.store_us
    }
}

struct TargetRounds {
    name: &'static str,
    kind: Kind,
    rounds: Vec<Round>,
}

impl TargetRounds {
    /// The round with the median CPU per request.
    fn median(&self) -> Option<&Round> {
        let mut v: Vec<&Round> = self.rounds.iter().collect();
        v.sort_by(|a, b| a.total().total_cmp(&b.total()));
        v.get(v.len() / 2).copied()
    }

    fn errors(&self) -> u64 {
        self.rounds.iter().map(|r| r.streams.errors).sum()
    }
}

struct CaseResult {
    case: &'static Case,
    targets: Vec<TargetRounds>,
}

pub struct Long {
    cases: Vec<CaseResult>,
    rounds: usize,
    conns: usize,
    dur: Duration,
}

/// Runs every case against every target, round after round (each target in turn within
/// a round, so each comparison is made seconds apart).
pub fn run(targets: &[Target], client: &tokio::runtime::Runtime, plan: &Plan) -> Long {
    let mut cases = Vec::new();
    for case in &CASES {
        let reqs: Vec<_> = targets.iter().map(|t| case.request(t)).collect();
        for (t, req) in targets.iter().zip(&reqs) {
            client.block_on(scenarios::streams(
                t.addr,
                req.clone(),
                plan.conns,
                plan.warmup,
                LONG_PIECES,
                Duration::ZERO,
                case.end_mark(t.kind),
            ));
        }
        let mut per: Vec<TargetRounds> = targets
            .iter()
            .map(|t| TargetRounds {
                name: t.name,
                kind: t.kind,
                rounds: Vec::new(),
            })
            .collect();
        for round in 0..plan.rounds {
            for ((t, req), res) in targets.iter().zip(&reqs).zip(&mut per) {
                let cpu0 = sys::thread_cpu();
                let s = client.block_on(scenarios::streams(
                    t.addr,
                    req.clone(),
                    plan.conns,
                    plan.dur,
                    LONG_PIECES,
                    Duration::ZERO,
                    case.end_mark(t.kind),
                ));
                let cpu1 = sys::thread_cpu();
                let d = |g: &str| sys::cpu_us_per(&cpu0, &cpu1, g, s.streams);
                let r = Round {
                    proxy_us: d("servers"),
                    store_us: d("store"),
                    upstream_us: d("upstream"),
                    client_us: d("client"),
                    streams: s,
                };
                println!(
                    "long stream {round}  {:<31} {:<28} {:>7.0} streams/s  errors {}  CPU µs/request: proxy {:.0} store {:.0} (upstream {:.0}, client {:.0})",
                    case.label,
                    t.name,
                    r.streams.rate(),
                    r.streams.errors,
                    r.proxy_us,
                    r.store_us,
                    r.upstream_us,
                    r.client_us
                );
                res.rounds.push(r);
            }
        }
        cases.push(CaseResult { case, targets: per });
    }
    Long {
        cases,
        rounds: plan.rounds,
        conns: plan.conns,
        dur: plan.dur,
    }
}

impl CaseResult {
    fn passthrough(&self) -> Option<&Round> {
        self.targets
            .iter()
            .find(|t| t.kind == Kind::Passthrough)
            .and_then(TargetRounds::median)
    }
}

impl Section for Long {
    fn lines(&self) -> Vec<Line> {
        let mut lines = Vec::new();
        for c in &self.cases {
            let pt = c.passthrough();
            for g in c.targets.iter().filter(|t| t.kind == Kind::Gateway) {
                let (measured, pass) = match (g.median(), pt) {
                    (Some(a), Some(b)) => {
                        let added = a.total() - b.total();
                        (
                            format!(
                                "{added:+.0} µs ({:.2} µs an event): {:.0} µs (proxy {:.0} + store threads {:.0}) vs {:.0} µs; {} errors",
                                added / LONG_PIECES as f64,
                                a.total(),
                                a.proxy_us,
                                a.store_us,
                                b.total(),
                                g.errors()
                            ),
                            Some(
                                added <= c.case.budget_us
                                    && g.errors() == 0
                                    && a.streams.streams > 0,
                            ),
                        )
                    }
                    _ => ("not measured".into(), None),
                };
                lines.push(Line::judged(
                    format!(
                        "CPU per request, stream of {LONG_PIECES} content events, {}, {}: {} above the passthrough's",
                        c.case.label, g.name, c.case.budget_text
                    ),
                    measured,
                    pass,
                ));
            }
            for g in c.targets.iter().filter(|t| t.kind == Kind::Gateway) {
                let measured = match (median_rate(g), pt.map(|p| p.streams.rate())) {
                    (Some(a), Some(b)) if b > 0.0 => {
                        format!("{a:.0} vs {b:.0} streams/s = {:.0} %", a / b * 100.0)
                    }
                    _ => "not measured".into(),
                };
                lines.push(Line::figure(
                    format!(
                        "Throughput, stream of {LONG_PIECES} content events, {}, {}: share of the passthrough's",
                        c.case.label, g.name
                    ),
                    measured,
                ));
            }
        }
        lines
    }

    fn markdown(&self, s: &mut String) {
        let _ = write!(
            s,
            "\n### Streams of {LONG_PIECES} content events from a fast upstream ({} concurrent streams, {:?} a round, the round with the median CPU of {} rounds)\n\nCPU per request from `/proc` (user + system, every thread of the group). Proxy: the proxies' runtime; store: the embedded store's threads; upstream and client: the mock upstream and the load generator, for context.\n\n| case | target | streams/s | % of passthrough | proxy CPU µs/request | store µs | proxy + store µs | added µs | added µs an event | upstream µs | client µs | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.conns, self.dur, self.rounds
        );
        for c in &self.cases {
            let pt = c.passthrough();
            for t in &c.targets {
                let Some(r) = t.median() else { continue };
                let pct = pt.map_or(f64::NAN, |p| r.streams.rate() / p.streams.rate() * 100.0);
                let added = match (t.kind, pt) {
                    (Kind::Gateway, Some(p)) => Some(r.total() - p.total()),
                    _ => None,
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} | {:.1} | {} |",
                    c.case.label,
                    t.name,
                    r.streams.rate(),
                    pct,
                    r.proxy_us,
                    r.store_us,
                    r.total(),
                    added.map_or("–".into(), |a| format!("{a:+.1}")),
                    added.map_or("–".into(), |a| format!("{:+.2}", a / LONG_PIECES as f64)),
                    r.upstream_us,
                    r.client_us,
                    t.errors()
                );
            }
        }
    }

    fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.cases {
            for t in &c.targets {
                let ok: u64 = t.rounds.iter().map(|r| r.streams.streams).sum();
                if ok == 0 || t.errors() > 0 {
                    out.push(format!(
                        "{} long stream ({}): {ok} ok, {} errors",
                        t.name,
                        c.case.label,
                        t.errors()
                    ));
                }
            }
        }
        out
    }
}

/// Streams per second of the round with the median CPU.
fn median_rate(t: &TargetRounds) -> Option<f64> {
    t.median().map(|r| r.streams.rate())
}
