//! OpenAI's rate-limit headers on every answer of a key with limits, on both stores: the
//! requests counted down over a minute and whole again in the next, the tokens from tpm
//! and the budget from the tightest money limit as the reserve counted them (exactly:
//! what an answer says is what the next request finds), a 429 that says when to come
//! back without `Retry-After`, nothing for a key without limits, the same on a streamed
//! answer's head, and what the official openai SDK reads of them.
//!
//! The gateway's limits clock is pinned inside a minute, so no test meets a real minute's
//! end, and moved on to begin the next window.

use crate::gateway::{chat, StoreKind, TestGateway};
use crate::redis_server::RedisServer;
use model_gateway::billing::input_token_bound;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const DEMO: &str = "channels:
  - name: demo
    protocol: demo
    tokens_per_second: 5000
    models: [demo]
prices:
  demo: { input: 1.0, output: 2.0 }
";

/// Both stores: one embedded gateway, or one on a private Redis.
enum Setup {
    Embedded,
    Redis,
}

struct Env {
    gw: TestGateway,
    _redis: Option<RedisServer>,
}

async fn env(setup: Setup) -> Env {
    let (store, redis) = match setup {
        Setup::Embedded => (StoreKind::Embedded, None),
        Setup::Redis => {
            let r = RedisServer::start().await;
            (StoreKind::Redis(r.url()), Some(r))
        }
    };
    let gw = TestGateway::start(DEMO, store).await;
    let env = Env { gw, _redis: redis };
    // Today's noon (UTC), half a minute in: every count below stays in one minute, and
    // in one day, until the test moves on.
    let now = env.clock().now();
    env.clock().pin(now - now.rem_euclid(86_400) + 43_200 + 30);
    env
}

impl Env {
    fn clock(&self) -> &model_gateway::billing::Clock {
        &self.gw.running.gateway.calendar.clock
    }

    /// Moves the limits clock into the next minute.
    fn next_minute(&self) {
        let now = self.clock().now();
        self.clock().pin(now + 60);
    }

    async fn models(&self, key: &str) -> (u16, HeaderMap) {
        let r = self
            .gw
            .http
            .get(self.gw.url("/v1/models"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.headers().clone())
    }

    async fn chat(&self, key: &str, body: &Value) -> (u16, HeaderMap, String) {
        self.gw.post("/v1/chat/completions", key, body).await
    }
}

/// Runs `$check(setup)` on both stores, as `<module>::$check::{embedded, redis}`.
macro_rules! both {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$check(super::Setup::Embedded).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$check(super::Setup::Redis).await;
            }
        }
    )*};
}

