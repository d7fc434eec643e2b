//! `GET /admin/spend`: cost, tokens and requests in hour or day buckets, one series per
//! model, channel or key, for one key or all of them. The store sums
//! ([`crate::store::usage_query`]); this shapes the sums for a chart: every bucket of the
//! range is present (zero when nothing happened), series are ordered by cost.

use super::fields::{micros_to_usd, rfc3339};
use super::params::Answer;
use super::params::{Params, FILTERS};
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::ids;
use crate::store::usage_query::{GroupBy, Reader, Spend, SpendQuery, Totals};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Buckets one answer may hold (about 83 days of hours, or 5 years of days).
const MAX_BUCKETS: i64 = 2_000;

fn totals_json(t: &Totals) -> Value {
    json!({
        "requests": t.requests,
        "errors": t.errors,
        "cost_usd": micros_to_usd(t.cost),
        "overrun_usd": micros_to_usd(t.overrun),
        "estimated": t.estimated,
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "cached_tokens": t.cached_tokens,
    })
}

fn add(into: &mut Totals, t: &Totals) {
    into.requests += t.requests;
    into.errors += t.errors;
    into.cost += t.cost;
    into.overrun += t.overrun;
    into.estimated += t.estimated;
    into.prompt_tokens += t.prompt_tokens;
    into.completion_tokens += t.completion_tokens;
    into.cached_tokens += t.cached_tokens;
}

/// The chart's shape: `buckets` (start times, unix ms) and, per group, one value per
/// bucket for each measure.
pub fn shape(q: &SpendQuery, from: i64, to: i64, s: &Spend) -> Value {
    let starts: Vec<i64> = {
        let mut v = Vec::new();
        let mut t = q.bucket_of(from);
        while t < to {
            v.push(t);
            t += q.bucket_ms;
        }
        v
    };
    let mut per_group: BTreeMap<&str, Totals> = BTreeMap::new();
    for groups in s.buckets.values() {
        for (g, t) in groups {
            add(per_group.entry(g.as_str()).or_default(), t);
        }
    }
    let mut order: Vec<(&str, &Totals)> = per_group.iter().map(|(g, t)| (*g, t)).collect();
    order.sort_by(|a, b| b.1.cost.cmp(&a.1.cost).then(a.0.cmp(b.0)));
    let zero = Totals::default();
    let series: Vec<Value> = order
        .iter()
        .map(|(g, _)| {
            let at = |start: &i64| {
                s.buckets
                    .get(start)
                    .and_then(|m| m.get(*g))
                    .unwrap_or(&zero)
            };
            let col =
                |f: &dyn Fn(&Totals) -> Value| starts.iter().map(|b| f(at(b))).collect::<Vec<_>>();
            json!({
                "name": g,
                "cost_usd": col(&|t| json!(micros_to_usd(t.cost))),
                "tokens": col(&|t| json!(t.prompt_tokens + t.completion_tokens)),
                "prompt_tokens": col(&|t| json!(t.prompt_tokens)),
                "completion_tokens": col(&|t| json!(t.completion_tokens)),
                "requests": col(&|t| json!(t.requests)),
                "errors": col(&|t| json!(t.errors)),
            })
        })
        .collect();
    let mut all = Totals::default();
    for (_, t) in &order {
        add(&mut all, t);
    }
    json!({
        "buckets": starts,
        "series": series,
        "groups": order
            .iter()
            .map(|(g, t)| {
                let mut v = totals_json(t);
                v["name"] = json!(g);
                v
            })
            .collect::<Vec<_>>(),
        "totals": totals_json(&all),
        "scanned": s.scanned,
        "truncated": s.truncated,
    })
}

/// `GET /admin/spend?bucket=hour|day&group_by=model|channel|key|group&key=&group=&model=&status=&from=&to=&utc_offset_minutes=`.
pub async fn get(gw: &Gateway, query: Option<&str>) -> Answer {
    let mut known = FILTERS.to_vec();
    known.extend(["bucket", "group_by", "utc_offset_minutes"]);
    let p = Params::parse(query, &known)?;
    let (bucket, bucket_ms, span) = match p.get("bucket").unwrap_or("hour") {
        "hour" => ("hour", HOUR_MS, DAY_MS),
        "day" => ("day", DAY_MS, 30 * DAY_MS),
        _ => {
            return Err(GatewayError::bad_request(
                Some("bucket"),
                "`bucket` must be `hour` or `day`.",
            ))
        }
    };
    let group_by = match p.get("group_by") {
        None => GroupBy::Model,
        Some(g) => GroupBy::parse(g).ok_or_else(|| {
            GatewayError::bad_request(
                Some("group_by"),
                "`group_by` must be `model`, `channel`, `key` or `group`.",
            )
        })?,
    };
    let offset_min = p.int("utc_offset_minutes", -1440..=1440, 0)?;
    let mut filter = p.filter()?;
    let to = filter.to_ms.unwrap_or_else(ids::now_ms);
    let from = filter.from_ms.unwrap_or(to - span);
    if from >= to {
        return Err(GatewayError::bad_request(
            Some("from"),
            "`from` must be earlier than `to`.",
        ));
    }
    if (to - from) / bucket_ms > MAX_BUCKETS {
        return Err(GatewayError::bad_request(
            Some("from"),
            format!("At most {MAX_BUCKETS} buckets: narrow the range or use `bucket=day`."),
        ));
    }
    filter.from_ms = Some(from);
    filter.to_ms = Some(to);
    let q = SpendQuery {
        filter,
        bucket_ms,
        offset_ms: offset_min * 60_000,
        group_by,
    };
    let reader = Reader::of(gw.store.as_ref());
    let s = reader.get().spend(&q).await?;
    let mut v = shape(&q, from, to, &s);
    v["object"] = json!("spend");
    v["bucket"] = json!(bucket);
    v["group_by"] = json!(p.get("group_by").unwrap_or("model"));
    v["from"] = json!(rfc3339(from.div_euclid(1000)));
    v["to"] = json!(rfc3339(to.div_euclid(1000)));
    v["key"] = json!(q.filter.key_id);
    v["utc_offset_minutes"] = json!(offset_min);
    Ok((200, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::usage_query::UsageFilter;

    #[test]
    fn every_bucket_of_the_range_is_drawn_and_series_go_by_cost() {
        let q = SpendQuery {
            filter: UsageFilter::default(),
            bucket_ms: 10,
            offset_ms: 0,
            group_by: GroupBy::Model,
        };
        let mut s = Spend::default();
        let cheap = Totals {
            requests: 1,
            cost: 1,
            ..Default::default()
        };
        let dear = Totals {
            requests: 2,
            cost: 5,
            prompt_tokens: 3,
            completion_tokens: 4,
            ..Default::default()
        };
        s.buckets.entry(20).or_default().insert("a".into(), cheap);
        s.buckets.entry(30).or_default().insert("b".into(), dear);
        let v = shape(&q, 15, 45, &s);
        assert_eq!(v["buckets"], json!([10, 20, 30, 40]));
        assert_eq!(v["series"][0]["name"], "b");
        assert_eq!(v["series"][0]["tokens"], json!([0, 0, 7, 0]));
        assert_eq!(v["series"][1]["requests"], json!([0, 1, 0, 0]));
        assert_eq!(v["totals"]["requests"], 3);
        assert_eq!(v["groups"][0]["cost_usd"], json!(0.000005));
    }
}
