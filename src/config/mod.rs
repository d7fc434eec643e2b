//! Configuration in two stages: [`raw`] deserializes the YAML strictly, then
//! [`Config::from_raw`] validates it into the runtime types the gateway uses. Every error
//! names the path of the bad field (`channels[1].base_url: ...`).
//!
//! `${VAR}` (or `${VAR:-default}`) inside any string is replaced from the environment
//! before deserialization, so secrets never live in the file.

mod env;
pub mod raw;
mod sections;

use crate::billing::Price;
use crate::channels::{Channel, ChannelProtocol};
use crate::media::images::Families;
use crate::redact::{self, Hidden, Secrets};
use ipnet::IpNet;
use raw::RawConfig;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
pub struct ConfigError {
    /// Where the bad value is, e.g. `channels[0].protocol`; empty for file-level errors.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        message: message.into(),
    }
}

#[derive(Clone, PartialEq, Eq)]
pub enum StoreConfig {
    Embedded { path: PathBuf },
    Redis { urls: Vec<String>, cluster: bool },
}

/// A Redis URL may carry a password: shown without it.
impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreConfig::Embedded { path } => {
                f.debug_struct("Embedded").field("path", path).finish()
            }
            StoreConfig::Redis { urls, cluster } => {
                let urls: Vec<String> = urls.iter().map(|u| redact::url(u)).collect();
                f.debug_struct("Redis")
                    .field("urls", &urls)
                    .field("cluster", cluster)
                    .finish()
            }
        }
    }
}

#[derive(Clone, PartialEq, Eq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    pub token: String,
    pub tls: Option<crate::tls::TlsConfig>,
}

impl fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminConfig")
            .field("listen", &self.listen)
            .field("token", &Hidden(&self.token))
            .field("tls", &self.tls)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_response_bytes: usize,
    pub reservation_ttl_secs: u64,
    pub shutdown_grace: std::time::Duration,
    /// The client listener's edge (see `edge`).
    pub header_timeout: Duration,
    /// A request body must arrive whole within this time.
    pub body_timeout: Duration,
    /// `None`: connections are not kept alive between requests.
    pub idle_keepalive: Option<Duration>,
    pub max_client_connections: usize,
    pub max_header_bytes: usize,
    /// IANA name, known to the bundled zone database.
    pub time_zone: String,
    /// HTTP/2 streams open at once per client connection.
    pub max_concurrent_streams: u32,
}

/// The largest `limits.max_header_bytes`: Pingora, which parses the header again, takes
/// at most 1 MiB with the first body bytes read alongside it.
pub const MAX_HEADER_BYTES_LIMIT: usize = 512 * 1024;

/// Asynchronous video tasks (see [`raw::RawVideo`]).
#[derive(Debug, Clone)]
pub struct VideoConfig {
    pub poll_interval: Duration,
    pub max_poll_interval: Duration,
    pub lease: Duration,
    pub task_timeout: Duration,
    pub default_seconds: f64,
    pub max_seconds: f64,
    pub public_url: Option<String>,
}

