//! Key policy and groups on the embedded store, continued: what settles and expiries
//! release, what survives a restart, and the key and group records (their updates, and an
//! older database's migration). The shared set-up is `policy_tests`'.

use super::policy_tests::{ask, at, day_budget, grant, group, opened, standing, tokens, DAY};
use super::tests::key_record as key;
use super::*;
use crate::store::policy::{Policy, PolicyPatch};

/// Key `k` and group `g` have settled `n` today, and the group `n` in all.
async fn settled_today(s: &EmbeddedStore, n: Micros) {
    assert_eq!(standing(s, Scope::Key, "k", at()).await.day, n);
    assert_eq!(standing(s, Scope::Group, "g", at()).await.day, n);
    assert_eq!(s.get_group("g").await.unwrap().unwrap().quota_used, n);
}

/// A video task's hold of 800 (for `ttl` seconds) on key `k` in group `g`, made by a
/// store that is closed again.
async fn task_held(dir: &std::path::Path, ttl: u64) -> Reservation {
    let s = EmbeddedStore::open(dir).unwrap();
    s.create_group(&group("g", None, day_budget(2_000)))
        .await
        .unwrap();
    s.create_key(&key("k", None, Some("g"), day_budget(1_000)))
        .await
        .unwrap();
    s.reserve_ask("k", "task_1", &ask(0, 800, at(), Some("g")), ttl)
        .await
        .unwrap()
        .unwrap()
}

/// What the next ask of up to 1,000 on key `k` in group `g` is granted.
async fn next_grant(s: &EmbeddedStore) -> Micros {
    grant(s, "k", "r2", &ask(0, 1_000, at(), Some("g")))
        .await
        .amount
}

#[tokio::test]
async fn a_settle_after_expiry_charges_the_period_and_group_counters() {
    let (_dir, s) = opened();
    s.create_group(&group("g", Some(10_000), day_budget(1_000)))
        .await
        .unwrap();
    s.create_key(&key("k", None, Some("g"), day_budget(1_000)))
        .await
        .unwrap();
    let r = s
        .reserve_ask("k", "r1", &ask(0, 600, at(), Some("g")), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(standing(&s, Scope::Key, "k", at()).await.day, 600);
    s.advance_clock(11);
    let k = standing(&s, Scope::Key, "k", at()).await;
    assert_eq!((k.day, k.in_flight), (0, 0), "the expired hold is released");
    assert_eq!(standing(&s, Scope::Group, "g", at()).await.day, 0);
    s.settle(&r, 500).await.unwrap();
    settled_today(&s, 500).await;
    assert_eq!(next_grant(&s).await, 500);
}

#[tokio::test]
async fn settled_period_spend_and_group_spend_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = EmbeddedStore::open(dir.path()).unwrap();
        s.create_group(&group("g", Some(5_000), day_budget(2_000)))
            .await
            .unwrap();
        s.create_key(&key("k", None, Some("g"), day_budget(1_000)))
            .await
            .unwrap();
        let r = grant(&s, "k", "r1", &ask(0, 700, at(), Some("g"))).await;
        s.settle(&r, 700).await.unwrap();
    }
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.lock_exclusive().unwrap();
    let rec = s.get_key("k").await.unwrap().unwrap();
    assert_eq!(rec.group.as_deref(), Some("g"));
    assert_eq!(rec.policy, day_budget(1_000));
    settled_today(&s, 700).await;
    assert_eq!(next_grant(&s).await, 300);
}

#[tokio::test]
async fn a_task_hold_keeps_its_counters_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let r = task_held(dir.path(), 60).await;
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.lock_exclusive().unwrap();
    // Still held, on the key's day and the group's.
    assert_eq!(standing(&s, Scope::Group, "g", at()).await.day, 800);
    assert_eq!(standing(&s, Scope::Key, "k", at()).await.day, 800);
    // The settle charges the day the hold was on, whatever day it is now.
    s.settle(&r, 300).await.unwrap();
    settled_today(&s, 300).await;
    assert_eq!(standing(&s, Scope::Key, "k", at() + DAY).await.day, 0);
}

#[tokio::test]
async fn a_settle_of_a_task_whose_account_is_not_loaded_charges_its_counters() {
    let dir = tempfile::tempdir().unwrap();
    let r = task_held(dir.path(), 10).await;
    // Expired by the time the store opens: not loaded, but its row says what it was on.
    Connection::open(dir.path().join("gateway.db"))
        .unwrap()
        .execute("UPDATE reservations SET expires_at = 1", [])
        .unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert!(!s.ledger.is_loaded("k"));
    s.settle(&r, 300).await.unwrap();
    settled_today(&s, 300).await;
}

