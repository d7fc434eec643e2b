//! Assembling the Pingora services: the client listener (the proxy), the admin
//! listener and the video task poller (a background service). [`serve`] runs them under Pingora's `Server` (signals, graceful shutdown);
//! [`spawn`] runs them on the current Tokio runtime over listeners the caller already
//! bound, which is how tests and benchmarks run real gateways on ephemeral ports.

use crate::api::admin::AdminApp;
use crate::config::Config;
use crate::gateway::{open_store, Gateway};
use crate::proxy::GatewayProxy;
use crate::store::Store;
use crate::video::poller::Poller;
use parking_lot::Mutex;
use pingora::server::configuration::ServerConf;
use pingora::server::{Fds, Server};
use pingora::services::background::{background_service, BackgroundService};
use pingora::services::listening::Service as Listening;
use pingora::services::Service as _;
use std::net::TcpListener;
use std::os::fd::IntoRawFd;
use std::sync::Arc;
use tokio::sync::watch;

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
        ..ServerConf::default()
    }
}

fn proxy_service(
    gw: Arc<Gateway>,
    conf: &Arc<ServerConf>,
) -> Listening<pingora::proxy::HttpProxy<GatewayProxy>> {
    let mut svc = pingora::proxy::http_proxy_service_with_name(
        conf,
        GatewayProxy::new(gw.clone()),
        "gateway",
    );
    svc.add_tcp(&gw.config.listen.to_string());
    svc
}

fn admin_service(gw: Arc<Gateway>) -> Option<Listening<AdminApp>> {
    let admin = gw.config.admin.clone()?;
    let mut svc = Listening::new("admin".into(), AdminApp::new(gw, admin.token));
    svc.add_tcp(&admin.listen.to_string());
    Some(svc)
}

/// Runs the gateway until a signal stops it, then hands back what the store holds for
/// this instance (Redis quota leases). Never returns.
pub fn serve(config: Config) -> Result<(), String> {
    // The store's connections live on a runtime of their own, alive for the whole
    // process; Pingora's service runtimes call into it.
    let store_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("store")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the store runtime: {e}"))?;
    let store: Arc<dyn Store> = store_rt
        .block_on(open_store(&config.store, true))
        .map_err(|e| format!("cannot open the store: {e}"))?;
    let conf = server_conf(&config);
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let gw = Arc::new(Gateway::new(Arc::new(config), store));
    tracing::info!(listen = %gw.config.listen, channels = gw.config.channels.len(), "model-gateway starting");
    let store = gw.store.clone();
    server.add_service(proxy_service(gw.clone(), &server.configuration));
    server.add_service(background_service("video tasks", Poller::new(gw.clone())));
    server.add_service(background_service("graceful stop", Stopper(gw.clone())));
    if let Some(admin) = admin_service(gw) {
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
struct Stopper(Arc<Gateway>);

#[async_trait::async_trait]
impl BackgroundService for Stopper {
    async fn start(&self, shutdown: pingora::server::ShutdownWatch) {
        let grace = self.0.config.limits.shutdown_grace;
        self.0.cut.after_grace(shutdown, grace).await;
    }
}

/// A gateway running inside the current process.
pub struct Running {
    pub gateway: Arc<Gateway>,
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
    let gw = Arc::new(Gateway::new(Arc::new(config), store));
    let fds = Arc::new(Mutex::new(fds));
    let (tx, rx) = watch::channel(false);
    let mut proxy = proxy_service(gw.clone(), &conf);
    let (f, r) = (fds.clone(), rx.clone());
    tokio::spawn(async move { proxy.start_service(Some(f), r, 1).await });
    let poller = Poller::new(gw.clone());
    let r = rx.clone();
    tokio::spawn(async move { poller.start(r).await });
    let stopper = Stopper(gw.clone());
    let r = rx.clone();
    tokio::spawn(async move { stopper.start(r).await });
    if let Some(mut admin) = admin_service(gw.clone()) {
        tokio::spawn(async move { admin.start_service(Some(fds), rx, 1).await });
    }
    Ok(Running {
        gateway: gw,
        shutdown: tx,
    })
}
