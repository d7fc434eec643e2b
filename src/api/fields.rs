//! What the admin API's JSON and the CLI share, for keys and groups alike: money as
//! decimal USD in and out (stored as integer micro-USD), times as RFC 3339, `null` that
//! clears a field, objects whose unknown fields are refused, and the checks of the
//! fields every record has.

use crate::errors::GatewayError;
use crate::store::{KeyStatus, Micros};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// Distinguishes `"f": null` (Some(None)) from an absent field (None, via `default`).
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

pub fn usd_to_micros(usd: f64) -> Option<Micros> {
    (0.0..9e12)
        .contains(&usd)
        .then(|| (usd * 1_000_000.0).round() as Micros)
}

pub fn micros_to_usd(m: Micros) -> f64 {
    m as f64 / 1_000_000.0
}

pub fn rfc3339(secs: i64) -> String {
    DateTime::<Utc>::from_timestamp(secs, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub fn bad(param: &str, msg: impl Into<String>) -> GatewayError {
    GatewayError::bad_request(Some(param), msg)
}

/// The `name` and `status` fields keys and groups share, checked.
pub fn name_and_status(
    name: &Option<String>,
    status: &Option<String>,
) -> Result<(Option<String>, Option<KeyStatus>), GatewayError> {
    if name.as_ref().is_some_and(|n| n.len() > 200) {
        return Err(bad("name", "`name` must be at most 200 characters"));
    }
    let status = status
        .as_deref()
        .map(|s| {
            KeyStatus::parse(s)
                .ok_or_else(|| bad("status", "`status` must be `enabled` or `disabled`"))
        })
        .transpose()?;
    Ok((name.clone(), status))
}

/// Parses a JSON object whose fields must all be in `allowed` (an unknown field is
/// named in the 400 rather than ignored).
pub fn parse_object<T: for<'de> Deserialize<'de> + Default>(
    body: &[u8],
    what: &str,
    allowed: &[&str],
) -> Result<T, GatewayError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let invalid = |e: serde_json::Error| {
        let msg = e.to_string();
        // serde names the offending field in its message; surface it as `param`.
        let param = msg.split('`').nth(1).map(str::to_string);
        GatewayError::BadRequest {
            param,
            message: format!("Invalid {what} JSON: {msg}"),
        }
    };
    let v: Value = serde_json::from_slice(body).map_err(invalid)?;
    let Some(obj) = v.as_object() else {
        return Err(GatewayError::bad_request(
            None,
            format!("Invalid {what} JSON: expected an object"),
        ));
    };
    if let Some(unknown) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(
            unknown,
            format!("Invalid {what} JSON: unknown field `{unknown}`"),
        ));
    }
    serde_json::from_value(v).map_err(invalid)
}

/// An optional amount of USD (`null` clears it), checked and in micro-USD.
pub fn usd_field(
    param: &str,
    v: Option<Option<f64>>,
) -> Result<Option<Option<Micros>>, GatewayError> {
    v.map(|o| {
        o.map(|usd| {
            usd_to_micros(usd).ok_or_else(|| {
                bad(
                    param,
                    format!("`{param}` must be a non-negative number of USD"),
                )
            })
        })
        .transpose()
    })
    .transpose()
}

/// A usage record's cost by kind, for `/api/log/token` and `/admin/usage`: the provider
/// cost and its lines (units, rate, cost), the key's multiplier, and the charge these
/// make (`cost_micro_usd` = ⌈provider pico-USD ÷ 10⁶⌉ × multiplier, rounded up, capped
/// by the reservation; README, "Pricing").
pub fn cost_fields(out: &mut serde_json::Map<String, Value>, r: &crate::store::UsageRecord) {
    use serde_json::json;
    let lines: Vec<Value> = r
        .bill
        .lines
        .iter()
        .map(|l| {
            let mut v = json!({
                "kind": l.kind.name(),
                "units": l.units,
                "pico_usd_per_unit": l.pico_per_unit,
                "cost_pico_usd": l.pico() as u64,
            });
            if l.per != 1 {
                v["per_units"] = json!(l.per);
            }
            v
        })
        .collect();
    let provider = r.provider_cost.unwrap_or(r.cost);
    out.insert("provider_cost_usd".into(), json!(micros_to_usd(provider)));
    out.insert("provider_cost_micro_usd".into(), json!(provider));
    out.insert(
        "price_multiplier".into(),
        json!(r.multiplier_ppm.map_or(1.0, |m| m as f64 / 1_000_000.0)),
    );
    out.insert("usage_by_kind".into(), Value::Array(lines));
    if let Some(t) = r.bill.tier {
        out.insert("price_tier_above_input_tokens".into(), json!(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_round_trip() {
        assert_eq!(usd_to_micros(12.345678), Some(12_345_678));
        assert_eq!(micros_to_usd(1_500_000), 1.5);
        assert_eq!(usd_to_micros(-0.5), None);
    }
}
