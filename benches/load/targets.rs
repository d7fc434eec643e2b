//! What the load generator aims at, each with a mock upstream of its own (so no
//! target's idle or TIME_WAIT connections touch another's):
//! - `direct`: the mock upstream itself (what the client and the upstream cost alone);
//! - `passthrough`: a bare Pingora `ProxyHttp` whose only phase is `upstream_peer`, the
//!   least any Pingora gateway can cost (the baseline of every budget line);
//! - `gateway (embedded)`, `gateway (redis)` and `gateway (redis cluster)`: the real
//!   gateway from `model_gateway::server::spawn`, with a key that has a quota and a model
//!   whitelist, so authentication, the whitelist, reserve/settle and the usage record all
//!   run.
//!
//! The passthrough and the gateway also serve HTTPS ([`TlsFiles`]: one certificate, TLS
//! 1.2 and 1.3, ALPN `http/1.1`, the same on both) for the HTTPS scenario (`tls.rs`).

use super::upstream::{Upstream, UpstreamConfig};
use async_trait::async_trait;
use model_gateway::api::keys::{create, KeyInput};
use model_gateway::config::Config;
use model_gateway::gateway::open_store;
use model_gateway::server::{spawn, Running};
use parking_lot::Mutex;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::ALPN;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use pingora::server::Fds;
use pingora::services::Service as _;
use pingora::upstreams::peer::HttpPeer;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// The models the chat channel serves.
pub const MODELS: &[&str] = &[
    "bench-chat",
    "bench-sse",
    "bench-fast",
    "bench-idle",
    "bench-big",
    "bench-long",
];
/// The models the messages-protocol channel serves (the same mock upstream, which
/// answers them in that protocol).
pub const MESSAGES_MODELS: &[&str] = &["bench-anthropic"];

/// Every model the bench key may use (its whitelist).
fn all_models() -> impl Iterator<Item = &'static str> {
    MODELS.iter().chain(MESSAGES_MODELS).copied()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Direct,
    Passthrough,
    Gateway,
}

/// The Redis a gateway target uses, if any: its work is charged to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    None,
    Redis,
    Cluster,
}

pub struct Target {
    pub name: &'static str,
    pub kind: Kind,
    pub backend: Backend,
    pub addr: SocketAddr,
    /// `Authorization` value, for the gateway targets.
    pub auth: Option<String>,
    pub upstream: Upstream,
    /// Kept alive for as long as the target serves.
    _keep: Vec<Box<dyn std::any::Any + Send>>,
}

impl Target {
    /// The extra headers a request to this target carries.
    pub fn headers(&self) -> Vec<(&str, &str)> {
        match &self.auth {
            Some(a) => vec![("Authorization", a.as_str())],
            None => vec![],
        }
    }

    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

pub fn direct(upstream: Upstream) -> Target {
    Target {
        name: "direct (no proxy)",
        kind: Kind::Direct,
        backend: Backend::None,
        addr: upstream.addr,
        auth: None,
        upstream,
        _keep: vec![],
    }
}

struct Passthrough {
    peer: HttpPeer,
}

#[async_trait]
impl ProxyHttp for Passthrough {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut (),
    ) -> pingora::Result<Box<HttpPeer>> {
        Ok(Box::new(self.peer.clone()))
    }
}

/// The certificate (PEM, leaf only) and key a target serves HTTPS with.
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A bare Pingora proxy to `upstream`, on the current runtime (as the gateway's `spawn`).
pub fn passthrough(upstream: Upstream) -> std::io::Result<Target> {
    passthrough_with(upstream, None)
}

/// The bare Pingora proxy, over TLS when `tls` is given: Pingora's own TLS listener with
/// its Mozilla-intermediate settings (TLS 1.2 and 1.3), ALPN `http/1.1` only, as the
/// gateway's `tls` with `http2: false`.
pub fn passthrough_with(upstream: Upstream, tls: Option<&TlsFiles>) -> std::io::Result<Target> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let mut fds = Fds::new();
    fds.add(addr.to_string(), listener.into_raw_fd());
    let conf = Arc::new(ServerConf::default());
    let proxy = Passthrough {
        peer: HttpPeer::new(upstream.addr, false, String::new()),
    };
    let mut svc = pingora::proxy::http_proxy_service_with_name(&conf, proxy, "passthrough");
    match tls {
        None => svc.add_tcp(&addr.to_string()),
        Some(f) => {
            let path = |p: &Path| p.to_string_lossy().into_owned();
            let mut settings = TlsSettings::intermediate(&path(&f.cert), &path(&f.key))
                .map_err(std::io::Error::other)?;
            settings.set_alpn(ALPN::H1);
            svc.add_tls_with_settings(&addr.to_string(), None, settings);
        }
    }
    let (tx, rx) = watch::channel(false);
    let fds = Arc::new(Mutex::new(fds));
    tokio::spawn(async move { svc.start_service(Some(fds), rx, 1).await });
    Ok(Target {
        name: "passthrough (bare Pingora)",
        kind: Kind::Passthrough,
        backend: Backend::None,
        addr,
        auth: None,
        upstream,
        _keep: vec![Box::new(tx)],
    })
}