#[tokio::test]
async fn reserve_and_settle_stay_idempotent_with_a_policy() {
    let (_dir, s) = opened();
    let policy = Policy {
        budget_day: Some(1_000),
        tpm: Some(10_000),
        max_concurrent: Some(5),
        ..Policy::default()
    };
    s.create_group(&group("g", Some(5_000), policy.clone()))
        .await
        .unwrap();
    s.create_key(&key("k", Some(5_000), Some("g"), policy))
        .await
        .unwrap();
    let a = tokens(ask(0, 400, at(), Some("g")), 100);
    let r = grant(&s, "k", "r1", &a).await;
    let again = grant(&s, "k", "r1", &tokens(ask(0, 900, at(), Some("g")), 100)).await;
    assert_eq!(again, r);
    for scope in [Scope::Key, Scope::Group] {
        let id = if scope == Scope::Key { "k" } else { "g" };
        let st = standing(&s, scope, id, at()).await;
        assert_eq!((st.day, st.minute_tokens, st.in_flight), (400, 100, 1));
    }
    s.settle(&r, 250).await.unwrap();
    s.settle(&r, 250).await.unwrap();
    for scope in [Scope::Key, Scope::Group] {
        let id = if scope == Scope::Key { "k" } else { "g" };
        let st = standing(&s, scope, id, at()).await;
        assert_eq!((st.day, st.minute_tokens, st.in_flight), (250, 100, 0));
    }
    assert_eq!(s.get_key("k").await.unwrap().unwrap().quota_used, 250);
    assert_eq!(s.get_group("g").await.unwrap().unwrap().quota_used, 250);
    assert_eq!(
        s.reserve_ask("k", "r1", &a, 60).await.unwrap(),
        Err(ReserveDenied::Released)
    );
}

/// A key patch that sets (or, with `None`, clears) only the day budget.
fn day_budget_patch(budget: Option<Micros>) -> KeyPatch {
    KeyPatch {
        policy: PolicyPatch {
            budget_day: Some(budget),
            ..PolicyPatch::default()
        },
        ..KeyPatch::default()
    }
}

#[tokio::test]
async fn update_key_persists_group_and_policy_and_the_ledger_follows() {
    let (_dir, s) = opened();
    s.create_key(&key("k", None, None, Policy::default()))
        .await
        .unwrap();
    assert_eq!(
        grant(&s, "k", "r1", &ask(0, 500, at(), None)).await.amount,
        500
    );
    s.update_key("k", &day_budget_patch(Some(100)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        grant(&s, "k", "r2", &ask(0, 500, at(), None)).await.amount,
        100
    );
    assert_eq!(
        s.get_key("k").await.unwrap().unwrap().policy.budget_day,
        Some(100)
    );
    s.update_key("k", &day_budget_patch(None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        grant(&s, "k", "r3", &ask(0, 500, at(), None)).await.amount,
        500
    );
    assert_eq!(s.list_keys().await.unwrap()[0].policy, Policy::default());
}

#[tokio::test]
async fn groups_are_created_once_listed_updated_and_deleted() {
    let (_dir, s) = opened();
    let mut b = group("b", Some(10), day_budget(5));
    b.created_at = 1;
    s.create_group(&b).await.unwrap();
    s.create_group(&group("a", None, Policy::default()))
        .await
        .unwrap();
    assert!(matches!(
        s.create_group(&group("a", None, Policy::default())).await,
        Err(StoreError::Conflict(_))
    ));
    let ids: Vec<_> = s
        .list_groups()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.id)
        .collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(s.get_group("b").await.unwrap().unwrap(), b);
    let patch = GroupPatch {
        name: Some("renamed".into()),
        quota_limit: Some(None),
        policy: PolicyPatch {
            tpm: Some(Some(9)),
            ..PolicyPatch::default()
        },
        ..GroupPatch::default()
    };
    let g = s.update_group("b", &patch).await.unwrap().unwrap();
    assert_eq!(
        (g.name.as_str(), g.quota_limit, g.policy.tpm),
        ("renamed", None, Some(9))
    );
    assert_eq!(s.get_group("b").await.unwrap().unwrap(), g);
    assert_eq!(s.update_group("zz", &patch).await.unwrap(), None);
    assert!(s.delete_group("b").await.unwrap());
    assert!(!s.delete_group("b").await.unwrap());
    assert_eq!(s.get_group("b").await.unwrap(), None);
}

/// A database written before keys had groups and policies opens, and gains the columns.
#[tokio::test]
async fn an_older_database_gains_the_new_columns() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(dir.path().join("gateway.db")).unwrap();
        c.execute_batch(
            "CREATE TABLE keys (
                id TEXT PRIMARY KEY, hash TEXT NOT NULL, display TEXT NOT NULL, name TEXT NOT NULL,
                status TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER,
                models TEXT NOT NULL, allow_ips TEXT NOT NULL, rpm INTEGER,
                quota_limit INTEGER, quota_used INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE reservations (
                id TEXT PRIMARY KEY, key_id TEXT NOT NULL, amount INTEGER NOT NULL,
                expires_at INTEGER NOT NULL);
             INSERT INTO keys VALUES ('k', 'h', 'd', 'n', 'enabled', 0, NULL, '[]', '[]', NULL, 100, 40);",
        )
        .unwrap();
    }
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let rec = s.get_key("k").await.unwrap().unwrap();
    assert_eq!(
        (rec.quota_used, rec.group, rec.policy),
        (40, None, Policy::default())
    );
    assert_eq!(
        grant(&s, "k", "task_1", &ask(0, 100, at(), None))
            .await
            .amount,
        60
    );
}
