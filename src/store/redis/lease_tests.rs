use super::*;

fn opts() -> LeaseOptions {
    LeaseOptions::default()
}

fn reply(lease: Micros) -> Reply {
    Reply {
        status: "enabled".into(),
        lease,
        left: None,
        limited: true,
        wanted: false,
        quota: None,
    }
}

/// A key that had enough script grants of 100 to want a lease, then got `lease`.
fn leasing(lease: Micros) -> (KeyLease, Instant) {
    let now = Instant::now();
    let o = opts();
    let mut k = KeyLease::new(now);
    for _ in 0..o.lease_after {
        k.note_grant(100, now, &o);
    }
    assert!(k.wants_lease(now, &o));
    let p = k.plan(0, now, false, &o);
    assert_eq!(p.floor, 0);
    assert!(
        p.target >= 16 * 100,
        "a lease sized to the recent grants: {p:?}"
    );
    k.apply(&reply(lease), now, false, &o);
    assert_eq!(k.mode, Mode::Leasing);
    (k, now)
}

fn grant(k: &mut KeyLease, rid: &str, max: Micros, now: Instant) -> Local {
    k.try_reserve("k", rid, max, 3600, now, &opts())
}

#[test]
fn reserves_come_from_the_lease_until_it_is_short() {
    let (mut k, now) = leasing(1_000);
    for n in 0..10 {
        assert!(matches!(
            grant(&mut k, &format!("r{n}"), 100, now),
            Local::Granted(_)
        ));
    }
    assert_eq!(k.committed(), 1_000);
    assert_eq!(
        grant(&mut k, "r10", 100, now),
        Local::TopUp,
        "a big lease grows"
    );
    // A retry of a held id answers its grant.
    assert_eq!(
        grant(&mut k, "r3", 100, now),
        Local::Granted(Reservation {
            id: "r3".into(),
            key_id: "k".into(),
            amount: 100
        })
    );
}

#[test]
fn settled_charges_leave_in_numbered_batches_resent_as_they_are() {
    let (mut k, now) = leasing(1_000);
    for n in 0..3 {
        grant(&mut k, &format!("r{n}"), 100, now);
    }
    assert!(k.settle("r0", 40, Some("{\"a\":1}".into()), now));
    assert!(k.settle("r1", 0, Some("{\"a\":2}".into()), now));
    assert!(!k.settle("r1", 0, None, now), "settled once");
    assert_eq!(k.committed(), 100 + 40);
    let first = k.plan(0, now, false, &opts());
    let b = first.batch.clone().unwrap();
    assert_eq!((b.seq, b.charge), (1, 40));
    assert_eq!(b.records, "[{\"a\":1},{\"a\":2}]");
    // Settled while the call is under way: waits for the next batch.
    assert!(k.settle("r2", 60, None, now));
    k.failed(now);
    let again = k.plan(0, now, false, &opts());
    assert_eq!(again.batch, first.batch, "the same batch, the same number");
    k.apply(&reply(900), now, false, &opts());
    let next = k.plan(0, now, false, &opts());
    assert_eq!(next.batch.unwrap().seq, 2);
}

#[test]
fn a_smaller_lease_is_asked_for_only_after_the_cap_is_lowered() {
    let (mut k, now) = leasing(10_000);
    grant(&mut k, "r0", 300, now);
    k.settle("r0", 100, None, now);
    grant(&mut k, "r1", 300, now);
    // Another instance wants the money: drain.
    k.apply(
        &Reply {
            wanted: true,
            ..reply(10_000)
        },
        now,
        false,
        &opts(),
    );
    assert_eq!(k.mode, Mode::Draining);
    assert_eq!(grant(&mut k, "r2", 1, now), Local::Script);
    let p = k.plan(0, now, false, &opts());
    let charge = p.batch.as_ref().unwrap().charge;
    assert_eq!(charge, 100);
    assert_eq!(p.target, 300, "what requests hold");
    assert_eq!(p.floor, 300, "never below what requests hold");
    assert_eq!(
        k.cap, 400,
        "lowered before the call: nothing more is handed out"
    );
    k.apply(&reply(300), now, false, &opts());
    k.settle("r1", 50, None, now);
    let p = k.plan(0, now, false, &opts());
    assert_eq!((p.target, p.floor), (0, 0));
    k.apply(&reply(0), now, false, &opts());
    assert_eq!(k.mode, Mode::Off);
    assert!(!k.wants_lease(now, &opts()), "cooling down");
}

