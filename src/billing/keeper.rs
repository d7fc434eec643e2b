//! Keeps live holds alive: one thread for the whole process extends every hold whose
//! guard still lives, every third of its TTL.
//!
//! A guard registers its hold when it is made, and the registration leaves when it drops.
//! A request thus costs a map insert and a removal, not a task, a timer and the wake-ups
//! of another worker thread to start and abort them (which, at low load, were a third of
//! the latency the gateway added). Extensions are spawned on the runtime that registered
//! the hold, where the store's connections live.

use crate::store::{Reservation, Store};
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the keeper looks for holds due an extension. A hold is extended at most this
/// late, against two thirds of its TTL of margin.
const TICK: Duration = Duration::from_millis(50);
/// The shortest time between two extensions of a hold.
const MIN_EVERY: Duration = Duration::from_millis(100);

struct Held {
    store: Arc<dyn Store>,
    reservation: Reservation,
    ttl_secs: u64,
    every: Duration,
    due: Instant,
    runtime: tokio::runtime::Handle,
}

#[derive(Default)]
struct Keeper {
    /// By registration number, numbered in order.
    held: Mutex<HashMap<u64, Held, crate::ids::IdHash>>,
    next: AtomicU64,
}

static KEEPER: Lazy<Keeper> = Lazy::new(|| {
    let started = std::thread::Builder::new()
        .name("hold-keeper".into())
        .spawn(|| loop {
            std::thread::sleep(TICK);
            KEEPER.extend_due(Instant::now());
        });
    if let Err(e) = started {
        tracing::error!(error = %e, "cannot start the hold keeper; holds will not be extended");
    }
    Keeper::default()
});

impl Keeper {
    /// Spawns the extension of every hold due by `now`, and moves each one's next due time.
    fn extend_due(&self, now: Instant) {
        let due: Vec<_> = {
            let mut held = self.held.lock();
            held.values_mut()
                .filter(|h| h.due <= now)
                .map(|h| {
                    h.due = now + h.every;
                    (
                        h.runtime.clone(),
                        h.store.clone(),
                        h.reservation.clone(),
                        h.ttl_secs,
                    )
                })
                .collect()
        };
        for (runtime, store, r, ttl_secs) in due {
            // On a runtime that has shut down, the task is dropped unrun.
            runtime.spawn(async move {
                if let Err(e) = store.extend(&r, ttl_secs).await {
                    tracing::warn!(reservation = %r.id, error = %e, "hold not extended");
                }
            });
        }
    }
}

/// A hold being kept alive; dropping it stops the extensions.
pub struct Kept(u64);

impl Drop for Kept {
    fn drop(&mut self) {
        // What the registration holds is let go after the lock, not under it.
        let gone = KEEPER.held.lock().remove(&self.0);
        drop(gone);
    }
}

/// Extends `r` by `ttl_secs` every third of it until the returned registration drops.
/// `None` outside a tokio runtime (nothing could run the store's calls; the TTL then
/// applies as it is).
pub fn keep(store: Arc<dyn Store>, reservation: Reservation, ttl_secs: u64) -> Option<Kept> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let every = Duration::from_millis(ttl_secs.saturating_mul(1000) / 3).max(MIN_EVERY);
    let id = KEEPER.next.fetch_add(1, Ordering::Relaxed);
    let held = Held {
        store,
        reservation,
        ttl_secs,
        every,
        due: Instant::now() + every,
        runtime,
    };
    KEEPER.held.lock().insert(id, held);
    Some(Kept(id))
}

#[cfg(test)]
fn is_kept(id: &str) -> bool {
    KEEPER.held.lock().values().any(|h| h.reservation.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{Ask, KeyRecord};

    fn key(id: &str, quota: i64) -> KeyRecord {
        KeyRecord::for_tests(id, format!("{:0>64}", 7), Some(quota))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_hold_outlives_its_ttl_and_is_let_go_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        store.create_key(&key("k-kept", 1_000)).await.unwrap();
        let held = |id: &'static str| {
            let store = store.clone();
            async move {
                store
                    .reserve_ask("k-kept", id, &Ask::money_now(600, 600), 2)
                    .await
                    .unwrap()
            }
        };
        let r = held("req-kept").await.unwrap();
        let kept = keep(store.clone(), r, 2).unwrap();
        // What is under test is the passing of time: two TTLs and more.
        tokio::time::sleep(Duration::from_millis(4_500)).await;
        assert!(held("req-other").await.is_err(), "the kept hold expired");
        assert!(is_kept("req-kept"));
        drop(kept);
        assert!(!is_kept("req-kept"));
    }

    #[test]
    fn outside_a_runtime_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let r = Reservation {
            id: "req-none".into(),
            key_id: "k".into(),
            amount: 1,
        };
        assert!(keep(store, r, 1).is_none());
        assert!(!is_kept("req-none"));
    }
}
