use super::*;
use crate::reconcile::ledger::{add, tests::record};
use crate::store::UsageRecord;
use std::path::Path;

/// Two OpenAI channels sending `gpt-x` upstream as `gpt-x-2025` (the second at its own
/// price), and a model with prompt-size tiers.
const CONFIG: &str = r#"
listen: 127.0.0.1:8080
store: { embedded: { path: ./data } }
channels:
  - name: oa
    protocol: openai
    base_url: https://api.openai.com
    api_key: sk-upstream
    models: [gpt-x, gpt-long]
    model_map: { gpt-x: gpt-x-2025 }
  - name: oa-eu
    protocol: openai
    base_url: https://eu.example.com
    api_key: sk-upstream-2
    models: [gpt-x]
    model_map: { gpt-x: gpt-x-2025 }
    prices:
      gpt-x: { input: 2.0, output: 4.0, cached_input: 1.0 }
  - name: claude
    protocol: anthropic
    base_url: https://api.anthropic.com
    api_key: sk-ant
    models: [claude-s]
prices:
  gpt-x: { input: 1.0, output: 2.0, cached_input: 0.5 }
  gpt-long: { input: 1.0, output: 2.0, tiers: [{above_input_tokens: 1000, input: 2.0, output: 4.0}] }
  claude-s: { input: 3.0, output: 15.0, cached_input: 0.3, cache_write: 3.75, cache_write_1h: 6.0, per_web_search: 0.01 }
"#;

fn cfg() -> Config {
    Config::parse(CONFIG, Path::new("/tmp")).unwrap()
}

fn day() -> Date {
    "2025-08-01".parse().unwrap()
}

fn only(cfg: &Config, names: &[&str]) -> Vec<Arc<Channel>> {
    cfg.channels
        .iter()
        .filter(|c| names.contains(&c.name.as_str()))
        .cloned()
        .collect()
}

/// A record priced as the gateway would have: 8 input, 2 cached, 5 output at `gpt-x`'s
/// top-level price is 8 + 1 + 10 = 19 micro-USD.
fn priced(channel: &str, provider_cost: Micros) -> UsageRecord {
    let mut r = record(channel, "gpt-x", 1);
    r.provider_cost = Some(provider_cost);
    r
}

fn reported(model: &str, t: Tokens, requests: Option<u64>) -> ProviderUsage {
    ProviderUsage {
        day: day(),
        model: model.into(),
        tokens: t,
        requests,
    }
}

fn tokens(n: u64) -> Tokens {
    Tokens {
        input: 8 * n,
        cached_input: 2 * n,
        output: 5 * n,
        ..Tokens::default()
    }
}

#[test]
fn equal_sides_differ_by_nothing() {
    let cfg = cfg();
    let chans = only(&cfg, &["oa"]);
    let mut l = Ledger::new();
    for _ in 0..3 {
        add(
            &mut l,
            Provider::OpenAi,
            day(),
            "gpt-x-2025",
            &priced("oa", 19),
        );
    }
    let rows = rows(
        &cfg,
        Provider::OpenAi,
        &chans,
        l,
        &[reported("gpt-x-2025", tokens(3), Some(3))],
    );
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r.channels, vec!["oa"]);
    assert_eq!(r.ledger.tokens, r.provider.tokens);
    assert_eq!(
        (r.ledger.cost_micros, r.provider.cost_micros),
        (Some(57), Some(57))
    );
    assert_eq!(r.diff_micros(), Some(0));
    assert!(!r.past(0));
    assert_eq!(r.notes, vec![]);
    assert_eq!(
        r.priced_as,
        Some(PricedAs {
            channel: "oa".into(),
            model: "gpt-x".into()
        })
    );
}

#[test]
fn a_missing_request_shows_as_the_provider_s_surplus() {
    let cfg = cfg();
    let chans = only(&cfg, &["oa"]);
    let mut l = Ledger::new();
    add(
        &mut l,
        Provider::OpenAi,
        day(),
        "gpt-x-2025",
        &priced("oa", 19),
    );
    let rows = rows(
        &cfg,
        Provider::OpenAi,
        &chans,
        l,
        &[reported("gpt-x-2025", tokens(2), Some(2))],
    );
    let r = &rows[0];
    assert_eq!(r.diff_micros(), Some(19));
    assert_eq!((r.ledger.requests, r.provider.requests), (Some(1), Some(2)));
    assert!(r.past(10) && !r.past(19));
}

#[test]
fn a_record_priced_by_another_price_shows() {
    let cfg = cfg();
    let chans = only(&cfg, &["oa"]);
    let mut l = Ledger::new();
    add(
        &mut l,
        Provider::OpenAi,
        day(),
        "gpt-x-2025",
        &priced("oa", 38),
    );
    let rows = rows(
        &cfg,
        Provider::OpenAi,
        &chans,
        l,
        &[reported("gpt-x-2025", tokens(1), Some(1))],
    );
    assert_eq!(
        rows[0].diff_micros(),
        Some(-19),
        "the ledger charged twice the price"
    );
}

