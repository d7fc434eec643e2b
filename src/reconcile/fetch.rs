//! Reading a provider's usage report: every page of it from the admin API (one GET at a
//! time over Pingora's connector, as the trace exporter does), or a saved answer.
//!
//! Both usage APIs page alike: `has_more` and an opaque `next_page` cursor passed back
//! as `page`. The loop is bounded: a cursor seen twice or more than [`MAX_PAGES`] pages
//! end it with an error rather than a hang.

use super::error::ReconcileError;
use super::AdminKey;
use bytes::{Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::upstreams::peer::HttpPeer;
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// Pages one run may read (a year of daily buckets is 12 pages of 31).
pub const MAX_PAGES: usize = 1_000;
/// The largest page accepted.
const MAX_BODY: usize = 32 << 20;
/// How much of an error answer a message quotes.
const QUOTED: usize = 300;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A page of a usage report: whether more follow, and the cursor of the next.
pub trait Paged: DeserializeOwned {
    fn has_more(&self) -> bool;
    fn cursor(&self) -> Option<&str>;

    /// The next page's cursor, if there is a next page.
    fn next_page(&self) -> Option<&str> {
        self.cursor().filter(|_| self.has_more())
    }
}

/// A header of the API request; `secret` values are the admin key.
pub struct Header {
    pub name: &'static str,
    pub value: String,
}

/// Every page, from the first URL on; `url(page)` makes the URL of a page from the
/// previous page's cursor (`None` for the first).
pub async fn all_pages<P: Paged>(
    url: impl Fn(Option<&str>) -> Result<url::Url, ReconcileError>,
    headers: &[Header],
    key: &AdminKey,
) -> Result<Vec<P>, ReconcileError> {
    let connector = Connector::new(None);
    let mut pages = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let u = url(cursor.as_deref())?;
        let body = get(&connector, &u, headers, key).await?;
        let page: P = parse_json(&body, &format!("the answer of {}", shown(&u)))?;
        let more = page.has_more();
        let next = page.next_page().map(str::to_string);
        pages.push(page);
        let Some(next) = next else {
            if more {
                return Err(ReconcileError::Pagination {
                    url: shown(&u),
                    message: "the page says more follow but gives no next_page".into(),
                });
            }
            break;
        };
        if !seen.insert(next.clone()) {
            return Err(ReconcileError::Pagination {
                url: shown(&u),
                message: format!("the page cursor `{next}` came back twice"),
            });
        }
        if pages.len() >= MAX_PAGES {
            return Err(ReconcileError::Pagination {
                url: shown(&u),
                message: format!("more than {MAX_PAGES} pages"),
            });
        }
        cursor = Some(next);
    }
    Ok(pages)
}

