//! Upstream channels: where a model is served, in which order channels are tried, how the
//! model name is mapped, and how to reach the upstream.

mod checks;
pub mod cloud;
pub mod credentials;
pub mod health;
pub mod raw;
mod resolve;
pub mod transport;

pub use health::{Circuit, ErrorKind, Health, Keys};
pub use raw::{RawChannel, RawCircuit};

use crate::ids;
use crate::protocol::Protocol;
use crate::redact::Hidden;
use credentials::Signer;
use pingora::upstreams::peer::HttpPeer;
use raw::{invalid, Invalid};
use resolve::Resolver;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The protocol a channel's upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChannelProtocol {
    OpenAi,
    Anthropic,
    Gemini,
    /// Video tasks only: the task-style API of spec 4.10–4.13.
    VideoA,
    /// Video tasks only: the `?Action=&Version=` API of spec 4.14.
    VideoB,
    /// Image edits in the native shape of spec 4.7 only: DashScope's
    /// multimodal-generation API.
    DashScope,
    /// The demo model inside the gateway's own process ([`crate::demo`]): answers
    /// without a provider key or a network.
    Demo,
    /// Amazon Bedrock Runtime: the Converse API for every model, SigV4-signed
    /// ([`cloud::bedrock`]).
    Bedrock,
    /// Azure OpenAI: the OpenAI API at Azure's paths, with Azure's authentication
    /// ([`cloud::azure`]).
    Azure,
    /// Google Vertex AI: Gemini models in the generate-content protocol, Claude models in
    /// the messages protocol, with an OAuth 2.0 token of a service account
    /// ([`cloud::vertex`]).
    Vertex,
}

impl ChannelProtocol {
    pub const ALL: &'static [ChannelProtocol] = &[
        ChannelProtocol::OpenAi,
        ChannelProtocol::Anthropic,
        ChannelProtocol::Gemini,
        ChannelProtocol::VideoA,
        ChannelProtocol::VideoB,
        ChannelProtocol::DashScope,
        ChannelProtocol::Demo,
        ChannelProtocol::Bedrock,
        ChannelProtocol::Azure,
        ChannelProtocol::Vertex,
    ];

    pub fn parse(s: &str) -> Option<ChannelProtocol> {
        match s {
            "openai" => Some(ChannelProtocol::OpenAi),
            "anthropic" => Some(ChannelProtocol::Anthropic),
            "gemini" => Some(ChannelProtocol::Gemini),
            "video-a" => Some(ChannelProtocol::VideoA),
            "video-b" => Some(ChannelProtocol::VideoB),
            "dashscope" => Some(ChannelProtocol::DashScope),
            "demo" => Some(ChannelProtocol::Demo),
            "bedrock" => Some(ChannelProtocol::Bedrock),
            "azure" => Some(ChannelProtocol::Azure),
            "vertex" => Some(ChannelProtocol::Vertex),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ChannelProtocol::OpenAi => "openai",
            ChannelProtocol::Anthropic => "anthropic",
            ChannelProtocol::Gemini => "gemini",
            ChannelProtocol::VideoA => "video-a",
            ChannelProtocol::VideoB => "video-b",
            ChannelProtocol::DashScope => "dashscope",
            ChannelProtocol::Demo => "demo",
            ChannelProtocol::Bedrock => "bedrock",
            ChannelProtocol::Azure => "azure",
            ChannelProtocol::Vertex => "vertex",
        }
    }

    /// The media API a channel of this protocol speaks.
    pub fn media_api(self) -> crate::media::Api {
        match self {
            ChannelProtocol::OpenAi | ChannelProtocol::Demo | ChannelProtocol::Azure => {
                crate::media::Api::OpenAi
            }
            ChannelProtocol::DashScope => crate::media::Api::DashScope,
            ChannelProtocol::Anthropic
            | ChannelProtocol::Gemini
            | ChannelProtocol::VideoA
            | ChannelProtocol::VideoB
            | ChannelProtocol::Bedrock => crate::media::Api::None,
            ChannelProtocol::Vertex => crate::media::Api::None,
        }
    }

    /// Whether chat-style requests (and translations between them) can go here.
    pub fn serves_chat(self) -> bool {
        !matches!(
            self,
            ChannelProtocol::VideoA | ChannelProtocol::VideoB | ChannelProtocol::DashScope
        )
    }

    /// The wire protocol used for chat-style requests to this upstream. Video and image
    /// edit channels are never offered chat requests ([`Router::chat_candidates`]).
    pub fn wire(self) -> Protocol {
        match self {
            ChannelProtocol::OpenAi
            | ChannelProtocol::Demo
            | ChannelProtocol::Azure
            | ChannelProtocol::VideoA
            | ChannelProtocol::VideoB
            | ChannelProtocol::DashScope => Protocol::Chat,
            ChannelProtocol::Anthropic => Protocol::Messages,
            ChannelProtocol::Bedrock => Protocol::Converse,
            // A vertex channel's cloud picks by model ([`Channel::upstream_protocol`]).
            ChannelProtocol::Gemini | ChannelProtocol::Vertex => Protocol::Gemini,
        }
    }
}

