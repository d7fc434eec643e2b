//! What the load generator aims at, each with a mock upstream of its own (so no
//! target's idle or TIME_WAIT connections touch another's):
//! - `direct`: the mock upstream itself (what the client and the upstream cost alone);
//! - `passthrough`: a bare Pingora `ProxyHttp` whose only phase is `upstream_peer`, the
//!   least any Pingora gateway can cost (the baseline of every budget line);
//! - `gateway (embedded)` and `gateway (redis)`: the real gateway from
//!   `model_gateway::server::spawn`, with a key that has a quota and a model whitelist,
//!   so authentication, the whitelist, reserve/settle and the usage record all run.

use super::upstream::{Upstream, UpstreamConfig};
use async_trait::async_trait;
use model_gateway::api::keys::{create, KeyInput};
use model_gateway::config::Config;
use model_gateway::gateway::open_store;
use model_gateway::server::{spawn, Running};
use parking_lot::Mutex;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use pingora::server::Fds;
use pingora::services::Service as _;
use pingora::upstreams::peer::HttpPeer;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The models the bench key may use (its whitelist) and the channel serves.
pub const MODELS: &[&str] = &["bench-chat", "bench-sse", "bench-idle", "bench-big"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Direct,
    Passthrough,
    Gateway,
}

pub struct Target {
    pub name: &'static str,
    pub kind: Kind,
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

/// A bare Pingora proxy to `upstream`, on the current runtime (as the gateway's `spawn`).
pub fn passthrough(upstream: Upstream) -> std::io::Result<Target> {
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
    svc.add_tcp(&addr.to_string());
    let (tx, rx) = watch::channel(false);
    let fds = Arc::new(Mutex::new(fds));
    tokio::spawn(async move { svc.start_service(Some(fds), rx, 1).await });
    Ok(Target {
        name: "passthrough (bare Pingora)",
        kind: Kind::Passthrough,
        addr,
        auth: None,
        upstream,
        _keep: vec![Box::new(tx)],
    })
}

pub enum Store {
    Embedded,
    Redis(String),
}

fn config_text(store: &Store, dir: &Path, upstream: SocketAddr) -> String {
    let store = match store {
        Store::Embedded => format!("{{ embedded: {{ path: \"{}\" }} }}", dir.display()),
        Store::Redis(url) => format!("{{ redis: {{ url: \"{url}\" }} }}"),
    };
    let prices: String = MODELS
        .iter()
        .map(|m| format!("  {m}: {{ input: 0.15, output: 0.6, cached_input: 0.075 }}\n"))
        .collect();
    format!(
        "listen: 127.0.0.1:0\nstore: {store}\nthreads: 2\nchannels:\n  - name: bench-openai\n    protocol: openai\n    base_url: http://{upstream}\n    api_key: upstream-secret\n    models: [{}]\nprices:\n{prices}",
        MODELS.join(", ")
    )
}

/// The real gateway on `store`, with one key limited to [`MODELS`] and a quota far
/// above what the run spends (so no request is refused, yet every one is reserved).
pub async fn gateway(
    name: &'static str,
    upstream: Upstream,
    store: Store,
) -> Result<Target, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let text = config_text(&store, dir.path(), upstream.addr);
    let config = Config::parse(&text, dir.path()).map_err(|e| format!("{e:?}"))?;
    let store = open_store(&config.store, false)
        .await
        .map_err(|e| e.to_string())?;
    let input = KeyInput {
        name: Some("load-bench".into()),
        models: Some(MODELS.iter().map(|m| m.to_string()).collect()),
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
        addr,
        auth: Some(format!("Bearer {secret}")),
        upstream,
        _keep: vec![Box::new(running), Box::new(dir)],
    })
}

pub async fn start_upstream(cfg: &UpstreamConfig) -> std::io::Result<Upstream> {
    Upstream::start(cfg.clone()).await
}

/// A private `redis-server` on a unix socket in its own directory, never persisting,
/// killed on drop.
pub struct RedisServer {
    child: Child,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// `None` when `redis-server` is not installed or does not come up.
    pub fn start() -> Option<RedisServer> {
        let dir = tempfile::tempdir().ok()?;
        let child = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(dir.path().join("redis.sock"))
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let s = RedisServer { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if s.ping() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    fn ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::os::unix::net::UnixStream::connect(self.socket()) else {
            return false;
        };
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
