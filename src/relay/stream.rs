//! Streaming responses: each upstream read goes through the protocol's state machine and
//! out to the client at once; nothing waits for the end of the stream.
//!
//! If the client leaves, the upstream stream is still read to its end (without writing),
//! so the key is billed from the upstream's own usage report for what it produced.

use super::upstream::Exchange;
use super::Billing;
use crate::billing::ReservationGuard;
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::ids;
use crate::protocol::{self, Protocol, StreamContext, Usage};
use crate::proxy::ctx::response_header;
use crate::proxy::Ctx;
use bytes::Bytes;
use pingora::proxy::Session;

pub struct Plan<'a> {
    pub upstream: Protocol,
    pub client: Protocol,
    pub client_model: &'a str,
    pub client_wants_usage: bool,
    pub client_sse: bool,
}

pub async fn relay(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    mut ex: Exchange,
    plan: Plan<'_>,
    billing: &Billing<'_>,
    guard: &mut ReservationGuard,
) {
    let mut tr = protocol::stream_translator(
        plan.upstream,
        plan.client,
        StreamContext {
            client_model: plan.client_model.to_string(),
            request_id: ctx.request_id.clone(),
            created: ids::now_secs(),
            client_wants_usage: plan.client_wants_usage,
            client_sse: plan.client_sse,
        },
    );
    ctx.status = 200;
    // Generate-content without `alt=sse` streams a JSON array (spec 4.18).
    let content_type = if plan.client == Protocol::Gemini && !plan.client_sse {
        "application/json"
    } else {
        "text/event-stream"
    };
    let mut client_ok = match response_header(ctx, 200, content_type, None) {
        Some(h) => session
            .write_response_header(Box::new(h), false)
            .await
            .is_ok(),
        None => false,
    };
    let mut out = Vec::with_capacity(8 * 1024);
    let broke = loop {
        match ex.chunk().await {
            Ok(Some(chunk)) => {
                tr.feed(&chunk, &mut out);
                guard.set_charge_on_drop(billing.cost(seen(tr.usage())).1);
                if !out.is_empty() {
                    let piece = Bytes::from(std::mem::take(&mut out));
                    if client_ok {
                        client_ok = write(session, piece).await;
                        if !client_ok {
                            tracing::info!(request_id = %ctx.request_id, "client left mid-stream; draining upstream for usage");
                        }
                    }
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let message = broke
        .as_ref()
        .map(|e: &GatewayError| e.full_message(&ctx.request_id));
    tr.finish(message.as_deref(), &mut out);
    let (usage, cost) = billing.cost(seen(tr.usage()));
    let rec = ctx.record_mut();
    rec.usage = usage;
    rec.cost = cost;
    if broke.is_some() {
        // The client saw a 200 header, then an error event: the log says it failed.
        ctx.status = 500;
    }
    // Settled before the stream's last bytes: a caller who reads its balance next sees it.
    super::settle_logged(ctx, guard, cost, ctx.status).await;
    if client_ok {
        if !out.is_empty() {
            client_ok = write(session, Bytes::from(out)).await;
        }
        if client_ok {
            if let Err(e) = session.write_response_body(None, true).await {
                tracing::debug!(error = %e, "client gone at end of stream");
            }
        }
    }
    ex.finish(gw).await;
}

/// `None` until the upstream reported any usage.
fn seen(u: Usage) -> Option<Usage> {
    (u != Usage::default()).then_some(u)
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
