//! Assembling the Pingora services: the client listener (the proxy behind the edge), the admin listener,
//! the video task poller, the graceful stop, the configuration reload (`SIGHUP`) and the
//! trace exporter (background services). [`serve`] runs them under Pingora's `Server`
//! (signals, graceful shutdown, graceful upgrade); [`spawn`] runs them on the current
//! Tokio runtime over listeners the caller already bound, which is how tests and
//! benchmarks run real gateways on ephemeral ports.
//!
//! Graceful upgrade (Pingora's): a new process started with `--upgrade` waits on
//! `upgrade_sock`; `SIGQUIT` to the running one hands it the listening sockets, and the
//! old process stops accepting, lets its requests finish (up to the grace period), and
//! leaves as soon as none is left. On the embedded store the new process starts serving
//! once the old one has left (one server per directory: reservations in flight live in
//! that server's memory); until then the kernel queues new connections, none is refused.

use crate::api::admin::AdminApp;
use crate::config::Config;
use crate::edge::{Edge, EdgeLimits};
use crate::gateway::{open_store_waiting, Gateway, Live};
use crate::observe::Observer;
use crate::proxy::GatewayProxy;
use crate::store::Store;
use crate::tls::front::{Front, Side};
use crate::video::poller::Poller;
use parking_lot::Mutex;
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::{Fds, Server, ShutdownWatch};
use pingora::services::background::{background_service, BackgroundService};
use pingora::services::listening::Service as Listening;
use pingora::services::Service as _;
use std::net::TcpListener;
use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a process started with `--upgrade` waits for the old one's sockets (s).
const UPGRADE_HANDOVER_SECS: usize = 60;
/// Pingora lets the old process accept for this long after it handed its sockets over.
const PINGORA_CLOSE_TIMEOUT_SECS: u64 = 5;

fn server_conf(config: &Config) -> ServerConf {
    let threads = config
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    ServerConf {
        threads,
        work_stealing: true,
        // Requests in flight run through the grace period; then `Cut` ends the streams
        // still running (their error event and settlement take well under a second),
        // and the runtimes get a few seconds more to let them write it.
        grace_period_seconds: Some(config.limits.shutdown_grace.as_secs() + 1),
        graceful_shutdown_timeout_seconds: Some(5),
        upgrade_sock: config.upgrade_sock.to_string_lossy().into_owned(),
        upgrade_sock_connect_accept_max_retries: Some(UPGRADE_HANDOVER_SECS),
        ..ServerConf::default()
    }
}

/// The client listener: the proxy behind the edge (header deadline, idle bound,
/// connection cap, framing refusals in the envelope), with TLS, HTTP/2 and the PROXY
/// protocol when configured.
fn proxy_service(
    live: &Arc<Live>,
    conf: &Arc<ServerConf>,
) -> Listening<Edge<pingora::proxy::HttpProxy<GatewayProxy>>> {
    let gw = live.current();
    let limits = EdgeLimits::from(&gw.config.limits);
    let mut proxy = pingora::proxy::http_proxy(conf, GatewayProxy::new(live.clone()));
    proxy.h2_options = Some(crate::edge::h2_options(&limits));
    proxy.server_options = Some(crate::edge::server_options(&limits));
    let edge = Edge::new(proxy, limits).with_front(Front::new(live.clone(), Side::Client));
    let mut svc = Listening::new("gateway".into(), edge);
    svc.add_tcp(&gw.config.listen.to_string());
    svc
}

/// The admin listener, behind the same edge as the client listener: it faces operators'
/// networks, and a slow or idle client there must not hold a connection forever either.
fn admin_service(live: &Arc<Live>) -> Option<Listening<Edge<AdminApp>>> {
    let gw = live.current();
    let admin = gw.config.admin.clone()?;
    let edge = Edge::new(
        AdminApp::new(live.clone()),
        EdgeLimits::from(&gw.config.limits),
    )
    .with_front(Front::new(live.clone(), Side::Admin));
    let mut svc = Listening::new("admin".into(), edge);
    svc.add_tcp(&admin.listen.to_string());
    Some(svc)
}

/// Runs the gateway until a signal stops it, then hands back what the store holds for
/// this instance (Redis quota leases). Never returns. `upgrade`: take the listening
/// sockets over from a running gateway (see the module's comment).
pub fn serve(config: Config, upgrade: bool) -> Result<(), String> {
    // The store's connections live on a runtime of their own, alive for the whole
    // process; Pingora's service runtimes call into it.
    let store_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("store")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the store runtime: {e}"))?;
    let conf = server_conf(&config);
    let opt = Opt {
        upgrade,
        ..Opt::default()
    };
    let mut server = Server::new_with_opt_and_conf(Some(opt), conf);
    // With `--upgrade`, this waits for the running process's sockets (its `SIGQUIT`).
    server.bootstrap();
    let wait = if upgrade {
        // The old process accepts a little longer, then has the grace period at most.
        Duration::from_secs(PINGORA_CLOSE_TIMEOUT_SECS + 10) + config.limits.shutdown_grace
    } else {
        Duration::ZERO
    };
    let store: Arc<dyn Store> = store_rt
        .block_on(open_store_waiting(&config.store, true, wait))
        .map_err(|e| format!("cannot open the store: {e}"))?;
    let live = Live::new(Arc::new(config), store);
    let gw = live.current();
    tracing::info!(listen = %gw.config.listen, channels = gw.config.channels.len(),
        upgrade, pid = std::process::id(), "model-gateway starting");
    server.add_service(proxy_service(&live, &server.configuration));
    let store = gw.store.clone();
    server.add_service(background_service("video tasks", Poller::new(gw.clone())));
    server.add_service(background_service(
        "graceful stop",
        Stopper {
            live: live.clone(),
            leave_when_idle: true,
        },
    ));
    server.add_service(background_service("config reload", Reloader(live.clone())));
    if gw.observe.tracer.is_some() {
        server.add_service(background_service(
            "trace export",
            Traces(gw.observe.clone()),
        ));
    }
    if let Some(admin) = admin_service(&live) {
        server.add_service(admin);
    }
    // The store runtime lives as long as the server: its connections serve every request.
    server.run(pingora::server::RunArgs::default());
    // Every request has settled by now (the grace period and the cut are over).
    if let Err(e) = store_rt.block_on(store.close()) {
        tracing::warn!(error = %e, "the store did not hand everything back");
    }
    std::process::exit(0)
}

