//! The relay leg: read and check the request, reserve its worst-case cost, send it to a
//! channel in that channel's protocol, and return the answer in the client's protocol,
//! streaming as it arrives; then settle the real cost.
//!
//! Order of checks (each fails before anything later happens): body size (413) →
//! syntax and required fields (400) → model whitelist (403) → model served (404) →
//! model priced (403) → reservation (403 when the quota cannot cover it).

pub(crate) mod body;
pub mod media;
mod output_limit;
mod stream;
pub(crate) mod upstream;

use crate::billing::{Estimate, Price, ReservationGuard};
use crate::errors::{GatewayError, UpstreamFailure};
use crate::gateway::Gateway;
use crate::ids;
use crate::protocol::shallow::Shallow;
use crate::protocol::{self, Protocol, RequestOptions, ResponseContext, Usage};
use crate::proxy::ctx::respond;
use crate::proxy::route::Relay;
use crate::proxy::Ctx;
use crate::store::Micros;
use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;
use upstream::{Exchange, OpenError, Outgoing};

/// Largest upstream error body read (for the operator's log only).
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

pub async fn handle(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    route: &Relay,
) -> Result<(), GatewayError> {
    let key = ctx.key.clone().ok_or(GatewayError::Internal)?;
    if route.protocol == Protocol::Messages && messages_version(session).is_none() {
        // spec 4.17, 9: the messages protocol requires its version header.
        return Err(GatewayError::bad_request(
            Some("msg-version"),
            "The `msg-version` (or `anthropic-version`) header is required.",
        ));
    }
    let raw = body::read(session, gw.config.limits.max_body_bytes).await?;
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
        .prices
        .get(&model)
        .filter(|p| p.per_token())
        .ok_or_else(|| GatewayError::ModelNotPriced(model.clone()))?;

    let estimate = Estimate::new(price, &raw, parsed.requested_output(route.protocol));
    let mut guard = reserve(gw, &key.rec.id, &ctx.request_id, estimate.min, estimate.max).await?;
    if let Some(cap) = estimate.output_cap(price, guard.amount()) {
        let mut v = parsed.into_value()?;
        output_limit::cap(route.protocol, &mut v, cap);
        parsed = Body::Full(v);
    }

    let billing = Billing {
        price,
        fallback_input: raw.len() as u64 / 4,
    };
    let result = exchange(
        gw, session, ctx, route, &model, parsed, stream, &billing, &mut guard,
    )
    .await;
    // Success paths settled before their last byte; this releases every other path.
    let cost = ctx.record.as_ref().map_or(0, |r| r.cost);
    guard.settle(cost).await;
    result
}

/// A checked client body. Chat bodies are read one level deep ([`Shallow`]): relayed to a
/// chat upstream they are written out once, with only the model (and stream options)
/// changed, never parsed into a tree and serialized again. Other protocols, and chat
/// bodies bound for another protocol or whose output limit must be lowered, are parsed
/// whole.
enum Body<'a> {
    Full(Value),
    Shallow { raw: &'a [u8], top: Shallow<'a> },
}

impl<'a> Body<'a> {
    fn parse(client: Protocol, raw: &'a [u8]) -> Result<Body<'a>, GatewayError> {
        if client == Protocol::Chat {
            let top = Shallow::parse(raw)?;
            protocol::chat::validate_shallow(&top)?;
            return Ok(Body::Shallow { raw, top });
        }
        protocol::parse_request(client, raw)
            .map(Body::Full)
            .map_err(GatewayError::from)
    }

    /// A top-level member (small ones: the model, flags, limits).
    fn member(&self, name: &str) -> Option<Value> {
        match self {
            Body::Full(v) => v.get(name).cloned(),
            Body::Shallow { top, .. } => top.value(name),
        }
    }

    fn requested_output(&self, client: Protocol) -> Option<u64> {
        match self {
            Body::Full(v) => output_limit::requested(client, v),
            Body::Shallow { .. } => {
                let limits: serde_json::Map<String, Value> = output_limit::CHAT_FIELDS
                    .iter()
                    .filter_map(|f| self.member(f).map(|v| (f.to_string(), v)))
                    .collect();
                output_limit::requested(client, &Value::Object(limits))
            }
        }
    }

    fn into_value(self) -> Result<Value, GatewayError> {
        match self {
            Body::Full(v) => Ok(v),
            Body::Shallow { raw, .. } => {
                serde_json::from_slice(raw).map_err(|_| GatewayError::Internal)
            }
        }
    }

    /// The request for one channel; `last`: no later channel needs the body.
    fn for_upstream(
        &mut self,
        client: Protocol,
        upstream: Protocol,
        opts: &RequestOptions,
        last: bool,
    ) -> Result<protocol::UpstreamRequest, GatewayError> {
        let v = match self {
            Body::Shallow { top, .. } if client == upstream => {
                return Ok(protocol::chat::passthrough_shallow(top, opts));
            }
            Body::Shallow { raw, .. } => {
                serde_json::from_slice(raw).map_err(|_| GatewayError::Internal)?
            }
            Body::Full(v) if last => std::mem::take(v),
            Body::Full(v) => v.clone(),
        };
        protocol::translate_request(client, upstream, v, opts).map_err(GatewayError::from)
    }
}

/// Reserves `min..=max` of the key's quota for this request (the store grants what is
/// left, if at least `min`), or says why not.
pub(crate) async fn reserve(
    gw: &Gateway,
    key_id: &str,
    request_id: &str,
    min: Micros,
    max: Micros,
) -> Result<ReservationGuard, GatewayError> {
    let reservation = gw
        .store
        .reserve(
            key_id,
            request_id,
            min,
            max,
            ids::now_secs(),
            gw.config.limits.reservation_ttl_secs,
        )
        .await
        .map_err(|e| crate::api::store_error(&e))??;
    Ok(ReservationGuard::new(gw.store.clone(), reservation))
}

/// Settles the request's reservation and writes its usage record (from `ctx.record`, with
/// this status) in one store step; the `logging` phase then has nothing left to write.
pub(crate) async fn settle_logged(
    ctx: &mut Ctx,
    guard: &mut ReservationGuard,
    cost: Micros,
    status: u16,
) {
    match ctx.take_usage_record(status) {
        Some(u) => guard.settle_logged(cost, u).await,
        None => guard.settle(cost).await,
    };
}

/// An upstream's non-2xx answer: its text goes to the operator's log, the client gets
/// the status and a stable message (spec 7.2).
pub(crate) async fn refused(gw: &Gateway, ctx: &Ctx, mut ex: Exchange) -> GatewayError {
    let status = ex.status();
    let body = ex.body(ERROR_BODY_LIMIT).await.unwrap_or_default();
    tracing::warn!(
        request_id = %ctx.request_id, channel = %ex.channel.name, status,
        body = %gw.config.secrets.body(&body),
        "upstream error"
    );
    ex.finish(gw).await;
    GatewayError::Upstream(UpstreamFailure::Status(status))
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

/// What settles the bill when the upstream reports no usage: the prompt estimated at four
/// bytes a token (the output is unknown then and is not guessed).
struct Billing<'a> {
    price: &'a Price,
    fallback_input: u64,
}

impl Billing<'_> {
    fn cost(&self, usage: Option<Usage>) -> (Usage, i64) {
        let u = usage.unwrap_or(Usage {
            input_tokens: self.fallback_input,
            ..Usage::default()
        });
        (u, self.price.cost(&u))
    }
}

