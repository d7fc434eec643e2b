//! A Google Cloud service account's OAuth 2.0 access tokens, as Google's "Using OAuth 2.0
//! for Server to Server Applications" (developers.google.com/identity/protocols/oauth2/
//! service-account, "Preparing to make an authorized API call: HTTP/REST") describes:
//! a JWT signed RS256 with the account's private key (header `alg`, `typ`, `kid` the
//! key's id; claims `iss` the account's email, `scope`, `aud` the key file's `token_uri`,
//! `iat`, `exp` at most an hour later) is POSTed as the `assertion` of a
//! `urn:ietf:params:oauth:grant-type:jwt-bearer` grant to `token_uri`, which answers
//! `{access_token, expires_in, token_type}`.
//!
//! One token is cached per account and shared by every request of the channel; it is
//! renewed before it lapses, by one request at a time: the others wait for that refresh
//! and take its token (or its error) instead of asking the token endpoint themselves.

use super::{AuthError, TokenClient};
use base64::Engine;
use parking_lot::Mutex;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde::Deserialize;
use serde_json::{json, Value};

/// The scope of every Google Cloud API.
pub const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Google accepts an assertion valid for at most an hour.
const ASSERTION_LIFETIME_SECS: i64 = 3600;
/// Longest a token is renewed before it lapses (Google's last for an hour).
const RENEW_BEFORE_SECS: i64 = 300;

/// The members of a service account key file (IAM "Create and delete service account
/// keys": the JSON key file) the grant needs; the others are not read.
#[derive(Deserialize)]
pub struct KeyFile {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub client_email: String,
    pub private_key: String,
    #[serde(default)]
    pub private_key_id: Option<String>,
    pub token_uri: String,
}

/// The token endpoint's answer to a grant (RFC 6749 section 5.1).
#[derive(Deserialize)]
struct Grant {
    access_token: String,
    expires_in: i64,
    #[serde(default)]
    token_type: Option<String>,
}

