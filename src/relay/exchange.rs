//! The metered exchange, one mechanism for every endpoint that spends money:
//!
//! reserve the worst case → lower the output limit to what the grant pays for → try the
//! model's channels in order (the next one only while nothing was sent upstream) →
//! deliver the answer (whole, or streamed as it arrives) → settle exactly once.
//!
//! One charge policy: a charge never exceeds its reservation. Usage an upstream reports
//! beyond the grant is recorded as an overrun, not charged; an answer without a usage
//! report is charged from what the gateway counted ([`super::meter::Cost`]). Chat,
//! messages, generate-content and responses ([`super::tokens`]) and the media endpoints
//! ([`super::media`]) run through [`run`]; realtime blocks and video tasks hold their
//! money with [`hold`] and settle with [`settle`].

use super::meter::{Bounds, Call, Cost, Delivery, Meter, Request};
use super::upstream::{Exchange, OpenError, Outgoing};
use super::ERROR_BODY_LIMIT;
use crate::auth::AuthKey;
use crate::billing::{Bill, ReservationGuard};
use crate::channels::Channel;
use crate::errors::{GatewayError, UpstreamFailure};
use crate::gateway::Gateway;
use crate::request::{response_header, Answer, Ctx, LiveAnswer};
use crate::store::{Micros, ReserveDenied};
use async_trait::async_trait;
use bytes::Bytes;
use pingora::proxy::Session;
use std::sync::Arc;
use std::time::Instant;

/// Holds the worst case of one request (or one realtime block, or one video task) on
/// the caller's key and its group; the guard releases it whichever way the request ends.
/// `ttl_secs`: how long the hold outlives a crashed instance (a live guard extends it).
/// A key whose group changed since it was read is read again, and asked for once more.
pub async fn hold(
    gw: &Gateway,
    key: &AuthKey,
    reservation_id: &str,
    bounds: Bounds,
    ttl: u64,
) -> Result<ReservationGuard, GatewayError> {
    let mut read_again: Option<Arc<AuthKey>> = None;
    for _ in 0..2 {
        let key = read_again.as_deref().unwrap_or(key);
        // Bounds are provider costs; the key pays them times its multiplier.
        let m = key.price_multiplier();
        let ask = gw.calendar.ask(
            &key.rec,
            key.group.as_ref(),
            m.apply_micros(bounds.min),
            m.apply_micros(bounds.max),
            bounds.tokens,
        );
        let (granted, room) =
            crate::billing::reserve_counted(&gw.store, &key.rec.id, reservation_id, &ask, ttl)
                .await?;
        // What the reserve counted goes on this request's answer and the key's next ones.
        let now_ms = gw.calendar.clock.now_ms();
        key.remember(crate::auth::Room::counted(&room, &ask, now_ms));
        match granted {
            Err(ReserveDenied::Stale) => {
                gw.keys.invalidate(&key.rec.id);
                read_again = Some(gw.keys.get(&key.rec.id, &key.rec.hash).await?);
            }
            granted => return Ok(granted?.with_multiplier(m)),
        }
    }
    Err(ReserveDenied::Stale.into())
}

/// Runs one metered exchange for `key`, the authenticated caller.
pub async fn run<R: Request>(
    gw: &Gateway,
    ctx: &mut Ctx,
    key: &AuthKey,
    client_headers: &http::HeaderMap,
    candidates: &[Arc<Channel>],
    mut request: R,
) -> Result<Answer, GatewayError> {
    let reserving = ctx.obs.step();
    let ttl = gw.config.limits.reservation_ttl_secs;
    let held = hold(gw, key, &ctx.request_id, request.bounds(), ttl).await;
    if let Some(s) = ctx.obs.step_span("store.reserve", reserving) {
        s.error(held.is_err());
    }
    let mut guard = held?;
    request.grant(guard.provider_budget());
    let ex = match first_answer(gw, ctx, client_headers, candidates, |c, last| {
        request.call(c, last).map(Some)
    })
    .await
    {
        Ok(ex) => ex,
        Err(GatewayError::Upstream(UpstreamFailure::ContentFilter)) => {
            return content_refusal(ctx, request, guard).await;
        }
        Err(e) => {
            // Nothing reached the client: nothing is charged.
            guard.settle(0).await;
            return Err(e);
        }
    };
    let meter = request.meter(&ctx.request_id, guard.account());
    deliver(gw, ctx, ex, meter, guard).await
}

