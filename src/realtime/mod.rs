//! `GET /v1/realtime` (spec 4.20): a WebSocket relayed both ways. The key may come in
//! the `Sec-WebSocket-Protocol` form browsers use (spec 5); the model is whitelisted and
//! priced before the upgrade; the session's `response.done` usage events, read from the
//! upstream's frames as they pass, are billed.
//!
//! Order of checks, each before anything later happens: the WebSocket handshake (400) →
//! `model` in the query (400) → whitelist (403) → an `openai` channel serving the model
//! (404) → a price (403) → the first reservation (403 when the key cannot afford its
//! minimum). The upstream gets its own path, model name, host and key, and neither the
//! client's credentials nor its key subprotocol; no `Sec-WebSocket-Extensions` is
//! offered, so no compression is negotiated and every frame stays readable. An upstream
//! that refuses the upgrade gets the client a sanitized error of the same class
//! (spec 7.2) and costs nothing.
//!
//! # Where the relay runs
//!
//! Inside `request_filter`, like the HTTP relay (README, "Why the relay runs inside
//! `request_filter`"): the handshake goes out on a fresh connection from Pingora's
//! connector, the `101` comes back to the client, then one loop moves the bytes both
//! ways ([`link::pump`]). Pingora's own upgrade path is not used: in 0.9 it may tear the
//! tunnel down right after the `101` when the upstream answers before the handshake's
//! empty request body was handled (cloudflare/pingora#946), and its synchronous body
//! filters could not wait for the quota store.
//!
//! # Money
//!
//! A session cannot know its cost in advance: each response bills the conversation so
//! far. So it holds reservations and takes more as it spends ([`billing::Meter`]):
//! - At the upgrade it reserves one block: the price's `max_output_tokens` of output plus
//!   [`billing::INPUT_ALLOWANCE_TOKENS`] of input (or what is left under the cap, if at
//!   least the floor a chat request needs).
//! - After each `response.done`, usage is added and the cost recomputed on the running
//!   total with [`crate::billing::Price::cost`]. When the unspent reservation no longer
//!   covers what the next response may cost (a block, or twice the largest response so
//!   far), an extension is reserved and awaited right there, before anything more moves
//!   either way. Its minimum is what keeps the floor unspent past the cost, any overrun
//!   included, so a grant always pays for what was already spent.
//! - A refused extension ends the session at once: the client gets the bytes up to that
//!   `response.done`, then a close frame (1008 `quota exhausted`; 1008 `key no longer
//!   active` when the key was disabled, expired or deleted meanwhile; 1011 when the
//!   store could not be asked and the session no longer holds the floor); the upstream
//!   gets a close frame and its connection is shut.
//! - When the session ends, whichever way, every reservation is settled before the
//!   client's connection is closed, so its spend is visible as soon as it sees the end.
//!
//! Guarantee, precisely:
//! 1. The key is never charged past its cap: every reservation was granted atomically
//!    by the store within the cap, and each is settled with its share of the cost, in
//!    order and never above its amount.
//! 2. At most the overrun of one response goes unbilled. After every response the
//!    session holds its cost plus at least the floor, or it ends before the client's
//!    next byte is relayed. So only a response that outgrows the headroom it started
//!    with can cost more than the reservations; the extension after it covers the
//!    overrun, or is refused and the session ends with that response.
//! 3. Responses run one at a time on a conversation. Work the client requested before
//!    that `response.done` (an out-of-band response running alongside, one started by
//!    server-side turn detection from audio already relayed) is cut when the session
//!    ends; each such response counts as one more response in (2).
//!
//! What is not billed here: transcription of the input audio (reported in other events
//! and priced by another model).

mod billing;
pub mod frames;
mod handshake;
mod link;
mod upstream;

pub use link::Link;

use crate::auth::credentials::query_param;
use crate::auth::AuthKey;
use crate::billing::Price;
use crate::channels::{Channel, ChannelProtocol, ErrorKind};
use crate::errors::{GatewayError, UpstreamFailure};
use crate::gateway::Gateway;
use crate::protocol::Invalid;
use crate::relay::ERROR_BODY_LIMIT;
use crate::request::{Answer, Ctx, LiveAnswer};
use async_trait::async_trait;
use billing::{Account, Meter};
use pingora::http::ResponseHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::proxy::Session;
use pingora::{Error, ErrorType};
use std::sync::Arc;

