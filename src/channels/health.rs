//! Passive channel health, learnt from the requests themselves (no synthetic probes):
//!
//! - a **circuit** per channel: consecutive failures (no connection, a timeout, a 5xx or
//!   429 answer, a stream cut short) open it, and the failover loop then skips the channel
//!   (before anything is sent to it: a request that reached an upstream is never retried,
//!   spec 7.3). After the cool-down one request is let through as a probe; its success
//!   closes the circuit, its failure opens it for another cool-down;
//! - the channel's **upstream keys**, used in turn; a key the upstream refuses (401/403) is
//!   set aside while another remains, and reported.
//!
//! Everything here is atomics: a request records its outcome without a lock. The state
//! outlives a configuration reload for a channel whose name and address are unchanged.

use prometheus::{Histogram, HistogramOpts, IntCounter, Opts};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// When a circuit opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Circuit {
    /// Consecutive failures that open the circuit; 0: never.
    pub failures: u32,
    pub cooldown: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed,
    Open,
    /// The cool-down is over: one probe request at a time is let through.
    HalfOpen,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }

    /// The value of the `mg_channel_state` gauge.
    pub fn gauge(self) -> i64 {
        match self {
            State::Closed => 0,
            State::HalfOpen => 1,
            State::Open => 2,
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Open,
            2 => State::HalfOpen,
            _ => State::Closed,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
        }
    }
}

/// How an upstream exchange failed: the `kind` label of `mg_upstream_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Connect,
    Timeout,
    Status5xx,
    Status429,
    /// 401/403: the upstream refused the channel's key.
    Auth,
    /// Any other 4xx: the request, not the channel (does not count against the circuit).
    Status4xx,
    BadResponse,
    /// The connection broke in the middle of the answer.
    CutStream,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Status5xx,
        ErrorKind::Status429,
        ErrorKind::Auth,
        ErrorKind::Status4xx,
        ErrorKind::BadResponse,
        ErrorKind::CutStream,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Status5xx => "status_5xx",
            ErrorKind::Status429 => "status_429",
            ErrorKind::Auth => "auth",
            ErrorKind::Status4xx => "status_4xx",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::CutStream => "cut_stream",
        }
    }

    /// The kind of a non-2xx answer; `None` for a success.
    pub fn of_status(status: u16) -> Option<ErrorKind> {
        match status {
            200..=399 => None,
            401 | 403 => Some(ErrorKind::Auth),
            429 => Some(ErrorKind::Status429),
            400..=499 => Some(ErrorKind::Status4xx),
            _ => Some(ErrorKind::Status5xx),
        }
    }

    /// Whether the failure says the channel is unwell (rather than the request or the key).
    fn trips(self) -> bool {
        matches!(
            self,
            ErrorKind::Connect
                | ErrorKind::Timeout
                | ErrorKind::Status5xx
                | ErrorKind::Status429
                | ErrorKind::CutStream
        )
    }

    fn index(self) -> usize {
        self as usize
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(c: u8) -> Option<ErrorKind> {
        ErrorKind::ALL.get(usize::from(c).checked_sub(1)?).copied()
    }
}

/// Milliseconds on a monotonic clock shared by the process (never 0, so 0 means "never").
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    start.elapsed().as_millis() as u64 + 1
}

/// The upstream latency buckets, seconds (an LLM's first byte can take a minute).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// One channel's health. Shared by every configuration that keeps the channel.
pub struct Health {
    state: AtomicU8,
    consecutive: AtomicU32,
    opened_at: AtomicU64,
    /// Half-open: a probe is out until this time; after it another may go (a probe whose
    /// request never reached the channel must not keep it out for good).
    probe_until: AtomicU64,
    window: Window,
    /// Exponentially weighted mean of the time to the response header, microseconds.
    latency_us: AtomicU64,
    last_error: AtomicU8,
    last_error_at: AtomicU64,
    opened: IntCounter,
    errors: [IntCounter; ErrorKind::ALL.len()],
    latency: Histogram,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("state", &State::from_u8(self.state.load(Relaxed)))
            .field("consecutive", &self.consecutive.load(Relaxed))
            .finish_non_exhaustive()
    }
}

