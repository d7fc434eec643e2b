//! Channels that reach a model through a cloud that hosts it (`azure`, `bedrock`,
//! `vertex`): each speaks one of the gateway's wire protocols (or a cloud's own), at a
//! path the cloud builds from the model, authenticated the way the cloud requires
//! (a key header, a signature over the request, or an OAuth 2.0 access token the channel
//! mints and renews itself).
//!
//! The relay asks a channel's [`Cloud`] three things for each request: the wire protocol
//! for a model ([`Cloud::wire`]), where the request goes and what its body becomes
//! ([`Cloud::target`]), and the headers that authenticate it ([`Cloud::authenticate`]),
//! which may fetch a token through the [`TokenClient`] the relay lends it.

pub mod azure;
pub mod bedrock;
pub mod service_account;
pub mod vertex;

use super::raw::{Invalid, RawChannel};
use super::ChannelProtocol;
use crate::protocol::Protocol;
use async_trait::async_trait;
use bytes::Bytes;
use std::fmt;
use std::sync::Arc;

/// One request as a cloud sees it before it is sent: the relay fills it from the
/// translated request, the cloud rewrites what it must.
pub struct Target {
    /// Path and query after the channel's base URL, as the wire protocol has it
    /// (`/v1/chat/completions`, `/v1beta/models/m:streamGenerateContent?alt=sse`).
    pub path: String,
    pub body: Bytes,
    /// The wire protocol the body is written in ([`Cloud::wire`]'s answer); `None` for
    /// media requests (embeddings, images, audio), whose bodies are the OpenAI API's.
    pub wire: Option<Protocol>,
    /// The model name sent upstream (after the channel's model map).
    pub model: String,
    pub stream: bool,
}

/// What the signer of a request sees: the request exactly as it will be sent.
pub struct Outbound<'a> {
    pub method: &'a str,
    /// Path and query as sent (the channel's prefix included).
    pub path: &'a str,
    /// `Host` as sent.
    pub host: &'a str,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
    /// The channel's key picked for this request (keys are used in turn, and one the
    /// upstream refuses is set aside); empty when the channel has none.
    pub key: &'a str,
}

/// Why a cloud could not authenticate a request (a token endpoint that failed or
/// refused): the channel's failure, so its circuit counts it and the next channel of the
/// model is tried.
#[derive(Debug)]
pub struct AuthError {
    pub message: String,
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl AuthError {
    pub fn new(message: impl Into<String>) -> AuthError {
        AuthError {
            message: message.into(),
            source: None,
        }
    }

    pub fn caused(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> AuthError {
        AuthError {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AuthError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// An answer of a token endpoint.
pub struct TokenAnswer {
    pub status: u16,
    pub body: Bytes,
}

/// The HTTP client a cloud mints its tokens with (the relay's connector), lent for each
/// request that needs a token.
#[async_trait]
pub trait TokenClient: Send + Sync {
    /// POSTs `form` (`application/x-www-form-urlencoded`) to `url`.
    async fn post_form(&self, url: &str, form: &str) -> Result<TokenAnswer, AuthError>;
}

/// A cloud's part of a channel.
#[async_trait]
pub trait Cloud: Send + Sync {
    /// The wire protocol chat-style requests from `client` for `model` (the upstream
    /// name) are sent in.
    fn wire(&self, client: Protocol, model: &str) -> Protocol;

    /// Rewrites the request for the cloud: its path, and its body where the cloud wants
    /// it changed. An `Err` is the client's 400 (`param`, message): the cloud cannot
    /// serve this request.
    fn target(&self, t: &mut Target) -> Result<(), crate::protocol::Invalid>;

    /// The headers that authenticate `req`, at Unix time `now`.
    async fn authenticate(
        &self,
        http: &dyn TokenClient,
        req: &Outbound<'_>,
        now: i64,
    ) -> Result<Vec<(&'static str, String)>, AuthError>;

    /// What `/admin/channels` shows of the channel's authentication: its kind, and for a
    /// token its expiry and the last refresh error. Never a secret.
    fn auth_state(&self) -> serde_json::Value;

    /// The upstream refused a request this cloud authenticated (401 or 403): a cached
    /// token it may hold is dropped, so the next request mints a new one.
    fn refused(&self, _status: u16) {}

    /// Secrets of the cloud's own (beyond the channel's keys), masked wherever the
    /// gateway logs an upstream's text.
    fn secrets(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// The cloud part of a channel of `protocol`, from its configuration; `None` for the
/// first-party protocols.
pub fn from_raw(
    protocol: ChannelProtocol,
    raw: &RawChannel,
) -> Result<Option<Arc<dyn Cloud>>, Invalid> {
    if protocol != ChannelProtocol::Azure {
        azure::not_here(raw)?;
    }
    match protocol {
        ChannelProtocol::Bedrock => Ok(Some(Arc::new(bedrock::Bedrock::from_raw(raw)?))),
        ChannelProtocol::Azure => Ok(Some(Arc::new(azure::Azure::from_raw(raw)?))),
        ChannelProtocol::Vertex => Ok(Some(Arc::new(vertex::Vertex::from_raw(raw)?))),
        ChannelProtocol::OpenAi
        | ChannelProtocol::Anthropic
        | ChannelProtocol::Gemini
        | ChannelProtocol::VideoA
        | ChannelProtocol::VideoB
        | ChannelProtocol::DashScope
        | ChannelProtocol::Demo => Ok(None),
    }
}
