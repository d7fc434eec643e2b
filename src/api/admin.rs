//! The admin listener (Pingora's `ServeHttp` app): the admin API under `/admin/`, with
//! `Authorization: Bearer <admin token>`; without it the operator's `/metrics`,
//! `/healthz` and `/readyz` ([`super::ops`]) and the console's page at `/console`.
//!
//! - `POST/GET /admin/keys`, `GET/PATCH/DELETE /admin/keys/{id}`: keys ([`super::keys`]);
//! - `DELETE /admin/keys/{id}/responses`: the responses a key stored;
//! - `GET /admin/usage`, `GET /admin/usage/{request_id}`: usage records ([`super::records`]);
//! - `GET /admin/spend`: spend in time buckets ([`super::spend`]);
//! - `GET /admin/catalog`: channels and prices from the configuration ([`super::catalog`]);
//! - `GET /admin/channels`: each channel's health; `POST /admin/reload` ([`super::ops`]).
//!
//! The console's files carry no data and are served without the token (the page is the
//! login form); everything it shows comes from the endpoints above, each behind the token.
//! Every answer carries the console's security headers ([`super::console::SECURITY`]).

use super::console::{self, Reply};
use super::groups::{self, GroupInput};
use super::keys::{self, KeyInput};
use super::{catalog, ops, policy, records, spend};
use crate::errors::{ErrorShape, GatewayError};
use crate::gateway::{Gateway, Live};
use crate::ids;
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

    async fn handle(&self, s: &mut ServerSession, request_id: &str) -> Answer {
        let gw = self.live.current();
        if !Self::authorized(&gw, s) {
            return Err(GatewayError::AdminUnauthorized);
        }
        let method = as_get(&s.req_header().method);
        let path = s.req_header().uri.path().trim_end_matches('/').to_string();
        let query = s.req_header().uri.query().map(str::to_string);
        let query = query.as_deref();
        if let Some(rest) = path.strip_prefix("/admin/keys") {
            return keys_endpoint(&gw, s, method, rest).await;
        }
        if let Some(rest) = path.strip_prefix("/admin/groups") {
            return groups_endpoint(&gw, s, method, rest).await;
        }
        let gw = gw.as_ref();
        match (method, path.as_str()) {
            (Method::GET, "/admin/channels") => Ok((200, ops::channels(&self.live))),
            (Method::POST, "/admin/reload") => Ok((200, ops::reload(&self.live)?)),
            (Method::GET, "/admin/usage") => records::list(gw, query).await,
            (Method::GET, "/admin/spend") => spend::get(gw, query).await,
            (Method::GET, "/admin/catalog") => Ok((200, catalog::get(gw))),
            (
                _,
                "/admin/usage" | "/admin/spend" | "/admin/catalog" | "/admin/channels"
                | "/admin/reload",
            ) => Err(GatewayError::MethodNotAllowed),
            (Method::GET, p) => match p.strip_prefix("/admin/usage/") {
                Some(id) if !id.contains('/') => records::lookup(gw, id, request_id).await,
                _ => Err(GatewayError::NotFound),
            },
            _ => Err(GatewayError::NotFound),
        }
    }
}

/// The id after a collection's path: `None` for the collection itself.
fn item(rest: &str) -> Result<Option<String>, GatewayError> {
    match rest {
        "" => Ok(None),
        rest => match rest.strip_prefix('/') {
            Some(id) if !id.is_empty() && !id.contains('/') => Ok(Some(id.to_string())),
            _ => Err(GatewayError::NotFound),
        },
    }
}

async fn keys_endpoint(gw: &Gateway, s: &mut ServerSession, method: Method, rest: &str) -> Answer {
    let store = gw.store.as_ref();
    if let Some(id) = rest
        .strip_prefix('/')
        .and_then(|r| r.strip_suffix("/responses"))
        .filter(|id| !id.is_empty() && !id.contains('/'))
    {
        if method != Method::DELETE {
            return Err(GatewayError::MethodNotAllowed);
        }
        keys::show(store, id).await?;
        let deleted = keys::delete_responses(store, id).await?;
        return Ok((
            200,
            serde_json::json!({"key_id": id, "object": "stored_responses", "deleted": deleted}),
        ));
    }
    match (method, item(rest)?) {
        (Method::POST, None) => {
            let input = KeyInput::from_json(&read_body(s).await?)?;
            let (rec, view) = keys::create(store, &input).await?;
            gw.keys.put(rec);
            Ok((201, view))
        }
        (Method::GET, None) => Ok((200, keys::list(store).await?)),
        (Method::GET, Some(id)) => {
            let rec = keys::show(store, &id).await?;
            let mut v = keys::view(&rec);
            v["limits"] = policy::key_limits(store, &gw.calendar, &rec).await?;
            Ok((200, v))
        }
        (Method::PATCH, Some(id)) => {
            let input = KeyInput::from_json(&read_body(s).await?)?;
            let rec = keys::update(store, &id, &input).await?;
            gw.keys.put(rec.clone());
            Ok((200, keys::view(&rec)))
        }
        (Method::DELETE, Some(id)) => {
            keys::revoke(store, &id).await?;
            gw.keys.invalidate(&id);
            Ok((
                200,
                serde_json::json!({"id": id, "object": "api_key", "deleted": true}),
            ))
        }
        _ => Err(GatewayError::MethodNotAllowed),
    }
}

async fn groups_endpoint(
    gw: &Gateway,
    s: &mut ServerSession,
    method: Method,
    rest: &str,
) -> Answer {
    let store = gw.store.as_ref();
    match (method, item(rest)?) {
        (Method::POST, None) => {
            let input = GroupInput::from_json(&read_body(s).await?)?;
            Ok((201, groups::view(&groups::create(store, &input).await?)))
        }
        (Method::GET, None) => Ok((200, groups::list(store).await?)),
        (Method::GET, Some(id)) => {
            let g = groups::show(store, &id).await?;
            Ok((200, groups::detail(store, &gw.calendar, &g).await?))
        }
        (Method::PATCH, Some(id)) => {
            let input = GroupInput::from_json(&read_body(s).await?)?;
            Ok((
                200,
                groups::view(&groups::update(store, &id, &input).await?),
            ))
        }
        (Method::DELETE, Some(id)) => {
            groups::delete(store, &id).await?;
            Ok((
                200,
                serde_json::json!({"id": id, "object": "key_group", "deleted": true}),
            ))
        }
        _ => Err(GatewayError::MethodNotAllowed),
    }
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, s: &mut ServerSession) -> Response<Vec<u8>> {
        let request_id = ids::request_id();
        let (method, path) = (
            as_get(&s.req_header().method),
            s.req_header().uri.path().to_string(),
        );
        let reply = if let Some(asset) = console::asset(s.req_header(), &method, &request_id) {
            asset
        } else if let Some(open) = ops::open_endpoint(&self.live, &method, &path).await {
            Reply::plain(open.status, open.content_type, open.body)
        } else {
            let (status, body) = match self.handle(s, &request_id).await {
                Ok((status, v)) => (status, serde_json::to_vec(&v).unwrap_or_default()),
                Err(e) => {
                    e.log_internal(&request_id);
                    (e.status(), e.body(ErrorShape::Default, &request_id))
                }
            };
            Reply::json(status, body)
        };
        reply.into_response(&request_id)
    }
}

/// A `HEAD` is answered wherever a `GET` is, with the same status and headers: it is
/// routed as the `GET`, and Pingora writes no body for it.
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