/// The token endpoint's refusal (RFC 6749 section 5.2).
#[derive(Deserialize)]
struct Refusal {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

struct Token {
    /// The whole `Authorization` value.
    bearer: String,
    valid_until: i64,
    renew_at: i64,
}

#[derive(Default)]
struct State {
    token: Option<Token>,
    last_error: Option<String>,
    /// Refreshes that ended, so a request that waited for one knows it ended.
    refreshes: u64,
}

/// A service account that mints its own access tokens.
pub struct ServiceAccount {
    client_email: String,
    key_id: Option<String>,
    key: RsaKeyPair,
    token_uri: String,
    scope: &'static str,
    state: Mutex<State>,
    /// Held by the one request refreshing the token.
    refreshing: tokio::sync::Mutex<()>,
}

impl ServiceAccount {
    /// The account of a key file; `Err`: what is wrong with it (the caller names the file).
    pub fn new(file: KeyFile, scope: &'static str) -> Result<ServiceAccount, String> {
        if let Some(kind) = file.kind.as_deref().filter(|k| *k != "service_account") {
            return Err(format!(
                "`type` is `{kind}`; expected a `service_account` key"
            ));
        }
        if file.client_email.trim().is_empty() {
            return Err("`client_email` is empty".into());
        }
        let uri = url::Url::parse(&file.token_uri)
            .map_err(|e| format!("`token_uri` is not a URL: {e}"))?;
        if !matches!(uri.scheme(), "https" | "http") {
            return Err("`token_uri` is not an http or https URL".into());
        }
        let der = pem_body(&file.private_key, "PRIVATE KEY")
            .ok_or("`private_key` is not a PEM `PRIVATE KEY` (PKCS#8)")?;
        let key = RsaKeyPair::from_pkcs8(&der)
            .map_err(|e| format!("`private_key` is not an RSA PKCS#8 key: {e}"))?;
        Ok(ServiceAccount {
            client_email: file.client_email,
            key_id: file.private_key_id.filter(|k| !k.is_empty()),
            key,
            token_uri: file.token_uri,
            scope,
            state: Mutex::new(State::default()),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// The `Authorization` value at Unix time `now`, minting a token when the cached one
    /// is due for renewal.
    pub async fn bearer(&self, http: &dyn TokenClient, now: i64) -> Result<String, AuthError> {
        let seen = {
            let s = self.state.lock();
            if let Some(t) = s.token.as_ref().filter(|t| now < t.renew_at) {
                return Ok(t.bearer.clone());
            }
            s.refreshes
        };
        let _one = self.refreshing.lock().await;
        {
            let s = self.state.lock();
            if let Some(t) = s.token.as_ref().filter(|t| now < t.renew_at) {
                return Ok(t.bearer.clone());
            }
            // A refresh ended while this request waited, and did not give a fresh
            // token: its error is this request's too (no second try per wave).
            if s.refreshes != seen {
                return still_valid(&s, now).ok_or_else(|| failed(&s));
            }
        }
        let minted = self.mint(http, now).await;
        let mut s = self.state.lock();
        s.refreshes += 1;
        match minted {
            Ok(t) => {
                let bearer = t.bearer.clone();
                s.token = Some(t);
                s.last_error = None;
                Ok(bearer)
            }
            Err(e) => {
                tracing::warn!(account = %self.client_email, error = %crate::store::chain(&e),
                    "service account token refresh failed");
                s.last_error = Some(crate::store::chain(&e));
                // A token that has not lapsed yet still serves.
                still_valid(&s, now).ok_or(e)
            }
        }
    }

    async fn mint(&self, http: &dyn TokenClient, now: i64) -> Result<Token, AuthError> {
        let assertion = self.assertion(now)?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", GRANT_TYPE)
            .append_pair("assertion", &assertion)
            .finish();
        let answer = http.post_form(&self.token_uri, &form).await?;
        if !(200..300).contains(&answer.status) {
            let why = serde_json::from_slice::<Refusal>(&answer.body)
                .map(|r| match r.error_description {
                    Some(d) => format!("{}: {d}", r.error),
                    None => r.error,
                })
                .unwrap_or_else(|_| "no OAuth 2.0 error in the answer".into());
            return Err(AuthError::new(format!(
                "the token endpoint refused the grant with HTTP {} ({why})",
                answer.status
            )));
        }
        let g: Grant = serde_json::from_slice(&answer.body)
            .map_err(|e| AuthError::caused("the token endpoint's answer is not a grant", e))?;
        if g.access_token.is_empty() || g.expires_in <= 0 {
            return Err(AuthError::new(
                "the token endpoint answered an empty or expired token",
            ));
        }
        if g.token_type
            .as_deref()
            .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(AuthError::new(
                "the token endpoint answered a non-bearer token",
            ));
        }
        let valid_until = now + g.expires_in;
        Ok(Token {
            bearer: format!("Bearer {}", g.access_token),
            valid_until,
            renew_at: valid_until - renew_before(g.expires_in),
        })
    }

    /// The signed JWT of the grant.
    fn assertion(&self, now: i64) -> Result<String, AuthError> {
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let mut header = json!({"alg": "RS256", "typ": "JWT"});
        if let Some(kid) = &self.key_id {
            header["kid"] = Value::String(kid.clone());
        }
        let claims = json!({
            "iss": self.client_email,
            "scope": self.scope,
            "aud": self.token_uri,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME_SECS,
        });
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let mut sig = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                input.as_bytes(),
                &mut sig,
            )
            .map_err(|_| AuthError::new("signing the token grant failed (ring gives no cause)"))?;
        Ok(format!("{input}.{}", b64(&sig)))
    }

    /// Drops the cached token (the API refused it: revoked, or its account disabled), so
    /// the next request asks for a new one.
    pub fn forget(&self) {
        self.state.lock().token = None;
    }

    /// What `/admin/channels` shows: the account, the token's expiry (Unix seconds) and
    /// the error of the last refresh when it failed. Never the key or a token.
    pub fn state(&self) -> Value {
        let s = self.state.lock();
        json!({
            "kind": "service_account",
            "client_email": self.client_email,
            "valid_until": s.token.as_ref().map(|t| t.valid_until),
            "last_refresh_error": s.last_error,
        })
    }
}

/// How long before its end a token of `lifetime` seconds is renewed: five minutes for
/// Google's hour-long tokens, a quarter of a short one (at least a second, so a token is
/// never sent in the second it lapses).
fn renew_before(lifetime: i64) -> i64 {
    (lifetime / 4).clamp(1, RENEW_BEFORE_SECS)
}

/// The cached token while it has not lapsed (a second kept for the trip).
fn still_valid(s: &State, now: i64) -> Option<String> {
    s.token
        .as_ref()
        .filter(|t| now + 1 < t.valid_until)
        .map(|t| t.bearer.clone())
}

fn failed(s: &State) -> AuthError {
    AuthError::new(
        s.last_error
            .clone()
            .unwrap_or_else(|| "the token refresh failed".into()),
    )
}

/// The DER inside a PEM block labelled `label` (RFC 7468).
fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem[start..].find(&end)?;
    let b64: String = pem[start..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

#[cfg(test)]
#[path = "service_account_tests.rs"]
mod tests;