/// `request_filter` for `GET /v1/realtime`: the checks, the first block's reservation
/// and the upstream's upgrade. An `Err` is answered by the caller (nothing was sent to
/// the client yet, and the reservation is released); the session itself is the
/// [`Answer::Live`] the proxy then runs.
pub async fn relay(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &Arc<AuthKey>,
    query: Option<&str>,
) -> Result<Answer, GatewayError> {
    let mut link = begin(gw, session, ctx, key, query).await?;
    match connect(gw, session, ctx, &link, query).await {
        Ok((http, switch)) => Ok(Answer::Live(Box::new(Upgraded { link, http, switch }))),
        Err(e) => {
            // Nothing was used: the reservation is released.
            settle(ctx, &mut link).await;
            Err(e)
        }
    }
}

/// Checks the handshake and the model, and reserves the first block.
async fn begin(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &Arc<AuthKey>,
    query: Option<&str>,
) -> Result<Link, GatewayError> {
    handshake::check_upgrade(&session.req_header().headers)?;
    handshake::check_version(session.req_header().version)?;
    let model = query_param(query, "model").ok_or_else(|| {
        GatewayError::from(Invalid {
            param: Some("model".into()),
            message: "The `model` query parameter is required.".into(),
        })
    })?;
    {
        let rec = ctx.record_mut();
        rec.model = model.clone();
        rec.stream = true;
    }
    key.check_model(&model)?;
    let (channel, price) = channel_for(gw, &model)?;
    let meter = reserve_first_block(gw, ctx, key, price).await?;
    ctx.record_mut().channel = channel.name.clone();
    // Pingora ends a session silent both ways for 60 s (its client read timeout, restarted
    // by traffic either way); a realtime user may think longer. The channel's read
    // timeout, which already bounds the upstream side, becomes the idle limit.
    session.set_read_timeout(Some(channel.read_timeout));
    session.set_write_timeout(Some(channel.read_timeout));
    Ok(Link::new(model, channel, meter))
}

/// The channel a session of `model` goes to, and its per-token price there. Only an
/// OpenAI-style upstream speaks this protocol; the first whose circuit admits a request
/// now is used (a session is one long request: it is not moved later).
fn channel_for(gw: &Gateway, model: &str) -> Result<(Arc<Channel>, Price), GatewayError> {
    let speakers: Vec<_> = gw
        .router
        .candidates(model)
        .into_iter()
        .filter(|c| c.protocol == ChannelProtocol::OpenAi)
        .collect();
    if speakers.is_empty() {
        return Err(GatewayError::ModelNotFound(model.to_string()));
    }
    let channel = speakers
        .into_iter()
        .find(|c| c.admit())
        .ok_or(GatewayError::Upstream(UpstreamFailure::Connect))?;
    let price: Price = gw
        .config
        .channel_price(&channel.name, model)
        .filter(|p| p.per_token())
        .cloned()
        .ok_or_else(|| GatewayError::ModelNotPriced(model.to_string()))?;
    Ok((channel, price))
}

/// Reserves the session's first block as any request reserves, and hands the hold to
/// the session's meter, which takes the extensions in the same periods and group.
async fn reserve_first_block(
    gw: &Gateway,
    ctx: &Ctx,
    key: &Arc<AuthKey>,
    price: Price,
) -> Result<Meter, GatewayError> {
    let (min, max) = billing::first_block(&price);
    let ttl_secs = gw.config.limits.reservation_ttl_secs;
    let bounds = crate::relay::meter::Bounds {
        min,
        max,
        tokens: 0,
    };
    let mut held = crate::relay::exchange::hold(gw, key, &ctx.request_id, bounds, ttl_secs).await?;
    let multiplier = held.multiplier();
    let first = held
        .hand_over()
        .ok_or_else(|| GatewayError::internal("handing the realtime reservation over"))?;
    // Extensions ask in the key's money, as the first block did.
    let ask = gw.calendar.ask(
        &key.rec,
        key.group.as_ref(),
        multiplier.apply_micros(min),
        multiplier.apply_micros(max),
        0,
    );
    let account = Account {
        store: gw.store.clone(),
        key_id: key.rec.id.clone(),
        request_id: ctx.request_id.clone(),
        ttl_secs,
        ask,
    };
    Ok(Meter::new(price, multiplier, first, account))
}

