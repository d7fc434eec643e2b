//! What an operator sees of a running gateway: Prometheus metrics (`GET /metrics` on the
//! admin listener), one access-log line per request, and optional OpenTelemetry traces.
//!
//! One [`Observer`] per gateway instance, shared by every configuration a reload swaps
//! in. The request path only touches atomics: counters and histograms from the
//! `prometheus` crate (lock-free updates), handles resolved once per route and per
//! store operation; the one labelled lookup per request (`mg_requests_total`) is a
//! read-locked hash of five short strings. Every series is listed in the README.
//!
//! - [`request`]: the per-request record ([`Obs`], in the request's context) and what
//!   the `logging` phase does with it;
//! - [`store`]: a thin [`crate::store::Store`] decorator timing every store call and
//!   counting what each usage record says (tokens, cost, overruns);
//! - [`trace`]: spans, their OTLP/HTTP JSON encoding and the background exporter.

pub mod labels;
pub mod request;
pub mod store;
pub mod trace;

pub use request::Obs;

use crate::config::Config;
use arc_swap::ArcSwap;
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Request latency buckets, seconds: from a local answer to a long stream.
const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Store call buckets, seconds: fine below a millisecond, where an embedded commit and a
/// Redis round trip fall, up to a store that stalls.
const STORE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// The models and channels of the running configuration: the only values the `model`
/// and `channel` labels take (anything else is `other`).
#[derive(Default)]
struct Known {
    models: HashSet<String>,
    channels: HashSet<String>,
}

pub struct Observer {
    registry: Registry,
    requests: IntCounterVec,
    duration: Vec<Histogram>,
    ttfb: Vec<Histogram>,
    pub(crate) in_flight: IntGauge,
    pub(crate) streams: IntGauge,
    pub(crate) websockets: IntGauge,
    pub(crate) tokens: IntCounterVec,
    pub(crate) cost: IntCounterVec,
    pub(crate) overruns: IntCounterVec,
    pub(crate) overrun_cost: IntCounterVec,
    pub(crate) reservations: IntGauge,
    pub(crate) reserved: IntGauge,
    pub(crate) store_seconds: Vec<Histogram>,
    pub(crate) store_errors: IntCounterVec,
    reloads: IntCounterVec,
    generation: IntGauge,
    pub(crate) spans_dropped: IntCounter,
    known: ArcSwap<Known>,
    /// A graceful stop or upgrade began: `/readyz` answers 503 so no new traffic comes.
    stopping: AtomicBool,
    pub tracer: Option<trace::Tracer>,
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("metric definition");
    r.register(Box::new(c.clone()))
        .expect("metric registered once");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("metric definition");
    r.register(Box::new(g.clone()))
        .expect("metric registered once");
    g
}

/// One histogram per value of `label`, resolved now so the request path never looks
/// them up.
fn histograms(
    r: &Registry,
    name: &str,
    help: &str,
    label: &str,
    values: &[&str],
    buckets: &[f64],
) -> Vec<Histogram> {
    let v = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        &[label],
    )
    .expect("metric definition");
    r.register(Box::new(v.clone()))
        .expect("metric registered once");
    values.iter().map(|l| v.with_label_values(&[l])).collect()
}

/// The requests answered and being served: counts, latencies by route, open streams.
struct Traffic {
    requests: IntCounterVec,
    duration: Vec<Histogram>,
    ttfb: Vec<Histogram>,
    in_flight: IntGauge,
    streams: IntGauge,
    websockets: IntGauge,
}

/// Registers the request metrics, the latency histograms resolved for every route.
fn traffic_metrics(r: &Registry) -> Traffic {
    Traffic {
        requests: counter_vec(
            r,
            "mg_requests_total",
            "Requests answered, by route, client protocol, model, channel and status.",
            &["route", "protocol", "model", "channel", "status"],
        ),
        duration: histograms(
            r,
            "mg_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by route.",
            "route",
            labels::ROUTES,
            REQUEST_BUCKETS,
        ),
        ttfb: histograms(
            r,
            "mg_time_to_first_byte_seconds",
            "Time from a request's arrival to the first byte of its answer's body, by route.",
            "route",
            labels::ROUTES,
            REQUEST_BUCKETS,
        ),
        in_flight: gauge(r, "mg_requests_in_flight", "Requests being served."),
        streams: gauge(r, "mg_open_streams", "Streamed answers being relayed."),
        websockets: gauge(
            r,
            "mg_websocket_sessions",
            "Realtime WebSocket sessions open (handshakes included).",
        ),
    }
}

