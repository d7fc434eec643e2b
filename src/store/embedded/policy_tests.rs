//! Key policy and groups on the embedded store: period budgets, tpm, concurrency, group
//! limits, and what a standing reports (what settles and expiries release, what survives
//! a restart, and the records: `policy_settle_tests`).

use super::tests::key_record as key;
use super::*;
use crate::store::policy::{periods, GroupAsk, Limit, LimitKind, PeriodKind, Policy, Standing};
use crate::store::KeyStatus;
use jiff::tz::TimeZone;

/// 10:00 UTC on a Tuesday whose Monday and Wednesday are in its month, the first such
/// from today on: the tests' day, week and month, with a day on either side of it. It
/// follows the clock because the store drops a period's counters a day after the period
/// ends (`STALE_PERIOD`): a fixed day would turn every restart test red two days later.
pub(super) fn at() -> i64 {
    static AT: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *AT.get_or_init(|| {
        let today = jiff::Timestamp::now().to_zoned(TimeZone::UTC).date();
        let mut day = today;
        while day.weekday() != jiff::civil::Weekday::Tuesday || !(2..=27).contains(&day.day()) {
            day = day.tomorrow().expect("a date after today");
        }
        day.at(10, 0, 0, 0)
            .to_zoned(TimeZone::UTC)
            .expect("10:00 UTC exists")
            .timestamp()
            .as_second()
    })
}
pub(super) const DAY: i64 = 86_400;

/// A fresh store in its own directory (kept as long as the store is used).
pub(super) fn opened() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    (dir, s)
}

pub(super) fn group(id: &str, quota: Option<Micros>, policy: Policy) -> GroupRecord {
    GroupRecord {
        id: id.into(),
        name: format!("group {id}"),
        status: KeyStatus::Enabled,
        created_at: 0,
        quota_limit: quota,
        quota_used: 0,
        policy,
    }
}

pub(super) fn day_budget(b: Micros) -> Policy {
    Policy {
        budget_day: Some(b),
        ..Policy::default()
    }
}

pub(super) fn ask(min: Micros, max: Micros, at: i64, group: Option<&str>) -> Ask {
    Ask {
        min,
        max,
        tokens: 0,
        at,
        periods: periods(&TimeZone::UTC, at),
        group: group.map(|g| GroupAsk {
            id: g.into(),
            periods: periods(&TimeZone::UTC, at),
        }),
        in_flight: true,
    }
}

pub(super) fn tokens(mut a: Ask, n: u64) -> Ask {
    a.tokens = n;
    a
}

pub(super) fn limit(scope: Scope, kind: LimitKind) -> Result<Reservation, ReserveDenied> {
    Err(ReserveDenied::Limit(match scope {
        Scope::Key => Limit::key(kind),
        Scope::Group => Limit::group(kind),
    }))
}

pub(super) async fn grant(s: &EmbeddedStore, k: &str, rid: &str, a: &Ask) -> Reservation {
    s.reserve_ask(k, rid, a, 60).await.unwrap().unwrap()
}

pub(super) async fn standing(s: &EmbeddedStore, scope: Scope, id: &str, at: i64) -> Standing {
    s.standing(scope, id, &periods(&TimeZone::UTC, at), at.div_euclid(60))
        .await
        .unwrap()
}

pub(super) fn usage(
    key_id: &str,
    rid: &str,
    prompt: u64,
    completion: u64,
    cost: Micros,
) -> UsageRecord {
    UsageRecord {
        request_id: rid.into(),
        time_ms: at() * 1000,
        key_id: key_id.into(),
        endpoint: "/v1/chat/completions".into(),
        model: "m".into(),
        channel: "c".into(),
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_tokens: 0,
        cost,
        estimated: false,
        overrun: 0,
        provider_cost: None,
        bill: Default::default(),
        multiplier_ppm: None,
        status: 200,
        latency_ms: 1,
        stream: false,
        group: None,
    }
}