/// Sends the request to the first channel that takes it and returns its 2xx answer
/// (header read, body not yet). A channel is skipped only when nothing was sent to it:
/// the gateway never retries for the caller once an upstream may have acted (spec 7.3).
/// `call` builds the request for a channel (`last`: no later channel will be tried), or
/// `None` when that channel cannot take it.
/// A channel whose circuit is open (or whose keys were all refused) is not tried at all.
pub async fn first_answer(
    gw: &Gateway,
    ctx: &mut Ctx,
    client_headers: &http::HeaderMap,
    candidates: &[Arc<Channel>],
    mut call: impl FnMut(&Channel, bool) -> Result<Option<Call>, GatewayError>,
) -> Result<Exchange, GatewayError> {
    let last = candidates.len().saturating_sub(1);
    let mut failure = GatewayError::Upstream(UpstreamFailure::Connect);
    for (i, channel) in candidates.iter().enumerate() {
        if !channel.admit() {
            tracing::debug!(request_id = %ctx.request_id, channel = %channel.name,
                "channel skipped: its circuit is open");
            continue;
        }
        let Some(c) = call(channel, i == last)? else {
            continue;
        };
        let out = Outgoing {
            method: c.method,
            path: &c.path,
            body: c.body,
            content_type: &c.content_type,
            stream: c.stream,
            model: &c.model,
            wire: c.wire,
            client_headers,
        };
        ctx.record_mut().channel = channel.name.clone();
        let opening = Instant::now();
        let opened = Exchange::open(gw, channel.clone(), &out).await;
        observe_attempt(ctx, &channel.name, opening, &opened);
        match opened {
            Ok(ex) if (200..300).contains(&ex.status()) => return Ok(ex),
            Ok(ex) => return Err(refused(gw, ctx, ex).await),
            Err(OpenError::NotSent(e)) => failure = e,
            Err(OpenError::Sent(e)) => return Err(e),
        }
    }
    Err(failure)
}

/// The attempt's spans: the connection, then the wait for the upstream's first byte.
fn observe_attempt(
    ctx: &mut Ctx,
    channel: &str,
    start: Instant,
    opened: &Result<Exchange, OpenError>,
) {
    match opened {
        Ok(ex) => {
            let t = ex.timing;
            if let Some(s) = ctx.obs.span("upstream.connect", t.start, t.connected) {
                s.str("gateway.channel", channel);
            }
            if let Some(s) = ctx.obs.span("upstream.first_byte", t.connected, t.header) {
                s.str("gateway.channel", channel)
                    .int("http.response.status_code", i64::from(ex.status()))
                    .error(!(200..300).contains(&ex.status()));
            }
        }
        Err(_) => {
            if let Some(s) = ctx.obs.span("upstream.connect", start, Instant::now()) {
                s.str("gateway.channel", channel).error(true);
            }
        }
    }
}

/// The upstream's content filter refused the prompt: the client's protocol's own refusal
/// where it has one (a whole answer, or a whole stream, that ends for that reason),
/// else the 400 `content_filter`. Nothing was generated: nothing is charged.
async fn content_refusal<R: Request>(
    ctx: &mut Ctx,
    request: R,
    mut guard: ReservationGuard,
) -> Result<Answer, GatewayError> {
    let mut meter = request.meter(&ctx.request_id, guard.account());
    let Some((body, content_type)) = meter.refusal() else {
        guard.settle(0).await;
        return Err(GatewayError::Upstream(UpstreamFailure::ContentFilter));
    };
    let cost = Cost::exact(crate::protocol::Usage::default(), 0);
    settle(ctx, &mut guard, cost, Bill::default(), 200).await;
    ctx.charged = Some((0, false));
    Ok(Answer::Full {
        status: 200,
        content_type,
        body,
    })
}

/// An upstream's non-2xx answer: its text goes to the operator's log, the client gets
/// the status and a stable message (spec 7.2); a content filter's refusal is told apart.
pub(crate) async fn refused(gw: &Gateway, ctx: &Ctx, mut ex: Exchange) -> GatewayError {
    let status = ex.status();
    let body = ex.body(ERROR_BODY_LIMIT).await.unwrap_or_default();
    tracing::warn!(
        request_id = %ctx.request_id, channel = %ex.channel.name, status,
        body = %gw.config.secrets.body(&body),
        "upstream error"
    );
    ex.finish(gw).await;
    if crate::channels::cloud::azure::refused_by_filter(status, &body) {
        return GatewayError::Upstream(UpstreamFailure::ContentFilter);
    }
    GatewayError::Upstream(UpstreamFailure::Status(status))
}

