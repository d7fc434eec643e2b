//! The sections of the file read one at a time for [`Config::from_raw`](super::Config):
//! each function validates one section and names the path of the first bad field.

use super::raw::{self, RawPrice};
use super::MAX_HEADER_BYTES_LIMIT;
use super::{err, parse_net, AdminConfig, ConfigError, Limits, LogFormat, StoreConfig};
use crate::billing::{Multiplier, Price};
use crate::channels::raw::RawCircuit;
use crate::channels::{Channel, RawChannel};
use crate::media::images::Families;
use ipnet::IpNet;
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// By channel name, the prices that channel bills differently from the top-level ones.
pub(super) type ChannelPrices = BTreeMap<String, BTreeMap<String, Price>>;

/// The admin listener, if configured: its token must be long enough to be a secret.
pub(super) fn admin(
    a: Option<raw::RawAdmin>,
    base: &Path,
) -> Result<Option<AdminConfig>, ConfigError> {
    let admin = match a {
        None => None,
        Some(a) => {
            if a.token.trim().len() < 16 {
                return Err(err(
                    "admin.token",
                    "must be at least 16 characters (set it from the environment)",
                ));
            }
            Some(AdminConfig {
                listen: parse_addr("admin.listen", &a.listen)?,
                token: a.token,
                tls: a
                    .tls
                    .map(|t| crate::tls::TlsConfig::from_raw(t, "admin.tls", base, true))
                    .transpose()?,
            })
        }
    };
    Ok(admin)
}

/// The one store the gateway keeps its state in; a relative embedded path is taken
/// from `base` (the configuration file's folder).
pub(super) fn store(s: raw::RawStore, base: &Path) -> Result<StoreConfig, ConfigError> {
    let store = match (s.embedded, s.redis) {
        (Some(e), None) => {
            if e.path.trim().is_empty() {
                return Err(err("store.embedded.path", "must not be empty"));
            }
            let p = PathBuf::from(&e.path);
            let path = if p.is_absolute() { p } else { base.join(p) };
            StoreConfig::Embedded { path }
        }
        (None, Some(r)) => match (r.url, r.cluster) {
            (Some(url), None) => {
                check_redis_url("store.redis.url", &url)?;
                StoreConfig::Redis {
                    urls: vec![url],
                    cluster: false,
                }
            }
            (None, Some(urls)) if !urls.is_empty() => {
                for (i, u) in urls.iter().enumerate() {
                    check_redis_url(&format!("store.redis.cluster[{i}]"), u)?;
                }
                StoreConfig::Redis {
                    urls,
                    cluster: true,
                }
            }
            _ => {
                return Err(err(
                    "store.redis",
                    "set exactly one of `url` or a non-empty `cluster` list",
                ))
            }
        },
        _ => return Err(err("store", "set exactly one of `embedded` or `redis`")),
    };
    Ok(store)
}

/// The sizes and timeouts that must not be zero, and the header size's bounds. The time
/// zone is checked later, by [`check_time_zone`], so errors keep their order.
pub(super) fn check_limits(l: &raw::RawLimits) -> Result<(), ConfigError> {
    if l.max_body_bytes == 0 {
        return Err(err("limits.max_body_bytes", "must be positive"));
    }
    if l.header_timeout_secs == 0 {
        return Err(err("limits.header_timeout_secs", "must be positive"));
    }
    if l.max_concurrent_streams == 0 {
        return Err(err("limits.max_concurrent_streams", "must be positive"));
    }
    if l.max_client_connections == 0 {
        return Err(err("limits.max_client_connections", "must be positive"));
    }
    if !(1024..=MAX_HEADER_BYTES_LIMIT).contains(&l.max_header_bytes) {
        return Err(err(
            "limits.max_header_bytes",
            format!("must be between 1024 and {MAX_HEADER_BYTES_LIMIT}"),
        ));
    }
    Ok(())
}

/// The day boundary of daily quotas must be a zone this build knows.
pub(super) fn check_time_zone(time_zone: &str) -> Result<(), ConfigError> {
    if crate::store::policy::time_zone(time_zone).is_none() {
        return Err(err(
            "limits.time_zone",
            "is not a time zone this build knows (an IANA name such as `Europe/Paris`, or `UTC`)",
        ));
    }
    Ok(())
}

/// The runtime limits, from values [`check_limits`] has already checked; the floors
/// (reservation TTL, body timeout) are applied here.
pub(super) fn limits(l: raw::RawLimits) -> Limits {
    Limits {
        max_body_bytes: l.max_body_bytes,
        max_response_bytes: l.max_response_bytes,
        reservation_ttl_secs: l.reservation_ttl_secs.max(60),
        shutdown_grace: std::time::Duration::from_secs(l.shutdown_grace_secs),
        header_timeout: Duration::from_secs(l.header_timeout_secs),
        body_timeout: Duration::from_secs(l.body_timeout_secs.max(1)),
        idle_keepalive: (l.idle_keepalive_secs > 0)
            .then(|| Duration::from_secs(l.idle_keepalive_secs)),
        max_client_connections: l.max_client_connections,
        max_header_bytes: l.max_header_bytes,
        time_zone: l.time_zone,
        max_concurrent_streams: l.max_concurrent_streams,
    }
}

