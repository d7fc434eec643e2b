//! Key policy on Redis, on a single Redis and on a private 3-master Redis Cluster: period
//! budgets, tpm, max_concurrent and groups, reserved against at once and settled (or
//! expired) on exactly the counters each hold was on; keys with a limit are never served
//! from a lease; two instances under bursts never go past any limit.

use crate::contract::eventually;
use crate::leases::Backend;
use jiff::tz::TimeZone;
use model_gateway::store::policy::periods;
use model_gateway::store::redis::LeaseOptions;
use model_gateway::store::{
    Ask, GroupAsk, GroupPatch, GroupRecord, KeyPatch, KeyRecord, KeyStatus, Limit, LimitKind,
    Micros, PeriodKind, Policy, PolicyPatch, Reservation, ReserveDenied, Scope, Store, UsageRecord,
};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const A: &str = "key_aaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "key_bbbbbbbbbbbbbbbbbbbbbbbb";
const TTL: u64 = 3600;

impl Backend {
    /// The fields of a raw hash (to see whether a lease is held on a key).
    async fn hkeys(&self, name: &str) -> Vec<String> {
        match self {
            Backend::Single(r) => {
                let client = redis::Client::open(r.url().as_str()).unwrap();
                let mut c = client.get_multiplexed_async_connection().await.unwrap();
                redis::cmd("HKEYS")
                    .arg(name)
                    .query_async(&mut c)
                    .await
                    .unwrap()
            }
            Backend::Cluster(c) => {
                let client = redis::cluster::ClusterClient::new(c.urls()).unwrap();
                let mut c = client.get_async_connection().await.unwrap();
                redis::cmd("HKEYS")
                    .arg(name)
                    .query_async(&mut c)
                    .await
                    .unwrap()
            }
        }
    }
}

/// Runs `$check(cluster)` on both, as `<module>::$check::{redis, cluster}`.
macro_rules! both {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn redis() {
                super::$check(false).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn cluster() {
                super::$check(true).await;
            }
        }
    )*};
}

both!(
    day_budget_refuses_then_a_new_day_is_fresh,
    grant_is_clamped_by_the_tightest_budget,
    group_budget_is_shared_by_its_keys,
    group_lifetime_cap,
    tpm_is_all_or_nothing_and_settles_to_real_tokens,
    max_concurrent_frees_on_settle_and_on_expiry,
    more_money_for_a_request_in_flight_does_not_count_again,
    stale_group_and_missing_or_disabled_group,
    settle_after_expiry_charges_every_counter,
    reserve_and_settle_are_idempotent_with_policy,
    a_budget_added_under_a_lease_ends_the_lease,
    bursts_on_two_instances_never_pass_any_limit,
);

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn ask(min: Micros, max: Micros, tokens: u64, at: i64, group: Option<&str>) -> Ask {
    let p = periods(&TimeZone::UTC, at);
    Ask {
        min,
        max,
        tokens,
        at,
        periods: p,
        group: group.map(|g| GroupAsk {
            id: g.into(),
            periods: p,
        }),
        in_flight: true,
    }
}

async fn key(store: &dyn Store, id: &str, quota: Option<Micros>, group: Option<&str>, p: Policy) {
    store
        .create_key(&KeyRecord {
            id: id.into(),
            hash: format!("{:0>64}", &id[4..]),
            display: "sk-abc…wxyz".into(),
            name: "policy".into(),
            status: KeyStatus::Enabled,
            created_at: 1_700_000_000,
            expires_at: None,
            models: vec![],
            allow_ips: vec![],
            rpm: None,
            quota_limit: quota,
            quota_used: 0,
            group: group.map(str::to_string),
            policy: p,
        })
        .await
        .unwrap();
}

async fn group(store: &dyn Store, id: &str, quota: Option<Micros>, p: Policy) {
    store
        .create_group(&GroupRecord {
            id: id.into(),
            name: id.into(),
            status: KeyStatus::Enabled,
            created_at: 1_700_000_000,
            quota_limit: quota,
            quota_used: 0,
            policy: p,
        })
        .await
        .unwrap();
}

fn day(b: Micros) -> Policy {
    Policy {
        budget_day: Some(b),
        ..Policy::default()
    }
}

async fn reserve(
    store: &dyn Store,
    key_id: &str,
    rid: &str,
    a: &Ask,
) -> Result<Reservation, ReserveDenied> {
    store.reserve_ask(key_id, rid, a, TTL).await.unwrap()
}

