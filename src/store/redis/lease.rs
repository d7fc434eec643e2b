//! One instance's lease on one key's quota: the decisions, with no I/O (`sync` does the
//! talking to Redis).
//!
//! A lease is money moved, by one atomic script, from the key's free quota into this
//! instance (a hold named `lease:<instance>` in Redis). The instance then reserves and
//! settles its requests against it in memory, and sends what it settled in numbered
//! batches, each of which also resizes the lease. Amounts, locally:
//! - `granted`: the lease in Redis after the last confirmed call;
//! - `committed`: what requests hold, plus what was settled and not yet confirmed in
//!   Redis (those charges are still covered by the lease there);
//! - `cap`: how far local reserves may go, `committed <= cap <= granted`. Before asking
//!   for a smaller lease, the instance lowers `cap` first and sends it as the floor, so a
//!   reply that shrinks the lease never leaves requests holding money Redis no longer
//!   holds for them, even when replies are lost or calls cross.
//!
//! Modes: `Off` (one script per request, as without leases; the instance counts its rate),
//! `Leasing`, `Draining` (no new local reserves; the lease shrinks to what is committed,
//! then goes). An instance drains when the key runs low (the lease it may take would not
//! cover a few requests: near the end of a quota every instance is back to per-request
//! scripts, so the cap holds exactly), when another instance wants the money, when the
//! key is disabled, expired or gone, when it has been idle, and on shutdown.

use crate::store::{Headroom, Limit, LimitKind, Micros, Reservation};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How leases behave; the defaults are the gateway's.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// Whether leases are taken at all (off: one script per request, always).
    pub enabled: bool,
    /// A lease not renewed for this long is reclaimed by Redis (a crashed instance's).
    pub ttl_secs: u64,
    /// How often a held lease is renewed (and the key's status read again).
    pub renew_every: Duration,
    /// Longest a settled charge waits in memory before it is sent.
    pub flush_after: Duration,
    /// Charges one batch carries at most.
    pub batch_max: usize,
    /// Reserves per second on one key that make a lease worth taking.
    pub lease_after: u32,
    /// A lease unused for this long is given back.
    pub idle_after: Duration,
    /// After a lease was refused, wanted elsewhere or drained, per-request scripts for
    /// this long before another is taken.
    pub cooldown: Duration,
    /// A lease is sized to this much of the instance's recent reservations.
    pub rate_window: Duration,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            enabled: true,
            ttl_secs: 10,
            renew_every: Duration::from_secs(1),
            flush_after: Duration::from_millis(10),
            batch_max: 256,
            lease_after: 16,
            idle_after: Duration::from_secs(2),
            cooldown: Duration::from_secs(5),
            rate_window: Duration::from_secs(1),
        }
    }
}

/// A lease must cover this many of the key's largest recent requests to be worth holding.
const MIN_REQUESTS: Micros = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    Leasing,
    Draining,
}

/// A reserve, tried in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    Granted(Reservation),
    /// The lease is short of this request: grow it now (one round trip), then try again.
    TopUp,
    /// Not served from a lease: one script.
    Script,
}

/// Settled charges sent together, numbered per lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub seq: u64,
    pub charge: Micros,
    /// The usage records, a JSON array ('' when none).
    pub records: String,
}

/// What one call of `gw_lease_v3` sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub batch: Option<Batch>,
    pub target: Micros,
    pub floor: Micros,
    /// What requests hold (and settled charges not in the batch) when it is sent.
    pub held: Micros,
}

/// What it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// `enabled`, `disabled`, or empty when the key is gone.
    pub status: String,
    pub lease: Micros,
    /// Seconds the key stays valid; `None`: no expiry.
    pub left: Option<i64>,
    pub limited: bool,
    pub wanted: bool,
    /// The key's cap and the money nobody holds under it, once this call is applied
    /// (`None`: no cap).
    pub quota: Option<(Micros, Micros)>,
}

