//! Small chat over HTTPS with keep-alive: the closed loop of the plain small chat (same
//! request, same connections), against a bare Pingora passthrough and the gateway on the
//! embedded store, each serving TLS with the same settings: one certificate made at the
//! start of the scenario, TLS 1.2 and 1.3, ALPN `http/1.1` (the passthrough through
//! Pingora's TLS listener, the gateway through its `tls` section). Upstreams stay plain
//! HTTP, as in the plain scenario.
//!
//! Each connection makes one handshake, then requests on it until the round ends. The
//! budget is CPU per request of the proxies' runtime and the store's threads, read from
//! `/proc` over each round: both targets decrypt and encrypt the same bytes, so what
//! the gateway adds is its own work, judged against the plain small chat's budget.

use super::http::{self, TlsDial};
use super::report::{cpu_total, Cpu, Line, Section, SMALL_CHAT_ADDED_US};
use super::scenarios::{self, us, Closed};
use super::sys;
use super::targets::{self, Filter, Kind, Target, TlsFiles};
use super::upstream::UpstreamConfig;
use rustls::pki_types::CertificateDer;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;

/// The name the certificate is made for (the clients send it by SNI and verify it).
const NAME: &str = "localhost";

pub struct Plan {
    pub conns: usize,
    pub dur: Duration,
    pub warmup: Duration,
    pub rounds: usize,
}

/// The runtimes of the harness, whose threads `/proc` charges: the targets run on
/// `servers`, their mock upstreams on `upstreams`, the load generator on `client`.
pub struct Runtimes<'a> {
    pub servers: &'a Runtime,
    pub upstreams: &'a Runtime,
    pub client: &'a Runtime,
}

/// One round against one target.
pub struct Round {
    pub closed: Closed,
    /// Per request: the proxies' runtime and the embedded store's threads.
    pub cpu: Cpu,
}

pub struct TargetRounds {
    pub name: &'static str,
    pub kind: Kind,
    pub rounds: Vec<Round>,
}

impl TargetRounds {
    /// The round with the median CPU per request.
    fn median(&self) -> Option<&Round> {
        scenarios::median_by(self.rounds.iter().collect(), |r| cpu_total(&r.cpu))
    }

    fn errors(&self) -> u64 {
        self.rounds.iter().map(|r| r.closed.errors).sum()
    }
}

pub struct Https {
    pub targets: Vec<TargetRounds>,
    pub rounds: usize,
    pub conns: usize,
    pub dur: Duration,
}

/// The certificate both targets serve, written to a temporary directory.
struct Cert {
    files: TlsFiles,
    der: CertificateDer<'static>,
    _dir: tempfile::TempDir,
}