fn limit(scope: Scope, kind: LimitKind) -> ReserveDenied {
    ReserveDenied::Limit(Limit { scope, kind })
}

fn usage(r: &Reservation, cost: Micros, tokens: u64) -> UsageRecord {
    UsageRecord {
        request_id: r.id.clone(),
        time_ms: 1,
        key_id: r.key_id.clone(),
        endpoint: "/v1/chat/completions".into(),
        model: "m".into(),
        channel: "c".into(),
        prompt_tokens: tokens / 2,
        completion_tokens: tokens - tokens / 2,
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

async fn day_budget_refuses_then_a_new_day_is_fresh(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    key(&*s, A, None, None, day(100)).await;
    let t = now();
    let r = reserve(&*s, A, "r1", &ask(60, 60, 0, t, None))
        .await
        .unwrap();
    s.settle(&r, 60).await.unwrap();
    assert_eq!(
        reserve(&*s, A, "r2", &ask(50, 50, 0, t, None)).await,
        Err(limit(Scope::Key, LimitKind::Budget(PeriodKind::Day)))
    );
    // What is left still goes.
    let r = reserve(&*s, A, "r3", &ask(1, 50, 0, t, None))
        .await
        .unwrap();
    assert_eq!(r.amount, 40);
    s.settle(&r, 40).await.unwrap();
    let st = s
        .standing(Scope::Key, A, &periods(&TimeZone::UTC, t), t / 60)
        .await
        .unwrap();
    assert_eq!(st.day, 100);
    // The next day's label is a fresh counter.
    let next = t + 86_400;
    let r = reserve(&*s, A, "r4", &ask(100, 100, 0, next, None))
        .await
        .unwrap();
    assert_eq!(r.amount, 100);
    assert_eq!(s.get_key(A).await.unwrap().unwrap().policy, day(100));
}

async fn grant_is_clamped_by_the_tightest_budget(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    let p = Policy {
        budget_day: Some(100),
        budget_week: Some(70),
        budget_month: Some(500),
        ..Policy::default()
    };
    key(&*s, A, Some(1000), None, p).await;
    let t = now();
    let r = reserve(&*s, A, "r1", &ask(1, 500, 0, t, None))
        .await
        .unwrap();
    assert_eq!(r.amount, 70);
    assert_eq!(
        reserve(&*s, A, "r2", &ask(1, 1, 0, t, None)).await,
        Err(limit(Scope::Key, LimitKind::Budget(PeriodKind::Week)))
    );
    s.settle(&r, 20).await.unwrap();
    // The lifetime cap is the tightest now.
    s.update_key(
        A,
        &KeyPatch {
            quota_limit: Some(Some(50)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let r = reserve(&*s, A, "r3", &ask(1, 500, 0, t, None))
        .await
        .unwrap();
    assert_eq!(r.amount, 30);
    assert_eq!(
        reserve(&*s, A, "r4", &ask(1, 1, 0, t, None)).await,
        Err(ReserveDenied::QuotaExhausted)
    );
}

async fn group_budget_is_shared_by_its_keys(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    group(&*s, "team", None, day(100)).await;
    key(&*s, A, None, Some("team"), Policy::default()).await;
    key(&*s, B, None, Some("team"), Policy::default()).await;
    let t = now();
    let r = reserve(&*s, A, "a1", &ask(60, 60, 0, t, Some("team")))
        .await
        .unwrap();
    s.settle(&r, 60).await.unwrap();
    assert_eq!(
        reserve(&*s, B, "b1", &ask(50, 50, 0, t, Some("team"))).await,
        Err(limit(Scope::Group, LimitKind::Budget(PeriodKind::Day)))
    );
    let r = reserve(&*s, B, "b2", &ask(10, 100, 0, t, Some("team")))
        .await
        .unwrap();
    assert_eq!(r.amount, 40);
    s.settle(&r, 25).await.unwrap();
    let p = periods(&TimeZone::UTC, t);
    let g = s.standing(Scope::Group, "team", &p, t / 60).await.unwrap();
    assert_eq!((g.day, g.in_flight), (85, 0));
    let k = s.standing(Scope::Key, B, &p, t / 60).await.unwrap();
    assert_eq!(k.day, 25);
    // The refused half left nothing held on the group.
    assert_eq!(s.get_group("team").await.unwrap().unwrap().quota_used, 85);
    assert_eq!(s.list_groups().await.unwrap().len(), 1);
}

async fn group_lifetime_cap(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    group(&*s, "team", Some(100), Policy::default()).await;
    key(&*s, A, Some(1000), Some("team"), Policy::default()).await;
    key(&*s, B, None, Some("team"), Policy::default()).await;
    let t = now();
    let a = reserve(&*s, A, "a1", &ask(1, 100, 0, t, Some("team")))
        .await
        .unwrap();
    assert_eq!(a.amount, 100);
    assert_eq!(
        reserve(&*s, B, "b1", &ask(1, 1, 0, t, Some("team"))).await,
        Err(limit(Scope::Group, LimitKind::Quota))
    );
    s.settle(&a, 30).await.unwrap();
    let g = s.get_group("team").await.unwrap().unwrap();
    assert_eq!(g.quota_used, 30);
    let b = reserve(&*s, B, "b2", &ask(1, 100, 0, t, Some("team")))
        .await
        .unwrap();
    assert_eq!(b.amount, 70);
    // The group's records: conflict, update, delete.
    let again = s
        .create_group(&GroupRecord {
            id: "team".into(),
            name: "x".into(),
            status: KeyStatus::Enabled,
            created_at: 1,
            quota_limit: None,
            quota_used: 0,
            policy: Policy::default(),
        })
        .await;
    assert!(matches!(
        again,
        Err(model_gateway::store::StoreError::Conflict(_))
    ));
    let g = s
        .update_group(
            "team",
            &GroupPatch {
                name: Some("Team".into()),
                policy: PolicyPatch {
                    tpm: Some(Some(5)),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (g.name.as_str(), g.policy.tpm, g.quota_used),
        ("Team", Some(5), 30)
    );
    assert!(s.delete_group("team").await.unwrap());
    assert!(!s.delete_group("team").await.unwrap());
    assert_eq!(s.get_group("team").await.unwrap(), None);
    assert!(s.list_groups().await.unwrap().is_empty());
}

async fn tpm_is_all_or_nothing_and_settles_to_real_tokens(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    let tpm = |n| Policy {
        tpm: Some(n),
        ..Policy::default()
    };
    key(&*s, A, None, None, tpm(100)).await;
    group(&*s, "team", None, tpm(150)).await;
    key(&*s, B, None, Some("team"), Policy::default()).await;
    let t = now();
    let p = periods(&TimeZone::UTC, t);
    let r = reserve(&*s, A, "a1", &ask(0, 10, 60, t, None))
        .await
        .unwrap();
    assert_eq!(
        reserve(&*s, A, "a2", &ask(0, 10, 50, t, None)).await,
        Err(limit(Scope::Key, LimitKind::Tpm))
    );
    s.settle_logged(&r, 5, &usage(&r, 5, 20)).await.unwrap();
    let st = s.standing(Scope::Key, A, &p, t / 60).await.unwrap();
    assert_eq!(st.minute_tokens, 20);
    assert!(reserve(&*s, A, "a3", &ask(0, 10, 50, t, None))
        .await
        .is_ok());
    // A settle that used more than held keeps what was held.
    let r = reserve(&*s, A, "a4", &ask(0, 10, 30, t, None))
        .await
        .unwrap();
    s.settle_logged(&r, 5, &usage(&r, 5, 1000)).await.unwrap();
    let st = s.standing(Scope::Key, A, &p, t / 60).await.unwrap();
    assert_eq!(st.minute_tokens, 100);
    // The group's.
    let r = reserve(&*s, B, "b1", &ask(0, 10, 100, t, Some("team")))
        .await
        .unwrap();
    assert_eq!(
        reserve(&*s, B, "b2", &ask(0, 10, 60, t, Some("team"))).await,
        Err(limit(Scope::Group, LimitKind::Tpm))
    );
    s.settle_logged(&r, 5, &usage(&r, 5, 40)).await.unwrap();
    let g = s.standing(Scope::Group, "team", &p, t / 60).await.unwrap();
    assert_eq!(g.minute_tokens, 40);
    assert!(reserve(&*s, B, "b3", &ask(0, 10, 60, t, Some("team")))
        .await
        .is_ok());
    // A later minute is fresh.
    assert!(reserve(&*s, A, "a5", &ask(0, 10, 100, t + 60, None))
        .await
        .is_ok());
}

/// A hold's place is freed by its settle, and by its expiry. Redis's `TIME` counts whole
/// seconds, so a hold of `ttl` seconds lives between `ttl - 1` and `ttl` of them: the
/// expiring hold gets 3, so it outlives the one check made while it is held by seconds,
/// and its end is waited for by polling the count, not by sleeping.
async fn max_concurrent_frees_on_settle_and_on_expiry(cluster: bool) {
    const EXPIRING_TTL: u64 = 3;
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    let two = Policy {
        max_concurrent: Some(2),
        ..Policy::default()
    };
    key(&*s, A, None, None, two.clone()).await;
    group(&*s, "team", None, two).await;
    key(&*s, B, None, Some("team"), Policy::default()).await;
    let t = now();
    let p = periods(&TimeZone::UTC, t);
    for (k, g, scope) in [(A, None, Scope::Key), (B, Some("team"), Scope::Group)] {
        let r1 = reserve(&*s, k, "c1", &ask(0, 1, 0, t, g)).await.unwrap();
        let r2 = reserve(&*s, k, "c2", &ask(0, 1, 0, t, g)).await.unwrap();
        assert_eq!(
            reserve(&*s, k, "c3", &ask(0, 1, 0, t, g)).await,
            Err(limit(scope, LimitKind::Concurrent))
        );
        s.settle(&r1, 1).await.unwrap();
        let r3 = reserve(&*s, k, "c3", &ask(0, 1, 0, t, g)).await.unwrap();
        assert_eq!(
            reserve(&*s, k, "c4", &ask(0, 1, 0, t, g)).await,
            Err(limit(scope, LimitKind::Concurrent))
        );
        // c2's place goes to a hold that expires.
        s.settle(&r2, 0).await.unwrap();
        s.reserve_ask(k, "c5", &ask(0, 1, 0, t, g), EXPIRING_TTL)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            reserve(&*s, k, "c6", &ask(0, 1, 0, t, g)).await,
            Err(limit(scope, LimitKind::Concurrent))
        );
        let id = if scope == Scope::Key { k } else { "team" };
        eventually(
            Duration::from_secs(30),
            "the expired hold leaves the count",
            || async { s.standing(scope, id, &p, t / 60).await.unwrap().in_flight == 1 },
        )
        .await;
        assert!(reserve(&*s, k, "c6", &ask(0, 1, 0, t, g)).await.is_ok());
        s.settle(&r3, 0).await.unwrap();
    }
}

/// A realtime session's next block (`in_flight: false`) is granted on a key and group
/// that allow one request in flight, and leaves the count as it found it.
async fn more_money_for_a_request_in_flight_does_not_count_again(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    let one = Policy {
        max_concurrent: Some(1),
        ..Policy::default()
    };
    group(&*s, "team", None, one.clone()).await;
    key(&*s, A, None, Some("team"), one).await;
    let t = now();
    let p = periods(&TimeZone::UTC, t);
    let a = ask(0, 1, 0, t, Some("team"));
    let session = reserve(&*s, A, "s", &a).await.unwrap();
    let more = Ask {
        in_flight: false,
        ..a.clone()
    };
    let block = reserve(&*s, A, "s-1", &more).await.unwrap();
    for (scope, id) in [(Scope::Key, A), (Scope::Group, "team")] {
        assert_eq!(
            s.standing(scope, id, &p, t / 60).await.unwrap().in_flight,
            1
        );
    }
    assert_eq!(
        reserve(&*s, A, "other", &a).await,
        Err(limit(Scope::Key, LimitKind::Concurrent))
    );
    s.settle(&block, 1).await.unwrap();
    assert_eq!(
        s.standing(Scope::Key, A, &p, t / 60)
            .await
            .unwrap()
            .in_flight,
        1
    );
    s.settle(&session, 1).await.unwrap();
    for (scope, id) in [(Scope::Key, A), (Scope::Group, "team")] {
        assert_eq!(
            s.standing(scope, id, &p, t / 60).await.unwrap().in_flight,
            0
        );
    }
    assert!(reserve(&*s, A, "other", &a).await.is_ok());
}

async fn stale_group_and_missing_or_disabled_group(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    key(&*s, A, None, Some("team"), Policy::default()).await;
    key(&*s, B, None, None, Policy::default()).await;
    let t = now();
    assert_eq!(
        reserve(&*s, A, "r1", &ask(0, 1, 0, t, None)).await,
        Err(ReserveDenied::Stale)
    );
    assert_eq!(
        s.reserve_ask(A, "r2", &Ask::money(0, 1, now()), TTL)
            .await
            .unwrap(),
        Err(ReserveDenied::Stale)
    );
    assert_eq!(
        reserve(&*s, B, "r3", &ask(0, 1, 0, t, Some("team"))).await,
        Err(ReserveDenied::Stale)
    );
    assert_eq!(
        reserve(&*s, A, "r4", &ask(0, 1, 0, t, Some("other"))).await,
        Err(ReserveDenied::Stale)
    );
    // The group does not exist, then is disabled, then is fine.
    assert_eq!(
        reserve(&*s, A, "r5", &ask(0, 1, 0, t, Some("team"))).await,
        Err(limit(Scope::Group, LimitKind::Group))
    );
    group(&*s, "team", None, Policy::default()).await;
    s.update_group(
        "team",
        &GroupPatch {
            status: Some(KeyStatus::Disabled),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        reserve(&*s, A, "r6", &ask(0, 1, 0, t, Some("team"))).await,
        Err(limit(Scope::Group, LimitKind::Group))
    );
    // A disabled key in a disabled group: the key's refusal comes first.
    s.update_key(
        A,
        &KeyPatch {
            status: Some(KeyStatus::Disabled),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        reserve(&*s, A, "r7", &ask(0, 1, 0, t, Some("team"))).await,
        Err(ReserveDenied::Disabled)
    );
    s.update_key(
        A,
        &KeyPatch {
            status: Some(KeyStatus::Enabled),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    s.update_group(
        "team",
        &GroupPatch {
            status: Some(KeyStatus::Enabled),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(reserve(&*s, A, "r8", &ask(0, 1, 0, t, Some("team")))
        .await
        .is_ok());
    // Moving the key to no group makes the old ask stale.
    let k = s
        .update_key(
            A,
            &KeyPatch {
                group: Some(None),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(k.group, None);
    assert_eq!(
        reserve(&*s, A, "r9", &ask(0, 1, 0, t, Some("team"))).await,
        Err(ReserveDenied::Stale)
    );
    // The refused ask holds nothing on the group (on a Cluster its half was taken back):
    // only r8 is there.
    let g = s
        .standing(Scope::Group, "team", &periods(&TimeZone::UTC, t), t / 60)
        .await
        .unwrap();
    assert_eq!((g.day, g.in_flight), (1, 1));
}

async fn settle_after_expiry_charges_every_counter(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    group(&*s, "team", Some(1000), day(500)).await;
    key(&*s, A, Some(1000), Some("team"), day(500)).await;
    let t = now();
    let p = periods(&TimeZone::UTC, t);
    let r = s
        .reserve_ask(A, "r1", &ask(50, 50, 10, t, Some("team")), 1)
        .await
        .unwrap()
        .unwrap();
    let k = s.standing(Scope::Key, A, &p, t / 60).await.unwrap();
    assert_eq!((k.day, k.in_flight, k.minute_tokens), (50, 1, 10));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let k = s.standing(Scope::Key, A, &p, t / 60).await.unwrap();
    let g = s.standing(Scope::Group, "team", &p, t / 60).await.unwrap();
    assert_eq!((k.day, k.in_flight, k.minute_tokens), (0, 0, 10));
    assert_eq!((g.day, g.in_flight, g.minute_tokens), (0, 0, 10));
    s.settle(&r, 40).await.unwrap();
    s.settle(&r, 40).await.unwrap();
    let k = s.standing(Scope::Key, A, &p, t / 60).await.unwrap();
    let g = s.standing(Scope::Group, "team", &p, t / 60).await.unwrap();
    assert_eq!((k.day, k.in_flight), (40, 0));
    assert_eq!((g.day, g.in_flight), (40, 0));
    assert_eq!(s.get_key(A).await.unwrap().unwrap().quota_used, 40);
    assert_eq!(s.get_group("team").await.unwrap().unwrap().quota_used, 40);
}

async fn reserve_and_settle_are_idempotent_with_policy(cluster: bool) {
    let be = Backend::start(cluster).await;
    let s = be.direct().await;
    let p = Policy {
        budget_day: Some(100),
        tpm: Some(1000),
        max_concurrent: Some(5),
        ..Policy::default()
    };
    group(&*s, "team", Some(1000), p.clone()).await;
    key(&*s, A, Some(1000), Some("team"), p).await;
    let t = now();
    let per = periods(&TimeZone::UTC, t);
    let a = ask(10, 60, 100, t, Some("team"));
    let r = reserve(&*s, A, "r1", &a).await.unwrap();
    let again = reserve(&*s, A, "r1", &a).await.unwrap();
    assert_eq!(r, again);
    for (scope, id) in [(Scope::Key, A), (Scope::Group, "team")] {
        let st = s.standing(scope, id, &per, t / 60).await.unwrap();
        assert_eq!(
            (st.day, st.minute_tokens, st.in_flight),
            (60, 100, 1),
            "{scope:?}"
        );
    }
    let u = usage(&r, 30, 50);
    s.settle_logged(&r, 30, &u).await.unwrap();
    s.settle_logged(&r, 30, &u).await.unwrap();
    s.settle(&r, 30).await.unwrap();
    for (scope, id) in [(Scope::Key, A), (Scope::Group, "team")] {
        let st = s.standing(scope, id, &per, t / 60).await.unwrap();
        assert_eq!(
            (st.day, st.minute_tokens, st.in_flight),
            (30, 50, 0),
            "{scope:?}"
        );
    }
    assert_eq!(s.get_key(A).await.unwrap().unwrap().quota_used, 30);
    assert_eq!(s.get_group("team").await.unwrap().unwrap().quota_used, 30);
    assert_eq!(s.recent_usage(A, 10).await.unwrap().len(), 1);
    assert_eq!(
        reserve(&*s, A, "r1", &a).await,
        Err(ReserveDenied::Released)
    );
    // Standing of what does not exist: zeros.
    let none = s.standing(Scope::Group, "nobody", &per, 0).await.unwrap();
    assert_eq!(none, Default::default());
}

async fn a_budget_added_under_a_lease_ends_the_lease(cluster: bool) {
    let be = Backend::start(cluster).await;
    let leasing = be
        .store(LeaseOptions {
            ttl_secs: 3,
            renew_every: Duration::from_millis(200),
            idle_after: Duration::from_secs(30),
            cooldown: Duration::from_millis(300),
            lease_after: 4,
            ..LeaseOptions::default()
        })
        .await;
    let admin = be.direct().await;
    key(&*admin, A, Some(1_000_000), None, Policy::default()).await;
    let rsva = format!("gw:rsva:{{{A}}}");
    let leased = || async {
        be.hkeys(&rsva)
            .await
            .iter()
            .any(|f| f.starts_with("lease:"))
    };
    let mut n = 0;
    while !leased().await {
        let r = leasing
            .reserve_ask(A, &format!("w{n}"), &Ask::money(10, 10, now()), TTL)
            .await
            .unwrap()
            .unwrap();
        leasing.settle(&r, 10).await.unwrap();
        n += 1;
        assert!(n < 5000, "the busy key never got a lease");
    }
    admin
        .update_key(
            A,
            &KeyPatch {
                policy: PolicyPatch {
                    budget_day: Some(Some(100)),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // The other instance's lease is given back at its next call.
    eventually(
        Duration::from_secs(5),
        "the lease is given back",
        || async { !leased().await },
    )
    .await;
    let t = now();
    let mut granted = 0;
    for i in 0..20 {
        match leasing
            .reserve_ask(A, &format!("p{i}"), &ask(30, 30, 0, t, None), TTL)
            .await
            .unwrap()
        {
            Ok(r) => {
                granted += r.amount;
                leasing.settle(&r, r.amount).await.unwrap();
            }
            Err(d) => assert_eq!(d, limit(Scope::Key, LimitKind::Budget(PeriodKind::Day))),
        }
    }
    assert_eq!(granted, 90);
    assert!(!leased().await, "a key with a budget is never leased again");
    let st = admin
        .standing(Scope::Key, A, &periods(&TimeZone::UTC, t), t / 60)
        .await
        .unwrap();
    assert_eq!(st.day, 90);
}

/// Records the most held at once.
#[derive(Default)]
struct Peak {
    now: AtomicI64,
    max: AtomicI64,
}

impl Peak {
    fn up(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }

    fn down(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn bursts_on_two_instances_never_pass_any_limit(cluster: bool) {
    let be = Backend::start(cluster).await;
    let stores = [
        be.store(LeaseOptions::default()).await,
        be.store(LeaseOptions::default()).await,
    ];
    let key_policy = Policy {
        budget_day: Some(2_000),
        tpm: Some(5_000),
        max_concurrent: Some(6),
        ..Policy::default()
    };
    group(
        &*stores[0],
        "team",
        None,
        Policy {
            budget_day: Some(3_000),
            max_concurrent: Some(8),
            ..Policy::default()
        },
    )
    .await;
    key(&*stores[0], A, None, Some("team"), key_policy.clone()).await;
    key(&*stores[0], B, None, Some("team"), key_policy).await;
    // One minute and one day for every ask: the counters are the same ones throughout.
    let t = now();
    let spent = Arc::new(AtomicI64::new(0));
    let spent_key = [Arc::new(AtomicI64::new(0)), Arc::new(AtomicI64::new(0))];
    let tokens = [Arc::new(AtomicI64::new(0)), Arc::new(AtomicI64::new(0))];
    let peaks = [Arc::new(Peak::default()), Arc::new(Peak::default())];
    let group_peak = Arc::new(Peak::default());
    for round in 0..3 {
        let mut tasks = Vec::new();
        for i in 0..64usize {
            let s = stores[i % 2].clone();
            let k = (i / 2) % 2;
            let key_id = [A, B][k];
            let (spent, spent_key, tokens, peak, group_peak) = (
                spent.clone(),
                spent_key[k].clone(),
                tokens[k].clone(),
                peaks[k].clone(),
                group_peak.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let rid = format!("b{round}-{i}");
                let a = ask(10, 100, 100, t, Some("team"));
                match s.reserve_ask(key_id, &rid, &a, TTL).await.unwrap() {
                    Ok(r) => {
                        peak.up();
                        group_peak.up();
                        tokio::time::sleep(Duration::from_millis(5 + (i as u64 % 7))).await;
                        let cost = r.amount * (i as i64 % 4 + 1) / 4;
                        let used = 20 + (i as u64 % 5) * 25;
                        peak.down();
                        group_peak.down();
                        s.settle_logged(&r, cost, &usage(&r, cost, used))
                            .await
                            .unwrap();
                        spent.fetch_add(cost, Ordering::SeqCst);
                        spent_key.fetch_add(cost, Ordering::SeqCst);
                        // The minute keeps what was used, never more than held.
                        tokens.fetch_add(used.min(100) as i64, Ordering::SeqCst);
                    }
                    Err(ReserveDenied::Limit(_)) => {}
                    Err(e) => panic!("refused as {e:?}"),
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }
    let p = periods(&TimeZone::UTC, t);
    let g = stores[1]
        .standing(Scope::Group, "team", &p, t / 60)
        .await
        .unwrap();
    assert_eq!(g.day, spent.load(Ordering::SeqCst));
    assert!(g.day <= 3_000, "{}", g.day);
    assert!(g.day > 0);
    assert_eq!(g.in_flight, 0);
    assert_eq!(
        g.minute_tokens as i64,
        tokens[0].load(Ordering::SeqCst) + tokens[1].load(Ordering::SeqCst)
    );
    assert_eq!(
        stores[0]
            .get_group("team")
            .await
            .unwrap()
            .unwrap()
            .quota_used,
        g.day
    );
    for (k, key_id) in [A, B].into_iter().enumerate() {
        let st = stores[0]
            .standing(Scope::Key, key_id, &p, t / 60)
            .await
            .unwrap();
        assert_eq!(st.day, spent_key[k].load(Ordering::SeqCst));
        assert!(st.day <= 2_000);
        assert_eq!(st.in_flight, 0);
        assert_eq!(st.minute_tokens as i64, tokens[k].load(Ordering::SeqCst));
        assert!(st.minute_tokens <= 5_000);
        assert!(peaks[k].max.load(Ordering::SeqCst) <= 6);
        assert_eq!(
            stores[0].get_key(key_id).await.unwrap().unwrap().quota_used,
            st.day
        );
    }
    assert!(group_peak.max.load(Ordering::SeqCst) <= 8);
    assert!(
        group_peak.max.load(Ordering::SeqCst) > 1,
        "the bursts overlapped"
    );
}
