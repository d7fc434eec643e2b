//! The circuit's states and the keys' turns.
use super::*;

fn circuit(failures: u32, cooldown_ms: u64) -> Circuit {
    Circuit {
        failures,
        cooldown: Duration::from_millis(cooldown_ms),
    }
}

#[test]
fn opens_after_consecutive_failures_and_a_probe_closes_it() {
    let c = circuit(3, 50);
    let h = Health::new("c");
    for _ in 0..2 {
        h.failure(&c, ErrorKind::Connect, None);
        assert!(h.admit(&c));
    }
    h.success(Duration::from_millis(5));
    for _ in 0..2 {
        h.failure(&c, ErrorKind::Status5xx, Some(Duration::from_millis(5)));
    }
    assert_eq!(h.state(&c), State::Closed, "a success resets the count");
    h.failure(&c, ErrorKind::Timeout, None);
    assert_eq!(h.state(&c), State::Open);
    assert!(!h.admit(&c), "open: no request goes");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !h.admit(&c) {
        assert!(Instant::now() < deadline, "the cool-down ends");
        std::thread::yield_now();
    }
    assert!(!h.admit(&c), "one probe at a time");
    h.success(Duration::from_millis(5));
    assert_eq!(h.state(&c), State::Closed);
    assert!(h.admit(&c));
}

#[test]
fn a_failed_probe_opens_again_and_request_faults_do_not_count() {
    let c = circuit(1, 10);
    let h = Health::new("c");
    h.failure(&c, ErrorKind::Status4xx, Some(Duration::from_millis(1)));
    h.failure(&c, ErrorKind::Auth, Some(Duration::from_millis(1)));
    assert_eq!(h.state(&c), State::Closed);
    h.failure(&c, ErrorKind::Status429, Some(Duration::from_millis(1)));
    assert_eq!(
        State::from_u8(h.state.load(Acquire)),
        State::Open,
        "a 429 counts"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !h.admit(&c) {
        assert!(Instant::now() < deadline);
        std::thread::yield_now();
    }
    h.failure(&c, ErrorKind::CutStream, None);
    assert_eq!(State::from_u8(h.state.load(Acquire)), State::Open);
    assert_eq!(h.view(&c).last_error, Some("cut_stream"));
}

#[test]
fn zero_failures_never_opens() {
    let c = circuit(0, 10);
    let h = Health::new("c");
    for _ in 0..100 {
        h.failure(&c, ErrorKind::Connect, None);
    }
    assert!(h.admit(&c));
}

#[test]
fn keys_rotate_and_a_refused_one_is_set_aside() {
    let k = Keys::new(vec!["a".into(), "b".into(), "c".into()]);
    let seen: Vec<&str> = (0..6).map(|_| k.pick().secret).collect();
    assert_eq!(seen, ["a", "b", "c", "a", "b", "c"]);
    assert!(k.set_aside(1, 401));
    assert!(!k.set_aside(1, 401), "reported once");
    let seen: Vec<&str> = (0..4).map(|_| k.pick().secret).collect();
    assert!(!seen.contains(&"b"), "{seen:?}");
    k.set_aside(0, 403);
    k.set_aside(2, 401);
    assert!(!k.usable());
    assert!(
        !k.pick().secret.is_empty(),
        "still a key when all are aside"
    );
    assert_eq!(k.set_aside_count(), 3);
    let none = Keys::new(vec![]);
    assert!(none.usable());
    assert_eq!(none.pick().secret, "");
    assert_ne!(fingerprint("a"), fingerprint("b"));
    assert_eq!(fingerprint("a").len(), 8);
}