impl VideoConfig {
    fn from_raw(v: raw::RawVideo) -> Result<VideoConfig, ConfigError> {
        if v.poll_interval_ms == 0 {
            return Err(err("video.poll_interval_ms", "must be positive"));
        }
        if v.max_poll_interval_ms < v.poll_interval_ms {
            return Err(err(
                "video.max_poll_interval_ms",
                "must be at least `poll_interval_ms`",
            ));
        }
        if v.lease_ms == 0 {
            return Err(err("video.lease_ms", "must be positive"));
        }
        if v.task_timeout_secs == 0 {
            return Err(err("video.task_timeout_secs", "must be positive"));
        }
        if !(v.max_seconds.is_finite() && v.max_seconds > 0.0) {
            return Err(err("video.max_seconds", "must be a positive number"));
        }
        if !(v.default_seconds > 0.0 && v.default_seconds <= v.max_seconds) {
            return Err(err(
                "video.default_seconds",
                "must be positive and at most `max_seconds`",
            ));
        }
        let public_url = match v.public_url {
            None => None,
            Some(u) => {
                let parsed = url::Url::parse(&u)
                    .map_err(|e| err("video.public_url", format!("not a URL: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(err("video.public_url", "must be an http or https URL"));
                }
                Some(u.trim_end_matches('/').to_string())
            }
        };
        Ok(VideoConfig {
            poll_interval: Duration::from_millis(v.poll_interval_ms),
            max_poll_interval: Duration::from_millis(v.max_poll_interval_ms),
            lease: Duration::from_millis(v.lease_ms),
            task_timeout: Duration::from_secs(v.task_timeout_secs),
            default_seconds: v.default_seconds,
            max_seconds: v.max_seconds,
            public_url,
        })
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object per line, its fields at the top level.
    Json,
}

/// Where spans go (OTLP over HTTP, JSON encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Telemetry {
    /// The collector's base URL, without a trailing slash.
    pub endpoint: String,
    pub service_name: String,
    pub headers: Vec<(String, String)>,
}

impl Telemetry {
    fn from_raw(t: raw::RawTelemetry) -> Result<Option<Telemetry>, ConfigError> {
        let Some(endpoint) = t.otlp_endpoint.filter(|e| !e.trim().is_empty()) else {
            return Ok(None);
        };
        let url = url::Url::parse(&endpoint)
            .map_err(|e| err("telemetry.otlp_endpoint", format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(err(
                "telemetry.otlp_endpoint",
                "must be an http or https URL with a host",
            ));
        }
        if t.service_name.trim().is_empty() {
            return Err(err("telemetry.service_name", "must not be empty"));
        }
        let mut headers = Vec::new();
        for (name, value) in t.headers {
            let path = format!("telemetry.headers.{name}");
            http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| err(&path, format!("not a valid header name: {e}")))?;
            http::HeaderValue::from_str(&value)
                .map_err(|e| err(&path, format!("not a valid header value: {e}")))?;
            headers.push((name, value));
        }
        Ok(Some(Telemetry {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            service_name: t.service_name,
            headers,
        }))
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin: Option<AdminConfig>,
    pub store: StoreConfig,
    pub limits: Limits,
    pub trusted_proxies: Vec<IpNet>,
    pub threads: Option<usize>,
    pub key_cache_ttl: Duration,
    pub channels: Vec<Arc<Channel>>,
    pub prices: BTreeMap<String, Price>,
    /// By channel name: the prices of the models that channel bills differently from
    /// `prices` (its own prices, or `prices` times its multiplier).
    pub channel_prices: BTreeMap<String, BTreeMap<String, Price>>,
    pub image_families: Families,
    pub video: VideoConfig,
    /// Every configured secret (channel keys, the admin token), to keep out of the log.
    pub secrets: Secrets,
    pub log_format: LogFormat,
    pub telemetry: Option<Telemetry>,
    /// The socket a process started with `--upgrade` receives the listeners on.
    pub upgrade_sock: PathBuf,
    /// The file this configuration was read from (what a reload reads again).
    pub source: Option<PathBuf>,
    /// TLS on the client listener.
    pub tls: Option<crate::tls::TlsConfig>,
    /// Balancers trusted to send a PROXY header; empty: the PROXY protocol is off.
    pub proxy_protocol: Arc<[IpNet]>,
    /// Stored responses (see [`raw::RawResponses`]).
    pub responses: ResponsesConfig,
}

/// Stored responses (see [`raw::RawResponses`]).
#[derive(Debug, Clone)]
pub struct ResponsesConfig {
    pub store: bool,
    pub expire_after_secs: u64,
    pub max_chain_depth: usize,
    pub max_stored_bytes_per_key: u64,
}

impl ResponsesConfig {
    fn from_raw(r: &raw::RawResponses) -> Result<ResponsesConfig, ConfigError> {
        if r.expire_after_secs == 0 {
            return Err(err("responses.expire_after_secs", "must be at least 1"));
        }
        if r.max_chain_depth < 2 {
            return Err(err("responses.max_chain_depth", "must be at least 2"));
        }
        Ok(ResponsesConfig {
            store: r.store,
            expire_after_secs: r.expire_after_secs,
            max_chain_depth: r.max_chain_depth,
            max_stored_bytes_per_key: r.max_stored_bytes_per_key,
        })
    }
}

impl Config {
    /// The price `channel` bills `model` at: its own, else the top-level one.
    pub fn channel_price(&self, channel: &str, model: &str) -> Option<&Price> {
        self.channel_prices
            .get(channel)
            .and_then(|m| m.get(model))
            .or_else(|| self.prices.get(model))
    }

    /// What a request for `model` reserves by: each rate at its dearest over the channels
    /// that may serve it (any of them may answer). `None` when no channel has a price.
    pub fn price_over(&self, model: &str, candidates: &[Arc<Channel>]) -> Option<Price> {
        let mut worst: Option<Price> = None;
        for c in candidates {
            let Some(p) = self.channel_price(&c.name, model) else {
                continue;
            };
            worst = Some(match worst {
                None => p.clone(),
                Some(w) if w == *p => w,
                Some(w) => w.dearest(p),
            });
        }
        worst.or_else(|| self.prices.get(model).cloned())
    }

    /// Reads, expands and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("", format!("cannot read {}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut config = Config::parse(&text, base)?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses configuration text; relative store paths are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let mut value: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| err("", format!("invalid YAML: {e}")))?;
        env::expand(&mut value, &mut String::new(), &|name| {
            std::env::var(name).ok()
        })?;
        let raw: RawConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            err(path, e.into_inner().to_string())
        })?;
        Config::from_raw(raw, base)
    }

