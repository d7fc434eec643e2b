//! Azure OpenAI (`protocol: azure`): the OpenAI API at the paths of an Azure resource,
//! authenticated with the resource's `api-key` or a Microsoft Entra ID token.
//!
//! Written from Microsoft's documents (learn.microsoft.com):
//! - "Azure OpenAI in Azure AI Foundry Models REST API reference" (data plane,
//!   inference): `POST {endpoint}/openai/deployments/{deployment-id}/chat/completions
//!   ?api-version=...`, and the same deployment prefix for `embeddings`,
//!   `images/generations`, `images/edits`, `audio/transcriptions`, `audio/translations`
//!   and `audio/speech`; authentication with the `api-key` header or
//!   `Authorization: Bearer` and a Microsoft Entra ID token.
//! - "Azure OpenAI in Azure AI Foundry Models v1 API" (API version lifecycle):
//!   `{endpoint}/openai/v1/...` with the OpenAI API's own paths, the deployment named by
//!   the body's `model`, no `api-version` needed.
//! - "Azure OpenAI Responses API": `{endpoint}/openai/responses?api-version=...` (the
//!   deployment in the body's `model`), or `{endpoint}/openai/v1/responses`.
//! - "Microsoft identity platform and the OAuth 2.0 client credentials flow": the token
//!   request (`grant_type=client_credentials`, `client_id`, `client_secret`, `scope`) and
//!   its answer (`access_token`, `token_type`, `expires_in` in seconds); the scope of
//!   Azure OpenAI is `https://cognitiveservices.azure.com/.default` ("Configure Azure
//!   OpenAI with Microsoft Entra ID authentication").

use super::{AuthError, Cloud, Outbound, Target, TokenClient};
use crate::channels::raw::{invalid, Invalid, RawChannel, RawEntra};
use crate::protocol::Protocol;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

/// The scope an Entra ID token for Azure OpenAI is asked for.
pub const ENTRA_SCOPE: &str = "https://cognitiveservices.azure.com/.default";

/// A token is renewed this long before it lapses (at most half its lifetime).
const RENEW_BEFORE_SECS: i64 = 300;

/// The OpenAI API paths Azure serves under a deployment (and under `/openai/v1/`).
const DEPLOYMENT_OPERATIONS: &[&str] = &[
    "chat/completions",
    "embeddings",
    "images/generations",
    "images/edits",
    "audio/transcriptions",
    "audio/translations",
    "audio/speech",
];

/// Which of Azure's URL styles a channel uses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Style {
    /// `/openai/deployments/{deployment}/...?api-version={version}`.
    Deployment { version: String },
    /// `/openai/v1/...`, the deployment in the body's `model`.
    V1,
}

enum Auth {
    /// The resource's key, in the `api-key` header (the channel's keys, in turn).
    Key,
    Entra(Box<Entra>),
}

/// An `azure` channel's cloud part.
pub struct Azure {
    style: Style,
    auth: Auth,
    responses_api: bool,
}

impl Azure {
    /// Validates the Azure options of a channel (each refusal names its field).
    pub fn from_raw(c: &RawChannel) -> Result<Azure, Invalid> {
        let style = match c.api_version.as_deref().map(str::trim) {
            None | Some("") => {
                return Err(invalid(
                    "api_version",
                    "is required on `azure` channels: a dated version such as `2024-10-21` \
                     (deployment URLs), or `v1` (the v1 API)",
                ))
            }
            Some("v1") => Style::V1,
            Some(v) if is_dated_version(v) => Style::Deployment {
                version: v.to_string(),
            },
            Some(v) => {
                return Err(invalid(
                    "api_version",
                    format!("`{v}`: expected `v1` or a dated version such as `2024-10-21` or `2025-04-01-preview`"),
                ))
            }
        };
        let has_key = !c.api_key.is_empty() || !c.api_keys.is_empty();
        let auth = match &c.entra {
            Some(_) if has_key => {
                return Err(invalid(
                    "entra",
                    "set `entra` or `api_key`/`api_keys`, not both",
                ))
            }
            Some(e) => Auth::Entra(Box::new(Entra::from_raw(e)?)),
            None if has_key => Auth::Key,
            None => {
                return Err(invalid(
                    "api_key",
                    "an `azure` channel needs `api_key` (or `api_keys`) or `entra`",
                ))
            }
        };
        Ok(Azure {
            style,
            auth,
            responses_api: c.responses_api,
        })
    }
}

