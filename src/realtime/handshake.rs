//! The opening handshake: what the client must send (RFC 6455 4.1), the request the
//! upstream gets instead (its own path, model, host and key; none of the client's
//! credentials; no compression, so the gateway can read the frames it bills from), and
//! the `101` passed back.

use crate::auth::credentials::WS_KEY_PREFIX;
use crate::protocol::Invalid;
use http::HeaderMap;
use pingora::http::{RequestHeader, ResponseHeader};

fn invalid(param: &str, message: &str) -> Invalid {
    Invalid {
        param: Some(param.to_string()),
        message: message.to_string(),
    }
}

/// Checks that the request opens a WebSocket, version 13.
pub fn check_upgrade(h: &HeaderMap) -> Result<(), Invalid> {
    if !has_token(h, "upgrade", "websocket") {
        return Err(invalid(
            "upgrade",
            "This endpoint is a WebSocket: send `Upgrade: websocket`.",
        ));
    }
    if !has_token(h, "connection", "upgrade") {
        return Err(invalid(
            "connection",
            "A WebSocket handshake needs `Connection: Upgrade`.",
        ));
    }
    let key = h
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if !key.is_some_and(is_handshake_key) {
        return Err(invalid(
            "sec-websocket-key",
            "`Sec-WebSocket-Key` must be 16 random bytes in base64.",
        ));
    }
    if !has_token(h, "sec-websocket-version", "13") {
        return Err(invalid(
            "sec-websocket-version",
            "Only WebSocket version 13 is supported: send `Sec-WebSocket-Version: 13`.",
        ));
    }
    Ok(())
}

/// An upgrade is an HTTP/1.1 mechanism (RFC 6455 4.1; HTTP/2 has no `Upgrade`).
pub fn check_version(v: http::Version) -> Result<(), Invalid> {
    if v == http::Version::HTTP_11 {
        Ok(())
    } else {
        Err(invalid(
            "upgrade",
            "A WebSocket handshake is an HTTP/1.1 request.",
        ))
    }
}

