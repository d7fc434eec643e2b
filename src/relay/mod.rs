//! The relay leg: read and check the request, then run it through the metered exchange
//! ([`exchange`]): reserve its worst case, send it to a channel in that channel's
//! protocol, return the answer in the client's protocol (streaming as it arrives), and
//! settle exactly once.
//!
//! Order of checks (each fails before anything later happens): body size (413) →
//! syntax and required fields (400) → model whitelist (403) → model served (404) →
//! model priced (403) → a chained conversation that cannot be read or does not fit
//! (400, [`stored`]) → inputs a capped key cannot use (400) → reservation (403 when the
//! quota cannot cover it).

pub(crate) mod body;
pub mod exchange;
mod head;
mod kept;
pub mod media;
pub mod meter;
pub mod stored;
pub mod tokens;
mod unmeasured;
pub(crate) mod upstream;

use crate::auth::AuthKey;
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::protocol::Protocol;
use crate::request::{Answer, Ctx};
use pingora::proxy::Session;
use serde_json::Value;
use tokens::{Asked, Body, TokenRequest};

/// Largest upstream error body read (for the operator's log only).
/// A relayed endpoint: the client's protocol, and where the model name comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    pub protocol: Protocol,
    /// Generate-content paths carry the model in the path.
    pub path_model: Option<String>,
    /// `:streamGenerateContent`: streaming is chosen by the path.
    pub path_stream: bool,
    /// `/v1/responses/compact` (spec 4.5).
    pub compact: bool,
}

pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

pub async fn handle(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &AuthKey,
    route: &Relay,
) -> Result<Answer, GatewayError> {
    if route.protocol == Protocol::Messages && messages_version(session).is_none() {
        // spec 4.17, 9: the messages protocol requires its version header.
        return Err(GatewayError::bad_request(
            Some("msg-version"),
            "The `msg-version` (or `anthropic-version`) header is required.",
        ));
    }
    let raw = body::read(session, &gw.config.limits).await?;
    let mut parsed = Body::parse(route.protocol, &raw)?;
    let model = match &route.path_model {
        Some(m) => m.clone(),
        None => parsed
            .member("model")
            .as_ref()
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                GatewayError::bad_request(Some("model"), "`model` is required and must be a string")
            })?
            .to_string(),
    };
    let stream = route.path_stream
        || parsed
            .member("stream")
            .as_ref()
            .and_then(Value::as_bool)
            .unwrap_or(false);
    {
        let rec = ctx.record_mut();
        rec.model = model.clone();
        rec.stream = stream;
    }
    key.check_model(&model)?;
    let candidates = gw.router.chat_candidates(&model);
    if candidates.is_empty() {
        return Err(GatewayError::ModelNotFound(model));
    }
    let price = gw
        .config
        .price_over(&model, &candidates)
        .filter(|p| p.per_token())
        .ok_or_else(|| GatewayError::ModelNotPriced(model.clone()))?;
    // A chained responses request goes on as the whole conversation, measured as such.
    let prepared = stored::prepare(gw, key, route, &mut parsed, &price).await?;
    let raw: &[u8] = prepared.body.as_deref().unwrap_or(&raw);
    unmeasured::check(raw, key.rec.quota_limit.is_some())?;
    let asked = Asked {
        model,
        stream,
        client_sse: client_sse(session),
    };
    let request = TokenRequest::new(route, asked, raw, parsed, price)
        .with_channel_prices(gw.config.clone())
        .keeping(prepared.keep);
    // Borrowed, not copied: nothing writes to the session until the answer is sent.
    let headers = &session.req_header().headers;
    exchange::run(gw, ctx, key, headers, &candidates, request).await
}

/// The messages protocol's version header, under its neutral or its real name.
pub fn messages_version(session: &Session) -> Option<&str> {
    ["msg-version", "anthropic-version"]
        .iter()
        .find_map(|n| session.get_header(*n).and_then(|v| v.to_str().ok()))
}

/// Generate-content streams are server-sent events only with `alt=sse` (spec 4.18).
fn client_sse(session: &Session) -> bool {
    session
        .req_header()
        .uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"))
}
