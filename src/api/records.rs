//! `GET /admin/usage` (the latest usage records, filtered) and `GET /admin/usage/{id}`
//! (the record of one request, by the id every response and error message carries:
//! spec 7, "the ID can be found in the console").

use super::fields::micros_to_usd;
use super::params::Answer;
use super::params::{Params, FILTERS};
use crate::gateway::Gateway;
use crate::store::usage_query::Reader;
use crate::store::{KeyRecord, UsageRecord};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use std::collections::HashMap;

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

/// Every field of a record, money in USD and in micro-USD, with the key's name beside its
/// id (a deleted key's name is gone: `null`).
pub fn view(r: &UsageRecord, keys: &HashMap<String, KeyRecord>) -> Value {
    let key = keys.get(&r.key_id);
    let mut v = json!({
        "object": "usage_record",
        "request_id": r.request_id,
        "created_at": DateTime::<Utc>::from_timestamp_millis(r.time_ms)
            .unwrap_or_default()
            .to_rfc3339_opts(SecondsFormat::Millis, true),
        "created_at_ms": r.time_ms,
        "key_id": r.key_id,
        "key_name": key.map(|k| k.name.as_str()),
        "key_display": key.map(|k| k.display.as_str()),
        "endpoint": r.endpoint,
        "model": r.model,
        "channel": r.channel,
        "status": r.status,
        "stream": r.stream,
        "latency_ms": r.latency_ms,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cached_tokens": r.cached_tokens,
        "cost_usd": micros_to_usd(r.cost),
        "cost_micro_usd": r.cost,
        "cost_estimated": r.estimated,
        "overrun_usd": micros_to_usd(r.overrun),
        "overrun_micro_usd": r.overrun,
    });
    if let Some(out) = v.as_object_mut() {
        super::fields::cost_fields(out, r);
    }
    v
}

async fn key_index(
    gw: &Gateway,
) -> Result<HashMap<String, KeyRecord>, crate::errors::GatewayError> {
    let keys = gw.store.list_keys().await?;
    Ok(keys.into_iter().map(|k| (k.id.clone(), k)).collect())
}

/// `GET /admin/usage?key=&group=&model=&status=&from=&to=&limit=`: newest written first.
pub async fn list(gw: &Gateway, query: Option<&str>) -> Answer {
    let mut known = FILTERS.to_vec();
    known.push("limit");
    let p = Params::parse(query, &known)?;
    let filter = p.filter()?;
    let limit = p.int("limit", 1..=MAX_LIMIT, DEFAULT_LIMIT)? as usize;
    let reader = Reader::of(gw.store.as_ref());
    let recs = reader.get().find_usage(&filter, limit).await?;
    let keys = key_index(gw).await?;
    Ok((
        200,
        json!({
            "object": "list",
            "data": recs.iter().map(|r| view(r, &keys)).collect::<Vec<_>>(),
            "limit": limit,
        }),
    ))
}

/// Request ids are the gateway's own (28 hex digits); anything printable and short is
/// looked up, so an id from an older format is still found.
fn plausible(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `GET /admin/usage/{request_id}`.
pub async fn lookup(gw: &Gateway, id: &str, request_id: &str) -> Answer {
    if !plausible(id) {
        return Err(crate::errors::GatewayError::bad_request(
            Some("request_id"),
            "A request id is letters, digits, `-` and `_`, at most 128 of them.",
        ));
    }
    let reader = Reader::of(gw.store.as_ref());
    match reader.get().usage_by_request(id).await? {
        Some(r) => Ok((200, view(&r, &key_index(gw).await?))),
        None => Ok((
            404,
            json!({"error": {
                "message": format!(
                    "No usage record has the request id `{id}`. Requests refused before their key \
                     was known (a missing or unknown key) leave none, and each key keeps only its \
                     latest records. (request id: {request_id})"
                ),
                "type": "gateway_error",
                "param": "request_id",
                "code": "usage_record_not_found",
            }}),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_before_any_lookup() {
        assert!(plausible("0194c6d2a1b2c3d4e5f6a7b8c9d0"));
        assert!(plausible("task_abc-1"));
        assert!(!plausible(""));
        assert!(!plausible("a b"));
        assert!(!plausible(&"a".repeat(129)));
    }
}