/// A saved answer: one page, or an array of pages.
pub fn read_pages<P: DeserializeOwned>(path: &Path) -> Result<Vec<P>, ReconcileError> {
    let text = std::fs::read(path).map_err(|source| ReconcileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let what = path.display().to_string();
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        parse_json(&text, &what)
    } else {
        Ok(vec![parse_json(&text, &what)?])
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, ReconcileError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = serde_path_to_error::deserialize(&mut de).map_err(|e| ReconcileError::Parse {
        what: what.to_string(),
        at: e.path().to_string(),
        source: e.into_inner(),
    })?;
    de.end().map_err(|source| ReconcileError::Parse {
        what: what.to_string(),
        at: "the end".into(),
        source,
    })?;
    Ok(v)
}

/// The URL as messages show it: without the page cursor, which is long and says nothing.
fn shown(u: &url::Url) -> String {
    let mut u = u.clone();
    let kept: Vec<(String, String)> = u
        .query_pairs()
        .filter(|(k, _)| k != "page")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    u.query_pairs_mut().clear().extend_pairs(kept);
    u.to_string()
}

fn http_err(
    u: &url::Url,
    context: &'static str,
) -> impl FnOnce(Box<pingora::Error>) -> ReconcileError {
    let url = shown(u);
    move |e| ReconcileError::Http {
        url,
        context,
        source: e,
    }
}

/// One GET; the body of a 2xx answer.
async fn get(
    connector: &Connector,
    u: &url::Url,
    headers: &[Header],
    key: &AdminKey,
) -> Result<Bytes, ReconcileError> {
    let (peer, authority) = peer(u).await?;
    let req = request(u, authority, headers)?;
    let (mut http, _) = connector
        .get_http_session(&peer)
        .await
        .map_err(http_err(u, "cannot connect"))?;
    http.set_read_timeout(Some(READ_TIMEOUT));
    http.write_request_header(Box::new(req))
        .await
        .map_err(http_err(u, "cannot send the request"))?;
    http.finish_request_body()
        .await
        .map_err(http_err(u, "cannot send the request"))?;
    http.read_response_header()
        .await
        .map_err(http_err(u, "no answer"))?;
    let status = http.response_header().map_or(0, |h| h.status.as_u16());
    let mut body = BytesMut::new();
    while let Some(chunk) = http
        .read_response_body()
        .await
        .map_err(http_err(u, "the answer broke off"))?
    {
        if body.len() + chunk.len() > MAX_BODY {
            http.shutdown().await;
            return Err(ReconcileError::Pagination {
                url: shown(u),
                message: format!("a page larger than {MAX_BODY} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    http.shutdown().await;
    if !(200..300).contains(&status) {
        return Err(ReconcileError::Status {
            url: shown(u),
            status,
            body: quote(&body, key),
        });
    }
    Ok(body.freeze())
}

/// The peer `u` names (resolved, with the fetch's timeouts), and its `Host` value.
async fn peer(u: &url::Url) -> Result<(HttpPeer, String), ReconcileError> {
    let bad = |context: &'static str| {
        let url = shown(u);
        move |e: std::io::Error| ReconcileError::Http {
            url,
            context,
            source: Box::new(e),
        }
    };
    let tls = match u.scheme() {
        "https" => true,
        "http" => false,
        s => {
            return Err(ReconcileError::Argument {
                flag: "--base-url",
                message: format!("scheme `{s}` is not http or https"),
            })
        }
    };
    let host = u
        .host_str()
        .ok_or_else(|| ReconcileError::Argument {
            flag: "--base-url",
            message: "has no host".into(),
        })?
        .trim_matches(['[', ']'])
        .to_string();
    let port = u
        .port_or_known_default()
        .unwrap_or(if tls { 443 } else { 80 });
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(bad("cannot resolve the host"))?
        .next()
        .ok_or_else(|| {
            bad("cannot resolve the host")(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no address",
            ))
        })?;
    let mut peer = HttpPeer::new(addr, tls, host.clone());
    peer.options.connection_timeout = Some(CONNECT_TIMEOUT);
    peer.options.read_timeout = Some(READ_TIMEOUT);
    let authority = match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host,
    };
    Ok((peer, authority))
}

/// The GET request header for `u`, with the fetch's fixed headers and `headers`.
fn request(
    u: &url::Url,
    authority: String,
    headers: &[Header],
) -> Result<RequestHeader, ReconcileError> {
    let path = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_string(),
    };
    let mut req = RequestHeader::build("GET", path.as_bytes(), Some(headers.len() + 3))
        .map_err(http_err(u, "cannot build the request"))?;
    let fixed = [
        ("host", authority),
        ("accept", "application/json".to_string()),
        (
            "user-agent",
            concat!("model-gateway/", env!("CARGO_PKG_VERSION")).to_string(),
        ),
    ];
    for (name, value) in fixed {
        req.insert_header(name, value)
            .map_err(http_err(u, "cannot build the request"))?;
    }
    for h in headers {
        req.insert_header(h.name, h.value.as_str())
            .map_err(http_err(u, "a header value is not valid"))?;
    }
    Ok(req)
}

/// The start of an error body, on one line, without the admin key.
fn quote(body: &[u8], key: &AdminKey) -> String {
    let text = String::from_utf8_lossy(body);
    let mut text = text.replace(['\r', '\n'], " ");
    if !key.expose().is_empty() {
        text = text.replace(key.expose(), "[admin key]");
    }
    match text.char_indices().nth(QUOTED) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_error_never_holds_the_key_and_stays_short() {
        let key = AdminKey::new("sk-admin-secret".into());
        let q = quote(b"{\"error\":\"bad key sk-admin-secret\"}\n", &key);
        assert_eq!(q, "{\"error\":\"bad key [admin key]\"} ");
        let long = "x".repeat(1000);
        assert_eq!(quote(long.as_bytes(), &key).chars().count(), QUOTED + 1);
    }

    #[test]
    fn messages_show_the_url_without_its_cursor() {
        let u = url::Url::parse("https://h/v1/x?start_time=1&page=abc%3D&limit=31").unwrap();
        assert_eq!(shown(&u), "https://h/v1/x?start_time=1&limit=31");
    }

    #[test]
    fn a_file_holds_one_page_or_several() {
        let dir = std::env::temp_dir().join(format!("reconcile-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let one = dir.join("one.json");
        std::fs::write(&one, "  {\"a\": 1}").unwrap();
        let many = dir.join("many.json");
        std::fs::write(&many, "\n[{\"a\": 1}, {\"a\": 2}]").unwrap();
        let read = |p: &Path| read_pages::<serde_json::Value>(p).unwrap().len();
        assert_eq!((read(&one), read(&many)), (1, 2));
        match read_pages::<serde_json::Value>(&dir.join("absent.json")) {
            Err(e @ ReconcileError::Read { .. }) => {
                assert!(super::super::error::chain(&e).contains("absent.json: "))
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
