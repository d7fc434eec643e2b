//! Stage one: the YAML file as plain structs. Unknown fields are errors, so a typo in a
//! field name fails `check-config` with its path instead of silently taking a default.

pub use crate::billing::raw::RawPrice;
use crate::channels::raw::RawCircuit;
use crate::channels::RawChannel;
use crate::redact::{self, Hidden};
pub use crate::tls::{RawCertificate, RawTls};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: String,
    pub admin: Option<RawAdmin>,
    pub store: RawStore,
    #[serde(default)]
    pub limits: RawLimits,
    /// Proxies whose `X-Forwarded-For` is believed (CIDRs or addresses).
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Worker threads of the client listener; default: one per core.
    pub threads: Option<usize>,
    /// How long a key record is served from the in-process cache before it is re-read.
    /// Bounds how long a revoke or update takes to reach every instance.
    #[serde(default = "default_key_cache_ttl")]
    pub key_cache_ttl_secs: u64,
    #[serde(default)]
    pub channels: Vec<RawChannel>,
    #[serde(default)]
    pub prices: BTreeMap<String, RawPrice>,
    /// The three image model families of spec 8, by model name.
    #[serde(default)]
    pub image_families: RawImageFamilies,
    /// Asynchronous video tasks: polling, leases, timeouts, durations.
    #[serde(default)]
    pub video: RawVideo,
    /// How the log is written.
    #[serde(default)]
    pub log: RawLog,
    /// Traces sent to an OpenTelemetry collector (off unless an endpoint is set).
    #[serde(default)]
    pub telemetry: RawTelemetry,
    /// Passive channel health: when a failing channel is taken out of rotation.
    #[serde(default)]
    pub circuit: RawCircuit,
    /// Where a new process started with `--upgrade` receives the listening sockets of
    /// the running one.
    #[serde(default = "default_upgrade_sock")]
    pub upgrade_sock: String,
    /// TLS on the client listener (`listen`); plain HTTP when absent.
    pub tls: Option<RawTls>,
    /// The PROXY protocol (v1, v2) on the client listener, from these balancers only.
    pub proxy_protocol: Option<RawProxyProtocol>,
    /// Responses stored for `previous_response_id` (spec 4.4).
    #[serde(default)]
    pub responses: RawResponses,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProxyProtocol {
    /// Addresses or CIDRs of the balancers allowed to send a PROXY header; a header from
    /// any other address closes the connection.
    pub trusted: Vec<String>,
}

/// Stored responses: whether the gateway keeps them, for how long, and how much.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponses {
    /// Store responses (unless the request says `store: false`) and serve
    /// `previous_response_id` from them on every channel.
    #[serde(default = "default_true")]
    pub store: bool,
    /// A stored response is deleted this long after it was made.
    #[serde(default = "default_responses_expiry")]
    pub expire_after_secs: u64,
    /// Most responses in one chain (the new one included).
    #[serde(default = "default_chain_depth")]
    pub max_chain_depth: usize,
    /// Most bytes of live stored responses per key; a request that would store more is
    /// refused until some expire or are deleted.
    #[serde(default = "default_stored_bytes")]
    pub max_stored_bytes_per_key: u64,
}