async fn deliver<M: Meter + 'static>(
    gw: &Gateway,
    ctx: &mut Ctx,
    mut ex: Exchange,
    mut meter: M,
    mut guard: ReservationGuard,
) -> Result<Answer, GatewayError> {
    let upstream_type = ex.content_type().to_string();
    let whole = match meter.delivery(&upstream_type) {
        Ok(Delivery::Whole) => match ex.body(gw.config.limits.max_response_bytes).await {
            Ok(body) => {
                ex.finish(gw).await;
                meter.whole(body, &upstream_type)
            }
            Err(e) => {
                ex.finish(gw).await;
                Err(e)
            }
        },
        Ok(Delivery::Stream {
            content_type,
            framed,
        }) => {
            return Ok(Answer::Live(Box::new(Streaming {
                ex,
                meter,
                guard,
                content_type,
                framed,
            })));
        }
        Err(e) => {
            ex.finish(gw).await;
            Err(e)
        }
    };
    match whole {
        Ok((body, content_type)) => {
            // Settled before the answer leaves: a caller who reads its balance next sees it.
            let cost = meter.cost();
            let bill = meter.bill();
            let charged = settle(ctx, &mut guard, cost, bill, 200).await;
            ctx.charged = Some((charged, cost.estimated));
            // Stored before the answer leaves: the client may chain on it at once.
            if let Some(kept) = meter.kept() {
                super::stored::keep(gw, ctx, kept).await;
            }
            Ok(Answer::Full {
                status: 200,
                content_type,
                body,
            })
        }
        Err(e) => {
            guard.settle(0).await;
            Err(e)
        }
    }
}

/// Settles `cost` (the key's multiplier applied, never more than was reserved; the rest
/// is recorded as an overrun) together with the request's usage record, in one store
/// step. `bill`: the provider cost's lines. Returns what the key was charged.
pub async fn settle(
    ctx: &mut Ctx,
    guard: &mut ReservationGuard,
    cost: Cost,
    bill: Bill,
    status: u16,
) -> Micros {
    let reserved = guard.amount();
    let charged = guard.charge_for(cost.micros);
    let overrun = guard.multiplier().apply_micros(cost.micros) - charged;
    if overrun > 0 {
        tracing::warn!(
            request_id = %ctx.request_id, cost = cost.micros, reserved,
            "the answer cost more than its reservation; the overrun is recorded, not charged"
        );
    }
    let rec = ctx.record_mut();
    rec.usage = cost.usage;
    rec.cost = charged;
    rec.estimated = cost.estimated;
    rec.overrun = overrun;
    rec.provider_cost = cost.micros.max(0);
    rec.bill = bill;
    rec.multiplier = guard.multiplier();
    let settling = ctx.obs.step();
    let outcome = match ctx.take_usage_record(status) {
        Some(u) => guard.settle_logged(charged, u).await,
        None => guard.settle(charged).await,
    };
    if let Some(s) = ctx.obs.step_span("store.settle", settling) {
        s.int("gateway.charged_micro_usd", charged)
            .error(outcome != crate::billing::SettleOutcome::Settled);
    }
    charged
}

/// What the charge would be if the request ended now (the guard charges it if dropped).
fn charge_so_far(guard: &ReservationGuard, cost: Cost) -> crate::store::Micros {
    guard.charge_for(cost.micros)
}

/// A streamed answer: each upstream read goes through the meter and out to the client at
/// once. If the client leaves, the upstream is still read to its end (without writing),
/// so the key is billed from the upstream's own usage report for what it produced.
struct Streaming<M> {
    ex: Exchange,
    meter: M,
    guard: ReservationGuard,
    content_type: String,
    framed: bool,
}

