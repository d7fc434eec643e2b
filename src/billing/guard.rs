//! Settle-on-drop, keep-alive, and the one way to reserve: a reservation is always
//! released, whichever way a request ends, and charged exactly once.
//!
//! - [`reserve`] is the entry point: it owns the reservation id until the store answers.
//!   A call that fails (the script may have run and its reply been lost) or is cancelled
//!   releases that id in the background, so no money stays held until its TTL.
//! - A [`ReservationGuard`] keeps its hold alive while it exists (extends it every third
//!   of its TTL), so the TTL only reclaims the holds of instances that died.
//! - Its settle keeps the reservation until the store has confirmed. A settle that fails
//!   or whose future is dropped mid-call is retried in the background with the same amount
//!   and the same usage record; the store's settle is idempotent by reservation id, so a
//!   retry after a lost reply charges and logs nothing twice.

use super::keeper::{self, Kept};
use super::Multiplier;
use crate::store::{
    Ask, Headroom, Micros, Reservation, ReserveDenied, Store, StoreResult, UsageRecord,
};
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

/// Reserves what `ask` asks of the key and its group under `reservation_id` (see
/// [`Store::reserve_ask`]) and hands back a guard that owns the hold and keeps it alive for
/// `ttl_secs` at a time. When the store call fails (`Unavailable` after a lost reply,
/// or any other error) or this future is dropped before the store answered, the id is
/// released in the background (an idempotent settle of 0, retried with back-off), so a
/// hold the caller never learnt of is gone as soon as the store answers again; a later
/// reserve of that id is refused with [`ReserveDenied::Released`].
pub async fn reserve(
    store: &Arc<dyn Store>,
    key_id: &str,
    reservation_id: &str,
    ask: &Ask,
    ttl_secs: u64,
) -> StoreResult<Result<ReservationGuard, ReserveDenied>> {
    reserve_counted(store, key_id, reservation_id, ask, ttl_secs)
        .await
        .map(|(granted, _)| granted)
}

/// [`reserve`], with where the key's and its group's limits stand as the store's reserve
/// counted them ([`Store::reserve_counted`]): what the answer's rate-limit headers say.
pub async fn reserve_counted(
    store: &Arc<dyn Store>,
    key_id: &str,
    reservation_id: &str,
    ask: &Ask,
    ttl_secs: u64,
) -> StoreResult<(Result<ReservationGuard, ReserveDenied>, Headroom)> {
    let mut unanswered = Unanswered {
        store,
        key_id,
        reservation_id,
        armed: true,
    };
    let answer = store
        .reserve_counted(key_id, reservation_id, ask, ttl_secs)
        .await;
    match answer {
        Ok((granted, room)) => {
            unanswered.armed = false;
            let granted = granted.map(|r| ReservationGuard::new(store.clone(), r, ttl_secs));
            Ok((granted, room))
        }
        Err(e) => {
            tracing::warn!(reservation = %reservation_id, error = %e,
                "reserve failed; releasing the id in the background");
            // `unanswered` releases it as it drops.
            Err(e)
        }
    }
}

/// A reserve the store has not answered yet: dropped armed, it releases the id.
struct Unanswered<'a> {
    store: &'a Arc<dyn Store>,
    key_id: &'a str,
    reservation_id: &'a str,
    armed: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            let release = Reservation {
                id: self.reservation_id.to_string(),
                key_id: self.key_id.to_string(),
                amount: 0,
            };
            spawn_retry(self.store.clone(), release, 0, None, None);
        }
    }
}

/// How the key is charged for a provider cost: times its multiplier, never above what
/// was reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    pub multiplier: Multiplier,
    pub reserved: Micros,
}

impl Account {
    pub fn charge(&self, provider_cost: Micros) -> Micros {
        self.multiplier
            .apply_micros(provider_cost)
            .clamp(0, self.reserved)
    }
}

