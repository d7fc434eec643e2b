//! Request signing for the two video vendors whose APIs take a key pair instead of a bearer
//! key. Pure apart from the token cache: the caller passes the clock.
//!
//! - Kling (`video-a`): every request carries `Authorization: Bearer <JWT>`, the token an
//!   HS256 JWT (RFC 7519) signed with the secret key, `iss` the access key, `exp` at most
//!   30 minutes ahead and `nbf` 5 s back for clock skew (Kling AI API Specification,
//!   "General Information: API Authentication", app.klingai.com/global/dev/document-api).
//!   A token is reused until 5 minutes before it lapses.
//! - Volcengine (`video-b`, Jimeng on the visual API): every request is signed with the
//!   HMAC-SHA256 signature of Volcengine's "签名方法" (volcengine.com/docs/6369/67269):
//!   a canonical request (method, path, sorted query, signed headers, body hash) hashed
//!   into a string to sign, signed with a key derived from the secret key through the
//!   date, region, service and `request`.

use base64::Engine;
use parking_lot::Mutex;
use ring::{digest, hmac};
use std::fmt;

/// Lifetime of a Kling token, and how long before its end a new one is made.
const JWT_LIFETIME_SECS: i64 = 1800;
const JWT_RENEW_BEFORE_SECS: i64 = 300;
/// Kling's example backdates `nbf` by 5 s so a server clock slightly behind accepts it.
const JWT_NOT_BEFORE_SKEW_SECS: i64 = 5;

/// The visual API's signing scope (the Jimeng video documents name both).
pub const VOLCENGINE_REGION: &str = "cn-north-1";
pub const VOLCENGINE_SERVICE: &str = "cv";

/// How a channel proves who it is, beyond a bearer key.
pub enum Signer {
    Kling(KlingJwt),
    Volcengine(Volcengine),
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the keys: the configuration is printed in logs and errors.
        match self {
            Signer::Kling(_) => f.write_str("Signer::Kling(..)"),
            Signer::Volcengine(_) => f.write_str("Signer::Volcengine(..)"),
        }
    }
}

