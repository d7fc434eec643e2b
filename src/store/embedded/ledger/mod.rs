//! The embedded store's money in memory: for every key a request has reserved on, its
//! limit, status, expiry, policy and settled spend, the same for the groups of those keys,
//! and the holds of the requests in flight.
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
//! Beyond the lifetime cap, a key and its group have the counters of their policy:
//! - spend per calendar period, named by the period's label (`day:1795478400`): settled
//!   plus held. The settled part is durable (the `period_spend` table, written in the
//!   settle's commit) and read back with the account; a period no budget limits is not
//!   counted, so a key without budgets writes nothing more than before;
//! - tokens per minute and requests in flight live here only: the store serves one
//!   process, and a restart ends every request in flight anyway (their tokens, counted in
//!   a minute about to end, are forgotten with them).
//!
//! A hold remembers the counters it is on ([`On`]), so its settle and its expiry release
//! exactly those, whatever the clock or the policy say by then; a hold that expired keeps
//! that memory until it is settled (or for [`SETTLED_KEEP_SECS`]), so a late settle still
//! charges the periods and the group it was held on.
//!
//! Video task reservations (`task_...`) outlive the process: they are written to the
//! `reservations` table as well, with what they are on, and loaded when the store opens.

use super::counters::Counters;
use super::figures::{Detail, Figures, GroupFigures, On};
use super::Clock;
use crate::store::policy::{Ask, GroupAsk, Headroom, Limit, LimitKind, Periods, Standing};
use crate::store::recent::RecentIds;
use crate::store::{KeyStatus, Micros, Reservation, ReserveDenied, SETTLED_KEEP_SECS};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod accounts;
mod checks;

use checks::{headroom, key_refusal, money, rate_refusal, Grant};

/// Reservations that must survive a restart: those of video tasks.
pub fn durable(reservation_id: &str) -> bool {
    reservation_id.starts_with("task_")
}

#[derive(Debug, Clone)]
struct Hold {
    amount: Micros,
    /// Unix seconds, the store's clock.
    expires: i64,
    tokens: u64,
    minute: i64,
    /// `None` for a key with no budget and no group: nothing beyond the lifetime cap.
    on: Option<Box<On>>,
    /// Counted in flight (`Ask::in_flight`).
    counted: bool,
}

impl Hold {
    fn detail(&self) -> Detail {
        Detail {
            tokens: self.tokens,
            minute: self.minute,
            on: self.on.as_deref().cloned(),
        }
    }
}

struct Account {
    figures: Figures,
    c: Counters,
    holds: HashMap<String, Hold>,
    /// Holds that expired before their settle, by id: when they expired and what they
    /// were on (only those on more than the lifetime cap).
    lapsed: HashMap<String, (i64, Box<On>)>,
}

struct GroupAccount {
    /// `None`: no such group (never created, or deleted).
    figures: Option<GroupFigures>,
    c: Counters,
}

type Groups = HashMap<String, GroupAccount>;

/// Takes a hold's money (and its place in flight) off every counter it is on.
fn release(c: &mut Counters, groups: &mut Groups, h: &Hold) {
    match h.on.as_deref() {
        None => c.release(&[], h.amount, h.counted),
        Some(on) => {
            c.release(&on.key, h.amount, h.counted);
            if let Some(g) = on.group.as_ref().and_then(|g| groups.get_mut(g)) {
                g.c.release(&on.group_periods, h.amount, h.counted);
            }
        }
    }
}

/// Gives back the tokens of a hold beyond `keep`.
fn untoken(c: &mut Counters, groups: &mut Groups, h: &Hold, keep: u64) {
    let back = h.tokens.saturating_sub(keep);
    if back == 0 {
        return;
    }
    c.drop_tokens(h.minute, back);
    if let Some(g) =
        h.on.as_deref()
            .and_then(|on| on.group.as_ref())
            .and_then(|g| groups.get_mut(g))
    {
        g.c.drop_tokens(h.minute, back);
    }
}

#[derive(Default)]
struct Books {
    accounts: HashMap<String, Account>,
    groups: Groups,
    settled: RecentIds,
    /// No hold expires before this (a lower bound; a sweep finds the exact one).
    next_expiry: i64,
}

impl Books {
    /// Releases every hold that expired by `now`; returns how many.
    fn sweep(&mut self, now: i64) -> usize {
        let mut gone = 0;
        let mut next = i64::MAX;
        let Books {
            accounts, groups, ..
        } = self;
        for a in accounts.values_mut() {
            let Account {
                holds, c, lapsed, ..
            } = a;
            holds.retain(|rid, h| {
                if h.expires > now {
                    next = next.min(h.expires);
                    return true;
                }
                release(c, groups, h);
                if let Some(on) = h.on.take() {
                    lapsed.insert(rid.clone(), (h.expires, on));
                }
                gone += 1;
                false
            });
            if !lapsed.is_empty() {
                lapsed.retain(|_, (at, _)| *at > now - SETTLED_KEEP_SECS);
                for (at, _) in lapsed.values() {
                    next = next.min(at.saturating_add(SETTLED_KEEP_SECS));
                }
            }
        }
        self.next_expiry = next;
        gone
    }