#[tokio::test]
async fn a_day_budget_refuses_once_spent_and_the_next_day_is_fresh() {
    let (_dir, s) = opened();
    s.create_key(&key("k", None, None, day_budget(1_000)))
        .await
        .unwrap();
    let r = grant(&s, "k", "r1", &ask(1, 600, at(), None)).await;
    assert_eq!(r.amount, 600);
    s.settle(&r, 600).await.unwrap();
    let r = grant(&s, "k", "r2", &ask(1, 600, at() + 60, None)).await;
    assert_eq!(r.amount, 400, "clamped to what the day leaves");
    s.settle(&r, 400).await.unwrap();
    assert_eq!(
        s.reserve_ask("k", "r3", &ask(1, 600, at() + 120, None), 60)
            .await
            .unwrap(),
        limit(Scope::Key, LimitKind::Budget(PeriodKind::Day))
    );
    let next = grant(&s, "k", "r4", &ask(1, 600, at() + DAY, None)).await;
    assert_eq!(next.amount, 600, "a new day's label starts from nothing");
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 1_000);
}

#[tokio::test]
async fn the_grant_is_what_the_tightest_limit_leaves_and_the_first_short_one_refuses() {
    let (_dir, s) = opened();
    let policy = Policy {
        budget_day: Some(200),
        budget_week: Some(500),
        budget_month: Some(2_000),
        ..Policy::default()
    };
    s.create_key(&key("k", Some(300), None, policy))
        .await
        .unwrap();
    let a = |min, max| ask(min, max, at(), None);
    assert_eq!(
        s.reserve_ask("k", "r1", &a(400, 5_000), 60).await.unwrap(),
        Err(ReserveDenied::QuotaExhausted),
        "the lifetime cap is checked first"
    );
    assert_eq!(
        s.reserve_ask("k", "r2", &a(250, 5_000), 60).await.unwrap(),
        limit(Scope::Key, LimitKind::Budget(PeriodKind::Day))
    );
    let r = grant(&s, "k", "r3", &a(150, 5_000)).await;
    assert_eq!(
        r.amount, 200,
        "min(300 lifetime, 200 day, 500 week, 2000 month)"
    );
    s.settle(&r, 200).await.unwrap();
    // The next day: the week (300 left) and the lifetime (100 left) bind.
    let r = grant(&s, "k", "r4", &ask(0, 5_000, at() + DAY, None)).await;
    assert_eq!(r.amount, 100);
}

#[tokio::test]
async fn a_group_budget_is_shared_by_its_keys() {
    let (_dir, s) = opened();
    s.create_group(&group("g", None, day_budget(1_000)))
        .await
        .unwrap();
    for k in ["a", "b"] {
        s.create_key(&key(k, None, Some("g"), Policy::default()))
            .await
            .unwrap();
    }
    let r = grant(&s, "a", "r1", &ask(1, 700, at(), Some("g"))).await;
    assert_eq!(r.amount, 700);
    let other = grant(&s, "b", "r2", &ask(1, 700, at(), Some("g"))).await;
    assert_eq!(other.amount, 300, "held by the other key counts too");
    s.settle(&r, 700).await.unwrap();
    s.settle(&other, 300).await.unwrap();
    assert_eq!(
        s.reserve_ask("a", "r3", &ask(1, 1, at(), Some("g")), 60)
            .await
            .unwrap(),
        limit(Scope::Group, LimitKind::Budget(PeriodKind::Day))
    );
    assert_eq!(s.get_group("g").await.unwrap().unwrap().quota_used, 1_000);
    assert_eq!(standing(&s, Scope::Group, "g", at()).await.day, 1_000);
    assert_eq!(
        standing(&s, Scope::Key, "a", at()).await.day,
        0,
        "no key budget: not counted"
    );
}

#[tokio::test]
async fn a_group_lifetime_cap_binds_every_key() {
    let (_dir, s) = opened();
    s.create_group(&group("g", Some(500), Policy::default()))
        .await
        .unwrap();
    for k in ["a", "b"] {
        s.create_key(&key(k, Some(10_000), Some("g"), Policy::default()))
            .await
            .unwrap();
    }
    let r = grant(&s, "a", "r1", &ask(400, 400, at(), Some("g"))).await;
    assert_eq!(
        s.reserve_ask("b", "r2", &ask(200, 200, at(), Some("g")), 60)
            .await
            .unwrap(),
        limit(Scope::Group, LimitKind::Quota)
    );
    assert_eq!(
        grant(&s, "b", "r3", &ask(0, 200, at(), Some("g")))
            .await
            .amount,
        100
    );
    s.settle(&r, 350).await.unwrap();
    assert_eq!(s.get_group("g").await.unwrap().unwrap().quota_used, 350);
    assert_eq!(
        grant(&s, "b", "r4", &ask(0, 200, at(), Some("g")))
            .await
            .amount,
        50,
        "500 - 350 settled - 100 held"
    );
}

