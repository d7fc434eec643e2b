//! The checks a reserve must pass before anything is held: the key's own state, the money
//! left under every limit, and the rate limits (tokens per minute, requests in flight).

use super::GroupAccount;
use crate::store::embedded::counters::Counters;
use crate::store::embedded::figures::Figures;
use crate::store::policy::{
    Ask, GroupAsk, Headroom, Limit, LimitKind, PeriodKind, Periods, Policy, Scope,
};
use crate::store::{KeyStatus, Micros, ReserveDenied};

/// Why the key itself refuses any reserve: disabled, expired, or its group changed since
/// the caller read it.
pub(super) fn key_refusal(f: &Figures, ask: &Ask, now: i64) -> Result<(), ReserveDenied> {
    if f.status != KeyStatus::Enabled {
        return Err(ReserveDenied::Disabled);
    }
    if f.expires_at.is_some_and(|t| now >= t) {
        return Err(ReserveDenied::Expired);
    }
    if f.group.as_deref() != ask.group.as_ref().map(|g| g.id.as_str()) {
        return Err(ReserveDenied::Stale);
    }
    Ok(())
}

/// What a reserve is granted, with the budget periods of the key and of its group it will
/// be held on.
pub(super) struct Grant {
    pub amount: Micros,
    pub key_labels: Vec<(String, i64)>,
    pub group_labels: Vec<(String, i64)>,
}

/// Money: the least left under every money limit of the key and its group (lifetime cap,
/// then each budget), capped by `ask.max`; the first limit with less than `ask.min` left
/// refuses. A group given has its figures (the caller checked them).
pub(super) fn money(
    f: &Figures,
    c: &Counters,
    group: Option<(&GroupAccount, &GroupAsk)>,
    ask: &Ask,
) -> Result<Grant, ReserveDenied> {
    let mut grant = ask.max;
    let mut short = None;
    let mut fit = |left: Micros, why: ReserveDenied| {
        if left < ask.min && short.is_none() {
            short = Some(why);
        }
        grant = grant.min(left);
    };
    if let Some(limit) = f.limit {
        fit(limit - f.used - c.held, ReserveDenied::QuotaExhausted);
    }
    let mut key_labels = Vec::new();
    budgets(&f.policy, &ask.periods, c, &mut key_labels, |left, kind| {
        fit(
            left,
            ReserveDenied::Limit(Limit::key(LimitKind::Budget(kind))),
        )
    });
    let mut group_labels = Vec::new();
    if let Some((g, ga)) = &group {
        let gf = g
            .figures
            .as_ref()
            .expect("the caller checked the group's figures");
        if let Some(limit) = gf.limit {
            fit(
                limit - gf.used - g.c.held,
                ReserveDenied::Limit(Limit::group(LimitKind::Quota)),
            );
        }
        budgets(
            &gf.policy,
            &ga.periods,
            &g.c,
            &mut group_labels,
            |left, kind| {
                fit(
                    left,
                    ReserveDenied::Limit(Limit::group(LimitKind::Budget(kind))),
                )
            },
        );
    }
    if let Some(why) = short {
        return Err(why);
    }
    Ok(Grant {
        amount: grant,
        key_labels,
        group_labels,
    })
}

/// Tokens this minute, all or nothing; then requests in flight: the key's limit, then its
/// group's, that the ask would pass. A group given has its figures (the caller checked
/// them).
pub(super) fn rate_refusal(
    f: &Figures,
    c: &Counters,
    group: Option<&GroupAccount>,
    ask: &Ask,
    minute: i64,
) -> Result<(), Limit> {
    let group_policy = group.map(|g| {
        (
            &g.figures
                .as_ref()
                .expect("the caller checked the group's figures")
                .policy,
            &g.c,
        )
    });
    if let Some(tpm) = f.policy.tpm {
        if c.tokens(minute).saturating_add(ask.tokens) > tpm {
            return Err(Limit::key(LimitKind::Tpm));
        }
    }
    if let Some((Some(tpm), c)) = group_policy.map(|(p, c)| (p.tpm, c)) {
        if c.tokens(minute).saturating_add(ask.tokens) > tpm {
            return Err(Limit::group(LimitKind::Tpm));
        }
    }
    if let Some(most) = f.policy.max_concurrent.filter(|_| ask.in_flight) {
        if c.in_flight >= most {
            return Err(Limit::key(LimitKind::Concurrent));
        }
    }
    if let Some((Some(most), c)) = group_policy
        .filter(|_| ask.in_flight)
        .map(|(p, c)| (p.max_concurrent, c))
    {
        if c.in_flight >= most {
            return Err(Limit::group(LimitKind::Concurrent));
        }
    }
    Ok(())
}

/// Checks each budget of `policy` against its period's counter: `fit(left, kind)`, and
/// notes the label (with its period's end) the hold will be on.
fn budgets(
    policy: &Policy,
    periods: &Periods,
    c: &Counters,
    labels: &mut Vec<(String, i64)>,
    mut fit: impl FnMut(Micros, PeriodKind),
) {
    if policy.budget_day.is_none() && policy.budget_week.is_none() && policy.budget_month.is_none()
    {
        return;
    }
    for kind in PeriodKind::ALL {
        if let Some(budget) = policy.budget(kind) {
            let p = periods.get(kind);
            let label = p.label();
            fit(budget - c.spent(&label), kind);
            labels.push((label, p.end));
        }
    }
}

/// Where the key's and its group's tightest token and money limits stand on these
/// counters (the caller has made or refused its hold: they are counted as they are). A
/// group given has its figures, or is left out.
pub(super) fn headroom(
    f: &Figures,
    c: &Counters,
    group: Option<(&GroupAccount, &GroupAsk)>,
    ask: &Ask,
    minute: i64,
) -> Headroom {
    let mut room = Headroom::default();
    let mut count = |scope: Scope,
                     limit: Option<Micros>,
                     used: Micros,
                     policy: &Policy,
                     c: &Counters,
                     periods: &Periods| {
        if let Some(limit) = limit {
            room.money_limit(
                Limit {
                    scope,
                    kind: LimitKind::Quota,
                },
                limit,
                limit - used - c.held,
            );
        }
        for kind in PeriodKind::ALL {
            if let Some(budget) = policy.budget(kind) {
                let spent = c.spent(&periods.get(kind).label());
                room.money_limit(
                    Limit {
                        scope,
                        kind: LimitKind::Budget(kind),
                    },
                    budget,
                    budget - spent,
                );
            }
        }
        if let Some(tpm) = policy.tpm {
            room.tokens_limit(tpm, tpm.saturating_sub(c.tokens(minute)));
        }
    };
    count(Scope::Key, f.limit, f.used, &f.policy, c, &ask.periods);
    if let Some((g, ga)) = group {
        if let Some(gf) = &g.figures {
            count(
                Scope::Group,
                gf.limit,
                gf.used,
                &gf.policy,
                &g.c,
                &ga.periods,
            );
        }
    }
    room
}
