//! Per-request state shared by the phases, the answer a handler returns, and the helpers
//! that write answers. A leaf: every handler may use it, and it knows none of them.

use crate::auth::{AuthKey, Room};
use crate::errors::{ErrorShape, GatewayError};
use crate::gateway::Gateway;
use crate::ids;
use crate::protocol::Usage;
use crate::store::{Micros, UsageRecord};
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use std::sync::Arc;
use std::time::Instant;

pub struct Ctx {
    pub request_id: String,
    pub started: Instant,
    pub time_ms: i64,
    pub shape: ErrorShape,
    /// Set once the caller is authenticated.
    pub key: Option<Arc<AuthKey>>,
    /// What the usage log records for this request, if anything.
    pub record: Option<Record>,
    /// Status sent to the client.
    pub status: u16,
    /// What the operator's metrics, access log and trace learn of the request.
    pub obs: crate::observe::Obs,
    /// What a whole answer cost the key, for the cost header (and whether it was
    /// estimated); set when the request settles before its answer is written.
    pub charged: Option<(Micros, bool)>,
    /// What the request's own checks counted of its key's limits: the rate-limit headers
    /// (the rest comes from the key's last reserve, see [`crate::auth::room`]).
    pub room: Room,
}

/// The usage-relevant facts of a request, filled in as they become known.
#[derive(Debug, Default, Clone)]
pub struct Record {
    pub endpoint: String,
    pub model: String,
    pub channel: String,
    pub usage: Usage,
    pub cost: Micros,
    /// The cost was counted by the gateway (the upstream reported no usage).
    pub estimated: bool,
    /// Cost reported beyond the reservation: recorded, never charged.
    pub overrun: Micros,
    /// The provider's cost at the channel's prices (`cost` is the key's charge), and its
    /// lines.
    pub provider_cost: Micros,
    pub bill: crate::billing::Bill,
    /// The key's price multiplier (1 unless the key or its group sets one).
    pub multiplier: crate::billing::Multiplier,
    pub stream: bool,
}

/// What a handler answers. The proxy writes it.
pub enum Answer {
    /// A complete response.
    Full {
        status: u16,
        content_type: String,
        body: Bytes,
    },
    /// A response written as it is produced (a stream, audio, a video download, a
    /// WebSocket session).
    Live(Box<dyn LiveAnswer>),
}

impl Answer {
    pub fn json(status: u16, body: Vec<u8>) -> Answer {
        Answer::Full {
            status,
            content_type: "application/json".into(),
            body: Bytes::from(body),
        }
    }

    /// Writes the answer to the client.
    pub async fn send(self, gw: &Gateway, session: &mut Session, ctx: &mut Ctx) {
        match self {
            Answer::Full {
                status,
                content_type,
                body,
            } => respond(session, ctx, status, &content_type, body).await,
            Answer::Live(live) => live.send(gw, session, ctx).await,
        }
    }
}

/// An answer that writes itself to the client as it goes.
#[async_trait]
pub trait LiveAnswer: Send {
    async fn send(self: Box<Self>, gw: &Gateway, session: &mut Session, ctx: &mut Ctx);
}

impl Ctx {
    pub fn new() -> Ctx {
        Ctx {
            request_id: ids::request_id(),
            started: Instant::now(),
            time_ms: ids::now_ms(),
            shape: ErrorShape::Default,
            key: None,
            record: None,
            status: 0,
            obs: crate::observe::Obs::default(),
            charged: None,
            room: Room::default(),
        }
    }

    /// What the answer tells of its key's limits: this request's counts, and the key's
    /// last reserve's for what it did not count.
    pub fn limits(&self) -> Room {
        match &self.key {
            Some(k) => self.room.or(k.last_room()),
            None => self.room,
        }
    }

    pub fn record_mut(&mut self) -> &mut Record {
        self.record.get_or_insert_with(Record::default)
    }