#[derive(Debug)]
pub struct KeyLease {
    pub mode: Mode,
    granted: Micros,
    cap: Micros,
    limited: bool,
    /// The key's cap and the money nobody held under it at the last reply.
    quota: Option<(Micros, Micros)>,
    usable_until: Option<Instant>,
    holds: HashMap<String, (Micros, Instant)>,
    held: Micros,
    pending: Vec<String>,
    pending_charge: Micros,
    oldest_pending: Option<Instant>,
    batch: Option<Batch>,
    next_seq: u64,
    pub syncing: bool,
    last_sync: Option<Instant>,
    retry_at: Option<Instant>,
    failures: u32,
    last_reserve: Instant,
    cooldown_until: Option<Instant>,
    /// Grants of the current rate window (start, count, sum) and of the last one.
    window: (Instant, u32, Micros),
    last_window: (u32, Micros),
    max_grant: Micros,
}

fn ttl_instant(now: Instant, ttl_secs: u64) -> Instant {
    now + Duration::from_secs(ttl_secs.min(10 * 365 * 86_400))
}

impl KeyLease {
    pub fn new(now: Instant) -> KeyLease {
        KeyLease {
            mode: Mode::Off,
            granted: 0,
            cap: 0,
            limited: true,
            quota: None,
            usable_until: None,
            holds: HashMap::new(),
            held: 0,
            pending: Vec::new(),
            pending_charge: 0,
            oldest_pending: None,
            batch: None,
            next_seq: 1,
            syncing: false,
            last_sync: None,
            retry_at: None,
            failures: 0,
            last_reserve: now,
            cooldown_until: None,
            window: (now, 0, 0),
            last_window: (0, 0),
            max_grant: 0,
        }
    }

    /// What the key's cap leaves, as this instance can tell without asking: the money
    /// nobody held at the last reply, plus what of the lease its requests have not taken
    /// (other instances' leases count as gone).
    pub fn headroom(&self) -> Headroom {
        let mut room = Headroom::default();
        if let Some((limit, free)) = self.quota {
            let unused = (self.granted - self.committed()).max(0);
            room.money_limit(Limit::key(LimitKind::Quota), limit, free + unused);
        }
        room
    }

    pub fn committed(&self) -> Micros {
        self.held + self.pending_charge + self.batch.as_ref().map_or(0, |b| b.charge)
    }

    /// Grants per rate window: the larger of the last window's and the current one's.
    fn rate(&self) -> Micros {
        self.last_window.1.max(self.window.2)
    }

    /// Counts a grant (local or by script): the lease is sized by them, and enough of
    /// them on a key without a lease make one worth taking.
    pub fn note_grant(&mut self, amount: Micros, now: Instant, opts: &LeaseOptions) {
        self.last_reserve = now;
        let age = now.duration_since(self.window.0);
        if age >= opts.rate_window {
            // The window before this one: the one that ends now, unless it ended long ago.
            self.last_window = match age < opts.rate_window.saturating_mul(2) {
                true => (self.window.1, self.window.2),
                false => (0, 0),
            };
            self.max_grant = 0;
            self.window = (now, 0, 0);
        }
        self.window.1 += 1;
        self.window.2 = self.window.2.saturating_add(amount.max(0));
        self.max_grant = self.max_grant.max(amount);
    }

    /// Whether an instance without a lease should take one now: the key is busy now (a
    /// grant within `idle_after`, and enough of them within the last rate windows).
    pub fn wants_lease(&self, now: Instant, opts: &LeaseOptions) -> bool {
        opts.enabled
            && self.mode == Mode::Off
            && now.duration_since(self.last_reserve) < opts.idle_after
            && self.recent_grants(now, opts) >= opts.lease_after
            && self.cooldown_until.is_none_or(|t| now >= t)
    }

    /// Grants in the current rate window and the one before, as seen at `now`: the
    /// windows only roll over at a grant, so an idle key's counts are old ones.
    fn recent_grants(&self, now: Instant, opts: &LeaseOptions) -> u32 {
        let age = now.duration_since(self.window.0);
        if age >= opts.rate_window.saturating_mul(2) {
            0
        } else if age >= opts.rate_window {
            self.window.1
        } else {
            self.window.1.max(self.last_window.0)
        }
    }

    fn purge(&mut self, now: Instant) {
        let before = self.holds.len();
        self.holds.retain(|_, (_, until)| *until > now);
        if self.holds.len() != before {
            self.held = self.holds.values().map(|(a, _)| *a).sum();
        }
    }

