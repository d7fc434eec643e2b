//! The admin listener (Pingora's `ServeHttp` app): the admin API under `/admin/`, with
//! `Authorization: Bearer <admin token>`; without it the operator's `/metrics`,
//! `/healthz` and `/readyz` ([`super::ops`]) and the console's page at `/console`.
//!
//! - `POST/GET /admin/keys`, `GET/PATCH/DELETE /admin/keys/{id}`: keys ([`super::keys`]);
//! - `DELETE /admin/keys/{id}/responses`: the responses a key stored;
//! - `GET /admin/usage`, `GET /admin/usage/{request_id}`: usage records ([`super::records`]);
//! - `GET /admin/spend`: spend in time buckets ([`super::spend`]);
//! - `GET /admin/catalog`: channels and prices from the configuration ([`super::catalog`]);
//! - `GET /admin/channels`: each channel's health; `POST /admin/reload` ([`super::ops`]);
//! - `GET /openapi/client.yaml`, `GET /openapi/admin.yaml`: the OpenAPI documents of the
//!   client API and of this listener, without the token ([`super::openapi`]).
//!
//! Every route but the console's files is a row of [`ROUTES`], which dispatch goes by and
//! `openapi/admin.yaml` documents.
//!
//! The console's files carry no data and are served without the token (the page is the
//! login form); everything it shows comes from the endpoints above, each behind the token.
//! Every answer carries the console's security headers ([`super::console::SECURITY`]).

use super::console::{self, Reply};
use super::groups::{self, GroupInput};
use super::keys::{self, KeyInput};
use super::{catalog, openapi, ops, policy, records, spend};
use crate::errors::{ErrorShape, GatewayError};
use crate::gateway::{Gateway, Live};
use crate::ids;
use crate::route::table::{self, Endpoint, Lookup, Verb, POST, READ};
use async_trait::async_trait;
use bytes::BytesMut;
use http::{Method, Response};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use std::sync::Arc;

const MAX_ADMIN_BODY: usize = 1024 * 1024;

pub struct AdminApp {
    live: Arc<Live>,
}

pub use super::params::Answer;

impl AdminApp {
    pub fn new(live: Arc<Live>) -> AdminApp {
        AdminApp { live }
    }

    /// The bearer token matches the running configuration's (a reload can rotate it).
    fn authorized(gw: &Gateway, s: &ServerSession) -> bool {
        let token = gw.config.admin.as_ref().map_or("", |a| a.token.as_str());
        let presented = s
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().to_string());
        !token.is_empty()
            && presented.is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
    }

    /// The routes behind the token: 401 without it, whatever the path.
    async fn handle(
        &self,
        s: &mut ServerSession,
        to: Result<(AdminRoute, String), GatewayError>,
        request_id: &str,
    ) -> Answer {
        let gw = self.live.current();
        if !Self::authorized(&gw, s) {
            return Err(GatewayError::AdminUnauthorized);
        }
        let (to, id) = to?;
        let query = s.req_header().uri.query().map(str::to_string);
        let query = query.as_deref();
        let store = gw.store.as_ref();
        let gw = gw.as_ref();
        use AdminRoute::*;
        match to {
            KeyCreate => {
                let input = KeyInput::from_json(&read_body(s).await?)?;
                let (rec, view) = keys::create(store, &input).await?;
                gw.keys.put(rec);
                Ok((201, view))
            }
            KeyList => Ok((200, keys::list(store).await?)),
            KeyShow => {
                let rec = keys::show(store, &id).await?;
                let mut v = keys::view(&rec);
                v["limits"] = policy::key_limits(store, &gw.calendar, &rec).await?;
                Ok((200, v))
            }
            KeyUpdate => {
                let input = KeyInput::from_json(&read_body(s).await?)?;
                let rec = keys::update(store, &id, &input).await?;
                gw.keys.put(rec.clone());
                Ok((200, keys::view(&rec)))
            }
            KeyRevoke => {
                keys::revoke(store, &id).await?;
                gw.keys.invalidate(&id);
                Ok((
                    200,
                    serde_json::json!({"id": id, "object": "api_key", "deleted": true}),
                ))
            }
            KeyResponsesDelete => {
                keys::show(store, &id).await?;
                let deleted = keys::delete_responses(store, &id).await?;
                Ok((
                    200,
                    serde_json::json!({"key_id": id, "object": "stored_responses", "deleted": deleted}),
                ))
            }
            GroupCreate => {
                let input = GroupInput::from_json(&read_body(s).await?)?;
                Ok((201, groups::view(&groups::create(store, &input).await?)))
            }
            GroupList => Ok((200, groups::list(store).await?)),
            GroupShow => {
                let g = groups::show(store, &id).await?;
                Ok((200, groups::detail(store, &gw.calendar, &g).await?))
            }
            GroupUpdate => {
                let input = GroupInput::from_json(&read_body(s).await?)?;
                Ok((
                    200,
                    groups::view(&groups::update(store, &id, &input).await?),
                ))
            }
            GroupDelete => {
                groups::delete(store, &id).await?;
                Ok((
                    200,
                    serde_json::json!({"id": id, "object": "key_group", "deleted": true}),
                ))
            }
            Channels => Ok((200, ops::channels(&self.live))),
            Reload => Ok((200, ops::reload(&self.live)?)),
            Usage => records::list(gw, query).await,
            UsageRecord => records::lookup(gw, &id, request_id).await,
            Spend => spend::get(gw, query).await,
            Catalog => Ok((200, catalog::get(gw))),
            // Answered before the token is asked for.
            Metrics | Healthz | Readyz | OpenApiClient | OpenApiAdmin => {
                Err(GatewayError::NotFound)
            }
        }
    }

    /// Answers a request of [`ROUTES`] (or refuses it: 404, 405, 401).
    async fn route(&self, s: &mut ServerSession, method: &Method, request_id: &str) -> Reply {
        let to = admin_route(method, s.req_header().uri.path());
        if let Ok((r, _)) = &to {
            if let Some(open) = self.open(*r).await {
                return open;
            }
        }
        let (status, body) = match self.handle(s, to, request_id).await {
            Ok((status, v)) => (status, serde_json::to_vec(&v).unwrap_or_default()),
            Err(e) => {
                e.log_internal(request_id);
                (e.status(), e.body(ErrorShape::Default, request_id))
            }
        };
        Reply::json(status, body)
    }

    /// The routes served without the token.
    async fn open(&self, to: AdminRoute) -> Option<Reply> {
        let yaml = |body: &[u8]| Reply::plain(200, openapi::CONTENT_TYPE, body.to_vec());
        let plain = |r: ops::Reply| Reply::plain(r.status, r.content_type, r.body);
        Some(match to {
            AdminRoute::Metrics => plain(ops::metrics(&self.live)),
            AdminRoute::Healthz => plain(ops::healthz()),
            AdminRoute::Readyz => plain(ops::ready(&self.live).await),
            AdminRoute::OpenApiClient => yaml(openapi::CLIENT),
            AdminRoute::OpenApiAdmin => yaml(openapi::ADMIN),
            _ => return None,
        })
    }
}

