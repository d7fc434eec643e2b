//! A channel as the configuration file spells it (stage one of the configuration: plain
//! data, unknown fields refused). The configuration reads a list of these; this module
//! validates each into a [`Channel`](super::Channel) and says which field is wrong, so
//! the configuration never needs to know what a channel is made of.

use crate::redact::Hidden;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// A field of a channel that is wrong: its path inside the channel (`base_url`,
/// `models[2]`, `model_map.gpt-5`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

pub(super) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// One channel as the configuration file has it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChannel {
    pub name: String,
    pub protocol: String,
    /// Where the upstream is. None on `demo` channels (their upstream is in the process);
    /// on `vertex` channels the default is their location's host.
    #[serde(default)]
    pub base_url: String,
    #[serde(default)]
    pub api_key: String,
    /// Several upstream keys, used in turn (instead of `api_key`).
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// `video-a` (Kling) and `video-b` (Volcengine) channels: the key pair that signs
    /// each request, instead of `api_key`. Give them as `${VAR}`.
    #[serde(default)]
    pub access_key: String,
    #[serde(default)]
    pub secret_key: String,
    pub models: Vec<String>,
    #[serde(default)]
    pub model_map: BTreeMap<String, String>,
    /// `openai` channels only: the upstream serves `/v1/responses` itself.
    #[serde(default)]
    pub responses_api: bool,
    /// `openai` channels: how the upstream spells the chat output limit
    /// (`max_completion_tokens`, the default, or `max_tokens`).
    #[serde(default)]
    pub max_tokens_field: Option<String>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// Longest wait for any single read from the upstream (first byte included).
    #[serde(default = "default_read_timeout")]
    pub read_timeout_secs: u64,
    /// This channel's circuit options; default: the top-level `circuit`.
    #[serde(default)]
    pub circuit: Option<RawCircuit>,
    /// Prices of the models this channel serves that differ from the top-level `prices`
    /// (a cloud's own rates, a discount contract), whole prices by model.
    #[serde(default)]
    pub prices: BTreeMap<String, crate::billing::raw::RawPrice>,
    /// The top-level prices times this, for the models without a price of their own here.
    #[serde(default)]
    pub price_multiplier: Option<f64>,
    /// `azure`: the API version sent as `api-version` (`2024-10-21`), or `v1` for the v1
    /// API (`/openai/v1/...`).
    #[serde(default)]
    pub api_version: Option<String>,
    /// `azure`: a Microsoft Entra ID application whose tokens authenticate the channel
    /// (client-credentials grant), instead of `api_key`.
    #[serde(default)]
    pub entra: Option<RawEntra>,
    /// `bedrock`: the AWS region (`us-east-1`). The key pair is `access_key` and
    /// `secret_key`; `api_key` is a Bedrock API key sent as a bearer token instead.
    #[serde(default)]
    pub region: Option<String>,
    /// `bedrock`: the session token of temporary AWS credentials, with the key pair.
    #[serde(default)]
    pub session_token: String,
    /// `vertex`: the Google Cloud project and location (`us-central1`, or `global`).
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub location: Option<String>,
    /// `vertex`: the service account's key file (JSON), whose key signs the token grant.
    #[serde(default)]
    pub credentials_file: Option<String>,
    /// `demo`: how fast the demo model streams, in tokens a second.
    #[serde(default)]
    pub tokens_per_second: Option<u32>,
    /// `https://` channels: offer HTTP/2 by ALPN (with HTTP/1.1), so concurrent requests
    /// share a few connections as streams; an upstream that picks HTTP/1.1 gets it.
    #[serde(default)]
    pub http2: bool,
    /// With `http2`: streams one connection carries at once (the upstream's own limit
    /// still applies); default 100.
    #[serde(default)]
    pub http2_max_streams: Option<u32>,
    /// `https://` channels: a PEM bundle of the CAs the upstream's certificate is verified
    /// against, instead of the system roots (a private upstream).
    #[serde(default)]
    pub ca_file: Option<String>,
}

