//! The cap is a promise: no key spends past it, whatever the client leaves out and however
//! much the upstream writes (README "Why the cap holds"; spec 2.1, quota limit).
//!
//! Against [`GreedyUpstream`], which writes its own maximum of 50,000 tokens per choice
//! when a request names no output limit, on both stores. After every request or burst:
//! - `used_micro_usd` (`GET /api/usage/token`) is at most the cap;
//! - the key's usage records (`GET /api/log/token`), one per answered request, add up to
//!   `used_micro_usd`;
//! - every request that reached the upstream carried an output limit, never above the
//!   client's own.
//!
//! Prices: input 1 µUSD and output 2 µUSD per token (USD 1 and 2 per 1M tokens). The
//! default output reservation (16,384 tokens) is then 32,768 µUSD, within a $0.05 cap, and
//! the upstream's own 50,000 tokens cost 100,000 µUSD: twice the cap.
//!
//! "Row N" is row N of the table in issue 11; each row runs on both stores, and the
//! concurrent ones on Redis spread their burst over two instances.

use crate::gateway::{chat, error_of, StoreKind, TestGateway};
use crate::greedy_upstream::{Behaviour, GreedyUpstream, TOKEN};
use crate::redis_server::RedisServer;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// µUSD per output token.
pub const OUTPUT_MICROS: i64 = 2;

pub fn config(base: &str) -> String {
    format!(
        "channels:\n  - {{ name: greedy, protocol: openai, base_url: \"{base}\", models: [m] }}\nprices:\n  m: {{ input: 1.0, output: 2.0 }}\n"
    )
}

#[derive(Debug, Clone, Copy)]
pub enum Store {
    Embedded,
    Redis,
}

/// One upstream, one key with a cap, and its gateways: one on the embedded store, or
/// `instances` sharing one private Redis.
pub struct Setup {
    pub gws: Vec<TestGateway>,
    pub up: GreedyUpstream,
    pub key: String,
    pub cap: i64,
    _redis: Option<RedisServer>,
}

impl Setup {
    pub async fn start(store: Store, b: Behaviour, instances: usize, cap_usd: f64) -> Setup {
        let up = GreedyUpstream::start(b).await;
        let cfg = config(&up.base_url());
        let (gws, redis) = match store {
            Store::Embedded => (
                vec![TestGateway::start(&cfg, StoreKind::Embedded).await],
                None,
            ),
            Store::Redis => {
                let redis = RedisServer::start().await;
                let mut gws = Vec::new();
                for _ in 0..instances {
                    gws.push(TestGateway::start(&cfg, StoreKind::Redis(redis.url())).await);
                }
                (gws, Some(redis))
            }
        };
        let (key, _) = gws[0].create_key(json!({"quota_usd": cap_usd})).await;
        Setup {
            gws,
            up,
            key,
            cap: (cap_usd * 1_000_000.0).round() as i64,
            _redis: redis,
        }
    }

