//! `GET /admin/catalog`: what the configuration serves, for the console's channel page:
//! each channel's name, protocol, models, model mapping, priority and weight, and each
//! model's price in USD. Never a channel's address or key.

use crate::billing::Price;
use crate::gateway::Gateway;
use serde_json::{json, Map, Value};

/// pico-USD per unit = micro-USD per million units; as USD per million.
fn per_million(pico: u64) -> f64 {
    pico as f64 / 1_000_000.0
}

fn micros(m: i64) -> f64 {
    m as f64 / 1_000_000.0
}

/// The price's configured parts, in the units the configuration uses.
fn price_json(p: &Price) -> Value {
    let mut v = Map::new();
    if p.input_priced {
        v.insert("input".into(), json!(per_million(p.rates.input)));
        v.insert(
            "cached_input".into(),
            json!(per_million(p.rates.cached_input)),
        );
        v.insert(
            "cache_write".into(),
            json!(per_million(p.rates.cache_write)),
        );
    }
    if p.output_priced {
        v.insert("output".into(), json!(per_million(p.rates.output)));
    }
    if !p.per_image.is_empty() {
        let imgs: Map<String, Value> = p
            .per_image
            .iter()
            .map(|(k, m)| (k.clone(), json!(micros(*m))))
            .collect();
        v.insert("per_image".into(), Value::Object(imgs));
    }
    if let Some(c) = p.per_char_pico {
        v.insert("per_million_chars".into(), json!(per_million(c)));
    }
    if let Some(m) = p.per_minute_micros {
        v.insert("per_minute".into(), json!(micros(m as i64)));
    }
    if let Some(s) = p.per_second_micros {
        v.insert("per_second".into(), json!(micros(s as i64)));
    }
    v.insert("max_output_tokens".into(), json!(p.max_output_tokens));
    Value::Object(v)
}

pub fn get(gw: &Gateway) -> Value {
    let channels: Vec<Value> = gw
        .config
        .channels
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "protocol": c.protocol.as_str(),
                "models": c.models,
                "model_map": c.model_map,
                "priority": c.priority,
                "weight": c.weight,
            })
        })
        .collect();
    let prices: Map<String, Value> = gw
        .config
        .prices
        .iter()
        .map(|(m, p)| (m.clone(), price_json(p)))
        .collect();
    json!({
        "object": "catalog",
        "channels": channels,
        // USD per million tokens (`input`, `output`, `cached_input`, `cache_write`) or
        // characters, USD per image, minute or second.
        "prices": prices,
    })
}