/// A comma-separated header (possibly repeated) contains `token`, case-insensitively.
fn has_token(h: &HeaderMap, name: &str, token: &str) -> bool {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The base64 form of 16 bytes: 22 characters of the alphabet and `==`.
fn is_handshake_key(k: &str) -> bool {
    let b = k.as_bytes();
    b.len() == 24
        && b[22..] == *b"=="
        && b[..22]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

/// The upstream's path and query: the client's query with `model` set to the upstream's
/// name for it (once) and `key` (a gateway credential form) removed; other parameters
/// are kept as sent.
pub fn upstream_path(prefix: &str, query: Option<&str>, upstream_model: &str) -> String {
    let model: String = url::form_urlencoded::byte_serialize(upstream_model.as_bytes()).collect();
    let mut parts: Vec<String> = Vec::new();
    let mut model_done = false;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let name = url::form_urlencoded::parse(pair.as_bytes())
            .next()
            .map(|(k, _)| k.into_owned())
            .unwrap_or_default();
        match name.as_str() {
            "key" => {}
            "model" if model_done => {}
            "model" => {
                parts.push(format!("model={model}"));
                model_done = true;
            }
            _ => parts.push(pair.to_string()),
        }
    }
    if !model_done {
        parts.push(format!("model={model}"));
    }
    format!("{prefix}/v1/realtime?{}", parts.join("&"))
}

/// Client headers the upstream handshake carries as they are. Everything else the
/// client sent stays at the gateway: its credentials above all, and any
/// `Sec-WebSocket-Extensions` offer (compressed frames could not be read for usage).
const FORWARDED: &[&str] = &["sec-websocket-key", "openai-beta"];

/// Upstream response headers the client's `101` carries (RFC 6455 4.2.2).
const SWITCHING: &[&str] = &[
    "upgrade",
    "connection",
    "sec-websocket-accept",
    "sec-websocket-protocol",
];

/// The upstream's handshake: `path_and_query` on the channel's host with the channel's
/// key, the client's `Sec-WebSocket-Key` (so the upstream's `Sec-WebSocket-Accept` is
/// the one the client expects) and its subprotocols except the one carrying the
/// gateway key.
pub fn upstream_request(
    client: &RequestHeader,
    path_and_query: &str,
    authority: &str,
    api_key: &str,
) -> pingora::Result<RequestHeader> {
    let mut req = RequestHeader::build("GET", path_and_query.as_bytes(), Some(10))?;
    req.insert_header(http::header::HOST, authority)?;
    req.insert_header(http::header::UPGRADE, "websocket")?;
    req.insert_header(http::header::CONNECTION, "Upgrade")?;
    req.insert_header("sec-websocket-version", "13")?;
    for name in FORWARDED {
        if let Some(v) = client.headers.get(*name) {
            req.insert_header(*name, v.clone())?;
        }
    }
    if let Some(p) = kept_protocols(&client.headers) {
        req.insert_header("sec-websocket-protocol", p)?;
    }
    if !api_key.is_empty() {
        req.insert_header(http::header::AUTHORIZATION, format!("Bearer {api_key}"))?;
    }
    req.insert_header(
        http::header::USER_AGENT,
        concat!("model-gateway/", env!("CARGO_PKG_VERSION")),
    )?;
    Ok(req)
}

/// The `101` the client gets: the upstream's switching headers and the request id.
pub fn client_switch(
    upstream: &ResponseHeader,
    request_id: &str,
) -> pingora::Result<ResponseHeader> {
    let mut resp = ResponseHeader::build(101, Some(SWITCHING.len() + 1))?;
    for name in SWITCHING {
        if let Some(v) = upstream.headers.get(*name) {
            resp.insert_header(*name, v.clone())?;
        }
    }
    resp.insert_header("x-request-id", request_id)?;
    Ok(resp)
}

/// The offered subprotocols without the one that carries the gateway key; `None` when
/// nothing else was offered.
fn kept_protocols(h: &HeaderMap) -> Option<String> {
    let kept: Vec<&str> = h
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with(WS_KEY_PREFIX))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, v.parse().unwrap());
        }
        m
    }

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn handshake() -> Vec<(&'static str, &'static str)> {
        vec![
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-key", KEY),
            ("sec-websocket-version", "13"),
        ]
    }

    fn without(name: &str) -> HeaderMap {
        let pairs: Vec<_> = handshake()
            .into_iter()
            .filter(|(k, _)| *k != name)
            .collect();
        headers(&pairs)
    }

    #[test]
    fn a_browser_handshake_passes() {
        assert_eq!(check_upgrade(&headers(&handshake())), Ok(()));
        let firefox = headers(&[
            ("upgrade", "WebSocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-key", KEY),
            ("sec-websocket-version", "13"),
        ]);
        assert_eq!(check_upgrade(&firefox), Ok(()));
    }

    #[test]
    fn each_missing_part_names_its_header() {
        for name in [
            "upgrade",
            "connection",
            "sec-websocket-key",
            "sec-websocket-version",
        ] {
            let e = check_upgrade(&without(name)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(name));
            assert!(e.message.ends_with('.'), "{}", e.message);
        }
    }

    #[test]
    fn wrong_values_are_refused() {
        let mut h = headers(&handshake());
        h.insert("upgrade", "h2c".parse().unwrap());
        assert_eq!(
            check_upgrade(&h).unwrap_err().param.as_deref(),
            Some("upgrade")
        );

        let mut h = headers(&handshake());
        h.insert("connection", "keep-alive".parse().unwrap());
        assert_eq!(
            check_upgrade(&h).unwrap_err().param.as_deref(),
            Some("connection")
        );

        for bad in [
            "short==",
            "dGhlIHNhbXBsZSBub25jZQ",
            "dGhlIHNhbXBsZSBub25j*Q==",
            "",
        ] {
            let mut h = headers(&handshake());
            h.insert("sec-websocket-key", bad.parse().unwrap());
            assert_eq!(
                check_upgrade(&h).unwrap_err().param.as_deref(),
                Some("sec-websocket-key"),
                "{bad}"
            );
        }

        let mut h = headers(&handshake());
        h.insert("sec-websocket-version", "8".parse().unwrap());
        assert_eq!(
            check_upgrade(&h).unwrap_err().param.as_deref(),
            Some("sec-websocket-version")
        );
    }

    #[test]
    fn only_http_1_1_upgrades() {
        assert_eq!(check_version(http::Version::HTTP_11), Ok(()));
        for v in [http::Version::HTTP_10, http::Version::HTTP_2] {
            let e = check_version(v).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("upgrade"));
            assert!(e.message.ends_with('.'));
        }
    }

    #[test]
    fn upstream_path_sets_the_model_and_drops_the_key() {
        assert_eq!(
            upstream_path("", Some("model=gpt-realtime"), "gpt-realtime"),
            "/v1/realtime?model=gpt-realtime"
        );
        assert_eq!(
            upstream_path(
                "/openai",
                Some("key=sk-abc&model=rt&intent=transcription&model=other"),
                "gpt-4o-realtime-preview-2024-12-17"
            ),
            "/openai/v1/realtime?model=gpt-4o-realtime-preview-2024-12-17&intent=transcription"
        );
        assert_eq!(
            upstream_path("", Some("a=%20b&model=x"), "m y/z"),
            "/v1/realtime?a=%20b&model=m+y%2Fz",
            "other parameters byte-exact, the model encoded"
        );
        assert_eq!(upstream_path("", None, "m"), "/v1/realtime?model=m");
    }

    fn client_request(extra: &[(&str, &str)]) -> RequestHeader {
        let mut req =
            RequestHeader::build("GET", b"/v1/realtime?model=gpt-realtime", None).unwrap();
        for (k, v) in handshake() {
            req.append_header(k, v).unwrap();
        }
        for (k, v) in extra {
            req.append_header(k.to_string(), *v).unwrap();
        }
        req
    }

    fn upstream(extra: &[(&str, &str)], key: &str) -> RequestHeader {
        let client = client_request(extra);
        upstream_request(
            &client,
            "/openai/v1/realtime?model=gpt-realtime-2025-08-28",
            "api.openai.com",
            key,
        )
        .unwrap()
    }

    #[test]
    fn credentials_swapped_and_other_protocols_kept() {
        let req = upstream(
            &[
                ("host", "gateway.example"),
                ("authorization", "Bearer sk-client"),
                (
                    "sec-websocket-protocol",
                    "realtime, openai-insecure-api-key.sk-client, openai-beta.realtime-v1",
                ),
                (
                    "sec-websocket-extensions",
                    "permessage-deflate; client_max_window_bits",
                ),
                ("openai-beta", "realtime=v1"),
            ],
            "sk-upstream",
        );
        assert_eq!(
            req.uri.to_string(),
            "/openai/v1/realtime?model=gpt-realtime-2025-08-28"
        );
        assert_eq!(req.method, "GET");
        assert_eq!(req.version, http::Version::HTTP_11, "upgrades are HTTP/1.1");
        let h = &req.headers;
        assert_eq!(h["host"], "api.openai.com");
        assert_eq!(h["authorization"], "Bearer sk-upstream");
        assert_eq!(h.get_all("authorization").iter().count(), 1);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "Upgrade");
        assert_eq!(h["sec-websocket-version"], "13");
        assert_eq!(h["sec-websocket-key"], KEY, "the client's, for its accept");
        assert_eq!(
            h["sec-websocket-protocol"],
            "realtime, openai-beta.realtime-v1"
        );
        assert!(h.get("sec-websocket-extensions").is_none());
        assert_eq!(h["openai-beta"], "realtime=v1");
        assert!(
            !h.iter()
                .any(|(_, v)| v.to_str().unwrap_or("").contains("sk-client")),
            "no trace of the client's key"
        );
    }

    #[test]
    fn other_client_headers_stay_at_the_gateway() {
        let req = upstream(
            &[
                ("x-api-key", "sk-client"),
                ("cookie", "session=abc"),
                ("origin", "https://app.example"),
                ("openai-organization", "org-1"),
                ("x-forwarded-for", "10.0.0.1"),
            ],
            "k",
        );
        for name in [
            "x-api-key",
            "cookie",
            "origin",
            "openai-organization",
            "x-forwarded-for",
        ] {
            assert!(req.headers.get(name).is_none(), "{name}");
        }
        assert!(req.headers["user-agent"]
            .to_str()
            .unwrap()
            .starts_with("model-gateway/"));
    }

    #[test]
    fn protocol_header_removed_when_only_the_key_was_offered() {
        let req = upstream(
            &[(
                "sec-websocket-protocol",
                "openai-insecure-api-key.sk-client",
            )],
            "",
        );
        assert!(req.headers.get("sec-websocket-protocol").is_none());
        assert!(
            req.headers.get("authorization").is_none(),
            "no upstream key configured"
        );
    }

    #[test]
    fn repeated_protocol_headers_are_merged() {
        let req = upstream(
            &[
                ("sec-websocket-protocol", "realtime"),
                ("sec-websocket-protocol", "openai-insecure-api-key.sk-x, v2"),
            ],
            "k",
        );
        assert_eq!(req.headers["sec-websocket-protocol"], "realtime, v2");
        assert_eq!(
            req.headers.get_all("sec-websocket-protocol").iter().count(),
            1
        );
    }

    #[test]
    fn the_client_gets_the_upstreams_switching_headers() {
        let mut up = ResponseHeader::build(101, None).unwrap();
        for (k, v) in [
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            ("sec-websocket-protocol", "realtime"),
            ("openai-processing-ms", "12"),
            ("set-cookie", "__cf_bm=abc"),
            ("x-request-id", "req_upstream"),
        ] {
            up.append_header(k, v).unwrap();
        }
        let resp = client_switch(&up, "req_gw").unwrap();
        assert_eq!(resp.status, 101);
        let h = &resp.headers;
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "Upgrade");
        assert_eq!(h["sec-websocket-accept"], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(h["sec-websocket-protocol"], "realtime");
        assert_eq!(h["x-request-id"], "req_gw");
        assert_eq!(h.get_all("x-request-id").iter().count(), 1);
        assert!(h.get("set-cookie").is_none());
        assert!(h.get("openai-processing-ms").is_none());

        let mut bare = ResponseHeader::build(101, None).unwrap();
        bare.append_header("upgrade", "websocket").unwrap();
        let resp = client_switch(&bare, "r").unwrap();
        assert!(resp.headers.get("sec-websocket-protocol").is_none());
    }
}
