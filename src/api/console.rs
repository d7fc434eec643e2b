//! The console's files, built into the binary (`console/dist/`, committed, so building
//! the gateway never needs Node), and the headers every admin listener answer carries.
//!
//! The page is a single script and a single stylesheet, both from this origin: the
//! Content-Security-Policy allows nothing else (no inline script or style, no other
//! host, no framing), and the admin token travels as a bearer header set by the script,
//! never as a cookie another site's page could make the browser send.

use crate::errors::GatewayError;
use http::{Method, Response};
use pingora::http::RequestHeader;

/// Only this origin's script and stylesheet; data only from this origin's API.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Headers on every answer of the admin listener, page or API.
pub const SECURITY: [(&str, &str); 5] = [
    ("content-security-policy", CSP),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
];

struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// A fingerprint of the body: the files keep their names from build to build, so a
    /// browser revalidates them (`no-cache`) and gets a 304 while they are unchanged.
    etag: u64,
}

/// FNV-1a, computed at compile time.
const fn fingerprint(b: &[u8]) -> u64 {
    crate::ids::fnv1a(b)
}

macro_rules! asset {
    ($path:expr, $file:expr, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/console/dist/", $file)),
            etag: fingerprint(include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/console/dist/",
                $file
            ))),
        }
    };
}

const HTML: &str = "text/html; charset=utf-8";

static ASSETS: [Asset; 5] = [
    asset!("/console", "index.html", HTML),
    asset!("/console/", "index.html", HTML),
    asset!(
        "/console/assets/app.js",
        "assets/app.js",
        "text/javascript; charset=utf-8"
    ),
    asset!(
        "/console/assets/app.css",
        "assets/app.css",
        "text/css; charset=utf-8"
    ),
    asset!("/console/favicon.svg", "favicon.svg", "image/svg+xml"),
];

/// What the admin listener sends: a status, a body, and its headers.
pub struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    cache: &'static str,
    etag: Option<String>,
    location: Option<&'static str>,
}

impl Reply {
    pub fn json(status: u16, body: Vec<u8>) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body,
            // Keys and spend are nobody's to cache.
            cache: "no-store",
            etag: None,
            location: None,
        }
    }

    /// An answer of another kind (metrics text, probes), not to be cached either.
    pub fn plain(status: u16, content_type: &'static str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            content_type,
            body,
            cache: "no-store",
            etag: None,
            location: None,
        }
    }

    fn error(e: GatewayError, request_id: &str) -> Reply {
        Reply::json(
            e.status(),
            e.body(crate::errors::ErrorShape::Default, request_id),
        )
    }

    pub fn into_response(self, request_id: &str) -> Response<Vec<u8>> {
        let mut b = Response::builder()
            .status(self.status)
            .header(http::header::CONTENT_TYPE, self.content_type)
            .header(http::header::CONTENT_LENGTH, self.body.len())
            .header(http::header::CACHE_CONTROL, self.cache)
            .header("x-request-id", request_id);
        for (name, value) in SECURITY {
            b = b.header(name, value);
        }
        if let Some(tag) = self.etag {
            b = b.header(http::header::ETAG, tag);
        }
        if let Some(to) = self.location {
            b = b.header(http::header::LOCATION, to);
        }
        b.body(self.body).unwrap_or_default()
    }
}

/// The console's answer to this request, or `None` when it is not the console's (an API
/// call). `/` leads to the console.
/// `method`: the request's, a `HEAD` read as a `GET` (Pingora leaves the body out).
pub fn asset(req: &RequestHeader, method: &Method, request_id: &str) -> Option<Reply> {
    let path = req.uri.path();
    if path == "/" && method == Method::GET {
        return Some(Reply {
            status: 302,
            content_type: HTML,
            body: Vec::new(),
            cache: "no-cache",
            etag: None,
            location: Some("/console"),
        });
    }
    if path != "/console" && !path.starts_with("/console/") {
        return None;
    }
    let Some(a) = ASSETS.iter().find(|a| a.path == path) else {
        return Some(Reply::error(GatewayError::NotFound, request_id));
    };
    if method != Method::GET {
        return Some(Reply::error(GatewayError::MethodNotAllowed, request_id));
    }
    let etag = format!("\"{:016x}\"", a.etag);
    let fresh = req
        .headers
        .get(http::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    Some(Reply {
        status: if fresh { 304 } else { 200 },
        content_type: a.content_type,
        body: if fresh { Vec::new() } else { a.body.to_vec() },
        cache: "no-cache",
        etag: Some(etag),
        location: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset_of(req: &RequestHeader) -> Option<Reply> {
        asset(req, &req.method, "r")
    }

    fn get(path: &str) -> RequestHeader {
        RequestHeader::build("GET", path.as_bytes(), None).unwrap()
    }

    #[test]
    fn the_page_loads_only_its_own_files() {
        let page = String::from_utf8(ASSETS[0].body.to_vec()).unwrap();
        assert!(page.contains("/console/assets/app.js"), "{page}");
        assert!(page.contains("/console/assets/app.css"), "{page}");
        // No inline script or style: every <script> has a src, and there is no <style>.
        assert_eq!(
            page.matches("<script").count(),
            page.matches(" src=").count()
        );
        assert!(!page.contains("<style"));
        assert!(!page.contains(" style="));
    }

    #[test]
    fn files_are_found_and_revalidated() {
        let r = asset_of(&get("/console/assets/app.js")).unwrap();
        assert_eq!(r.status, 200);
        let tag = r.etag.clone().unwrap();
        let mut again = get("/console/assets/app.js");
        again.insert_header("if-none-match", &tag).unwrap();
        let r = asset_of(&again).unwrap();
        assert_eq!((r.status, r.body.len()), (304, 0));
        assert_eq!(asset_of(&get("/console/nope.js")).unwrap().status, 404);
        assert!(asset_of(&get("/admin/keys")).is_none());
        assert!(asset_of(&get("/consoles")).is_none());
        assert_eq!(asset_of(&get("/")).unwrap().status, 302);
    }
}
