//! Load benchmark: the gateway against a bare Pingora passthrough, in one process and
//! one run, on the same machine at the same moment (the budget is differences against
//! that baseline, chiefly CPU per request read from `/proc`, since absolute figures and
//! throughput drift on shared machines).
//!
//! `cargo bench --bench load` starts a mock upstream per target, the targets (direct,
//! passthrough, the gateway on the embedded store, on a private `redis-server` and on a
//! private 3-master Redis Cluster), runs every scenario against every target in turn
//! (the closed, open and streaming ones in `LOAD_ROUNDS` alternating rounds, 3 by
//! default, reporting the median), then the scenarios kept in files of their own
//! ([`report::Section`]: `long.rs`, streams of a real answer's length, same protocol and
//! translated; `tls.rs`, the small chat over HTTPS with keep-alive against TLS variants of
//! the passthrough and the embedded-store gateway), prints the budget with PASS/FAIL, and
//! writes `target/bench-load.md` and `target/bench-load.svg`.
//!
//! Run without `--bench` (as `cargo test --all-targets` does), it is a smoke run of a
//! few seconds: tiny durations, a few idle streams, self-checks of its own parsers and
//! report, and a non-zero exit on any error.

#[path = "load/checks.rs"]
mod checks;
#[path = "load/http.rs"]
mod http;
#[path = "load/long.rs"]
mod long;
#[path = "load/markdown.rs"]
mod markdown;
#[path = "load/redis.rs"]
mod redis;
#[path = "load/report.rs"]
mod report;
#[path = "load/scenarios.rs"]
mod scenarios;
#[path = "load/sys.rs"]
mod sys;
#[path = "load/targets.rs"]
mod targets;
#[path = "load/tls.rs"]
mod tls;
#[path = "load/upstream.rs"]
mod upstream;

use report::{Big, Cpu, Meta, Section, TargetResult};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use targets::{Kind, Target};
use upstream::UpstreamConfig;

#[global_allocator]
static ALLOC: sys::Counting = sys::Counting;

/// Scenario sizes and durations. `FULL` keeps the whole run near twelve minutes on
/// 2 cores; `QUICK` is the smoke run.
struct Plan {
    warmup: Duration,
    /// Small chat, closed loop: connections and duration per target.
    closed_conns: usize,
    closed: Duration,
    /// Small chat, open loop: rate, pacer connections, duration per target.
    open_rate: f64,
    open_conns: usize,
    open: Duration,
    /// Rounds of the closed, open and fast-streaming scenarios.
    rounds: usize,
    /// Streams from a fast upstream (throughput): connections and duration per target.
    flow_conns: usize,
    flow: Duration,
    /// Streams of a real answer's length (`long.rs`): concurrent streams, duration per
    /// target and round.
    long_conns: usize,
    long: Duration,
    /// Small chat over HTTPS (`tls.rs`), closed loop: connections (as the plain one) and
    /// duration per target and round.
    https_conns: usize,
    https: Duration,
    /// Streaming chat: concurrent streams, duration per target, events and their interval.
    stream_conns: usize,
    stream: Duration,
    sse_events: usize,
    sse_interval: Duration,
    /// 1 MiB bodies: connections and duration per target.
    big_conns: usize,
    big: Duration,
    /// Idle streams: counts, and how long they are held open.
    idle: &'static [usize],
    idle_hold: Duration,
    idle_settle: Duration,
    /// Upstream latency before every reply header.
    upstream_latency: Duration,
}

const FULL: Plan = Plan {
    // Three seconds of closed loop per target before the first round: with one, the
    // first round of a gateway often ran on caches and tables still growing.
    warmup: Duration::from_secs(3),
    closed_conns: 32,
    closed: Duration::from_secs(5),
    open_rate: 1000.0,
    open_conns: 8,
    open: Duration::from_secs(5),
    // Five, not three: on a shared machine one round in three or four runs slow, and
    // with three rounds such a round can be the median.
    rounds: 5,
    flow_conns: 32,
    flow: Duration::from_secs(4),
    long_conns: 16,
    long: Duration::from_secs(3),
    https_conns: 32,
    https: Duration::from_secs(5),
    stream_conns: 32,
    stream: Duration::from_secs(5),
    sse_events: 50,
    sse_interval: Duration::from_millis(2),
    big_conns: 4,
    big: Duration::from_secs(3),
    idle: &[1_000, 10_000],
    idle_hold: Duration::from_secs(2),
    idle_settle: Duration::from_secs(3),
    upstream_latency: Duration::ZERO,
};