impl Health {
    pub fn new(channel: &str) -> Health {
        let counter = |name: &str, help: &str, kind: Option<&str>| {
            let mut o = Opts::new(name, help).const_label("channel", channel);
            if let Some(k) = kind {
                o = o.const_label("kind", k);
            }
            // Names and labels are constants here; only a broken constant could fail.
            IntCounter::with_opts(o).unwrap_or_else(|_| IntCounter::new("x", "x").unwrap())
        };
        let errors = ErrorKind::ALL.map(|k| {
            counter(
                "mg_upstream_errors_total",
                "Upstream exchanges that failed, by channel and kind.",
                Some(k.as_str()),
            )
        });
        let latency = Histogram::with_opts(
            HistogramOpts::new(
                "mg_upstream_response_seconds",
                "Time from opening an upstream exchange to its response header, by channel.",
            )
            .const_label("channel", channel)
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .unwrap_or_else(|_| Histogram::with_opts(HistogramOpts::new("x", "x")).unwrap());
        Health {
            state: AtomicU8::new(0),
            consecutive: AtomicU32::new(0),
            opened_at: AtomicU64::new(0),
            probe_until: AtomicU64::new(0),
            window: Window::default(),
            latency_us: AtomicU64::new(0),
            last_error: AtomicU8::new(0),
            last_error_at: AtomicU64::new(0),
            opened: counter(
                "mg_channel_circuit_opened_total",
                "Times a channel's circuit opened.",
                None,
            ),
            errors,
            latency,
        }
    }

    pub fn state(&self, circuit: &Circuit) -> State {
        let s = State::from_u8(self.state.load(Acquire));
        if s == State::Open && self.cooled(circuit, now_ms()) {
            return State::HalfOpen;
        }
        s
    }

    fn cooled(&self, circuit: &Circuit, now: u64) -> bool {
        now.saturating_sub(self.opened_at.load(Acquire)) >= circuit.cooldown.as_millis() as u64
    }

    /// Whether a request may be sent to the channel now. A closed circuit always admits;
    /// an open one never until its cool-down is over; then one probe at a time.
    pub fn admit(&self, circuit: &Circuit) -> bool {
        let now = now_ms();
        match State::from_u8(self.state.load(Acquire)) {
            State::Closed => true,
            State::Open => {
                if !self.cooled(circuit, now) {
                    return false;
                }
                let won = self
                    .state
                    .compare_exchange(
                        State::Open.as_u8(),
                        State::HalfOpen.as_u8(),
                        AcqRel,
                        Acquire,
                    )
                    .is_ok();
                if won {
                    self.probe_until.store(now + probe_window(circuit), Release);
                }
                won
            }
            State::HalfOpen => {
                let until = self.probe_until.load(Acquire);
                now >= until
                    && self
                        .probe_until
                        .compare_exchange(until, now + probe_window(circuit), AcqRel, Acquire)
                        .is_ok()
            }
        }
    }

    /// The upstream answered (a response header, of any status that is not a failure).
    pub fn success(&self, latency: Duration) {
        self.window.record(false);
        self.observe_latency(latency);
        self.consecutive.store(0, Relaxed);
        if self.state.load(Acquire) != State::Closed.as_u8() {
            self.state.store(State::Closed.as_u8(), Release);
            tracing::info!("channel circuit closed after a successful probe");
        }
    }

    /// A failed exchange; `latency` when a response header came (a 5xx, a 429).
    pub fn failure(&self, circuit: &Circuit, kind: ErrorKind, latency: Option<Duration>) {
        self.errors[kind.index()].inc();
        self.last_error.store(kind.code(), Relaxed);
        self.last_error_at.store(now_ms(), Relaxed);
        if let Some(l) = latency {
            self.observe_latency(l);
        }
        if !kind.trips() {
            // The request's or the key's fault: the channel answered.
            self.window.record(false);
            return;
        }
        self.window.record(true);
        let n = self.consecutive.fetch_add(1, AcqRel) + 1;
        let state = State::from_u8(self.state.load(Acquire));
        let open = match state {
            State::HalfOpen => true,
            State::Closed => circuit.failures > 0 && n >= circuit.failures,
            State::Open => false,
        };
        if open {
            self.opened_at.store(now_ms(), Release);
            self.state.store(State::Open.as_u8(), Release);
            self.opened.inc();
        }
    }

    fn observe_latency(&self, l: Duration) {
        self.latency.observe(l.as_secs_f64());
        let us = l.as_micros().min(u64::MAX as u128) as u64;
        // Weight 1/8 for the newest sample; racing updates only lose a sample.
        let old = self.latency_us.load(Relaxed);
        let new = if old == 0 { us } else { old - old / 8 + us / 8 };
        self.latency_us.store(new.max(1), Relaxed);
    }

    /// What `GET /admin/channels` shows.
    pub fn view(&self, circuit: &Circuit) -> HealthView {
        let (requests, errors) = self.window.recent();
        let last = ErrorKind::from_code(self.last_error.load(Relaxed));
        let now = now_ms();
        let state = self.state(circuit);
        HealthView {
            state,
            recent_requests: requests,
            recent_error_rate: if requests == 0 {
                0.0
            } else {
                errors as f64 / requests as f64
            },
            latency_ms: self.latency_us.load(Relaxed) as f64 / 1000.0,
            last_error: last.map(ErrorKind::as_str),
            last_error_secs_ago: last
                .map(|_| now.saturating_sub(self.last_error_at.load(Relaxed)) / 1000),
            open_for_secs: (state != State::Closed).then(|| {
                let cd = circuit.cooldown.as_millis() as u64;
                let opened = self.opened_at.load(Relaxed);
                cd.saturating_sub(now.saturating_sub(opened)) / 1000
            }),
        }
    }

    /// The metric families this channel's counters and histogram contribute.
    pub fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        use prometheus::core::Collector;
        let mut out = self.opened.collect();
        for e in &self.errors {
            out.extend(e.collect());
        }
        out.extend(self.latency.collect());
        out
    }
}