/// Cuts the answers still running once a graceful stop's grace period is over.
struct Stopper {
    live: Arc<Live>,
    /// Leave the process as soon as no request is in flight (the server: a stop or an
    /// upgrade is not held up by the rest of the grace period); never in tests, where
    /// gateways share the process.
    leave_when_idle: bool,
}

#[async_trait::async_trait]
impl BackgroundService for Stopper {
    async fn start(&self, shutdown: ShutdownWatch) {
        let mut s = shutdown.clone();
        if s.wait_for(|v| *v).await.is_err() {
            return;
        }
        let gw = self.live.current();
        gw.observe.set_stopping();
        tokio::spawn(close_when_idle(
            gw.observe.clone(),
            gw.store.clone(),
            self.leave_when_idle,
        ));
        gw.cut
            .after_grace(shutdown, gw.config.limits.shutdown_grace)
            .await;
    }
}

/// Once no request is in flight (every request settled its charge before it ended), the
/// store hands back what it holds for this instance (Redis quota leases and the settles
/// batched for them; the embedded store's journaled settles, and its directory, which a
/// new process of an upgrade then takes), so nothing is lost; then the process ends when
/// `leave`.
async fn close_when_idle(observe: Arc<Observer>, store: Arc<dyn Store>, leave: bool) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        if observe.in_flight() == 0 {
            tracing::info!("stopping: no request in flight");
            if let Err(e) = store.close().await {
                tracing::warn!(error = %e, "the store did not hand everything back");
            }
            if leave {
                std::process::exit(0);
            }
            return;
        }
    }
}

/// `SIGHUP` reloads the configuration file.
struct Reloader(Arc<Live>);

#[async_trait::async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGHUP; reload with POST /admin/reload");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading the configuration");
                    // The outcome is logged and counted by `reload` itself.
                    let _ = self.0.reload();
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Sends finished traces to the collector.
struct Traces(Arc<Observer>);

#[async_trait::async_trait]
impl BackgroundService for Traces {
    async fn start(&self, shutdown: ShutdownWatch) {
        if let Some(exporter) = self.0.tracer.as_ref().and_then(|t| t.exporter()) {
            exporter.run(shutdown).await;
        }
    }
}

/// A gateway running inside the current process.
pub struct Running {
    /// The configuration it started with (see `live` for the running one).
    pub gateway: Arc<Gateway>,
    pub live: Arc<Live>,
    shutdown: watch::Sender<bool>,
}

impl Running {
    /// Stops accepting connections; requests in flight get the grace period
    /// (`limits.shutdown_grace_secs`), then the streams still running are cut.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts a gateway on the current Tokio runtime, serving on listeners already bound
/// (port 0 gives an ephemeral port with no race). `config.listen` and `config.admin` are
/// replaced by the listeners' addresses.
pub fn spawn(
    mut config: Config,
    store: Arc<dyn Store>,
    listener: TcpListener,
    admin: Option<TcpListener>,
) -> std::io::Result<Running> {
    let mut fds = Fds::new();
    // Pingora adopts an inherited fd as it is; a blocking one would stall a worker in accept().
    listener.set_nonblocking(true)?;
    config.listen = listener.local_addr()?;
    fds.add(config.listen.to_string(), listener.into_raw_fd());
    if let (Some(a), Some(l)) = (config.admin.as_mut(), admin) {
        l.set_nonblocking(true)?;
        a.listen = l.local_addr()?;
        fds.add(a.listen.to_string(), l.into_raw_fd());
    }
    let conf = Arc::new(server_conf(&config));
    let live = Live::new(Arc::new(config), store);
    let gw = live.current();
    let fds = Arc::new(Mutex::new(fds));
    let (tx, rx) = watch::channel(false);
    let mut proxy = proxy_service(&live, &conf);
    let (f, r) = (fds.clone(), rx.clone());
    tokio::spawn(async move { proxy.start_service(Some(f), r, 1).await });
    let poller = Poller::new(gw.clone());
    let r = rx.clone();
    tokio::spawn(async move { poller.start(r).await });
    let stopper = Stopper {
        live: live.clone(),
        leave_when_idle: false,
    };
    let r = rx.clone();
    tokio::spawn(async move { stopper.start(r).await });
    if gw.observe.tracer.is_some() {
        let traces = Traces(gw.observe.clone());
        let r = rx.clone();
        tokio::spawn(async move { traces.start(r).await });
    }
    if let Some(mut admin) = admin_service(&live) {
        tokio::spawn(async move { admin.start_service(Some(fds), rx, 1).await });
    }
    Ok(Running {
        gateway: gw,
        live,
        shutdown: tx,
    })
}