#[tokio::test]
async fn tpm_is_all_or_nothing_and_settles_to_the_real_count() {
    let (_dir, s) = opened();
    let tpm = |n| Policy {
        tpm: Some(n),
        ..Policy::default()
    };
    s.create_group(&group("g", None, tpm(5_000))).await.unwrap();
    s.create_key(&key("k", None, Some("g"), tpm(1_000)))
        .await
        .unwrap();
    let a = |n| tokens(ask(0, 10, at(), Some("g")), n);
    let r1 = grant(&s, "k", "r1", &a(600)).await;
    assert_eq!(
        s.reserve_ask("k", "r2", &a(600), 60).await.unwrap(),
        limit(Scope::Key, LimitKind::Tpm),
        "600 more would pass 1000: nothing is taken"
    );
    let r3 = grant(&s, "k", "r3", &a(400)).await;
    assert_eq!(
        standing(&s, Scope::Key, "k", at()).await.minute_tokens,
        1_000
    );
    // 150 tokens were used of the 600 held: the minute keeps 150.
    s.settle_logged(&r1, 5, &usage("k", "r1", 100, 50, 5))
        .await
        .unwrap();
    assert_eq!(standing(&s, Scope::Key, "k", at()).await.minute_tokens, 550);
    assert_eq!(
        standing(&s, Scope::Group, "g", at()).await.minute_tokens,
        550
    );
    grant(&s, "k", "r4", &a(450)).await;
    // A settle without a record keeps what was held.
    s.settle(&r3, 1).await.unwrap();
    assert_eq!(
        standing(&s, Scope::Key, "k", at()).await.minute_tokens,
        1_000
    );
    // The next minute is fresh.
    grant(
        &s,
        "k",
        "r5",
        &tokens(ask(0, 10, at() + 60, Some("g")), 1_000),
    )
    .await;
    // The group's own tpm: another key of the group, without a tpm of its own.
    s.create_key(&key("k2", None, Some("g"), Policy::default()))
        .await
        .unwrap();
    grant(
        &s,
        "k2",
        "r6",
        &tokens(ask(0, 10, at() + 60, Some("g")), 4_000),
    )
    .await;
    assert_eq!(
        s.reserve_ask("k2", "r7", &tokens(ask(0, 10, at() + 60, Some("g")), 1), 60)
            .await
            .unwrap(),
        limit(Scope::Group, LimitKind::Tpm)
    );
}

#[tokio::test]
async fn max_concurrent_refuses_the_extra_one_and_frees_on_settle_and_expiry() {
    let (_dir, s) = opened();
    let most = |n| Policy {
        max_concurrent: Some(n),
        ..Policy::default()
    };
    s.create_group(&group("g", None, most(3))).await.unwrap();
    s.create_key(&key("k", None, Some("g"), most(2)))
        .await
        .unwrap();
    s.create_key(&key("k2", None, Some("g"), Policy::default()))
        .await
        .unwrap();
    let a = ask(0, 10, at(), Some("g"));
    let r1 = grant(&s, "k", "r1", &a).await;
    grant(&s, "k", "r2", &a).await;
    assert_eq!(
        s.reserve_ask("k", "r3", &a, 60).await.unwrap(),
        limit(Scope::Key, LimitKind::Concurrent)
    );
    s.settle(&r1, 1).await.unwrap();
    grant(&s, "k", "r3", &a).await;
    assert_eq!(standing(&s, Scope::Key, "k", at()).await.in_flight, 2);
    // The group's: 2 of k and 1 of k2 make 3.
    grant(&s, "k2", "r4", &a).await;
    assert_eq!(
        s.reserve_ask("k2", "r5", &a, 60).await.unwrap(),
        limit(Scope::Group, LimitKind::Concurrent)
    );
    assert_eq!(standing(&s, Scope::Group, "g", at()).await.in_flight, 3);
    // Expired holds leave the counts.
    s.advance_clock(61);
    assert_eq!(standing(&s, Scope::Group, "g", at()).await.in_flight, 0);
    grant(&s, "k", "r6", &a).await;
    grant(&s, "k", "r7", &a).await;
    grant(&s, "k2", "r8", &a).await;
}