/// Refuses the Azure options on a channel of another protocol (they would be ignored).
pub fn not_here(c: &RawChannel) -> Result<(), Invalid> {
    if c.api_version.is_some() {
        return Err(invalid("api_version", "only `azure` channels take it"));
    }
    if c.entra.is_some() {
        return Err(invalid("entra", "only `azure` channels take it"));
    }
    Ok(())
}

/// `2024-10-21`, `2025-04-01-preview`.
fn is_dated_version(v: &str) -> bool {
    let date = v.strip_suffix("-preview").unwrap_or(v).as_bytes();
    date.len() == 10
        && date.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
}

/// A deployment name as one path segment.
fn segment(s: &str) -> String {
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

impl Azure {
    /// The Azure path (and query) of an OpenAI API path (`/v1/chat/completions`), for
    /// the deployment `model`; `None` where Azure serves no counterpart.
    fn path_of(&self, path: &str, model: &str) -> Option<String> {
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let op = path.strip_prefix("/v1/")?;
        let served = DEPLOYMENT_OPERATIONS.contains(&op) || op == "responses";
        if !served {
            return None;
        }
        let mut out = match (&self.style, op) {
            (Style::V1, _) => format!("/openai/v1/{op}"),
            (Style::Deployment { version }, "responses") => {
                format!("/openai/responses?api-version={version}")
            }
            (Style::Deployment { version }, _) => format!(
                "/openai/deployments/{}/{op}?api-version={version}",
                segment(model)
            ),
        };
        if let Some(q) = query.filter(|q| !q.is_empty()) {
            out.push(if out.contains('?') { '&' } else { '?' });
            out.push_str(q);
        }
        Some(out)
    }
}

#[async_trait]
impl Cloud for Azure {
    fn wire(&self, client: Protocol, _model: &str) -> Protocol {
        if client == Protocol::Responses && self.responses_api {
            Protocol::Responses
        } else {
            Protocol::Chat
        }
    }

    fn target(&self, t: &mut Target) -> Result<(), crate::protocol::Invalid> {
        match self.path_of(&t.path, &t.model) {
            Some(p) => {
                t.path = p;
                Ok(())
            }
            None => Err(crate::protocol::Invalid {
                param: None,
                message: format!(
                    "This endpoint (`{}`) is not served by Azure OpenAI.",
                    t.path.split('?').next().unwrap_or_default()
                ),
            }),
        }
    }

    async fn authenticate(
        &self,
        http: &dyn TokenClient,
        req: &Outbound<'_>,
        now: i64,
    ) -> Result<Vec<(&'static str, String)>, AuthError> {
        match &self.auth {
            Auth::Key if req.key.is_empty() => Err(AuthError::new("the channel has no key")),
            Auth::Key => Ok(vec![("api-key", req.key.to_string())]),
            Auth::Entra(e) => Ok(vec![(
                "authorization",
                format!("Bearer {}", e.token(http, now).await?),
            )]),
        }
    }

    fn auth_state(&self) -> serde_json::Value {
        let style = match &self.style {
            Style::V1 => "v1".to_string(),
            Style::Deployment { version } => version.clone(),
        };
        match &self.auth {
            Auth::Key => json!({"kind": "api_key", "api_version": style}),
            Auth::Entra(e) => {
                let mut v = e.state();
                v["api_version"] = json!(style);
                v
            }
        }
    }

    fn refused(&self, _status: u16) {
        if let Auth::Entra(e) = &self.auth {
            e.forget();
        }
    }

    fn secrets(&self) -> Vec<&str> {
        match &self.auth {
            Auth::Key => Vec::new(),
            Auth::Entra(e) => vec![e.client_secret.as_str()],
        }
    }
}

/// A Microsoft Entra ID application's tokens: the current one cached, renewed before it
/// lapses by one request at a time while the others wait for (or, while it is still
/// valid, keep using) the current one.
pub struct Entra {
    tenant_id: String,
    client_id: String,
    client_secret: String,
    token_url: String,
    state: parking_lot::Mutex<TokenState>,
    /// Held by the one request that asks the token endpoint.
    refreshing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct TokenState {
    token: Option<Token>,
    last_error: Option<String>,
    /// Refreshes finished (either way): a request that waited for one reads its outcome
    /// instead of asking again.
    rounds: u64,
}

struct Token {
    value: String,
    /// Unix time the token lapses.
    valid_until: i64,
    /// Unix time from which it is renewed.
    renew_at: i64,
}

/// The token endpoint's answer (client credentials flow, "Successful response").
#[derive(Deserialize)]
struct Granted {
    access_token: String,
    /// Seconds; a number, or a numeric string as some endpoints write it.
    expires_in: Seconds,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Number(i64),
    Text(String),
}

/// The token endpoint's refusal ("Error response": `error`, `error_description`); only
/// the code is kept, the description goes nowhere.
#[derive(Deserialize)]
struct Refused {
    error: String,
}

impl Entra {
    fn from_raw(e: &RawEntra) -> Result<Entra, Invalid> {
        for (field, value) in [
            ("entra.tenant_id", &e.tenant_id),
            ("entra.client_id", &e.client_id),
            ("entra.client_secret", &e.client_secret),
        ] {
            if value.trim().is_empty() {
                return Err(invalid(field, "must not be empty"));
            }
        }
        let token_url = match &e.token_url {
            Some(u) => {
                let parsed = url::Url::parse(u)
                    .map_err(|err| invalid("entra.token_url", format!("not a URL: {err}")))?;
                if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                    return Err(invalid("entra.token_url", "must be an http or https URL"));
                }
                u.clone()
            }
            None => format!(
                "https://login.microsoftonline.com/{}/oauth2/v2.0/token",
                segment(e.tenant_id.trim())
            ),
        };
        Ok(Entra {
            tenant_id: e.tenant_id.trim().to_string(),
            client_id: e.client_id.trim().to_string(),
            client_secret: e.client_secret.trim().to_string(),
            token_url,
            state: parking_lot::Mutex::new(TokenState::default()),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// A token valid at `now`: the cached one until it is due for renewal, else a new
    /// one. A failed renewal keeps using a token that has not lapsed yet.
    async fn token(&self, http: &dyn TokenClient, now: i64) -> Result<String, AuthError> {
        let seen = {
            let s = self.state.lock();
            if let Some(t) = s.token.as_ref().filter(|t| now < t.renew_at) {
                return Ok(t.value.clone());
            }
            s.rounds
        };
        let _turn = match self.refreshing.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                // Another request is renewing: a token still valid serves meanwhile.
                if let Some(v) = self.valid(now) {
                    return Ok(v);
                }
                self.refreshing.lock().await
            }
        };
        {
            let s = self.state.lock();
            if s.rounds != seen {
                // A renewal finished while this request waited: its outcome stands.
                return match s.token.as_ref().filter(|t| now < t.valid_until) {
                    Some(t) => Ok(t.value.clone()),
                    None => Err(AuthError::new(
                        s.last_error
                            .clone()
                            .unwrap_or_else(|| "no Entra ID token".into()),
                    )),
                };
            }
        }
        let fetched = self.fetch(http, now).await;
        let mut s = self.state.lock();
        s.rounds += 1;
        match fetched {
            Ok(t) => {
                let v = t.value.clone();
                s.token = Some(t);
                s.last_error = None;
                Ok(v)
            }
            Err(e) => {
                s.last_error = Some(e.to_string());
                match s.token.as_ref().filter(|t| now < t.valid_until) {
                    Some(t) => {
                        tracing::warn!(error = %crate::store::chain(&e),
                            "Entra ID token renewal failed; the current token serves until it lapses");
                        Ok(t.value.clone())
                    }
                    None => Err(e),
                }
            }
        }
    }

    /// Azure refused the token (revoked, or its lifetime misjudged): the next request
    /// asks for a new one.
    fn forget(&self) {
        if self.state.lock().token.take().is_some() {
            tracing::warn!(client_id = %self.client_id,
                "Azure refused the Entra ID token; a new one is asked for");
        }
    }

    fn valid(&self, now: i64) -> Option<String> {
        let s = self.state.lock();
        s.token
            .as_ref()
            .filter(|t| now < t.valid_until)
            .map(|t| t.value.clone())
    }

    async fn fetch(&self, http: &dyn TokenClient, now: i64) -> Result<Token, AuthError> {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("client_id", &self.client_id)
            .append_pair("client_secret", &self.client_secret)
            .append_pair("scope", ENTRA_SCOPE)
            .finish();
        let answer = http.post_form(&self.token_url, &form).await?;
        if !(200..300).contains(&answer.status) {
            let code = serde_json::from_slice::<Refused>(&answer.body)
                .map(|r| format!(" `{}`", r.error))
                .unwrap_or_default();
            return Err(AuthError::new(format!(
                "the Entra ID token endpoint refused the grant: HTTP {}{code}",
                answer.status
            )));
        }
        let g: Granted = serde_json::from_slice(&answer.body).map_err(|e| {
            AuthError::caused("the Entra ID token endpoint's answer has no token", e)
        })?;
        let lifetime = match g.expires_in {
            Seconds::Number(n) => Some(n),
            Seconds::Text(t) => t.trim().parse().ok(),
        }
        .filter(|n| *n > 0)
        .ok_or_else(|| AuthError::new("the Entra ID token endpoint gave no usable `expires_in`"))?;
        if g.access_token.is_empty() {
            return Err(AuthError::new(
                "the Entra ID token endpoint gave an empty token",
            ));
        }
        let valid_until = now.saturating_add(lifetime);
        Ok(Token {
            value: g.access_token,
            valid_until,
            renew_at: valid_until - RENEW_BEFORE_SECS.min(lifetime / 2),
        })
    }

    /// What `/admin/channels` shows: never the secret, nor the token.
    fn state(&self) -> serde_json::Value {
        let s = self.state.lock();
        let valid_until = s.token.as_ref().and_then(|t| {
            chrono::DateTime::from_timestamp(t.valid_until, 0)
                .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        });
        json!({
            "kind": "entra",
            "tenant_id": self.tenant_id,
            "client_id": self.client_id,
            "valid_until": valid_until,
            "last_refresh_error": s.last_error,
        })
    }
}

/// Azure's refusal of a prompt by its content filter ("Azure OpenAI content filtering",
/// "Scenario details": HTTP 400 with `error.code` `content_filter`, the categories in
/// `error.innererror.content_filter_result`, `innererror.code`
/// `ResponsibleAIPolicyViolation`).
pub fn refused_by_filter(status: u16, body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Envelope {
        error: Failure,
    }
    #[derive(Deserialize)]
    struct Failure {
        #[serde(default)]
        code: Option<String>,
        #[serde(default)]
        innererror: Option<Inner>,
    }
    #[derive(Deserialize)]
    struct Inner {
        #[serde(default)]
        code: Option<String>,
    }
    if status != 400 {
        return false;
    }
    let Ok(Envelope { error }) = serde_json::from_slice::<Envelope>(body) else {
        return false;
    };
    error.code.as_deref() == Some("content_filter")
        || error.innererror.and_then(|i| i.code).as_deref() == Some("ResponsibleAIPolicyViolation")
}

#[cfg(test)]
#[path = "azure_tests.rs"]
mod tests;