both!(
    requests_count_down_then_the_next_minute_is_whole,
    tokens_and_budget_are_what_the_reserve_counted,
    a_tpm_refusal_says_when_to_come_back,
    a_key_without_limits_gets_none,
    a_stream_carries_them_in_its_head,
);

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn number(h: &HeaderMap, name: &str) -> i64 {
    header(h, name)
        .unwrap_or_else(|| panic!("{name} is missing: {h:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A USD header, in micro-USD.
fn micros(h: &HeaderMap, name: &str) -> i64 {
    let text = header(h, name).unwrap_or_else(|| panic!("{name} is missing: {h:?}"));
    (text.parse::<f64>().unwrap() * 1e6).round() as i64
}

/// A reset as OpenAI writes it (`120ms`, `1.5s`, `6m0s`, `1h0m0s`), read back.
fn reset(h: &HeaderMap, name: &str) -> Duration {
    let text = header(h, name).unwrap_or_else(|| panic!("{name} is missing: {h:?}"));
    parse_go_duration(text).unwrap_or_else(|| panic!("{name}: {text:?} is not a duration"))
}

fn parse_go_duration(text: &str) -> Option<Duration> {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    let mut rest = text.strip_suffix('s')?;
    let mut total = 0.0;
    for (unit, secs) in [('h', 3600.0), ('m', 60.0)] {
        if let Some((n, r)) = rest.split_once(unit) {
            total += n.parse::<f64>().ok()? * secs;
            rest = r;
        }
    }
    total += rest.parse::<f64>().ok()?;
    Some(Duration::from_secs_f64(total))
}

const RATE_HEADERS: [&str; 9] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-limit-budget",
    "x-ratelimit-remaining-budget",
    "x-ratelimit-reset-budget",
];

fn body() -> Value {
    let mut b = chat("demo", false);
    b["max_tokens"] = json!(40);
    b
}

/// Tokens one request of `body` holds against tpm: its input bound plus its output limit.
fn tokens_held(body: &Value) -> i64 {
    (input_token_bound(&serde_json::to_vec(body).unwrap()) + 40) as i64
}

async fn requests_count_down_then_the_next_minute_is_whole(setup: Setup) {
    let env = env(setup).await;
    let (key, _) = env.gw.create_key(json!({"rpm": 3})).await;
    for left in [2, 1, 0] {
        let (s, h) = env.models(&key).await;
        assert_eq!(s, 200);
        assert_eq!(number(&h, "x-ratelimit-limit-requests"), 3);
        assert_eq!(number(&h, "x-ratelimit-remaining-requests"), left);
        // Counted at second 30 of the minute: the window ends within 30 s.
        let r = reset(&h, "x-ratelimit-reset-requests");
        assert!(
            r > Duration::from_secs(25) && r <= Duration::from_secs(30),
            "{r:?}"
        );
        // Only the requests limit is set: no other header.
        assert!(header(&h, "x-ratelimit-limit-tokens").is_none());
        assert!(header(&h, "x-ratelimit-limit-budget").is_none());
    }
    let (s, h) = env.models(&key).await;
    assert_eq!(s, 429);
    assert_eq!(number(&h, "x-ratelimit-remaining-requests"), 0);
    assert!(reset(&h, "x-ratelimit-reset-requests") <= Duration::from_secs(30));
    assert!(h.get("retry-after").is_none(), "spec 7: no Retry-After");

    // In the next minute the key is admitted again (polled: a store may take a moment
    // to see the new window), and the count starts from the whole limit.
    env.next_minute();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (s, h) = loop {
        let (s, h) = env.models(&key).await;
        if s == 200 || Instant::now() >= deadline {
            break (s, h);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(s, 200, "the next minute admits again: {h:?}");
    assert_eq!(number(&h, "x-ratelimit-remaining-requests"), 2, "{h:?}");
}

async fn tokens_and_budget_are_what_the_reserve_counted(setup: Setup) {
    let env = env(setup).await;
    let tpm = 100_000;
    // The day's budget (1 USD) is tighter than the lifetime cap (5 USD).
    let (key, id) = env
        .gw
        .create_key(json!({"tpm": tpm, "quota_usd": 5, "budget_day_usd": 1}))
        .await;
    let b = body();
    let held = tokens_held(&b);

    let (s, h1, text) = env.chat(&key, &b).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(number(&h1, "x-ratelimit-limit-tokens"), tpm);
    assert_eq!(number(&h1, "x-ratelimit-remaining-tokens"), tpm - held);
    let r = reset(&h1, "x-ratelimit-reset-tokens");
    assert!(
        r > Duration::from_secs(25) && r <= Duration::from_secs(30),
        "{r:?}"
    );
    assert_eq!(micros(&h1, "x-ratelimit-limit-budget"), 1_000_000);
    let hold = 1_000_000 - micros(&h1, "x-ratelimit-remaining-budget");
    assert!(hold > 0, "the request's worst case is held: {h1:?}");
    // A day's budget resets at the day's end (UTC here): within a day.
    assert!(reset(&h1, "x-ratelimit-reset-budget") <= Duration::from_secs(86_400));
    assert!(
        header(&h1, "x-ratelimit-limit-requests").is_none(),
        "no rpm"
    );
    let spent1 = env.gw.used_micros(&id).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    let used_tokens = v["usage"]["total_tokens"].as_i64().unwrap();
    assert!(spent1 > 0 && used_tokens > 0);

    // The second answer counts the first as settled (its real tokens and charge) and
    // its own worst case held.
    let (s, h2, text) = env.chat(&key, &b).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(
        number(&h2, "x-ratelimit-remaining-tokens"),
        tpm - used_tokens - held,
        "{h2:?}"
    );
    assert_eq!(
        micros(&h2, "x-ratelimit-remaining-budget"),
        1_000_000 - spent1 - hold,
        "{h2:?}"
    );

    // An answer that reserves nothing tells what the last reserve counted.
    let (s, h) = env.models(&key).await;
    assert_eq!(s, 200);
    assert_eq!(
        number(&h, "x-ratelimit-remaining-tokens"),
        number(&h2, "x-ratelimit-remaining-tokens")
    );
    // The next minute's tokens are whole; the day's budget is still spent.
    let spent2 = env.gw.used_micros(&id).await;
    env.next_minute();
    let (s, h3, text) = env.chat(&key, &b).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(number(&h3, "x-ratelimit-remaining-tokens"), tpm - held);
    assert_eq!(
        micros(&h3, "x-ratelimit-remaining-budget"),
        1_000_000 - spent2 - hold
    );
}

async fn a_tpm_refusal_says_when_to_come_back(setup: Setup) {
    let env = env(setup).await;
    let b = body();
    let held = tokens_held(&b);
    // Room for one request's hold; not for another beside the first one's real tokens.
    let tpm = held + 10;
    let (key, _) = env.gw.create_key(json!({"tpm": tpm})).await;
    let (s, _, text) = env.chat(&key, &b).await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let used = v["usage"]["total_tokens"].as_i64().unwrap();
    let (s, h, text) = env.chat(&key, &b).await;
    assert_eq!(s, 429, "{text}");
    assert!(text.contains("tpm"), "{text}");
    assert!(h.get("retry-after").is_none(), "spec 7: no Retry-After");
    assert_eq!(number(&h, "x-ratelimit-limit-tokens"), tpm);
    assert_eq!(number(&h, "x-ratelimit-remaining-tokens"), tpm - used);
    let r = reset(&h, "x-ratelimit-reset-tokens");
    assert!(r > Duration::ZERO && r <= Duration::from_secs(30), "{r:?}");
    // Once that time has passed, it is served again.
    env.next_minute();
    let (s, h, text) = env.chat(&key, &b).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(number(&h, "x-ratelimit-remaining-tokens"), tpm - held);
}

async fn a_key_without_limits_gets_none(setup: Setup) {
    let env = env(setup).await;
    let (key, _) = env.gw.create_key(json!({})).await;
    let (s, h, text) = env.chat(&key, &body()).await;
    assert_eq!(s, 200, "{text}");
    let (s2, h2) = env.models(&key).await;
    assert_eq!(s2, 200);
    for name in RATE_HEADERS {
        assert!(h.get(name).is_none(), "{name} on an unlimited key's answer");
        assert!(h2.get(name).is_none(), "{name} on an unlimited key's list");
    }
}

async fn a_stream_carries_them_in_its_head(setup: Setup) {
    let env = env(setup).await;
    let (key, _) = env
        .gw
        .create_key(json!({"rpm": 10, "tpm": 100_000, "quota_usd": 2}))
        .await;
    let mut b = body();
    b["stream"] = json!(true);
    let held = tokens_held(&b);
    let r = env
        .gw
        .http
        .post(env.gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&b)
        .send()
        .await
        .unwrap();
    // Read from the head, before any of the body.
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert!(header(&h, "content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    assert_eq!(number(&h, "x-ratelimit-limit-requests"), 10);
    assert_eq!(number(&h, "x-ratelimit-remaining-requests"), 9);
    assert_eq!(number(&h, "x-ratelimit-remaining-tokens"), 100_000 - held);
    assert_eq!(micros(&h, "x-ratelimit-limit-budget"), 2_000_000);
    assert!(micros(&h, "x-ratelimit-remaining-budget") < 2_000_000);
    assert!(
        header(&h, "x-ratelimit-reset-budget").is_none(),
        "a lifetime cap never resets"
    );
    let text = r.text().await.unwrap();
    assert!(text.contains("[DONE]"), "{text}");
}

/// The official openai SDK reads them from `with_raw_response`, as from OpenAI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_reads_them() {
    if std::env::var("MG_SKIP_SDK_TESTS").is_ok() {
        eprintln!("MG_SKIP_SDK_TESTS set: SDK test not run");
        return;
    }
    let env = env(Setup::Embedded).await;
    let (key, _) = env
        .gw
        .create_key(json!({"rpm": 5, "tpm": 50_000, "budget_month_usd": 3}))
        .await;
    let script = r#"
import json, os, openai
client = openai.OpenAI(base_url=os.environ["GATEWAY_BASE_URL"] + "/v1",
                       api_key=os.environ["GATEWAY_KEY"], max_retries=0)
raw = client.chat.completions.with_raw_response.create(
    model="demo", max_tokens=40, messages=[{"role": "user", "content": "hello"}])
answer = raw.parse()
names = ["x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
         "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens",
         "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
         "x-ratelimit-limit-budget", "x-ratelimit-remaining-budget",
         "x-ratelimit-reset-budget"]
print(json.dumps({"headers": {n: raw.headers.get(n) for n in names},
                  "text": answer.choices[0].message.content}))
"#;
    let python = std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = tokio::process::Command::new(python)
        .args(["-c", script])
        .env("GATEWAY_BASE_URL", &env.gw.base)
        .env("GATEWAY_KEY", &key)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let h = &v["headers"];
    assert!(!v["text"].as_str().unwrap().is_empty());
    assert_eq!(h["x-ratelimit-limit-requests"], "5");
    assert_eq!(h["x-ratelimit-remaining-requests"], "4");
    assert_eq!(h["x-ratelimit-limit-tokens"], "50000");
    assert_eq!(h["x-ratelimit-limit-budget"], "3");
    for name in [
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "x-ratelimit-reset-budget",
    ] {
        let text = h[name].as_str().unwrap_or_else(|| panic!("{name}: {h}"));
        assert!(parse_go_duration(text).is_some(), "{name}: {text}");
    }
}

/// A busy key on Redis is served from a quota lease (in memory, without a script per
/// request): its answers still tell its cap and what is left of it, never more than the
/// cap leaves once they are all charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_served_from_a_lease_still_tells_its_budget() {
    let env = env(Setup::Redis).await;
    let (key, id) = env.gw.create_key(json!({"quota_usd": 1})).await;
    let b = body();
    let mut lefts = Vec::new();
    for _ in 0..8 {
        let mut wave = Vec::new();
        for _ in 0..8 {
            let (http, url, key, b) = (
                env.gw.http.clone(),
                env.gw.url("/v1/chat/completions"),
                key.clone(),
                b.clone(),
            );
            wave.push(tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(key)
                    .json(&b)
                    .send()
                    .await
                    .unwrap();
                let (s, h) = (r.status().as_u16(), r.headers().clone());
                r.bytes().await.unwrap();
                (s, h)
            }));
        }
        for t in wave {
            let (s, h) = t.await.unwrap();
            assert_eq!(s, 200);
            assert_eq!(micros(&h, "x-ratelimit-limit-budget"), 1_000_000, "{h:?}");
            assert!(header(&h, "x-ratelimit-reset-budget").is_none());
            lefts.push(micros(&h, "x-ratelimit-remaining-budget"));
        }
    }
    // The key was served from a lease (held in Redis under the instance's name).
    let url = env._redis.as_ref().unwrap().url();
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let holds: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("gw:rsva:{{{id}}}"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(holds.iter().any(|h| h.starts_with("lease:")), "{holds:?}");
    let spent = env.gw.used_micros(&id).await;
    assert!(spent > 0);
    assert!(lefts.iter().all(|l| *l < 1_000_000), "{lefts:?}");
    // Each answer counted at least what was charged before the last wave started.
    let least = lefts.iter().min().unwrap();
    assert!(*least >= 1_000_000 - spent - 64 * 1_000, "{least} {spent}");
}
