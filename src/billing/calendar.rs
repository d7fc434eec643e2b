//! The gateway's clock and calendar: what a request's [`Ask`] is built from.
//!
//! Budgets reset on the calendar of the key's time zone (or the group's), else the
//! gateway's (`limits.time_zone`). The periods of a zone change only at a boundary, so
//! they are worked out once per zone and reused until the next one.

use crate::store::policy::{periods, time_zone, GroupAsk};
use crate::store::{Ask, GroupRecord, KeyRecord, Micros, Periods};
use jiff::tz::TimeZone;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

/// Unix seconds, which tests can move or stop (the clock a budget's day and a tpm
/// minute are read from).
#[derive(Debug, Default)]
pub struct Clock {
    offset: AtomicI64,
    /// Non-zero: `now()` reads this and stands still.
    pinned: AtomicI64,
}

impl Clock {
    pub fn now(&self) -> i64 {
        match self.pinned.load(Ordering::Relaxed) {
            0 => crate::ids::now_secs() + self.offset.load(Ordering::Relaxed),
            at => at,
        }
    }

    /// [`Clock::now`] in milliseconds (a pinned clock stands at its second's start): the
    /// clock the per-minute windows of `rpm` and `tpm` are counted on.
    pub fn now_ms(&self) -> i64 {
        match self.pinned.load(Ordering::Relaxed) {
            0 => crate::ids::now_ms() + self.offset.load(Ordering::Relaxed) * 1000,
            at => at * 1000,
        }
    }

    /// Moves the clock so that `now()` reads `at`, and runs on from there.
    pub fn set(&self, at: i64) {
        self.pinned.store(0, Ordering::Relaxed);
        self.offset
            .store(at - crate::ids::now_secs(), Ordering::Relaxed);
    }

    /// Stops the clock at `at` (a burst that must stay in one minute).
    pub fn pin(&self, at: i64) {
        self.pinned.store(at, Ordering::Relaxed);
    }
}

pub struct Calendar {
    pub clock: Clock,
    /// The gateway's zone (`limits.time_zone`), by name; a reload may change it.
    default: RwLock<(String, TimeZone)>,
    /// Zone name (`""`: the gateway's) → the periods last worked out for it.
    known: RwLock<HashMap<String, Periods>>,
}

impl Calendar {
    /// `default`: the gateway's zone, already validated (unknown names fall back to UTC).
    pub fn new(default: &str) -> Calendar {
        let c = Calendar {
            clock: Clock::default(),
            default: RwLock::new((String::new(), TimeZone::UTC)),
            known: RwLock::new(HashMap::new()),
        };
        c.set_default(default);
        c
    }

    /// Makes `name` the gateway's zone (a reload's `limits.time_zone`).
    pub fn set_default(&self, name: &str) {
        let mut d = self.default.write();
        if d.0 != name {
            *d = (name.to_string(), time_zone(name).unwrap_or(TimeZone::UTC));
            self.known.write().remove("");
        }
    }

    /// The periods at `at` in the zone named `zone` (the gateway's when `None` or unknown).
    pub fn periods(&self, zone: Option<&str>, at: i64) -> Periods {
        let name = zone.unwrap_or("");
        if let Some(p) = self.known.read().get(name) {
            if p.day.start.max(p.week.start).max(p.month.start) <= at && at < p.next_boundary() {
                return *p;
            }
        }
        let tz = zone
            .and_then(time_zone)
            .unwrap_or_else(|| self.default.read().1.clone());
        let p = periods(&tz, at);
        let mut known = self.known.write();
        if known.len() > 1024 {
            known.clear();
        }
        known.insert(name.to_string(), p);
        p
    }

    /// What a request of `key` (in `group`, as last read) asks: `min..=max` of money and
    /// `tokens` against tpm, now.
    pub fn ask(
        &self,
        key: &KeyRecord,
        group: Option<&GroupRecord>,
        min: Micros,
        max: Micros,
        tokens: u64,
    ) -> Ask {
        let at = self.clock.now();
        let group = key.group.as_ref().map(|id| GroupAsk {
            id: id.clone(),
            periods: self.periods(group.and_then(|g| g.policy.time_zone.as_deref()), at),
        });
        Ask {
            min,
            max,
            tokens,
            at,
            periods: self.periods(key.policy.time_zone.as_deref(), at),
            group,
            in_flight: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_reused_within_and_renewed_across_a_boundary() {
        let c = Calendar::new("Europe/Paris");
        let p = c.periods(None, 1_764_000_000);
        assert_eq!(c.periods(None, 1_764_000_001), p);
        let next = c.periods(None, p.day.end);
        assert_eq!(next.day.start, p.day.end);
        // Another zone is worked out on its own.
        assert_ne!(c.periods(Some("Asia/Tokyo"), p.day.end).day, next.day);
        // A reload's zone applies at once.
        c.set_default("Asia/Tokyo");
        assert_eq!(
            c.periods(None, p.day.end),
            c.periods(Some("Asia/Tokyo"), p.day.end)
        );
    }

    #[test]
    fn the_clock_can_be_set() {
        let c = Clock::default();
        c.set(1_000);
        assert!((1_000..1_005).contains(&c.now()));
        c.pin(5_000);
        assert_eq!(c.now(), 5_000);
        c.set(7_000);
        assert!((7_000..7_005).contains(&c.now()));
    }
}
