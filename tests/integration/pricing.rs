//! Every usage detail priced at its own rate, the cost on the answer, and the prices of
//! resellers (channel prices and multipliers, key and group multipliers). Every expected
//! figure is worked out by hand here from the price table in `CONFIG`, never by calling
//! the gateway's pricing code.

use crate::billed_vendors;
use crate::gateway::{StoreKind, TestGateway};
use futures_util::StreamExt;
use serde_json::{json, Value};

fn config(base: &str) -> String {
    format!(
        r#"channels:
  - {{ name: oa, protocol: openai, base_url: {base}, api_key: k, models: [gpt-audio, plain] }}
  - {{ name: an, protocol: anthropic, base_url: {base}, api_key: k, models: [claude-x] }}
  - {{ name: ge, protocol: gemini, base_url: {base}, api_key: k, models: [gemini-x] }}
  - {{ name: half, protocol: openai, base_url: {base}, api_key: k, models: [gpt-half], price_multiplier: 0.5 }}
  - name: own
    protocol: openai
    base_url: {base}
    api_key: k
    models: [gpt-own]
    prices: {{ gpt-own: {{ input: 1, output: 1 }} }}
prices:
  gpt-audio: {{ input: 2.5, cached_input: 1.25, audio_input: 40, output: 10, reasoning: 12, audio_output: 80 }}
  gpt-half: {{ input: 2.5, cached_input: 1.25, audio_input: 40, output: 10, reasoning: 12, audio_output: 80 }}
  gpt-own: {{ input: 2.5, cached_input: 1.25, audio_input: 40, output: 10, reasoning: 12, audio_output: 80 }}
  plain: {{ input: 1, output: 2, max_output_tokens: 1000 }}
  claude-x: {{ input: 3, cached_input: 0.3, cache_write: 3.75, cache_write_1h: 6, output: 15, per_web_search: 0.01 }}
  gemini-x:
    input: 1.25
    cached_input: 0.125
    output: 10
    tiers: [{{ above_input_tokens: 200000, input: 2.5, cached_input: 0.25, output: 15 }}]
"#
    )
}

/// OpenAI (`billed_vendors::openai_usage`): 1,200 plain input at 2.5, 500 cached at 1.25,
/// 300 audio in at 40, 300 plain output at 10, 400 reasoning at 12, 200 audio out at 80.
const OPENAI_MICROS: i64 = 3_000 + 625 + 12_000 + 3_000 + 4_800 + 16_000;
/// Anthropic: 1,000 input at 3, 2,000 cache reads at 0.3, 500 5-minute writes at 3.75,
/// 1,000 1-hour writes at 6, 700 output at 15 (and 3 searches at 0.01 USD when the
/// request offered the web search tool).
const ANTHROPIC_MICROS: i64 = 3_000 + 600 + 1_875 + 6_000 + 10_500;
const SEARCHES_MICROS: i64 = 30_000;
/// Gemini, 1,000-token prompt: 500 plain at 1.25, 500 cached at 0.125 (62.5), 3,000
/// output (1,000 candidates and 2,000 thoughts) at 10; 30,687.5 rounded up.
const GEMINI_SHORT_MICROS: i64 = 30_688;
/// Gemini, 250,000-token prompt (the tier above 200,000): 150,000 plain at 2.5,
/// 100,000 cached at 0.25, 3,000 output at 15.
const GEMINI_LONG_MICROS: i64 = 375_000 + 25_000 + 45_000;

enum Client {
    Chat,
    Messages,
    Gemini,
}

