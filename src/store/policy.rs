//! Limits beyond a key's lifetime cap: spend budgets per calendar period, tokens per
//! minute and requests in flight, on a key and on the group it belongs to.
//!
//! Every limit is a counter the reserve checks and holds against, with the lifetime cap,
//! in one atomic step (see [`super::Store::reserve_ask`]), and the settle replaces the
//! hold by what was spent. A counter's identity holds its period (a day's counter is
//! named by the second the day starts at in its time zone), so a budget is fresh at the
//! boundary without any job having to run; the store lets old counters expire.
//!
//! The calendar is worked out here, not in the store: [`periods`] gives the day, ISO week
//! and month that contain an instant in a time zone, daylight saving included (a day is
//! 23 or 25 hours long when the clocks change).

use super::{KeyStatus, Micros};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde::{Deserialize, Serialize};

/// What a key or a group may carry beyond its lifetime cap. `None` = no such limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_day: Option<Micros>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_week: Option<Micros>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_month: Option<Micros>,
    /// Tokens per minute: input estimate plus output reserved, settled to the real count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// Requests and streams in flight at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// IANA name the periods follow (`Europe/Paris`); `None` = the gateway's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// What the key's (or group's) requests are charged per micro-USD of provider cost,
    /// in parts per million (a reseller's 1.2 = 1,200,000); `None` = 1. A key's own
    /// multiplier takes precedence over its group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_multiplier_ppm: Option<u64>,
}

impl Policy {
    /// Whether any limit is set (a time zone alone limits nothing).
    pub fn limits_anything(&self) -> bool {
        self.budget_day.is_some()
            || self.budget_week.is_some()
            || self.budget_month.is_some()
            || self.tpm.is_some()
            || self.max_concurrent.is_some()
    }

    pub fn budget(&self, kind: PeriodKind) -> Option<Micros> {
        match kind {
            PeriodKind::Day => self.budget_day,
            PeriodKind::Week => self.budget_week,
            PeriodKind::Month => self.budget_month,
        }
    }
}

/// A partial update of a [`Policy`]: `None` leaves a field, `Some(None)` clears it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyPatch {
    pub budget_day: Option<Option<Micros>>,
    pub budget_week: Option<Option<Micros>>,
    pub budget_month: Option<Option<Micros>>,
    pub tpm: Option<Option<u64>>,
    pub max_concurrent: Option<Option<u32>>,
    pub time_zone: Option<Option<String>>,
    pub price_multiplier_ppm: Option<Option<u64>>,
}

impl PolicyPatch {
    pub fn apply(&self, p: &mut Policy) {
        fn set<T: Clone>(field: &mut Option<T>, v: &Option<Option<T>>) {
            if let Some(v) = v {
                *field = v.clone();
            }
        }
        set(&mut p.budget_day, &self.budget_day);
        set(&mut p.budget_week, &self.budget_week);
        set(&mut p.budget_month, &self.budget_month);
        set(&mut p.tpm, &self.tpm);
        set(&mut p.max_concurrent, &self.max_concurrent);
        set(&mut p.time_zone, &self.time_zone);
        set(&mut p.price_multiplier_ppm, &self.price_multiplier_ppm);
    }

    pub fn is_empty(&self) -> bool {
        *self == PolicyPatch::default()
    }
}

/// A group of keys (a team, a customer): its own lifetime cap and policy, which every
/// request of its keys must fit as well as the key's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// Chosen by the operator: 1–64 of `[A-Za-z0-9_.-]`.
    pub id: String,
    pub name: String,
    pub status: KeyStatus,
    /// Unix seconds.
    pub created_at: i64,
    pub quota_limit: Option<Micros>,
    /// Settled spend over the group's lifetime.
    pub quota_used: Micros,
    #[serde(default)]
    pub policy: Policy,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupPatch {
    pub name: Option<String>,
    pub status: Option<KeyStatus>,
    pub quota_limit: Option<Option<Micros>>,
    pub policy: PolicyPatch,
}

impl GroupPatch {
    pub fn apply(&self, g: &mut GroupRecord) {
        if let Some(v) = &self.name {
            g.name = v.clone();
        }
        if let Some(v) = self.status {
            g.status = v;
        }
        if let Some(v) = self.quota_limit {
            g.quota_limit = v;
        }
        self.policy.apply(&mut g.policy);
    }
}

