//! What a key has left under its limits, told to its caller on every answer in OpenAI's
//! rate-limit headers (README, "Rate-limit headers"):
//! - `x-ratelimit-{limit,remaining,reset}-requests` from the key's `rpm`, as the request's
//!   own count left it ([`crate::store::Store::rate_take`]);
//! - `x-ratelimit-{limit,remaining,reset}-tokens` from `tpm` (the key's, or its group's
//!   when that leaves fewer tokens), and `x-ratelimit-{limit,remaining}-budget` (plus
//!   `-reset-budget` for a period budget) from the money limit that leaves the least, in
//!   USD, both as the store's reserve counted them ([`crate::store::Headroom`]).
//!
//! Nothing is read for them beyond what the checks count anyway. A request that reserves
//! nothing (a model list, a refusal before its reserve) tells the tokens and budget the
//! key's last reserve on this instance counted, moved on to a fresh window where one has
//! begun since; before any reserve there is nothing to tell, and nothing is sent.

use crate::store::{Ask, Headroom, LimitKind, Micros, RateCount, Scope};
use pingora::http::ResponseHeader;
use std::time::{Duration, Instant};

/// A limit counted in a window: its size, what is left, and when the window ends. Ends
/// are instants of the process, worked out from the limits' clock when counted, so an
/// answer written later (a stream's head) says how long is left then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub limit: u64,
    pub remaining: u64,
    pub resets_at: Instant,
}

/// The instant `end_ms` is at on the limits' clock, which read `now_ms` at `base`.
fn instant_of(end_ms: i64, now_ms: i64, base: Instant) -> Instant {
    base + Duration::from_millis((end_ms - now_ms).max(0) as u64)
}

/// How long from `now` to `at`, in milliseconds (0 once it is past).
fn until(at: Instant, now: Instant) -> i64 {
    at.saturating_duration_since(now).as_millis() as i64
}

impl Window {
    /// As it stands at `now`: a window that has ended is whole again.
    fn at(self, now: Instant) -> Window {
        if now >= self.resets_at {
            Window {
                remaining: self.limit,
                ..self
            }
        } else {
            self
        }
    }
}

/// The money limit that leaves the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub limit: Micros,
    pub left: Micros,
    /// When its period ends; `None` for a lifetime cap.
    pub resets_at: Option<Instant>,
}

impl Budget {
    fn at(self, now: Instant) -> Budget {
        match self.resets_at {
            Some(end) if now >= end => Budget {
                left: self.limit,
                resets_at: None,
                ..self
            },
            _ => self,
        }
    }
}

/// What one answer tells of its key's limits; empty for a key without limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    pub requests: Option<Window>,
    pub tokens: Option<Window>,
    pub budget: Option<Budget>,
}

pub const LIMIT_REQUESTS: &str = "x-ratelimit-limit-requests";
pub const REMAINING_REQUESTS: &str = "x-ratelimit-remaining-requests";
pub const RESET_REQUESTS: &str = "x-ratelimit-reset-requests";
pub const LIMIT_TOKENS: &str = "x-ratelimit-limit-tokens";
pub const REMAINING_TOKENS: &str = "x-ratelimit-remaining-tokens";
pub const RESET_TOKENS: &str = "x-ratelimit-reset-tokens";
pub const LIMIT_BUDGET: &str = "x-ratelimit-limit-budget";
pub const REMAINING_BUDGET: &str = "x-ratelimit-remaining-budget";
pub const RESET_BUDGET: &str = "x-ratelimit-reset-budget";

impl Room {
    /// The request's own count against the key's `rpm`, made at `now_ms` on the
    /// limits' clock.
    pub fn count_requests(&mut self, rpm: u32, count: &RateCount, now_ms: i64) {
        self.count_requests_at(rpm, count, now_ms, Instant::now())
    }

    fn count_requests_at(&mut self, rpm: u32, count: &RateCount, now_ms: i64, base: Instant) {
        self.requests = count.remaining.map(|left| Window {
            limit: rpm.into(),
            remaining: left.into(),
            resets_at: instant_of(count.resets_at_ms, now_ms, base),
        });
    }

    /// What a reserve made with `ask` counted, at `now_ms` on the limits' clock: the
    /// minute its tokens count in, and the period (of the key's calendar or of its
    /// group's) the tightest budget belongs to.
    pub fn counted(room: &Headroom, ask: &Ask, now_ms: i64) -> Room {
        Room::counted_at(room, ask, now_ms, Instant::now())
    }

    fn counted_at(room: &Headroom, ask: &Ask, now_ms: i64, base: Instant) -> Room {
        let tokens = room.tokens.map(|t| Window {
            limit: t.limit,
            remaining: t.left,
            resets_at: instant_of((ask.minute() + 1) * 60_000, now_ms, base),
        });
        let budget = room.money.map(|(which, m)| {
            let periods = match which.scope {
                Scope::Key => Some(&ask.periods),
                Scope::Group => ask.group.as_ref().map(|g| &g.periods),
            };
            let ends = match which.kind {
                LimitKind::Budget(kind) => periods.map(|p| p.get(kind).end * 1000),
                _ => None,
            };
            Budget {
                limit: m.limit,
                left: m.left.max(0),
                resets_at: ends.map(|end| instant_of(end, now_ms, base)),
            }
        });
        Room {
            requests: None,
            tokens,
            budget,
        }
    }

    /// This answer's own counts, and for what it did not count, `last`'s (the key's last
    /// reserve).
    pub fn or(self, last: Room) -> Room {
        Room {
            requests: self.requests.or(last.requests),
            tokens: self.tokens.or(last.tokens),
            budget: self.budget.or(last.budget),
        }
    }