    /// A reserve served from the lease when it can be.
    pub fn try_reserve(
        &mut self,
        key_id: &str,
        rid: &str,
        max: Micros,
        ttl_secs: u64,
        now: Instant,
        opts: &LeaseOptions,
    ) -> Local {
        if let Some((amount, _)) = self.holds.get(rid) {
            return Local::Granted(Reservation {
                id: rid.to_string(),
                key_id: key_id.to_string(),
                amount: *amount,
            });
        }
        if self.mode != Mode::Leasing || self.usable_until.is_none_or(|t| now >= t) {
            return Local::Script;
        }
        self.purge(now);
        if self.limited && self.cap - self.committed() < max {
            // Worth a round trip only while the key has room for more than this one.
            return if self.granted >= MIN_REQUESTS.saturating_mul(max) {
                Local::TopUp
            } else {
                Local::Script
            };
        }
        self.holds
            .insert(rid.to_string(), (max, ttl_instant(now, ttl_secs)));
        self.held += max;
        self.note_grant(max, now, opts);
        Local::Granted(Reservation {
            id: rid.to_string(),
            key_id: key_id.to_string(),
            amount: max,
        })
    }

    /// Pushes a local hold's expiry; `false` if `rid` is not held here.
    pub fn extend(&mut self, rid: &str, ttl_secs: u64, now: Instant) -> bool {
        match self.holds.get_mut(rid) {
            Some((_, until)) => {
                if *until > now {
                    *until = (*until).max(ttl_instant(now, ttl_secs));
                }
                true
            }
            None => false,
        }
    }

    /// Settles a local hold: its charge (and record) wait for the next batch. `false` if
    /// `rid` is not held here.
    pub fn settle(
        &mut self,
        rid: &str,
        actual: Micros,
        record: Option<String>,
        now: Instant,
    ) -> bool {
        let Some((amount, _)) = self.holds.remove(rid) else {
            return false;
        };
        self.held -= amount;
        self.pending_charge += actual.max(0);
        if let Some(r) = record {
            self.pending.push(r);
        } else if actual > 0 {
            // A charge without a record still needs a batch.
            self.pending.push(String::new());
        }
        if self.pending_charge > 0 || !self.pending.is_empty() {
            self.oldest_pending.get_or_insert(now);
        }
        true
    }

    /// Drops a local hold without a charge (its settle went to Redis by script).
    pub fn release(&mut self, rid: &str) {
        if let Some((amount, _)) = self.holds.remove(rid) {
            self.held -= amount;
        }
    }

    fn has_pending(&self) -> bool {
        self.oldest_pending.is_some()
    }

    /// Charges settled here that Redis has not confirmed yet.
    pub fn unsent(&self) -> bool {
        self.has_pending() || self.batch.is_some()
    }

    /// Whether Redis holds money for this instance on the key.
    pub fn has_lease(&self) -> bool {
        self.granted > 0
    }

    /// Whether `rid` is a hold of this lease.
    pub fn holds(&self, rid: &str) -> bool {
        self.holds.contains_key(rid)
    }

    /// Whether the background sync should call Redis for this key now.
    pub fn due(&self, now: Instant, closing: bool, opts: &LeaseOptions) -> bool {
        if self.syncing || self.retry_at.is_some_and(|t| now < t) {
            return false;
        }
        if self.batch.is_some() {
            return true;
        }
        if self.has_pending()
            && (self.pending.len() >= opts.batch_max
                || self
                    .oldest_pending
                    .is_some_and(|t| now.duration_since(t) >= opts.flush_after))
        {
            return true;
        }
        let renew = self
            .last_sync
            .is_none_or(|t| now.duration_since(t) >= opts.renew_every);
        match self.mode {
            Mode::Off => !closing && self.wants_lease(now, opts),
            Mode::Leasing => {
                closing
                    || renew
                    || now.duration_since(self.last_reserve) >= opts.idle_after
                    || (self.limited && self.cap - self.committed() < self.rate() / 2)
            }
            Mode::Draining => self.granted > self.committed() || (renew && self.granted > 0),
        }
    }