fn certificate() -> Result<Cert, String> {
    let made = rcgen::generate_simple_self_signed(vec![NAME.to_string()])
        .map_err(|e| format!("cannot make the bench certificate: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let files = TlsFiles {
        cert: dir.path().join("bench.crt"),
        key: dir.path().join("bench.key"),
    };
    std::fs::write(&files.cert, made.cert.pem()).map_err(|e| e.to_string())?;
    std::fs::write(&files.key, made.key_pair.serialize_pem()).map_err(|e| e.to_string())?;
    Ok(Cert {
        files,
        der: made.cert.der().clone(),
        _dir: dir,
    })
}

/// Starts the TLS passthrough and the TLS gateway (those `only` keeps), each with a mock
/// upstream of its own, and runs the closed loop against them, round after round (each
/// target in turn within a round). The targets stop when it returns.
pub fn run(rt: &Runtimes, ucfg: &UpstreamConfig, only: &Filter, plan: &Plan) -> Https {
    let cert = certificate().expect("the bench certificate is made");
    let up = || {
        rt.upstreams
            .block_on(targets::start_upstream(ucfg))
            .expect("mock upstream starts")
    };
    let mut list: Vec<Target> = Vec::new();
    if only.target("passthrough (bare Pingora)") {
        let u = up();
        let pt = rt
            .servers
            .block_on(async { targets::passthrough_with(u, Some(&cert.files)) });
        list.push(pt.expect("TLS passthrough starts"));
    }
    if only.target("gateway (embedded)") {
        let g = rt.servers.block_on(targets::gateway_with(
            "gateway (embedded)",
            up(),
            targets::Store::Embedded,
            Some(&cert.files),
        ));
        list.push(g.expect("TLS gateway on the embedded store starts"));
    }
    let work: Vec<(TlsDial, Arc<Vec<u8>>)> = list
        .iter()
        .map(|t| {
            let dial = TlsDial::new(t.addr, cert.der.clone(), NAME).expect("a TLS client config");
            let req = http::post(
                "/v1/chat/completions",
                &t.host(),
                &t.headers(),
                &crate::chat_body("bench-chat", false),
            );
            (dial, Arc::new(req))
        })
        .collect();
    for (dial, req) in &work {
        rt.client.block_on(scenarios::closed_loop(
            dial.clone(),
            req.clone(),
            plan.conns,
            plan.warmup,
        ));
    }
    let mut per: Vec<TargetRounds> = list
        .iter()
        .map(|t| TargetRounds {
            name: t.name,
            kind: t.kind,
            rounds: Vec::new(),
        })
        .collect();
    for round in 0..plan.rounds {
        for ((dial, req), res) in work.iter().zip(&mut per) {
            let cpu0 = sys::thread_cpu();
            let c = rt.client.block_on(scenarios::closed_loop(
                dial.clone(),
                req.clone(),
                plan.conns,
                plan.dur,
            ));
            let cpu1 = sys::thread_cpu();
            let d = |g: &str| sys::cpu_us_per(&cpu0, &cpu1, g, c.requests);
            let r = Round {
                cpu: Cpu {
                    proxy_us: d("servers"),
                    store_us: d("store"),
                },
                closed: c,
            };
            println!(
                "https {round}       {:<28} {:>8.0} req/s  p50 {:>6.0} µs  p99 {:>6.0} µs  errors {}  CPU µs/request: proxy {:.1} store {:.1}",
                res.name,
                r.closed.rate(),
                us(&r.closed.latency, 0.5),
                us(&r.closed.latency, 0.99),
                r.closed.errors,
                r.cpu.proxy_us,
                r.cpu.store_us
            );
            res.rounds.push(r);
        }
    }
    Https {
        targets: per,
        rounds: plan.rounds,
        conns: plan.conns,
        dur: plan.dur,
    }
}

impl Https {
    fn passthrough(&self) -> Option<&Round> {
        self.targets
            .iter()
            .find(|t| t.kind == Kind::Passthrough)
            .and_then(TargetRounds::median)
    }

    fn gateways(&self) -> impl Iterator<Item = &TargetRounds> {
        self.targets.iter().filter(|t| t.kind == Kind::Gateway)
    }
}

impl Section for Https {
    fn lines(&self) -> Vec<Line> {
        let pt = self.passthrough();
        let mut lines = Vec::new();
        for g in self.gateways() {
            let (measured, pass) = match (g.median(), pt) {
                (Some(a), Some(b)) => {
                    let added = cpu_total(&a.cpu) - cpu_total(&b.cpu);
                    (
                        format!(
                            "{added:+.1} µs ({:.1} µs: proxy {:.1} + store threads {:.1}, vs {:.1} µs); {} errors",
                            cpu_total(&a.cpu),
                            a.cpu.proxy_us,
                            a.cpu.store_us,
                            cpu_total(&b.cpu),
                            g.errors()
                        ),
                        Some(
                            added <= SMALL_CHAT_ADDED_US
                                && g.errors() == 0
                                && a.closed.requests > 0,
                        ),
                    )
                }
                _ => ("not measured".into(), None),
            };
            lines.push(Line::judged(
                format!(
                    "CPU per request, small chat over HTTPS (keep-alive), {}: ≤ {SMALL_CHAT_ADDED_US:.0} µs above the TLS passthrough's",
                    g.name
                ),
                measured,
                pass,
            ));
        }
        for g in self.gateways() {
            let measured = match (g.median(), pt) {
                (Some(a), Some(b)) if b.closed.rate() > 0.0 => format!(
                    "{:.0} vs {:.0} req/s = {:.0} %",
                    a.closed.rate(),
                    b.closed.rate(),
                    a.closed.rate() / b.closed.rate() * 100.0
                ),
                _ => "not measured".into(),
            };
            lines.push(Line::figure(
                format!(
                    "Throughput, small chat over HTTPS (keep-alive), {}: share of the TLS passthrough's",
                    g.name
                ),
                measured,
            ));
        }
        lines
    }

    fn markdown(&self, s: &mut String) {
        let _ = write!(
            s,
            "\n### Small chat over HTTPS, keep-alive ({} connections closed loop, {:?} a round, the round with the median CPU of {} rounds)\n\nBoth targets serve one certificate with TLS 1.2 and 1.3 and ALPN `http/1.1` (the passthrough through Pingora's TLS listener, the gateway through its `tls` section); each connection makes one handshake, then requests until the round ends. Upstreams are plain HTTP. CPU per request from `/proc` (user + system, every thread of the group): proxy, the proxies' runtime; store, the embedded store's threads.\n\n| target | req/s | % of TLS passthrough | p50 µs | p99 µs | proxy CPU µs/request | store µs | proxy + store µs | added µs | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.conns, self.dur, self.rounds
        );
        let pt = self.passthrough();
        for t in &self.targets {
            let Some(r) = t.median() else { continue };
            let pct = pt.map_or(f64::NAN, |p| r.closed.rate() / p.closed.rate() * 100.0);
            let added = match (t.kind, pt) {
                (Kind::Gateway, Some(p)) => {
                    format!("{:+.1}", cpu_total(&r.cpu) - cpu_total(&p.cpu))
                }
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {added} | {} |",
                t.name,
                r.closed.rate(),
                pct,
                us(&r.closed.latency, 0.5),
                us(&r.closed.latency, 0.99),
                r.cpu.proxy_us,
                r.cpu.store_us,
                cpu_total(&r.cpu),
                t.errors()
            );
        }
    }

    fn failures(&self) -> Vec<String> {
        self.targets
            .iter()
            .filter_map(|t| {
                let ok: u64 = t.rounds.iter().map(|r| r.closed.requests).sum();
                (ok == 0 || t.errors() > 0)
                    .then(|| format!("{} over HTTPS: {ok} ok, {} errors", t.name, t.errors()))
            })
            .collect()
    }
}
