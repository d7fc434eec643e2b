//! The admin API, on its own listener (Pingora's `ServeHttp` app):
//! `POST/GET /admin/keys`, `GET/PATCH/DELETE /admin/keys/{id}`, with
//! `Authorization: Bearer <admin token>`.

use super::keys::{self, KeyInput};
use crate::errors::{ErrorShape, GatewayError};
use crate::gateway::Gateway;
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
    gw: Arc<Gateway>,
    token: String,
}

impl AdminApp {
    pub fn new(gw: Arc<Gateway>, token: String) -> AdminApp {
        AdminApp { gw, token }
    }

    async fn handle(&self, s: &mut ServerSession) -> Result<(u16, Value), GatewayError> {
        let presented = s
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().to_string());
        if !presented.is_some_and(|t| constant_time_eq(t.as_bytes(), self.token.as_bytes())) {
            return Err(GatewayError::AdminUnauthorized);
        }
        let method = s.req_header().method.clone();
        let path = s.req_header().uri.path().trim_end_matches('/').to_string();
        let store = self.gw.store.as_ref();
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
                self.gw.keys.put(rec);
                Ok((201, view))
            }
            (Method::GET, None) => Ok((200, keys::list(store).await?)),
            (Method::GET, Some(id)) => Ok((200, keys::view(&keys::show(store, &id).await?))),
            (Method::PATCH, Some(id)) => {
                let input = KeyInput::from_json(&read_body(s).await?)?;
                let rec = keys::update(store, &id, &input).await?;
                self.gw.keys.put(rec.clone());
                Ok((200, keys::view(&rec)))
            }
            (Method::DELETE, Some(id)) => {
                keys::revoke(store, &id).await?;
                self.gw.keys.invalidate(&id);
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
        let (status, body) = match self.handle(s).await {
            Ok((status, v)) => (status, serde_json::to_vec(&v).unwrap_or_default()),
            Err(e) => (e.status(), e.body(ErrorShape::Default, &request_id)),
        };
        Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
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