/// The balancers trusted to send a PROXY header.
pub(super) fn proxy_protocol(p: Option<raw::RawProxyProtocol>) -> Result<Vec<IpNet>, ConfigError> {
    let Some(p) = p else {
        return Ok(Vec::new());
    };
    if p.trusted.is_empty() {
        return Err(err(
            "proxy_protocol.trusted",
            "must name the balancers allowed to send a PROXY header",
        ));
    }
    p.trusted
        .iter()
        .enumerate()
        .map(|(i, t)| {
            parse_net(t).ok_or_else(|| {
                err(
                    format!("proxy_protocol.trusted[{i}]"),
                    "not a CIDR or IP address",
                )
            })
        })
        .collect()
}

/// The proxies whose forwarded client address is believed, each a CIDR or an address.
pub(super) fn trusted_proxies(list: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    let mut trusted_proxies = Vec::new();
    for (i, p) in list.iter().enumerate() {
        trusted_proxies.push(
            parse_net(p)
                .ok_or_else(|| err(format!("trusted_proxies[{i}]"), "not a CIDR or IP address"))?,
        );
    }
    Ok(trusted_proxies)
}

/// The top-level price of each model.
pub(super) fn prices(
    raw: &BTreeMap<String, RawPrice>,
) -> Result<BTreeMap<String, Price>, ConfigError> {
    let mut prices = BTreeMap::new();
    for (model, p) in raw {
        let price = Price::from_raw(p).map_err(|m| err(format!("prices.{model}"), m))?;
        prices.insert(model.clone(), price);
    }
    Ok(prices)
}

/// The image model families; a model may be in one family only.
pub(super) fn image_families(f: raw::RawImageFamilies) -> Result<Families, ConfigError> {
    let mut seen = HashSet::new();
    for (family, models) in [
        ("smallest", &f.smallest),
        ("middle", &f.middle),
        ("newest", &f.newest),
    ] {
        for (i, m) in models.iter().enumerate() {
            if !seen.insert(m.clone()) {
                return Err(err(
                    format!("image_families.{family}[{i}]"),
                    format!("`{m}` is already in another family"),
                ));
            }
        }
    }
    Ok(Families {
        smallest: f.smallest,
        middle: f.middle,
        newest: f.newest,
    })
}

/// The log line format: text unless `json` is asked for.
pub(super) fn log_format(format: Option<&str>) -> Result<LogFormat, ConfigError> {
    let log_format = match format {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(err(
                "log.format",
                format!("`{other}`: expected `text` or `json`"),
            ))
        }
    };
    Ok(log_format)
}

/// The channels, each with a unique name, and the prices of those that bill their own.
pub(super) fn channels(
    list: Vec<RawChannel>,
    circuit: &RawCircuit,
    prices: &BTreeMap<String, Price>,
) -> Result<(Vec<Arc<Channel>>, ChannelPrices), ConfigError> {
    let mut names = HashSet::new();
    let mut channels = Vec::new();
    let mut channel_prices_of = BTreeMap::new();
    for (i, c) in list.into_iter().enumerate() {
        let path = format!("channels[{i}]");
        if !names.insert(c.name.clone()) {
            return Err(err(
                format!("{path}.name"),
                format!("duplicate channel name `{}`", c.name),
            ));
        }
        let mut c = c;
        let own = channel_prices(&path, &mut c, prices)?;
        let channel = Channel::from_raw(c, circuit)
            .map_err(|e| err(format!("{path}.{}", e.field), e.message))?;
        if !own.is_empty() {
            channel_prices_of.insert(channel.name.clone(), own);
        }
        channels.push(Arc::new(channel));
    }
    Ok((channels, channel_prices_of))
}

/// A channel's own prices (`channels[i].prices`) and multiplier, taken out of its raw
/// form and validated: the price of each of its models that differs from `prices`.
fn channel_prices(
    path: &str,
    c: &mut crate::channels::RawChannel,
    prices: &BTreeMap<String, Price>,
) -> Result<BTreeMap<String, Price>, ConfigError> {
    let multiplier = match c.price_multiplier.take() {
        Some(v) => {
            Multiplier::from_f64(v).map_err(|m| err(format!("{path}.price_multiplier"), m))?
        }
        None => Multiplier::ONE,
    };
    let mut own = BTreeMap::new();
    for (model, p) in std::mem::take(&mut c.prices) {
        let at = format!("{path}.prices.{model}");
        if !c.models.contains(&model) {
            return Err(err(
                at,
                "prices a model this channel does not list in `models`",
            ));
        }
        own.insert(model, Price::from_raw(&p).map_err(|m| err(at, m))?);
    }
    if multiplier != Multiplier::ONE {
        for model in &c.models {
            if let (false, Some(p)) = (own.contains_key(model), prices.get(model)) {
                own.insert(model.clone(), p.scaled(multiplier));
            }
        }
    }
    Ok(own)
}

pub(super) fn parse_addr(path: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|e| {
        err(
            path,
            format!("`{s}` is not an address like 127.0.0.1:8080: {e}"),
        )
    })
}

fn check_redis_url(path: &str, u: &str) -> Result<(), ConfigError> {
    let ok = ["redis://", "rediss://", "redis+unix://", "unix://"]
        .iter()
        .any(|p| u.starts_with(p));
    if ok {
        Ok(())
    } else {
        Err(err(path, "must start with redis://, rediss:// or unix://"))
    }
}
