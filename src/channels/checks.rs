//! The checks of one channel's configuration for [`Channel::from_raw`](super::Channel):
//! each names the field (`base_url`, `models[1]`, ...) it rejects.

use super::credentials::{self, Signer};
use super::raw::{invalid, Invalid, RawChannel};
use super::ChannelProtocol;

/// The channel's protocol, by its configured name.
pub(super) fn protocol(name: &str) -> Result<ChannelProtocol, Invalid> {
    ChannelProtocol::parse(name).ok_or_else(|| {
        let all: Vec<_> = ChannelProtocol::ALL.iter().map(|p| p.as_str()).collect();
        invalid(
            "protocol",
            format!(
                "unknown protocol `{}`; expected one of {}",
                name,
                all.join(", ")
            ),
        )
    })
}

/// Where `base_url` points: what a channel needs of it to reach its upstream.
pub(super) struct BaseUrl {
    pub tls: bool,
    /// Without the brackets of an IPv6 literal.
    pub host: String,
    /// The URL's port, else the scheme's.
    pub port: u16,
    /// The URL's path without a trailing slash (`""` or `/proxy`).
    pub path_prefix: String,
}

/// A `demo` channel's upstream: the demo server in this process, at the channel's token
/// rate. It has no `base_url` of its own.
pub(super) fn demo_base_url(c: &RawChannel) -> Result<String, Invalid> {
    if !c.base_url.is_empty() {
        return Err(invalid(
            "base_url",
            "a demo channel has no base_url: its model answers inside the gateway",
        ));
    }
    let rate = c
        .tokens_per_second
        .unwrap_or(crate::demo::DEFAULT_TOKENS_PER_SECOND);
    if rate == 0 {
        return Err(invalid("tokens_per_second", "must be at least 1"));
    }
    let addr = crate::demo::address()
        .map_err(|e| invalid("protocol", format!("the demo upstream cannot start: {e}")))?;
    Ok(format!("http://{addr}{}", crate::demo::path_prefix(rate)))
}

/// The channel's `base_url`, or a `vertex` channel's default: its location's host.
pub(super) fn base_url_or_default(
    c: &RawChannel,
    protocol: ChannelProtocol,
) -> Result<String, Invalid> {
    match (c.base_url.trim().is_empty(), protocol) {
        (false, _) => Ok(c.base_url.clone()),
        (true, ChannelProtocol::Vertex) => Ok(super::cloud::vertex::base_url(
            &super::cloud::vertex::location(c)?,
        )),
        (true, _) => Err(invalid("base_url", "is required")),
    }
}

/// Parses `base_url`: an http or https URL with a host, and no query or fragment.
pub(super) fn base_url(base_url: &str) -> Result<BaseUrl, Invalid> {
    if base_url.is_empty() {
        return Err(invalid("base_url", "must be set"));
    }
    let url =
        url::Url::parse(base_url).map_err(|e| invalid("base_url", format!("not a URL: {e}")))?;
    let tls = match url.scheme() {
        "https" => true,
        "http" => false,
        s => {
            return Err(invalid(
                "base_url",
                format!("scheme `{s}` is not http or https"),
            ))
        }
    };
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("base_url", "must not have a query or fragment"));
    }
    let host = url
        .host_str()
        .ok_or_else(|| invalid("base_url", "has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url
        .port_or_known_default()
        .unwrap_or(if tls { 443 } else { 80 });
    let path_prefix = url.path().trim_end_matches('/').to_string();
    Ok(BaseUrl {
        tls,
        host,
        port,
        path_prefix,
    })
}

/// The channel lists at least one model, none empty, and maps only models it lists.
pub(super) fn models(c: &RawChannel) -> Result<(), Invalid> {
    if c.models.is_empty() {
        return Err(invalid("models", "must list at least one model"));
    }
    for (i, m) in c.models.iter().enumerate() {
        if m.trim().is_empty() {
            return Err(invalid(format!("models[{i}]"), "must not be empty"));
        }
    }
    for from in c.model_map.keys() {
        if !c.models.contains(from) {
            return Err(invalid(
                format!("model_map.{from}"),
                "maps a model this channel does not list in `models`",
            ));
        }
    }
    Ok(())
}

/// The bearer keys: `api_key` or the `api_keys` list (not both), none of them empty;
/// none at all for a channel that signs instead.
pub(super) fn secrets(api_key: String, api_keys: Vec<String>) -> Result<Vec<String>, Invalid> {
    let secrets = match (api_key.is_empty(), api_keys.is_empty()) {
        (true, true) => Vec::new(),
        (false, true) => vec![api_key],
        (true, false) => api_keys,
        (false, false) => {
            return Err(invalid("api_keys", "set `api_key` or `api_keys`, not both"));
        }
    };
    if let Some(i) = secrets.iter().position(|k| k.trim().is_empty()) {
        return Err(invalid(format!("api_keys[{i}]"), "must not be empty"));
    }
    Ok(secrets)
}

/// The member a chat request carries its output limit in: `max_completion_tokens`, or
/// the older `max_tokens` on `openai` channels that ask for it.
pub(super) fn chat_limit_field(
    field: Option<&str>,
    protocol: ChannelProtocol,
) -> Result<&'static str, Invalid> {
    let chat_limit_field = match field {
        None | Some("max_completion_tokens") => "max_completion_tokens",
        Some("max_tokens") if protocol == ChannelProtocol::OpenAi => "max_tokens",
        Some(other) => {
            return Err(invalid(
                "max_tokens_field",
                format!("`{other}`: expected `max_completion_tokens` or `max_tokens` (`openai` channels only)"),
            ))
        }
    };
    Ok(chat_limit_field)
}

/// The signer of a channel with a key pair: both keys or neither, and only on the video
/// protocols whose vendors sign requests (without a pair they take `api_key` as a bearer
/// key, e.g. behind a signing proxy).
pub(super) fn signer(c: &RawChannel, protocol: ChannelProtocol) -> Result<Option<Signer>, Invalid> {
    let (ak, sk) = (c.access_key.trim(), c.secret_key.trim());
    // Bedrock's pair signs with SigV4 in its cloud part (`cloud::bedrock`), which checks it.
    if (ak.is_empty() && sk.is_empty()) || protocol == ChannelProtocol::Bedrock {
        return Ok(None);
    }
    if !matches!(protocol, ChannelProtocol::VideoA | ChannelProtocol::VideoB) {
        let field = if ak.is_empty() {
            "secret_key"
        } else {
            "access_key"
        };
        return Err(invalid(
            field,
            "only `video-a` and `video-b` channels sign requests with a key pair; use `api_key`",
        ));
    }
    if ak.is_empty() || sk.is_empty() {
        let missing = if ak.is_empty() {
            "access_key"
        } else {
            "secret_key"
        };
        return Err(invalid(
            missing,
            "is required with the other key of the pair",
        ));
    }
    if !c.api_key.is_empty() || !c.api_keys.is_empty() {
        return Err(invalid(
            "api_key",
            "a channel that signs with `access_key` and `secret_key` takes no `api_key`",
        ));
    }
    Ok(Some(match protocol {
        ChannelProtocol::VideoA => Signer::Kling(credentials::KlingJwt::new(ak, sk)),
        _ => Signer::Volcengine(credentials::Volcengine::new(ak, sk)),
    }))
}
