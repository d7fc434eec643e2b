//! The embedded store's money in memory: for every key a request has reserved on, its
//! limit, status, expiry and settled spend, and the holds of the requests in flight.
//!
//! A reserve is decided here alone, under one lock, with no SQLite statement: a single
//! node's requests do not outlive its process, so their holds need not be on disk (a
//! restart drops them anyway), and the figures they are checked against are the store's
//! own. Every change of those figures passes through here, in one of two ways:
//! - the writer thread commits a settle, then applies it ([`Ledger::settled`]): the hold
//!   is released and the charge added in one step, only once the charge is durable (until
//!   then the hold still counts, so a reserve never sees money that is not free);
//! - an account is loaded by the writer, between two commits, so no committed settle can
//!   be missing from what it read; another process's changes (the CLI) are read again the
//!   same way ([`Ledger::reload`]).
//!
//! Video task reservations (`task_...`) outlive the process: they are written to the
//! `reservations` table as well, and loaded with their account.

use super::Clock;
use crate::store::recent::RecentIds;
use crate::store::{KeyStatus, Micros, Reservation, ReserveDenied};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Reservations that must survive a restart: those of video tasks.
pub fn durable(reservation_id: &str) -> bool {
    reservation_id.starts_with("task_")
}

/// What a key's reservations are checked against, as committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub status: KeyStatus,
    pub expires_at: Option<i64>,
    pub limit: Option<Micros>,
    pub used: Micros,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    amount: Micros,
    /// Unix seconds, the store's clock.
    expires: i64,
}

struct Account {
    figures: Figures,
    held: Micros,
    holds: HashMap<String, Hold>,
}

impl Account {
    /// Releases the holds that expired by `now`; returns how many.
    fn purge(&mut self, now: i64) -> usize {
        let before = self.holds.len();
        self.holds.retain(|_, h| h.expires > now);
        if self.holds.len() != before {
            self.held = self.holds.values().map(|h| h.amount).sum();
        }
        before - self.holds.len()
    }

    fn remove(&mut self, rid: &str) -> Option<Hold> {
        let h = self.holds.remove(rid)?;
        self.held -= h.amount;
        Some(h)
    }
}

#[derive(Default)]
struct Books {
    accounts: HashMap<String, Account>,
    settled: RecentIds,
}

/// A reserve decided from memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `true` when this call made the hold (not a retry answered from an existing one).
    Granted(Reservation, bool),
    Denied(ReserveDenied),
    /// The key's account is not in memory: the writer loads it, then the reserve is
    /// decided again.
    NotLoaded,
}

pub struct Ledger {
    books: Mutex<Books>,
    clock: Arc<Clock>,
    /// Holds in memory over every key: the requests whose settle is still to come.
    live: AtomicUsize,
}

impl Ledger {
    pub fn new(clock: Arc<Clock>) -> Ledger {
        Ledger {
            books: Mutex::new(Books::default()),
            clock,
            live: AtomicUsize::new(0),
        }
    }

