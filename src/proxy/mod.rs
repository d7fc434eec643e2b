//! The Pingora `ProxyHttp` service. Each phase calls one function and returns.
//!
//! Phases, in the order Pingora runs them for a request:
//! 1. `new_ctx`: request id and clock ([`Ctx::new`]).
//! 2. `request_filter`: route ([`route::route`]), authenticate ([`crate::auth`]), then
//!    answer locally ([`crate::api::local`]), relay a body-routed request
//!    ([`crate::relay`], [`crate::relay::media`]), a WebSocket ([`crate::realtime`]) or a
//!    video task ([`crate::video`]):
//!    each ends the request here (`request_filter` answers `true`).
//! 3. `upstream_peer`: never reached. Every route is answered from `request_filter`,
//!    because the route of an LLM request depends on its body, and a body read there is
//!    not re-sent by Pingora's proxy path beyond its 64 KiB retry buffer: the relay sends
//!    it upstream itself, with Pingora's connector (README, "Architecture").
//! 4. `fail_to_proxy`: a Pingora-level failure, rendered in the spec's envelope.
//! 5. `logging`: appends the usage record of an authenticated request, unless the relay
//!    already wrote it together with the request's settlement; then the request's
//!    metrics, access-log line and trace ([`crate::observe`]).
//!
//! Each request runs on the configuration that was running when it arrived
//! ([`Live::current`]), to its end, whatever a reload swaps in meanwhile.

use crate::api::local;
use crate::auth::{self, client_ip};
use crate::errors::GatewayError;
use crate::gateway::{Gateway, Live};
use crate::observe::{self, Obs, Observer};
use crate::realtime;
use crate::relay;
use crate::request::{respond_error, Answer, Ctx};
use crate::route::{self, Route};
use crate::video;
use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use std::sync::Arc;

pub struct GatewayProxy {
    live: Arc<Live>,
    observe: Arc<Observer>,
}

impl GatewayProxy {
    pub fn new(live: Arc<Live>) -> GatewayProxy {
        let observe = live.current().observe.clone();
        GatewayProxy { live, observe }
    }
}

#[async_trait]
impl ProxyHttp for GatewayProxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        let mut ctx = Ctx::new();
        ctx.obs = Obs::begin(&self.observe);
        ctx
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let gw = self.live.current();
        handle(&gw, session, ctx).await;
        // Answered: Pingora's proxy path is not taken (see `upstream_peer`).
        Ok(true)
    }

    /// Never reached: every request is answered in `request_filter` (phase 3 above).
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        Error::e_explain(ErrorType::InternalError, "no passthrough route")
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let (error_code, gerr) = match e.etype() {
            ErrorType::HTTPStatus(413) => (
                413,
                GatewayError::BodyTooLarge(self.live.current().config.limits.max_body_bytes),
            ),
            ErrorType::HTTPStatus(400) | ErrorType::InvalidHTTPHeader => (
                400,
                GatewayError::bad_request(None, "Malformed HTTP request."),
            ),
            // Pingora's error is not `Clone` and is borrowed here: its text (context and
            // cause included) is the cause.
            _ => (
                500,
                GatewayError::internal(format!("running a proxy phase: {e}")),
            ),
        };
        if session.response_written().is_none() && e.esource() != &ErrorSource::Downstream {
            respond_error(session, ctx, &gerr).await;
        }
        FailToProxy {
            error_code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Ctx) {
        let gw = self.live.current();
        let status = record_usage(&gw, session, ctx).await;
        observe_end(&gw, session, ctx, status);
    }
}

/// Routes, authenticates, and answers the request, whichever way it goes.
async fn handle(gw: &Gateway, session: &mut Session, ctx: &mut Ctx) {
    let req = session.req_header();
    let path = req.uri.path().to_string();
    let query = req.uri.query().map(str::to_string);
    let routed = route::route(&req.method, &path);
    let served = routed.as_ref().ok();
    ctx.shape = route::error_shape(served, &path);
    ctx.obs.routed(
        &gw.observe,
        route::label(&routed),
        route::protocol_label(served, ctx.shape),
        served == Some(&Route::Realtime),
        &req.headers,
    );
    let answer = match routed {
        // Refused before authentication: a path that is not served says so to anyone.
        Err(refused) => Err(refused.into()),
        // Boxed: what answering needs is freed before the answer is sent, instead of
        // being held (as this future's size) for the whole of a stream.
        Ok(route) => Box::pin(dispatch(gw, session, ctx, &route, &path, query.as_deref())).await,
    };
    match answer {
        Ok(answer) => answer.send(gw, session, ctx).await,
        Err(e) => respond_error(session, ctx, &e).await,
    }
}

