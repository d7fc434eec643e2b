//! OpenTelemetry traces over OTLP/HTTP with the JSON encoding (`POST <endpoint>/v1/traces`,
//! `application/json`), off unless `telemetry.otlp_endpoint` is set.
//!
//! One server span per request, its steps (store reserve, upstream connect, upstream
//! first byte, store settle) as children. The gateway encodes the few fields a span has
//! itself: the OpenTelemetry SDK would bring a protobuf stack and a second HTTP client for
//! one POST, and the JSON encoding is part of the OTLP specification that every
//! collector accepts. Spans go through a bounded queue to one background task that sends
//! them in batches; a full queue drops traces (counted), never slows a request.

use crate::config::Telemetry;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::upstreams::peer::HttpPeer;
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};

/// Traces waiting for the exporter; beyond this they are dropped.
const QUEUE: usize = 4096;
/// Traces per export request.
const BATCH: usize = 256;
/// The longest a finished trace waits before it is sent.
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// An attribute value.
#[derive(Debug, Clone)]
enum Attr {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// One span: a request (the root) or one of its steps.
#[derive(Debug, Clone)]
pub struct Span {
    name: String,
    id: [u8; 8],
    start: Instant,
    end: Instant,
    attrs: Vec<(&'static str, Attr)>,
    error: bool,
}

impl Span {
    fn new(name: String, start: Instant, end: Instant) -> Span {
        Span {
            name,
            id: random_bytes(),
            start,
            end,
            attrs: Vec::new(),
            error: false,
        }
    }

    pub fn str(&mut self, k: &'static str, v: &str) -> &mut Span {
        self.attrs.push((k, Attr::Str(v.to_string())));
        self
    }

    pub fn int(&mut self, k: &'static str, v: i64) -> &mut Span {
        self.attrs.push((k, Attr::Int(v)));
        self
    }

    pub fn float(&mut self, k: &'static str, v: f64) -> &mut Span {
        self.attrs.push((k, Attr::Float(v)));
        self
    }

    pub fn boolean(&mut self, k: &'static str, v: bool) -> &mut Span {
        self.attrs.push((k, Attr::Bool(v)));
        self
    }

    pub fn error(&mut self, failed: bool) -> &mut Span {
        self.error = failed;
        self
    }
}

/// The spans of one request.
#[derive(Debug)]
pub struct TraceState {
    trace_id: [u8; 16],
    /// The caller's span, when it sent a `traceparent`.
    parent: Option<[u8; 8]>,
    /// Unix time of `at`, so `Instant`s convert to the wall clock OTLP wants.
    unix_ns: u128,
    at: Instant,
    root: Option<Span>,
    root_id: [u8; 8],
    children: Vec<Span>,
}

impl TraceState {
    pub fn new(parent: Option<([u8; 16], [u8; 8])>) -> TraceState {
        let (trace_id, parent) = match parent {
            Some((t, p)) => (t, Some(p)),
            None => (random_bytes(), None),
        };
        TraceState {
            trace_id,
            parent,
            unix_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            at: Instant::now(),
            root: None,
            root_id: random_bytes(),
            children: Vec::new(),
        }
    }

    pub fn child(&mut self, name: &'static str, start: Instant, end: Instant) -> &mut Span {
        self.children.push(Span::new(name.to_string(), start, end));
        let last = self.children.len() - 1;
        &mut self.children[last]
    }

    pub fn root(&mut self, method: &str, route: &str, start: Instant, end: Instant) -> &mut Span {
        let mut s = Span::new(format!("{method} {route}"), start, end);
        s.id = self.root_id;
        self.root.insert(s)
    }

    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-01",
            hex::encode(self.trace_id),
            hex::encode(self.root_id)
        )
    }

    fn unix(&self, i: Instant) -> String {
        let ns = if i >= self.at {
            self.unix_ns + (i - self.at).as_nanos()
        } else {
            self.unix_ns.saturating_sub((self.at - i).as_nanos())
        };
        ns.to_string()
    }

