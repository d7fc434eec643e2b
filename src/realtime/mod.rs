//! `GET /v1/realtime` (spec 4.20): a WebSocket relayed both ways through Pingora's own
//! proxy path (an upgraded connection needs no body inspection to route: the model is in
//! the query). The key may come in the `Sec-WebSocket-Protocol` form browsers use (spec
//! 5); the model is whitelisted and priced before the upgrade; the session's
//! `response.done` usage events, read from the upstream's frames as they pass, are billed.
//!
//! Order of checks, each before anything later happens: the WebSocket handshake (400) →
//! `model` in the query (400) → whitelist (403) → an `openai` channel serving the model
//! (404) → a price (403) → the first reservation (403 when the key cannot afford its
//! minimum). The upstream gets its own path, model name, host and key, and neither the
//! client's `Authorization` nor its key subprotocol; `Sec-WebSocket-Extensions` is
//! dropped so that no compression is negotiated and every frame stays readable.
//!
//! # Money
//!
//! A session cannot know its cost in advance: each response bills the conversation so
//! far. So it holds reservations and takes more as it spends ([`billing::Meter`]):
//! - At the upgrade it reserves one block: the price's `max_output_tokens` of output plus
//!   [`billing::INPUT_ALLOWANCE_TOKENS`] of input (or what is left under the cap, if at
//!   least the floor a chat request needs).
//! - After each `response.done`, usage is added and the cost recomputed with
//!   [`crate::billing::Price::cost`]. When the unspent reservation falls below what the
//!   next response may cost (a block, or twice the largest response so far), an extension
//!   is reserved on a spawned task, a response ahead of need. Its minimum includes any
//!   overrun, so a grant always pays for what was already spent.
//! - When the cost has reached the reservations and the store has refused more, the
//!   session is closed (close code 1008 `quota exhausted`; 1008 `key no longer active`
//!   when the key was disabled, expired or deleted meanwhile; 1011 when the store could
//!   not be asked), at the first frame boundary in either direction:
//!   - toward the client: the close frame follows the frame that completed the
//!     `response.done` (or replaces the upstream's next bytes); nothing more from the
//!     upstream reaches the client, and the client's next bytes (its close reply, or
//!     anything else) are not forwarded but end the upstream half;
//!   - toward the upstream, when the client speaks first: the client's current frame is
//!     completed, then a close frame (1000) replaces the rest, so the client's next
//!     request never reaches the upstream; the upstream's close reply is replaced by
//!     the client's close frame, and the upstream ending its side ends the session.
//!
//! Guarantee, precisely:
//! 1. The key is never charged past its cap: at the end each reservation is settled
//!    with its share of the cost, in order and never above its amount, and every
//!    reservation was granted atomically by the store within the cap.
//! 2. The upstream work the gateway cannot bill is the overrun of the one response that
//!    exhausts the reservations, and nothing after it: once the reservations are spent
//!    and the refusal is known, no client frame begun after that reaches the upstream
//!    (one already half sent is completed, as framing requires). The refusal is normally known a
//!    response ahead, because an extension is asked for while the unspent reservation
//!    still covers a block and twice the largest response so far. Only a response
//!    larger than all of that (which itself triggers the request) leaves the answer
//!    pending when it ends; a next response the client starts within that one store
//!    round trip runs until the refusal arrives and is then cut at its first frame
//!    boundary, unbilled too.
//! 3. Responses run one at a time on a conversation; out-of-band responses running in
//!    parallel each count as one response in (2).
//!
//! What is not billed here: transcription of the input audio (reported in other events
//! and priced by another model).
//!
//! Pingora's filters are synchronous and cannot end a connection, so closing is done
//! with the bytes: close frames replace bytes in either direction, and an empty client
//! body (`None`) ends the upstream half, after which Pingora finishes the session. An
//! extension is reserved on a spawned task; its outcome is read at every frame boundary.
//! An upstream answer that is not a WebSocket (an HTTP error body) fails framing at its
//! first byte and is passed through untouched. A framing error later on leaves the
//! session unreadable for billing: that chunk is forwarded as it is (the client's own
//! WebSocket library fails on it), nothing more from the upstream is forwarded, and the
//! upstream half is ended at the client's next bytes.