async fn send(
    gw: &TestGateway,
    key: &str,
    client: Client,
    model: &str,
    stream: bool,
    text: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let req = match client {
        Client::Chat => {
            let mut b = json!({"model": model, "stream": stream,
                               "messages": [{"role": "user", "content": text}]});
            if stream {
                b["stream_options"] = json!({"include_usage": true});
            }
            gw.http
                .post(gw.url("/v1/chat/completions"))
                .bearer_auth(key)
                .json(&b)
        }
        Client::Messages => {
            let mut b = json!({"model": model, "max_tokens": 1000, "stream": stream,
                               "messages": [{"role": "user", "content": text}]});
            if model == "claude-x" {
                // Anthropic's web search server tool, at most 5 searches.
                b["tools"] = json!([{"type": "web_search_20250305", "name": "web_search",
                                     "max_uses": 5}]);
            }
            gw.http
                .post(gw.url("/v1/messages"))
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
                .json(&b)
        }
        Client::Gemini => {
            let path = if stream {
                format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
            } else {
                format!("/v1beta/models/{model}:generateContent")
            };
            gw.http
                .post(gw.url(&path))
                .header("x-goog-api-key", key)
                .json(&json!({"contents": [{"role": "user", "parts": [{"text": text}]}]}))
        }
    };
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let mut body = Vec::new();
    let mut s = r.bytes_stream();
    while let Some(b) = s.next().await {
        body.extend_from_slice(&b.unwrap());
    }
    (status, headers, String::from_utf8(body).unwrap())
}

/// The newest record of the key, from `/api/log/token`.
async fn last_record(gw: &TestGateway, key: &str) -> Value {
    let (s, log) = gw.get("/api/log/token?limit=1", key).await;
    assert_eq!(s, 200);
    log["data"][0].clone()
}

/// The record's lines as `kind → (units, pico per unit)`, and a check that they add up
/// to its provider cost.
fn lines(rec: &Value) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut pico: u128 = 0;
    let mut out = std::collections::BTreeMap::new();
    for l in rec["usage_by_kind"].as_array().unwrap() {
        let units = l["units"].as_u64().unwrap();
        let rate = l["pico_usd_per_unit"].as_u64().unwrap();
        let per = l["per_units"].as_u64().unwrap_or(1);
        assert_eq!(
            l["cost_pico_usd"].as_u64().unwrap() as u128,
            (units as u128 * rate as u128).div_ceil(per as u128)
        );
        pico += (units as u128 * rate as u128).div_ceil(per as u128);
        out.insert(l["kind"].as_str().unwrap().to_string(), (units, rate));
    }
    assert_eq!(
        pico.div_ceil(1_000_000) as i64,
        rec["provider_cost_micro_usd"].as_i64().unwrap(),
        "the lines make the provider cost: {rec}"
    );
    out
}

fn usd(micros: i64) -> String {
    let s = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// The `cost_usd` of the usage object of a stream's usage event, in micro-USD.
fn stream_cost(body: &str, client: &Client) -> Option<i64> {
    let mut found = None;
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let usage = match client {
            Client::Chat => v.get("usage"),
            Client::Messages => (v["type"] == "message_delta").then(|| &v["usage"]),
            Client::Gemini => v.get("usageMetadata"),
        };
        if let Some(c) = usage
            .and_then(|u| u.get("cost_usd"))
            .and_then(Value::as_f64)
        {
            found = Some((c * 1_000_000.0).round() as i64);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_usage_detail_is_priced_at_its_own_rate_and_the_answer_says_what_it_cost() {
    let up = billed_vendors::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"name": "t"})).await;
    let long = "x".repeat(260_000);
    // A prompt of 4,500 tokens comes in a body at least that long.
    let prompt = "y".repeat(5_000);
    let cases = [
        (Client::Chat, "gpt-audio", "hi", OPENAI_MICROS),
        (
            Client::Messages,
            "claude-x",
            prompt.as_str(),
            ANTHROPIC_MICROS + SEARCHES_MICROS,
        ),
        (Client::Chat, "claude-x", prompt.as_str(), ANTHROPIC_MICROS),
        (Client::Gemini, "gemini-x", "hi", GEMINI_SHORT_MICROS),
        (
            Client::Gemini,
            "gemini-x",
            long.as_str(),
            GEMINI_LONG_MICROS,
        ),
        (
            Client::Messages,
            "gemini-x",
            long.as_str(),
            GEMINI_LONG_MICROS,
        ),
    ];
    let mut spent = 0;
    for (client, model, text, micros) in cases {
        // Whole: the charge in the header, equal to the record.
        let (s, h, body) = send(&gw, &key, client_of(&client), model, false, text).await;
        assert_eq!(s, 200, "{model}: {body}");
        assert_eq!(
            h.get("x-gateway-cost-usd").and_then(|v| v.to_str().ok()),
            Some(usd(micros).as_str()),
            "{model}: {body} {}",
            last_record(&gw, &key).await
        );
        assert!(h.get("x-gateway-cost-estimated").is_none());
        let rec = last_record(&gw, &key).await;
        assert_eq!(rec["cost_micro_usd"], micros, "{model}: {rec}");
        assert_eq!(rec["provider_cost_micro_usd"], micros);
        assert_eq!(rec["cost_estimated"], false);
        lines(&rec);
        spent += micros;
        // Streamed: the same cost in the usage object, and in the record.
        let (s, _, body) = send(&gw, &key, client_of(&client), model, true, text).await;
        assert_eq!(s, 200, "{model}: {body}");
        let rec = last_record(&gw, &key).await;
        assert_eq!(rec["cost_micro_usd"], micros, "{model} streamed: {rec}");
        assert_eq!(stream_cost(&body, &client), Some(micros), "{model}: {body}");
        spent += micros;
    }
    assert_eq!(gw.used_micros(&id).await, spent);
}

