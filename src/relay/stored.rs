//! Conversation state for the responses protocol (spec 4.4, 4.5): responses the gateway
//! stores, and `previous_response_id` served from them on every channel.
//!
//! Before the call ([`prepare`]): the chain the id names is read (only the key's own
//! responses), and the request goes on as if the client had sent the whole conversation
//! itself: the earlier turns' input and output items, in order, then the new input. So it
//! is measured, reserved and translated like any request, to whatever protocol the
//! channel speaks, and a capped key can use it. After the answer ([`keep`]): the response
//! object the client received, this turn's input items and the settled tokens are stored
//! under the gateway's own id (`resp_` and the request id), before the client reads
//! that the response is complete.
//!
//! Stored conversations are the tenants' data: none of it is logged, and another key's
//! id is answered exactly like an unknown one.

use super::kept::{Keep, Kept};
use super::tokens::Body;
use super::Relay;
use crate::auth::AuthKey;
use crate::billing::Price;
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::protocol::responses::state::{self, ListQuery, Turn};
use crate::protocol::Protocol;
use crate::request::{Answer, Ctx};
use crate::store::responses::{ResponseStore, StoredResponse};
use serde_json::{Map, Value};

/// The response store, when storage is on and the backend keeps responses.
fn store(gw: &Gateway) -> Option<&dyn ResponseStore> {
    if !gw.config.responses.store {
        return None;
    }
    gw.store.responses()
}

/// A chained or stored request made ready: the client's body with the whole conversation
/// in `input` (written out again when it changed), and what to store afterwards.
pub struct Prepared {
    pub body: Option<Vec<u8>>,
    pub keep: Option<Keep>,
}

/// Resolves `previous_response_id` (400 `previous_response_not_found` when the key cannot
/// read it; 400 past the depth limit), applies `truncation`, checks the key's stored bytes
/// when the answer will be stored, and rewrites the body. Nothing for other protocols,
/// or when storage is off (the id is then refused as before, unless a native channel
/// takes it).
pub async fn prepare(
    gw: &Gateway,
    key: &AuthKey,
    route: &Relay,
    parsed: &mut Body<'_>,
    price: &Price,
) -> Result<Prepared, GatewayError> {
    let none = Prepared {
        body: None,
        keep: None,
    };
    if route.protocol != Protocol::Responses {
        return Ok(none);
    }
    let Some(rs) = store(gw) else {
        return Ok(none);
    };
    let Body::Full(Value::Object(obj)) = parsed else {
        return Ok(none);
    };
    let cfg = &gw.config.responses;
    let previous = match obj.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => {
            return Err(GatewayError::bad_request(
                Some("previous_response_id"),
                "`previous_response_id` must be a response id string.",
            ))
        }
    };
    let wants_store = !route.compact && obj.get("store").and_then(Value::as_bool) != Some(false);
    if previous.is_none() && !wants_store {
        return Ok(none);
    }
    let key_id = key.rec.id.as_str();
    let mut chain = Vec::new();
    let mut history = Vec::new();
    let mut chain_tokens = 0;
    if let Some(prev) = &previous {
        let not_found = || GatewayError::PreviousResponseNotFound(prev.clone());
        let head = rs
            .get_responses(key_id, std::slice::from_ref(prev))
            .await?
            .pop()
            .ok_or_else(not_found)?;
        if head.chain.len() + 2 > cfg.max_chain_depth {
            return Err(GatewayError::bad_request(
                Some("previous_response_id"),
                format!(
                    "The conversation is {} responses long, the most this gateway chains is {}; start a new one (or compact it with `/v1/responses/compact`).",
                    head.chain.len() + 1,
                    cfg.max_chain_depth
                ),
            ));
        }
        // Earlier turns deleted or expired meanwhile are left out; the rest stays in order.
        let mut turns = rs.get_responses(key_id, &head.chain).await?;
        chain = head.chain.clone();
        chain.push(head.id.clone());
        chain_tokens = head.tokens;
        turns.push(head);
        let replay: Vec<Turn<'_>> = turns
            .iter()
            .map(|t| Turn {
                input: &t.input,
                output: t.output(),
                native: t.native,
            })
            .collect();
        history = state::history(&replay);
    }
    if wants_store && rs.stored_bytes(key_id).await? >= cfg.max_stored_bytes_per_key {
        return Err(GatewayError::bad_request(
            Some("store"),
            format!(
                "This key's stored responses have reached the limit of {} bytes; delete some (`DELETE /v1/responses/{{id}}`), wait for them to expire, or send `store: false`.",
                cfg.max_stored_bytes_per_key
            ),
        ));
    }
    let input = state::input_items(obj.get("input"));
    if previous.is_some() {
        let mut all = history;
        let new_at = all.len();
        all.extend(input.iter().cloned());
        let all = fit(obj, all, new_at, chain_tokens, price)?;
        obj.insert("input".into(), Value::Array(all));
        obj.remove("previous_response_id");
    }
    let body = previous
        .is_some()
        .then(|| serde_json::to_vec(&*obj))
        .transpose()
        .map_err(|e| GatewayError::internal_from("writing the conversation into the request", e))?;
    let keep = wants_store.then(|| Keep {
        key_id: key_id.to_string(),
        chain,
        input,
        previous,
        ttl_secs: cfg.expire_after_secs,
    });
    Ok(Prepared { body, keep })
}

