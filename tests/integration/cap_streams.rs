//! The cap holds for streams too: without a usage report, with several choices, and
//! against an upstream that writes past the limit it was sent. Same prices, setup and
//! invariants as [`crate::cap`].

use crate::cap::{burst, on_both_stores, Setup, Store, OUTPUT_MICROS};
use crate::gateway::chat;
use crate::greedy_upstream::{Behaviour, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;

/// Output tokens delivered in a chat stream, all choices (the upstream's words).
fn tokens_in_stream(sse: &str) -> i64 {
    let chars: usize = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .flat_map(|v| v["choices"].as_array().cloned().unwrap_or_default())
        .map(|c| c["delta"]["content"].as_str().map_or(0, str::len))
        .sum();
    (chars / TOKEN.len()) as i64
}

/// Row 5: a stream without a usage report is charged for the output it delivered.
async fn a_stream_without_usage_is_charged_for_its_output(store: Store) {
    let b = Behaviour {
        usage: false,
        ..Behaviour::default()
    };
    let s = Setup::start(store, b, 1, 1.0).await;
    let mut body = chat("m", true);
    body["max_tokens"] = json!(100);
    let a = &burst(&s.gws, &s.key, &body, 1).await[0];
    assert_eq!(a.status, 200, "{}", a.text);
    let delivered = tokens_in_stream(&a.text);
    assert!(delivered > 0, "{}", a.text);
    let records = s.check(1).await;
    let cost = records[0]["cost_micro_usd"].as_i64().unwrap();
    assert!(
        cost > delivered * OUTPUT_MICROS,
        "a stream of {delivered} tokens without usage cost {cost} µUSD: {}",
        records[0]
    );
    assert_eq!(records[0]["cost_estimated"], json!(true), "{}", records[0]);
    s.check_limits_sent(Some(100));
}

on_both_stores!(a_stream_without_usage_is_charged_for_its_output);

/// Slow enough that a burst's streams overlap.
fn slow(b: Behaviour) -> Behaviour {
    Behaviour {
        interval: Duration::from_millis(2),
        ..b
    }
}

/// Row 6: 64 concurrent `n: 4` streams with `max_tokens: 400`, honoured upstream. A
/// request's worst case is 4 × 400 × 2 = 3,200 µUSD of output plus its input bound
/// (about 180 tokens of body, 180 µUSD): a $0.0167 cap (16,700 µUSD) affords four of them
/// and a fifth with a lowered limit. Reserving one choice (about 980 µUSD) and billing
/// four overspends it.
async fn concurrent_streams_of_four_choices_stay_under_the_cap(store: Store) {
    let b = slow(Behaviour {
        tokens_per_chunk: 50,
        ..Behaviour::default()
    });
    let s = Setup::start(store, b, 2, 0.0167).await;
    let mut body = chat("m", true);
    body["n"] = json!(4);
    body["max_tokens"] = json!(400);
    let answers = burst(&s.gws, &s.key, &body, 64).await;
    answers.iter().for_each(|a| a.check(true));
    s.check(answers.len()).await;
    s.check_limits_sent(Some(400));
}

on_both_stores!(concurrent_streams_of_four_choices_stay_under_the_cap);

/// Row 7: 64 concurrent streams with `max_tokens: 400` to an upstream that writes 1,875
/// tokens (3,750 µUSD) whatever it is sent. Each reserves about 980 µUSD; a $0.0047 cap
/// (4,700 µUSD) affords four or five. What the upstream reports past a grant is recorded
/// as an overrun, not charged.
async fn streams_past_their_limit_are_recorded_as_overruns_not_charged(store: Store) {
    let b = slow(Behaviour {
        ignore_limit: Some(1_875),
        tokens_per_chunk: 125,
        ..Behaviour::default()
    });
    let s = Setup::start(store, b, 2, 0.0047).await;
    let mut body = chat("m", true);
    body["max_tokens"] = json!(400);
    let answers = burst(&s.gws, &s.key, &body, 64).await;
    answers.iter().for_each(|a| a.check(false));
    let served = answers.iter().filter(|a| a.status == 200).count();
    assert!(served >= 1, "{answers:?}");
    let records = s.check(answers.len()).await;
    let overrun: Vec<&Value> = records.iter().filter(|r| r["status"] == 200).collect();
    assert_eq!(overrun.len(), served, "{records:?}");
    for r in overrun {
        assert!(
            r["overrun_micro_usd"].as_i64().is_some_and(|o| o > 0),
            "a request billed 1,875 tokens against a 400-token grant records its overrun: {r}"
        );
    }
    s.check_limits_sent(Some(400));
}

on_both_stores!(streams_past_their_limit_are_recorded_as_overruns_not_charged);