#[test]
fn a_one_hour_cache_write_billed_as_five_minutes_shows_in_kinds_and_cost() {
    let cfg = cfg();
    let chans = only(&cfg, &["claude"]);
    let mut rec = record("claude", "claude-s", 1);
    rec.bill = Bill {
        lines: vec![
            Line::new(Kind::Input, 8, 3_000_000),
            Line::new(Kind::CacheWrite, 1000, 3_750_000),
            Line::new(Kind::Output, 5, 15_000_000),
        ],
        tier: None,
    };
    rec.provider_cost = Some(rec.bill.micros());
    let mut l = Ledger::new();
    add(&mut l, Provider::Anthropic, day(), "claude-s", &rec);
    let t = Tokens {
        input: 8,
        cache_write_1h: 1000,
        output: 5,
        ..Tokens::default()
    };
    let rows = rows(
        &cfg,
        Provider::Anthropic,
        &chans,
        l,
        &[reported("claude-s", t, None)],
    );
    let r = &rows[0];
    assert_eq!(
        (r.ledger.tokens.cache_write, r.provider.tokens.cache_write),
        (1000, 0)
    );
    assert_eq!(r.provider.tokens.cache_write_1h, 1000);
    assert_eq!(
        r.provider.requests, None,
        "Anthropic does not count requests"
    );
    // 1000 tokens at 6.00 instead of 3.75 per 1M: 2,250 micro-USD more.
    assert_eq!(r.diff_micros(), Some(2_250));
}

#[test]
fn a_model_on_two_channels_is_one_row_costed_at_the_busiest_pair_s_price() {
    let cfg = cfg();
    let chans = only(&cfg, &["oa", "oa-eu"]);
    let mut l = Ledger::new();
    add(
        &mut l,
        Provider::OpenAi,
        day(),
        "gpt-x-2025",
        &priced("oa", 19),
    );
    for _ in 0..2 {
        add(
            &mut l,
            Provider::OpenAi,
            day(),
            "gpt-x-2025",
            &priced("oa-eu", 38),
        );
    }
    let rows = rows(
        &cfg,
        Provider::OpenAi,
        &chans,
        l,
        &[reported("gpt-x-2025", tokens(3), Some(3))],
    );
    let r = &rows[0];
    assert_eq!(r.channels, vec!["oa", "oa-eu"]);
    assert_eq!(r.by_channel["oa-eu"].requests, 2);
    assert_eq!(r.priced_as.as_ref().unwrap().channel, "oa-eu");
    assert!(r.notes.contains(&Note::MixedPrices));
    assert_eq!(r.ledger.cost_micros, Some(19 + 76));
    assert_eq!(r.provider.cost_micros, Some(114));
}

#[test]
fn a_model_no_channel_sends_is_shown_not_counted() {
    let cfg = cfg();
    let chans = only(&cfg, &["oa"]);
    let rows = rows(
        &cfg,
        Provider::OpenAi,
        &chans,
        Ledger::new(),
        &[reported("dall-e-3", tokens(1), Some(1))],
    );
    let r = &rows[0];
    assert!(r.channels.is_empty());
    assert_eq!(r.notes, vec![Note::NotServed]);
    assert_eq!(r.provider.cost_micros, None);
    assert!(!r.counted() && !r.past(0));
}

#[test]
fn a_request_the_provider_does_not_report_shows_too() {
    let cfg = cfg();
    let chans = only(&cfg, &["oa"]);
    let mut l = Ledger::new();
    add(
        &mut l,
        Provider::OpenAi,
        day(),
        "gpt-x-2025",
        &priced("oa", 19),
    );
    let rows = rows(&cfg, Provider::OpenAi, &chans, l, &[]);
    let r = &rows[0];
    assert_eq!(r.provider.requests, Some(0));
    assert_eq!(r.provider.cost_micros, Some(0));
    assert_eq!(r.diff_micros(), Some(-19));
}

#[test]
fn tiered_prices_cost_a_day_at_base_rates_and_say_so() {
    let cfg = cfg();
    let chans = only(&cfg, &["oa"]);
    let t = Tokens {
        input: 5000,
        ..Tokens::default()
    };
    let rows = rows(
        &cfg,
        Provider::OpenAi,
        &chans,
        Ledger::new(),
        &[reported("gpt-long", t, Some(5))],
    );
    assert_eq!(rows[0].provider.cost_micros, Some(5_000));
    assert!(rows[0].notes.contains(&Note::Tiered));
}

#[test]
fn each_kind_is_costed_at_its_own_rate() {
    let cfg = cfg();
    let p = cfg.channel_price("claude", "claude-s").unwrap();
    let t = Tokens {
        input: 1_000_000,
        cached_input: 1_000_000,
        cache_write: 1_000_000,
        cache_write_1h: 1_000_000,
        output: 1_000_000,
        web_search: 100,
        ..Tokens::default()
    };
    // 3 + 0.3 + 3.75 + 6 + 15 USD, and 100 searches at 0.01
    assert_eq!(cost_at(p, &t), 28_050_000 + 1_000_000);
}