    fn drop_account(&mut self, key_id: &str) -> usize {
        let Some(a) = self.accounts.remove(key_id) else {
            return 0;
        };
        let mut c = a.c;
        for h in a.holds.values() {
            release(&mut c, &mut self.groups, h);
        }
        a.holds.len()
    }
}

/// A reserve decided from memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `true` when this call made the hold (not a retry answered from an existing one).
    Granted(Reservation, bool),
    Denied(ReserveDenied),
    /// The key's account, or its group's, is not in memory: the writer loads it, then the
    /// reserve is decided again.
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

    fn swept(&self, b: &mut Books, now: i64) {
        if now >= b.next_expiry {
            let n = b.sweep(now);
            self.gone(n);
        }
    }

    /// Decides a reserve (see `Store::reserve_ask`) and, when granted, holds it on every
    /// counter it was checked against; with where the key's and its group's limits stand
    /// under the same lock (after the hold, or as they are when refused). An id this
    /// process settled is refused; one settled by an earlier process is known only to the
    /// `settled` table, which the writer reads first for task ids (the only ids that
    /// outlive a process).
    pub fn reserve(
        &self,
        key_id: &str,
        rid: &str,
        ask: &Ask,
        ttl_secs: u64,
    ) -> (Decision, Headroom) {
        let none = |d: Decision| (d, Headroom::default());
        let now = self.clock.now();
        let mut guard = self.books.lock();
        let b = &mut *guard;
        if b.settled.contains(key_id, rid) {
            return none(Decision::Denied(ReserveDenied::Released));
        }
        self.swept(b, now);
        let Some(a) = b.accounts.get_mut(key_id) else {
            return none(Decision::NotLoaded);
        };
        if let Some(h) = a.holds.get(rid) {
            let r = Reservation {
                id: rid.to_string(),
                key_id: key_id.to_string(),
                amount: h.amount,
            };
            return none(Decision::Granted(r, false));
        }
        let f = &a.figures;
        if let Err(why) = key_refusal(f, ask, now) {
            return none(Decision::Denied(why));
        }
        let group_denied = Decision::Denied(ReserveDenied::Limit(Limit::group(LimitKind::Group)));
        let group = match (&f.group, &ask.group) {
            (Some(id), Some(ga)) => match b.groups.get_mut(id) {
                None => return none(Decision::NotLoaded),
                Some(g) => match &g.figures {
                    Some(gf) if gf.status == KeyStatus::Enabled => Some((g, ga)),
                    _ => return none(group_denied),
                },
            },
            _ => None,
        };
        let minute = ask.minute();
        let room = |a: &Account, g: Option<(&GroupAccount, &GroupAsk)>| {
            headroom(&a.figures, &a.c, g, ask, minute)
        };
        let grant = match money(f, &a.c, group.as_ref().map(|(g, ga)| (&**g, *ga)), ask) {
            Ok(grant) => grant,
            Err(why) => {
                let r = room(&*a, group.as_ref().map(|(g, ga)| (&**g, *ga)));
                return (Decision::Denied(why), r);
            }
        };
        if let Err(l) = rate_refusal(f, &a.c, group.as_ref().map(|(g, _)| &**g), ask, minute) {
            let r = room(&*a, group.as_ref().map(|(g, ga)| (&**g, *ga)));
            return (Decision::Denied(ReserveDenied::Limit(l)), r);
        }

        // Granted: held on every counter, remembered by the hold.
        let amount = grant.amount;
        let group_ask = group.as_ref().map(|(_, ga)| *ga);
        let hold = hold(a, group.map(|(g, _)| g), ask, grant, now, minute, ttl_secs);
        let expires = hold.expires;
        a.holds.insert(rid.to_string(), hold);
        let held_group = a
            .figures
            .group
            .as_ref()
            .and_then(|id| b.groups.get(id))
            .zip(group_ask);
        let r = room(&*a, held_group);
        b.next_expiry = b.next_expiry.min(expires);
        self.live.fetch_add(1, Ordering::Relaxed);
        let reservation = Reservation {
            id: rid.to_string(),
            key_id: key_id.to_string(),
            amount,
        };
        (Decision::Granted(reservation, true), r)
    }

    /// What a hold (live or lapsed) is on, with its tokens: `None` if this process holds
    /// nothing under that id.
    pub fn detail(&self, key_id: &str, rid: &str) -> Option<Detail> {
        let b = self.books.lock();
        let a = b.accounts.get(key_id)?;
        if let Some(h) = a.holds.get(rid) {
            return Some(h.detail());
        }
        a.lapsed.get(rid).map(|(_, on)| Detail {
            on: Some((**on).clone()),
            ..Detail::default()
        })
    }

    /// The money counters a hold is on beyond the lifetime cap: `None` for a hold on
    /// none (or one this process does not know). Allocates nothing for a plain hold.
    pub fn on(&self, key_id: &str, rid: &str) -> Option<On> {
        let b = self.books.lock();
        let a = b.accounts.get(key_id)?;
        match a.holds.get(rid) {
            Some(h) => h.on.as_deref().cloned(),
            None => a.lapsed.get(rid).map(|(_, on)| (**on).clone()),
        }
    }

    /// Undoes a hold whose write failed (a task reservation not committed).
    pub fn unhold(&self, key_id: &str, rid: &str) {
        let mut guard = self.books.lock();
        let b = &mut *guard;
        if let Some(a) = b.accounts.get_mut(key_id) {
            if let Some(h) = a.holds.remove(rid) {
                release(&mut a.c, &mut b.groups, &h);
                untoken(&mut a.c, &mut b.groups, &h, 0);
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

    /// Claims the settle of a request's id, on the writer, in the order settles commit:
    /// `true` for the first settle of an id, `false` for one settled (or claimed)
    /// within the last 15 to 30 minutes, longer than any settle is retried. A request's
    /// hold and its guard never outlive the process, so this replaces a durable row; an
    /// id whose settle does not commit is given back with [`Ledger::unclaim`].
    pub fn claim(&self, key_id: &str, rid: &str) -> bool {
        self.books.lock().settled.insert_new(key_id, rid)
    }

    /// Gives back a claim whose settle did not commit: a retry settles it.
    pub fn unclaim(&self, key_id: &str, rid: &str) {
        self.books.lock().settled.remove(key_id, rid);
    }

    /// Applies a committed settle: `first` when this call wrote the charge, `false` for
    /// a settle of an id settled before (its hold, if any, goes; nothing is charged).
    /// `on` is what the settle charged beyond the lifetime cap (read from this ledger or
    /// from the reservation's row before the commit); `tokens` the tokens used, if known.
    pub fn settled(
        &self,
        key_id: &str,
        rid: &str,
        actual: Micros,
        first: bool,
        on: Option<&On>,
        tokens: Option<u64>,
    ) {
        // The clock only dates new period counters.
        let now = if on.is_some() { self.clock.now() } else { 0 };
        let actual = actual.max(0);
        let mut guard = self.books.lock();
        let b = &mut *guard;
        b.settled.insert(key_id, rid);
        if let Some(a) = b.accounts.get_mut(key_id) {
            if let Some(h) = a.holds.remove(rid) {
                release(&mut a.c, &mut b.groups, &h);
                untoken(&mut a.c, &mut b.groups, &h, tokens.unwrap_or(h.tokens));
                self.gone(1);
            } else if !a.lapsed.is_empty() {
                a.lapsed.remove(rid);
            }
            if first {
                a.figures.used += actual;
                if let Some(on) = on {
                    a.c.charge(&on.key, actual, now);
                }
            }
        }
        if let (true, Some(on)) = (first, on) {
            if let Some(g) = on.group.as_ref().and_then(|g| b.groups.get_mut(g)) {
                // A group deleted since is not charged (its rows are not either).
                if let Some(gf) = &mut g.figures {
                    gf.used += actual;
                    g.c.charge(&on.group_periods, actual, now);
                }
            }
        }
    }

    /// A loaded key's standing; `None` if its account is not in memory.
    pub fn standing(&self, key_id: &str, periods: &Periods, minute: i64) -> Option<Standing> {
        self.read_swept(|b| {
            b.accounts
                .get(key_id)
                .map(|a| a.c.standing(periods, minute))
        })
    }

    /// A loaded group's standing; `None` if its account is not in memory.
    pub fn group_standing(
        &self,
        group_id: &str,
        periods: &Periods,
        minute: i64,
    ) -> Option<Standing> {
        self.read_swept(|b| {
            b.groups
                .get(group_id)
                .map(|g| g.c.standing(periods, minute))
        })
    }

    /// Reads the books once the holds expired by now are released.
    fn read_swept<R>(&self, read: impl FnOnce(&Books) -> R) -> R {
        let now = self.clock.now();
        let mut b = self.books.lock();
        self.swept(&mut b, now);
        read(&b)
    }
}

/// Holds a granted reserve on the key's counters and its group's (money, tokens, place
/// in flight); returns the hold, which remembers what it is on for its release.
fn hold(
    a: &mut Account,
    group: Option<&mut GroupAccount>,
    ask: &Ask,
    grant: Grant,
    now: i64,
    minute: i64,
    ttl_secs: u64,
) -> Hold {
    let amount = grant.amount;
    let on = if grant.key_labels.is_empty() && group.is_none() {
        None
    } else {
        Some(Box::new(On {
            key: grant.key_labels,
            group: a.figures.group.clone(),
            group_periods: grant.group_labels,
        }))
    };
    let key_on = on.as_deref().map_or(&[][..], |o| &o.key[..]);
    a.c.hold(key_on, amount, now, ask.in_flight);
    a.c.add_tokens(minute, ask.tokens);
    if let (Some(g), Some(on)) = (group, on.as_deref()) {
        g.c.hold(&on.group_periods, amount, now, ask.in_flight);
        g.c.add_tokens(minute, ask.tokens);
    }
    let expires = now.saturating_add(ttl_secs.min(i64::MAX as u64) as i64);
    Hold {
        amount,
        expires,
        tokens: ask.tokens,
        minute,
        on,
        counted: ask.in_flight,
    }
}
