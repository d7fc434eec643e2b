//! The shared state of one gateway instance. Nothing lives in globals, so several
//! instances can run in one process (the integration tests do exactly that).

use crate::auth::KeyCache;
use crate::channels::Router;
use crate::config::{Config, StoreConfig};
use crate::lifecycle::Cut;
use crate::store::embedded::EmbeddedStore;
use crate::store::redis::RedisStore;
use crate::store::{Store, StoreError};
use pingora::connectors::http::Connector;
use pingora::connectors::ConnectorOptions;
use std::sync::Arc;

/// Idle upstream connections kept for reuse, per instance.
const UPSTREAM_POOL_SIZE: usize = 4096;

pub struct Gateway {
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub keys: KeyCache,
    pub router: Router,
    pub connector: Connector,
    /// Ends the answers still running when a graceful stop's grace period is over.
    pub cut: Cut,
}

impl Gateway {
    pub fn new(config: Arc<Config>, store: Arc<dyn Store>) -> Gateway {
        Gateway {
            keys: KeyCache::new(store.clone(), config.key_cache_ttl),
            router: Router::new(&config.channels),
            connector: Connector::new(Some(ConnectorOptions::new(UPSTREAM_POOL_SIZE))),
            cut: Cut::new(),
            store,
            config,
        }
    }
}

/// Opens the configured store. `exclusive`: the embedded store is locked against a second
/// server on the same directory (the CLI opens it without the lock).
pub async fn open_store(cfg: &StoreConfig, exclusive: bool) -> Result<Arc<dyn Store>, StoreError> {
    match cfg {
        StoreConfig::Embedded { path } => {
            let s = EmbeddedStore::open(path)?;
            if exclusive {
                s.lock_exclusive()?;
            }
            Ok(Arc::new(s))
        }
        StoreConfig::Redis { urls, cluster } => {
            Ok(Arc::new(RedisStore::connect(urls, *cluster).await?))
        }
    }
}