/// One configured upstream.
pub struct Channel {
    pub name: String,
    pub protocol: ChannelProtocol,
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The `Host` header's value, made once.
    authority: String,
    /// Path before the protocol's own path, without a trailing slash (`""` or `/proxy`).
    pub path_prefix: String,
    /// As configured: a channel keeps its health across a reload only at the same address.
    pub base_url: String,
    /// Injected toward the upstream, in turn; never logged, never shown.
    pub keys: Keys,
    /// Signs each request instead (`video-a`: Kling's JWT; `video-b`: Volcengine's
    /// signature), when the channel has a key pair.
    pub signer: Option<Signer>,
    /// A cloud-hosted upstream (`azure`, `bedrock`, `vertex`): its paths, its wire and its
    /// authentication.
    pub cloud: Option<Arc<dyn cloud::Cloud>>,
    pub circuit: Circuit,
    /// Shared with the channel of the same name and address in a reloaded configuration.
    pub health: Arc<Health>,
    pub models: Vec<String>,
    pub model_map: BTreeMap<String, String>,
    /// Serves the Responses API natively (`openai` and `azure` channels).
    pub responses_api: bool,
    /// The member a chat request to this channel carries its output limit in.
    pub chat_limit_field: &'static str,
    pub priority: i32,
    pub weight: u32,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// HTTP/2 by ALPN and the channel's own CAs (`http2`, `ca_file`).
    pub transport: transport::Transport,
    resolver: Resolver,
    /// The relay's peers, one per address the resolver gave ([`Channel::shared_peer`]).
    peers: parking_lot::Mutex<Vec<(std::net::SocketAddr, Arc<HttpPeer>)>>,
}

