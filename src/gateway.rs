//! The shared state of one gateway instance. Nothing lives in globals, so several
//! instances can run in one process (the integration tests do exactly that).
//!
//! A [`Gateway`] is one configuration's view of the instance: the configuration, its
//! channel router, and the parts every configuration shares (store, key cache, upstream
//! pool, metrics). [`Live`] holds the running one and swaps in a new one on a reload
//! (`SIGHUP`, `POST /admin/reload`). A request takes the running `Arc<Gateway>` when it
//! arrives and keeps it to its end, so requests in flight finish on the configuration
//! they started with; the old view is freed when its last request ends.

use crate::auth::KeyCache;
use crate::channels::Router;
use crate::config::{Config, ConfigError, StoreConfig};
use crate::lifecycle::Cut;
use crate::observe::store::Metered;
use crate::observe::Observer;
use crate::store::embedded::EmbeddedStore;
use crate::store::redis::RedisStore;
use crate::store::{Store, StoreError};
use arc_swap::ArcSwap;
use pingora::connectors::http::Connector;
use pingora::connectors::ConnectorOptions;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Idle upstream connections kept for reuse, per instance.
const UPSTREAM_POOL_SIZE: usize = 4096;

pub struct Gateway {
    pub config: Arc<Config>,
    /// The store, timed and counted ([`Metered`]).
    pub store: Arc<dyn Store>,
    pub keys: Arc<KeyCache>,
    pub router: Router,
    pub connector: Arc<Connector>,
    /// Ends the answers still running when a graceful stop's grace period is over.
    pub cut: Arc<Cut>,
    pub observe: Arc<Observer>,
    /// The clock and calendar period budgets are counted on.
    pub calendar: Arc<crate::billing::Calendar>,
    /// 1 for the configuration the process started with, +1 per reload.
    pub generation: u64,
    live: Weak<Live>,
}

impl Gateway {
    /// A gateway on its own (no reloads): what tests and benchmarks build.
    pub fn new(config: Arc<Config>, store: Arc<dyn Store>) -> Gateway {
        let observe = Arc::new(Observer::new(&config));
        let store: Arc<dyn Store> = Arc::new(Metered::new(store, observe.clone()));
        Gateway {
            keys: Arc::new(KeyCache::new(store.clone(), config.key_cache_ttl)),
            router: Router::new(&config.channels),
            connector: Arc::new(Connector::new(Some(ConnectorOptions::new(
                UPSTREAM_POOL_SIZE,
            )))),
            cut: Arc::new(Cut::new()),
            observe,
            calendar: Arc::new(crate::billing::Calendar::new(&config.limits.time_zone)),
            store,
            config,
            generation: 1,
            live: Weak::new(),
        }
    }

    /// The same instance on another configuration: everything but the configuration and
    /// its router is shared.
    fn with_config(&self, config: Arc<Config>, generation: u64) -> Gateway {
        Gateway {
            router: Router::new(&config.channels),
            store: self.store.clone(),
            keys: self.keys.clone(),
            connector: self.connector.clone(),
            cut: self.cut.clone(),
            observe: self.observe.clone(),
            calendar: {
                self.calendar.set_default(&config.limits.time_zone);
                self.calendar.clone()
            },
            config,
            generation,
            live: self.live.clone(),
        }
    }

    /// The running configuration's view (itself when it is the running one, or when this
    /// gateway takes no reloads). Long-lived tasks (the video poller) ask for it each round.
    pub fn latest(self: &Arc<Self>) -> Arc<Gateway> {
        match self.live.upgrade() {
            Some(live) => live.current(),
            None => self.clone(),
        }
    }
}

/// The running configuration of an instance, swappable while requests run.
pub struct Live {
    current: ArcSwap<Gateway>,
    generation: AtomicU64,
    /// One reload at a time (a SIGHUP and an admin request at once).
    reloading: parking_lot::Mutex<()>,
    last_error: parking_lot::Mutex<Option<String>>,
}

/// The listeners' fronts read their TLS and PROXY protocol settings from the running
/// configuration, for each connection.
impl crate::tls::front::Settings for Live {
    fn listening(&self, side: crate::tls::front::Side) -> crate::tls::front::Listening {
        use crate::tls::front::{Listening, Side};
        let gw = self.current();
        let (tls, trusted) = match side {
            Side::Client => (gw.config.tls.as_ref(), gw.config.proxy_protocol.clone()),
            Side::Admin => (
                gw.config.admin.as_ref().and_then(|a| a.tls.as_ref()),
                Arc::from([]),
            ),
        };
        Listening {
            tls: tls.map(|t| t.server.clone()),
            trusted,
        }
    }
}

/// What a successful reload changed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reloaded {
    pub generation: u64,
    pub channels: usize,
    pub prices: usize,
    /// Fields that differ in the file but only take effect at the next start; the running
    /// values are kept for them.
    pub restart_required: Vec<&'static str>,
}

