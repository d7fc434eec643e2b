//! Mock admin usage APIs, written from the vendors' API references:
//! - OpenAI, "Usage" → "Completions": `GET /v1/organization/usage/completions` with
//!   `start_time`/`end_time` (unix seconds, end exclusive), `bucket_width`, `group_by`,
//!   `limit`, `page`; `Authorization: Bearer <admin key>`; answers a `page` of `bucket`s
//!   of `organization.usage.completions.result`s with `has_more`/`next_page`.
//! - Anthropic, "Get Messages Usage Report": `GET /v1/organizations/usage_report/messages`
//!   with `starting_at`/`ending_at` (RFC 3339), `bucket_width`, `group_by[]`, `limit`,
//!   `page`; `x-api-key: <admin key>` and `anthropic-version`; answers `data` buckets of
//!   results with `has_more`/`next_page`.
//!
//! Each mock answers one bucket a page (fewer than `limit`, as the APIs may), so a range
//! of several days takes several pages; a wrong key gets the vendor's 401 error shape.
//! Buckets are set by the test and may be replaced between runs.
#![allow(dead_code)]

use crate::mock_upstream::{MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

pub const OPENAI_ADMIN_KEY: &str = "sk-admin-test-0123456789";
pub const ANTHROPIC_ADMIN_KEY: &str = "sk-ant-admin01-test-0123456789";

pub struct UsageApi {
    pub upstream: MockUpstream,
    buckets: Arc<Mutex<Vec<Value>>>,
}

impl UsageApi {
    pub fn base_url(&self) -> String {
        self.upstream.base_url()
    }

    /// Replaces the buckets the API reports.
    pub fn set(&self, buckets: Vec<Value>) {
        *self.buckets.lock().unwrap() = buckets;
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.upstream.requests()
    }
}

fn query(r: &Recorded) -> Vec<(String, String)> {
    let q = r.path.split_once('?').map_or("", |(_, q)| q);
    url::form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The page after `cursor`, and the cursor of the one after it.
fn page_of(q: &[(String, String)], buckets: &[Value]) -> Result<(Value, Option<String>), String> {
    let at = match param(q, "page") {
        None => 0,
        Some(c) => c
            .strip_prefix("page_")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or(format!("unknown page cursor {c}"))?,
    };
    let page = buckets.get(at).cloned().map_or(json!([]), |b| json!([b]));
    let next = (at + 1 < buckets.len()).then(|| format!("page_{}", at + 1));
    Ok((page, next))
}

fn bad_request(message: String) -> Reply {
    Reply::json(
        400,
        json!({"error": {"message": message, "type": "invalid_request_error"}}),
    )
}

/// OpenAI's completions usage; `buckets` as [`openai_bucket`] makes them.
pub async fn openai(buckets: Vec<Value>) -> UsageApi {
    let shared = Arc::new(Mutex::new(buckets));
    let b = shared.clone();
    let upstream = MockUpstream::start(move |r| {
        let path = r.path.split('?').next().unwrap_or("");
        if r.method != "GET" || path != "/v1/organization/usage/completions" {
            return Reply::json(404, json!({"error": {"message": "not found"}}));
        }
        if r.header("authorization") != Some(&format!("Bearer {OPENAI_ADMIN_KEY}")) {
            return Reply::json(
                401,
                json!({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                    "param": null, "code": "invalid_api_key"}}),
            );
        }
        let q = query(r);
        let (Some(start), Some(end)) = (
            param(&q, "start_time").and_then(|s| s.parse::<i64>().ok()),
            param(&q, "end_time").and_then(|s| s.parse::<i64>().ok()),
        ) else {
            return bad_request("start_time and end_time are required".into());
        };
        if param(&q, "bucket_width") != Some("1d") || param(&q, "group_by") != Some("model") {
            return bad_request(format!("expected daily buckets by model: {}", r.path));
        }
        let all: Vec<Value> = b
            .lock()
            .unwrap()
            .iter()
            .filter(|b| {
                let s = b["start_time"].as_i64().unwrap();
                start <= s && s < end
            })
            .cloned()
            .collect();
        match page_of(&q, &all) {
            Ok((data, next)) => Reply::json(
                200,
                json!({"object": "page", "data": data, "has_more": next.is_some(), "next_page": next}),
            ),
            Err(m) => bad_request(m),
        }
    })
    .await;
    UsageApi {
        upstream,
        buckets: shared,
    }
}

/// One day of OpenAI's report: `results` as [`openai_result`] makes them.
pub fn openai_bucket(day_start_unix: i64, results: Vec<Value>) -> Value {
    json!({"object": "bucket", "start_time": day_start_unix, "end_time": day_start_unix + 86_400,
        "results": results})
}

pub fn openai_result(model: &str, input: u64, cached: u64, output: u64, requests: u64) -> Value {
    json!({"object": "organization.usage.completions.result", "input_tokens": input,
        "output_tokens": output, "input_cached_tokens": cached, "input_audio_tokens": 0,
        "output_audio_tokens": 0, "num_model_requests": requests, "project_id": null,
        "user_id": null, "api_key_id": null, "model": model, "batch": null})
}

fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).unwrap().to_string()
}

