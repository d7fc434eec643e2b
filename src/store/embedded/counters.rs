//! The counters a key and a group both have in the embedded store's ledger: money held
//! over the lifetime cap, spend per calendar period (settled and held), tokens per
//! minute and requests in flight.

use crate::store::policy::{PeriodKind, Periods, Standing};
use crate::store::Micros;
use std::collections::HashMap;

/// One period's spend: settled (durable) and held.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Spend {
    pub(super) end: i64,
    pub(super) settled: Micros,
    pub(super) held: Micros,
}

/// Minutes whose token counts are kept (a ring: the current one and a few before).
const MINUTE_SLOTS: usize = 4;

/// Period counters are kept this long after their period ended: a caller's clock may
/// lag the store's.
pub const STALE_PERIOD: i64 = 86_400;

fn slot(minute: i64) -> usize {
    minute.rem_euclid(MINUTE_SLOTS as i64) as usize
}

/// The counters a key and a group both have.
pub(super) struct Counters {
    /// Money held over the lifetime cap.
    pub(super) held: Micros,
    pub(super) periods: HashMap<String, Spend>,
    /// (unix minute, tokens counted in it).
    pub(super) minutes: [(i64, u64); MINUTE_SLOTS],
    pub(super) in_flight: u32,
}

impl Counters {
    pub(super) fn new(periods: Vec<(String, i64, Micros)>) -> Counters {
        Counters {
            held: 0,
            periods: periods
                .into_iter()
                .map(|(label, end, settled)| {
                    let s = Spend {
                        end,
                        settled,
                        held: 0,
                    };
                    (label, s)
                })
                .collect(),
            minutes: [(i64::MIN, 0); MINUTE_SLOTS],
            in_flight: 0,
        }
    }

    pub(super) fn tokens(&self, minute: i64) -> u64 {
        let s = self.minutes[slot(minute)];
        if s.0 == minute {
            s.1
        } else {
            0
        }
    }

    pub(super) fn add_tokens(&mut self, minute: i64, n: u64) {
        if n == 0 {
            return;
        }
        let s = &mut self.minutes[slot(minute)];
        if s.0 < minute {
            *s = (minute, 0);
        }
        if s.0 == minute {
            s.1 = s.1.saturating_add(n);
        }
    }

    pub(super) fn drop_tokens(&mut self, minute: i64, n: u64) {
        let s = &mut self.minutes[slot(minute)];
        if s.0 == minute {
            s.1 = s.1.saturating_sub(n);
        }
    }

    /// Settled plus held in the period labelled `label`.
    pub(super) fn spent(&self, label: &str) -> Micros {
        self.periods.get(label).map_or(0, |s| s.settled + s.held)
    }

    pub(super) fn period(&mut self, label: &str, end: i64, now: i64) -> &mut Spend {
        if !self.periods.contains_key(label) {
            // A new period: those long over go (once a period, not once a request).
            self.periods
                .retain(|_, s| s.held != 0 || s.end > now - STALE_PERIOD);
            self.periods.insert(
                label.to_string(),
                Spend {
                    end,
                    ..Spend::default()
                },
            );
        }
        self.periods.get_mut(label).expect("inserted above")
    }

    /// `counted`: the hold is a request in flight (see `Ask::in_flight`).
    pub(super) fn hold(
        &mut self,
        labels: &[(String, i64)],
        amount: Micros,
        now: i64,
        counted: bool,
    ) {
        self.held += amount;
        for (label, end) in labels {
            self.period(label, *end, now).held += amount;
        }
        if counted {
            self.in_flight += 1;
        }
    }

    pub(super) fn release(&mut self, labels: &[(String, i64)], amount: Micros, counted: bool) {
        self.held -= amount;
        for (label, _) in labels {
            if let Some(s) = self.periods.get_mut(label) {
                s.held -= amount;
            }
        }
        if counted {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
    }

    pub(super) fn charge(&mut self, labels: &[(String, i64)], actual: Micros, now: i64) {
        for (label, end) in labels {
            self.period(label, *end, now).settled += actual;
        }
    }

    pub(super) fn standing(&self, periods: &Periods, minute: i64) -> Standing {
        let at = |kind: PeriodKind| self.spent(&periods.get(kind).label());
        Standing {
            day: at(PeriodKind::Day),
            week: at(PeriodKind::Week),
            month: at(PeriodKind::Month),
            minute_tokens: self.tokens(minute),
            in_flight: self.in_flight,
        }
    }
}
