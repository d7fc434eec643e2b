//! Micro-benchmarks of the per-request work outside translation (which
//! `benches/translate.rs` covers): credential extraction and the key cache, SSE
//! decoding, and the store's reserve + settle on the embedded store and on a private
//! `redis-server`.
//!
//! `cargo bench --bench micro` prints a Markdown table and writes it to
//! `target/bench-micro.md`. Each figure is the median of several timed rounds. Without
//! `--bench` (as `cargo test --all-targets` runs it) every case runs once, as a smoke test.

use futures_util::FutureExt as _;
use model_gateway::auth::{self, credentials, keys, Accepts};
use model_gateway::billing::{self, SettleOutcome};
use model_gateway::config::Config;
use model_gateway::gateway::{open_store, Gateway};
use model_gateway::protocol::sse::Decoder;
use model_gateway::store::{Ask, Store, UsageRecord};
use serde_json::json;
use std::fmt::Write as _;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Store operations in flight at once in the concurrent rows (a busy gateway's shape).
#[path = "common/timing.rs"]
mod timing;

const IN_FLIGHT: usize = 32;
/// Requests in the tail-latency row.
const TAIL_SAMPLES: usize = 5_000;

/// Median seconds per batch of an async operation, on `rt`.
fn time_async<F, Fut>(quick: bool, rt: &tokio::runtime::Runtime, mut f: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    rt.block_on(async {
        if quick {
            f().await;
            return f64::NAN;
        }
        let mut per_iter = Vec::with_capacity(timing::ROUNDS);
        for _ in 0..timing::ROUNDS {
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < timing::ROUND_TIME {
                f().await;
                n += 1;
            }
            per_iter.push(start.elapsed().as_secs_f64() / n as f64);
        }
        per_iter.sort_by(f64::total_cmp);
        per_iter[timing::ROUNDS / 2]
    })
}

fn row(report: &mut String, what: &str, secs: f64, extra: &str) {
    let _ = writeln!(
        report,
        "| {what} | {:.2} | {:.0} | {extra} |",
        secs * 1e6,
        1.0 / secs
    );
}

/// A 2,000-event chat stream, as an upstream sends it.
fn chat_stream(n: usize) -> Vec<u8> {
    let mut s = String::new();
    for i in 0..n {
        let _ = write!(
            s,
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}, "finish_reason": null}]})
        );
    }
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn config(dir: &std::path::Path, store: &str) -> Config {
    let text = format!(
        "listen: 127.0.0.1:0\nstore: {store}\nchannels:\n  - name: c\n    protocol: openai\n    base_url: http://127.0.0.1:9\n    models: [m]\nprices:\n  m: {{ input: 1.0, output: 2.0 }}\n"
    );
    Config::parse(&text, dir).expect("bench config is valid")
}

