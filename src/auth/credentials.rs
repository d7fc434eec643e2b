//! Where the key is in a request (spec 5).

use http::HeaderMap;

/// Which credential forms a path accepts, beyond `Authorization`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Accepts {
    /// `x-api-key` (spec 5.3: `/v1/models` and `/v1/messages`).
    pub x_api_key: bool,
    /// `x-gen-api-key` / `x-goog-api-key` header and `?key=` (generate-content paths).
    pub gen_key: bool,
    /// `Sec-WebSocket-Protocol: openai-insecure-api-key.<key>` (`/v1/realtime`, where
    /// browsers cannot set headers).
    pub ws_protocol: bool,
}

/// The subprotocol entry that carries a key on WebSocket upgrades.
pub const WS_KEY_PREFIX: &str = "openai-insecure-api-key.";

/// The credential as sent, or `None` when the request carries none.
pub fn extract<'a>(
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    accepts: Accepts,
) -> Option<String> {
    if let Some(v) = headers.get(http::header::AUTHORIZATION) {
        if let Ok(s) = v.to_str() {
            let s = s.trim();
            // spec 5.1: the scheme word is case-insensitive; 5.2: a bare key is accepted.
            let key = match s.split_once(' ') {
                Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
                _ => s,
            };
            if !key.is_empty() {
                return Some(key.to_string());
            }
        }
    }
    if accepts.x_api_key {
        if let Some(k) = header_str(headers, "x-api-key") {
            return Some(k);
        }
    }
    if accepts.gen_key {
        for name in ["x-gen-api-key", "x-goog-api-key"] {
            if let Some(k) = header_str(headers, name) {
                return Some(k);
            }
        }
        if let Some(k) = query_param(query, "key") {
            return Some(k);
        }
    }
    if accepts.ws_protocol {
        let offered = header_str(headers, "sec-websocket-protocol").unwrap_or_default();
        if let Some(k) = offered
            .split(',')
            .find_map(|p| p.trim().strip_prefix(WS_KEY_PREFIX))
            .filter(|k| !k.is_empty())
        {
            return Some(k.to_string());
        }
    }
    None
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The first value of a query parameter, percent-decoded.
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    let q = query?;
    form_urlencoded_pairs(q)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

fn form_urlencoded_pairs(q: &str) -> impl Iterator<Item = (String, String)> + '_ {
    url::form_urlencoded::parse(q.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    const ALL: Accepts = Accepts {
        x_api_key: true,
        gen_key: true,
        ws_protocol: true,
    };

    #[test]
    fn websocket_subprotocol_key() {
        let m = h(&[(
            "sec-websocket-protocol",
            "realtime, openai-insecure-api-key.sk-5, openai-beta.realtime-v1",
        )]);
        assert_eq!(extract(&m, None, ALL).as_deref(), Some("sk-5"));
        assert_eq!(extract(&m, None, Accepts::default()), None);
    }

    #[test]
    fn bearer_any_case_and_bare() {
        for v in ["Bearer sk-1", "bearer sk-1", "BEARER  sk-1", "sk-1"] {
            assert_eq!(
                extract(&h(&[("authorization", v)]), None, Accepts::default()).as_deref(),
                Some("sk-1")
            );
        }
    }

    #[test]
    fn x_api_key_only_where_accepted() {
        let m = h(&[("x-api-key", "sk-2")]);
        assert_eq!(extract(&m, None, Accepts::default()), None);
        assert_eq!(extract(&m, None, ALL).as_deref(), Some("sk-2"));
    }

    #[test]
    fn gen_key_forms() {
        assert_eq!(
            extract(&h(&[("x-goog-api-key", "sk-3")]), None, ALL).as_deref(),
            Some("sk-3")
        );
        assert_eq!(
            extract(&h(&[("x-gen-api-key", "sk-3")]), None, ALL).as_deref(),
            Some("sk-3")
        );
        assert_eq!(
            extract(&HeaderMap::new(), Some("alt=sse&key=sk-4"), ALL).as_deref(),
            Some("sk-4")
        );
        assert_eq!(
            extract(&HeaderMap::new(), Some("key=sk-4"), Accepts::default()),
            None
        );
    }
}