#[async_trait]
impl<M: Meter + 'static> LiveAnswer for Streaming<M> {
    async fn send(self: Box<Self>, gw: &Gateway, session: &mut Session, ctx: &mut Ctx) {
        let Streaming {
            mut ex,
            mut meter,
            mut guard,
            content_type,
            framed,
        } = unbox(self);
        ctx.status = 200;
        let _open = crate::observe::GaugeGuard::new(&gw.observe.streams);
        // The steps that run once (the header, the settlement, the connection's return)
        // are boxed: their state is held only while they run, not for the whole stream.
        let mut client_ok = match response_header(ctx, 200, &content_type, None) {
            Some(h) => Box::pin(session.write_response_header(Box::new(h), false))
                .await
                .is_ok(),
            None => false,
        };
        drop(content_type);
        // Grown by the first event (an idle stream holds no buffer) and reused for every
        // read after it: each write takes a copy of exactly its size.
        let mut out = Vec::new();
        let cut = gw.cut.wait();
        tokio::pin!(cut);
        let broke: Option<String> = loop {
            let next = tokio::select! {
                next = ex.chunk() => next,
                () = &mut cut => break Some(format!(
                    "The gateway is shutting down; the response was cut short. (request id: {})",
                    ctx.request_id
                )),
            };
            match next {
                Ok(Some(chunk)) => {
                    meter.feed(&chunk, &mut out);
                    // The pieces that arrived with this one leave with it, in one write,
                    // instead of one write each; nothing waits for a piece not yet here.
                    let ended = take_arrived(&mut ex, &mut meter, &mut out, &ctx.request_id);
                    guard.set_charge_on_drop(charge_so_far(&guard, meter.cost()));
                    if !out.is_empty() && client_ok {
                        ctx.obs.first_byte();
                        client_ok = write(session, Bytes::copy_from_slice(&out)).await;
                        if !client_ok {
                            tracing::info!(request_id = %ctx.request_id, "client left mid-stream; draining upstream for usage");
                        }
                    }
                    if out.capacity() > SCRATCH_KEPT {
                        // A burst's buffer is not held for the rest of the stream.
                        out = Vec::new();
                    }
                    out.clear();
                    if let Some(end) = ended {
                        break end;
                    }
                }
                Ok(None) => break None,
                Err(e) => break Some(e.full_message(&ctx.request_id)),
            }
        };
        meter.finish(broke.as_deref(), &mut out);
        if broke.is_some() {
            // The client saw a 200 header, then an error event (or a cut body): the log
            // says it failed.
            ctx.status = 500;
            if !framed {
                session.set_keepalive(None);
                client_ok = false;
            }
        }
        // Settled before the stream's last bytes: a caller who reads its balance next sees it.
        let cost = meter.cost();
        let bill = meter.bill();
        Box::pin(settle(ctx, &mut guard, cost, bill, ctx.status)).await;
        if let Some(kept) = meter.kept() {
            Box::pin(super::stored::keep(gw, ctx, kept)).await;
        }
        if client_ok {
            if !out.is_empty() {
                client_ok = write(session, Bytes::from(out)).await;
            }
            if client_ok {
                if let Err(e) = Box::pin(session.write_response_body(None, true)).await {
                    tracing::debug!(error = %e, "client gone at end of stream");
                }
            }
        }
        Box::pin(ex.finish(gw)).await;
    }
}

/// The most a stream's output buffer keeps between reads (a larger one is let go).
const SCRATCH_KEPT: usize = 16 * 1024;

/// Most output gathered from pieces that have already arrived before it is written.
const GATHER_BYTES: usize = 64 * 1024;

/// Feeds `meter` the body pieces that have already arrived (read without waiting), up to
/// about [`GATHER_BYTES`] of output. `Some(end)` when the body ended among them: `None`
/// whole, `Some(message)` broken. Reading the upstream's body is cancel-safe (Pingora's
/// body reader keeps its state between reads), so a read that would wait is dropped.
fn take_arrived<M: Meter>(
    ex: &mut Exchange,
    meter: &mut M,
    out: &mut Vec<u8>,
    request_id: &str,
) -> Option<Option<String>> {
    while out.len() < GATHER_BYTES {
        match ready_now(ex.chunk())? {
            Ok(Some(chunk)) => meter.feed(&chunk, out),
            Ok(None) => return Some(None),
            Err(e) => return Some(Some(e.full_message(request_id))),
        }
    }
    None
}

/// A future's output if it is ready at its first poll; `None` (the future dropped) if it
/// would wait.
fn ready_now<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// The box's contents; the box itself is freed here, not when the caller's (long) scope
/// ends.
#[allow(clippy::boxed_local)] // taking the box is the point: it is freed on return
fn unbox<T>(b: Box<T>) -> T {
    *b
}

async fn write(session: &mut Session, piece: Bytes) -> bool {
    match session.write_response_body(Some(piece), false).await {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "client write failed");
            false
        }
    }
}