    fn from_raw(raw: RawConfig, base: &Path) -> Result<Config, ConfigError> {
        let listen = sections::parse_addr("listen", &raw.listen)?;
        let admin = sections::admin(raw.admin, base)?;
        let tls = raw
            .tls
            .map(|t| crate::tls::TlsConfig::from_raw(t, "tls", base, false))
            .transpose()?;
        let proxy_protocol = sections::proxy_protocol(raw.proxy_protocol)?;
        let store = sections::store(raw.store, base)?;
        sections::check_limits(&raw.limits)?;
        let trusted_proxies = sections::trusted_proxies(&raw.trusted_proxies)?;
        let prices = sections::prices(&raw.prices)?;
        let image_families = sections::image_families(raw.image_families)?;
        let video = VideoConfig::from_raw(raw.video)?;
        let log_format = sections::log_format(raw.log.format.as_deref())?;
        let telemetry = Telemetry::from_raw(raw.telemetry)?;
        let responses = ResponsesConfig::from_raw(&raw.responses)?;
        sections::check_time_zone(&raw.limits.time_zone)?;
        if raw.upgrade_sock.trim().is_empty() {
            return Err(err("upgrade_sock", "must not be empty"));
        }
        crate::channels::check_circuit(&raw.circuit).map_err(|e| err(e.field, e.message))?;
        let mut raw_channels = raw.channels;
        // Key and CA files named relative to the configuration file, as the store's path is.
        for c in &mut raw_channels {
            for f in [c.credentials_file.as_mut(), c.ca_file.as_mut()]
                .into_iter()
                .flatten()
            {
                if !f.is_empty() && Path::new(f.as_str()).is_relative() {
                    *f = base.join(&*f).to_string_lossy().into_owned();
                }
            }
        }
        let (channels, channel_prices_of) =
            sections::channels(raw_channels, &raw.circuit, &prices)?;
        let secrets = Secrets::new(
            channels
                .iter()
                .flat_map(|c| c.keys.secrets())
                .chain(
                    channels
                        .iter()
                        .filter_map(|c| c.cloud.as_ref())
                        .flat_map(|cloud| cloud.secrets()),
                )
                .chain(admin.iter().map(|a| a.token.as_str())),
        );
        Ok(Config {
            secrets,
            listen,
            admin,
            store,
            limits: sections::limits(raw.limits),
            trusted_proxies,
            threads: raw.threads,
            key_cache_ttl: Duration::from_secs(raw.key_cache_ttl_secs),
            channels,
            prices,
            channel_prices: channel_prices_of,
            image_families,
            video,
            log_format,
            telemetry,
            upgrade_sock: PathBuf::from(raw.upgrade_sock),
            source: None,
            tls,
            proxy_protocol: proxy_protocol.into(),
            responses,
        })
    }

    /// Protocols a channel may declare.
    pub fn protocols() -> &'static [ChannelProtocol] {
        ChannelProtocol::ALL
    }
}

/// A CIDR, or a single address taken as a /32 or /128.
pub fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<std::net::IpAddr>().ok().map(IpNet::from))
}

pub(crate) fn config_err(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    err(path, message)
}