mod billing;
mod frames;
mod handshake;

use crate::api::store_error;
use crate::auth::credentials::query_param;
use crate::auth::AuthKey;
use crate::billing::Price;
use crate::channels::{Channel, ChannelProtocol};
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::ids;
use crate::protocol::Invalid;
use crate::proxy::Ctx;
use crate::store::ReserveDenied;
use billing::{Account, Meter, Refusal};
use bytes::{Bytes, BytesMut};
use frames::{Collect, Fed, FrameReader};
use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use std::ops::ControlFlow;
use std::sync::Arc;

/// Largest text message held to be read for usage; a larger one is forwarded unread.
/// `response.done` carries the whole response's output items, so it is allowed to be
/// large, but nothing legitimate comes near this.
const MAX_TEXT_MESSAGE: usize = 16 << 20;

/// The state of one relayed WebSocket, kept in the request's context.
pub struct Link {
    model: String,
    channel: Arc<Channel>,
    /// The client's query string, from which the upstream's is derived.
    query: Option<String>,
    meter: Meter,
    /// Reads the upstream's frames for the usage of `response.done` events.
    reader: FrameReader,
    /// The upstream's answer is not a WebSocket stream: passed through, not read.
    not_websocket: bool,
    /// Nothing more from the upstream reaches the client (a close frame was sent, or
    /// the stream could no longer be read).
    client_done: bool,
    /// Follows the client's frames, to know where a close frame may be placed.
    client: FrameReader,
    /// A close frame was sent to the upstream in place of the client's bytes.
    upstream_told: bool,
    /// The upstream half was ended.
    upstream_ended: bool,
}

fn bad_request(i: Invalid) -> GatewayError {
    GatewayError::BadRequest {
        param: i.param,
        message: i.message,
    }
}

