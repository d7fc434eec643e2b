//! Key policy through the gateway, on every store: period budgets, tpm, max_concurrent and
//! groups. Bursts of 64 concurrent requests against each kind of limit (two instances on
//! one Redis, one on the embedded store) never pass it, and the records add up to what
//! the limit counted; period boundaries on a pinned clock (the day at local midnight,
//! months of 28, 30 and 31 days, a daylight-saving day); every refusal's status and
//! `param`; the usage endpoint's figures.

use crate::gateway::{chat, error_of, StoreKind, TestGateway};
use crate::mock_upstream::MockUpstream;
use crate::quota::honest_upstream_after;
use crate::redis_server::RedisServer;
use model_gateway::billing::input_token_bound;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// The quota tests' channel and prices, with `extra` configuration.
fn config(base: &str, extra: &str) -> String {
    format!("{}{extra}", crate::quota::config(base))
}

const COST: i64 = 210;

fn body() -> Value {
    let mut b = chat("m", false);
    b["max_tokens"] = json!(100);
    b
}

/// Tokens one request holds against tpm: the input bound plus its output limit.
fn tokens_held() -> u64 {
    input_token_bound(&serde_json::to_vec(&body()).unwrap()) + 100
}

/// A budget (USD) that pays for one whole answer and not the smallest second one: a
/// request holds its input bound (1 micro-USD a token) plus 32 to 200 for its output.
fn one_answer_usd() -> f64 {
    (tokens_held() - 100 + 220) as f64 / 1e6
}

/// The records of answered requests (refused ones are recorded too, at no cost).
fn answered(records: Vec<Value>) -> Vec<Value> {
    records.into_iter().filter(|r| r["status"] == 200).collect()
}

/// The stores each check runs on: one embedded gateway, or two gateways on one Redis.
enum Setup {
    Embedded,
    Redis,
}

struct Env {
    gws: Vec<TestGateway>,
    _redis: Option<RedisServer>,
    _up: MockUpstream,
}

async fn env(setup: Setup, delay: Duration, extra: &str) -> Env {
    let up = honest_upstream_after(delay).await;
    let cfg = config(&up.base_url(), extra);
    match setup {
        Setup::Embedded => Env {
            gws: vec![TestGateway::start(&cfg, StoreKind::Embedded).await],
            _redis: None,
            _up: up,
        },
        Setup::Redis => {
            let redis = RedisServer::start().await;
            let store = StoreKind::Redis(redis.url());
            let a = TestGateway::start(&cfg, store.clone()).await;
            let b = TestGateway::start(&cfg, store).await;
            Env {
                gws: vec![a, b],
                _redis: Some(redis),
                _up: up,
            }
        }
    }
}

impl Env {
    fn gw(&self) -> &TestGateway {
        &self.gws[0]
    }

    /// Stops every instance's clock at `at`.
    fn pin(&self, at: i64) {
        for g in &self.gws {
            g.running.gateway.calendar.clock.pin(at);
        }
    }

    async fn group(&self, fields: Value) {
        let (s, v) = self
            .gw()
            .admin_send(Method::POST, "/admin/groups", Some(fields))
            .await;
        assert_eq!(s, 201, "{v}");
    }