/// Everything but the key's value.
impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("protocol", &self.protocol)
            .field("tls", &self.tls)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path_prefix", &self.path_prefix)
            .field("keys", &self.keys)
            .field("signer", &self.signer.as_ref().map(|_| Hidden("signer")))
            .field("cloud", &self.cloud.as_ref().map(|c| c.auth_state()))
            .field("models", &self.models)
            .field("model_map", &self.model_map)
            .field("responses_api", &self.responses_api)
            .field("priority", &self.priority)
            .field("weight", &self.weight)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// Validates one channel of the configuration; `circuit`: the top-level circuit
    /// options, for a channel that sets none (already validated).
    pub fn from_raw(mut c: RawChannel, circuit: &RawCircuit) -> Result<Channel, Invalid> {
        if c.name.trim().is_empty() {
            return Err(invalid("name", "must not be empty"));
        }
        let protocol = checks::protocol(&c.protocol)?;
        if protocol == ChannelProtocol::Demo {
            c.base_url = checks::demo_base_url(&c)?;
        }
        let base_url = checks::base_url_or_default(&c, protocol)?;
        let checks::BaseUrl {
            tls,
            host,
            port,
            path_prefix,
        } = checks::base_url(&base_url)?;
        checks::models(&c)?;
        if c.responses_api && !matches!(protocol, ChannelProtocol::OpenAi | ChannelProtocol::Azure)
        {
            return Err(invalid(
                "responses_api",
                "only `openai` and `azure` channels can serve the Responses API natively",
            ));
        }
        if c.weight == 0 {
            return Err(invalid("weight", "must be at least 1"));
        }
        let circuit = check_circuit(c.circuit.as_ref().unwrap_or(circuit))?;
        let signer = checks::signer(&c, protocol)?;
        let cloud = cloud::from_raw(protocol, &c)?;
        let transport = transport::Transport::from_raw(&c, tls)?;
        let secrets = checks::secrets(c.api_key, c.api_keys)?;
        let chat_limit_field = checks::chat_limit_field(c.max_tokens_field.as_deref(), protocol)?;
        Ok(Channel {
            transport,
            chat_limit_field,
            resolver: Resolver::new(host.clone(), port),
            peers: parking_lot::Mutex::new(Vec::new()),
            authority: authority(&host, port, tls),
            health: Arc::new(Health::new(&c.name)),
            name: c.name,
            protocol,
            tls,
            host,
            port,
            path_prefix,
            base_url,
            keys: Keys::new(secrets),
            signer,
            cloud,
            circuit,
            models: c.models,
            model_map: c.model_map,
            responses_api: c.responses_api,
            priority: c.priority,
            weight: c.weight,
            connect_timeout: Duration::from_secs(c.connect_timeout_secs.max(1)),
            read_timeout: Duration::from_secs(c.read_timeout_secs.max(1)),
        })
    }

    /// Whether the failover loop may send a request here now: the circuit admits it and
    /// some key is still in use.
    pub fn admit(&self) -> bool {
        self.keys.usable() && self.health.admit(&self.circuit)
    }

    /// The protocol this channel is spoken to in, for a client speaking `client` about
    /// `model` (the upstream name): responses clients reach a native Responses API as
    /// they are, every other pair goes through the channel's chat-style protocol (a
    /// cloud's choice for the model).
    pub fn upstream_protocol(&self, client: Protocol, model: &str) -> Protocol {
        if let Some(cloud) = &self.cloud {
            return cloud.wire(client, model);
        }
        if client == Protocol::Responses && self.responses_api {
            Protocol::Responses
        } else {
            self.protocol.wire()
        }
    }

    /// The model name sent upstream for the name the caller used.
    pub fn upstream_model<'a>(&'a self, model: &'a str) -> &'a str {
        self.model_map.get(model).map_or(model, String::as_str)
    }

    /// A target for one URL an upstream handed out (a finished video on its storage host),
    /// with this channel's timeouts, and the path and query to ask for. The channel's key
    /// goes along only when the URL is on the channel's own host.
    pub fn for_url(&self, url: &str) -> Option<(Channel, String)> {
        let u = url::Url::parse(url).ok()?;
        let tls = match u.scheme() {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        let host = u.host_str()?;
        let port = u.port_or_known_default()?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let same = tls == self.tls && bare == self.host && port == self.port;
        let raw = RawChannel {
            name: self.name.clone(),
            protocol: self.protocol.as_str().into(),
            base_url: format!("{}://{host}:{port}", u.scheme()),
            api_key: if same {
                self.keys.pick().secret.to_string()
            } else {
                String::new()
            },
            // Result URLs are pre-signed or public: a signature of ours would not fit.
            models: vec![String::from("-")],
            // A storage host is not the channel's upstream: HTTP/1.1 (one download each,
            // nothing to share a connection with) and the system roots.
            http2: false,
            ca_file: None,
            connect_timeout_secs: self.connect_timeout.as_secs(),
            read_timeout_secs: self.read_timeout.as_secs(),
            ..RawChannel::default()
        };
        let mut channel = Channel::from_raw(raw, &RawCircuit::default()).ok()?;
        // Failures of a download count against the channel that handed out the URL.
        channel.health = self.health.clone();
        channel.circuit = self.circuit;
        let mut path = u.path().to_string();
        if let Some(q) = u.query() {
            path.push('?');
            path.push_str(q);
        }
        Some((channel, path))
    }

    /// `Host` header value.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// A peer for one upstream exchange (the address is resolved and cached), the
    /// caller's to change.
    pub async fn peer(&self) -> std::io::Result<HttpPeer> {
        let addr = self.resolver.pick().await?;
        Ok(self.peer_at(addr))
    }

    /// The peer of relay exchanges at the address the resolver picks, made once per
    /// address and shared: building one per request (its options and host) and moving
    /// its 672 bytes along with every exchange showed in the proxy threads' profile.
    pub async fn shared_peer(&self) -> std::io::Result<Arc<HttpPeer>> {
        let addr = self.resolver.pick().await?;
        let mut peers = self.peers.lock();
        if let Some((_, p)) = peers.iter().find(|(a, _)| *a == addr) {
            return Ok(p.clone());
        }
        // A name whose addresses keep changing does not grow the list without end.
        if peers.len() >= MAX_SHARED_PEERS {
            peers.clear();
        }
        let peer = Arc::new(self.peer_at(addr));
        peers.push((addr, peer.clone()));
        Ok(peer)
    }

    fn peer_at(&self, addr: std::net::SocketAddr) -> HttpPeer {
        let mut peer = HttpPeer::new(addr, self.tls, self.host.clone());
        let o = &mut peer.options;
        o.connection_timeout = Some(self.connect_timeout);
        o.total_connection_timeout = Some(self.connect_timeout + Duration::from_secs(5));
        o.read_timeout = Some(self.read_timeout);
        o.write_timeout = Some(self.read_timeout);
        o.idle_timeout = Some(Duration::from_secs(90));
        self.transport.apply(&mut peer);
        peer
    }
}