#[test]
fn a_lease_too_small_for_a_few_requests_is_not_kept() {
    let now = Instant::now();
    let o = opts();
    let mut k = KeyLease::new(now);
    for _ in 0..o.lease_after {
        k.note_grant(1_000, now, &o);
    }
    k.plan(0, now, false, &o);
    // Near the end of the quota, a quarter of what is left buys fewer than four requests.
    k.apply(&reply(2_000), now, false, &o);
    assert_eq!(k.mode, Mode::Draining);
    assert_eq!(grant(&mut k, "r0", 1_000, now), Local::Script);
}

#[test]
fn a_disabled_or_expiring_key_is_served_by_script() {
    let (mut k, now) = leasing(1_000);
    k.apply(
        &Reply {
            status: "disabled".into(),
            ..reply(1_000)
        },
        now,
        false,
        &opts(),
    );
    assert_eq!(grant(&mut k, "r0", 1, now), Local::Script);
    let (mut k, now) = leasing(1_000);
    k.apply(
        &Reply {
            left: Some(1),
            ..reply(1_000)
        },
        now,
        false,
        &opts(),
    );
    assert_eq!(grant(&mut k, "r0", 1, now), Local::Script);
}

#[test]
fn unlimited_keys_hold_no_money_and_are_served_locally() {
    let now = Instant::now();
    let o = opts();
    let mut k = KeyLease::new(now);
    for _ in 0..o.lease_after {
        k.note_grant(1_000, now, &o);
    }
    k.plan(0, now, false, &o);
    k.apply(
        &Reply {
            limited: false,
            ..reply(0)
        },
        now,
        false,
        &o,
    );
    assert_eq!(k.mode, Mode::Leasing);
    assert!(matches!(
        grant(&mut k, "r0", 1_000_000, now),
        Local::Granted(_)
    ));
    assert_eq!(k.plan(0, now, false, &o).target, 0);
}

#[test]
fn an_idle_lease_is_given_back() {
    let (mut k, now) = leasing(1_000);
    let later = now + opts().idle_after;
    assert!(k.due(later, false, &opts()));
    let p = k.plan(0, later, false, &opts());
    assert_eq!((p.target, p.floor), (0, 0));
}

/// The rate windows roll over only at a grant: a key that was busy and went quiet must not
/// keep asking for leases on its old counts (each would be taken and drained at once,
/// two scripts a tick for as long as it stays quiet), nor take one for a lone request
/// after the quiet.
#[test]
fn a_quiet_key_wants_no_lease_on_old_counts() {
    let o = opts();
    let t0 = Instant::now();
    let mut k = KeyLease::new(t0);
    for _ in 0..o.lease_after {
        k.note_grant(100, t0, &o);
    }
    assert!(k.wants_lease(t0, &o));
    let quiet = t0 + o.idle_after + o.rate_window * 2;
    assert!(
        !k.wants_lease(quiet, &o),
        "quiet for longer than idle_after"
    );
    k.note_grant(100, quiet, &o);
    assert!(!k.wants_lease(quiet, &o), "one request after the quiet");
    // Busy again: as many grants as make a lease worth it, within a window.
    for _ in 1..o.lease_after {
        k.note_grant(100, quiet, &o);
    }
    assert!(k.wants_lease(quiet, &o));
}

/// What answers served from a lease tell of the key's cap: what nobody held at the last
/// reply, plus the part of the lease its requests have not taken; nothing without a cap.
#[test]
fn a_lease_tells_what_the_cap_leaves() {
    let (mut k, now) = leasing(1_000);
    assert_eq!(k.headroom(), Headroom::default(), "no cap told yet");
    let o = opts();
    k.apply(
        &Reply {
            quota: Some((50_000, 20_000)),
            ..reply(1_000)
        },
        now,
        false,
        &o,
    );
    let left = |k: &KeyLease| {
        k.headroom()
            .money
            .map(|(which, m)| (which, m.limit, m.left))
    };
    let cap = Limit::key(LimitKind::Quota);
    assert_eq!(left(&k), Some((cap, 50_000, 21_000)));
    assert!(matches!(grant(&mut k, "r1", 300, now), Local::Granted(_)));
    assert_eq!(left(&k), Some((cap, 50_000, 20_700)));
    // Settled for less: what the request did not spend is the key's again.
    k.settle("r1", 100, None, now);
    assert_eq!(left(&k), Some((cap, 50_000, 20_900)));
}
