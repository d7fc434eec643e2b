//! Key records as Redis hash fields, and usage records as stream entries.

use crate::store::{
    GroupPatch, GroupRecord, KeyPatch, KeyRecord, KeyStatus, Policy, PolicyPatch, StoreError,
    StoreResult, UsageRecord,
};
use std::collections::HashMap;

fn opt_str<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn list_json(v: &[String]) -> String {
    // A list of strings always serializes: the fallback is never taken.
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

/// The record as hash fields; empty strings stand for "none" (and are deleted).
pub fn fields(r: &KeyRecord) -> Vec<(&'static str, String)> {
    vec![
        ("id", r.id.clone()),
        ("hash", r.hash.clone()),
        ("display", r.display.clone()),
        ("name", r.name.clone()),
        ("status", r.status.as_str().into()),
        ("created_at", r.created_at.to_string()),
        ("expires_at", opt_str(r.expires_at)),
        ("models", list_json(&r.models)),
        ("allow_ips", list_json(&r.allow_ips)),
        ("rpm", opt_str(r.rpm)),
        ("quota_limit", opt_str(r.quota_limit)),
        ("quota_used", r.quota_used.to_string()),
        ("group", r.group.clone().unwrap_or_default()),
    ]
    .into_iter()
    .chain(policy_fields(&r.policy))
    .collect()
}

/// A policy as hash fields (the reserve script reads them by these names).
pub fn policy_fields(p: &Policy) -> Vec<(&'static str, String)> {
    vec![
        ("budget_day", opt_str(p.budget_day)),
        ("budget_week", opt_str(p.budget_week)),
        ("budget_month", opt_str(p.budget_month)),
        ("tpm", opt_str(p.tpm)),
        ("max_concurrent", opt_str(p.max_concurrent)),
        ("time_zone", p.time_zone.clone().unwrap_or_default()),
        ("price_multiplier_ppm", opt_str(p.price_multiplier_ppm)),
    ]
}

pub fn policy_patch_fields(p: &PolicyPatch) -> Vec<(&'static str, String)> {
    let mut f = Vec::new();
    if let Some(v) = p.budget_day {
        f.push(("budget_day", opt_str(v)));
    }
    if let Some(v) = p.budget_week {
        f.push(("budget_week", opt_str(v)));
    }
    if let Some(v) = p.budget_month {
        f.push(("budget_month", opt_str(v)));
    }
    if let Some(v) = p.tpm {
        f.push(("tpm", opt_str(v)));
    }
    if let Some(v) = p.max_concurrent {
        f.push(("max_concurrent", opt_str(v)));
    }
    if let Some(v) = &p.time_zone {
        f.push(("time_zone", v.clone().unwrap_or_default()));
    }
    if let Some(v) = p.price_multiplier_ppm {
        f.push(("price_multiplier_ppm", opt_str(v)));
    }
    f
}

fn policy(h: &HashMap<String, String>) -> Policy {
    let get = |k: &str| h.get(k).filter(|v| !v.is_empty());
    Policy {
        budget_day: get("budget_day").and_then(|v| v.parse().ok()),
        budget_week: get("budget_week").and_then(|v| v.parse().ok()),
        budget_month: get("budget_month").and_then(|v| v.parse().ok()),
        tpm: get("tpm").and_then(|v| v.parse().ok()),
        max_concurrent: get("max_concurrent").and_then(|v| v.parse().ok()),
        time_zone: get("time_zone").cloned(),
        price_multiplier_ppm: get("price_multiplier_ppm").and_then(|v| v.parse().ok()),
    }
}

/// A group as hash fields; empty strings stand for "none".
pub fn group_fields(g: &GroupRecord) -> Vec<(&'static str, String)> {
    vec![
        ("id", g.id.clone()),
        ("name", g.name.clone()),
        ("status", g.status.as_str().into()),
        ("created_at", g.created_at.to_string()),
        ("quota_limit", opt_str(g.quota_limit)),
        ("quota_used", g.quota_used.to_string()),
    ]
    .into_iter()
    .chain(policy_fields(&g.policy))
    .collect()
}

pub fn group_patch_fields(p: &GroupPatch) -> Vec<(&'static str, String)> {
    let mut f = Vec::new();
    if let Some(v) = &p.name {
        f.push(("name", v.clone()));
    }
    if let Some(v) = p.status {
        f.push(("status", v.as_str().into()));
    }
    if let Some(v) = p.quota_limit {
        f.push(("quota_limit", opt_str(v)));
    }
    f.extend(policy_patch_fields(&p.policy));
    f
}

pub fn group_record(h: &HashMap<String, String>) -> StoreResult<GroupRecord> {
    let get = |k: &str| h.get(k).filter(|v| !v.is_empty());
    let num = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
    Ok(GroupRecord {
        id: get("id")
            .ok_or_else(|| StoreError::internal("malformed group record"))?
            .clone(),
        name: h.get("name").cloned().unwrap_or_default(),
        status: get("status")
            .and_then(|s| KeyStatus::parse(s))
            .unwrap_or(KeyStatus::Disabled),
        created_at: num("created_at").unwrap_or(0),
        quota_limit: num("quota_limit"),
        quota_used: num("quota_used").unwrap_or(0),
        policy: policy(h),
    })
}

pub fn patch_fields(p: &KeyPatch) -> Vec<(&'static str, String)> {
    let mut f = Vec::new();
    if let Some(v) = &p.name {
        f.push(("name", v.clone()));
    }
    if let Some(v) = p.status {
        f.push(("status", v.as_str().into()));
    }
    if let Some(v) = p.expires_at {
        f.push(("expires_at", opt_str(v)));
    }
    if let Some(v) = &p.models {
        f.push(("models", list_json(v)));
    }
    if let Some(v) = &p.allow_ips {
        f.push(("allow_ips", list_json(v)));
    }
    if let Some(v) = p.rpm {
        f.push(("rpm", opt_str(v)));
    }
    if let Some(v) = p.quota_limit {
        f.push(("quota_limit", opt_str(v)));
    }
    if let Some(v) = &p.group {
        f.push(("group", v.clone().unwrap_or_default()));
    }
    f.extend(policy_patch_fields(&p.policy));
    f
}

pub fn record(h: &HashMap<String, String>) -> StoreResult<KeyRecord> {
    let get = |k: &str| h.get(k).filter(|v| !v.is_empty());
    let num = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
    let bad = || StoreError::internal("malformed key record");
    Ok(KeyRecord {
        id: get("id").ok_or_else(bad)?.clone(),
        hash: get("hash").ok_or_else(bad)?.clone(),
        display: get("display").cloned().unwrap_or_default(),
        name: h.get("name").cloned().unwrap_or_default(),
        status: get("status")
            .and_then(|s| KeyStatus::parse(s))
            .unwrap_or(KeyStatus::Disabled),
        created_at: num("created_at").unwrap_or(0),
        expires_at: num("expires_at"),
        models: get("models")
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default(),
        allow_ips: get("allow_ips")
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default(),
        rpm: get("rpm").and_then(|v| v.parse().ok()),
        quota_limit: num("quota_limit"),
        quota_used: num("quota_used").unwrap_or(0),
        group: get("group").cloned(),
        policy: policy(h),
    })
}

fn internal(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::internal_error(e)
}

/// The usage records of stream entries, newest first, at most `limit`. An entry holds
/// one record (`r`, written by a request's own settle) or a batch of them (`b`, a JSON
/// array in the order they were settled, written by a lease's flush).
pub fn usage_entries(
    entries: Vec<(String, Vec<(String, String)>)>,
    limit: usize,
) -> StoreResult<Vec<UsageRecord>> {
    let mut out = Vec::new();
    for (_, fields) in entries {
        for (name, text) in fields.into_iter().rev() {
            match name.as_str() {
                "r" => out.push(serde_json::from_str(&text).map_err(internal)?),
                "b" => {
                    let batch: Vec<UsageRecord> = serde_json::from_str(&text).map_err(internal)?;
                    out.extend(batch.into_iter().rev());
                }
                _ => {}
            }
            if out.len() >= limit {
                out.truncate(limit);
                return Ok(out);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_and_group_round_trip_through_fields() {
        let p = Policy {
            budget_day: Some(5),
            budget_week: None,
            budget_month: Some(900),
            tpm: Some(1000),
            max_concurrent: Some(2),
            time_zone: Some("Europe/Paris".into()),
            price_multiplier_ppm: Some(1_250_000),
        };
        let g = GroupRecord {
            id: "team".into(),
            name: "Team".into(),
            status: KeyStatus::Enabled,
            created_at: 7,
            quota_limit: Some(10),
            quota_used: 3,
            policy: p.clone(),
        };
        let h: HashMap<String, String> = group_fields(&g)
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(group_record(&h).unwrap(), g);
        let patch = PolicyPatch {
            budget_day: Some(None),
            tpm: Some(Some(5)),
            ..Default::default()
        };
        assert_eq!(
            policy_patch_fields(&patch),
            vec![("budget_day", String::new()), ("tpm", "5".to_string())]
        );
    }

    fn rec(id: &str) -> String {
        format!(
            r#"{{"request_id":"{id}","time_ms":1,"key_id":"k","endpoint":"/v1/chat/completions","model":"m","channel":"c","prompt_tokens":1,"completion_tokens":1,"cached_tokens":0,"cost":1,"status":200,"latency_ms":1,"stream":false}}"#
        )
    }

    #[test]
    fn entries_of_one_record_and_batches_read_newest_first() {
        let entries = vec![
            (
                "3-0".to_string(),
                vec![("b".to_string(), format!("[{},{}]", rec("c"), rec("d")))],
            ),
            ("2-0".to_string(), vec![("r".to_string(), rec("b"))]),
            ("1-0".to_string(), vec![("r".to_string(), rec("a"))]),
        ];
        let ids = |v: Vec<UsageRecord>| v.into_iter().map(|u| u.request_id).collect::<Vec<_>>();
        assert_eq!(
            ids(usage_entries(entries.clone(), 10).unwrap()),
            ["d", "c", "b", "a"]
        );
        assert_eq!(ids(usage_entries(entries, 3).unwrap()), ["d", "c", "b"]);
    }
}
