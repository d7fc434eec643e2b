//! Period budgets, tpm, concurrency and groups as the admin API, the CLI and the usage
//! endpoint show them: the input fields keys and groups share, and the view of each
//! limit with what is used and left in its current period.

use super::fields::{bad, micros_to_usd, nullable, rfc3339, usd_field};
use crate::billing::{Calendar, Multiplier};
use crate::errors::GatewayError;
use crate::store::policy::{time_zone, valid_group_id};
use crate::store::{
    KeyRecord, Micros, PeriodKind, Periods, Policy, PolicyPatch, Scope, Standing, Store,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The fields of a [`Policy`], on create and update (absent: unchanged; `null`: none).
#[derive(Debug, Default, Deserialize)]
pub struct PolicyInput {
    #[serde(default, deserialize_with = "nullable")]
    pub budget_day_usd: Option<Option<f64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub budget_week_usd: Option<Option<f64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub budget_month_usd: Option<Option<f64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub tpm: Option<Option<u64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub max_concurrent: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    pub time_zone: Option<Option<String>>,
    /// USD charged per USD of provider cost.
    #[serde(default, deserialize_with = "nullable")]
    pub price_multiplier: Option<Option<f64>>,
}

/// Its field names: keys and groups accept these besides their own.
pub const POLICY_FIELDS: &[&str] = &[
    "budget_day_usd",
    "budget_week_usd",
    "budget_month_usd",
    "tpm",
    "max_concurrent",
    "time_zone",
    "price_multiplier",
];

impl PolicyInput {
    pub fn to_patch(&self) -> Result<PolicyPatch, GatewayError> {
        if self.tpm == Some(Some(0)) {
            return Err(bad("tpm", "`tpm` must be at least 1, or null for no limit"));
        }
        if self.max_concurrent == Some(Some(0)) {
            return Err(bad(
                "max_concurrent",
                "`max_concurrent` must be at least 1, or null for no limit",
            ));
        }
        if let Some(Some(z)) = &self.time_zone {
            if time_zone(z).is_none() {
                return Err(bad(
                    "time_zone",
                    format!(
                        "`{z}` is not a time zone (an IANA name such as `Europe/Paris`, or `UTC`)"
                    ),
                ));
            }
        }
        let price_multiplier_ppm = match self.price_multiplier {
            Some(Some(v)) => Some(Some(
                Multiplier::from_f64(v)
                    .map_err(|m| bad("price_multiplier", format!("`price_multiplier` {m}")))?
                    .0,
            )),
            Some(None) => Some(None),
            None => None,
        };
        Ok(PolicyPatch {
            price_multiplier_ppm,
            budget_day: usd_field("budget_day_usd", self.budget_day_usd)?,
            budget_week: usd_field("budget_week_usd", self.budget_week_usd)?,
            budget_month: usd_field("budget_month_usd", self.budget_month_usd)?,
            tpm: self.tpm,
            max_concurrent: self.max_concurrent,
            time_zone: self.time_zone.clone(),
        })
    }
}

/// Checks a group id given as input.
pub fn group_id(param: &str, id: &str) -> Result<(), GatewayError> {
    if valid_group_id(id) {
        Ok(())
    } else {
        Err(bad(
            param,
            format!("`{param}` must be 1 to 64 letters, digits, `_`, `-` or `.`"),
        ))
    }
}

/// A policy's fields in a key's or group's view.
pub fn view_into(out: &mut Map<String, Value>, p: &Policy) {
    let usd = |m: Option<Micros>| json!(m.map(micros_to_usd));
    out.insert("budget_day_usd".into(), usd(p.budget_day));
    out.insert("budget_week_usd".into(), usd(p.budget_week));
    out.insert("budget_month_usd".into(), usd(p.budget_month));
    out.insert("tpm".into(), json!(p.tpm));
    out.insert("max_concurrent".into(), json!(p.max_concurrent));
    out.insert("time_zone".into(), json!(p.time_zone));
    out.insert(
        "price_multiplier".into(),
        json!(p.price_multiplier_ppm.map(|m| Multiplier(m).as_f64())),
    );
}

/// Every limit of one scope with what is used and left now: `prefix` is `""` for a key,
/// `"group."` for its group (the same names a refusal's `param` uses).
pub fn limits(
    prefix: &str,
    quota: Option<(Micros, Micros)>,
    p: &Policy,
    periods: &Periods,
    now: &Standing,
) -> Vec<Value> {
    let mut out = Vec::new();
    let money = |name: String, limit: Micros, used: Micros, resets: Option<i64>| {
        let left = (limit - used).max(0);
        json!({
            "limit": name,
            "kind": "usd",
            "limit_usd": micros_to_usd(limit),
            "used_usd": micros_to_usd(used),
            "left_usd": micros_to_usd(left),
            "limit_micro_usd": limit,
            "used_micro_usd": used,
            "left_micro_usd": left,
            "resets_at": resets.map(rfc3339),
        })
    };
    if let Some((limit, used)) = quota {
        out.push(money(format!("{prefix}quota"), limit, used, None));
    }
    for kind in PeriodKind::ALL {
        if let Some(limit) = p.budget(kind) {
            let period = periods.get(kind);
            out.push(money(
                format!("{prefix}budget.{}", kind.as_str()),
                limit,
                now.spent(kind),
                Some(period.end),
            ));
        }
    }
    if let Some(tpm) = p.tpm {
        out.push(json!({
            "limit": format!("{prefix}tpm"),
            "kind": "tokens_per_minute",
            "limit_tokens": tpm,
            "used_tokens": now.minute_tokens,
            "left_tokens": tpm.saturating_sub(now.minute_tokens),
        }));
    }
    if let Some(max) = p.max_concurrent {
        out.push(json!({
            "limit": format!("{prefix}max_concurrent"),
            "kind": "requests_in_flight",
            "limit_requests": max,
            "in_flight": now.in_flight,
            "left_requests": max.saturating_sub(now.in_flight),
        }));
    }
    out
}

/// Every limit of a key and of its group, with what is used and left now.
pub async fn key_limits(
    store: &dyn Store,
    calendar: &Calendar,
    key: &KeyRecord,
) -> Result<Value, GatewayError> {
    let at = calendar.clock.now();
    let minute = at.div_euclid(60);
    let periods = calendar.periods(key.policy.time_zone.as_deref(), at);
    let now = store
        .standing(Scope::Key, &key.id, &periods, minute)
        .await?;
    let mut out = limits(
        "",
        key.quota_limit.map(|l| (l, key.quota_used)),
        &key.policy,
        &periods,
        &now,
    );
    if let Some(id) = &key.group {
        if let Some(g) = store.get_group(id).await? {
            let periods = calendar.periods(g.policy.time_zone.as_deref(), at);
            let now = store.standing(Scope::Group, id, &periods, minute).await?;
            out.extend(limits(
                "group.",
                g.quota_limit.map(|l| (l, g.quota_used)),
                &g.policy,
                &periods,
                &now,
            ));
        }
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fields::parse_object;

    #[test]
    fn policy_fields_validate_and_name_the_field() {
        let p: PolicyInput = parse_object(
            br#"{"budget_day_usd": 2.5, "tpm": null, "time_zone": "Europe/Paris"}"#,
            "key",
            POLICY_FIELDS,
        )
        .unwrap();
        let patch = p.to_patch().unwrap();
        assert_eq!(patch.budget_day, Some(Some(2_500_000)));
        assert_eq!(patch.tpm, Some(None));
        assert_eq!(patch.budget_week, None);
        for (body, param) in [
            (&br#"{"budget_week_usd": -1}"#[..], "budget_week_usd"),
            (br#"{"tpm": 0}"#, "tpm"),
            (br#"{"max_concurrent": 0}"#, "max_concurrent"),
            (br#"{"time_zone": "Mars/Olympus"}"#, "time_zone"),
        ] {
            let e = parse_object::<PolicyInput>(body, "key", POLICY_FIELDS)
                .unwrap()
                .to_patch()
                .unwrap_err();
            assert_eq!(e.param(), Some(param), "{}", String::from_utf8_lossy(body));
        }
        let e = parse_object::<PolicyInput>(br#"{"budget": 1}"#, "key", POLICY_FIELDS).unwrap_err();
        assert_eq!(e.param(), Some("budget"));
    }

    #[test]
    fn group_ids_are_checked() {
        assert!(group_id("group", "team-a.eu_1").is_ok());
        assert_eq!(group_id("group", "a b").unwrap_err().param(), Some("group"));
        assert!(group_id("group", "").is_err());
    }
}