/// Whether `id` may name a group.
pub fn valid_group_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeriodKind {
    Day,
    Week,
    Month,
}

impl PeriodKind {
    pub const ALL: [PeriodKind; 3] = [PeriodKind::Day, PeriodKind::Week, PeriodKind::Month];

    pub fn as_str(self) -> &'static str {
        match self {
            PeriodKind::Day => "day",
            PeriodKind::Week => "week",
            PeriodKind::Month => "month",
        }
    }
}

/// One calendar period: `[start, end)` in unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub kind: PeriodKind,
    pub start: i64,
    pub end: i64,
}

impl Period {
    /// The counter's name for this period: its kind and the second it starts at.
    pub fn label(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.start)
    }
}

/// The day, week (Monday to Sunday) and month that contain one instant, in one zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    pub day: Period,
    pub week: Period,
    pub month: Period,
}

impl Periods {
    pub fn get(&self, kind: PeriodKind) -> Period {
        match kind {
            PeriodKind::Day => self.day,
            PeriodKind::Week => self.week,
            PeriodKind::Month => self.month,
        }
    }

    /// The first second at which any of these periods ends.
    pub fn next_boundary(&self) -> i64 {
        self.day.end.min(self.week.end).min(self.month.end)
    }
}

/// The periods containing unix second `at` in `tz`. A day starts at local midnight (or
/// the first instant after it, where the clocks skip midnight), a week on Monday, a
/// month on its first day.
pub fn periods(tz: &TimeZone, at: i64) -> Periods {
    let ts = Timestamp::from_second(at).unwrap_or(Timestamp::UNIX_EPOCH);
    let date = ts.to_zoned(tz.clone()).date();
    let start = |d: Date| -> i64 {
        d.to_zoned(tz.clone())
            .map(|z| z.timestamp().as_second())
            .unwrap_or(at)
    };
    let after = |d: Date, span: jiff::Span| d.checked_add(span).unwrap_or(d);
    let monday = after(
        date,
        (-(date.weekday().to_monday_zero_offset() as i64)).days(),
    );
    let first = date.first_of_month();
    Periods {
        day: Period {
            kind: PeriodKind::Day,
            start: start(date),
            end: start(after(date, 1.day())),
        },
        week: Period {
            kind: PeriodKind::Week,
            start: start(monday),
            end: start(after(monday, 1.week())),
        },
        month: Period {
            kind: PeriodKind::Month,
            start: start(first),
            end: start(after(first, 1.month())),
        },
    }
}

/// The time zone named `name`, if the bundled database knows it (`UTC` always).
pub fn time_zone(name: &str) -> Option<TimeZone> {
    if name.eq_ignore_ascii_case("utc") {
        return Some(TimeZone::UTC);
    }
    TimeZone::get(name).ok()
}

/// Which of a request's scopes a limit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Key,
    Group,
}

/// A limit that refused a reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// The group's lifetime cap (a key's is [`super::ReserveDenied::QuotaExhausted`]).
    Quota,
    Budget(PeriodKind),
    Tpm,
    Concurrent,
    /// The key names a group that does not exist or is disabled.
    Group,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    pub scope: Scope,
    pub kind: LimitKind,
}

impl Limit {
    pub fn key(kind: LimitKind) -> Limit {
        Limit {
            scope: Scope::Key,
            kind,
        }
    }

    pub fn group(kind: LimitKind) -> Limit {
        Limit {
            scope: Scope::Group,
            kind,
        }
    }