    /// Requests holding money now: at most this many settles can still arrive soon.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    fn gone(&self, n: usize) {
        if n > 0 {
            self.live.fetch_sub(n, Ordering::Relaxed);
        }
    }

    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Decides a reserve (see `Store::reserve`) and, when granted, holds the money. An id
    /// this process settled is refused; one settled by an earlier process is known only
    /// to the `settled` table, which the writer reads first for task ids (the only ids
    /// that outlive a process).
    pub fn reserve(
        &self,
        key_id: &str,
        rid: &str,
        min: Micros,
        max: Micros,
        ttl_secs: u64,
    ) -> Decision {
        let now = self.clock.now();
        let mut b = self.books.lock();
        if b.settled.contains(key_id, rid) {
            return Decision::Denied(ReserveDenied::Released);
        }
        let Some(a) = b.accounts.get_mut(key_id) else {
            return Decision::NotLoaded;
        };
        let expired = a.purge(now);
        self.gone(expired);
        if let Some(h) = a.holds.get(rid) {
            let r = Reservation {
                id: rid.to_string(),
                key_id: key_id.to_string(),
                amount: h.amount,
            };
            return Decision::Granted(r, false);
        }
        let f = &a.figures;
        if f.status != KeyStatus::Enabled {
            return Decision::Denied(ReserveDenied::Disabled);
        }
        if f.expires_at.is_some_and(|t| now >= t) {
            return Decision::Denied(ReserveDenied::Expired);
        }
        let amount = match f.limit {
            None => max,
            Some(limit) => {
                let available = limit - f.used - a.held;
                if available < min {
                    return Decision::Denied(ReserveDenied::QuotaExhausted);
                }
                max.min(available)
            }
        };
        let expires = now.saturating_add(ttl_secs.min(i64::MAX as u64) as i64);
        a.holds.insert(rid.to_string(), Hold { amount, expires });
        a.held += amount;
        self.live.fetch_add(1, Ordering::Relaxed);
        let r = Reservation {
            id: rid.to_string(),
            key_id: key_id.to_string(),
            amount,
        };
        Decision::Granted(r, true)
    }

    /// Undoes a hold whose write failed (a task reservation not committed).
    pub fn unhold(&self, key_id: &str, rid: &str) {
        if let Some(a) = self.books.lock().accounts.get_mut(key_id) {
            if a.remove(rid).is_some() {
                self.gone(1);
            }
        }
    }

    /// Pushes a live hold's expiry to `ttl_secs` from now (never earlier). `None` if the
    /// id is not held; `Some(false)` if it is held but expired.
    pub fn extend(&self, key_id: &str, rid: &str, ttl_secs: u64) -> Option<bool> {
        let now = self.clock.now();
        let until = now.saturating_add(ttl_secs.min(i64::MAX as u64) as i64);
        let mut b = self.books.lock();
        let h = b.accounts.get_mut(key_id)?.holds.get_mut(rid)?;
        if h.expires <= now {
            return Some(false);
        }
        h.expires = h.expires.max(until);
        Some(true)
    }

    /// Applies a committed settle: `first` when this call wrote the charge, `false` for
    /// a settle of an id settled before (its hold, if any, goes; nothing is charged).
    pub fn settled(&self, key_id: &str, rid: &str, actual: Micros, first: bool) {
        let mut b = self.books.lock();
        b.settled.insert(key_id, rid);
        if let Some(a) = b.accounts.get_mut(key_id) {
            if a.remove(rid).is_some() {
                self.gone(1);
            }
            if first {
                a.figures.used += actual.max(0);
            }
        }
    }

    pub fn is_loaded(&self, key_id: &str) -> bool {
        self.books.lock().accounts.contains_key(key_id)
    }

    /// Puts a key's account in memory, with its durable holds (on the writer thread,
    /// between commits). An account already there is kept: it is at least as new.
    pub fn load(&self, key_id: &str, figures: Figures, durable_holds: Vec<(String, Micros, i64)>) {
        let mut b = self.books.lock();
        if b.accounts.contains_key(key_id) {
            return;
        }
        let holds: HashMap<String, Hold> = durable_holds
            .into_iter()
            .map(|(id, amount, expires)| (id, Hold { amount, expires }))
            .collect();
        let held = holds.values().map(|h| h.amount).sum();
        self.live.fetch_add(holds.len(), Ordering::Relaxed);
        b.accounts.insert(
            key_id.to_string(),
            Account {
                figures,
                held,
                holds,
            },
        );
    }

    /// The keys whose accounts are in memory.
    pub fn loaded(&self) -> Vec<String> {
        self.books.lock().accounts.keys().cloned().collect()
    }

    /// Replaces a loaded account's figures by what the database says now (after another
    /// process changed it), or drops the account when the key is gone. On the writer
    /// thread between commits: the database then holds every settle applied here.
    pub fn reload(&self, key_id: &str, figures: Option<Figures>) {
        let mut b = self.books.lock();
        match figures {
            Some(f) => {
                if let Some(a) = b.accounts.get_mut(key_id) {
                    a.figures = f;
                }
            }
            None => {
                if let Some(a) = b.accounts.remove(key_id) {
                    self.gone(a.holds.len());
                }
            }
        }
    }

    /// Applies a committed change of a key's record (admin update).
    pub fn update(
        &self,
        key_id: &str,
        status: KeyStatus,
        expires_at: Option<i64>,
        limit: Option<Micros>,
    ) {
        if let Some(a) = self.books.lock().accounts.get_mut(key_id) {
            a.figures.status = status;
            a.figures.expires_at = expires_at;
            a.figures.limit = limit;
        }
    }

    /// Forgets a key (deleted, or created anew: read again on its next reserve).
    pub fn forget(&self, key_id: &str) {
        if let Some(a) = self.books.lock().accounts.remove(key_id) {
            self.gone(a.holds.len());
        }
    }
}