/// What requests are billed and what this instance holds in reservations.
struct Billing {
    tokens: IntCounterVec,
    cost: IntCounterVec,
    overruns: IntCounterVec,
    overrun_cost: IntCounterVec,
    reservations: IntGauge,
    reserved: IntGauge,
}

/// Registers the billing metrics: tokens and cost by model, overruns, reservations held.
fn billing_metrics(r: &Registry) -> Billing {
    Billing {
        tokens: counter_vec(
            r,
            "mg_tokens_total",
            "Tokens billed, by model and kind (input, output, cached_input).",
            &["model", "kind"],
        ),
        cost: counter_vec(
            r,
            "mg_cost_micro_usd_total",
            "Micro-USD charged to keys, by model and source (exact: the upstream's usage; estimated: counted by the gateway).",
            &["model", "source"],
        ),
        overruns: counter_vec(
            r,
            "mg_overruns_total",
            "Answers that cost more than their reservation (the excess is recorded, not charged), by model.",
            &["model"],
        ),
        overrun_cost: counter_vec(
            r,
            "mg_overrun_micro_usd_total",
            "Micro-USD beyond reservations, recorded and not charged, by model.",
            &["model"],
        ),
        reservations: gauge(
            r,
            "mg_reservations_held",
            "Reservations this instance holds for requests in flight.",
        ),
        reserved: gauge(
            r,
            "mg_reserved_micro_usd",
            "Micro-USD this instance holds in reservations for requests in flight.",
        ),
    }
}

/// How the store's calls went: latency and failures by operation.
struct StoreCalls {
    store_seconds: Vec<Histogram>,
    store_errors: IntCounterVec,
}

/// Registers the store metrics, the latency histograms resolved for every operation.
fn store_metrics(r: &Registry) -> StoreCalls {
    StoreCalls {
        store_seconds: histograms(
            r,
            "mg_store_operation_seconds",
            "Store call latency, by operation.",
            "op",
            store::OPS,
            STORE_BUCKETS,
        ),
        store_errors: counter_vec(
            r,
            "mg_store_errors_total",
            "Store calls that failed, by operation and kind (unavailable, conflict, internal).",
            &["op", "kind"],
        ),
    }
}

/// The configuration reloads and which configuration runs.
struct Reloads {
    reloads: IntCounterVec,
    generation: IntGauge,
}

/// Registers the configuration metrics: reloads by result, and the generation.
fn reload_metrics(r: &Registry) -> Reloads {
    Reloads {
        reloads: counter_vec(
            r,
            "mg_config_reloads_total",
            "Configuration reloads, by result (ok, invalid).",
            &["result"],
        ),
        generation: gauge(
            r,
            "mg_config_generation",
            "How many configurations this process has run (1 at start, +1 per successful reload).",
        ),
    }
}

/// Registers the count of request traces the exporter's full queue dropped.
fn spans_dropped(r: &Registry) -> IntCounter {
    let c = IntCounter::new(
        "mg_trace_spans_dropped_total",
        "Request traces dropped because the exporter's queue was full.",
    )
    .expect("metric definition");
    r.register(Box::new(c.clone()))
        .expect("metric registered once");
    c
}

/// Registers `mg_build_info`: always 1, the running version in its label.
fn build_info(r: &Registry) {
    let info = IntGauge::with_opts(
        Opts::new("mg_build_info", "The running version.")
            .const_label("version", env!("CARGO_PKG_VERSION")),
    )
    .expect("metric definition");
    info.set(1);
    r.register(Box::new(info)).expect("metric registered once");
}

