//! One request's observations, carried in its context from `new_ctx` to `logging`:
//! its route, when its first byte left, what its usage record said, and (when traces are
//! on) its spans. [`finish`] turns them into the request's metrics, its access-log line
//! and its trace.

use super::trace::{Span, TraceState, Tracer};
use super::{labels, GaugeGuard, Observer};
use crate::store::UsageRecord;
use std::time::{Duration, Instant};

/// What the usage record of the request said (copied as it is taken for the store).
#[derive(Debug, Default, Clone)]
pub struct Facts {
    pub model: String,
    pub channel: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost: i64,
    pub estimated: bool,
    pub overrun: i64,
    pub stream: bool,
}

impl Facts {
    pub fn of(u: &UsageRecord) -> Facts {
        Facts {
            model: u.model.clone(),
            channel: u.channel.clone(),
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            cost: u.cost,
            estimated: u.estimated,
            overrun: u.overrun,
            stream: u.stream,
        }
    }
}

#[derive(Default)]
pub struct Obs {
    /// Index into [`labels::ROUTES`]; `None` until the request was routed.
    route: Option<usize>,
    protocol: &'static str,
    first_byte: Option<Instant>,
    pub facts: Option<Facts>,
    _in_flight: Option<GaugeGuard>,
    _session: Option<GaugeGuard>,
    trace: Option<Box<TraceState>>,
}

impl Obs {
    /// A request arrived (`new_ctx`): it counts as in flight until its context drops.
    pub fn begin(o: &Observer) -> Obs {
        Obs {
            _in_flight: Some(GaugeGuard::new(&o.in_flight)),
            ..Obs::default()
        }
    }

    /// The request was routed: its labels, its trace (continuing the caller's
    /// `traceparent` when it sent one), and for a WebSocket, the session gauge.
    /// `route` and `protocol`: the request's labels; `websocket`: a realtime session.
    pub fn routed(
        &mut self,
        o: &Observer,
        route: &str,
        protocol: &'static str,
        websocket: bool,
        headers: &http::HeaderMap,
    ) {
        self.route = Some(labels::route_index(route));
        self.protocol = protocol;
        if websocket {
            self._session = Some(GaugeGuard::new(&o.websockets));
        }
        if o.tracer.is_some() {
            let parent = headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .and_then(super::trace::parse_traceparent);
            self.trace = Some(Box::new(TraceState::new(parent)));
        }
    }

    /// The first byte of the answer's body is leaving (the first only counts).
    pub fn first_byte(&mut self) {
        if self.first_byte.is_none() {
            self.first_byte = Some(Instant::now());
        }
    }

    /// A step of the request, as a child span of its trace (nothing when traces are off).
    pub fn span(&mut self, name: &'static str, start: Instant, end: Instant) -> Option<&mut Span> {
        self.trace.as_mut().map(|t| t.child(name, start, end))
    }

    /// The start of a step, read only when the request is traced (the clock is read on
    /// every request otherwise, for nothing).
    pub fn step(&self) -> Option<Instant> {
        self.trace.as_ref().map(|_| Instant::now())
    }

    /// The span of a step begun at [`Obs::step`], ending now.
    pub fn step_span(&mut self, name: &'static str, start: Option<Instant>) -> Option<&mut Span> {
        let start = start?;
        self.span(name, start, Instant::now())
    }

    /// The trace's W3C `traceparent` for this request, when it is traced.
    pub fn traceparent(&self) -> Option<String> {
        self.trace.as_ref().map(|t| t.traceparent())
    }
}

/// What the `logging` phase knows of the request beyond its observations.
pub struct Ending<'a> {
    pub request_id: &'a str,
    pub key_id: Option<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub started: Instant,
    /// The model and channel when no usage record was taken (a request that failed).
    pub model: &'a str,
    pub channel: &'a str,
}

/// Metrics, access-log line and trace of one finished request.
pub fn finish(o: &Observer, obs: &mut Obs, e: &Ending<'_>) {
    let now = Instant::now();
    let facts = obs.facts.take().unwrap_or_default();
    let r = Report::of(obs, &facts, e, now);
    count(o, &r, e.status);
    access_log(&r, e);
    if let (Some(tracer), Some(t)) = (&o.tracer, obs.trace.take()) {
        trace(o, tracer, *t, &r, e, now);
    }
}