/// What a request to the admin listener is (besides the console's files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRoute {
    Metrics,
    Healthz,
    Readyz,
    OpenApiClient,
    OpenApiAdmin,
    KeyCreate,
    KeyList,
    KeyShow,
    KeyUpdate,
    KeyRevoke,
    KeyResponsesDelete,
    GroupCreate,
    GroupList,
    GroupShow,
    GroupUpdate,
    GroupDelete,
    Usage,
    UsageRecord,
    Spend,
    Catalog,
    Channels,
    Reload,
}

const PATCH: &[Verb] = &[Verb::Patch];
const DELETE: &[Verb] = &[Verb::Delete];

/// Every route of the admin listener but the console's files, in lookup order:
/// dispatch goes by it, and `openapi/admin.yaml` documents exactly these
/// (tests/integration/openapi.rs). A trailing slash is ignored.
pub static ROUTES: &[Endpoint<AdminRoute>] = {
    use AdminRoute::*;
    &[
        Endpoint::new(READ, "/metrics", Metrics),
        Endpoint::new(READ, "/healthz", Healthz),
        Endpoint::new(READ, "/readyz", Readyz),
        Endpoint::new(READ, "/openapi/client.yaml", OpenApiClient),
        Endpoint::new(READ, "/openapi/admin.yaml", OpenApiAdmin),
        Endpoint::new(POST, "/admin/keys", KeyCreate),
        Endpoint::new(READ, "/admin/keys", KeyList),
        Endpoint::new(READ, "/admin/keys/{id}", KeyShow),
        Endpoint::new(PATCH, "/admin/keys/{id}", KeyUpdate),
        Endpoint::new(DELETE, "/admin/keys/{id}", KeyRevoke),
        Endpoint::new(DELETE, "/admin/keys/{id}/responses", KeyResponsesDelete),
        Endpoint::new(POST, "/admin/groups", GroupCreate),
        Endpoint::new(READ, "/admin/groups", GroupList),
        Endpoint::new(READ, "/admin/groups/{id}", GroupShow),
        Endpoint::new(PATCH, "/admin/groups/{id}", GroupUpdate),
        Endpoint::new(DELETE, "/admin/groups/{id}", GroupDelete),
        Endpoint::new(READ, "/admin/usage", Usage),
        Endpoint::new(READ, "/admin/usage/{request_id}", UsageRecord),
        Endpoint::new(READ, "/admin/spend", Spend),
        Endpoint::new(READ, "/admin/catalog", Catalog),
        Endpoint::new(READ, "/admin/channels", Channels),
        Endpoint::new(POST, "/admin/reload", Reload),
    ]
};

/// The route of a request to the admin listener, and its path parameter.
pub fn admin_route(method: &Method, path: &str) -> Result<(AdminRoute, String), GatewayError> {
    match table::find(ROUTES, method, path) {
        Lookup::Found(row, id) => Ok((row.target, id.to_string())),
        Lookup::WrongMethod => Err(GatewayError::MethodNotAllowed),
        Lookup::NoPath => Err(GatewayError::NotFound),
    }
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, s: &mut ServerSession) -> Response<Vec<u8>> {
        let request_id = ids::request_id();
        let method = s.req_header().method.clone();
        let reply = match console::asset(s.req_header(), &as_get(&method), &request_id) {
            Some(asset) => asset,
            None => self.route(s, &method, &request_id).await,
        };
        reply.into_response(&request_id)
    }
}

/// The console's files answer a `HEAD` as the `GET` (Pingora writes no body for it); the
/// routes of [`ROUTES`] list `HEAD` beside each `GET` themselves.
fn as_get(m: &Method) -> Method {
    if m == Method::HEAD {
        Method::GET
    } else {
        m.clone()
    }
}

async fn read_body(s: &mut ServerSession) -> Result<Vec<u8>, GatewayError> {
    let mut buf = BytesMut::new();
    loop {
        match s.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > MAX_ADMIN_BODY {
                    return Err(GatewayError::BodyTooLarge(MAX_ADMIN_BODY));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.to_vec()),
            Err(_) => {
                return Err(GatewayError::bad_request(
                    None,
                    "The request body could not be read.",
                ))
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