impl Observer {
    /// Start-up only: the metric definitions are constants, so a failure here is a bug.
    pub fn new(config: &Config) -> Observer {
        let r = Registry::new();
        let Traffic {
            requests,
            duration,
            ttfb,
            in_flight,
            streams,
            websockets,
        } = traffic_metrics(&r);
        let Billing {
            tokens,
            cost,
            overruns,
            overrun_cost,
            reservations,
            reserved,
        } = billing_metrics(&r);
        let StoreCalls {
            store_seconds,
            store_errors,
        } = store_metrics(&r);
        let Reloads {
            reloads,
            generation,
        } = reload_metrics(&r);
        let o = Observer {
            requests,
            duration,
            ttfb,
            in_flight,
            streams,
            websockets,
            tokens,
            cost,
            overruns,
            overrun_cost,
            reservations,
            reserved,
            store_seconds,
            store_errors,
            reloads,
            generation,
            spans_dropped: spans_dropped(&r),
            known: ArcSwap::from_pointee(Known::default()),
            stopping: AtomicBool::new(false),
            tracer: config.telemetry.as_ref().map(trace::Tracer::new),
            registry: r,
        };
        build_info(&o.registry);
        o.adopt(config);
        o
    }

    /// A configuration became the running one: the models and channels it names become
    /// the values the labels may take.
    pub fn adopt(&self, config: &Config) {
        let mut known = Known::default();
        known.models.extend(config.prices.keys().cloned());
        for c in &config.channels {
            known.channels.insert(c.name.clone());
            known.models.extend(c.models.iter().cloned());
        }
        self.known.store(Arc::new(known));
        self.generation.inc();
    }

    pub fn reloaded(&self, ok: bool) {
        self.reloads
            .with_label_values(&[if ok { "ok" } else { "invalid" }])
            .inc();
    }

    /// `model` if the running configuration knows it, else `other` (an unknown name a
    /// caller sent must not become a series).
    pub fn model_label<'a>(&self, model: &'a str) -> &'a str {
        match model {
            "" => "none",
            m if self.known.load().models.contains(m) => m,
            _ => "other",
        }
    }

    pub fn channel_label<'a>(&self, channel: &'a str) -> &'a str {
        match channel {
            "" => "none",
            c if self.known.load().channels.contains(c) => c,
            _ => "other",
        }
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }

    /// The Prometheus text exposition of every series: the registry's, plus the
    /// channels of `config` (their state, keys, errors and latency).
    pub fn render(&self, config: &Config) -> Vec<u8> {
        let mut families = self.registry.gather();
        families.extend(channel_families(config));
        let families = merge(families);
        let mut out = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        out
    }

    fn route_histograms(&self, route: usize) -> Option<(&Histogram, &Histogram)> {
        Some((self.duration.get(route)?, self.ttfb.get(route)?))
    }
}

/// The per-channel series, read from the channels' health at scrape time.
fn channel_families(config: &Config) -> Vec<MetricFamily> {
    use prometheus::core::Collector;
    let mut out = Vec::new();
    for c in &config.channels {
        let labelled = |name: &str, help: &str, v: i64| {
            let g =
                IntGauge::with_opts(Opts::new(name, help).const_label("channel", &c.name)).ok()?;
            g.set(v);
            Some(g.collect())
        };
        let state = c.health.state(&c.circuit);
        out.extend(
            labelled(
                "mg_channel_state",
                "Circuit of each channel: 0 closed (in use), 1 half-open (probing), 2 open (skipped).",
                state.gauge(),
            )
            .into_iter()
            .flatten(),
        );
        out.extend(
            labelled(
                "mg_channel_keys_set_aside",
                "Upstream keys of each channel set aside after a 401/403.",
                c.keys.set_aside_count() as i64,
            )
            .into_iter()
            .flatten(),
        );
        out.extend(c.health.collect());
    }
    out
}

/// Families of the same name (one per channel) become one, as the text format wants.
fn merge(families: Vec<MetricFamily>) -> Vec<MetricFamily> {
    let mut out: Vec<MetricFamily> = Vec::with_capacity(families.len());
    for mut f in families {
        if f.get_metric().is_empty() {
            continue;
        }
        match out.iter_mut().find(|o| o.name() == f.name()) {
            Some(o) => o.mut_metric().extend(f.take_metric()),
            None => out.push(f),
        }
    }
    out
}

/// Adds one to a gauge for as long as it lives.
pub struct GaugeGuard(IntGauge);

impl GaugeGuard {
    pub fn new(g: &IntGauge) -> GaugeGuard {
        g.inc();
        GaugeGuard(g.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
