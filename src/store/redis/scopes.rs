//! The scopes a request is counted in (its key, the key's group) as Redis key names, and
//! the answers of the reserve script.
//!
//! A group's keys carry `grp:<id>` as their hash tag (`gw:grp:{grp:ID}`,
//! `gw:rsv:{grp:ID}`, ...): a group id has no `:` and a key id (`key_<hex>`) never starts
//! with `grp:`, so a group's tag is never a key's. Per scope, beside the key's own layout:
//! - `gw:hold:{TAG}` hash: hold id → details (JSON: the money held `g`, the tokens `t`,
//!   the money counters `c` and the token counter `k` it is on, each with the second it
//!   expires at, `x` = 1 once expired, `grp` the group a key's hold is also on)
//! - `gw:kept:{TAG}` zset: holds that expired unsettled → when (their details are kept for
//!   a late settle, then pruned after `SETTLED_KEEP_SECS`)
//! - `gw:cnt:{TAG}:<kind>:<start>` counter: spend settled plus held in one period (named
//!   by its label), expiring two days after the period ends (or after its last hold, when
//!   an instance whose clock lags holds on a period Redis's clock has left behind)
//! - `gw:tpm:{TAG}:<minute>` counter: tokens counted in one minute, expiring after it
//! - `in_flight` in the scope's hash: requests held now

use crate::store::policy::{Headroom, Limit, LimitKind, PeriodKind, Periods, Scope};
use crate::store::ReserveDenied;

/// The hash tag of a group's keys.
pub fn group_tag(id: &str) -> String {
    format!("grp:{id}")
}

/// The group's record, plus `quota_used`, `quota_reserved` and `in_flight`.
pub fn group(id: &str) -> String {
    format!("gw:grp:{{{}}}", group_tag(id))
}

pub fn hold(tag: &str) -> String {
    format!("gw:hold:{{{tag}}}")
}

pub fn kept(tag: &str) -> String {
    format!("gw:kept:{{{tag}}}")
}

pub fn counter(tag: &str, label: &str) -> String {
    format!("gw:cnt:{{{tag}}}:{label}")
}

pub fn tokens(tag: &str, minute: i64) -> String {
    format!("gw:tpm:{{{tag}}}:{minute}")
}

/// A refusal's reason as the reserve script names it.
pub fn denied(reason: &str) -> Option<ReserveDenied> {
    use LimitKind::*;
    let limit = |scope: &str, kind: &str| {
        let kind = match kind {
            "quota" => Quota,
            "day" => Budget(PeriodKind::Day),
            "week" => Budget(PeriodKind::Week),
            "month" => Budget(PeriodKind::Month),
            "tpm" => Tpm,
            "concurrent" => Concurrent,
            "group" => Group,
            _ => return None,
        };
        match scope {
            "key" => Some(Limit::key(kind)),
            "group" => Some(Limit::group(kind)),
            _ => None,
        }
    };
    Some(match reason {
        "not_found" => ReserveDenied::NotFound,
        "disabled" => ReserveDenied::Disabled,
        "expired" => ReserveDenied::Expired,
        "released" => ReserveDenied::Released,
        "stale" => ReserveDenied::Stale,
        "quota" => ReserveDenied::QuotaExhausted,
        other => {
            let (scope, kind) = other.split_once(':')?;
            ReserveDenied::Limit(limit(scope, kind)?)
        }
    })
}

/// Where the tightest limits stand, from the reserve script's answer past its first three
/// values: the tpm's limit and tokens left, the money limit's name, limit and money left
/// (`''` where the scopes have none). A value that does not parse leaves its part out.
pub fn headroom(fields: &[String]) -> Headroom {
    let at = |i: usize| fields.get(i).map_or("", String::as_str);
    let mut room = Headroom::default();
    if let (Ok(limit), Ok(left)) = (at(0).parse::<i64>(), at(1).parse::<i64>()) {
        room.tokens_limit(limit.max(0) as u64, left.max(0) as u64);
    }
    let which = match denied(at(2)) {
        Some(ReserveDenied::Limit(l)) => Some(l),
        Some(ReserveDenied::QuotaExhausted) => Some(Limit::key(LimitKind::Quota)),
        _ => None,
    };
    if let (Some(which), Ok(limit), Ok(left)) = (which, at(3).parse(), at(4).parse()) {
        room.money_limit(which, limit, left);
    }
    room
}

/// Where a refusal stands in the order the checks run in a single script (the key's
/// state, the group's, money key then group, tokens, in flight): on a Cluster the group
/// is asked first, and the refusal reported is the one a single script would have named.
pub fn rank(d: &ReserveDenied) -> u8 {
    use LimitKind::*;
    let period = |k: &PeriodKind| match k {
        PeriodKind::Day => 0,
        PeriodKind::Week => 1,
        PeriodKind::Month => 2,
    };
    match d {
        ReserveDenied::Released => 0,
        ReserveDenied::NotFound
        | ReserveDenied::Disabled
        | ReserveDenied::Expired
        | ReserveDenied::Stale => 1,
        ReserveDenied::Limit(Limit { kind: Group, .. }) => 2,
        ReserveDenied::QuotaExhausted => 3,
        ReserveDenied::Limit(l) => match (l.scope, &l.kind) {
            (Scope::Key, Budget(k)) => 4 + period(k),
            (_, Quota) => 7,
            (Scope::Group, Budget(k)) => 8 + period(k),
            (Scope::Key, Tpm) => 11,
            (Scope::Group, Tpm) => 12,
            (Scope::Key, Concurrent) => 13,
            (Scope::Group, Concurrent) => 14,
            (_, Group) => 2,
        },
    }
}

/// One scope of a reserve: its keys and arguments for gw_reserve_scopes_v2.
pub struct Part {
    pub keys: [String; 8],
    pub args: [String; 5],
}

impl Part {
    /// The key `id` (expected in group `expect`, '' none) at these periods and minute.
    pub fn key(id: &str, expect: &str, periods: &Periods, minute: i64) -> Part {
        Part::new(id, "key", expect, periods, minute)
    }

    pub fn group(id: &str, periods: &Periods, minute: i64) -> Part {
        Part::new(&group_tag(id), "group", "", periods, minute)
    }

    fn new(tag: &str, kind: &str, expect: &str, p: &Periods, minute: i64) -> Part {
        use super::conn::{done, key, rsv, rsva};
        let hash = if kind == "key" {
            key(tag)
        } else {
            format!("gw:grp:{{{tag}}}")
        };
        Part {
            keys: [
                hash,
                rsv(tag),
                rsva(tag),
                done(tag),
                counter(tag, &p.day.label()),
                counter(tag, &p.week.label()),
                counter(tag, &p.month.label()),
                tokens(tag, minute),
            ],
            args: [
                kind.to_string(),
                expect.to_string(),
                p.day.end.to_string(),
                p.week.end.to_string(),
                p.month.end.to_string(),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_parse_and_rank_in_check_order() {
        let order = [
            "stale",
            "group:group",
            "quota",
            "key:day",
            "key:week",
            "key:month",
            "group:quota",
            "group:day",
            "group:month",
            "key:tpm",
            "group:tpm",
            "key:concurrent",
            "group:concurrent",
        ];
        let ranks: Vec<u8> = order.iter().map(|r| rank(&denied(r).unwrap())).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
        assert_eq!(
            denied("group:week"),
            Some(ReserveDenied::Limit(Limit::group(LimitKind::Budget(
                PeriodKind::Week
            ))))
        );
        assert_eq!(denied("nonsense"), None);
        assert!(group_tag("team-a") != "team-a");
    }
}