    /// `n` concurrent requests, spread over the instances and over `keys`.
    async fn burst(&self, keys: &[&str], n: usize) -> Vec<(u16, Value)> {
        let mut tasks = Vec::new();
        for i in 0..n {
            let gw = &self.gws[i % self.gws.len()];
            let (http, url, key) = (
                gw.http.clone(),
                gw.url("/v1/chat/completions"),
                keys[i % keys.len()].to_string(),
            );
            tasks.push(tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(key)
                    .json(&body())
                    .send()
                    .await
                    .unwrap();
                let s = r.status().as_u16();
                let t = r.text().await.unwrap();
                (s, if s == 200 { Value::Null } else { error_of(&t) })
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    /// The key's records (through every instance, so each has sent what it settled).
    async fn records(&self, key: &str) -> Vec<Value> {
        let mut last = Vec::new();
        for g in &self.gws {
            let (s, log) = g.get("/api/log/token?limit=1000", key).await;
            assert_eq!(s, 200, "{log}");
            last = log["data"].as_array().unwrap().clone();
        }
        last
    }

    /// One limit of the key's usage view, by its name.
    async fn limit(&self, key: &str, name: &str) -> Value {
        let (s, v) = self.gw().get("/api/usage/token", key).await;
        assert_eq!(s, 200, "{v}");
        v["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["limit"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no limit {name} in {v}"))
    }
}

/// Every refusal in a burst is this limit's, with its status.
fn refused_by(out: &[(u16, Value)], status: u16, param: &str) -> usize {
    let mut ok = 0;
    for (s, e) in out {
        if *s == 200 {
            ok += 1;
        } else {
            assert_eq!(*s, status, "{e}");
            assert_eq!(e["param"], param, "{e}");
        }
    }
    ok
}

fn sum(records: &[Value], field: &str) -> i64 {
    records.iter().map(|r| r[field].as_i64().unwrap()).sum()
}

async fn burst_against_a_day_budget(setup: Setup) {
    let e = env(setup, Duration::ZERO, "").await;
    let (key, _) = e.gw().create_key(json!({"budget_day_usd": 0.002})).await;
    let ok = refused_by(&e.burst(&[&key], 64).await, 403, "budget.day");
    assert!((1..64).contains(&ok), "afforded {ok} of 64");
    let records = answered(e.records(&key).await);
    assert_eq!(records.len(), ok);
    let spent = sum(&records, "cost_micro_usd");
    assert!(spent <= 2000, "spent {spent} of a 2000 budget");
    let day = e.limit(&key, "budget.day").await;
    assert_eq!(day["used_micro_usd"], spent, "{day}");
    assert_eq!(day["left_micro_usd"], 2000 - spent, "{day}");
}

async fn burst_against_a_group_budget_shared_by_two_keys(setup: Setup) {
    let e = env(setup, Duration::ZERO, "").await;
    e.group(json!({"id": "team-a", "budget_day_usd": 0.002}))
        .await;
    let (k1, _) = e.gw().create_key(json!({"group": "team-a"})).await;
    let (k2, _) = e.gw().create_key(json!({"group": "team-a"})).await;
    let ok = refused_by(&e.burst(&[&k1, &k2], 64).await, 403, "group.budget.day");
    assert!((1..64).contains(&ok), "afforded {ok} of 64");
    let (r1, r2) = (
        answered(e.records(&k1).await),
        answered(e.records(&k2).await),
    );
    assert_eq!(r1.len() + r2.len(), ok);
    assert!(r1.iter().chain(&r2).all(|r| r["group"] == "team-a"));
    let spent = sum(&r1, "cost_micro_usd") + sum(&r2, "cost_micro_usd");
    assert!(spent <= 2000, "spent {spent} of a 2000 group budget");
    let day = e.limit(&k1, "group.budget.day").await;
    assert_eq!(day["used_micro_usd"], spent, "{day}");
    let (s, g) = e.gw().admin_get("/admin/groups/team-a").await;
    assert_eq!(s, 200, "{g}");
    assert_eq!(g["keys"].as_array().unwrap().len(), 2, "{g}");
}

async fn burst_against_tpm(setup: Setup) {
    let e = env(setup, Duration::ZERO, "").await;
    // One clock minute for the whole burst, on every instance.
    e.pin(1_900_000_020);
    let tpm = 3 * tokens_held() + 50;
    let (key, _) = e.gw().create_key(json!({"tpm": tpm})).await;
    let ok = refused_by(&e.burst(&[&key], 64).await, 429, "tpm");
    assert!((3..64).contains(&ok), "afforded {ok} of 64");
    let records = answered(e.records(&key).await);
    assert_eq!(records.len(), ok);
    let tokens = sum(&records, "prompt_tokens") + sum(&records, "completion_tokens");
    assert!(tokens as u64 <= tpm, "{tokens} tokens in a minute of {tpm}");
    let minute = e.limit(&key, "tpm").await;
    assert_eq!(
        minute["used_tokens"], tokens,
        "settled to the real count: {minute}"
    );
}

async fn burst_against_max_concurrent(setup: Setup, group: bool) {
    // Every answer takes 5 s: the whole burst arrives while the first ones are in flight,
    // even on a busy machine.
    let e = env(setup, Duration::from_secs(5), "").await;
    let (fields, param) = if group {
        e.group(json!({"id": "team-c", "max_concurrent": 3})).await;
        (json!({"group": "team-c"}), "group.max_concurrent")
    } else {
        (json!({"max_concurrent": 3}), "max_concurrent")
    };
    let (key, _) = e.gw().create_key(fields).await;
    let ok = refused_by(&e.burst(&[&key], 64).await, 429, param);
    assert_eq!(ok, 3, "exactly the limit is served at once");
    let now = e.limit(&key, param).await;
    assert_eq!(now["in_flight"], 0, "every request left the count: {now}");
    assert_eq!(answered(e.records(&key).await).len(), 3);
}

mod bursts {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn day_budget_embedded() {
        burst_against_a_day_budget(Setup::Embedded).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn day_budget_two_instances_on_redis() {
        burst_against_a_day_budget(Setup::Redis).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn group_budget_embedded() {
        burst_against_a_group_budget_shared_by_two_keys(Setup::Embedded).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn group_budget_two_instances_on_redis() {
        burst_against_a_group_budget_shared_by_two_keys(Setup::Redis).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn tpm_embedded() {
        burst_against_tpm(Setup::Embedded).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn tpm_two_instances_on_redis() {
        burst_against_tpm(Setup::Redis).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn max_concurrent_embedded() {
        burst_against_max_concurrent(Setup::Embedded, false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn max_concurrent_two_instances_on_redis() {
        burst_against_max_concurrent(Setup::Redis, false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn group_max_concurrent_embedded() {
        burst_against_max_concurrent(Setup::Embedded, true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn group_max_concurrent_two_instances_on_redis() {
        burst_against_max_concurrent(Setup::Redis, true).await;
    }
}

/// Unix seconds of a local civil time in a zone.
fn local(zone: &str, civil: &str) -> i64 {
    let dt: jiff::civil::DateTime = civil.parse().unwrap();
    dt.to_zoned(jiff::tz::TimeZone::get(zone).unwrap())
        .unwrap()
        .timestamp()
        .as_second()
}

/// A budget of `usd` per `period` (a key's field) is spent at `before` in `zone` (the
/// key's), refused a moment later, and fresh at `after`.
async fn spent_then_fresh(
    e: &Env,
    field: &str,
    param: &str,
    zone: &str,
    before: &str,
    after: &str,
) {
    let (key, _) = e
        .gw()
        .create_key(json!({field: one_answer_usd(), "time_zone": zone}))
        .await;
    let gw = e.gw();
    e.pin(local(zone, before));
    assert_eq!(gw.post("/v1/chat/completions", &key, &body()).await.0, 200);
    let (s, _, t) = gw.post("/v1/chat/completions", &key, &body()).await;
    assert_eq!(s, 403, "{t}");
    assert_eq!(error_of(&t)["param"], param);
    e.pin(local(zone, after));
    let (s, _, t) = gw.post("/v1/chat/completions", &key, &body()).await;
    assert_eq!(s, 200, "fresh at {after} {zone}: {t}");
    // The new period counts only what was spent in it.
    let l = e.limit(&key, param).await;
    assert_eq!(l["used_micro_usd"], COST, "{l}");
    assert!(l["resets_at"].as_str().is_some());
}

async fn periods_roll_over_on_the_calendar(setup: Setup) {
    let e = env(setup, Duration::ZERO, "limits: { time_zone: Asia/Tokyo }\n").await;
    let ny = "America/New_York";
    // A day at local midnight (and a 25-hour day: the clocks go back on 1 November).
    spent_then_fresh(
        &e,
        "budget_day_usd",
        "budget.day",
        ny,
        "2026-11-24T23:59:00",
        "2026-11-25T00:00:00",
    )
    .await;
    spent_then_fresh(
        &e,
        "budget_day_usd",
        "budget.day",
        ny,
        "2026-11-01T23:59:00",
        "2026-11-02T00:00:00",
    )
    .await;
    // Months of 28, 30 and 31 days.
    for (last, first) in [
        ("2026-02-28T23:59:00", "2026-03-01T00:00:00"),
        ("2026-04-30T23:59:00", "2026-05-01T00:00:00"),
        ("2026-12-31T23:59:00", "2027-01-01T00:00:00"),
    ] {
        spent_then_fresh(
            &e,
            "budget_month_usd",
            "budget.month",
            "Europe/Paris",
            last,
            first,
        )
        .await;
    }
    // A week: Sunday night to Monday.
    spent_then_fresh(
        &e,
        "budget_week_usd",
        "budget.week",
        "UTC",
        "2026-11-29T23:59:00",
        "2026-11-30T00:00:00",
    )
    .await;
    // A key with no zone of its own follows the gateway's (`limits.time_zone`).
    let (key, _) = e
        .gw()
        .create_key(json!({"budget_day_usd": one_answer_usd()}))
        .await;
    e.pin(local("Asia/Tokyo", "2026-11-24T23:59:00"));
    assert_eq!(
        e.gw().post("/v1/chat/completions", &key, &body()).await.0,
        200
    );
    e.pin(local("UTC", "2026-11-24T23:59:00")); // already the 25th in Tokyo
    assert_eq!(
        e.gw().post("/v1/chat/completions", &key, &body()).await.0,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periods_roll_over_on_the_calendar_embedded() {
    periods_roll_over_on_the_calendar(Setup::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periods_roll_over_on_the_calendar_redis() {
    periods_roll_over_on_the_calendar(Setup::Redis).await;
}

/// Each limit, set too low for even one request: its status, `param` and code.
async fn every_refusal_names_its_limit(setup: Setup) {
    let e = env(setup, Duration::ZERO, "").await;
    e.group(json!({"id": "g-quota", "quota_usd": 0.00001}))
        .await;
    e.group(json!({"id": "g-day", "budget_day_usd": 0.00001}))
        .await;
    e.group(json!({"id": "g-week", "budget_week_usd": 0.00001}))
        .await;
    e.group(json!({"id": "g-month", "budget_month_usd": 0.00001}))
        .await;
    e.group(json!({"id": "g-tpm", "tpm": 1})).await;
    e.group(json!({"id": "g-off", "status": "disabled"})).await;
    let cases = [
        (
            json!({"quota_usd": 0.00001}),
            403,
            "insufficient_quota",
            Value::Null,
        ),
        (
            json!({"budget_day_usd": 0.00001}),
            403,
            "insufficient_quota",
            json!("budget.day"),
        ),
        (
            json!({"budget_week_usd": 0.00001}),
            403,
            "insufficient_quota",
            json!("budget.week"),
        ),
        (
            json!({"budget_month_usd": 0.00001}),
            403,
            "insufficient_quota",
            json!("budget.month"),
        ),
        (json!({"tpm": 1}), 429, "rate_limited", json!("tpm")),
        (
            json!({"group": "g-quota"}),
            403,
            "insufficient_quota",
            json!("group.quota"),
        ),
        (
            json!({"group": "g-day"}),
            403,
            "insufficient_quota",
            json!("group.budget.day"),
        ),
        (
            json!({"group": "g-week"}),
            403,
            "insufficient_quota",
            json!("group.budget.week"),
        ),
        (
            json!({"group": "g-month"}),
            403,
            "insufficient_quota",
            json!("group.budget.month"),
        ),
        (
            json!({"group": "g-tpm"}),
            429,
            "rate_limited",
            json!("group.tpm"),
        ),
        (
            json!({"group": "g-off"}),
            403,
            "insufficient_quota",
            json!("group"),
        ),
    ];
    for (fields, status, code, param) in cases {
        let (key, _) = e.gw().create_key(fields.clone()).await;
        let (s, h, t) = e.gw().post("/v1/chat/completions", &key, &body()).await;
        assert_eq!(s, status, "{fields}: {t}");
        let err = error_of(&t);
        assert_eq!(err["code"], code, "{fields}: {t}");
        assert_eq!(err["param"], param, "{fields}: {t}");
        assert!(
            err["message"].as_str().unwrap().contains("request id"),
            "{t}"
        );
        // No Retry-After on a 429 (spec 7).
        assert!(h.get("retry-after").is_none(), "{fields}");
    }
    // Nothing was held by any refusal: the groups' counters stand at zero.
    let (_, g) = e.gw().admin_get("/admin/groups/g-tpm").await;
    assert_eq!(g["in_flight"], 0, "{g}");
    // A key cannot name a group that does not exist; a group in use cannot be deleted.
    let (s, v) = e
        .gw()
        .admin_send(Method::POST, "/admin/keys", Some(json!({"group": "nope"})))
        .await;
    assert_eq!(
        (s, v["error"]["param"].clone()),
        (400, json!("group")),
        "{v}"
    );
    let (s, v) = e
        .gw()
        .admin_send(Method::DELETE, "/admin/groups/g-tpm", None)
        .await;
    assert_eq!(s, 400, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_names_its_limit_embedded() {
    every_refusal_names_its_limit(Setup::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_names_its_limit_redis() {
    every_refusal_names_its_limit(Setup::Redis).await;
}

/// The usage endpoint shows each limit of the key and of its group with what is used and
/// left now; the admin views show the same fields.
async fn usage_endpoint_figures(setup: Setup) {
    let e = env(setup, Duration::ZERO, "").await;
    e.group(json!({"id": "team-u", "quota_usd": 1, "budget_week_usd": 0.5, "tpm": 100000, "max_concurrent": 4})).await;
    let (key, id) = e
        .gw()
        .create_key(json!({"quota_usd": 2, "budget_day_usd": 0.25, "budget_month_usd": 1.5, "tpm": 50000, "max_concurrent": 2, "group": "team-u", "time_zone": "Europe/Paris"}))
        .await;
    e.pin(local("Europe/Paris", "2026-11-24T12:00:30"));
    assert_eq!(
        e.gw().post("/v1/chat/completions", &key, &body()).await.0,
        200
    );
    assert_eq!(
        e.gw().post("/v1/chat/completions", &key, &body()).await.0,
        200
    );
    let (s, v) = e.gw().get("/api/usage/token", &key).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["group"], "team-u");
    let names: Vec<&str> = v["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["limit"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "quota",
            "budget.day",
            "budget.month",
            "tpm",
            "max_concurrent",
            "group.quota",
            "group.budget.week",
            "group.tpm",
            "group.max_concurrent"
        ]
    );
    let day = e.limit(&key, "budget.day").await;
    assert_eq!(
        (
            day["limit_micro_usd"].clone(),
            day["used_micro_usd"].clone(),
            day["left_micro_usd"].clone()
        ),
        (json!(250_000), json!(2 * COST), json!(250_000 - 2 * COST))
    );
    assert_eq!(day["resets_at"], "2026-11-24T23:00:00Z", "Paris midnight");
    let week = e.limit(&key, "group.budget.week").await;
    assert_eq!(week["used_micro_usd"], 2 * COST);
    assert_eq!(
        week["resets_at"], "2026-11-30T00:00:00Z",
        "UTC: the group names no zone"
    );
    let tpm = e.limit(&key, "tpm").await;
    assert_eq!(tpm["used_tokens"], 220, "two answers of 110 tokens");
    let q = e.limit(&key, "group.quota").await;
    assert_eq!(q["used_micro_usd"], 2 * COST);
    let c = e.limit(&key, "max_concurrent").await;
    assert_eq!(
        (c["in_flight"].clone(), c["left_requests"].clone()),
        (json!(0), json!(2))
    );
    // The admin view of the key carries the same limits and its fields.
    let (s, k) = e.gw().admin_get(&format!("/admin/keys/{id}")).await;
    assert_eq!(s, 200, "{k}");
    assert_eq!(k["budget_day_usd"], 0.25);
    assert_eq!(k["time_zone"], "Europe/Paris");
    assert_eq!(k["limits"], v["limits"]);
    // Fields change and clear through the admin API.
    let (s, k) = e
        .gw()
        .admin_send(
            Method::PATCH,
            &format!("/admin/keys/{id}"),
            Some(json!({"budget_day_usd": null, "tpm": 10, "group": null})),
        )
        .await;
    assert_eq!(s, 200, "{k}");
    assert_eq!(
        (
            k["budget_day_usd"].clone(),
            k["tpm"].clone(),
            k["group"].clone()
        ),
        (Value::Null, json!(10), Value::Null)
    );
    let (s, _, t) = e.gw().post("/v1/chat/completions", &key, &body()).await;
    assert_eq!(
        (s, error_of(&t)["param"].clone()),
        (429, json!("tpm")),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_endpoint_figures_embedded() {
    usage_endpoint_figures(Setup::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_endpoint_figures_redis() {
    usage_endpoint_figures(Setup::Redis).await;
}

/// An instance that read a key before it joined a group asks again with the group: the
/// store refuses the old view, and the group's limit applies at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_moved_into_a_group_on_another_instance_is_held_to_it_at_once() {
    let e = env(Setup::Redis, Duration::ZERO, "").await;
    let (key, id) = e.gw().create_key(json!({})).await;
    let other = &e.gws[1];
    assert_eq!(
        other.post("/v1/chat/completions", &key, &body()).await.0,
        200
    );
    e.group(json!({"id": "late", "budget_day_usd": 0.00001}))
        .await;
    let (s, v) = e
        .gw()
        .admin_send(
            Method::PATCH,
            &format!("/admin/keys/{id}"),
            Some(json!({"group": "late"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, _, t) = other.post("/v1/chat/completions", &key, &body()).await;
    assert_eq!(
        (s, error_of(&t)["param"].clone()),
        (403, json!("group.budget.day")),
        "{t}"
    );
}

/// The CLI, on the store a gateway uses: a group and a key in it with limits, each shown
/// with its figures; bad input names the flag's field.
#[test]
fn the_cli_manages_groups_and_key_limits() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        "listen: 127.0.0.1:0\nstore: { embedded: { path: data } }\nchannels: []\nlimits: { time_zone: Europe/Paris }\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_model-gateway"))
            .args(args)
            .args(["--config", config.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        (
            out.status.success(),
            serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
            err,
        )
    };
    let (ok, g, err) = run(&[
        "groups",
        "create",
        "team-a",
        "--quota-usd",
        "10",
        "--budget-month-usd",
        "4",
        "--tpm",
        "9000",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        (
            g["quota_usd"].clone(),
            g["budget_month_usd"].clone(),
            g["tpm"].clone()
        ),
        (json!(10.0), json!(4.0), json!(9000))
    );
    let (ok, k, err) = run(&[
        "keys",
        "create",
        "--json",
        "--group",
        "team-a",
        "--budget-day-usd",
        "0.5",
        "--max-concurrent",
        "2",
        "--time-zone",
        "Asia/Tokyo",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        (
            k["group"].clone(),
            k["budget_day_usd"].clone(),
            k["max_concurrent"].clone(),
            k["time_zone"].clone()
        ),
        (json!("team-a"), json!(0.5), json!(2), json!("Asia/Tokyo"))
    );
    let id = k["id"].as_str().unwrap();
    let (ok, shown, err) = run(&["groups", "show", "team-a"]);
    assert!(ok, "{err}");
    assert_eq!(shown["keys"], json!([id]));
    let names: Vec<&str> = shown["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["limit"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["group.quota", "group.budget.month", "group.tpm"]);
    let (ok, k, err) = run(&[
        "keys",
        "update",
        id,
        "--budget-day-usd",
        "none",
        "--group",
        "none",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        (k["budget_day_usd"].clone(), k["group"].clone()),
        (Value::Null, Value::Null)
    );
    // A reseller's multiplier, set and cleared; a bad one names the field.
    let (ok, k, err) = run(&["keys", "update", id, "--price-multiplier", "1.25"]);
    assert!(ok, "{err}");
    assert_eq!(k["price_multiplier"], json!(1.25));
    let (ok, _, err) = run(&["keys", "update", id, "--price-multiplier", "0"]);
    assert!(!ok && err.contains("price_multiplier"), "{err}");
    let (ok, k, err) = run(&["keys", "update", id, "--price-multiplier", "none"]);
    assert!(ok, "{err}");
    assert_eq!(k["price_multiplier"], Value::Null);
    // Refusals name the field; a group its keys still name is not deleted.
    let (ok, _, err) = run(&["keys", "update", id, "--time-zone", "Mars/Olympus"]);
    assert!(!ok && err.contains("time_zone"), "{err}");
    let (ok, _, err) = run(&["keys", "update", id, "--group", "nope"]);
    assert!(!ok && err.contains("group"), "{err}");
    assert!(run(&["keys", "update", id, "--group", "team-a"]).0);
    let (ok, _, err) = run(&["groups", "delete", "team-a"]);
    assert!(!ok && err.contains("still belong"), "{err}");
    assert!(run(&["keys", "revoke", id]).0);
    let (ok, gone, err) = run(&["groups", "delete", "team-a"]);
    assert!(ok, "{err}");
    assert_eq!(gone["deleted"], true);
}