/// How long a half-open probe keeps the next one waiting.
fn probe_window(circuit: &Circuit) -> u64 {
    (circuit.cooldown.as_millis() as u64).clamp(1_000, 30_000)
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct HealthView {
    #[serde(serialize_with = "state_str")]
    pub state: State,
    /// Requests answered in the last one to two minutes.
    pub recent_requests: u64,
    pub recent_error_rate: f64,
    /// Weighted mean of the time to the upstream's response header.
    pub latency_ms: f64,
    pub last_error: Option<&'static str>,
    pub last_error_secs_ago: Option<u64>,
    /// Seconds before the next probe may go (open or half-open circuits).
    pub open_for_secs: Option<u64>,
}

fn state_str<S: serde::Serializer>(s: &State, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s.as_str())
}

/// Requests and failures of the current and the previous minute.
#[derive(Default)]
struct Window {
    minute: AtomicU64,
    cur: [AtomicU32; 2],
    prev: [AtomicU32; 2],
}

impl Window {
    fn roll(&self) {
        let m = now_ms() / 60_000;
        let seen = self.minute.load(Acquire);
        if m != seen
            && self
                .minute
                .compare_exchange(seen, m, AcqRel, Acquire)
                .is_ok()
        {
            for i in 0..2 {
                let v = self.cur[i].swap(0, AcqRel);
                self.prev[i].store(if m == seen + 1 { v } else { 0 }, Release);
            }
        }
    }

    fn record(&self, failed: bool) {
        self.roll();
        self.cur[0].fetch_add(1, Relaxed);
        if failed {
            self.cur[1].fetch_add(1, Relaxed);
        }
    }

    fn recent(&self) -> (u64, u64) {
        self.roll();
        let get = |i: usize| u64::from(self.cur[i].load(Relaxed) + self.prev[i].load(Relaxed));
        (get(0), get(1))
    }
}

/// Everything but the key's value.
impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("secret", &crate::redact::Hidden(&self.secret))
            .field("aside", &self.aside)
            .finish_non_exhaustive()
    }
}

/// A channel's upstream keys, used in turn.
#[derive(Debug, Default)]
pub struct Keys {
    slots: Vec<Slot>,
    next: AtomicUsize,
}

struct Slot {
    secret: String,
    /// The status that set the key aside; 0 while it is in use.
    aside: AtomicU16,
}

/// One key chosen for one exchange.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    pub index: usize,
    pub secret: &'a str,
}

impl Keys {
    pub fn new(secrets: Vec<String>) -> Keys {
        Keys {
            slots: secrets
                .into_iter()
                .map(|secret| Slot {
                    secret,
                    aside: AtomicU16::new(0),
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// The next key in turn, skipping keys set aside while any other is left (when every
    /// key is set aside they are used anyway: the channel is then out of the candidates,
    /// and a caller that names it, a video task's poll, still gets a key).
    /// Every configured key (to keep out of the log).
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.slots.iter().map(|s| s.secret.as_str())
    }

    pub fn pick(&self) -> Key<'_> {
        let n = self.slots.len();
        if n == 0 {
            return Key {
                index: 0,
                secret: "",
            };
        }
        let start = self.next.fetch_add(1, Relaxed);
        let usable = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.slots[i].aside.load(Relaxed) == 0);
        let index = usable.unwrap_or(start % n);
        Key {
            index,
            secret: &self.slots[index].secret,
        }
    }

    /// The upstream refused this key: it is not used again while another is left.
    pub fn set_aside(&self, index: usize, status: u16) -> bool {
        self.slots
            .get(index)
            .is_some_and(|s| s.aside.swap(status, AcqRel) == 0)
    }

    /// Whether some key is still in use (a channel without keys always is).
    pub fn usable(&self) -> bool {
        self.slots.is_empty() || self.slots.iter().any(|s| s.aside.load(Relaxed) == 0)
    }

    pub fn set_aside_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.aside.load(Relaxed) != 0)
            .count()
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Each key as the operator may see it: a short fingerprint (never the key) and
    /// whether it is set aside.
    pub fn view(&self) -> Vec<serde_json::Value> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let aside = s.aside.load(Relaxed);
                serde_json::json!({
                    "index": i,
                    "fingerprint": fingerprint(&s.secret),
                    "state": if aside == 0 { "in_use" } else { "set_aside" },
                    "refused_with": (aside != 0).then_some(aside),
                })
            })
            .collect()
    }
}

/// The first 8 hex digits of the key's SHA-256: tells keys apart, reveals nothing.
pub fn fingerprint(secret: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    hex::encode(&d.as_ref()[..4])
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