    /// The name a refusal gives it in the error's `param`: `budget.day`, `tpm`,
    /// `max_concurrent`, `group.quota`, `group.budget.week`, `group.tpm`, `group`.
    pub fn param(&self) -> &'static str {
        use LimitKind::*;
        use PeriodKind::*;
        match (self.scope, self.kind) {
            (Scope::Key, Quota) => "quota",
            (Scope::Key, Budget(Day)) => "budget.day",
            (Scope::Key, Budget(Week)) => "budget.week",
            (Scope::Key, Budget(Month)) => "budget.month",
            (Scope::Key, Tpm) => "tpm",
            (Scope::Key, Concurrent) => "max_concurrent",
            (_, Group) => "group",
            (Scope::Group, Quota) => "group.quota",
            (Scope::Group, Budget(Day)) => "group.budget.day",
            (Scope::Group, Budget(Week)) => "group.budget.week",
            (Scope::Group, Budget(Month)) => "group.budget.month",
            (Scope::Group, Tpm) => "group.tpm",
            (Scope::Group, Concurrent) => "group.max_concurrent",
        }
    }

    /// Money limits refuse with 403, rate and concurrency with 429.
    pub fn is_money(&self) -> bool {
        matches!(
            self.kind,
            LimitKind::Quota | LimitKind::Budget(_) | LimitKind::Group
        )
    }
}

/// The group half of an [`Ask`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAsk {
    pub id: String,
    /// The periods now in the group's time zone.
    pub periods: Periods,
}

/// Everything one request asks of its key and its key's group, reserved at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// Money: grants `min(max, what every money limit leaves)` when that is `>= min`.
    pub min: Micros,
    pub max: Micros,
    /// Counted against `tpm` (input estimate plus the output limit asked), all or nothing.
    pub tokens: u64,
    /// The gateway's clock, unix seconds: the minute the tokens count in.
    pub at: i64,
    /// The periods now in the key's time zone.
    pub periods: Periods,
    /// The key's group as the caller read it: the store refuses with
    /// [`super::ReserveDenied::Stale`] when the key's group is another.
    pub group: Option<GroupAsk>,
    /// The hold is a request in flight, counted against `max_concurrent` (`false`: more
    /// money for a request that already counts, such as a realtime session's next block).
    pub in_flight: bool,
}

impl Ask {
    /// Money only, for a key in no group: periods in UTC at `at`.
    pub fn money(min: Micros, max: Micros, at: i64) -> Ask {
        Ask {
            min,
            max,
            tokens: 0,
            at,
            periods: periods(&TimeZone::UTC, at),
            group: None,
            in_flight: true,
        }
    }

    /// The minute `tokens` count in (unix minutes).
    pub fn minute(&self) -> i64 {
        self.at.div_euclid(60)
    }
}

#[cfg(test)]
impl Ask {
    /// [`Ask::money`] at the wall clock's now: a test's ask of a key in no group.
    pub(crate) fn money_now(min: Micros, max: Micros) -> Ask {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Ask::money(min, max, now)
    }
}

/// One request counted against a key's requests-per-minute limit ([`super::Store::rate_take`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateCount {
    pub admitted: bool,
    /// Requests the key may still make in this window after this one (`None`: the store
    /// cannot say).
    pub remaining: Option<u32>,
    /// Unix milliseconds at which the window ends and the count starts again.
    pub resets_at_ms: i64,
}

impl RateCount {
    /// The fixed minute windows both stores count `rpm` in: the window holding `now_ms`
    /// ends at the next whole minute.
    pub fn window_end_ms(now_ms: i64) -> i64 {
        (now_ms.div_euclid(60_000) + 1) * 60_000
    }
}

/// A limit's size and what is left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left<T> {
    pub limit: T,
    pub left: T,
}

/// Where the tightest limits of a key and its group stand, as the reserve that checked
/// them counted (after its hold when granted, as they were when refused): what a
/// request's answer tells its caller in `x-ratelimit-*` headers. Counted in the same
/// atomic step as the reserve, never read apart from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Headroom {
    /// `tpm` of the key or of its group, whichever leaves fewer tokens in the ask's minute.
    pub tokens: Option<Left<u64>>,
    /// The money limit (lifetime cap or period budget, of the key or of its group) that
    /// leaves the least, and which limit it is (a key's cap is `Limit::key(Quota)`).
    pub money: Option<(Limit, Left<Micros>)>,
}

impl Headroom {
    /// Counts one token limit in: kept when it leaves fewer than the one held.
    pub fn tokens_limit(&mut self, limit: u64, left: u64) {
        if self.tokens.is_none_or(|t| left < t.left) {
            self.tokens = Some(Left { limit, left });
        }
    }