/// `truncation` against the model's `context_window` (a price option): `auto` drops the
/// oldest turns until the input fits, `disabled` (the default) refuses a conversation
/// that does not. The input's tokens are bounded by the stored chain's settled tokens
/// (`chain_tokens`) for the earlier turns and by size for the new input; each earlier
/// item's share is its share of the earlier turns' bytes.
fn fit(
    obj: &Map<String, Value>,
    items: Vec<Value>,
    new_at: usize,
    chain_tokens: u64,
    price: &Price,
) -> Result<Vec<Value>, GatewayError> {
    let Some(window) = price.context_window else {
        return Ok(items);
    };
    let auto = match obj.get("truncation") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "disabled" => false,
        Some(Value::String(s)) if s == "auto" => true,
        Some(_) => {
            return Err(GatewayError::bad_request(
                Some("truncation"),
                "`truncation` must be `auto` or `disabled`.",
            ))
        }
    };
    let size = |v: &Value| serde_json::to_vec(v).map_or(0, |b| b.len() as u64);
    let sizes: Vec<u64> = items.iter().map(size).collect();
    let earlier_bytes: u64 = sizes[..new_at].iter().sum::<u64>().max(1);
    let new_tokens: u64 = crate::billing::input_token_bound(
        &serde_json::to_vec(&items[new_at..]).unwrap_or_default(),
    );
    let tokens_of = |from: usize| -> u64 {
        let kept: u64 = sizes[from.min(new_at)..new_at].iter().sum();
        let earlier =
            (u128::from(chain_tokens) * u128::from(kept)).div_ceil(u128::from(earlier_bytes));
        (earlier as u64).saturating_add(new_tokens)
    };
    if tokens_of(0) <= window {
        return Ok(items);
    }
    let too_long = || {
        GatewayError::bad_request(
            Some("input"),
            format!(
                "The conversation (about {} tokens) does not fit the model's context window of {window} tokens. Send `truncation: \"auto\"` to drop the oldest turns, or start a new conversation.",
                tokens_of(0)
            ),
        )
    };
    if !auto {
        return Err(too_long());
    }
    let total = items.len();
    state::truncate(items, |rest| tokens_of(total - rest.len()) <= window).ok_or_else(too_long)
}

/// Stores a response once its answer is whole (before the client reads its last bytes).
/// A failure is logged without any of the conversation, and the answer still goes out:
/// the client learns of it when it chains.
pub async fn keep(gw: &Gateway, ctx: &Ctx, kept: Kept) {
    let Some(rs) = store(gw) else {
        return;
    };
    let Kept { response, ttl_secs } = kept;
    let bytes = serde_json::to_vec(&response).map_or(0, |b| b.len() as u64);
    if let Err(e) = rs.put_response(&response, bytes, ttl_secs).await {
        tracing::warn!(request_id = %ctx.request_id, error = %crate::store::chain(&e),
            "response not stored");
    }
}

async fn one(gw: &Gateway, key: &AuthKey, id: &str) -> Result<StoredResponse, GatewayError> {
    let not_found = || GatewayError::ResponseNotFound(id.to_string());
    let rs = store(gw).ok_or_else(not_found)?;
    rs.get_responses(&key.rec.id, &[id.to_string()])
        .await?
        .pop()
        .ok_or_else(not_found)
}

/// `GET /v1/responses/{id}`.
pub async fn retrieve(gw: &Gateway, key: &AuthKey, id: &str) -> Result<Answer, GatewayError> {
    let r = one(gw, key, id).await?;
    Ok(Answer::json(200, r.response.to_string().into_bytes()))
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(gw: &Gateway, key: &AuthKey, id: &str) -> Result<Answer, GatewayError> {
    let not_found = || GatewayError::ResponseNotFound(id.to_string());
    let rs = store(gw).ok_or_else(not_found)?;
    if !rs.delete_response(&key.rec.id, id).await? {
        return Err(not_found());
    }
    let body = serde_json::json!({"id": id, "object": "response", "deleted": true});
    Ok(Answer::json(200, body.to_string().into_bytes()))
}

/// `GET /v1/responses/{id}/input_items`.
pub async fn input_items(
    gw: &Gateway,
    key: &AuthKey,
    id: &str,
    query: Option<&str>,
) -> Result<Answer, GatewayError> {
    let q = ListQuery::parse(query)?;
    let r = one(gw, key, id).await?;
    let page = state::input_items_page(&r.input, &r.id, &q)?;
    Ok(Answer::json(200, page.to_string().into_bytes()))
}