/// Authenticates a request for a served route, then answers it.
///
/// The routes whose futures are large (relay, media, realtime, video) are boxed each on
/// its own, so this future stays small and a request copies only its own route's state
/// into the heap: held inline, the largest of them would size this future, and every
/// request would copy that much into a new box (README, "Benchmarks").
async fn dispatch(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    route: &Route,
    path: &str,
    query: Option<&str>,
) -> Result<Answer, GatewayError> {
    let peer = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip());
    let ip = client_ip(
        peer,
        &session.req_header().headers,
        &gw.config.trusted_proxies,
    );
    let caller = auth::Caller {
        headers: &session.req_header().headers,
        query,
        accepts: route.accepts(path),
        ip,
        now_ms: gw.calendar.clock.now_ms(),
    };
    let key = auth::authenticate(&gw.keys, gw.store.as_ref(), caller, &mut ctx.room).await?;
    ctx.key = Some(key.clone());
    match route {
        Route::Models => {
            let format = local::list_format(&session.req_header().headers, query);
            ctx.record_mut().endpoint = path.to_string();
            Ok(local::serve_models(gw, &key, format))
        }
        Route::GeminiModels => {
            ctx.record_mut().endpoint = path.to_string();
            Ok(local::serve_models(gw, &key, local::ListFormat::Gemini))
        }
        Route::GeminiModel(name) => local::serve_gemini_model(gw, &key, name),
        Route::UsageToken => local::serve_usage(gw, &key).await,
        Route::LogToken => local::serve_log(gw, &key, query).await,
        Route::Relay(r) => {
            ctx.record_mut().endpoint = path.to_string();
            in_box(|| relay::handle(gw, session, ctx, &key, r)).await
        }
        Route::Media(m) => {
            ctx.record_mut().endpoint = path.to_string();
            in_box(|| relay::media::handle(gw, session, ctx, &key, m)).await
        }
        Route::Realtime => {
            ctx.record_mut().endpoint = path.to_string();
            in_box(|| realtime::relay(gw, session, ctx, &key, query)).await
        }
        Route::Video(v) => {
            in_box(|| video::service::handle(gw, session, ctx, &key, v, query)).await
        }
        Route::StoredResponse(s) => {
            use crate::relay::stored;
            use crate::route::Stored;
            match s {
                Stored::Get(id) => stored::retrieve(gw, &key, id).await,
                Stored::Delete(id) => stored::delete(gw, &key, id).await,
                Stored::InputItems(id) => stored::input_items(gw, &key, id, query).await,
            }
        }
    }
}

/// Boxes the future `make` builds, built in its box.
///
/// The relay's futures are 13 to 15 KiB (Pingora's connector is inside them), and are
/// boxed to keep the request's own future small. `Box::pin(f())` builds the future on
/// the stack and then copies it into the box, 14 KiB of copying per request (about 1 % of
/// the proxy's CPU); with the box allocated first the compiler builds it in place.
#[inline(always)]
fn in_box<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    let mut slot = Box::<F>::new_uninit();
    slot.write(make());
    // SAFETY: `write` initialised the value.
    Box::into_pin(unsafe { slot.assume_init() })
}

/// Writes the usage record the relay did not write; returns the status the client got.
async fn record_usage(gw: &Gateway, session: &Session, ctx: &mut Ctx) -> u16 {
    let status = match ctx.status {
        0 => session.response_written().map_or(0, |h| h.status.as_u16()),
        s => s,
    };
    let Some(u) = ctx.take_usage_record(status) else {
        return status;
    };
    if let Err(e) = gw.store.append_usage(&u).await {
        tracing::warn!(request_id = %u.request_id, error = %e, "usage record not written");
    }
    status
}

fn observe_end(gw: &Gateway, session: &Session, ctx: &mut Ctx, status: u16) {
    let req = session.req_header();
    let (model, channel) = ctx
        .record
        .as_ref()
        .map_or(("", ""), |r| (r.model.as_str(), r.channel.as_str()));
    let ending = observe::request::Ending {
        request_id: &ctx.request_id,
        key_id: ctx.key.as_ref().map(|k| k.rec.id.as_str()),
        method: req.method.as_str(),
        path: req.uri.path(),
        status,
        started: ctx.started,
        model,
        channel,
    };
    observe::request::finish(&gw.observe, &mut ctx.obs, &ending);
}