    /// Counts one money limit in: kept when it leaves less than the one held.
    pub fn money_limit(&mut self, which: Limit, limit: Micros, left: Micros) {
        if self.money.is_none_or(|(_, m)| left < m.left) {
            self.money = Some((which, Left { limit, left }));
        }
    }

    /// The tighter of two counts of each (a reserve made in two halves, on a Cluster).
    pub fn tighter(mut self, other: Headroom) -> Headroom {
        if let Some(t) = other.tokens {
            self.tokens_limit(t.limit, t.left);
        }
        if let Some((which, m)) = other.money {
            self.money_limit(which, m.limit, m.left);
        }
        self
    }
}

/// What one scope's counters stand at for some periods: settled plus held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Standing {
    pub day: Micros,
    pub week: Micros,
    pub month: Micros,
    /// Tokens counted in the minute asked about.
    pub minute_tokens: u64,
    pub in_flight: u32,
}

impl Standing {
    pub fn spent(&self, kind: PeriodKind) -> Micros {
        match kind {
            PeriodKind::Day => self.day,
            PeriodKind::Week => self.week,
            PeriodKind::Month => self.month,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tz: &str, civil: &str) -> i64 {
        let dt: jiff::civil::DateTime = civil.parse().unwrap();
        dt.to_zoned(time_zone(tz).unwrap())
            .unwrap()
            .timestamp()
            .as_second()
    }

    #[test]
    fn a_day_ends_at_local_midnight() {
        let p = periods(
            &time_zone("Asia/Tokyo").unwrap(),
            at("Asia/Tokyo", "2026-11-24T23:59:00"),
        );
        assert_eq!(p.day.start, at("Asia/Tokyo", "2026-11-24T00:00:00"));
        assert_eq!(p.day.end, at("Asia/Tokyo", "2026-11-25T00:00:00"));
        let next = periods(&time_zone("Asia/Tokyo").unwrap(), p.day.end);
        assert_eq!(next.day.start, p.day.end);
        assert_ne!(next.day.label(), p.day.label());
    }

    #[test]
    fn months_have_their_calendar_length() {
        let utc = TimeZone::UTC;
        for (civil, days) in [
            ("2026-02-10T12:00:00", 28),
            ("2028-02-10T12:00:00", 29),
            ("2026-04-30T23:59:59", 30),
            ("2026-12-31T23:59:59", 31),
        ] {
            let p = periods(&utc, at("UTC", civil));
            assert_eq!(p.month.end - p.month.start, days * 86_400, "{civil}");
        }
    }

    #[test]
    fn weeks_start_on_monday() {
        let p = periods(&TimeZone::UTC, at("UTC", "2026-11-29T10:00:00")); // a Sunday
        assert_eq!(p.week.start, at("UTC", "2026-11-23T00:00:00"));
        assert_eq!(p.week.end, at("UTC", "2026-11-30T00:00:00"));
    }

    #[test]
    fn daylight_saving_days_are_23_and_25_hours() {
        let ny = time_zone("America/New_York").unwrap();
        let spring = periods(&ny, at("America/New_York", "2026-03-08T12:00:00"));
        assert_eq!(spring.day.end - spring.day.start, 23 * 3600);
        let autumn = periods(&ny, at("America/New_York", "2026-11-01T12:00:00"));
        assert_eq!(autumn.day.end - autumn.day.start, 25 * 3600);
        // The month holding the autumn change is an hour longer than 30 days.
        assert_eq!(autumn.month.end - autumn.month.start, 30 * 86_400 + 3600);
    }

    #[test]
    fn unknown_zones_are_refused_and_utc_is_known() {
        assert!(time_zone("Mars/Olympus").is_none());
        assert!(time_zone("UTC").is_some());
        assert!(time_zone("Europe/Paris").is_some());
    }

    #[test]
    fn refusals_name_their_limit() {
        assert_eq!(
            Limit::key(LimitKind::Budget(PeriodKind::Day)).param(),
            "budget.day"
        );
        assert_eq!(Limit::group(LimitKind::Tpm).param(), "group.tpm");
        assert!(Limit::group(LimitKind::Budget(PeriodKind::Month)).is_money());
        assert!(!Limit::key(LimitKind::Concurrent).is_money());
    }
}