    /// The usage record of an authenticated request, once: later calls (the `logging`
    /// phase after a relay already wrote it) get `None`.
    pub fn take_usage_record(&mut self, status: u16) -> Option<UsageRecord> {
        let key = self.key.as_ref()?;
        let rec = self.record.take()?;
        let u = UsageRecord {
            request_id: self.request_id.clone(),
            time_ms: self.time_ms,
            key_id: key.rec.id.clone(),
            endpoint: rec.endpoint,
            model: rec.model,
            channel: rec.channel,
            prompt_tokens: rec.usage.input_tokens,
            completion_tokens: rec.usage.output_tokens,
            cached_tokens: rec.usage.cached_input_tokens,
            cost: rec.cost,
            estimated: rec.estimated,
            overrun: rec.overrun,
            provider_cost: Some(rec.provider_cost),
            bill: rec.bill,
            multiplier_ppm: (rec.multiplier != crate::billing::Multiplier::ONE)
                .then_some(rec.multiplier.0),
            status,
            latency_ms: self.started.elapsed().as_millis() as u64,
            stream: rec.stream,
            group: key.rec.group.clone(),
        };
        // Every usage record is made here: the request's observations read it from here.
        self.obs.facts = Some(crate::observe::request::Facts::of(&u));
        Some(u)
    }
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx::new()
    }
}

/// A response header with the request id every response carries.
/// `None` only for a status outside 100..=999, which no caller passes.
/// What a whole answer cost the key, in USD (README, "The cost on the answer").
pub const COST_HEADER: &str = "x-gateway-cost-usd";
/// Present (`true`) when that cost was counted by the gateway, not reported upstream.
pub const COST_ESTIMATED_HEADER: &str = "x-gateway-cost-estimated";

/// Headers an answer's header has room for before it grows: its own five or so and the
/// key's limits (up to eight).
const HEADER_ROOM: usize = 16;

pub fn response_header(
    ctx: &Ctx,
    status: u16,
    content_type: &str,
    len: Option<usize>,
) -> Option<ResponseHeader> {
    // Names go out in lower case (as in HTTP/2; every HTTP/1.1 client reads them alike):
    // each insert then costs one map, not two. Room for the limit and cost headers.
    let mut h = ResponseHeader::build_no_case(status, Some(HEADER_ROOM)).ok()?;
    let _ = h.insert_header(http::header::CONTENT_TYPE, content_type);
    let _ = h.insert_header("x-request-id", ctx.request_id.as_str());
    ctx.limits().write(&mut h);
    if let Some((micros, estimated)) = ctx.charged {
        let _ = h.insert_header(COST_HEADER, crate::protocol::usd_text(micros));
        if estimated {
            let _ = h.insert_header(COST_ESTIMATED_HEADER, "true");
        }
    }
    match len {
        Some(n) => {
            let _ = h.insert_header(http::header::CONTENT_LENGTH, http::HeaderValue::from(n));
        }
        None => {
            let _ = h.insert_header(http::header::CACHE_CONTROL, "no-cache");
            let _ = h.insert_header(http::header::TRANSFER_ENCODING, "chunked");
        }
    }
    Some(h)
}

/// Sends a complete response. A client that already left is not an error worth more
/// than a debug line.
pub async fn respond(
    session: &mut Session,
    ctx: &mut Ctx,
    status: u16,
    content_type: &str,
    body: Bytes,
) {
    ctx.status = status;
    ctx.obs.first_byte();
    let Some(h) = response_header(ctx, status, content_type, Some(body.len())) else {
        tracing::error!(status, "invalid response status");
        return;
    };
    // A HEAD gets the GET's header, `content-length` included, and no body.
    let head = session.req_header().method == http::Method::HEAD;
    if let Err(e) = session
        .write_response_header(Box::new(h), body.is_empty() || head)
        .await
    {
        tracing::debug!(error = %e, "client gone before the response header");
        return;
    }
    if !body.is_empty() && !head {
        if let Err(e) = session.write_response_body(Some(body), true).await {
            tracing::debug!(error = %e, "client gone during the response body");
        }
    }
}

pub async fn respond_json(session: &mut Session, ctx: &mut Ctx, status: u16, body: Vec<u8>) {
    respond(session, ctx, status, "application/json", Bytes::from(body)).await;
}

pub async fn respond_error(session: &mut Session, ctx: &mut Ctx, e: &GatewayError) {
    e.log_internal(&ctx.request_id);
    let body = e.body(ctx.shape, &ctx.request_id);
    respond_json(session, ctx, e.status(), body).await;
}