impl From<crate::tls::TlsError> for ConfigError {
    fn from(e: crate::tls::TlsError) -> ConfigError {
        err(e.field, e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
listen: 127.0.0.1:8080
store: { embedded: { path: ./data } }
channels:
  - name: openai-main
    protocol: openai
    base_url: https://api.openai.com
    api_key: sk-upstream
    models: [gpt-4o, gpt-4o-mini]
    model_map: { gpt-4o: gpt-4o-2024-08-06 }
prices:
  gpt-4o-mini: { input: 0.15, output: 0.60, cached_input: 0.075 }
"#;

    #[test]
    fn parses_a_good_file() {
        let c = Config::parse(GOOD, Path::new("/etc/gw")).unwrap();
        assert_eq!(c.channels.len(), 1);
        assert_eq!(c.prices["gpt-4o-mini"].rates.input, 150_000);
        match c.store {
            StoreConfig::Embedded { path } => assert_eq!(path, PathBuf::from("/etc/gw/./data")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_field_names_its_path() {
        let bad = GOOD
            .replace("priority", "x")
            .replace("model_map", "modle_map");
        let e = Config::parse(&bad, Path::new(".")).unwrap_err();
        assert_eq!(e.path, "channels[0].modle_map");
        assert!(e.message.contains("modle_map"), "{e}");
    }

    #[test]
    fn bad_protocol_names_its_path() {
        let bad = GOOD.replace("protocol: openai", "protocol: opneai");
        let e = Config::parse(&bad, Path::new(".")).unwrap_err();
        assert_eq!(e.path, "channels[0].protocol");
    }

    #[test]
    fn missing_env_var_names_its_path() {
        let bad = GOOD.replace("sk-upstream", "${MG_TEST_SURELY_UNSET_VAR}");
        let e = Config::parse(&bad, Path::new(".")).unwrap_err();
        assert_eq!(e.path, "channels[0].api_key");
        assert!(e.message.contains("MG_TEST_SURELY_UNSET_VAR"));
    }

    #[test]
    fn model_map_must_name_a_served_model() {
        let bad = GOOD.replace("{ gpt-4o: gpt", "{ gpt-5: gpt");
        let e = Config::parse(&bad, Path::new(".")).unwrap_err();
        assert_eq!(e.path, "channels[0].model_map.gpt-5");
    }

    /// `Debug` output (logs, panics) never shows an upstream key, the admin token or a
    /// store password.
    #[test]
    fn debug_output_hides_secrets() {
        let text = GOOD.replace("sk-upstream", "sk-upstream-secret-1")
            + "admin: { listen: 127.0.0.1:8081, token: admin-token-secret-2 }\n";
        let c = Config::parse(&text, Path::new(".")).unwrap();
        let shown = format!("{c:?} {:?} {:?}", c.channels[0], c.admin);
        assert!(shown.contains("openai-main"), "{shown}");
        for secret in ["sk-upstream-secret-1", "admin-token-secret-2"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        let text = GOOD.replace(
            "{ embedded: { path: ./data } }",
            "{ redis: { url: \"redis://:store-password-3@127.0.0.1:6379\" } }",
        );
        let c = Config::parse(&text, Path::new(".")).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("store-password-3"), "{shown}");
        assert!(shown.contains("127.0.0.1:6379"), "{shown}");
    }

    #[test]
    fn negative_price_is_rejected() {
        let bad = GOOD.replace("input: 0.15", "input: -1");
        let e = Config::parse(&bad, Path::new(".")).unwrap_err();
        assert_eq!(e.path, "prices.gpt-4o-mini");
    }

    #[test]
    fn pricing_options_are_checked_with_their_paths() {
        let with = |from: &str, to: &str| {
            Config::parse(&GOOD.replace(from, to), Path::new(".")).map(|_| ())
        };
        let channel = "    model_map: { gpt-4o: gpt-4o-2024-08-06 }";
        let e = with(channel, &format!("{channel}\n    price_multiplier: 0")).unwrap_err();
        assert_eq!(e.path, "channels[0].price_multiplier");
        let e = with(
            channel,
            &format!("{channel}\n    prices: {{ o1: {{ input: 1, output: 1 }} }}"),
        )
        .unwrap_err();
        assert_eq!(e.path, "channels[0].prices.o1");
        let e = with(
            channel,
            &format!("{channel}\n    prices: {{ gpt-4o: {{ input: 1, output: -1 }} }}"),
        )
        .unwrap_err();
        assert_eq!(e.path, "channels[0].prices.gpt-4o");
        let e = with(
            "cached_input: 0.075 }",
            "cached_input: 0.075, tiers: [{ above_input_tokens: 10, input: 1 }] }",
        )
        .unwrap_err();
        assert_eq!(e.path, "prices.gpt-4o-mini");
        assert!(e.to_string().contains("tiers[0]"), "{e}");
        let e = with(
            "cached_input: 0.075 }",
            "cached_input: 0.075, reasonning: 1 }",
        )
        .unwrap_err();
        assert!(e.path.starts_with("prices.gpt-4o-mini"), "{}", e.path);
        // A channel multiplier prices its models at the top-level prices times it.
        let c = Config::parse(
            &GOOD.replace(channel, &format!("{channel}\n    price_multiplier: 1.5")),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(
            c.channel_price("openai-main", "gpt-4o-mini")
                .unwrap()
                .rates
                .input,
            225_000
        );
        assert_eq!(c.prices["gpt-4o-mini"].rates.input, 150_000);
    }
}
