//! Endpoints answered by the gateway itself: model lists (spec 4.1, 4.2) and the
//! caller's own usage and log (spec 7.1).

use super::fields::{micros_to_usd, rfc3339};
use crate::auth::{credentials, AuthKey};
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::request::Answer;
use crate::store::UsageRecord;
use once_cell::sync::Lazy;
use serde_json::{json, Value};

/// Models have no creation time of their own; they are listed as created at start-up.
static STARTED: Lazy<i64> = Lazy::new(crate::ids::now_secs);

const LOG_DEFAULT: usize = 50;
const LOG_MAX: usize = 1000;

/// Which model-list format the request asks for (spec 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFormat {
    Default,
    Messages,
    Gemini,
}

pub fn list_format(headers: &http::HeaderMap, query: Option<&str>) -> ListFormat {
    let has = |n: &str| headers.contains_key(n);
    if has("x-api-key") && (has("msg-version") || has("anthropic-version")) {
        ListFormat::Messages
    } else if has("x-gen-api-key")
        || has("x-goog-api-key")
        || credentials::query_param(query, "key").is_some()
    {
        ListFormat::Gemini
    } else {
        ListFormat::Default
    }
}

fn visible<'a>(gw: &'a Gateway, key: &'a AuthKey) -> impl Iterator<Item = &'a str> + 'a {
    gw.router
        .models()
        .into_iter()
        .filter(|m| key.allows_model(m))
}

fn owner(gw: &Gateway, model: &str) -> &'static str {
    gw.router
        .candidates(model)
        .first()
        .map_or("model-gateway", |c| c.protocol.as_str())
}

fn gemini_model(id: &str) -> Value {
    json!({
        "name": format!("models/{id}"),
        "baseModelId": id,
        "version": "001",
        "displayName": id,
        "description": "",
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent"],
    })
}

pub fn models(gw: &Gateway, key: &AuthKey, format: ListFormat) -> Value {
    let ids: Vec<&str> = visible(gw, key).collect();
    match format {
        ListFormat::Default => json!({
            "object": "list",
            "data": ids.iter().map(|id| json!({
                "id": id, "object": "model", "created": *STARTED, "owned_by": owner(gw, id),
            })).collect::<Vec<_>>(),
        }),
        ListFormat::Messages => json!({
            "data": ids.iter().map(|id| json!({
                "type": "model", "id": id, "display_name": id, "created_at": rfc3339(*STARTED),
            })).collect::<Vec<_>>(),
            "has_more": false,
            "first_id": ids.first(),
            "last_id": ids.last(),
        }),
        ListFormat::Gemini => json!({
            "models": ids.iter().map(|id| gemini_model(id)).collect::<Vec<_>>(),
        }),
    }
}

pub fn serve_models(gw: &Gateway, key: &AuthKey, format: ListFormat) -> Answer {
    Answer::json(200, models(gw, key, format).to_string().into_bytes())
}

pub fn serve_gemini_model(gw: &Gateway, key: &AuthKey, name: &str) -> Result<Answer, GatewayError> {
    let id = name.strip_prefix("models/").unwrap_or(name);
    if !gw.router.serves(id) || !key.allows_model(id) {
        return Err(GatewayError::ModelNotFound(id.to_string()));
    }
    Ok(Answer::json(200, gemini_model(id).to_string().into_bytes()))
}

/// `GET /api/usage/token`: the caller's own key, read fresh from the store.
pub async fn serve_usage(gw: &Gateway, key: &AuthKey) -> Result<Answer, GatewayError> {
    let rec = gw
        .store
        .get_key(&key.rec.id)
        .await?
        .ok_or(GatewayError::UnknownKey)?;
    let available = rec.quota_limit.map(|l| (l - rec.quota_used).max(0));
    let body = json!({
        "object": "token_usage",
        "id": rec.id,
        "name": rec.name,
        "unlimited": rec.quota_limit.is_none(),
        "granted_usd": rec.quota_limit.map(micros_to_usd),
        "used_usd": micros_to_usd(rec.quota_used),
        "available_usd": available.map(micros_to_usd),
        "granted_micro_usd": rec.quota_limit,
        "used_micro_usd": rec.quota_used,
        "available_micro_usd": available,
        "model_limits_enabled": !rec.models.is_empty(),
        "model_limits": rec.models,
        "expires_at": rec.expires_at.map(rfc3339),
        "rpm": rec.rpm,
        "group": rec.group,
        "limits": super::policy::key_limits(gw.store.as_ref(), &gw.calendar, &rec).await?,
    });
    Ok(Answer::json(200, body.to_string().into_bytes()))
}

fn log_entry(r: &UsageRecord) -> Value {
    let mut v = json!({
        "request_id": r.request_id,
        "group": r.group,
        "created_at_ms": r.time_ms,
        "endpoint": r.endpoint,
        "model": r.model,
        "channel": r.channel,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cached_tokens": r.cached_tokens,
        "cost_usd": micros_to_usd(r.cost),
        "cost_micro_usd": r.cost,
        "cost_estimated": r.estimated,
        "overrun_micro_usd": r.overrun,
        "status": r.status,
        "latency_ms": r.latency_ms,
        "stream": r.stream,
    });
    if let Some(out) = v.as_object_mut() {
        super::fields::cost_fields(out, r);
    }
    v
}

/// `GET /api/log/token[?limit=N]`: the caller's latest records, newest first.
pub async fn serve_log(
    gw: &Gateway,
    key: &AuthKey,
    query: Option<&str>,
) -> Result<Answer, GatewayError> {
    let limit = match credentials::query_param(query, "limit") {
        None => LOG_DEFAULT,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=LOG_MAX).contains(n))
            .ok_or_else(|| {
                GatewayError::bad_request(Some("limit"), format!("`limit` must be 1 to {LOG_MAX}"))
            })?,
    };
    let recs = gw.store.recent_usage(&key.rec.id, limit).await?;
    let body = json!({"object": "list", "data": recs.iter().map(log_entry).collect::<Vec<_>>()});
    Ok(Answer::json(200, body.to_string().into_bytes()))
}