/// `request_filter`: checks the upgrade and the model, reserves, and leaves the link in
/// `ctx.realtime`; the request then continues to `upstream_peer`.
pub async fn begin(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &Arc<AuthKey>,
    query: Option<&str>,
) -> Result<(), GatewayError> {
    handshake::check_upgrade(&session.req_header().headers).map_err(bad_request)?;
    let model = query_param(query, "model").ok_or_else(|| {
        bad_request(Invalid {
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
    // Only an OpenAI-style upstream speaks this protocol.
    let channel = gw
        .router
        .candidates(&model)
        .into_iter()
        .find(|c| c.protocol == ChannelProtocol::OpenAi)
        .ok_or_else(|| GatewayError::ModelNotFound(model.clone()))?;
    let price: Price = gw
        .config
        .prices
        .get(&model)
        .filter(|p| p.per_token())
        .cloned()
        .ok_or_else(|| GatewayError::ModelNotPriced(model.clone()))?;
    let (min, max) = billing::first_block(&price);
    let ttl_secs = gw.config.limits.reservation_ttl_secs;
    let first = gw
        .store
        .reserve(
            &key.rec.id,
            &ctx.request_id,
            min,
            max,
            ids::now_secs(),
            ttl_secs,
        )
        .await
        .map_err(|e| store_error(&e))?
        .map_err(|d| match d {
            ReserveDenied::NotFound => GatewayError::UnknownKey,
            ReserveDenied::Disabled => GatewayError::KeyDisabled,
            ReserveDenied::Expired => GatewayError::KeyExpired,
            ReserveDenied::QuotaExhausted => GatewayError::QuotaExhausted,
        })?;
    ctx.record_mut().channel = channel.name.clone();
    // Pingora ends a session silent both ways for 60 s (its client read timeout, restarted
    // by traffic either way); a realtime user may think longer. The channel's read
    // timeout, which already bounds the upstream side, becomes the idle limit.
    session.set_read_timeout(Some(channel.read_timeout));
    let account = Account {
        store: gw.store.clone(),
        key_id: key.rec.id.clone(),
        request_id: ctx.request_id.clone(),
        ttl_secs,
    };
    ctx.realtime = Some(Box::new(Link {
        model,
        channel,
        query: query.map(str::to_string),
        meter: Meter::new(price, first, account),
        reader: FrameReader::new(Some(Collect {
            cap: MAX_TEXT_MESSAGE,
            sniff: billing::sniff,
        })),
        not_websocket: false,
        client_done: false,
        client: FrameReader::new(None),
        upstream_told: false,
        upstream_ended: false,
    }));
    Ok(())
}

fn no_link<T>() -> pingora::Result<T> {
    Error::e_explain(ErrorType::InternalError, "realtime phase without a link")
}

/// `upstream_peer`: the channel chosen in [`begin`]. There is no fallback to another
/// channel: once the upgrade is sent the session belongs to that upstream.
pub async fn upstream_peer(_gw: &Gateway, ctx: &mut Ctx) -> pingora::Result<Box<HttpPeer>> {
    let Some(link) = ctx.realtime.as_deref() else {
        return no_link();
    };
    let peer = link
        .channel
        .peer()
        .await
        .or_err(ErrorType::ConnectNoRoute, "resolving the realtime channel")?;
    Ok(Box::new(peer))
}

/// `upstream_request_filter`: the upstream's path, credential and subprotocols.
pub fn upstream_request(
    _gw: &Gateway,
    ctx: &mut Ctx,
    req: &mut RequestHeader,
) -> pingora::Result<()> {
    match ctx.realtime.as_deref() {
        Some(link) => link.upstream_request(req),
        None => no_link(),
    }
}

/// `response_body_filter`: bytes from the upstream, on their way to the client.
pub fn from_upstream(ctx: &mut Ctx, body: &mut Option<Bytes>, _end_of_stream: bool) {
    if let Some(link) = ctx.realtime.as_deref_mut() {
        link.upstream_bytes(body);
    }
}

/// `request_body_filter`: bytes from the client, on their way to the upstream.
pub fn from_client(ctx: &mut Ctx, body: &mut Option<Bytes>, _end_of_stream: bool) {
    if let Some(link) = ctx.realtime.as_deref_mut() {
        link.client_bytes(body);
    }
}

/// `logging`: settles what the session consumed.
pub async fn finish(_gw: &Gateway, ctx: &mut Ctx) {
    let Some(mut link) = ctx.realtime.take() else {
        return;
    };
    let charged = link.meter.settle().await;
    let cost = link.meter.cost();
    if charged < cost {
        tracing::warn!(
            request_id = %ctx.request_id, cost, charged, reserved = link.meter.reserved(),
            "realtime session outspent its reservations; the overrun is not billed"
        );
    }
    if link.reader.oversize() > 0 {
        tracing::warn!(request_id = %ctx.request_id, skipped = link.reader.oversize(),
            "realtime messages too large to read for usage");
    }
    if link.reader.frames() > 0 {
        // Frames came back: the upgrade happened (otherwise the status written stands).
        ctx.status = 101;
    }
    let rec = ctx.record_mut();
    rec.model = link.model.clone();
    rec.channel = link.channel.name.clone();
    rec.usage = link.meter.usage();
    rec.cost = charged;
    rec.stream = true;
}

impl Link {
    fn upstream_request(&self, req: &mut RequestHeader) -> pingora::Result<()> {
        let c = &self.channel;
        let path = handshake::upstream_path(
            &c.path_prefix,
            self.query.as_deref(),
            c.upstream_model(&self.model),
        );
        let uri = path.parse::<http::Uri>().or_err(
            ErrorType::InternalError,
            "building the realtime upstream path",
        )?;
        req.set_uri(uri);
        handshake::rewrite_headers(req, &c.authority(), &c.api_key)
    }

    fn upstream_bytes(&mut self, body: &mut Option<Bytes>) {
        let Some(data) = body.take() else {
            return;
        };
        if self.not_websocket {
            *body = Some(data);
            return;
        }
        if self.client_done {
            *body = Some(Bytes::new());
            return;
        }
        if let Some(why) = self.meter.must_close() {
            if self.reader.at_boundary() {
                *body = Some(self.close_client(&[], why));
                return;
            }
        }
        let meter = &mut self.meter;
        let fed = self.reader.feed(&data, |_, text| {
            if let Some(u) = text.and_then(billing::response_done_usage) {
                meter.add(&u);
            }
            match meter.must_close() {
                Some(_) => ControlFlow::Break(()),
                None => ControlFlow::Continue(()),
            }
        });
        *body = Some(match fed {
            Ok(Fed::All) => data,
            Ok(Fed::Stopped(end)) => match self.meter.must_close() {
                Some(why) => self.close_client(&data[..end], why),
                None => data,
            },
            Err(e) if self.reader.frames() == 0 => {
                // An HTTP answer (the upgrade was refused), not frames.
                tracing::debug!(
                    reason = e.reason,
                    "realtime upstream answer is not a WebSocket"
                );
                self.not_websocket = true;
                data
            }
            Err(e) => {
                tracing::error!(reason = e.reason, channel = %self.channel.name,
                    "realtime upstream sent invalid frames; closing the session");
                self.client_done = true;
                data
            }
        });
    }

    /// `head` (ending at a frame boundary) followed by the close frame for `why`.
    fn close_client(&mut self, head: &[u8], why: Refusal) -> Bytes {
        let (code, reason) = why.close();
        self.client_done = true;
        let mut out = BytesMut::with_capacity(head.len() + 4 + reason.len());
        out.extend_from_slice(head);
        out.extend_from_slice(&frames::server_close(code, reason));
        out.freeze()
    }

    fn client_bytes(&mut self, body: &mut Option<Bytes>) {
        // `None`: the request had no body (before the upgrade) or the client left.
        let Some(data) = body.take() else {
            return;
        };
        if self.not_websocket {
            *body = Some(data);
            return;
        }
        if self.upstream_ended || self.client_done {
            // The client was told (or the upstream stream broke): end the upstream half.
            self.upstream_ended = true;
            return;
        }
        if self.upstream_told {
            // Waiting for the upstream's close reply; nothing more reaches it.
            *body = Some(Bytes::new());
            return;
        }
        let closing = self.meter.must_close().is_some();
        if closing && self.client.at_boundary() {
            *body = Some(self.close_upstream(&[]));
            return;
        }
        let cut = if closing {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        };
        *body = match self.client.feed(&data, |_, _| cut) {
            Ok(Fed::Stopped(end)) => Some(self.close_upstream(&data[..end])),
            // Open, or closing mid-frame: the frame is completed before the close.
            Ok(Fed::All) => Some(data),
            // Unreadable client frames are the upstream's to refuse; when closing,
            // no boundary can be found, so the upstream half is ended at once.
            Err(_) if closing => {
                self.upstream_ended = true;
                None
            }
            Err(_) => Some(data),
        };
    }

    /// The reservations are spent and the client is between frames, but the upstream
    /// has sent nothing to carry the client's close frame: close toward the upstream
    /// instead. Its close reply (or any frame) then carries the client's close.
    fn close_upstream(&mut self, head: &[u8]) -> Bytes {
        self.upstream_told = true;
        // RFC 6455 wants unpredictable masks so that script-chosen payloads cannot be
        // aimed at intermediaries; this payload is the gateway's own two bytes.
        let mask = ids::fast_random().to_le_bytes();
        let mut out = BytesMut::with_capacity(head.len() + 8);
        out.extend_from_slice(head);
        out.extend_from_slice(&frames::client_close(
            1000,
            [mask[0], mask[1], mask[2], mask[3]],
        ));
        out.freeze()
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "begin_tests.rs"]
mod begin_tests;