/// A Microsoft Entra ID application (`azure` channels). Give the secret as `${VAR}`.
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct RawEntra {
    pub tenant_id: String,
    pub client_id: String,
    pub client_secret: String,
    /// The token endpoint; default Microsoft's for the tenant
    /// (`https://login.microsoftonline.com/{tenant_id}/oauth2/v2.0/token`).
    #[serde(default)]
    pub token_url: Option<String>,
}

/// Everything but the secret.
impl fmt::Debug for RawEntra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawEntra")
            .field("tenant_id", &self.tenant_id)
            .field("client_id", &self.client_id)
            .field("client_secret", &Hidden(&self.client_secret))
            .field("token_url", &self.token_url)
            .finish()
    }
}

/// Passive health: when a failing channel is taken out of rotation (per channel, or the
/// top-level default).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawCircuit {
    /// Consecutive failures (connect errors, timeouts, 5xx, 429) that open the circuit;
    /// 0 never opens it.
    pub failures: u32,
    /// How long an open circuit keeps the channel out before one probe request is let
    /// through.
    pub cooldown_secs: u64,
}

impl Default for RawCircuit {
    fn default() -> Self {
        RawCircuit {
            failures: 5,
            cooldown_secs: 30,
        }
    }
}

/// A channel with every optional field at its configuration default (and nothing in
/// the required ones), for channels the gateway makes itself.
impl Default for RawChannel {
    fn default() -> RawChannel {
        RawChannel {
            name: String::new(),
            protocol: String::new(),
            base_url: String::new(),
            api_key: String::new(),
            api_keys: Vec::new(),
            access_key: String::new(),
            secret_key: String::new(),
            models: Vec::new(),
            model_map: BTreeMap::new(),
            responses_api: false,
            max_tokens_field: None,
            priority: 0,
            weight: default_weight(),
            connect_timeout_secs: default_connect_timeout(),
            read_timeout_secs: default_read_timeout(),
            circuit: None,
            prices: BTreeMap::new(),
            price_multiplier: None,
            api_version: None,
            entra: None,
            region: None,
            session_token: String::new(),
            project: None,
            location: None,
            credentials_file: None,
            tokens_per_second: None,
            http2: false,
            http2_max_streams: None,
            ca_file: None,
        }
    }
}

fn default_weight() -> u32 {
    1
}

fn default_connect_timeout() -> u64 {
    10
}

fn default_read_timeout() -> u64 {
    300
}

/// Everything but the key's value.
impl fmt::Debug for RawChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawChannel")
            .field("name", &self.name)
            .field("protocol", &self.protocol)
            .field("base_url", &self.base_url)
            .field("api_key", &Hidden(&self.api_key))
            .field(
                "api_keys",
                &self.api_keys.iter().map(|k| Hidden(k)).collect::<Vec<_>>(),
            )
            .field("access_key", &Hidden(&self.access_key))
            .field("secret_key", &Hidden(&self.secret_key))
            .field("models", &self.models)
            .field("model_map", &self.model_map)
            .field("responses_api", &self.responses_api)
            .field("max_tokens_field", &self.max_tokens_field)
            .field("priority", &self.priority)
            .field("weight", &self.weight)
            .field("connect_timeout_secs", &self.connect_timeout_secs)
            .field("read_timeout_secs", &self.read_timeout_secs)
            .field("circuit", &self.circuit)
            .field("api_version", &self.api_version)
            .field("entra", &self.entra)
            .field("region", &self.region)
            .field("session_token", &Hidden(&self.session_token))
            .field("project", &self.project)
            .field("location", &self.location)
            .field("credentials_file", &self.credentials_file)
            .field("tokens_per_second", &self.tokens_per_second)
            .field("http2", &self.http2)
            .field("http2_max_streams", &self.http2_max_streams)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}
