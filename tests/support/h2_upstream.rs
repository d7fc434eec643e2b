//! An OpenAI-style upstream over TLS, served by hyper: HTTP/2 or HTTP/1.1 as ALPN chose
//! (it offers `h2` and `http/1.1`, or `http/1.1` only). It answers chat completions
//! (OpenAI's API reference, https://platform.openai.com/docs/api-reference/chat) whole
//! and streamed (SSE `data:` events ending in `[DONE]`), records each request's HTTP
//! version and which TCP connection carried it, and can hold streams open on a gate so
//! a test has many in flight at once.
#![allow(dead_code)]

use crate::mock_upstream::openai;
use crate::tls_ca::{Issued, TestCa};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};

/// Which protocols the upstream offers by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    H2AndHttp1,
    Http1Only,
}

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub version: Version,
    /// The TCP connection that carried it, numbered from 0 in accept order.
    pub connection: usize,
    pub stream: bool,
    pub body: Value,
}

/// The request member (`user`, which the API passes through as the end user's id) that
/// asks this upstream to cut its streamed answer after the gate: an HTTP/2 stream is
/// reset (`RST_STREAM`), an HTTP/1.1 connection closed.
pub const CUT_USER: &str = "cut-me";

/// What the upstream's streamed answer says, in order.
pub const PIECES: [&str; 3] = ["Hel", "lo", "!"];

struct State {
    seen: Mutex<Vec<Seen>>,
    arrived: Notify,
    /// `true`: streams go on past their first events.
    gate: watch::Sender<bool>,
}

pub struct H2Upstream {
    pub addr: SocketAddr,
    /// The CA that signed the upstream's certificate (for the channel's `ca_file`).
    pub ca_file: std::path::PathBuf,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl H2Upstream {
    /// Starts on an ephemeral port with a certificate for `127.0.0.1` from a fresh test
    /// CA. `held`: streamed answers stop after their first two events until
    /// [`H2Upstream::release`].
    pub async fn start(offer: Offer, held: bool) -> H2Upstream {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("upstream-ca");
        let ca_file = ca.write(dir.path(), "upstream-ca.pem");
        let issued = ca.server(dir.path(), "upstream", &["127.0.0.1"], 7);
        let acceptor = acceptor(&issued, offer);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            seen: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            gate: watch::channel(!held).0,
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            for connection in 0.. {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, st) = (acceptor.clone(), st.clone());
                tokio::spawn(async move {
                    // A client that fails the handshake (one that does not trust the CA)
                    // just goes away.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(answer(req, connection, st).await)
                        }
                    });
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    if offer == Offer::Http1Only {
                        builder = builder.http1_only();
                    }
                    let _ = builder.serve_connection(TokioIo::new(tls), svc).await;
                });
            }
        });
        H2Upstream {
            addr,
            ca_file,
            state,
            task,
            _dir: dir,
        }
    }

    pub fn base_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The distinct TCP connections that carried requests.
    pub fn connections(&self) -> usize {
        let mut ids: Vec<usize> = self.seen().iter().map(|s| s.connection).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    /// Waits until `n` requests have arrived (the test fails after 10 s).
    pub async fn wait_for_requests(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let arrived = self.state.arrived.notified();
                tokio::pin!(arrived);
                arrived.as_mut().enable();
                if self.state.seen.lock().unwrap().len() >= n {
                    return;
                }
                arrived.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} requests reached the upstream"));
    }

    /// Lets every held stream (and every later one) finish.
    pub fn release(&self) {
        self.state.gate.send_replace(true);
    }
}

impl Drop for H2Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn acceptor(issued: &Issued, offer: Offer) -> tokio_rustls::TlsAcceptor {
    let chain = vec![CertificateDer::from_pem_file(&issued.cert).unwrap()];
    let key = PrivateKeyDer::from_pem_file(&issued.key).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = match offer {
        Offer::H2AndHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Offer::Http1Only => vec![b"http/1.1".to_vec()],
    };
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

type Body = BoxBody<Bytes, std::io::Error>;

async fn answer(
    req: Request<hyper::body::Incoming>,
    connection: usize,
    st: Arc<State>,
) -> Response<Body> {
    let version = req.version();
    let path_ok = req.method() == hyper::Method::POST && req.uri().path() == "/v1/chat/completions";
    let bytes = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !path_ok || body.is_null() {
        return json(
            404,
            serde_json::json!({"error": {"message": "not found", "type": "invalid_request_error"}}),
        );
    }
    let stream = body["stream"].as_bool().unwrap_or(false);
    let model = body["model"].as_str().unwrap_or("").to_string();
    let cut = body["user"] == CUT_USER;
    st.seen.lock().unwrap().push(Seen {
        version,
        connection,
        stream,
        body,
    });
    st.arrived.notify_waiters();
    if !stream {
        return json(
            200,
            openai::completion(&model, "Hi there", openai::usage(10, 20, 4)),
        );
    }
    let events = openai::stream(&model, &PIECES, Some(openai::usage(7, 3, 0)));
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    let mut gate = st.gate.subscribe();
    tokio::spawn(async move {
        let frame = |e: &String| Ok(Frame::data(Bytes::from(format!("data: {e}\n\n"))));
        // The role chunk and the first piece, then the gate.
        for e in &events[..2] {
            if tx.send(frame(e)).await.is_err() {
                return;
            }
        }
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        if cut {
            let _ = tx
                .send(Err(std::io::Error::other("the upstream cuts this stream")))
                .await;
            return;
        }
        for e in &events[2..] {
            if tx.send(frame(e)).await.is_err() {
                return;
            }
        }
    });
    let body = StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(body))
        .unwrap()
}

fn json(status: u16, v: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(serde_json::to_vec(&v).unwrap()))
                .map_err(|never| match never {})
                .boxed(),
        )
        .unwrap()
}

/// Writes `text` to `dir/<file>` (a CA file that is not one).
pub fn write_file(dir: &Path, file: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(file);
    std::fs::write(&p, text).unwrap();
    p
}
