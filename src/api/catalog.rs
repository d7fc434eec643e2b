//! `GET /admin/catalog`: what the configuration serves, for the console's channel page:
//! each channel's name, protocol, models, model mapping, priority and weight, and each
//! model's price in USD. Never a channel's address or key.

use crate::billing::{Price, Rates};
use crate::gateway::Gateway;
use serde_json::{json, Map, Value};

/// pico-USD per unit = micro-USD per million units; as USD per million.
fn per_million(pico: u64) -> f64 {
    pico as f64 / 1_000_000.0
}

fn micros(m: i64) -> f64 {
    m as f64 / 1_000_000.0
}

/// Token rates in USD per million, every kind (the fallbacks already applied).
fn rates_json(r: &Rates, input: bool, output: bool) -> Map<String, Value> {
    let mut v = Map::new();
    if input {
        for (k, p) in [
            ("input", r.input),
            ("cached_input", r.cached_input),
            ("cache_write", r.cache_write),
            ("cache_write_1h", r.cache_write_1h),
            ("audio_input", r.audio_input),
            ("image_input", r.image_input),
        ] {
            v.insert(k.into(), json!(per_million(p)));
        }
    }
    if output {
        for (k, p) in [
            ("output", r.output),
            ("reasoning", r.reasoning),
            ("audio_output", r.audio_output),
            ("image_output", r.image_output),
        ] {
            v.insert(k.into(), json!(per_million(p)));
        }
    }
    v
}

/// The price's configured parts, in the units the configuration uses.
pub fn price_json(p: &Price) -> Value {
    let mut v = rates_json(&p.rates, p.input_priced, p.output_priced);
    if !p.tiers.is_empty() {
        let tiers: Vec<Value> = p
            .tiers
            .iter()
            .map(|t| {
                let mut m = rates_json(&t.rates, true, true);
                m.insert("above_input_tokens".into(), json!(t.above_input_tokens));
                Value::Object(m)
            })
            .collect();
        v.insert("tiers".into(), Value::Array(tiers));
    }
    if p.per_web_search_pico > 0 {
        v.insert(
            "per_web_search".into(),
            json!(per_million(p.per_web_search_pico) / 1_000_000.0),
        );
    }
    if let Some(u) = p.per_search_unit_pico {
        v.insert(
            "per_search_unit".into(),
            json!(per_million(u) / 1_000_000.0),
        );
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
            let own: Map<String, Value> = gw
                .config
                .channel_prices
                .get(&c.name)
                .into_iter()
                .flatten()
                .map(|(m, p)| (m.clone(), price_json(p)))
                .collect();
            json!({
                "name": c.name,
                "protocol": c.protocol.as_str(),
                "models": c.models,
                "model_map": c.model_map,
                "priority": c.priority,
                "weight": c.weight,
                // The models this channel bills differently (its own prices, or the
                // top-level ones times its multiplier).
                "prices": own,
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
        // USD per million tokens of each kind or characters; USD per image, minute,
        // second, web search or search unit.
        "prices": prices,
    })
}