/// Addresses a channel keeps a shared peer for (a name resolves to a few).
const MAX_SHARED_PEERS: usize = 16;

/// A channel's own circuit options, or the top-level default (`circuit.…`).
pub fn check_circuit(c: &RawCircuit) -> Result<Circuit, Invalid> {
    if c.cooldown_secs == 0 {
        return Err(invalid("circuit.cooldown_secs", "must be at least 1"));
    }
    Ok(Circuit {
        failures: c.failures,
        cooldown: Duration::from_secs(c.cooldown_secs),
    })
}

/// Model → channels, built once from the configuration.
#[derive(Debug, Default)]
pub struct Router {
    by_model: HashMap<String, Vec<Arc<Channel>>>,
}

impl Router {
    pub fn new(channels: &[Arc<Channel>]) -> Router {
        let mut by_model: HashMap<String, Vec<Arc<Channel>>> = HashMap::new();
        for c in channels {
            for m in &c.models {
                by_model.entry(m.clone()).or_default().push(c.clone());
            }
        }
        for list in by_model.values_mut() {
            list.sort_by_key(|c| c.priority);
        }
        Router { by_model }
    }

    pub fn serves(&self, model: &str) -> bool {
        self.by_model.contains_key(model)
    }

    /// Every model some channel serves, sorted.
    pub fn models(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.by_model.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// [`Router::candidates`] that can take chat-style requests.
    pub fn chat_candidates(&self, model: &str) -> Vec<Arc<Channel>> {
        let mut v = self.candidates(model);
        v.retain(|c| c.protocol.serves_chat());
        v
    }

    /// A channel by its configured name.
    pub fn by_name(&self, name: &str) -> Option<Arc<Channel>> {
        self.by_model
            .values()
            .flatten()
            .find(|c| c.name == name)
            .cloned()
    }

    /// The channels for a model in the order to try them: lowest priority value first;
    /// within one priority, a weighted random order (so a failed connection falls over
    /// to a sibling before a lower-priority channel).
    pub fn candidates(&self, model: &str) -> Vec<Arc<Channel>> {
        let Some(list) = self.by_model.get(model) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(list.len());
        for group in list.chunk_by(|a, b| a.priority == b.priority) {
            if group.len() == 1 {
                out.push(group[0].clone());
                continue;
            }
            // Efraimidis–Spirakis: sort by u^(1/w), largest first.
            let mut keyed: Vec<(f64, &Arc<Channel>)> = group
                .iter()
                .map(|c| {
                    let u = ids::unit_random().max(f64::MIN_POSITIVE);
                    (u.powf(1.0 / c.weight as f64), c)
                })
                .collect();
            keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
            out.extend(keyed.into_iter().map(|(_, c)| c.clone()));
        }
        out
    }
}

/// The `Host` header value of an upstream: the port only when it is not the scheme's.
fn authority(host: &str, port: u16, tls: bool) -> String {
    let default_port = if tls { 443 } else { 80 };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == default_port {
        host
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chan(name: &str, priority: i32, weight: u32) -> Arc<Channel> {
        let raw = RawChannel {
            name: name.into(),
            protocol: "openai".into(),
            base_url: "http://127.0.0.1:9/prefix/".into(),
            models: vec!["m".into()],
            priority,
            weight,
            connect_timeout_secs: 1,
            read_timeout_secs: 1,
            ..RawChannel::default()
        };
        Arc::new(Channel::from_raw(raw, &RawCircuit::default()).unwrap())
    }

    #[test]
    fn priority_first_then_weight() {
        let r = Router::new(&[chan("low", 1, 1), chan("a", 0, 3), chan("b", 0, 1)]);
        let mut first_a = 0;
        for _ in 0..4000 {
            let order: Vec<_> = r.candidates("m").iter().map(|c| c.name.clone()).collect();
            assert_eq!(order.len(), 3);
            assert_eq!(order[2], "low");
            if order[0] == "a" {
                first_a += 1;
            }
        }
        // weight 3 vs 1: `a` first about 75% of the time
        assert!((2700..3300).contains(&first_a), "{first_a}");
    }

    /// The relay's peer is made once per address and carries the channel's timeouts as
    /// the one a caller may change does.
    #[tokio::test]
    async fn the_shared_peer_is_made_once_per_address() {
        let c = chan("a", 0, 1);
        let (one, two) = (
            c.shared_peer().await.unwrap(),
            c.shared_peer().await.unwrap(),
        );
        assert!(Arc::ptr_eq(&one, &two));
        let own = c.peer().await.unwrap();
        assert_eq!(one._address, own._address);
        assert_eq!(one.options.read_timeout, Some(Duration::from_secs(1)));
        assert_eq!(
            one.options.connection_timeout,
            own.options.connection_timeout
        );
        assert_eq!(one.options.idle_timeout, own.options.idle_timeout);
        assert_eq!(c.peers.lock().len(), 1);
    }

    #[test]
    fn key_pairs_only_whole_and_only_on_signing_protocols() {
        let raw = |protocol: &str, api: &str, ak: &str, sk: &str| RawChannel {
            name: "v".into(),
            protocol: protocol.into(),
            base_url: "https://visual.volcengineapi.com".into(),
            api_key: api.into(),
            access_key: ak.into(),
            secret_key: sk.into(),
            models: vec!["m".into()],
            connect_timeout_secs: 1,
            read_timeout_secs: 1,
            ..RawChannel::default()
        };
        let path_of = |r| {
            Channel::from_raw(r, &RawCircuit::default())
                .unwrap_err()
                .field
        };
        assert!(matches!(
            Channel::from_raw(raw("video-a", "", "ak", "sk"), &RawCircuit::default())
                .unwrap()
                .signer,
            Some(Signer::Kling(_))
        ));
        assert!(matches!(
            Channel::from_raw(raw("video-b", "", "ak", "sk"), &RawCircuit::default())
                .unwrap()
                .signer,
            Some(Signer::Volcengine(_))
        ));
        assert!(
            Channel::from_raw(raw("video-b", "k", "", ""), &RawCircuit::default())
                .unwrap()
                .signer
                .is_none()
        );
        assert_eq!(path_of(raw("video-b", "", "ak", "")), "secret_key");
        assert_eq!(path_of(raw("video-a", "", "", "sk")), "access_key");
        assert_eq!(path_of(raw("openai", "", "ak", "sk")), "access_key");
        assert_eq!(path_of(raw("video-a", "k", "ak", "sk")), "api_key");
        let c = Channel::from_raw(
            raw("video-a", "", "ak-secret", "sk-secret"),
            &RawCircuit::default(),
        )
        .unwrap();
        assert!(!format!("{c:?}").contains("secret"), "keys never printed");
    }

    #[test]
    fn base_url_parts() {
        let c = chan("x", 0, 1);
        assert_eq!(c.path_prefix, "/prefix");
        assert_eq!(c.authority(), "127.0.0.1:9");
        assert!(!c.tls);
    }

    /// A demo channel reaches the server in this process at its token rate and takes no
    /// address of its own; every other channel must name one.
    #[test]
    fn demo_channels_need_no_base_url_and_others_do() {
        let raw = |protocol: &str, base_url: &str, rate: Option<u32>| RawChannel {
            name: "d".into(),
            protocol: protocol.into(),
            base_url: base_url.into(),
            models: vec!["demo".into()],
            tokens_per_second: rate,
            ..RawChannel::default()
        };
        let c = Channel::from_raw(raw("demo", "", Some(7)), &RawCircuit::default()).unwrap();
        assert_eq!(c.path_prefix, "/demo/7");
        assert_eq!(c.host, "127.0.0.1");
        assert_eq!(
            std::net::SocketAddr::from(([127, 0, 0, 1], c.port)),
            crate::demo::address().unwrap()
        );
        let field = |r| {
            Channel::from_raw(r, &RawCircuit::default())
                .unwrap_err()
                .field
        };
        assert_eq!(field(raw("demo", "http://x", None)), "base_url");
        assert_eq!(field(raw("demo", "", Some(0))), "tokens_per_second");
        assert_eq!(field(raw("openai", "", None)), "base_url");
    }
}
