//! In-process key cache: a request costs no store round trip to authenticate. An entry
//! older than `ttl` is served once more while one background lookup reads it again, so a
//! busy key never waits for the store; a revoke or update made on another instance
//! applies here within `ttl` plus one lookup (spec: "within a bounded, documented
//! time"). Money is never decided from the cache: the store's reserve re-checks status
//! and expiry.
//!
//! Unknown keys are looked up at once (nothing to serve meanwhile) and remembered for
//! [`NEGATIVE_TTL`], so a flood of bad keys reaches the store at most once a second per
//! key; concurrent lookups of one key share one store call.

use super::policy::AuthKey;
use crate::errors::GatewayError;
use crate::store::{KeyRecord, Store};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Unknown keys are remembered briefly so a flood of bad keys cannot flood the store.
const NEGATIVE_TTL: Duration = Duration::from_secs(1);
const MAX_ENTRIES: usize = 200_000;

struct Entry {
    key: Option<Arc<AuthKey>>,
    fetched: Instant,
}

/// A lookup under way: its result, once it has one (`None` while waiting).
type Lookup = watch::Receiver<Option<Result<Option<Arc<AuthKey>>, ()>>>;

struct Shared {
    store: Arc<dyn Store>,
    map: RwLock<HashMap<String, Entry>>,
    /// Lookups under way, by key id: every caller of one key waits for the same one.
    lookups: Mutex<HashMap<String, Lookup>>,
}

pub struct KeyCache {
    shared: Arc<Shared>,
    ttl: Duration,
}

impl KeyCache {
    pub fn new(store: Arc<dyn Store>, ttl: Duration) -> KeyCache {
        KeyCache {
            shared: Arc::new(Shared {
                store,
                map: RwLock::new(HashMap::new()),
                lookups: Mutex::new(HashMap::new()),
            }),
            ttl,
        }
    }

    /// The key with this id and hash, or `UnknownKey`.
    pub async fn get(&self, id: &str, hash: &str) -> Result<Arc<AuthKey>, GatewayError> {
        let stale = {
            let map = self.shared.map.read();
            match map.get(id) {
                Some(e) => {
                    let ttl = if e.key.is_some() {
                        self.ttl
                    } else {
                        NEGATIVE_TTL
                    };
                    if e.fetched.elapsed() < ttl {
                        return matching(&e.key, hash);
                    }
                    e.key.clone()
                }
                None => None,
            }
        };
        if let Some(known) = stale {
            // Served as it was; read again behind this request (once).
            let under_way = self.shared.lookups.lock().contains_key(id);
            if under_way {
                return matching(&Some(known), hash);
            }
            if tokio::runtime::Handle::try_current().is_ok() {
                let (shared, id) = (self.shared.clone(), id.to_string());
                tokio::spawn(async move {
                    let _ = Shared::lookup(&shared, &id).await;
                });
                return matching(&Some(known), hash);
            }
        }
        match Shared::lookup(&self.shared, id).await {
            Ok(key) => matching(&key, hash),
            Err(()) => Err(GatewayError::StoreUnavailable),
        }
    }

    /// Puts a record straight in (after an admin change on this instance). A key in a
    /// group is read again on its next request instead (with its group).
    pub fn put(&self, rec: KeyRecord) {
        let id = rec.id.clone();
        if rec.group.is_some() {
            self.invalidate(&id);
        } else {
            self.shared.insert(&id, Some(Arc::new(AuthKey::new(rec))));
        }
    }

    pub fn invalidate(&self, id: &str) {
        self.shared.map.write().remove(id);
    }
}

impl Shared {
    /// Reads the key from the store (joining a lookup of it already under way) and
    /// caches what it found. A failed lookup keeps the last known record: the store's
    /// reserve still checks, so nothing is spent unchecked.
    async fn lookup(me: &Arc<Shared>, id: &str) -> Result<Option<Arc<AuthKey>>, ()> {
        let (mut rx, leader) = {
            let mut lookups = me.lookups.lock();
            match lookups.get(id) {
                Some(rx) => (rx.clone(), None),
                None => {
                    let (tx, rx) = watch::channel(None);
                    lookups.insert(id.to_string(), rx.clone());
                    (rx, Some(tx))
                }
            }
        };
        if let Some(tx) = leader {
            let found = match me.store.get_key(id).await {
                Ok(Some(rec)) => match &rec.group {
                    Some(g) => me
                        .store
                        .get_group(g)
                        .await
                        .map(|group| Some(AuthKey::in_group(rec, group))),
                    None => Ok(Some(AuthKey::new(rec))),
                },
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            let result = match found {
                Ok(key) => {
                    let key = key.map(Arc::new);
                    me.insert(id, key.clone());
                    Ok(key)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "key lookup failed");
                    let known = me.map.read().get(id).and_then(|e| e.key.clone());
                    known.map(Some).ok_or(())
                }
            };
            me.lookups.lock().remove(id);
            let _ = tx.send(Some(result.clone()));
            return result;
        }
        let answer = match rx.wait_for(|v| v.is_some()).await {
            Ok(v) => v.clone().unwrap_or(Err(())),
            Err(_) => Err(()),
        };
        answer
    }

    fn insert(&self, id: &str, key: Option<Arc<AuthKey>>) {
        let mut map = self.map.write();
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, e| e.key.is_some());
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(
            id.to_string(),
            Entry {
                key,
                fetched: Instant::now(),
            },
        );
    }
}

fn matching(key: &Option<Arc<AuthKey>>, hash: &str) -> Result<Arc<AuthKey>, GatewayError> {
    match key {
        // The id is a hash prefix; the full hash must match too.
        Some(k) if k.rec.hash == hash => Ok(k.clone()),
        _ => Err(GatewayError::UnknownKey),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{KeyPatch, KeyStatus};

    fn rec(id: &str) -> KeyRecord {
        KeyRecord::for_tests(id, format!("{id:0>64}"), None)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stale_key_is_served_while_it_is_read_again_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        store.create_key(&rec("k1")).await.unwrap();
        let cache = KeyCache::new(store.clone(), Duration::ZERO);
        let hash = rec("k1").hash;
        assert!(cache.get("k1", &hash).await.is_ok());
        let patch = KeyPatch {
            status: Some(KeyStatus::Disabled),
            ..KeyPatch::default()
        };
        store.update_key("k1", &patch).await.unwrap();
        // Stale: the last known record answers, and the change arrives behind it.
        let served = cache.get("k1", &hash).await.unwrap();
        assert_eq!(served.rec.status, KeyStatus::Enabled);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let k = cache.get("k1", &hash).await.unwrap();
            if k.rec.status == KeyStatus::Disabled {
                break;
            }
            assert!(Instant::now() < deadline, "the change never arrived");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Unknown keys are looked up at once, and remembered.
        assert!(matches!(
            cache.get("nope", &hash).await,
            Err(GatewayError::UnknownKey)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_lookups_of_one_key_all_get_its_answer() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        store.create_key(&rec("k1")).await.unwrap();
        let cache = Arc::new(KeyCache::new(store, Duration::from_secs(60)));
        let hash = rec("k1").hash;
        let all: Vec<_> = (0..32)
            .map(|_| {
                let (c, h) = (cache.clone(), hash.clone());
                tokio::spawn(async move { c.get("k1", &h).await.is_ok() })
            })
            .collect();
        for t in all {
            assert!(t.await.unwrap());
        }
        assert!(
            cache.shared.lookups.lock().is_empty(),
            "nothing left waiting"
        );
    }
}