/// Opens the upstream WebSocket; returns it with the client's `101`.
async fn connect(
    gw: &Gateway,
    session: &Session,
    ctx: &Ctx,
    link: &Link,
    query: Option<&str>,
) -> Result<(HttpSession, Box<ResponseHeader>), GatewayError> {
    let channel = link.channel.clone();
    let path = handshake::upstream_path(
        &channel.path_prefix,
        query,
        channel.upstream_model(&link.model),
    );
    let key = channel.keys.pick();
    let built =
        handshake::upstream_request(session.req_header(), &path, channel.authority(), key.secret);
    let req = built.map_err(|e| {
        let doing = format!(
            "building the realtime handshake for channel {}",
            channel.name
        );
        GatewayError::internal_from(doing, e)
    })?;
    let started = std::time::Instant::now();
    // The handshake's outcome is the channel's health, as an exchange's answer is.
    let mut http = upstream::open(gw, &channel, req).await.inspect_err(|e| {
        let kind = match e {
            GatewayError::Upstream(UpstreamFailure::Timeout) => ErrorKind::Timeout,
            GatewayError::Upstream(UpstreamFailure::BadResponse) => ErrorKind::BadResponse,
            _ => ErrorKind::Connect,
        };
        channel.health.failure(&channel.circuit, kind, None);
    })?;
    let status = upstream::status(&http);
    // 101 is the upgrade; a 2xx or 3xx is no WebSocket: a bad answer, not a success.
    let outcome = match status {
        101 => None,
        200..=399 => Some(ErrorKind::BadResponse),
        _ => ErrorKind::of_status(status),
    };
    match outcome {
        None => channel.health.success(started.elapsed()),
        Some(kind) => {
            channel
                .health
                .failure(&channel.circuit, kind, Some(started.elapsed()));
            if kind == ErrorKind::Auth {
                channel.keys.set_aside(key.index, status);
            }
        }
    }
    if !upstream::upgraded(&mut http) {
        let body = upstream::refusal_body(&mut http, ERROR_BODY_LIMIT).await;
        tracing::warn!(
            request_id = %ctx.request_id, channel = %channel.name, status,
            body = %gw.config.secrets.body(&body),
            "realtime upstream refused the upgrade"
        );
        http.shutdown().await;
        return Err(upstream::refused(status));
    }
    let switch = match http.response_header() {
        Some(up) => handshake::client_switch(up, &ctx.request_id),
        None => Error::e_explain(ErrorType::InternalError, "upgraded without a header"),
    };
    match switch {
        Ok(s) => Ok((http, Box::new(s))),
        Err(e) => {
            http.shutdown().await;
            let doing = format!("building the client's 101 from channel {}", channel.name);
            Err(GatewayError::internal_from(doing, e))
        }
    }
}

/// An upgraded session: the client's `101`, then frames both ways until either side
/// ends, then the settlement.
struct Upgraded {
    link: Link,
    http: HttpSession,
    switch: Box<ResponseHeader>,
}

#[async_trait]
impl LiveAnswer for Upgraded {
    async fn send(self: Box<Self>, gw: &Gateway, session: &mut Session, ctx: &mut Ctx) {
        let Upgraded {
            mut link,
            mut http,
            mut switch,
        } = *self;
        ctx.limits().write(&mut switch);
        if let Err(e) = session.write_response_header(switch, false).await {
            tracing::debug!(error = %e, "realtime client gone before the 101");
            http.shutdown().await;
            settle(ctx, &mut link).await;
            return;
        }
        ctx.status = 101;
        let end = link::pump(session, &mut http, &mut link, &gw.cut).await;
        let (down, up) = link.frames();
        tracing::debug!(request_id = %ctx.request_id, ?end, down, up, "realtime session ended");
        // Settled before either side is closed: the client that sees the end sees the spend.
        settle(ctx, &mut link).await;
        link::close(session, http, &mut link, end).await;
    }
}

/// Settles what the session consumed and fills its usage record. Once settled, a
/// second call changes nothing.
async fn settle(ctx: &mut Ctx, link: &mut Link) {
    if link.meter.settled() {
        return;
    }
    let reserved = link.meter.reserved();
    let charged = link.meter.settle().await;
    let cost = link.meter.cost();
    if charged < cost {
        tracing::warn!(
            request_id = %ctx.request_id, cost, charged, reserved,
            "realtime session outspent its reservations; the overrun is not billed"
        );
    }
    if link.unread_messages() > 0 {
        tracing::warn!(request_id = %ctx.request_id, skipped = link.unread_messages(),
            "realtime messages too large to read for usage");
    }
    let rec = ctx.record_mut();
    rec.model = link.model.clone();
    rec.channel = link.channel.name.clone();
    rec.usage = link.meter.usage();
    rec.cost = charged;
    rec.overrun = (cost - charged).max(0);
    rec.bill = link.meter.provider_bill();
    rec.provider_cost = rec.bill.micros();
    rec.multiplier = link.meter.multiplier();
    rec.stream = true;
}

#[cfg(test)]
#[path = "begin_tests.rs"]
mod begin_tests;