    /// Whether nothing is left here: no lease, no holds, nothing to send.
    pub fn is_done(&self, now: Instant) -> bool {
        self.mode == Mode::Off
            && self.granted == 0
            && self.holds.is_empty()
            && !self.has_pending()
            && self.batch.is_none()
            && !self.syncing
            && now.duration_since(self.last_reserve) >= Duration::from_secs(60)
    }

    /// What the next call sends, `need` being the request waiting for a top-up (0 when
    /// none). Starts a batch of everything settled so far unless one awaits its reply.
    pub fn plan(&mut self, need: Micros, now: Instant, closing: bool, opts: &LeaseOptions) -> Plan {
        if self.batch.is_none() && self.has_pending() {
            let records: Vec<&str> = self
                .pending
                .iter()
                .map(String::as_str)
                .filter(|r| !r.is_empty())
                .collect();
            let records = if records.is_empty() {
                String::new()
            } else {
                format!("[{}]", records.join(","))
            };
            self.batch = Some(Batch {
                seq: self.next_seq,
                charge: self.pending_charge,
                records,
            });
            self.next_seq += 1;
            self.pending.clear();
            self.pending_charge = 0;
            self.oldest_pending = None;
        }
        let charge = self.batch.as_ref().map_or(0, |b| b.charge);
        let after = self.committed() - charge;
        let idle = now.duration_since(self.last_reserve) >= opts.idle_after;
        let growing = matches!(self.mode, Mode::Leasing | Mode::Off) && !idle && !closing;
        let target = if !self.limited && self.mode != Mode::Off {
            0
        } else if growing {
            after
                .saturating_add(need)
                .saturating_add(self.rate())
                .saturating_add(MIN_REQUESTS.saturating_mul(self.max_grant))
        } else {
            after
        };
        if target < self.cap - charge {
            self.cap = self.committed().max(target + charge);
        }
        Plan {
            batch: self.batch.clone(),
            target,
            floor: (self.cap - charge).max(0),
            held: after,
        }
    }

    /// Applies a reply to a call sent at `sent`.
    pub fn apply(&mut self, reply: &Reply, sent: Instant, closing: bool, opts: &LeaseOptions) {
        let now = Instant::now();
        self.syncing = false;
        self.failures = 0;
        self.retry_at = None;
        self.batch = None;
        self.last_sync = Some(now);
        // The floor sent keeps what is committed covered; if Redis had to give less (the
        // lease expired while this instance could not reach it, and the money was taken),
        // nothing new is served from it until it has grown again.
        self.granted = reply.lease;
        self.cap = reply.lease;
        self.limited = reply.limited;
        self.quota = reply.quota;
        let mut until = sent + Duration::from_secs(opts.ttl_secs.saturating_sub(2));
        if let Some(left) = reply.left {
            until = until.min(sent + Duration::from_secs(left.saturating_sub(1).max(0) as u64));
        }
        self.usable_until = Some(until);
        let usable = reply.status == "enabled" && reply.left.is_none_or(|l| l > 1);
        let worth = !self.limited
            || reply.lease - self.committed() >= MIN_REQUESTS.saturating_mul(self.max_grant.max(1));
        let idle = now.duration_since(self.last_reserve) >= opts.idle_after;
        let cool = || Some(now + opts.cooldown);
        self.mode = if closing || !opts.enabled {
            Mode::Draining
        } else if !usable || reply.wanted || (!worth && !idle) {
            if self.mode != Mode::Draining {
                self.cooldown_until = cool();
            }
            Mode::Draining
        } else if idle || self.mode == Mode::Draining {
            Mode::Draining
        } else {
            Mode::Leasing
        };
        if self.mode == Mode::Draining
            && self.granted == 0
            && self.holds.is_empty()
            && !self.has_pending()
        {
            self.mode = Mode::Off;
        }
    }

    /// A call that failed: the batch stays, to be sent again as it is.
    pub fn failed(&mut self, now: Instant) {
        self.syncing = false;
        self.failures = self.failures.saturating_add(1);
        let wait = Duration::from_millis(50u64.saturating_mul(1 << self.failures.min(7)));
        self.retry_at = Some(now + wait.min(Duration::from_secs(5)));
    }

    /// Stops serving from the lease after the key changed on this instance (an admin
    /// update): the next call reads it again.
    pub fn stale(&mut self) {
        self.usable_until = None;
        self.last_sync = None;
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