    fn encode(&self, out: &mut Vec<Value>) {
        let trace_id = hex::encode(self.trace_id);
        let span = |s: &Span, parent: Option<[u8; 8]>, kind: u8| {
            let attrs: Vec<Value> = s.attrs.iter().map(|(k, v)| attribute(k, v)).collect();
            let mut v = json!({
                "traceId": trace_id,
                "spanId": hex::encode(s.id),
                "name": s.name,
                "kind": kind,
                "startTimeUnixNano": self.unix(s.start),
                "endTimeUnixNano": self.unix(s.end),
                "attributes": attrs,
                "status": {"code": if s.error { 2 } else { 1 }},
            });
            if let Some(p) = parent {
                v["parentSpanId"] = Value::String(hex::encode(p));
            }
            v
        };
        if let Some(root) = &self.root {
            // SPAN_KIND_SERVER = 2, SPAN_KIND_INTERNAL = 1 (OTLP `SpanKind`).
            out.push(span(root, self.parent, 2));
        }
        for c in &self.children {
            out.push(span(c, Some(self.root_id), 1));
        }
    }
}

fn attribute(k: &str, v: &Attr) -> Value {
    // OTLP JSON: 64-bit integers are strings.
    let value = match v {
        Attr::Str(s) => json!({"stringValue": s}),
        Attr::Int(i) => json!({"intValue": i.to_string()}),
        Attr::Float(f) => json!({"doubleValue": f}),
        Attr::Bool(b) => json!({"boolValue": b}),
    };
    json!({"key": k, "value": value})
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(8) {
        let r = crate::ids::fast_random().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    // An all-zero id is invalid in W3C trace context.
    if out.iter().all(|b| *b == 0) {
        out[0] = 1;
    }
    out
}

/// `00-<trace id>-<parent id>-<flags>` (W3C trace context), when well formed.
pub fn parse_traceparent(v: &str) -> Option<([u8; 16], [u8; 8])> {
    let mut parts = v.trim().split('-');
    let (version, trace, parent) = (parts.next()?, parts.next()?, parts.next()?);
    parts.next()?;
    if version.len() != 2 || version == "ff" {
        return None;
    }
    let t: [u8; 16] = hex::decode(trace).ok()?.try_into().ok()?;
    let p: [u8; 8] = hex::decode(parent).ok()?.try_into().ok()?;
    (t.iter().any(|b| *b != 0) && p.iter().any(|b| *b != 0)).then_some((t, p))
}

/// The request side of the exporter: hands finished traces to the queue.
pub struct Tracer {
    tx: mpsc::Sender<TraceState>,
    rx: parking_lot::Mutex<Option<mpsc::Receiver<TraceState>>>,
    config: Telemetry,
}

impl Tracer {
    pub fn new(config: &Telemetry) -> Tracer {
        let (tx, rx) = mpsc::channel(QUEUE);
        Tracer {
            tx,
            rx: parking_lot::Mutex::new(Some(rx)),
            config: config.clone(),
        }
    }

    /// Queues a finished trace; `false` when the queue is full (the trace is dropped).
    pub fn send(&self, t: TraceState) -> bool {
        self.tx.try_send(t).is_ok()
    }

    /// The exporter's loop, for the one background task that runs it (a second call gets
    /// nothing to do).
    pub fn exporter(&self) -> Option<Exporter> {
        let rx = self.rx.lock().take()?;
        Some(Exporter {
            rx,
            config: self.config.clone(),
            connector: Connector::new(None),
        })
    }
}

pub struct Exporter {
    rx: mpsc::Receiver<TraceState>,
    config: Telemetry,
    connector: Connector,
}

impl Exporter {
    /// Sends batches until `stop` turns true, then sends what is queued and returns.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut batch: Vec<TraceState> = Vec::with_capacity(BATCH);
        loop {
            let first = tokio::select! {
                t = self.rx.recv() => t,
                _ = stop.wait_for(|s| *s) => None,
            };
            let Some(first) = first else { break };
            batch.push(first);
            let deadline = tokio::time::Instant::now() + FLUSH_EVERY;
            while batch.len() < BATCH {
                match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                    Ok(Some(t)) => batch.push(t),
                    _ => break,
                }
            }
            self.export(&mut batch).await;
        }
        while let Ok(t) = self.rx.try_recv() {
            batch.push(t);
        }
        if !batch.is_empty() {
            self.export(&mut batch).await;
        }
    }

    async fn export(&self, batch: &mut Vec<TraceState>) {
        let mut spans = Vec::new();
        for t in batch.drain(..) {
            t.encode(&mut spans);
        }
        let body = json!({"resourceSpans": [{
            "resource": {"attributes": [
                attribute("service.name", &Attr::Str(self.config.service_name.clone())),
                attribute("service.version", &Attr::Str(env!("CARGO_PKG_VERSION").into())),
            ]},
            "scopeSpans": [{
                "scope": {"name": "model-gateway", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans,
            }],
        }]});
        let body = bytes::Bytes::from(body.to_string());
        if let Err(e) = self.post(body).await {
            tracing::warn!(error = %e, "trace export failed; these traces are dropped");
        }
    }

    async fn post(&self, body: bytes::Bytes) -> Result<(), String> {
        let url = url::Url::parse(&format!("{}/v1/traces", self.config.endpoint))
            .map_err(|e| e.to_string())?;
        let tls = url.scheme() == "https";
        let host = url.host_str().ok_or("no host")?.trim_matches(['[', ']']);
        let port = url.port_or_known_default().unwrap_or(80);
        let addr = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| e.to_string())?
            .next()
            .ok_or("the collector's host has no address")?;
        let mut peer = HttpPeer::new(addr, tls, host.to_string());
        peer.options.connection_timeout = Some(Duration::from_secs(5));
        peer.options.read_timeout = Some(Duration::from_secs(10));
        let mut req = RequestHeader::build("POST", url.path().as_bytes(), Some(4))
            .map_err(|e| e.to_string())?;
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let fixed = [
            ("host".to_string(), authority),
            ("content-type".to_string(), "application/json".to_string()),
            ("content-length".to_string(), body.len().to_string()),
        ];
        for (k, v) in fixed.into_iter().chain(self.config.headers.iter().cloned()) {
            req.insert_header(k, v).map_err(|e| e.to_string())?;
        }
        let (mut http, _) = self
            .connector
            .get_http_session(&peer)
            .await
            .map_err(|e| e.to_string())?;
        http.write_request_header(Box::new(req))
            .await
            .map_err(|e| e.to_string())?;
        http.write_request_body(body, true)
            .await
            .map_err(|e| e.to_string())?;
        http.finish_request_body()
            .await
            .map_err(|e| e.to_string())?;
        http.read_response_header()
            .await
            .map_err(|e| e.to_string())?;
        let status = http.response_header().map_or(0, |h| h.status.as_u16());
        while let Ok(Some(_)) = http.read_response_body().await {}
        if http.response_done() {
            self.connector
                .release_http_session(http, &peer, Some(Duration::from_secs(60)))
                .await;
        }
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(format!("the collector answered {status}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trip() {
        let t = TraceState::new(None);
        let tp = t.traceparent();
        let (trace, parent) = parse_traceparent(&tp).unwrap();
        assert_eq!(trace, t.trace_id);
        assert_eq!(parent, t.root_id);
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-0000000000000001-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
    }

    #[test]
    fn encodes_root_and_children_with_parents() {
        let mut t = TraceState::new(Some(([7; 16], [9; 8])));
        let s = Instant::now();
        t.child("store.reserve", s, s + Duration::from_millis(1))
            .str("gateway.channel", "c");
        t.root("POST", "chat_completions", s, s + Duration::from_millis(5))
            .int("http.response.status_code", 200);
        let mut out = Vec::new();
        t.encode(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["traceId"], hex::encode([7u8; 16]));
        assert_eq!(out[0]["parentSpanId"], hex::encode([9u8; 8]));
        assert_eq!(out[1]["parentSpanId"], out[0]["spanId"]);
        assert_eq!(out[0]["attributes"][0]["value"]["intValue"], "200");
        let start: u128 = out[0]["startTimeUnixNano"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let end: u128 = out[0]["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert_eq!(end - start, 5_000_000);
    }
}
