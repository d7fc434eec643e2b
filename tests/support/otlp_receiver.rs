//! A small OpenTelemetry collector for tests: OTLP/HTTP with the JSON encoding
//! (`POST /v1/traces`), on an ephemeral port. It keeps every span it is sent, each with
//! its resource's `service.name`, and the headers of the last export.
#![allow(dead_code)]

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct OtlpReceiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Value>>>,
    headers: Arc<Mutex<Vec<(String, String)>>>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let headers = Arc::new(Mutex::new(Vec::new()));
        let (s, h) = (spans.clone(), headers.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (s, h) = (s.clone(), h.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (s, h) = (s.clone(), h.clone());
                        async move { Ok::<_, hyper::Error>(receive(req, &s, &h).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        OtlpReceiver {
            addr,
            spans,
            headers,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .lock()
            .unwrap()
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }

    /// Waits (polling, bounded) until some span satisfies `f`; returns every span then.
    pub async fn wait_for(&self, f: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let all = self.spans();
            if all.iter().any(&f) {
                return all;
            }
            assert!(Instant::now() < deadline, "no such span arrived: {all:#?}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

async fn receive(
    req: Request<hyper::body::Incoming>,
    spans: &Mutex<Vec<Value>>,
    headers: &Mutex<Vec<(String, String)>>,
) -> Response<Full<Bytes>> {
    let ok = req.method() == hyper::Method::POST
        && req.uri().path() == "/v1/traces"
        && req
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    *headers.lock().unwrap() = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let parsed: Option<Value> = body.ok().and_then(|b| serde_json::from_slice(&b).ok());
    let (Some(v), true) = (parsed, ok) else {
        return Response::builder()
            .status(400)
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
    };
    let mut out = spans.lock().unwrap();
    for rs in v["resourceSpans"].as_array().into_iter().flatten() {
        let service = rs["resource"]["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["key"] == "service.name")
            .map(|a| a["value"]["stringValue"].clone())
            .unwrap_or(Value::Null);
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for span in ss["spans"].as_array().into_iter().flatten() {
                let mut span = span.clone();
                span["service.name"] = service.clone();
                out.push(span);
            }
        }
    }
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

/// The value of a span's attribute, whatever its type, as JSON.
pub fn attr(span: &Value, key: &str) -> Value {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["key"] == key)
        .map(|a| {
            let v = &a["value"];
            v.get("stringValue")
                .or(v.get("intValue"))
                .or(v.get("doubleValue"))
                .or(v.get("boolValue"))
                .cloned()
                .unwrap_or(Value::Null)
        })
        .unwrap_or(Value::Null)
}
