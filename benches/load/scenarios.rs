//! The load generator: closed loop at fixed concurrency, open loop at a fixed rate,
//! streams timed event by event, and thousands of idle open streams.
//!
//! Latencies are recorded in nanoseconds into full histograms (hdrhistogram, 3
//! significant digits). The open loop measures from each request's intended send time
//! (its slot in a fixed schedule), so a stall delays and is charged to every request
//! scheduled behind it: coordinated omission is accounted for.

use super::http::{BlockingConn, Conn, Dial, Part, SseSplitter};
use super::sys;
use super::upstream::PIECE_MARK;
use hdrhistogram::Histogram;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

pub type Hist = Histogram<u64>;

pub fn hist() -> Hist {
    // 1 µs .. 2 min in ns.
    Histogram::new_with_bounds(1_000, 120_000_000_000, 3).expect("constant histogram bounds")
}

fn record(h: &mut Hist, d: Duration) {
    h.saturating_record(d.as_nanos().min(u64::MAX as u128) as u64);
}

fn merge(into: &mut Hist, from: &Hist) {
    // Same bounds everywhere: `add` cannot fail.
    let _ = into.add(from);
}

/// Microseconds at a quantile.
pub fn us(h: &Hist, q: f64) -> f64 {
    if h.is_empty() {
        return f64::NAN;
    }
    h.value_at_quantile(q) as f64 / 1e3
}

#[derive(Debug)]
pub struct Closed {
    pub requests: u64,
    pub errors: u64,
    pub secs: f64,
    pub latency: Hist,
    pub body_bytes: u64,
}

impl Closed {
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.secs
    }
}

impl Streams {
    /// Streams completed per second.
    pub fn rate(&self) -> f64 {
        self.streams as f64 / self.secs.max(1e-9)
    }
}

/// `conns` connections each send `req` and wait for the whole answer, again and again,
/// for `dur`. Answers other than 200, and I/O errors, count as errors. `to`: where and
/// how to connect (an address: plain TCP; [`super::http::TlsDial`]: TLS).
pub async fn closed_loop<D: Dial>(to: D, req: Arc<Vec<u8>>, conns: usize, dur: Duration) -> Closed {
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let (req, to) = (req.clone(), to.clone());
            tokio::spawn(async move {
                let (mut h, mut n, mut errors, mut bytes) = (hist(), 0u64, 0u64, 0u64);
                let mut conn = None;
                while Instant::now() < end {
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => match to.dial().await {
                            Ok(c) => conn.insert(c),
                            Err(_) => {
                                errors += 1;
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                continue;
                            }
                        },
                    };
                    let t0 = Instant::now();
                    let mut got = 0u64;
                    match c
                        .exchange(&req, |p| {
                            if let Part::Body(d) = p {
                                got += d.len() as u64;
                            }
                        })
                        .await
                    {
                        Ok(200) if got > 0 => {
                            record(&mut h, t0.elapsed());
                            n += 1;
                            bytes += got;
                        }
                        Ok(_) => errors += 1,
                        Err(_) => {
                            errors += 1;
                            conn = None;
                        }
                    }
                }
                (h, n, errors, bytes)
            })
        })
        .collect();
    let mut out = Closed {
        requests: 0,
        errors: 0,
        secs: 0.0,
        latency: hist(),
        body_bytes: 0,
    };
    for t in tasks {
        if let Ok((h, n, e, b)) = t.await {
            merge(&mut out.latency, &h);
            out.requests += n;
            out.errors += e;
            out.body_bytes += b;
        } else {
            out.errors += 1;
        }
    }
    out.secs = start.elapsed().as_secs_f64();
    out
}

#[derive(Debug)]
pub struct Open {
    pub rate: f64,
    pub sent: u64,
    pub errors: u64,
    pub secs: f64,
    /// From the intended send time to the last byte of the answer.
    pub latency: Hist,
    /// From the actual send time (what a naive closed-loop tool would report).
    pub service: Hist,
    /// How late each request left its slot (the pacer's own error plus queueing).
    pub lateness: Hist,
}