#[allow(clippy::too_many_arguments)]
async fn exchange(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    route: &Relay,
    model: &str,
    mut body: Body<'_>,
    stream: bool,
    billing: &Billing<'_>,
    guard: &mut ReservationGuard,
) -> Result<(), GatewayError> {
    let candidates = gw.router.chat_candidates(model);
    let last = candidates.len().saturating_sub(1);
    let client_headers = session.req_header().headers.clone();
    let mut failure = GatewayError::Upstream(UpstreamFailure::Connect);
    for (i, channel) in candidates.into_iter().enumerate() {
        // The body is translated per channel: siblings may speak other protocols.
        let upstream_protocol = channel.upstream_protocol(route.protocol);
        let req = body.for_upstream(
            route.protocol,
            upstream_protocol,
            &RequestOptions {
                upstream_model: channel.upstream_model(model),
                stream,
                default_max_tokens: billing.price.max_output_tokens,
                compact: route.compact,
            },
            i == last,
        )?;
        let out = Outgoing {
            method: "POST",
            path: &req.path,
            body: Bytes::from(req.body),
            content_type: "application/json",
            stream,
            client_headers: &client_headers,
        };
        ctx.record_mut().channel = channel.name.clone();
        let ex = match Exchange::open(gw, channel, &out).await {
            Ok(ex) => ex,
            Err(OpenError::NotSent(e)) => {
                failure = e;
                continue;
            }
            Err(OpenError::Sent(e)) => return Err(e),
        };
        if !(200..300).contains(&ex.status()) {
            return Err(refused(gw, ctx, ex).await);
        }
        let sse = !ex.content_type().contains("json");
        return if stream && sse {
            let sctx = stream::Plan {
                upstream: upstream_protocol,
                client: route.protocol,
                client_model: model,
                client_wants_usage: req.client_wants_usage,
                client_sse: client_sse(session),
            };
            stream::relay(gw, session, ctx, ex, sctx, billing, guard).await;
            Ok(())
        } else if stream {
            ex.finish(gw).await;
            Err(GatewayError::Upstream(UpstreamFailure::BadResponse))
        } else {
            whole(
                gw,
                session,
                ctx,
                ex,
                route,
                upstream_protocol,
                model,
                billing,
                guard,
            )
            .await
        };
    }
    Err(failure)
}

#[allow(clippy::too_many_arguments)]
async fn whole(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    mut ex: Exchange,
    route: &Relay,
    upstream: Protocol,
    model: &str,
    billing: &Billing<'_>,
    guard: &mut ReservationGuard,
) -> Result<(), GatewayError> {
    let body = ex.body(gw.config.limits.max_response_bytes).await?;
    ex.finish(gw).await;
    let rctx = ResponseContext {
        client_model: model,
        request_id: &ctx.request_id,
        created: ids::now_secs(),
        compact: route.compact,
    };
    let (out, usage) = protocol::translate_response(upstream, route.protocol, &body, &rctx).map_err(|e| {
        tracing::warn!(request_id = %ctx.request_id, error = ?e, "upstream response not understood");
        GatewayError::Upstream(UpstreamFailure::BadResponse)
    })?;
    let (usage, cost) = billing.cost(Some(usage));
    let rec = ctx.record_mut();
    rec.usage = usage;
    rec.cost = cost;
    // Settled before the answer leaves: a caller who reads its balance next sees the charge.
    settle_logged(ctx, guard, cost, 200).await;
    respond(session, ctx, 200, "application/json", Bytes::from(out)).await;
    Ok(())
}