/// What a request looks like to the signer.
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query as sent (the channel's prefix included).
    pub path: &'a str,
    /// `Host` as sent.
    pub host: &'a str,
    /// `Content-Type` as sent; `None` for a request without a body.
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

impl Signer {
    /// The headers that authenticate `req`, at Unix time `now`.
    pub fn headers(&self, req: &Request<'_>, now: i64) -> Vec<(&'static str, String)> {
        match self {
            Signer::Kling(k) => vec![("authorization", format!("Bearer {}", k.token(now)))],
            Signer::Volcengine(v) => v.sign(req, now),
        }
    }
}

/// Kling's token maker, with the current token cached.
pub struct KlingJwt {
    access_key: String,
    secret: hmac::Key,
    cached: Mutex<Option<(String, i64)>>,
}

impl KlingJwt {
    pub fn new(access_key: &str, secret_key: &str) -> KlingJwt {
        KlingJwt {
            access_key: access_key.to_string(),
            secret: hmac::Key::new(hmac::HMAC_SHA256, secret_key.as_bytes()),
            cached: Mutex::new(None),
        }
    }

    /// A token valid at `now` for at least 5 more minutes.
    pub fn token(&self, now: i64) -> String {
        let mut cached = self.cached.lock();
        if let Some((token, exp)) = cached.as_ref() {
            if exp - now > JWT_RENEW_BEFORE_SECS {
                return token.clone();
            }
        }
        let exp = now + JWT_LIFETIME_SECS;
        let token = self.mint(now, exp);
        *cached = Some((token.clone(), exp));
        token
    }

    fn mint(&self, now: i64, exp: i64) -> String {
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
        let claims = serde_json::json!({
            "iss": self.access_key,
            "exp": exp,
            "nbf": now - JWT_NOT_BEFORE_SKEW_SECS,
        });
        let payload = b64(claims.to_string().as_bytes());
        let signing_input = format!("{header}.{payload}");
        let sig = hmac::sign(&self.secret, signing_input.as_bytes());
        format!("{signing_input}.{}", b64(sig.as_ref()))
    }
}

/// Volcengine's signature with one key pair.
pub struct Volcengine {
    access_key: String,
    secret_key: String,
    region: &'static str,
    service: &'static str,
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(digest::digest(&digest::SHA256, data))
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

/// RFC 3986 encoding: everything but the unreserved characters.
fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The query with every name and value encoded, sorted by name (values of one name keep
/// their order).
pub fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (uri_encode(&k), uri_encode(&v)))
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let parts: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join("&")
}

impl Volcengine {
    pub fn new(access_key: &str, secret_key: &str) -> Volcengine {
        Volcengine {
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
            region: VOLCENGINE_REGION,
            service: VOLCENGINE_SERVICE,
        }
    }

    fn sign(&self, req: &Request<'_>, now: i64) -> Vec<(&'static str, String)> {
        let when = chrono::DateTime::from_timestamp(now, 0).unwrap_or_default();
        let x_date = when.format("%Y%m%dT%H%M%SZ").to_string();
        let short_date = &x_date[..8];
        let body_hash = sha256_hex(req.body);
        let (path, query) = req.path.split_once('?').unwrap_or((req.path, ""));
        let path = if path.is_empty() { "/" } else { path };
        // Header names sorted, lower case; `host` and `x-date` are required.
        let mut headers: Vec<(&str, &str)> = Vec::with_capacity(4);
        if let Some(ct) = req.content_type {
            headers.push(("content-type", ct.trim()));
        }
        headers.push(("host", req.host.trim()));
        headers.push(("x-content-sha256", &body_hash));
        headers.push(("x-date", &x_date));
        let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let signed_headers: Vec<&str> = headers.iter().map(|(k, _)| *k).collect();
        let signed_headers = signed_headers.join(";");
        let canonical_request = format!(
            "{}\n{path}\n{}\n{canonical_headers}\n{signed_headers}\n{body_hash}",
            req.method.to_ascii_uppercase(),
            canonical_query(query),
        );
        let scope = format!("{short_date}/{}/{}/request", self.region, self.service);
        let string_to_sign = format!(
            "HMAC-SHA256\n{x_date}\n{scope}\n{}",
            sha256_hex(canonical_request.as_bytes())
        );
        let k_date = hmac_sha256(self.secret_key.as_bytes(), short_date.as_bytes());
        let k_region = hmac_sha256(&k_date, self.region.as_bytes());
        let k_service = hmac_sha256(&k_region, self.service.as_bytes());
        let k_signing = hmac_sha256(&k_service, b"request");
        let signature = hex::encode(hmac_sha256(&k_signing, string_to_sign.as_bytes()));
        vec![
            ("x-date", x_date.clone()),
            ("x-content-sha256", body_hash.clone()),
            (
                "authorization",
                format!(
                    "HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
                    self.access_key
                ),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64d(s: &str) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .unwrap()
    }

    #[test]
    fn kling_token_is_an_hs256_jwt_with_the_documented_claims() {
        let k = KlingJwt::new("ak-1", "sk-1");
        let now = 1_700_000_000;
        let t = k.token(now);
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value = serde_json::from_slice(&b64d(parts[0])).unwrap();
        assert_eq!(header["alg"], "HS256");
        assert_eq!(header["typ"], "JWT");
        let claims: serde_json::Value = serde_json::from_slice(&b64d(parts[1])).unwrap();
        assert_eq!(claims["iss"], "ak-1");
        assert_eq!(claims["exp"], now + 1800);
        assert_eq!(claims["nbf"], now - 5);
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"sk-1");
        let input = format!("{}.{}", parts[0], parts[1]);
        assert!(hmac::verify(&key, input.as_bytes(), &b64d(parts[2])).is_ok());
        let wrong = hmac::Key::new(hmac::HMAC_SHA256, b"sk-2");
        assert!(hmac::verify(&wrong, input.as_bytes(), &b64d(parts[2])).is_err());
    }

    #[test]
    fn kling_token_is_reused_then_renewed_before_it_lapses() {
        let k = KlingJwt::new("ak", "sk");
        let t0 = k.token(1000);
        assert_eq!(k.token(1000 + 1000), t0, "24 minutes left: reused");
        let t1 = k.token(1000 + 1500);
        assert_ne!(t1, t0, "5 minutes left: renewed");
        let claims: serde_json::Value =
            serde_json::from_slice(&b64d(t1.split('.').nth(1).unwrap())).unwrap();
        assert_eq!(claims["exp"], 2500 + 1800);
    }

    #[test]
    fn canonical_query_is_sorted_and_encoded() {
        assert_eq!(
            canonical_query("Version=2022-08-31&Action=CVSync2AsyncSubmitTask"),
            "Action=CVSync2AsyncSubmitTask&Version=2022-08-31"
        );
        assert_eq!(canonical_query("b=a b&a=x%2Fy"), "a=x%2Fy&b=a%20b");
        assert_eq!(canonical_query(""), "");
    }

    #[test]
    fn volcengine_signature_covers_method_path_query_headers_and_body() {
        let v = Volcengine::new("AKLT-test", "c2VjcmV0");
        let req = Request {
            method: "POST",
            path: "/?Action=CVSync2AsyncSubmitTask&Version=2022-08-31",
            host: "visual.volcengineapi.com",
            content_type: Some("application/json"),
            body: br#"{"req_key":"jimeng_t2v_v30"}"#,
        };
        let now = 1_631_521_085; // 2021-09-13T08:18:05Z
        let h = v.sign(&req, now);
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).unwrap().1.clone();
        assert_eq!(get("x-date"), "20210913T081805Z");
        assert_eq!(get("x-content-sha256"), sha256_hex(req.body));
        let auth = get("authorization");
        assert!(
            auth.starts_with(
                "HMAC-SHA256 Credential=AKLT-test/20210913/cn-north-1/cv/request, SignedHeaders=content-type;host;x-content-sha256;x-date, Signature="
            ),
            "{auth}"
        );
        let sig = auth.rsplit("Signature=").next().unwrap();
        assert_eq!(sig.len(), 64);
        // Every part of the request is covered.
        let other = |r: Request<'_>| v.sign(&r, now)[2].1.clone();
        for changed in [
            Request {
                method: "GET",
                ..req
            },
            Request {
                path: "/?Action=CVSync2AsyncGetResult&Version=2022-08-31",
                ..req
            },
            Request {
                host: "other.example",
                ..req
            },
            Request { body: b"{}", ..req },
        ] {
            assert_ne!(other(changed), auth);
        }
        assert_ne!(v.sign(&req, now + 1)[2].1, auth);
        assert_eq!(v.sign(&req, now)[2].1, auth, "deterministic");
    }
}
