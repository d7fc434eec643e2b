//! The admin API, on its own listener (Pingora's `ServeHttp` app):
//! `POST/GET /admin/keys`, `GET/PATCH/DELETE /admin/keys/{id}`, `GET /admin/channels`,
//! `POST /admin/reload`, with `Authorization: Bearer <admin token>`; and without it the
//! operator's `/metrics`, `/healthz` and `/readyz` ([`super::ops`]).

use super::keys::{self, KeyInput};
use super::ops::{self, Reply};
use crate::errors::{ErrorShape, GatewayError};
use crate::gateway::Live;
use crate::ids;
use async_trait::async_trait;
use bytes::BytesMut;
use http::{Method, Response};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::Value;
use std::sync::Arc;

const MAX_ADMIN_BODY: usize = 1024 * 1024;

pub struct AdminApp {
    live: Arc<Live>,
}

impl AdminApp {
    pub fn new(live: Arc<Live>) -> AdminApp {
        AdminApp { live }
    }

    async fn handle(&self, s: &mut ServerSession) -> Result<(u16, Value), GatewayError> {
        let gw = self.live.current();
        // The token of the running configuration: a reload can rotate it.
        let token = gw.config.admin.as_ref().map_or("", |a| a.token.as_str());
        let presented = s
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().to_string());
        if token.is_empty()
            || !presented.is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
        {
            return Err(GatewayError::AdminUnauthorized);
        }
        let method = s.req_header().method.clone();
        let path = s.req_header().uri.path().trim_end_matches('/').to_string();
        match (path.as_str(), &method) {
            ("/admin/channels", &Method::GET) => return Ok((200, ops::channels(&self.live))),
            ("/admin/reload", &Method::POST) => return Ok((200, ops::reload(&self.live)?)),
            ("/admin/channels" | "/admin/reload", _) => return Err(GatewayError::MethodNotAllowed),
            _ => {}
        }
        let store = gw.store.as_ref();
        let id = match path.strip_prefix("/admin/keys") {
            Some("") => None,
            Some(rest) => match rest.strip_prefix('/') {
                Some(id) if !id.is_empty() && !id.contains('/') => Some(id.to_string()),
                _ => return Err(GatewayError::NotFound),
            },
            None => return Err(GatewayError::NotFound),
        };
        match (method, id) {
            (Method::POST, None) => {
                let input = KeyInput::from_json(&read_body(s).await?)?;
                let (rec, view) = keys::create(store, &input).await?;
                gw.keys.put(rec);
                Ok((201, view))
            }
            (Method::GET, None) => Ok((200, keys::list(store).await?)),
            (Method::GET, Some(id)) => Ok((200, keys::view(&keys::show(store, &id).await?))),
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
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, s: &mut ServerSession) -> Response<Vec<u8>> {
        let request_id = ids::request_id();
        let (method, path) = (
            s.req_header().method.clone(),
            s.req_header().uri.path().to_string(),
        );
        let reply = match ops::open_endpoint(&self.live, &method, &path).await {
            Some(r) => r,
            None => match self.handle(s).await {
                Ok((status, v)) => Reply::json(status, &v),
                Err(e) => Reply {
                    status: e.status(),
                    content_type: "application/json",
                    body: e.body(ErrorShape::Default, &request_id),
                },
            },
        };
        let (status, body) = (reply.status, reply.body);
        Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, reply.content_type)
            .header(http::header::CONTENT_LENGTH, body.len())
            .header("x-request-id", request_id)
            .body(body)
            .unwrap_or_default()
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