    /// Writes the headers, with the time left to each reset as of now.
    pub fn write(&self, h: &mut ResponseHeader) {
        self.write_at(h, Instant::now());
    }

    fn write_at(&self, h: &mut ResponseHeader, now: Instant) {
        let mut put = |name: &'static str, value: String| {
            let _ = h.insert_header(name, value);
        };
        let window = |w: Window| (w.limit, w.remaining, reset_text(until(w.resets_at, now)));
        if let Some((limit, left, reset)) = self.requests.map(|w| window(w.at(now))) {
            put(LIMIT_REQUESTS, limit.to_string());
            put(REMAINING_REQUESTS, left.to_string());
            put(RESET_REQUESTS, reset);
        }
        if let Some((limit, left, reset)) = self.tokens.map(|w| window(w.at(now))) {
            put(LIMIT_TOKENS, limit.to_string());
            put(REMAINING_TOKENS, left.to_string());
            put(RESET_TOKENS, reset);
        }
        if let Some(b) = self.budget.map(|b| b.at(now)) {
            put(LIMIT_BUDGET, crate::protocol::usd_text(b.limit));
            put(REMAINING_BUDGET, crate::protocol::usd_text(b.left));
            if let Some(end) = b.resets_at {
                put(RESET_BUDGET, reset_text(until(end, now)));
            }
        }
    }
}

/// A time to wait as OpenAI writes it (Go's duration text, to the millisecond): `120ms`,
/// `1s`, `1.5s`, `6m0s`, `1h0m0s`; `0s` when nothing is left to wait.
pub fn reset_text(ms: i64) -> String {
    let ms = ms.max(0);
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let seconds = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:03}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Left, Limit, PeriodKind};

    #[test]
    fn resets_are_written_as_openai_writes_them() {
        for (ms, text) in [
            (0, "0s"),
            (-5, "0s"),
            (120, "120ms"),
            (1000, "1s"),
            (1500, "1.5s"),
            (17_280, "17.28s"),
            (59_999, "59.999s"),
            (60_000, "1m0s"),
            (360_000, "6m0s"),
            (3_600_000, "1h0m0s"),
            (90_061_500, "25h1m1.5s"),
        ] {
            assert_eq!(reset_text(ms), text, "{ms}");
        }
    }

    /// The headers written `after_ms` after the room was counted (a little before: the
    /// count's instants are taken when it is made).
    fn header(room: &Room, counted: Instant, after_ms: u64) -> ResponseHeader {
        let mut h = ResponseHeader::build(200, None).unwrap();
        room.write_at(&mut h, counted + Duration::from_millis(after_ms));
        h
    }

    fn get<'a>(h: &'a ResponseHeader, name: &str) -> Option<&'a str> {
        h.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn a_key_without_limits_gets_no_header() {
        let h = header(&Room::default(), Instant::now(), 0);
        assert!(h
            .headers
            .keys()
            .all(|k| !k.as_str().starts_with("x-ratelimit")));
    }

    #[test]
    fn a_reserve_s_count_becomes_tokens_and_budget() {
        let at = 1_795_478_400 + 15; // 15 s into a minute and a UTC day
        let ask = Ask::money(10, 20, at);
        let room = Headroom {
            tokens: Some(Left {
                limit: 1000,
                left: 400,
            }),
            money: Some((
                Limit::key(LimitKind::Budget(PeriodKind::Day)),
                Left {
                    limit: 2_000_000,
                    left: 1_250_000,
                },
            )),
        };
        let counted = Instant::now();
        let r = Room::counted_at(&room, &ask, at * 1000 + 500, counted);
        let h = header(&r, counted, 0);
        assert_eq!(get(&h, LIMIT_TOKENS), Some("1000"));
        assert_eq!(get(&h, REMAINING_TOKENS), Some("400"));
        assert_eq!(get(&h, RESET_TOKENS), Some("44.5s"));
        assert_eq!(get(&h, LIMIT_BUDGET), Some("2"));
        assert_eq!(get(&h, REMAINING_BUDGET), Some("1.25"));
        assert_eq!(get(&h, RESET_BUDGET), Some("23h59m44.5s"));
        assert_eq!(get(&h, LIMIT_REQUESTS), None);
        // A minute later the tokens' window is whole again.
        let h = header(&r, counted, 60_000);
        assert_eq!(get(&h, REMAINING_TOKENS), Some("1000"));
        assert_eq!(get(&h, RESET_TOKENS), Some("0s"));
    }

    #[test]
    fn a_lifetime_cap_has_no_reset() {
        let ask = Ask::money(0, 0, 100);
        let room = Headroom {
            tokens: None,
            money: Some((
                Limit::key(LimitKind::Quota),
                Left {
                    limit: 5_000_000,
                    left: -3,
                },
            )),
        };
        let h = header(&Room::counted(&room, &ask, 100_000), Instant::now(), 0);
        assert_eq!(get(&h, LIMIT_BUDGET), Some("5"));
        assert_eq!(get(&h, REMAINING_BUDGET), Some("0"));
        assert_eq!(get(&h, RESET_BUDGET), None);
    }

    #[test]
    fn requests_count_down_and_say_when_the_minute_ends() {
        let mut r = Room::default();
        let counted = Instant::now();
        r.count_requests_at(
            3,
            &RateCount {
                admitted: false,
                remaining: Some(0),
                resets_at_ms: 120_000,
            },
            119_880,
            counted,
        );
        let h = header(&r, counted, 0);
        assert_eq!(get(&h, LIMIT_REQUESTS), Some("3"));
        assert_eq!(get(&h, REMAINING_REQUESTS), Some("0"));
        assert_eq!(get(&h, RESET_REQUESTS), Some("120ms"));
    }
}