    /// The key's charge and its usage records once every answered request has its
    /// record, after asserting both invariants.
    pub async fn check(&self, answered: usize) -> Vec<Value> {
        let gw = &self.gws[0];
        let path = "/api/log/token?limit=1000";
        let deadline = Instant::now() + Duration::from_secs(10);
        let records = loop {
            let (s, log) = gw.get(path, &self.key).await;
            assert_eq!(s, 200, "{log}");
            let data = log["data"].as_array().cloned().unwrap_or_default();
            if data.len() == answered {
                break data;
            }
            assert!(
                Instant::now() < deadline,
                "{} usage records for {answered} answered requests",
                data.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let (s, u) = gw.get("/api/usage/token", &self.key).await;
        assert_eq!(s, 200, "{u}");
        let used = u["used_micro_usd"].as_i64().unwrap();
        assert!(
            used <= self.cap,
            "charged {used} µUSD on a cap of {} µUSD",
            self.cap
        );
        let logged: i64 = records
            .iter()
            .map(|r| r["cost_micro_usd"].as_i64().unwrap())
            .sum();
        assert_eq!(
            logged, used,
            "usage records add up to what the key was charged"
        );
        records
    }

    /// Every request that reached the upstream named an output limit, at most `client`'s.
    pub fn check_limits_sent(&self, client: Option<u64>) {
        let asked = self.up.asked();
        for a in &asked {
            let limit = a.limit();
            assert!(
                limit.is_some(),
                "upstream got no output limit: {a:?} ({} requests)",
                asked.len()
            );
            if let Some(c) = client {
                assert!(
                    limit <= Some(c),
                    "output limit raised past the client's {c}: {a:?}"
                );
            }
        }
    }
}

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub text: String,
}

impl Answer {
    /// A refusal must be one the promise allows: 403 `insufficient_quota`, or (with
    /// `n_refusable`) a 400 naming `n`.
    pub fn check(&self, n_refusable: bool) {
        match self.status {
            200 => {}
            403 => assert_eq!(
                error_of(&self.text)["code"],
                "insufficient_quota",
                "{}",
                self.text
            ),
            400 if n_refusable => assert_eq!(error_of(&self.text)["param"], "n", "{}", self.text),
            s => panic!("unexpected {s}: {}", self.text),
        }
    }
}

/// Sends `count` copies of a chat body at once, spread over the gateways.
pub async fn burst(gws: &[TestGateway], key: &str, body: &Value, count: usize) -> Vec<Answer> {
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let gw = &gws[i % gws.len()];
            let req = gw
                .http
                .post(gw.url("/v1/chat/completions"))
                .bearer_auth(key)
                .json(body);
            tokio::spawn(async move {
                let r = req.send().await.unwrap();
                let status = r.status().as_u16();
                Answer {
                    status,
                    text: r.text().await.unwrap(),
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// Output tokens delivered in a whole chat answer, all choices (the upstream's words).
pub fn tokens_in_answer(text: &str) -> i64 {
    let v: Value = serde_json::from_str(text).unwrap();
    let chars: usize = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"]["content"].as_str().map_or(0, str::len))
        .sum();
    (chars / TOKEN.len()) as i64
}

/// A test per store for one row: `row::embedded` and `row::redis`.
macro_rules! on_both_stores {
    ($row:ident) => {
        mod $row {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$row($crate::cap::Store::Embedded).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$row($crate::cap::Store::Redis).await
            }
        }
    };
}
pub(crate) use on_both_stores;

/// Row 1: one request with no `max_tokens` on a $0.05 cap.
async fn a_request_without_max_tokens_is_limited_and_stays_under_the_cap(store: Store) {
    let s = Setup::start(store, Behaviour::default(), 1, 0.05).await;
    let a = &burst(&s.gws, &s.key, &chat("m", false), 1).await[0];
    a.check(false);
    assert_eq!(
        a.status, 200,
        "a $0.05 key affords one plain request: {}",
        a.text
    );
    s.check(1).await;
    s.check_limits_sent(None);
}

on_both_stores!(a_request_without_max_tokens_is_limited_and_stays_under_the_cap);

/// Row 2: 32 concurrent requests with no `max_tokens` on a $0.10 cap (about three
/// default reservations of 32,768 µUSD each).
async fn thirty_two_concurrent_requests_without_max_tokens_stay_under_the_cap(store: Store) {
    let s = Setup::start(store, Behaviour::default(), 2, 0.10).await;
    let answers = burst(&s.gws, &s.key, &chat("m", false), 32).await;
    answers.iter().for_each(|a| a.check(false));
    assert!(answers.iter().any(|a| a.status == 200), "{answers:?}");
    s.check(answers.len()).await;
    s.check_limits_sent(None);
}

on_both_stores!(thirty_two_concurrent_requests_without_max_tokens_stay_under_the_cap);

/// Row 3: `n: 4` with `max_tokens: 8000` on a $0.05 cap: four choices of 8,000 tokens
/// cost 64,000 µUSD, one choice 16,000. Refusing (403, or 400 naming `n`) or lowering the
/// limit are all kept promises.
async fn four_choices_are_reserved_not_billed_past_the_cap(store: Store) {
    let s = Setup::start(store, Behaviour::default(), 1, 0.05).await;
    let mut body = chat("m", false);
    body["n"] = json!(4);
    body["max_tokens"] = json!(8000);
    let a = &burst(&s.gws, &s.key, &body, 1).await[0];
    a.check(true);
    s.check(1).await;
    s.check_limits_sent(Some(8000));
}

on_both_stores!(four_choices_are_reserved_not_billed_past_the_cap);

/// Row 4: an answer without `usage` is charged for what was delivered.
async fn an_answer_without_usage_is_charged_for_its_output(store: Store) {
    let b = Behaviour {
        usage: false,
        ..Behaviour::default()
    };
    let s = Setup::start(store, b, 1, 1.0).await;
    let mut body = chat("m", false);
    body["max_tokens"] = json!(100);
    let a = &burst(&s.gws, &s.key, &body, 1).await[0];
    assert_eq!(a.status, 200, "{}", a.text);
    let delivered = tokens_in_answer(&a.text);
    assert!(delivered > 0, "{}", a.text);
    let records = s.check(1).await;
    let cost = records[0]["cost_micro_usd"].as_i64().unwrap();
    // At least the output delivered (counted at one token per byte it is more) and some
    // input on top.
    assert!(
        cost > delivered * OUTPUT_MICROS,
        "an answer of {delivered} tokens without usage cost {cost} µUSD: {}",
        records[0]
    );
    assert_eq!(records[0]["cost_estimated"], json!(true), "{}", records[0]);
    s.check_limits_sent(Some(100));
}

on_both_stores!(an_answer_without_usage_is_charged_for_its_output);

/// The messages client protocol, translated to the chat upstream, is limited too:
/// `max_tokens` is required, and 100,000 tokens (200,000 µUSD) are past the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_request_is_limited_upstream_and_stays_under_the_cap() {
    let s = Setup::start(Store::Embedded, Behaviour::default(), 1, 0.05).await;
    let gw = &s.gws[0];
    let r = gw
        .http
        .post(gw.url("/v1/messages"))
        .header("x-api-key", &s.key)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "m", "max_tokens": 100_000,
            "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    let (status, text) = (r.status().as_u16(), r.text().await.unwrap());
    assert_eq!(status, 200, "{text}");
    s.check(1).await;
    s.check_limits_sent(Some(100_000));
}

/// The generate-content client protocol, translated to the chat upstream, without
/// `generationConfig.maxOutputTokens`: row 1 in another protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generate_content_request_without_a_limit_is_limited_upstream_and_stays_under_the_cap() {
    let s = Setup::start(Store::Embedded, Behaviour::default(), 1, 0.05).await;
    let gw = &s.gws[0];
    let r = gw
        .http
        .post(gw.url("/v1beta/models/m:generateContent"))
        .header("x-goog-api-key", &s.key)
        .json(&json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}))
        .send()
        .await
        .unwrap();
    let (status, text) = (r.status().as_u16(), r.text().await.unwrap());
    assert_eq!(status, 200, "{text}");
    s.check(1).await;
    s.check_limits_sent(None);
}