struct Redis {
    child: Child,
    dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Option<Redis> {
        let dir = tempfile::tempdir().ok()?;
        let child = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(dir.path().join("redis.sock"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let r = Redis { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(r.dir.path().join("redis.sock")).is_ok() {
                return Some(r);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn url(&self) -> String {
        format!(
            "redis+unix://{}",
            self.dir.path().join("redis.sock").display()
        )
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn usage(key_id: &str, request_id: &str) -> UsageRecord {
    UsageRecord {
        request_id: request_id.into(),
        time_ms: 1_700_000_000_000,
        key_id: key_id.into(),
        endpoint: "/v1/chat/completions".into(),
        model: "m".into(),
        channel: "c".into(),
        prompt_tokens: 24,
        completion_tokens: 18,
        cached_tokens: 0,
        cost: 60,
        estimated: false,
        overrun: 0,
        provider_cost: None,
        bill: Default::default(),
        multiplier_ppm: None,
        status: 200,
        latency_ms: 1,
        stream: false,
        group: None,
    }
}

/// The gateway's clock, unix seconds: the time an ask is made at.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Reserve + settle (and with the usage record, one request's whole store work),
/// one at a time and `IN_FLIGHT` at once.
/// Conversation state: storing one turn (a 4 KiB response), and reading a stored chain
/// of ten turns back (what a chained request reads before its call).
fn response_rows(
    quick: bool,
    rt: &tokio::runtime::Runtime,
    name: &str,
    store: &dyn Store,
    key_id: &str,
    report: &mut String,
) {
    use model_gateway::store::responses::StoredResponse;
    let Some(rs) = store.responses() else {
        return;
    };
    let turn = |id: String| StoredResponse {
        id: id.clone(),
        key_id: key_id.to_string(),
        created_at: 1_700_000_000,
        chain: vec![],
        input: vec![json!({"role": "user", "content": "x".repeat(2048)})],
        response: json!({"id": id, "object": "response", "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "y".repeat(2048)}]}]}),
        native: false,
        tokens: 1_100,
    };
    let seq = std::sync::atomic::AtomicU64::new(0);
    let s = time_async(quick, rt, || {
        let n = seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = turn(format!("resp_bench_{n}"));
        async move {
            rs.put_response(&r, 4_300, 3_600).await.expect("stored");
        }
    });
    row(report, &format!("{name}: store a turn (4 KiB)"), s, "");
    let chain: Vec<String> = (0..10).map(|n| format!("resp_bench_{n}")).collect();
    for r in chain.iter().map(|id| turn(id.clone())) {
        rt.block_on(rs.put_response(&r, 4_300, 3_600))
            .expect("stored");
    }
    let s = time_async(quick, rt, || async {
        let got = rs.get_responses(key_id, &chain).await.expect("read");
        assert_eq!(got.len(), 10);
        let bytes = rs.stored_bytes(key_id).await.expect("bytes");
        assert!(bytes > 0);
    });
    row(
        report,
        &format!("{name}: read a 10-turn chain + the key's stored bytes"),
        s,
        "",
    );
}

fn store_rows(
    quick: bool,
    rt: &tokio::runtime::Runtime,
    name: &str,
    store: Arc<dyn Store>,
    key_id: &str,
    report: &mut String,
) {
    let seq = std::sync::atomic::AtomicU64::new(0);
    let next = || {
        format!(
            "req_{}",
            seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )
    };
    let one = |with_usage: bool| {
        let (store, key_id, rid) = (store.clone(), key_id.to_string(), next());
        async move {
            // As a request reserves: through the guard that owns the hold.
            let ask = Ask::money(0, 10_000, unix_now());
            let mut held = billing::reserve(&store, &key_id, &rid, &ask, 3600)
                .await
                .expect("store answers")
                .expect("quota is ample");
            let settled = if with_usage {
                // What the relay does: settle and log in one store step.
                held.settle_logged(60, usage(&key_id, &rid)).await
            } else {
                held.settle(60).await
            };
            assert_eq!(settled, SettleOutcome::Settled, "the store settles");
        }
    };
    let s = time_async(quick, rt, || one(false));
    row(
        report,
        &format!("{name}: reserve + settle, one at a time"),
        s,
        "",
    );
    // The tail of one request's store work, one request at a time: what a lone
    // request waits for when the store stalls (checkpoints, pruning).
    let n = if quick { 3 } else { TAIL_SAMPLES };
    let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("constant precision");
    rt.block_on(async {
        for _ in 0..n {
            let t = Instant::now();
            one(true).await;
            let _ = h.record(t.elapsed().as_nanos() as u64);
        }
    });
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1e3;
    let _ = writeln!(
        report,
        "| {name}: reserve + settle-and-log, one at a time, {n} requests | {:.0} (p50) | {:.0} | p99 {:.0} µs, max {:.0} µs; {} over 5 ms |",
        q(0.5),
        1e6 / q(0.5),
        q(0.99),
        h.max() as f64 / 1e3,
        h.count_between(5_000_000, h.max().max(5_000_000))
    );
    let s = time_async(quick, rt, || async {
        let all: Vec<_> = (0..IN_FLIGHT).map(|_| tokio::spawn(one(false))).collect();
        for t in all {
            let _ = t.await;
        }
    });
    row(
        report,
        &format!("{name}: reserve + settle, {IN_FLIGHT} in flight"),
        s / IN_FLIGHT as f64,
        "per pair",
    );
    let s = time_async(quick, rt, || async {
        let all: Vec<_> = (0..IN_FLIGHT).map(|_| tokio::spawn(one(true))).collect();
        for t in all {
            let _ = t.await;
        }
    });
    row(
        report,
        &format!("{name}: reserve + settle-and-log, {IN_FLIGHT} in flight"),
        s / IN_FLIGHT as f64,
        "per request",
    );
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime starts");
    let mut report = String::from("| operation | µs | per second | note |\n|---|---:|---:|---|\n");

    // Credentials and the key cache.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cfg = config(
        dir.path(),
        &format!("{{ embedded: {{ path: \"{}\" }} }}", dir.path().display()),
    );
    let store = rt
        .block_on(open_store(&cfg.store, true))
        .expect("embedded store opens");
    let input = model_gateway::api::keys::KeyInput {
        quota_usd: Some(Some(1e9)),
        models: Some(vec!["m".into()]),
        ..Default::default()
    };
    let (rec, view) = rt
        .block_on(model_gateway::api::keys::create(&*store, &input))
        .expect("key created");
    let secret = view["key"].as_str().unwrap_or_default().to_string();
    let gw = Gateway::new(Arc::new(cfg), store.clone());
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::AUTHORIZATION,
        format!("Bearer {secret}").parse().expect("header value"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().expect("header value"),
    );
    let ip = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    // Warm the cache: the measured path is the hit every request after the first takes.
    let hash = keys::hash(&secret);
    rt.block_on(gw.keys.get(&rec.id, &hash)).expect("key found");
    // Inside the runtime, as a request is: an entry older than the cache's TTL (the full
    // run measures for longer than it) is served while a lookup refreshes it behind,
    // where outside one the lookup would be waited for.
    let _in_runtime = rt.enter();
    let s = timing::median(quick, || {
        let k = credentials::extract(&headers, None, Accepts::default());
        std::hint::black_box(k);
    });
    row(
        &mut report,
        "credential extraction (`Authorization: Bearer`)",
        s,
        "",
    );
    // The client route table: a row near its top, one in its middle, one near its end.
    let paths = [
        (http::Method::POST, "/v1/chat/completions"),
        (
            http::Method::POST,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        ),
        (http::Method::GET, "/v1/video/generations/task_0123456789"),
    ];
    let s = timing::median(quick, || {
        for (m, p) in &paths {
            let _ = std::hint::black_box(model_gateway::route::route(m, std::hint::black_box(p)));
        }
    });
    row(
        &mut report,
        "route lookup",
        s / paths.len() as f64,
        "mean of an early, a middle and a late row of the table",
    );
    let s = timing::median(quick, || {
        let k = std::hint::black_box(&secret);
        let ok = keys::is_well_formed(k);
        let h = keys::hash(k);
        std::hint::black_box((ok, keys::id_from_hash(&h)));
    });
    row(&mut report, "key format check + SHA-256 + id", s, "");
    let s = timing::median(quick, || {
        let k = gw.keys.get(&rec.id, &hash).now_or_never();
        assert!(
            matches!(k, Some(Ok(_))),
            "a cache hit answers without waiting"
        );
    });
    row(&mut report, "key cache lookup (hit)", s, "");
    let s = timing::median(quick, || {
        let caller = auth::Caller {
            headers: &headers,
            query: None,
            accepts: Accepts::default(),
            ip,
            now_ms: gw.calendar.clock.now_ms(),
        };
        let k = auth::authenticate(
            &gw.keys,
            gw.store.as_ref(),
            caller,
            &mut auth::Room::default(),
        )
        .now_or_never();
        assert!(matches!(k, Some(Ok(_))), "authenticates without waiting");
    });
    row(
        &mut report,
        "whole authentication (all of the above + rules)",
        s,
        "",
    );

    // SSE decoding.
    let stream = chat_stream(2000);
    let s = timing::median(quick, || {
        let mut d = Decoder::new();
        let mut out = Vec::with_capacity(64);
        let mut n = 0;
        for piece in stream.chunks(4096) {
            d.feed(piece, &mut out);
            n += out.len();
            out.clear();
        }
        assert_eq!(n, 2001);
    });
    row(
        &mut report,
        "SSE decode, 2,001 events in 4 KiB reads",
        s,
        &format!(
            "{:.0} MB/s, {:.0} events/s",
            stream.len() as f64 / s / 1e6,
            2001.0 / s
        ),
    );
    let one_event = &stream[..memchr::memmem::find(&stream, b"\n\n").map_or(0, |i| i + 2)];
    let s = timing::median(quick, || {
        let mut d = Decoder::new();
        let mut out = Vec::with_capacity(1);
        d.feed(one_event, &mut out);
        assert_eq!(out.len(), 1);
    });
    row(
        &mut report,
        "SSE decode, one event per read (a live stream)",
        s,
        "",
    );

    // The store's per-request work.
    store_rows(quick, &rt, "embedded", store.clone(), &rec.id, &mut report);
    response_rows(quick, &rt, "embedded", &*store, &rec.id, &mut report);
    match Redis::start() {
        Some(redis) => {
            let rcfg = config(
                dir.path(),
                &format!("{{ redis: {{ url: \"{}\" }} }}", redis.url()),
            );
            let rstore = rt
                .block_on(open_store(&rcfg.store, false))
                .expect("redis store connects");
            let (rrec, _) = rt
                .block_on(model_gateway::api::keys::create(&*rstore, &input))
                .expect("key created");
            response_rows(
                quick,
                &rt,
                "redis (unix socket)",
                &*rstore,
                &rrec.id,
                &mut report,
            );
            store_rows(
                quick,
                &rt,
                "redis (unix socket)",
                rstore,
                &rrec.id,
                &mut report,
            );
        }
        None => {
            let _ = writeln!(
                report,
                "| redis | – | – | redis-server not installed: skipped |"
            );
        }
    }
    if quick {
        println!("micro bench smoke run ok");
        return;
    }
    println!("{report}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-micro.md");
    if let Err(e) = std::fs::write(path, &report) {
        eprintln!("cannot write {path}: {e}");
    }
}