/// Anthropic's messages usage report; `buckets` as [`anthropic_bucket`] makes them.
pub async fn anthropic(buckets: Vec<Value>) -> UsageApi {
    let shared = Arc::new(Mutex::new(buckets));
    let b = shared.clone();
    let upstream = MockUpstream::start(move |r| {
        let path = r.path.split('?').next().unwrap_or("");
        if r.method != "GET" || path != "/v1/organizations/usage_report/messages" {
            return Reply::json(404, json!({"type": "error", "error": {"type": "not_found_error", "message": "Not found"}}));
        }
        if r.header("x-api-key") != Some(ANTHROPIC_ADMIN_KEY) {
            return Reply::json(
                401,
                json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
            );
        }
        if r.header("anthropic-version").is_none() {
            return bad_request("anthropic-version header is required".into());
        }
        let q = query(r);
        let ts = |name| {
            param(&q, name).and_then(|s| s.parse::<jiff::Timestamp>().ok()).map(|t| t.as_second())
        };
        let (Some(start), Some(end)) = (ts("starting_at"), ts("ending_at")) else {
            return bad_request("starting_at and ending_at are RFC 3339 times".into());
        };
        if param(&q, "bucket_width") != Some("1d") || param(&q, "group_by[]") != Some("model") {
            return bad_request(format!("expected daily buckets by model: {}", r.path));
        }
        let all: Vec<Value> = b
            .lock()
            .unwrap()
            .iter()
            .filter(|b| {
                let s = b["starting_at"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
                let e = b["ending_at"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
                start <= s.as_second() && e.as_second() <= end
            })
            .cloned()
            .collect();
        match page_of(&q, &all) {
            Ok((data, next)) => Reply::json(
                200,
                json!({"data": data, "has_more": next.is_some(), "next_page": next}),
            ),
            Err(m) => bad_request(m),
        }
    })
    .await;
    UsageApi {
        upstream,
        buckets: shared,
    }
}

/// One day of Anthropic's report: `results` as [`anthropic_result`] makes them.
pub fn anthropic_bucket(day_start_unix: i64, results: Vec<Value>) -> Value {
    json!({"starting_at": rfc3339(day_start_unix), "ending_at": rfc3339(day_start_unix + 86_400),
        "results": results})
}

pub fn anthropic_result(
    model: &str,
    uncached: u64,
    cache_read: u64,
    cache_5m: u64,
    cache_1h: u64,
    output: u64,
) -> Value {
    json!({"uncached_input_tokens": uncached, "cache_read_input_tokens": cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": cache_5m, "ephemeral_1h_input_tokens": cache_1h},
        "output_tokens": output, "server_tool_use": {"web_search_requests": 0},
        "api_key_id": null, "workspace_id": null, "model": model, "service_tier": "standard",
        "context_window": "0-200k"})
}