fn client_of(c: &Client) -> Client {
    match c {
        Client::Chat => Client::Chat,
        Client::Messages => Client::Messages,
        Client::Gemini => Client::Gemini,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_list_each_kind_with_its_units_and_rate() {
    let up = billed_vendors::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"name": "t"})).await;
    let pico = |usd_per_m: f64| (usd_per_m * 1_000_000.0).round() as u64;
    send(&gw, &key, Client::Chat, "gpt-audio", false, "hi").await;
    let l = lines(&last_record(&gw, &key).await);
    assert_eq!(l["input"], (1200, pico(2.5)));
    assert_eq!(l["cached_input"], (500, pico(1.25)));
    assert_eq!(l["audio_input"], (300, pico(40.0)));
    assert_eq!(l["output"], (300, pico(10.0)));
    assert_eq!(l["reasoning"], (400, pico(12.0)));
    assert_eq!(l["audio_output"], (200, pico(80.0)));
    send(
        &gw,
        &key,
        Client::Messages,
        "claude-x",
        false,
        &"y".repeat(5_000),
    )
    .await;
    let l = lines(&last_record(&gw, &key).await);
    assert_eq!(l["input"], (1000, pico(3.0)));
    assert_eq!(l["cached_input"], (2000, pico(0.3)));
    assert_eq!(l["cache_write"], (500, pico(3.75)));
    assert_eq!(l["cache_write_1h"], (1000, pico(6.0)));
    assert_eq!(l["output"], (700, pico(15.0)));
    assert_eq!(l["web_search"], (3, 10_000_000_000));
    let long = "x".repeat(260_000);
    send(&gw, &key, Client::Gemini, "gemini-x", false, &long).await;
    let rec = last_record(&gw, &key).await;
    assert_eq!(rec["price_tier_above_input_tokens"], 200_000);
    let l = lines(&rec);
    assert_eq!(l["input"], (150_000, pico(2.5)));
    assert_eq!(l["cached_input"], (100_000, pico(0.25)));
    assert_eq!(l["output"], (1000, pico(15.0)));
    assert_eq!(
        l["reasoning"],
        (2000, pico(15.0)),
        "thoughts bill as output"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_client_asked_no_usage_of_carries_no_cost() {
    let up = billed_vendors::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"name": "t"})).await;
    let (s, _, body) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "gpt-audio", "stream": true,
                    "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(s, 200);
    assert!(!body.contains("cost_usd"), "{body}");
    assert!(!body.contains("\"usage\":{"), "{body}");
    let rec = last_record(&gw, &key).await;
    assert_eq!(rec["cost_micro_usd"], OPENAI_MICROS, "billed all the same");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_and_group_multipliers_charge_the_provider_cost_times_theirs() {
    let up = billed_vendors::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (s, _) = gw
        .admin_send(
            reqwest::Method::POST,
            "/admin/groups",
            Some(json!({"id": "resold", "price_multiplier": 2})),
        )
        .await;
    assert_eq!(s, 201);
    let (own, own_id) = gw
        .create_key(json!({"name": "own", "price_multiplier": 1.5}))
        .await;
    let (grouped, grouped_id) = gw
        .create_key(json!({"name": "grouped", "group": "resold"}))
        .await;
    let (both, _) = gw
        .create_key(json!({"name": "both", "group": "resold", "price_multiplier": 1.25}))
        .await;
    // 39,425 × 1.5 = 59,137.5, rounded up; × 2 = 78,850; × 1.25 = 49,281.25 → 49,282.
    for (key, charged, m) in [
        (&own, 59_138, 1.5),
        (&grouped, 78_850, 2.0),
        (&both, 49_282, 1.25),
    ] {
        let (s, h, body) = send(&gw, key, Client::Chat, "gpt-audio", false, "hi").await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(
            h.get("x-gateway-cost-usd").unwrap().to_str().unwrap(),
            usd(charged)
        );
        let rec = last_record(&gw, key).await;
        assert_eq!(rec["cost_micro_usd"], charged);
        assert_eq!(rec["provider_cost_micro_usd"], OPENAI_MICROS);
        assert_eq!(rec["price_multiplier"], m);
        // Streams state the multiplied charge too.
        let (_, _, body) = send(&gw, key, Client::Chat, "gpt-audio", true, "hi").await;
        assert_eq!(stream_cost(&body, &Client::Chat), Some(charged), "{body}");
    }
    assert_eq!(gw.used_micros(&own_id).await, 2 * 59_138);
    assert_eq!(gw.used_micros(&grouped_id).await, 2 * 78_850);
    let (_, k) = gw.admin_get(&format!("/admin/keys/{own_id}")).await;
    assert_eq!(k["price_multiplier"], 1.5);
    let (s, e) = gw
        .admin_send(
            reqwest::Method::PATCH,
            &format!("/admin/keys/{own_id}"),
            Some(json!({"price_multiplier": 0})),
        )
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "price_multiplier");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reservation_holds_the_multiplied_price() {
    let up = billed_vendors::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let body = json!({"model": "plain", "max_tokens": 1000,
                      "messages": [{"role": "user", "content": "hi"}]});
    let bytes = serde_json::to_vec(&body).unwrap().len() as i64;
    // Worst case at the list price: (bytes + 64) input tokens at 1, 1,000 output at 2.
    // At 2× that is twice as much; a quota of 2 × (input + 500 × 2) pays for 500 tokens.
    let quota = 2 * ((bytes + 64) + 500 * 2);
    let (key, id) = gw
        .create_key(json!({"name": "r", "price_multiplier": 2,
                           "quota_usd": quota as f64 / 1_000_000.0}))
        .await;
    let (s, _, out) = gw.post("/v1/chat/completions", &key, &body).await;
    assert_eq!(s, 200, "{out}");
    let sent = up.last().json();
    assert_eq!(
        sent["max_tokens"], 500,
        "the output limit the multiplied grant pays for: {sent}"
    );
    // The mock reports far more than that: the charge stops at the reservation.
    assert_eq!(gw.used_micros(&id).await, quota);
    let rec = last_record(&gw, &key).await;
    assert!(rec["overrun_micro_usd"].as_i64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_bills_at_its_own_prices_or_its_multiplier() {
    let up = billed_vendors::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"name": "t"})).await;
    // `half`: every rate × 0.5, so 19,712.5 → 19,713.
    send(&gw, &key, Client::Chat, "gpt-half", false, "hi").await;
    let rec = last_record(&gw, &key).await;
    assert_eq!(rec["channel"], "half");
    assert_eq!(rec["cost_micro_usd"], 19_713);
    assert_eq!(lines(&rec)["audio_output"], (200, 40_000_000));
    // `own`: input 1 and output 1, every other kind falling back to them: 2,000 + 900.
    send(&gw, &key, Client::Chat, "gpt-own", false, "hi").await;
    let rec = last_record(&gw, &key).await;
    assert_eq!(rec["cost_micro_usd"], 2_900);
    let (_, catalog) = gw.admin_get("/admin/catalog").await;
    let own = catalog["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "own")
        .unwrap();
    assert_eq!(own["prices"]["gpt-own"]["audio_output"], 1.0);
}
