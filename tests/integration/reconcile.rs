//! `model-gateway reconcile` as an operator runs it: requests go through a real gateway
//! to mock providers, then the binary compares the gateway's ledger with a mock admin
//! usage API (tests/support/usage_apis.rs) reporting the same tokens, or not quite.
//!
//! Prices are large (USD 1000s per 1M tokens) so one request's worth is past the
//! default threshold of 0.01 USD.

use crate::gateway::{chat, StoreKind, TestGateway};
use crate::mock_upstream::{MockUpstream, Reply};
use crate::providers;
use crate::usage_apis::{
    self, anthropic_bucket, anthropic_result, openai_bucket, openai_result, UsageApi,
    ANTHROPIC_ADMIN_KEY, OPENAI_ADMIN_KEY,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const DAY: i64 = 86_400;

/// What the binary did: exit code, stdout, stderr.
struct Run {
    code: i32,
    out: String,
    err: String,
}

/// `model-gateway reconcile --config <config> <args>`, with only `env`'s admin keys set.
async fn reconcile(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_model-gateway"));
    cmd.arg("reconcile")
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("OPENAI_ADMIN_KEY")
        .env_remove("ANTHROPIC_ADMIN_KEY")
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    // The mocks answer on this runtime: the wait for the process goes elsewhere.
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Today's and yesterday's UTC midnights (unix seconds) and the matching flags.
fn days() -> (i64, String, String) {
    let now = jiff::Timestamp::now().as_second();
    let today = now - now.rem_euclid(DAY);
    let date = |t: i64| {
        jiff::Timestamp::from_second(t)
            .unwrap()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date()
            .to_string()
    };
    (today, date(today - DAY), date(today))
}

fn openai_body(input_price: f64) -> String {
    format!(
        "channels:\n  - name: oa\n    protocol: openai\n    base_url: {{UP}}\n    api_key: upstream-secret-key\n    models: [gpt-x]\n    model_map: {{ gpt-x: gpt-x-2025 }}\nprices:\n  gpt-x: {{ input: {input_price}, output: 2000, cached_input: 500 }}\n"
    )
}

/// A gateway in front of the scripted OpenAI-shaped provider (10 prompt tokens of which 2
/// cached, 5 output per request), `n` chat requests through it. Each request costs
/// 8 × 1000 + 2 × 500 + 5 × 2000 micro-USD = 0.019 USD at the channel's price.
async fn openai_ledger(n: usize) -> (TestGateway, PathBuf, MockUpstream) {
    let up = providers::start().await;
    let body = openai_body(1000.0).replace("{UP}", &up.base_url());
    let (gw, path) = TestGateway::start_from_file(&body, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"name": "reconcile"})).await;
    for _ in 0..n {
        let (status, _, text) = gw
            .post("/v1/chat/completions", &key, &chat("gpt-x", false))
            .await;
        assert_eq!(status, 200, "{text}");
    }
    let (_, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(log["data"].as_array().unwrap().len(), n, "{log}");
    (gw, path, up)
}

/// The usage API's days: nothing yesterday, `requests` requests' tokens today.
fn openai_days(today: i64, requests: u64) -> Vec<Value> {
    vec![
        openai_bucket(today - DAY, vec![]),
        openai_bucket(
            today,
            vec![openai_result(
                "gpt-x-2025",
                10 * requests,
                2 * requests,
                5 * requests,
                requests,
            )],
        ),
    ]
}

async fn run_openai(config: &Path, api: &UsageApi, from: &str, to: &str, extra: &[&str]) -> Run {
    let base = api.base_url();
    let mut args = vec![
        "--provider",
        "openai",
        "--from",
        from,
        "--to",
        to,
        "--base-url",
        &base,
    ];
    args.extend_from_slice(extra);
    reconcile(config, &args, &[("OPENAI_ADMIN_KEY", OPENAI_ADMIN_KEY)]).await
}

/// The row lines (ledger, provider, diff) of `model` in a table.
fn row_lines<'a>(table: &'a str, model: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = table.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(model) && l.contains("ledger"))
        .unwrap_or_else(|| panic!("no row for {model}:\n{table}"));
    lines[at..at + 3].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_ledgers_exit_0_after_reading_every_page_with_the_admin_key() {
    let (_gw, config, _up) = openai_ledger(3).await;
    let (today, yesterday, day) = days();
    let api = usage_apis::openai(openai_days(today, 3)).await;
    let run = run_openai(&config, &api, &yesterday, &day, &[]).await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
    let rows = row_lines(&run.out, "gpt-x-2025");
    assert!(
        rows[0].contains(" oa ") && rows[0].ends_with("0.057000"),
        "{}",
        run.out
    );
    assert!(rows[1].ends_with("0.057000"), "{}", run.out);
    assert!(rows[2].ends_with("0.000000"), "{}", run.out);
    assert!(run.out.contains("every difference is within 0.010000 USD"));
    // One bucket a page: the second page was asked for with the first page's cursor.
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert!(!reqs[0].path.contains("page="));
    assert!(reqs[1].path.ends_with("&page=page_1"), "{}", reqs[1].path);
    for r in &reqs {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {OPENAI_ADMIN_KEY}").as_str())
        );
    }
    assert!(!run.out.contains(OPENAI_ADMIN_KEY) && !run.err.contains(OPENAI_ADMIN_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_missing_from_the_ledger_exits_1_and_shows_the_difference() {
    let (_gw, config, _up) = openai_ledger(2).await;
    let (today, yesterday, day) = days();
    // The provider served three requests; the ledger has two.
    let api = usage_apis::openai(openai_days(today, 3)).await;
    let run = run_openai(&config, &api, &yesterday, &day, &[]).await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    let rows = row_lines(&run.out, "gpt-x-2025");
    let diff: Vec<&str> = rows[2].split_whitespace().collect();
    // diff, requests, input, cached, audio_in, output, audio_out, cost, mark
    assert_eq!(
        diff,
        ["diff", "+1", "+8", "+2", "0", "+5", "0", "+0.019000", "!"],
        "{}",
        run.out
    );
    assert!(run
        .out
        .contains("1 row(s) differ by more than 0.010000 USD"));
    // A threshold above one request's worth lets it pass.
    let run = run_openai(&config, &api, &yesterday, &day, &["--max-diff-usd", "0.02"]).await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_price_changed_since_the_requests_exits_1() {
    let (gw, config, up) = openai_ledger(3).await;
    let (today, _, day) = days();
    let api = usage_apis::openai(openai_days(today, 3)).await;
    // The configured input price doubled after the requests were priced.
    let body = openai_body(2000.0).replace("{UP}", &up.base_url());
    gw.rewrite(&config, &body, &StoreKind::Embedded);
    let run = run_openai(&config, &api, &day, &day, &["--json"]).await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    let v: Value = serde_json::from_str(&run.out).unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["model"], "gpt-x-2025");
    assert_eq!(row["channels"], json!(["oa"]));
    assert_eq!(row["diff"]["tokens"]["input"], 0, "same tokens");
    assert_eq!(row["ledger"]["cost_micros"], 57_000);
    // 24 uncached input tokens at 1000 USD per 1M more.
    assert_eq!(row["diff"]["cost_micros"], 24_000);
    assert_eq!(row["past_threshold"], true);
    assert_eq!(
        row["provider"]["priced_as"],
        json!({"channel": "oa", "model": "gpt-x"})
    );
    assert_eq!(v["past_threshold"], 1);
}

/// An Anthropic-shaped provider whose answers wrote 100 prompt tokens to the 1-hour cache:
/// `cache_creation_input_tokens` with its `cache_creation` breakdown (Messages API
/// reference, "Usage").
async fn anthropic_upstream() -> MockUpstream {
    MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap_or("").to_string();
        Reply::json(
            200,
            json!({"id": "msg_up", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": "Hello."}], "stop_reason": "end_turn",
                "stop_sequence": null,
                // An answer without the `cache_creation` breakdown (as before the 1-hour
                // cache existed): its writes are billed at the 5-minute rate.
                "usage": {"input_tokens": 8, "cache_read_input_tokens": 2,
                    "cache_creation_input_tokens": 100,
                    "output_tokens": 5, "service_tier": "standard"}}),
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hour_cache_writes_the_ledger_priced_as_five_minutes_exit_1() {
    let up = anthropic_upstream().await;
    let body = format!(
        "channels:\n  - name: claude\n    protocol: anthropic\n    base_url: {}\n    api_key: upstream-secret-key\n    models: [claude-s]\nprices:\n  claude-s: {{ input: 3000, output: 15000, cached_input: 300, cache_write: 3750, cache_write_1h: 6000 }}\n",
        up.base_url()
    );
    let (gw, config) = TestGateway::start_from_file(&body, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"name": "reconcile"})).await;
    for _ in 0..2 {
        let r = gw
            .http
            .post(gw.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "claude-s", "max_tokens": 16,
                "messages": [{"role": "user", "content": "hello"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }
    let (today, _, day) = days();
    let run = |api: &UsageApi| {
        let base = api.base_url();
        let config = config.clone();
        let day = day.clone();
        async move {
            let args = [
                "--provider",
                "anthropic",
                "--from",
                &day,
                "--to",
                &day,
                "--base-url",
                &base,
            ];
            reconcile(
                &config,
                &args,
                &[("ANTHROPIC_ADMIN_KEY", ANTHROPIC_ADMIN_KEY)],
            )
            .await
        }
    };
    // Reported as 5-minute writes, the two sides agree.
    let api = usage_apis::anthropic(vec![anthropic_bucket(
        today,
        vec![anthropic_result("claude-s", 16, 4, 200, 0, 10)],
    )])
    .await;
    let same = run(&api).await;
    assert_eq!(same.code, 0, "{}{}", same.out, same.err);
    let r = &api.requests()[0];
    assert_eq!(r.header("x-api-key"), Some(ANTHROPIC_ADMIN_KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    // The provider reports what it bills: 1-hour writes.
    api.set(vec![anthropic_bucket(
        today,
        vec![anthropic_result("claude-s", 16, 4, 0, 200, 10)],
    )]);
    let run = run(&api).await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    let rows = row_lines(&run.out, "claude-s");
    let diff: Vec<&str> = rows[2].split_whitespace().collect();
    // diff, requests (not reported), input, cached, cache_w_5m, cache_w_1h, output,
    // searches, cost: 200 tokens at 6000 instead of 3750 USD per 1M.
    assert_eq!(
        diff,
        [
            "diff",
            "-",
            "0",
            "0",
            "-200",
            "+200",
            "0",
            "0",
            "+0.450000",
            "!"
        ],
        "{}",
        run.out
    );
}

/// A configuration of one OpenAI channel and an embedded store, with no gateway running.
fn idle_config(dir: &Path) -> PathBuf {
    let body = openai_body(1000.0).replace("{UP}", "http://127.0.0.1:9");
    let text = crate::gateway::config_text(&body, &StoreKind::Embedded, dir);
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_exit_2_with_their_cause_and_never_show_the_admin_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = idle_config(dir.path());
    let (today, yesterday, day) = days();
    let api = usage_apis::openai(openai_days(today, 1)).await;
    let base = api.base_url();
    let common = ["--provider", "openai", "--from", &yesterday, "--to", &day];
    let with = |extra: &[&'static str]| {
        let mut v: Vec<String> = common.iter().map(|s| s.to_string()).collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>, env: Vec<(&'static str, &'static str)>| {
        let config = config.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            reconcile(&config, &args, &env).await
        }
    };

    // A wrong admin key: the provider's 401, not the key.
    let wrong = "sk-admin-wrong-key-abcdef";
    let mut args = with(&["--base-url"]);
    args.push(base.clone());
    let r = run(args.clone(), vec![("OPENAI_ADMIN_KEY", wrong)]).await;
    assert_eq!(r.code, 2, "{}{}", r.out, r.err);
    assert!(r.err.contains("the provider answered 401"), "{}", r.err);
    assert!(!r.err.contains(wrong) && !r.out.contains(wrong));
    // No admin key at all.
    let r = run(args, vec![]).await;
    assert_eq!(r.code, 2);
    assert!(r.err.contains("OPENAI_ADMIN_KEY is not set"), "{}", r.err);
    // Nobody listening: the connection's cause is kept.
    let r = run(
        with(&["--base-url", "http://127.0.0.1:9"]),
        vec![("OPENAI_ADMIN_KEY", OPENAI_ADMIN_KEY)],
    )
    .await;
    assert_eq!(r.code, 2);
    assert!(
        r.err.contains("cannot connect") && r.err.contains("refused"),
        "{}",
        r.err
    );
    assert!(!r.err.contains(OPENAI_ADMIN_KEY));
    // A file that is not there, and one that is not a report.
    let r = run(with(&["--file", "/nonexistent/usage.json"]), vec![]).await;
    assert_eq!(r.code, 2);
    assert!(
        r.err
            .contains("cannot read /nonexistent/usage.json: No such file"),
        "{}",
        r.err
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"object": "page", "data": [{"start_time": "yesterday"}]}"#,
    )
    .unwrap();
    let mut args = with(&["--file"]);
    args.push(bad.to_str().unwrap().to_string());
    let r = run(args, vec![]).await;
    assert_eq!(r.code, 2);
    assert!(r.err.contains("at `data[0].start_time`"), "{}", r.err);
    // Bad arguments.
    let r = run(
        vec![
            "--provider".into(),
            "openai".into(),
            "--from".into(),
            "2025-02-30".into(),
            "--to".into(),
            day.clone(),
        ],
        vec![],
    )
    .await;
    assert_eq!(r.code, 2);
    assert!(r.err.contains("--from"), "{}", r.err);
    let r = run(with(&["--channel", "nope", "--file", "x.json"]), vec![]).await;
    assert_eq!(r.code, 2);
    assert!(r.err.contains("no channel is named `nope`"), "{}", r.err);

    // A saved answer (both pages as an array) reads like the API.
    let pages: Vec<Value> = (0..2)
        .map(|i| {
            json!({"object": "page", "data": [openai_days(today, 1)[i].clone()],
                "has_more": i == 0, "next_page": if i == 0 { json!("page_1") } else { Value::Null }})
        })
        .collect();
    let saved = dir.path().join("usage.json");
    std::fs::write(&saved, serde_json::to_vec(&pages).unwrap()).unwrap();
    let mut args = with(&["--file"]);
    args.push(saved.to_str().unwrap().to_string());
    let r = run(args, vec![]).await;
    // The ledger is empty: the provider's request shows as missing from it.
    assert_eq!(r.code, 1, "{}{}", r.out, r.err);
    assert!(
        row_lines(&r.out, "gpt-x-2025")[2].contains("+0.019000"),
        "{}",
        r.out
    );
}