/// Owns a reservation until the store has confirmed its settle. Dropping it unsettled (a
/// panic, a cancelled future, an early return) settles in the background: with the
/// amount and record of a settle that was in flight, else with the charge recorded so far.
pub struct ReservationGuard {
    store: Arc<dyn Store>,
    reservation: Option<Reservation>,
    charge_on_drop: Micros,
    /// The settle being awaited: what a cancelled call leaves for `Drop` to retry.
    in_flight: Option<(Micros, Option<UsageRecord>)>,
    keep_alive: Option<Kept>,
    /// What the key is charged per micro-USD of provider cost.
    multiplier: Multiplier,
}

impl ReservationGuard {
    /// Takes charge of a granted reservation and keeps it alive `ttl_secs` at a time (pass
    /// the TTL it was reserved with).
    pub fn new(store: Arc<dyn Store>, reservation: Reservation, ttl_secs: u64) -> ReservationGuard {
        let keep_alive = keeper::keep(store.clone(), reservation.clone(), ttl_secs);
        ReservationGuard {
            store,
            reservation: Some(reservation),
            charge_on_drop: 0,
            in_flight: None,
            keep_alive,
            multiplier: Multiplier::ONE,
        }
    }

    /// Charges the key `m` per micro-USD of provider cost (its price multiplier).
    pub fn with_multiplier(mut self, m: Multiplier) -> ReservationGuard {
        self.multiplier = m;
        self
    }

    pub fn multiplier(&self) -> Multiplier {
        self.multiplier
    }

    /// The provider cost the reservation pays for (the key's multiplier taken out).
    pub fn provider_budget(&self) -> Micros {
        self.multiplier.unapply_micros(self.amount())
    }

    /// How this reservation charges the key: its multiplier, its amount.
    pub fn account(&self) -> Account {
        Account {
            multiplier: self.multiplier,
            reserved: self.amount(),
        }
    }

    /// What the key is charged for `provider_cost` ([`Account::charge`]).
    pub fn charge_for(&self, provider_cost: Micros) -> Micros {
        self.account().charge(provider_cost)
    }

    pub fn amount(&self) -> Micros {
        self.reservation.as_ref().map_or(0, |r| r.amount)
    }

    /// What the request has cost so far, charged if the guard is dropped unsettled.
    pub fn set_charge_on_drop(&mut self, cost: Micros) {
        self.charge_on_drop = cost;
    }

    /// Gives the reservation to something that outlives this request (a video task, whose
    /// end settles it); the guard then settles and extends nothing.
    pub fn hand_over(&mut self) -> Option<Reservation> {
        self.keep_alive = None;
        self.in_flight = None;
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
        let Some(r) = &self.reservation else {
            return SettleOutcome::Settled;
        };
        // Stays in the guard until the store confirms: dropped mid-call, `Drop` retries
        // exactly this settle.
        let (actual, usage) = self.in_flight.insert((actual, usage));
        let done = match usage {
            Some(u) => self.store.settle_logged(r, *actual, u).await,
            None => self.store.settle(r, *actual).await,
        };
        match done {
            Ok(()) => {
                self.reservation = None;
                self.in_flight = None;
                self.keep_alive = None;
                SettleOutcome::Settled
            }
            Err(e) => {
                let r = self.reservation.take().expect("held until confirmed");
                let (actual, usage) = self.in_flight.take().expect("set above");
                tracing::warn!(reservation = %r.id, error = %e, "settle failed; retrying in background");
                spawn_retry(self.store.clone(), r, actual, usage, self.keep_alive.take());
                SettleOutcome::Deferred
            }
        }
    }
}

impl Drop for ReservationGuard {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            let (actual, usage) = self.in_flight.take().unwrap_or((self.charge_on_drop, None));
            spawn_retry(self.store.clone(), r, actual, usage, self.keep_alive.take());
        }
    }
}

/// Settles `r` in the background until the store confirms (the store's settle is
/// idempotent, so a retry after a lost reply changes nothing). The hold's keep-alive, if
/// any, runs until then: a hold whose charge is still on its way is not given back to
/// other requests early.
fn spawn_retry(
    store: Arc<dyn Store>,
    r: Reservation,
    actual: Micros,
    usage: Option<UsageRecord>,
    keep_alive: Option<Kept>,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::error!(reservation = %r.id, charge = actual, "no runtime to settle on; the reservation will expire");
        return;
    };
    handle.spawn(async move {
        let _keep_alive = keep_alive;
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