const QUICK: Plan = Plan {
    warmup: Duration::from_millis(20),
    closed_conns: 4,
    closed: Duration::from_millis(100),
    open_rate: 200.0,
    open_conns: 2,
    open: Duration::from_millis(150),
    rounds: 1,
    flow_conns: 2,
    flow: Duration::from_millis(100),
    long_conns: 2,
    long: Duration::from_millis(100),
    https_conns: 4,
    https: Duration::from_millis(100),
    stream_conns: 4,
    stream: Duration::from_millis(100),
    sse_events: 10,
    sse_interval: Duration::from_millis(1),
    big_conns: 1,
    big: Duration::from_millis(50),
    idle: &[20],
    idle_hold: Duration::from_millis(10),
    idle_settle: Duration::ZERO,
    upstream_latency: Duration::ZERO,
};

const BIG_BODY: usize = 1024 * 1024;
const COMMAND: &str = "cargo bench --bench load";

fn runtime(name: &str, threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a Tokio runtime starts")
}

const SYSTEM: &str = "You are a concise assistant.";

fn chat_body(model: &str, stream: bool) -> Vec<u8> {
    let mut v = serde_json::json!({
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": "Write a haiku about network latency."}],
        "max_tokens": 256, "temperature": 0.7
    });
    if stream {
        v["stream"] = true.into();
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// A request body of exactly `size` bytes: a chat (or messages) request whose user
/// turn is prose, `model` first.
pub fn big_body(messages: bool, size: usize) -> Vec<u8> {
    let head = if messages {
        format!("{{\"model\":\"bench-big\",\"max_tokens\":16,\"system\":\"{SYSTEM}\",\"messages\":[{{\"role\":\"user\",\"content\":\"")
    } else {
        format!("{{\"model\":\"bench-big\",\"max_tokens\":16,\"messages\":[{{\"role\":\"system\",\"content\":\"{SYSTEM}\"}},{{\"role\":\"user\",\"content\":\"")
    };
    let tail = "\"}]}";
    let prose = "Summarise the following log of a long agent session, keeping every decision.\\n";
    let mut out = head.into_bytes();
    while out.len() + prose.len() + tail.len() <= size {
        out.extend_from_slice(prose.as_bytes());
    }
    while out.len() + tail.len() < size {
        out.push(b'.');
    }
    out.extend_from_slice(tail.as_bytes());
    out
}

struct Requests {
    chat: Arc<Vec<u8>>,
    sse: Arc<Vec<u8>>,
    fast: Arc<Vec<u8>>,
    idle: Arc<Vec<u8>>,
    big: Arc<Vec<u8>>,
    big_messages: Arc<Vec<u8>>,
}

fn requests(t: &Target) -> Requests {
    let host = t.host();
    let h = t.headers();
    let post = |path: &str, extra: &[(&str, &str)], body: &[u8]| {
        let mut hs = h.clone();
        hs.extend_from_slice(extra);
        Arc::new(http::post(path, &host, &hs, body))
    };
    let chat = "/v1/chat/completions";
    Requests {
        chat: post(chat, &[], &chat_body("bench-chat", false)),
        sse: post(
            chat,
            &[("Accept", "text/event-stream")],
            &chat_body("bench-sse", true),
        ),
        fast: post(
            chat,
            &[("Accept", "text/event-stream")],
            &chat_body("bench-fast", true),
        ),
        idle: post(
            chat,
            &[("Accept", "text/event-stream")],
            &chat_body("bench-idle", true),
        ),
        big: post(chat, &[], &big_body(false, BIG_BODY)),
        big_messages: post(
            "/v1/messages",
            &[("anthropic-version", "2023-06-01")],
            &big_body(true, BIG_BODY),
        ),
    }
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let plan = if quick { &QUICK } else { &FULL };
    let rounds = std::env::var("LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(plan.rounds)
        .max(1);
    let t_start = Instant::now();
    let mut notes = Vec::new();
    if quick {
        checks::run();
    }
    let largest = plan.idle.iter().copied().max().unwrap_or(0);
    // Four descriptors per stream in one process, plus pools and listeners.
    let fds = sys::raise_fd_limit((largest as u64 * 4 + 8_192).max(65_536));
    let fit = (fds.saturating_sub(1_500) / 4 / 100 * 100) as usize;
    let idle: Vec<usize> = plan.idle.iter().map(|&n| n.min(fit)).collect();
    if idle.iter().zip(plan.idle).any(|(a, b)| a != b) {
        let note = format!(
            "the open-file limit is {fds} and cannot be raised here (hard limit): idle streams scaled down from {:?} to {idle:?} (each holds four descriptors in this process)",
            plan.idle
        );
        println!("note: {note}");
        notes.push(note);
    }
    let only = targets::Filter::from_env();

    let servers = runtime("servers", 2);
    let upstreams = runtime("upstream", 1);
    let client = runtime("client", 2);
    let ucfg = UpstreamConfig {
        latency: plan.upstream_latency,
        sse_events: plan.sse_events,
        sse_interval: plan.sse_interval,
    };
    let up = || {
        upstreams
            .block_on(targets::start_upstream(&ucfg))
            .expect("mock upstream starts")
    };
    let mut list: Vec<Target> = vec![targets::direct(up())];
    let pt_up = up();
    let pt = servers.block_on(async { targets::passthrough(pt_up) });
    list.push(pt.expect("passthrough starts"));
    let emb_up = up();
    let embedded = servers.block_on(targets::gateway(
        "gateway (embedded)",
        emb_up,
        targets::Store::Embedded,
    ));
    list.push(embedded.expect("gateway on the embedded store starts"));
    let redises = redis::Redises {
        single: only
            .target("gateway (redis)")
            .then(redis::RedisServer::start)
            .flatten(),
        cluster: only
            .target("gateway (redis cluster)")
            .then(redis::RedisCluster::start)
            .flatten(),
    };
    if let Some(r) = &redises.single {
        let g = servers.block_on(targets::gateway(
            "gateway (redis)",
            up(),
            targets::Store::Redis(r.url()),
        ));
        list.push(g.expect("gateway on redis starts"));
    }
    if let Some(c) = &redises.cluster {
        let g = servers.block_on(targets::gateway(
            "gateway (redis cluster)",
            up(),
            targets::Store::Cluster(c.urls()),
        ));
        list.push(g.expect("gateway on a redis cluster starts"));
    }
    if redises.single.is_none() || redises.cluster.is_none() {
        let note = "redis-server or redis-cli is missing (apt-get install redis-server), or a filter left it out: a Redis target is skipped";
        println!("note: {note}");
        notes.push(note.into());
    }
    list.retain(|t| only.target(t.name));
    let rss_base = sys::rss_bytes_trimmed();
    let reqs: Vec<Requests> = list.iter().map(requests).collect();
    let mut results: Vec<TargetResult> = list
        .iter()
        .map(|t| TargetResult::new(t.name, t.kind))
        .collect();

    // Warm every target (connections, caches, a lease on the Redis targets).
    for (t, r) in list.iter().zip(&reqs) {
        client.block_on(scenarios::closed_loop(
            t.addr,
            r.chat.clone(),
            plan.closed_conns,
            plan.warmup,
        ));
        client.block_on(scenarios::streams(
            t.addr,
            r.sse.clone(),
            2,
            plan.warmup / 4,
            upstream::pieces_in(plan.sse_events),
            plan.sse_interval,
            scenarios::DONE,
        ));
    }

    // Scenario by scenario, every target in turn, round after round: each comparison is
    // made seconds, not minutes, apart, and noise shows as spread between rounds.
    if only.scenario("closed") {
        let mut runs: Vec<Vec<scenarios::Closed>> = list.iter().map(|_| Vec::new()).collect();
        let mut cpu: Vec<Vec<Cpu>> = list.iter().map(|_| Vec::new()).collect();
        let mut work: Vec<(Option<redis::Work>, u64)> = vec![(None, 0); list.len()];
        for round in 0..rounds {
            for (k, (t, r)) in list.iter().zip(&reqs).enumerate() {
                let (cpu0, w0) = (sys::thread_cpu(), redises.work(t));
                let c = client.block_on(scenarios::closed_loop(
                    t.addr,
                    r.chat.clone(),
                    plan.closed_conns,
                    plan.closed,
                ));
                let (cpu1, w1) = (sys::thread_cpu(), redises.work(t));
                let d = |g: &str| cpu1.get(g).unwrap_or(&0.0) - cpu0.get(g).unwrap_or(&0.0);
                let n = c.requests.max(1) as f64;
                cpu[k].push(Cpu {
                    proxy_us: d("servers") * 1e6 / n,
                    store_us: d("store") * 1e6 / n,
                });
                redis::add_work(&mut work[k].0, w0, w1);
                work[k].1 += c.requests;
                if let Some(w) =
                    redis::per_request(w1.zip(w0).map(|(a, b)| a.since(&b)), c.requests)
                {
                    println!(
                        "              redis per request: {:.3} scripts, {:.1} µs CPU ({:.1} µs in commands)",
                        w.scripts, w.cpu_us, w.command_us
                    );
                }
                println!(
                    "closed loop {round}  {:<28} {:>8.0} req/s  p99 {:>6.0} µs  errors {}  CPU µs/request: proxy {:.1} store {:.1}",
                    t.name,
                    c.rate(),
                    scenarios::us(&c.latency, 0.99),
                    c.errors,
                    d("servers") * 1e6 / c.requests.max(1) as f64,
                    d("store") * 1e6 / c.requests.max(1) as f64,
                );
                runs[k].push(c);
            }
        }
        for (k, res) in results.iter_mut().enumerate() {
            res.cpu = scenarios::median_by(std::mem::take(&mut cpu[k]), report::cpu_total);
            res.redis = redis::per_request(work[k].0, work[k].1);
            res.closed = scenarios::median_by(std::mem::take(&mut runs[k]), |c| c.rate());
        }
    }
    if only.scenario("open") {
        let mut runs: Vec<Vec<scenarios::Open>> = list.iter().map(|_| Vec::new()).collect();
        let mut work: Vec<(Option<redis::Work>, u64)> = vec![(None, 0); list.len()];
        for round in 0..rounds {
            for (k, (t, r)) in list.iter().zip(&reqs).enumerate() {
                let w0 = redises.work(t);
                let o = scenarios::open_loop(
                    t.addr,
                    r.chat.clone(),
                    plan.open_rate,
                    plan.open_conns,
                    plan.open,
                );
                let w1 = redises.work(t);
                redis::add_work(&mut work[k].0, w0, w1);
                work[k].1 += o.latency.len();
                let w = redis::per_request(w1.zip(w0).map(|(a, b)| a.since(&b)), o.latency.len());
                println!(
                    "open loop {round}    {:<28} p50 {:>6.0} µs  p99 {:>6.0} µs  errors {}{}",
                    t.name,
                    scenarios::us(&o.latency, 0.5),
                    scenarios::us(&o.latency, 0.99),
                    o.errors,
                    w.map_or(String::new(), |w| format!(
                        "  redis per request: {:.3} scripts, {:.1} µs CPU ({:.1} µs in commands)",
                        w.scripts, w.cpu_us, w.command_us
                    ))
                );
                runs[k].push(o);
            }
        }
        for (k, res) in results.iter_mut().enumerate() {
            res.redis_open = redis::per_request(work[k].0, work[k].1);
            res.open = scenarios::median_by(std::mem::take(&mut runs[k]), |o| {
                scenarios::us(&o.latency, 0.5)
            });
        }
    }
    if only.scenario("flow") {
        let mut runs: Vec<Vec<scenarios::Streams>> = list.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for (k, (t, r)) in list.iter().zip(&reqs).enumerate() {
                let s = client.block_on(scenarios::streams(
                    t.addr,
                    r.fast.clone(),
                    plan.flow_conns,
                    plan.flow,
                    upstream::pieces_in(plan.sse_events),
                    Duration::ZERO,
                    scenarios::DONE,
                ));
                println!(
                    "fast streams {round} {:<28} {:>8.0} streams/s  errors {}",
                    t.name,
                    s.rate(),
                    s.errors
                );
                runs[k].push(s);
            }
        }
        for (k, res) in results.iter_mut().enumerate() {
            res.flow = scenarios::median_by(std::mem::take(&mut runs[k]), |s| s.rate());
        }
    }
    let mut sections: Vec<Box<dyn Section>> = Vec::new();
    if only.scenario("long") {
        let p = long::Plan {
            conns: plan.long_conns,
            dur: plan.long,
            warmup: plan.warmup / 2,
            rounds,
        };
        sections.push(Box::new(long::run(&list, &client, &p)));
    }
    if only.scenario("https") {
        let p = tls::Plan {
            conns: plan.https_conns,
            dur: plan.https,
            warmup: plan.warmup,
            rounds,
        };
        let rt = tls::Runtimes {
            servers: &servers,
            upstreams: &upstreams,
            client: &client,
        };
        sections.push(Box::new(tls::run(&rt, &ucfg, &only, &p)));
    }
    for ((t, r), res) in list.iter().zip(&reqs).zip(&mut results) {
        if !only.scenario("stream") {
            break;
        }
        let s = client.block_on(scenarios::streams(
            t.addr,
            r.sse.clone(),
            plan.stream_conns,
            plan.stream,
            upstream::pieces_in(plan.sse_events),
            plan.sse_interval,
            scenarios::DONE,
        ));
        println!(
            "streaming     {:<28} TTFB p99 {:>6.0} µs  gap p50 {:>6.0} µs  streams {}  errors {}",
            t.name,
            scenarios::us(&s.ttfb, 0.99),
            scenarios::us(&s.gaps, 0.5),
            s.streams,
            s.errors
        );
        res.streams = Some(s);
    }
    for ((t, r), res) in list.iter().zip(&reqs).zip(&mut results) {
        if !only.scenario("big") {
            break;
        }
        let mut bodies = vec![("chat → chat", r.big.clone())];
        if t.kind == Kind::Gateway {
            bodies.push(("messages → chat", r.big_messages.clone()));
        }
        for (label, req) in bodies {
            let got_before = t.upstream.stats.body_bytes.load(Ordering::SeqCst);
            let before = sys::count_allocations(true);
            let c = client.block_on(scenarios::closed_loop(
                t.addr,
                req,
                plan.big_conns,
                plan.big,
            ));
            let allocated = sys::count_allocations(false) - before;
            let per = allocated as f64 / c.requests.max(1) as f64;
            let got = t.upstream.stats.body_bytes.load(Ordering::SeqCst) - got_before;
            let upstream_per_req = got as f64 / c.requests.max(1) as f64;
            println!("1 MiB body    {:<28} {label:<16} {:>6.0} req/s  {:>6.1} MiB allocated per request  errors {}", t.name, c.rate(), per / 1048576.0, c.errors);
            res.big.push(Big {
                label,
                closed: c,
                body: BIG_BODY,
                alloc_per_req: per,
                upstream_per_req,
            });
        }
    }
    for &n in &idle {
        if !only.scenario("idle") {
            break;
        }
        for ((t, r), res) in list.iter().zip(&reqs).zip(&mut results) {
            let i = client.block_on(scenarios::idle(
                t.addr,
                r.idle.clone(),
                n,
                plan.idle_hold,
                || t.upstream.release_idle(),
            ));
            println!(
                "idle streams  {:<28} {:>6} open of {:<6} errors {}  RSS {:.0} → {:.0} MB",
                t.name,
                i.opened,
                i.wanted,
                i.errors,
                sys::mb(i.rss_before),
                sys::mb(i.rss_open)
            );
            res.idle.push(i);
            // Let the last streams' settles and usage records drain, so the next
            // target's baseline is not this one's leftovers.
            std::thread::sleep(plan.idle_settle);
        }
    }

    let meta = Meta {
        machine: sys::machine(),
        command: COMMAND,
        settings: settings(plan, &idle, rounds),
        notes,
        rss_base,
        idle_big: idle.iter().copied().max().unwrap_or(0),
        rounds,
    };
    let mut lines = report::budget(&results, &meta);
    for x in &sections {
        lines.extend(x.lines());
    }
    let elapsed = t_start.elapsed().as_secs_f64();
    if quick {
        let mut failures = checks::smoke_failures(&results);
        for x in &sections {
            failures.extend(x.failures());
        }
        drop(list);
        if !failures.is_empty() {
            eprintln!("load smoke run failed: {}", failures.join("; "));
            std::process::exit(1);
        }
        println!("load smoke run ok in {elapsed:.1} s");
        return;
    }
    println!("\nBudget (gateway vs bare Pingora passthrough, same run):");
    for l in &lines {
        println!("  [{}] {} — {}", l.verdict(), l.text, l.measured);
    }
    let mut md = markdown::markdown(&results, &meta, &lines);
    for x in &sections {
        x.markdown(&mut md);
    }
    md.push_str(&format!("\nWhole run: {elapsed:.0} s.\n"));
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target");
    for (name, text) in [
        ("bench-load.md", md),
        ("bench-load.svg", markdown::svg(&results)),
    ] {
        let path = format!("{dir}/{name}");
        match std::fs::write(&path, text) {
            Ok(()) => println!("wrote {path}"),
            Err(e) => eprintln!("cannot write {path}: {e}"),
        }
    }
    // Stop the servers before the runtimes go away.
    drop(list);
    drop(redises);
}

fn settings(p: &Plan, idle: &[usize], rounds: usize) -> Vec<String> {
    vec![
        format!("The closed-loop, open-loop, fast-streaming, long-stream and HTTPS scenarios run in {rounds} alternating rounds (every target in turn, then again); each line reports the round with the median figure (CPU per request: the round with the median CPU per request). Redis work per request adds up every round."),
        "CPU per request: user + system time from `/proc/self/task/*/stat`, summed over the threads of a group (the proxies' runtime `servers`, the embedded store's threads), over the round, divided by the requests completed. The budget is judged on it: unlike throughput and latency it does not depend on who else uses the cores.".into(),
        format!("Small chat over HTTPS (keep-alive): {} connections closed loop for {:?} per target and round, one handshake each, against the passthrough and the gateway on the embedded store serving one certificate with the same TLS settings (TLS 1.2 and 1.3, ALPN `http/1.1`); upstreams are plain HTTP.", p.https_conns, p.https),
        format!("Long streams: {} concurrent streams for {:?} per target and round, from an upstream that writes {} content events without pause (one write each); chat → chat, a messages client on a chat upstream, a chat client on a messages upstream.", p.long_conns, p.long, upstream::LONG_PIECES),
        "One process: mock upstreams (1 Tokio thread), proxies (one 2-thread Tokio runtime, as the gateway's `threads: 2`), load generator (2 Tokio threads; open loop on plain threads). All share the machine's 2 cores.".into(),
        format!("Small chat: {} connections closed loop for {:?} per target (after a {:?} warm-up); open loop {:.0} req/s over {} connections for {:?}, latency from the intended send time.", p.closed_conns, p.closed, p.warmup, p.open_rate, p.open_conns, p.open),
        format!("Streaming throughput: {} concurrent streams for {:?} from an upstream that writes its {} events without pause (one write each). Paced streaming: {} concurrent streams for {:?}; each {} events ({} content events) {:?} apart.", p.flow_conns, p.flow, p.sse_events, p.stream_conns, p.stream, p.sse_events, upstream::pieces_in(p.sse_events), p.sse_interval),
        format!("1 MiB body: {} connections for {:?}; heap bytes counted by a counting global allocator, on only during this scenario.", p.big_conns, p.big),
        format!("Idle streams: {idle:?} opened (256 at a time), held {:?}, then released; RSS is the whole process's (`/proc/self/status`), measured after purging jemalloc's unused pages. What a gateway holds beyond the passthrough is its growth less the passthrough's (Pingora's own buffers are the passthrough's cost), per stream.", p.idle_hold),
        format!("Upstream latency: {:?}. The gateway's key has a quota and a model whitelist; every request is authenticated, reserved, settled and logged.", p.upstream_latency),
    ]
}
