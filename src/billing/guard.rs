//! Settle-on-drop: a reservation is always released, whichever way a request ends.

use crate::store::{Micros, Reservation, Store, UsageRecord};
use std::sync::Arc;
use std::time::Duration;

/// How long a failed settle keeps retrying in the background before giving up. The
/// reservation itself expires in the store after its TTL, so giving up never locks quota;
/// it can only lose a charge, which is logged at error level.
const SETTLE_RETRY_FOR: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOutcome {
    Settled,
    /// The store failed; a background task keeps retrying.
    Deferred,
}

/// Owns a reservation until it is settled. Dropping it unsettled (a panic, a cancelled
/// future, an early return) settles with the charge recorded so far, in the background.
pub struct ReservationGuard {
    store: Arc<dyn Store>,
    reservation: Option<Reservation>,
    charge_on_drop: Micros,
}

impl ReservationGuard {
    pub fn new(store: Arc<dyn Store>, reservation: Reservation) -> ReservationGuard {
        ReservationGuard {
            store,
            reservation: Some(reservation),
            charge_on_drop: 0,
        }
    }

    pub fn amount(&self) -> Micros {
        self.reservation.as_ref().map_or(0, |r| r.amount)
    }

    /// What the request has cost so far, charged if the guard is dropped unsettled.
    pub fn set_charge_on_drop(&mut self, cost: Micros) {
        self.charge_on_drop = cost;
    }

    /// Gives the reservation to something that outlives this request (a video task, whose
    /// end settles it); the guard then settles nothing.
    pub fn hand_over(&mut self) -> Option<Reservation> {
        self.reservation.take()
    }

    /// Settles once; later calls do nothing.
    pub async fn settle(&mut self, actual: Micros) -> SettleOutcome {
        self.settle_with(actual, None).await
    }

    /// Settles once and appends the request's usage record in the same store step.
    /// Without a reservation (already settled) the record is appended alone.
    pub async fn settle_logged(&mut self, actual: Micros, usage: UsageRecord) -> SettleOutcome {
        if self.reservation.is_none() {
            if let Err(e) = self.store.append_usage(&usage).await {
                tracing::warn!(request_id = %usage.request_id, error = %e, "usage record not written");
            }
            return SettleOutcome::Settled;
        }
        self.settle_with(actual, Some(usage)).await
    }

    async fn settle_with(&mut self, actual: Micros, usage: Option<UsageRecord>) -> SettleOutcome {
        let Some(r) = self.reservation.take() else {
            return SettleOutcome::Settled;
        };
        let done = match &usage {
            Some(u) => self.store.settle_logged(&r, actual, u).await,
            None => self.store.settle(&r, actual).await,
        };
        match done {
            Ok(()) => SettleOutcome::Settled,
            Err(e) => {
                tracing::warn!(reservation = %r.id, error = %e, "settle failed; retrying in background");
                spawn_retry(self.store.clone(), r, actual, usage);
                SettleOutcome::Deferred
            }
        }
    }
}

impl Drop for ReservationGuard {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            spawn_retry(self.store.clone(), r, self.charge_on_drop, None);
        }
    }
}

fn spawn_retry(store: Arc<dyn Store>, r: Reservation, actual: Micros, usage: Option<UsageRecord>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::error!(reservation = %r.id, charge = actual, "no runtime to settle on; the reservation will expire");
        return;
    };
    handle.spawn(async move {
        let started = tokio::time::Instant::now();
        let mut wait = Duration::from_millis(100);
        loop {
            let done = match &usage {
                Some(u) => store.settle_logged(&r, actual, u).await,
                None => store.settle(&r, actual).await,
            };
            match done {
                Ok(()) => return,
                Err(e) if started.elapsed() < SETTLE_RETRY_FOR => {
                    tracing::warn!(reservation = %r.id, error = %e, "settle retry failed");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(10));
                }
                Err(e) => {
                    tracing::error!(reservation = %r.id, key = %r.key_id, charge = actual, error = %e,
                        "giving up settling; charge lost, reservation will expire");
                    return;
                }
            }
        }
    });
}
