//! `GET /v1/realtime` (spec 4.20): a WebSocket relayed both ways through Pingora's own
//! proxy path (an upgraded connection needs no body inspection to route: the model is in
//! the query). The key may come in the `Sec-WebSocket-Protocol` form browsers use; the
//! model is whitelisted and priced before the upgrade; the session's `response.done`
//! usage events, read from the upstream's frames as they pass, are billed.

use crate::auth::AuthKey;
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::proxy::Ctx;
use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use std::sync::Arc;

/// The state of one relayed WebSocket, kept in the request's context.
pub struct Link {}

/// `request_filter`: checks the upgrade and the model, reserves, and leaves the link in
/// `ctx.realtime`; the request then continues to `upstream_peer`.
pub async fn begin(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &Arc<AuthKey>,
    query: Option<&str>,
) -> Result<(), GatewayError> {
    todo!()
}

/// `upstream_peer`.
pub async fn upstream_peer(gw: &Gateway, ctx: &mut Ctx) -> pingora::Result<Box<HttpPeer>> {
    todo!()
}

/// `upstream_request_filter`: the upstream's path, credential and subprotocols.
pub fn upstream_request(
    gw: &Gateway,
    ctx: &mut Ctx,
    req: &mut RequestHeader,
) -> pingora::Result<()> {
    todo!()
}

/// `response_body_filter`: bytes from the upstream, on their way to the client.
pub fn from_upstream(ctx: &mut Ctx, body: &mut Option<Bytes>, end_of_stream: bool) {
    todo!()
}

/// `request_body_filter`: bytes from the client, on their way to the upstream.
pub fn from_client(ctx: &mut Ctx, body: &mut Option<Bytes>, end_of_stream: bool) {
    todo!()
}

/// `logging`: settles what the session consumed.
pub async fn finish(gw: &Gateway, ctx: &mut Ctx) {
    todo!()
}