/// Sends `rate` requests per second for `dur`, spread over `threads` blocking
/// connections (request `i` is due at `i / rate` seconds and goes out on connection
/// `i % threads`, as wrk2 does). Plain threads with a 1 ns timer slack keep the pacer
/// to a few µs, where Tokio's timer wheel would add up to a millisecond.
pub fn open_loop(
    addr: SocketAddr,
    req: Arc<Vec<u8>>,
    rate: f64,
    threads: usize,
    dur: Duration,
) -> Open {
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + dur;
    let handles: Vec<_> = (0..threads)
        .map(|k| {
            let req = req.clone();
            std::thread::spawn(move || {
                sys::tight_timer_slack();
                let (mut lat, mut svc, mut late) = (hist(), hist(), hist());
                let (mut sent, mut errors) = (0u64, 0u64);
                let mut conn = BlockingConn::connect(addr).ok();
                for j in 0u64.. {
                    let i = k as u64 + j * threads as u64;
                    let due = start + Duration::from_secs_f64(i as f64 / rate);
                    if due >= end {
                        break;
                    }
                    sys::sleep_until(due);
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => match BlockingConn::connect(addr) {
                            Ok(c) => conn.insert(c),
                            Err(_) => {
                                errors += 1;
                                continue;
                            }
                        },
                    };
                    let t_send = Instant::now();
                    sent += 1;
                    match c.exchange(&req, |_| {}) {
                        Ok(200) => {
                            let done = Instant::now();
                            record(&mut lat, done - due);
                            record(&mut svc, done - t_send);
                            record(&mut late, t_send - due);
                        }
                        Ok(_) => errors += 1,
                        Err(_) => {
                            errors += 1;
                            conn = None;
                        }
                    }
                }
                (lat, svc, late, sent, errors)
            })
        })
        .collect();
    let mut out = Open {
        rate,
        sent: 0,
        errors: 0,
        secs: dur.as_secs_f64(),
        latency: hist(),
        service: hist(),
        lateness: hist(),
    };
    for h in handles {
        match h.join() {
            Ok((l, s, t, n, e)) => {
                merge(&mut out.latency, &l);
                merge(&mut out.service, &s);
                merge(&mut out.lateness, &t);
                out.sent += n;
                out.errors += e;
            }
            Err(_) => out.errors += 1,
        }
    }
    out
}

#[derive(Debug)]
pub struct Streams {
    pub streams: u64,
    pub errors: u64,
    /// How long the scenario ran.
    pub secs: f64,
    /// Request sent → first body byte.
    pub ttfb: Hist,
    /// Between consecutive content events, at the client.
    pub gaps: Hist,
    /// Gaps shorter than half the upstream's interval: events that left together.
    pub coalesced: u64,
}

/// Closed loop of streamed answers: each stream must bring `pieces` content events and
/// an event holding `end` (`[DONE]` in a chat stream, `message_stop` in a messages one).
pub async fn streams(
    addr: SocketAddr,
    req: Arc<Vec<u8>>,
    conns: usize,
    dur: Duration,
    pieces: usize,
    interval: Duration,
    end_mark: &'static [u8],
) -> Streams {
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let req = req.clone();
            tokio::spawn(async move {
                let mut out = Streams {
                    streams: 0,
                    errors: 0,
                    secs: 0.0,
                    ttfb: hist(),
                    gaps: hist(),
                    coalesced: 0,
                };
                let mut conn = None;
                let mut split = SseSplitter::default();
                // A connection's first stream pays its setup (and, with every connection
                // starting at once, a queue of them): its time to first byte is not
                // counted, as the closed loop's warm-up is not.
                let mut warm = false;
                while Instant::now() < end {
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => match Conn::connect(addr).await {
                            Ok(c) => conn.insert(c),
                            Err(_) => {
                                out.errors += 1;
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                continue;
                            }
                        },
                    };
                    let t0 = Instant::now();
                    let (mut first, mut last): (Option<Duration>, Option<Instant>) = (None, None);
                    let (mut seen, mut done) = (0usize, false);
                    let (ttfb, gaps, coalesced) =
                        (&mut out.ttfb, &mut out.gaps, &mut out.coalesced);
                    let r = c
                        .exchange(&req, |p| {
                            let Part::Body(d) = p else { return };
                            let now = Instant::now();
                            if first.is_none() {
                                first = Some(now - t0);
                            }
                            split.feed(d, |ev| {
                                if memchr::memmem::find(ev, PIECE_MARK).is_some() {
                                    if let Some(prev) = last {
                                        let gap = now - prev;
                                        record(gaps, gap);
                                        if gap < interval / 2 {
                                            *coalesced += 1;
                                        }
                                    }
                                    last = Some(now);
                                    seen += 1;
                                } else if memchr::memmem::find(ev, end_mark).is_some() {
                                    done = true;
                                }
                            });
                        })
                        .await;
                    match (r, first) {
                        (Ok(200), Some(f)) if done && seen == pieces => {
                            if warm {
                                record(ttfb, f);
                            }
                            warm = true;
                            out.streams += 1;
                        }
                        (Ok(_), _) => out.errors += 1,
                        (Err(_), _) => {
                            out.errors += 1;
                            conn = None;
                            split = SseSplitter::default();
                            warm = false;
                        }
                    }
                }
                out
            })
        })
        .collect();
    let mut all = Streams {
        streams: 0,
        errors: 0,
        secs: 0.0,
        ttfb: hist(),
        gaps: hist(),
        coalesced: 0,
    };
    for t in tasks {
        match t.await {
            Ok(s) => {
                merge(&mut all.ttfb, &s.ttfb);
                merge(&mut all.gaps, &s.gaps);
                all.streams += s.streams;
                all.errors += s.errors;
                all.coalesced += s.coalesced;
            }
            Err(_) => all.errors += 1,
        }
    }
    all.secs = start.elapsed().as_secs_f64();
    all
}