impl Default for RawResponses {
    fn default() -> Self {
        RawResponses {
            store: true,
            expire_after_secs: default_responses_expiry(),
            max_chain_depth: default_chain_depth(),
            max_stored_bytes_per_key: default_stored_bytes(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_responses_expiry() -> u64 {
    30 * 86_400
}

fn default_chain_depth() -> usize {
    100
}

fn default_stored_bytes() -> u64 {
    256 * 1024 * 1024
}

fn default_upgrade_sock() -> String {
    "/tmp/model-gateway-upgrade.sock".into()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// `text` (the default) or `json` (one object per line).
    pub format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTelemetry {
    /// Base URL of an OTLP/HTTP collector (`http://collector:4318`); spans are sent
    /// to `<endpoint>/v1/traces`. Unset: no traces.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans.
    pub service_name: String,
    /// Extra headers on every export (a collector's API key, from the environment).
    pub headers: BTreeMap<String, String>,
}

impl Default for RawTelemetry {
    fn default() -> Self {
        RawTelemetry {
            otlp_endpoint: None,
            service_name: "model-gateway".into(),
            headers: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawVideo {
    /// The first poll of a task comes this long after its submission; each later one
    /// waits twice as long as the one before, up to `max_poll_interval_ms`.
    pub poll_interval_ms: u64,
    pub max_poll_interval_ms: u64,
    /// A task claimed for a poll is not polled by any other instance for this long.
    pub lease_ms: u64,
    /// An open task older than this fails (`task_timeout`) and is refunded.
    pub task_timeout_secs: u64,
    /// Seconds of video assumed (and reserved) when a request names no duration.
    pub default_seconds: f64,
    /// Longest duration a request may ask for.
    pub max_seconds: f64,
    /// Base of the download `url` shown in task records (e.g. `https://gw.example.com`);
    /// default: the scheme and `Host` of the status request.
    pub public_url: Option<String>,
}

impl Default for RawVideo {
    fn default() -> Self {
        RawVideo {
            poll_interval_ms: 2_000,
            max_poll_interval_ms: 30_000,
            lease_ms: 60_000,
            task_timeout_secs: 24 * 3600,
            default_seconds: 5.0,
            max_seconds: 60.0,
            public_url: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawImageFamilies {
    #[serde(default)]
    pub smallest: Vec<String>,
    #[serde(default)]
    pub middle: Vec<String>,
    #[serde(default)]
    pub newest: Vec<String>,
}

fn default_key_cache_ttl() -> u64 {
    5
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: String,
    pub token: String,
    /// TLS on the admin listener, optionally with client certificates (`client_ca`).
    pub tls: Option<RawTls>,
}

impl fmt::Debug for RawAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawAdmin")
            .field("listen", &self.listen)
            .field("token", &Hidden(&self.token))
            .finish()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub embedded: Option<RawEmbedded>,
    pub redis: Option<RawRedis>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEmbedded {
    pub path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    /// One node: `redis://host:port/db`.
    pub url: Option<String>,
    /// Seed nodes of a Redis Cluster.
    pub cluster: Option<Vec<String>>,
}

/// URLs without their passwords.
impl fmt::Debug for RawRedis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls = |u: &Vec<String>| u.iter().map(|u| redact::url(u)).collect::<Vec<_>>();
        f.debug_struct("RawRedis")
            .field("url", &self.url.as_deref().map(redact::url))
            .field("cluster", &self.cluster.as_ref().map(urls))
            .finish()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Largest non-streaming upstream response the gateway will buffer to translate.
    #[serde(default = "default_max_response")]
    pub max_response_bytes: usize,
    /// A reservation not settled within this time is released by the store itself.
    #[serde(default = "default_reservation_ttl")]
    pub reservation_ttl_secs: u64,
    /// On a graceful stop (SIGTERM), how long requests in flight may take to finish
    /// before the streams still running are ended with an error event and settled.
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace_secs: u64,
    /// A client's request header must arrive whole within this time (of the connection
    /// opening, or of the first byte of a later request on it).
    #[serde(default = "default_header_timeout")]
    pub header_timeout_secs: u64,
    /// A request's body must arrive whole within this time of the handler starting to
    /// read it (a body trickled a byte at a time cannot hold a connection for ever).
    #[serde(default = "default_body_timeout")]
    pub body_timeout_secs: u64,
    /// A keep-alive connection with no request for this long is closed; 0: none kept.
    #[serde(default = "default_idle_keepalive")]
    pub idle_keepalive_secs: u64,
    /// Client connections served at once; past it a new connection gets 503.
    #[serde(default = "default_max_client_connections")]
    pub max_client_connections: usize,
    /// Largest request header (request line and fields); larger ones get 431.
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
    /// The IANA time zone whose calendar period budgets follow, for keys and groups
    /// that name none.
    #[serde(default = "default_time_zone")]
    pub time_zone: String,
    /// HTTP/2 streams open at once on one client connection; a stream past it is
    /// refused (`REFUSED_STREAM`) while the others carry on.
    #[serde(default = "default_max_concurrent_streams")]
    pub max_concurrent_streams: u32,
}

fn default_max_concurrent_streams() -> u32 {
    100
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            max_body_bytes: default_max_body(),
            max_response_bytes: default_max_response(),
            reservation_ttl_secs: default_reservation_ttl(),
            shutdown_grace_secs: default_shutdown_grace(),
            header_timeout_secs: default_header_timeout(),
            body_timeout_secs: default_body_timeout(),
            idle_keepalive_secs: default_idle_keepalive(),
            max_client_connections: default_max_client_connections(),
            max_header_bytes: default_max_header_bytes(),
            time_zone: default_time_zone(),
            max_concurrent_streams: default_max_concurrent_streams(),
        }
    }
}

fn default_shutdown_grace() -> u64 {
    30
}

fn default_body_timeout() -> u64 {
    300
}

fn default_header_timeout() -> u64 {
    10
}

fn default_idle_keepalive() -> u64 {
    60
}

fn default_max_client_connections() -> usize {
    16_384
}

fn default_time_zone() -> String {
    "UTC".into()
}

fn default_max_header_bytes() -> usize {
    64 * 1024
}

fn default_max_body() -> usize {
    32 * 1024 * 1024
}

fn default_max_response() -> usize {
    64 * 1024 * 1024
}

fn default_reservation_ttl() -> u64 {
    3600
}