impl Live {
    pub fn new(config: Arc<Config>, store: Arc<dyn Store>) -> Arc<Live> {
        Arc::new_cyclic(|weak| {
            let mut gw = Gateway::new(config, store);
            gw.live = weak.clone();
            Live {
                current: ArcSwap::from_pointee(gw),
                generation: AtomicU64::new(1),
                reloading: parking_lot::Mutex::new(()),
                last_error: parking_lot::Mutex::new(None),
            }
        })
    }

    /// The running configuration's gateway: what a request holds until it ends.
    pub fn current(&self) -> Arc<Gateway> {
        self.current.load_full()
    }

    /// The last reload's error, if the last reload failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// Reads the configuration file again and runs it. A file that fails validation
    /// changes nothing (the error names the field); the running configuration stays.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let _one = self.reloading.lock();
        let running = self.current();
        let Some(path) = running.config.source.clone() else {
            return Err(crate::config::config_err(
                "",
                "this gateway was not started from a file",
            ));
        };
        let result = Config::load(&path).map(|next| self.adopt(&running, next));
        running.observe.reloaded(result.is_ok());
        match &result {
            Ok(r) => {
                *self.last_error.lock() = None;
                tracing::info!(generation = r.generation, channels = r.channels,
                    restart_required = ?r.restart_required, "configuration reloaded");
            }
            Err(e) => {
                *self.last_error.lock() = Some(e.to_string());
                tracing::error!(file = %path.display(), error = %e,
                    "configuration reload refused; the running configuration stays");
            }
        }
        result
    }

    fn adopt(&self, running: &Gateway, mut next: Config) -> Reloaded {
        let old = &running.config;
        let mut restart_required = Vec::new();
        // What the process bound or opened at start cannot change under it.
        macro_rules! keep {
            ($($field:ident).+, $name:literal) => {
                if next.$($field).+ != old.$($field).+ {
                    restart_required.push($name);
                    next.$($field).+ = old.$($field).+.clone();
                }
            };
        }
        keep!(listen, "listen");
        // The admin token may change (a reload rotates it); its listener may not.
        match (&mut next.admin, &old.admin) {
            (Some(n), Some(o)) if n.listen != o.listen => {
                restart_required.push("admin.listen");
                n.listen = o.listen;
            }
            (n, o) if n.is_some() != o.is_some() => {
                restart_required.push("admin");
                n.clone_from(o);
            }
            _ => {}
        }
        keep!(store, "store");
        keep!(threads, "threads");
        keep!(key_cache_ttl, "key_cache_ttl_secs");
        keep!(log_format, "log");
        keep!(telemetry, "telemetry");
        keep!(upgrade_sock, "upgrade_sock");
        // Whether a listener speaks TLS is fixed at start; its certificates rotate here.
        if next.tls.is_some() != old.tls.is_some() {
            restart_required.push("tls");
            next.tls.clone_from(&old.tls);
        }
        if let (Some(n), Some(o)) = (&mut next.admin, &old.admin) {
            if n.tls.is_some() != o.tls.is_some() {
                restart_required.push("admin.tls");
                n.tls.clone_from(&o.tls);
            }
        }
        // A channel at the same address keeps its health (circuit, counters); a new or
        // moved one starts closed.
        for c in &mut next.channels {
            let same = old
                .channels
                .iter()
                .find(|o| o.name == c.name && o.base_url == c.base_url);
            if let (Some(o), Some(c)) = (same, Arc::get_mut(c)) {
                c.health = o.health.clone();
            }
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let next = Arc::new(next);
        running.observe.adopt(&next);
        let gw = running.with_config(next, generation);
        let report = Reloaded {
            generation,
            channels: gw.config.channels.len(),
            prices: gw.config.prices.len(),
            restart_required,
        };
        self.current.store(Arc::new(gw));
        report
    }
}

/// Opens the configured store. `exclusive`: the embedded store is locked against a second
/// server on the same directory (the CLI opens it without the lock).
pub async fn open_store(cfg: &StoreConfig, exclusive: bool) -> Result<Arc<dyn Store>, StoreError> {
    open_store_waiting(cfg, exclusive, Duration::ZERO).await
}

/// [`open_store`], waiting up to `wait` for the embedded store's lock: a process started
/// by a graceful upgrade takes the directory over once the old process has finished its
/// last request and left.
pub async fn open_store_waiting(
    cfg: &StoreConfig,
    exclusive: bool,
    wait: Duration,
) -> Result<Arc<dyn Store>, StoreError> {
    match cfg {
        StoreConfig::Embedded { path } => {
            let s = EmbeddedStore::open(path)?;
            if exclusive {
                let deadline = Instant::now() + wait;
                let mut told = false;
                loop {
                    match s.lock_exclusive() {
                        Ok(()) => break,
                        Err(StoreError::Conflict(m)) if Instant::now() < deadline => {
                            if !told {
                                tracing::info!(reason = %m,
                                    "waiting for the previous process to release the store");
                                told = true;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => return Err(e),
                    }
                }
            } else {
                // Beside a server: its settles not yet in the database count too.
                s.catch_up_with_journal()?;
            }
            Ok(Arc::new(s))
        }
        StoreConfig::Redis { urls, cluster } => {
            Ok(Arc::new(RedisStore::connect(urls, *cluster).await?))
        }
    }
}