#[derive(Debug, Clone)]
pub struct Idle {
    pub wanted: usize,
    pub opened: u64,
    pub errors: u64,
    pub open_secs: f64,
    /// Whole-process resident memory: before, with every stream open, after the hold.
    pub rss_before: u64,
    pub rss_open: u64,
    pub rss_after: u64,
    /// Heap allocated and not freed between opening the first stream and the end of
    /// the hold (the rest of RSS growth is allocator slack and kernel-side memory).
    pub heap_open: i64,
}

/// Read buffer of each idle client connection: the gateway's heads and first event fit.
const IDLE_BUF: usize = 4 * 1024;
/// Streams being opened at once (the listen backlog is bounded by `somaxconn`).
const OPENING: usize = 256;

/// Opens `n` streams that the upstream holds open after its first event, waits until
/// all are open, holds them for `hold`, then `release()`s them and expects each to end
/// with `[DONE]`. Everything is bounded in time: a stream not open or not finished by
/// its deadline is an error.
pub async fn idle(
    addr: SocketAddr,
    req: Arc<Vec<u8>>,
    n: usize,
    hold: Duration,
    release: impl FnOnce(),
) -> Idle {
    let rss_before = sys::rss_bytes_trimmed();
    let heap_before = sys::live_bytes();
    sys::count_allocations(true);
    let t0 = Instant::now();
    let opening = Arc::new(Semaphore::new(OPENING));
    let opened = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (req, opening, opened, failed) =
            (req.clone(), opening.clone(), opened.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let Ok(permit) = opening.acquire_owned().await else {
                return false;
            };
            let mut permit = Some(permit);
            let mut conn = match Conn::connect_with(addr, IDLE_BUF).await {
                Ok(c) => c,
                Err(_) => {
                    failed.fetch_add(1, Ordering::SeqCst);
                    return false;
                }
            };
            let mut split = SseSplitter::default();
            let (mut events, mut done) = (0usize, false);
            let r = conn
                .exchange(&req, |p| {
                    if let Part::Body(d) = p {
                        split.feed(d, |ev| {
                            events += 1;
                            done |= memchr::memmem::find(ev, b"[DONE]").is_some();
                        });
                        if events > 0 && permit.take().is_some() {
                            opened.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
                .await;
            let ok = matches!(r, Ok(200)) && done;
            if permit.is_some() {
                failed.fetch_add(1, Ordering::SeqCst);
            }
            ok
        }));
    }
    let open_deadline = Instant::now() + Duration::from_secs(90);
    while (opened.load(Ordering::SeqCst) + failed.load(Ordering::SeqCst)) < n as u64
        && Instant::now() < open_deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let open_secs = t0.elapsed().as_secs_f64();
    let opened_n = opened.load(Ordering::SeqCst);
    tokio::time::sleep(hold).await;
    let rss_open = sys::rss_bytes_trimmed();
    sys::count_allocations(false);
    let heap_open = sys::live_bytes() - heap_before;
    release();
    let finish_deadline = Instant::now() + Duration::from_secs(60);
    let mut errors = 0u64;
    for mut t in tasks {
        let left = finish_deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, &mut t).await {
            Ok(Ok(true)) => {}
            Ok(_) => errors += 1,
            Err(_) => {
                t.abort();
                errors += 1;
            }
        }
    }
    Idle {
        wanted: n,
        opened: opened_n,
        errors,
        open_secs,
        rss_before,
        rss_open,
        rss_after: sys::rss_bytes_trimmed(),
        heap_open,
    }
}

/// The element with the median key (the upper median of an even count).
pub fn median_by<T>(mut v: Vec<T>, key: impl Fn(&T) -> f64) -> Option<T> {
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = v.len() / 2;
    v.into_iter().nth(mid)
}

/// The end of a chat stream.
pub const DONE: &[u8] = b"[DONE]";