#[tokio::test]
async fn more_money_for_a_request_in_flight_does_not_count_again() {
    let (_dir, s) = opened();
    let one = Policy {
        max_concurrent: Some(1),
        ..Policy::default()
    };
    s.create_group(&group("g", None, one.clone()))
        .await
        .unwrap();
    s.create_key(&key("k", None, Some("g"), one)).await.unwrap();
    let a = ask(0, 10, at(), Some("g"));
    let first = grant(&s, "k", "session", &a).await;
    // A realtime session's next block: granted, and the session still counts once.
    let more = Ask {
        in_flight: false,
        ..a.clone()
    };
    let block = grant(&s, "k", "session-1", &more).await;
    assert_eq!(standing(&s, Scope::Key, "k", at()).await.in_flight, 1);
    assert_eq!(standing(&s, Scope::Group, "g", at()).await.in_flight, 1);
    assert_eq!(
        s.reserve_ask("k", "other", &a, 60).await.unwrap(),
        limit(Scope::Key, LimitKind::Concurrent)
    );
    s.settle(&block, 1).await.unwrap();
    assert_eq!(standing(&s, Scope::Key, "k", at()).await.in_flight, 1);
    s.settle(&first, 1).await.unwrap();
    assert_eq!(standing(&s, Scope::Group, "g", at()).await.in_flight, 0);
    grant(&s, "k", "other", &a).await;
}

#[tokio::test]
async fn an_ask_naming_another_group_than_the_key_s_is_stale() {
    let (_dir, s) = opened();
    for g in ["g", "h"] {
        s.create_group(&group(g, None, Policy::default()))
            .await
            .unwrap();
    }
    s.create_key(&key("k", None, Some("g"), Policy::default()))
        .await
        .unwrap();
    s.create_key(&key("free", None, None, Policy::default()))
        .await
        .unwrap();
    for (k, g) in [("k", None), ("k", Some("h")), ("free", Some("g"))] {
        assert_eq!(
            s.reserve_ask(k, "r", &ask(0, 1, at(), g), 60)
                .await
                .unwrap(),
            Err(ReserveDenied::Stale),
            "{k} asked with {g:?}"
        );
    }
    assert_eq!(
        s.reserve_ask("k", "r", &Ask::money_now(0, 1), 60)
            .await
            .unwrap(),
        Err(ReserveDenied::Stale),
        "money-only reserves are for keys in no group"
    );
    // Moved to h: the ledger follows the update.
    let patch = KeyPatch {
        group: Some(Some("h".into())),
        ..KeyPatch::default()
    };
    let rec = s.update_key("k", &patch).await.unwrap().unwrap();
    assert_eq!(rec.group.as_deref(), Some("h"));
    grant(&s, "k", "r1", &ask(0, 1, at(), Some("h"))).await;
    assert_eq!(
        s.reserve_ask("k", "r2", &ask(0, 1, at(), Some("g")), 60)
            .await
            .unwrap(),
        Err(ReserveDenied::Stale)
    );
}

#[tokio::test]
async fn a_missing_or_disabled_group_refuses() {
    let (_dir, s) = opened();
    s.create_key(&key("k", None, Some("g"), Policy::default()))
        .await
        .unwrap();
    let a = ask(0, 1, at(), Some("g"));
    let refused = limit(Scope::Group, LimitKind::Group);
    assert_eq!(s.reserve_ask("k", "r1", &a, 60).await.unwrap(), refused);
    let mut g = group("g", None, Policy::default());
    g.status = KeyStatus::Disabled;
    s.create_group(&g).await.unwrap();
    assert_eq!(s.reserve_ask("k", "r2", &a, 60).await.unwrap(), refused);
    let enable = GroupPatch {
        status: Some(KeyStatus::Enabled),
        ..GroupPatch::default()
    };
    s.update_group("g", &enable).await.unwrap().unwrap();
    grant(&s, "k", "r3", &a).await;
    assert!(s.delete_group("g").await.unwrap());
    assert_eq!(s.reserve_ask("k", "r4", &a, 60).await.unwrap(), refused);
}