/// The labels and figures a finished request is reported with, everywhere alike.
struct Report<'a> {
    /// Index into [`labels::ROUTES`].
    route: usize,
    protocol: &'static str,
    /// The usage record's model and channel, else what the request knew of them.
    model: &'a str,
    channel: &'a str,
    facts: &'a Facts,
    elapsed: Duration,
    ttfb: Option<Duration>,
}

impl<'a> Report<'a> {
    fn of(obs: &Obs, facts: &'a Facts, e: &Ending<'a>, now: Instant) -> Report<'a> {
        let or = |recorded: &'a str, known: &'a str| {
            if recorded.is_empty() {
                known
            } else {
                recorded
            }
        };
        Report {
            route: obs.route.unwrap_or(labels::ROUTES.len() - 1),
            protocol: if obs.protocol.is_empty() {
                "default"
            } else {
                obs.protocol
            },
            model: or(&facts.model, e.model),
            channel: or(&facts.channel, e.channel),
            facts,
            elapsed: now - e.started,
            ttfb: obs.first_byte.map(|t| t - e.started),
        }
    }

    fn route(&self) -> &'static str {
        labels::ROUTES[self.route]
    }
}

/// The request counter and the route's latency histograms.
fn count(o: &Observer, r: &Report<'_>, status: u16) {
    o.requests
        .with_label_values(&[
            r.route(),
            r.protocol,
            o.model_label(r.model),
            o.channel_label(r.channel),
            labels::status(status),
        ])
        .inc();
    if let Some((d, t)) = o.route_histograms(r.route) {
        d.observe(r.elapsed.as_secs_f64());
        if let Some(ttfb) = r.ttfb {
            t.observe(ttfb.as_secs_f64());
        }
    }
}

/// The access log: never a key, a token or an upstream secret (the key's public id
/// only; the path without its query, where a generate-content key may travel).
fn access_log(r: &Report<'_>, e: &Ending<'_>) {
    let facts = r.facts;
    tracing::info!(
        target: "access",
        request_id = e.request_id,
        key_id = e.key_id.unwrap_or(""),
        method = e.method,
        path = e.path,
        route = r.route(),
        protocol = r.protocol,
        model = r.model,
        channel = r.channel,
        status = e.status,
        latency_ms = r.elapsed.as_secs_f64() * 1000.0,
        ttfb_ms = r.ttfb.map(|t| t.as_secs_f64() * 1000.0),
        prompt_tokens = facts.prompt_tokens,
        completion_tokens = facts.completion_tokens,
        cached_tokens = facts.cached_tokens,
        cost_usd = facts.cost as f64 / 1e6,
        cost_estimated = facts.estimated,
        overrun_micro_usd = facts.overrun,
        stream = facts.stream,
        "request"
    );
}

/// The request's root span, with its children, sent to the collector.
fn trace(
    o: &Observer,
    tracer: &Tracer,
    mut t: TraceState,
    r: &Report<'_>,
    e: &Ending<'_>,
    now: Instant,
) {
    let facts = r.facts;
    let root = t.root(e.method, r.route(), e.started, now);
    root.str("http.request.method", e.method)
        .str("url.path", e.path)
        .str("http.route", r.route())
        .int("http.response.status_code", i64::from(e.status))
        .str("gateway.request_id", e.request_id)
        .str("gateway.protocol", r.protocol)
        .str("gen_ai.request.model", r.model)
        .str("gateway.channel", r.channel)
        .int("gen_ai.usage.input_tokens", facts.prompt_tokens as i64)
        .int("gen_ai.usage.output_tokens", facts.completion_tokens as i64)
        .int(
            "gen_ai.usage.cached_input_tokens",
            facts.cached_tokens as i64,
        )
        .float("gateway.cost_usd", facts.cost as f64 / 1e6)
        .boolean("gateway.cost_estimated", facts.estimated)
        .error(e.status >= 500);
    if let Some(ttfb) = r.ttfb {
        root.float("gateway.ttfb_ms", ttfb.as_secs_f64() * 1000.0);
    }
    if !tracer.send(t) {
        o.spans_dropped.inc();
    }
}
