//! The cap as a property: random sequences of requests (streaming or not, with or
//! without an output limit, one or several choices) against random upstream behaviours
//! (usage reported or not, the output limit honoured or ignored), on either store.
//! After every sequence: the key was charged at most its cap, and its usage records add
//! up to exactly what it was charged.

use crate::cap::{burst, Setup, Store};
use crate::gateway::chat;
use crate::greedy_upstream::Behaviour;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;
use std::time::Duration;

#[derive(Debug, Clone)]
struct Step {
    stream: bool,
    max_tokens: Option<u64>,
    n: u64,
    /// Requests sent at once.
    copies: usize,
}

#[derive(Debug, Clone)]
struct Case {
    redis: bool,
    usage: bool,
    ignore_limit: Option<u64>,
    /// micro-USD.
    cap: i64,
    steps: Vec<Step>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        any::<bool>(),
        prop::option::of(1u64..3_000),
        1u64..5,
        1usize..9,
    )
        .prop_map(|(stream, max_tokens, n, copies)| Step {
            stream,
            max_tokens,
            n,
            copies,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::bool::weighted(0.3),
        any::<bool>(),
        prop::option::of(100u64..4_000),
        2_000i64..60_000,
        prop::collection::vec(step(), 1..6),
    )
        .prop_map(|(redis, usage, ignore_limit, cap, steps)| Case {
            redis,
            usage,
            ignore_limit,
            cap,
            steps,
        })
}

async fn run(case: Case) {
    let behaviour = Behaviour {
        usage: case.usage,
        ignore_limit: case.ignore_limit,
        interval: Duration::ZERO,
        tokens_per_chunk: 500,
    };
    let (store, instances) = if case.redis {
        (Store::Redis, 2)
    } else {
        (Store::Embedded, 1)
    };
    let s = Setup::start(store, behaviour, instances, case.cap as f64 / 1e6).await;
    let mut answered = 0;
    for st in &case.steps {
        let mut body = chat("m", st.stream);
        body["n"] = json!(st.n);
        if let Some(m) = st.max_tokens {
            body["max_tokens"] = json!(m);
        }
        for a in burst(&s.gws, &s.key, &body, st.copies).await {
            a.check(true);
            // Every answer, refusals included, has its usage record.
            answered += 1;
        }
        s.check(answered).await;
    }
    s.check_limits_sent(None);
}

#[test]
fn random_requests_and_upstreams_never_pass_the_cap() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |c| {
        rt.block_on(run(c));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