#[tokio::test]
async fn standing_reports_each_period_the_minute_and_requests_in_flight() {
    let (_dir, s) = opened();
    assert_eq!(
        standing(&s, Scope::Key, "nobody", at()).await,
        Standing::default()
    );
    assert_eq!(
        standing(&s, Scope::Group, "none", at()).await,
        Standing::default()
    );
    let policy = Policy {
        budget_day: Some(10_000),
        budget_week: Some(10_000),
        budget_month: Some(10_000),
        ..Policy::default()
    };
    s.create_key(&key("k", None, None, policy)).await.unwrap();
    // Yesterday (same week and month), then today with one still held.
    let r = grant(&s, "k", "r1", &ask(0, 100, at() - DAY, None)).await;
    s.settle(&r, 100).await.unwrap();
    let r = grant(&s, "k", "r2", &ask(0, 200, at(), None)).await;
    s.settle(&r, 150).await.unwrap();
    grant(&s, "k", "r3", &tokens(ask(0, 30, at(), None), 77)).await;
    let st = standing(&s, Scope::Key, "k", at()).await;
    assert_eq!(
        st,
        Standing {
            day: 180,
            week: 280,
            month: 280,
            minute_tokens: 77,
            in_flight: 1,
        }
    );
    assert_eq!(
        standing(&s, Scope::Key, "k", at() + 60).await.minute_tokens,
        0
    );
}

/// Many requests at once on a key with a small day budget in a group with a budget of
/// its own: neither is ever passed, and what was settled is what the counters say.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_never_spends_past_a_key_or_group_budget() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    s.create_group(&group("g", None, day_budget(1_500)))
        .await
        .unwrap();
    for k in ["a", "b"] {
        s.create_key(&key(k, None, Some("g"), day_budget(1_000)))
            .await
            .unwrap();
    }
    let tasks: Vec<_> = (0..64)
        .map(|n| {
            let s = s.clone();
            let k = if n % 2 == 0 { "a" } else { "b" };
            tokio::spawn(async move {
                let rid = format!("r{n}");
                match s
                    .reserve_ask(k, &rid, &ask(1, 70, at(), Some("g")), 60)
                    .await
                    .unwrap()
                {
                    Ok(r) => {
                        tokio::task::yield_now().await;
                        // A grant near the end of a budget may be 1: nothing below 0
                        // is spent (the store counts a negative charge as 0).
                        let spent = (r.amount - (n as Micros % 3)).max(0);
                        s.settle(&r, spent).await.unwrap();
                        (k, spent)
                    }
                    Err(ReserveDenied::Limit(_)) => (k, 0),
                    Err(e) => panic!("{e:?}"),
                }
            })
        })
        .collect();
    let (mut a, mut b) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            ("a", n) => a += n,
            (_, n) => b += n,
        }
    }
    assert!(a <= 1_000 && b <= 1_000 && a + b <= 1_500, "{a} {b}");
    // Every refusal met a full budget; a settle gives back at most 2 of its grant.
    assert!(a + b >= 1_500 - 2 * 64, "the budgets were used: {a} + {b}");
    assert_eq!(standing(&s, Scope::Key, "a", at()).await.day, a);
    assert_eq!(standing(&s, Scope::Key, "b", at()).await.day, b);
    let g = standing(&s, Scope::Group, "g", at()).await;
    assert_eq!((g.day, g.in_flight), (a + b, 0));
    assert_eq!(s.get_group("g").await.unwrap().unwrap().quota_used, a + b);
    assert_eq!(s.get_key("a").await.unwrap().unwrap().quota_used, a);
}

#[tokio::test]
async fn a_group_made_anew_starts_from_nothing() {
    let (_dir, s) = opened();
    s.create_group(&group("g", Some(1_000), day_budget(1_000)))
        .await
        .unwrap();
    s.create_key(&key("k", None, Some("g"), Policy::default()))
        .await
        .unwrap();
    let a = ask(0, 400, at(), Some("g"));
    let spent = grant(&s, "k", "r1", &a).await;
    s.settle(&spent, 300).await.unwrap();
    let late = grant(&s, "k", "r2", &a).await;
    assert!(s.delete_group("g").await.unwrap());
    // Settled after the group went: the key pays, the group's counters are gone.
    s.settle(&late, 400).await.unwrap();
    s.create_group(&group("g", Some(1_000), day_budget(1_000)))
        .await
        .unwrap();
    assert_eq!(s.get_group("g").await.unwrap().unwrap().quota_used, 0);
    assert_eq!(
        standing(&s, Scope::Group, "g", at()).await,
        Standing::default()
    );
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 700);
    assert_eq!(
        grant(&s, "k", "r3", &ask(0, 5_000, at(), Some("g")))
            .await
            .amount,
        1_000
    );
}