pub enum Store {
    Embedded,
    Redis(String),
    Cluster(Vec<String>),
}

fn config_text(store: &Store, dir: &Path, upstream: SocketAddr, tls: Option<&TlsFiles>) -> String {
    let store = match store {
        Store::Embedded => format!("{{ embedded: {{ path: \"{}\" }} }}", dir.display()),
        Store::Redis(url) => format!("{{ redis: {{ url: \"{url}\" }} }}"),
        Store::Cluster(urls) => format!(
            "{{ redis: {{ cluster: [{}] }} }}",
            urls.iter()
                .map(|u| format!("\"{u}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let prices: String = all_models()
        .map(|m| format!("  {m}: {{ input: 0.15, output: 0.6, cached_input: 0.075 }}\n"))
        .collect();
    // HTTP/1.1 only, as the TLS passthrough (README, "TLS").
    let tls = tls.map_or(String::new(), |f| {
        format!(
            "tls:\n  certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n  http2: false\n",
            f.cert.display(),
            f.key.display()
        )
    });
    format!(
        "listen: 127.0.0.1:0\n{tls}store: {store}\nthreads: 2\nchannels:\n  - name: bench-openai\n    protocol: openai\n    base_url: http://{upstream}\n    api_key: upstream-secret\n    models: [{}]\n  - name: bench-anthropic\n    protocol: anthropic\n    base_url: http://{upstream}\n    api_key: upstream-secret\n    models: [{}]\nprices:\n{prices}",
        MODELS.join(", "),
        MESSAGES_MODELS.join(", ")
    )
}

/// The real gateway on `store`, with one key limited to [`MODELS`] and a quota far
/// above what the run spends (so no request is refused, yet every one is reserved).
pub async fn gateway(
    name: &'static str,
    upstream: Upstream,
    store: Store,
) -> Result<Target, String> {
    gateway_with(name, upstream, store, None).await
}

/// The real gateway, over TLS when `tls` is given (its configuration's `tls` section:
/// the edge negotiates TLS on the TCP listener `spawn` is handed).
pub async fn gateway_with(
    name: &'static str,
    upstream: Upstream,
    store: Store,
    tls: Option<&TlsFiles>,
) -> Result<Target, String> {
    let backend = match &store {
        Store::Embedded => Backend::None,
        Store::Redis(_) => Backend::Redis,
        Store::Cluster(_) => Backend::Cluster,
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let text = config_text(&store, dir.path(), upstream.addr, tls);
    let config = Config::parse(&text, dir.path()).map_err(|e| format!("{e:?}"))?;
    let store = open_store(&config.store, true)
        .await
        .map_err(|e| e.to_string())?;
    let input = KeyInput {
        name: Some("load-bench".into()),
        models: Some(all_models().map(str::to_string).collect()),
        quota_usd: Some(Some(1_000_000.0)),
        ..KeyInput::default()
    };
    let (_, view) = create(&*store, &input)
        .await
        .map_err(|e| format!("key creation failed: {e:?}"))?;
    let secret = view["key"].as_str().unwrap_or_default().to_string();
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let running: Running = spawn(config, store, listener, None).map_err(|e| e.to_string())?;
    Ok(Target {
        name,
        kind: Kind::Gateway,
        backend,
        addr,
        auth: Some(format!("Bearer {secret}")),
        upstream,
        _keep: vec![Box::new(running), Box::new(dir)],
    })
}

pub async fn start_upstream(cfg: &UpstreamConfig) -> std::io::Result<Upstream> {
    Upstream::start(cfg.clone()).await
}

/// `LOAD_TARGETS` and `LOAD_SCENARIOS` (comma-separated substrings, e.g.
/// `LOAD_TARGETS=embedded LOAD_SCENARIOS=closed`) narrow a run, for profiling one
/// target under one load. Unset: everything.
pub struct Filter {
    targets: Option<Vec<String>>,
    scenarios: Option<Vec<String>>,
}

impl Filter {
    pub fn from_env() -> Filter {
        let list = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.split(',').map(|s| s.trim().to_lowercase()).collect())
        };
        Filter {
            targets: list("LOAD_TARGETS"),
            scenarios: list("LOAD_SCENARIOS"),
        }
    }

    pub fn target(&self, name: &str) -> bool {
        self.targets
            .as_ref()
            .is_none_or(|v| v.iter().any(|s| name.to_lowercase().contains(s)))
    }

    pub fn scenario(&self, name: &str) -> bool {
        self.scenarios
            .as_ref()
            .is_none_or(|v| v.iter().any(|s| name.contains(s.as_str())))
    }
}
