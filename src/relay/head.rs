//! The header of an upstream request, built once for either way it is sent: as Pingora's
//! [`RequestHeader`] (HTTP/2, a `GET`, a cloud or signed channel), or as the bytes of an
//! HTTP/1.1 header written as its fields come ([`Wire`]), for a `POST` to a plain
//! HTTP/1 upstream, the one sent in the same write as its body.
//!
//! Writing the bytes directly skips a header map (a hash and an allocation per field,
//! then a walk to serialize it): about 2 µs of a small chat's 35 µs budget.

use crate::channels::{Channel, ChannelProtocol};
use crate::protocol::decimal;
use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora::{Error, ErrorType, OrErr};

/// Headers a client may pass on to an upstream of its own protocol; everything else the
/// client sent (its credentials above all) stays at the gateway.
const FORWARDED: &[(&str, ChannelProtocol)] = &[
    ("anthropic-beta", ChannelProtocol::Anthropic),
    ("openai-beta", ChannelProtocol::OpenAi),
];

/// `anthropic-version` when the client did not choose one (it is required upstream).
const DEFAULT_MESSAGES_VERSION: &str = "2023-06-01";

const USER_AGENT: &str = concat!("model-gateway/", env!("CARGO_PKG_VERSION"));

/// An upstream request as the relay sends it: what its header is built from, and its
/// body.
pub struct Outgoing<'a> {
    /// `POST`, or `GET` (sent without a body).
    pub method: &'a str,
    /// Path and query, after the channel's own path prefix.
    pub path: &'a str,
    pub body: Bytes,
    /// `application/json`, or a multipart type with its boundary.
    pub content_type: &'a str,
    pub stream: bool,
    /// The model name sent upstream (a cloud builds its path from it); `""` where none.
    pub model: &'a str,
    /// The wire protocol of a chat-style body; `None` for media and video bodies.
    pub wire: Option<crate::protocol::Protocol>,
    /// The client's request headers, for the few that are forwarded.
    pub client_headers: &'a http::HeaderMap,
}

/// Where the fields of a header go. Names are lower case; a name is put at most once,
/// except where [`RequestHeader`] replaces (a cloud's own `accept`), which [`Wire`] is
/// never given.
pub trait Fields {
    fn put(&mut self, name: &'static str, value: &[u8]) -> pingora::Result<()>;

    /// A value made of `parts`, one after the other.
    fn put_parts(&mut self, name: &'static str, parts: &[&[u8]]) -> pingora::Result<()> {
        self.put(name, &parts.concat())
    }
}

impl Fields for RequestHeader {
    fn put(&mut self, name: &'static str, value: &[u8]) -> pingora::Result<()> {
        let value = http::HeaderValue::from_bytes(value)
            .or_err_with(ErrorType::InvalidHTTPHeader, || {
                format!("the value of upstream header `{name}`")
            })?;
        self.insert_header(name, value)
    }
}

/// An HTTP/1.1 request header as bytes, its request line first; each value is checked
/// as [`http::HeaderValue`] checks it.
pub struct Wire(Vec<u8>);

impl Wire {
    /// The request line of `method` on `prefix` + `path`; `room` is kept for the body
    /// written after the header.
    pub fn new(method: &str, prefix: &str, path: &str, room: usize) -> pingora::Result<Wire> {
        let forbidden = |b: &u8| *b <= b' ' || *b == 0x7f;
        if path.is_empty() || prefix.bytes().chain(path.bytes()).any(|b| forbidden(&b)) {
            return Error::e_explain(
                ErrorType::InvalidHTTPHeader,
                "the upstream request line holds a forbidden byte",
            );
        }
        let mut w = Vec::with_capacity(512 + room);
        for part in [method, " ", prefix, path, " HTTP/1.1\r\n"] {
            w.extend_from_slice(part.as_bytes());
        }
        Ok(Wire(w))
    }

    /// The header's bytes, ended by its empty line.
    pub fn finish(mut self) -> Vec<u8> {
        self.0.extend_from_slice(b"\r\n");
        self.0
    }
}

impl Fields for Wire {
    fn put(&mut self, name: &'static str, value: &[u8]) -> pingora::Result<()> {
        self.put_parts(name, &[value])
    }

    fn put_parts(&mut self, name: &'static str, parts: &[&[u8]]) -> pingora::Result<()> {
        let control = |b: &u8| (*b < b' ' && *b != b'\t') || *b == 0x7f;
        if parts.iter().any(|p| p.iter().any(control)) {
            return Error::e_explain(
                ErrorType::InvalidHTTPHeader,
                format!("the value of upstream header `{name}` holds a control byte"),
            );
        }
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b": ");
        for part in parts {
            self.0.extend_from_slice(part);
        }
        self.0.extend_from_slice(b"\r\n");
        Ok(())
    }
}

/// Whether the header may go out as [`Wire`] bytes: a `POST` without a cloud's or a
/// signer's fields, to an upstream that speaks only HTTP/1 (a plain `http://` one).
pub fn wire_ready(channel: &Channel, out: &Outgoing<'_>, h1_only: bool) -> bool {
    h1_only && out.method == "POST" && channel.cloud.is_none() && channel.signer.is_none()
}

/// Pingora's header of the request (names in lower case: as in HTTP/2, which every
/// HTTP/1.1 server reads alike, and each insert costs one map instead of two).
pub fn request_header(
    channel: &Channel,
    out: &Outgoing<'_>,
    key: &str,
    auth: &[(&'static str, String)],
) -> pingora::Result<RequestHeader> {
    let path = format!("{}{}", channel.path_prefix, out.path);
    let mut h = RequestHeader::build_no_case(out.method, path.as_bytes(), Some(8))?;
    fields(channel, out, key, auth, &mut h)?;
    Ok(h)
}

/// The request's header as HTTP/1.1 bytes (see [`wire_ready`]), with `room` for the body
/// written after it in the same write.
pub fn wire_header(
    channel: &Channel,
    out: &Outgoing<'_>,
    key: &str,
    room: usize,
) -> pingora::Result<Wire> {
    let mut w = Wire::new(out.method, &channel.path_prefix, out.path, room)?;
    fields(channel, out, key, &[], &mut w)?;
    Ok(w)
}

/// Puts the request's fields. `auth`: a cloud channel's own authentication, which takes
/// the place of the protocol's key header.
fn fields(
    channel: &Channel,
    out: &Outgoing<'_>,
    key: &str,
    auth: &[(&'static str, String)],
    h: &mut impl Fields,
) -> pingora::Result<()> {
    h.put("host", channel.authority().as_bytes())?;
    if out.method != "GET" {
        h.put("content-type", out.content_type.as_bytes())?;
        let mut digits = [0; 20];
        let len = decimal(out.body.len() as u64, &mut digits);
        h.put("content-length", len)?;
    }
    let accept = if out.stream {
        "text/event-stream"
    } else {
        "*/*"
    };
    h.put("accept", accept.as_bytes())?;
    h.put("user-agent", USER_AGENT.as_bytes())?;
    if let Some(signer) = &channel.signer {
        let path = format!("{}{}", channel.path_prefix, out.path);
        let req = crate::channels::credentials::Request {
            method: out.method,
            path: &path,
            host: channel.authority(),
            content_type: (out.method != "GET").then_some(out.content_type),
            body: &out.body,
        };
        for (name, value) in signer.headers(&req, crate::ids::now_secs()) {
            h.put(name, value.as_bytes())?;
        }
    }
    if channel.cloud.is_some() {
        for (name, value) in auth {
            h.put(name, value.as_bytes())?;
        }
        return Ok(());
    }
    match channel.protocol {
        ChannelProtocol::OpenAi
        | ChannelProtocol::Demo
        | ChannelProtocol::Azure
        | ChannelProtocol::VideoA
        | ChannelProtocol::VideoB
        | ChannelProtocol::DashScope => {
            if !key.is_empty() && channel.signer.is_none() {
                h.put_parts("authorization", &[b"Bearer ", key.as_bytes()])?;
            }
        }
        ChannelProtocol::Anthropic => {
            if !key.is_empty() {
                h.put("x-api-key", key.as_bytes())?;
            }
            let version = ["anthropic-version", "msg-version"]
                .iter()
                .find_map(|n| out.client_headers.get(*n).and_then(|v| v.to_str().ok()))
                .unwrap_or(DEFAULT_MESSAGES_VERSION);
            h.put("anthropic-version", version.as_bytes())?;
        }
        ChannelProtocol::Gemini => {
            if !key.is_empty() {
                h.put("x-goog-api-key", key.as_bytes())?;
            }
        }
        // Authenticated by their cloud part (above).
        ChannelProtocol::Bedrock | ChannelProtocol::Vertex => {}
    }
    for (name, proto) in FORWARDED {
        if *proto == channel.protocol {
            if let Some(v) = out.client_headers.get(*name) {
                h.put(name, v.as_bytes())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::RawChannel;
    use pingora::protocols::http::v1::client::http_req_header_to_wire;

    fn channel(protocol: &str, base_url: &str) -> Channel {
        let raw = RawChannel {
            name: "c".into(),
            protocol: protocol.into(),
            base_url: base_url.into(),
            models: vec!["m".into()],
            ..Default::default()
        };
        Channel::from_raw(raw, &Default::default()).unwrap()
    }

    fn outgoing<'a>(headers: &'a http::HeaderMap, stream: bool) -> Outgoing<'a> {
        Outgoing {
            method: "POST",
            path: "/v1/chat/completions?x=1",
            body: Bytes::from_static(b"{\"model\":\"m\"}"),
            content_type: "application/json",
            stream,
            model: "m",
            wire: None,
            client_headers: headers,
        }
    }

    /// A header's bytes with each field name in lower case (Pingora writes a few well
    /// known names capitalized; names are read without regard to case).
    fn names_lower(wire: &[u8]) -> String {
        String::from_utf8_lossy(wire)
            .split_inclusive("\r\n")
            .map(|line| match line.split_once(':') {
                Some((name, rest)) if !line.contains(" HTTP/1.1") => {
                    format!("{}:{rest}", name.to_ascii_lowercase())
                }
                _ => line.to_string(),
            })
            .collect()
    }

    /// The bytes written directly are the bytes Pingora serializes from its own header
    /// (field names aside, see [`names_lower`]), for every protocol's fields, a path
    /// prefix, forwarded and defaulted headers.
    #[test]
    fn wire_bytes_are_pingoras_serialization_of_the_same_header() {
        let mut client = http::HeaderMap::new();
        client.insert("anthropic-beta", "tools-2024".parse().unwrap());
        client.insert("openai-beta", "assistants=v2".parse().unwrap());
        client.insert("msg-version", "2023-01-01".parse().unwrap());
        client.insert("authorization", "Bearer client-key".parse().unwrap());
        let none = http::HeaderMap::new();
        let cases = [
            ("openai", "http://up.example:8080/prefix", &client, true),
            ("openai", "http://up.example", &none, false),
            ("anthropic", "http://up.example:81", &client, false),
            ("anthropic", "http://up.example:81", &none, true),
            ("gemini", "http://up.example:82/v1beta", &client, false),
            ("dashscope", "http://127.0.0.1:9", &none, false),
        ];
        for (protocol, base, headers, stream) in cases {
            let c = channel(protocol, base);
            let out = outgoing(headers, stream);
            let pingora = request_header(&c, &out, "sk-up", &[]).unwrap();
            let expected = http_req_header_to_wire(&pingora).unwrap();
            let wire = wire_header(&c, &out, "sk-up", 0).unwrap().finish();
            assert_eq!(
                String::from_utf8_lossy(&wire),
                names_lower(&expected),
                "{protocol} {base}"
            );
            assert!(wire_ready(&c, &out, true));
            assert!(
                !wire_ready(&c, &out, false),
                "an upstream that may speak HTTP/2"
            );
        }
    }

    #[test]
    fn a_get_is_not_sent_as_wire_bytes() {
        let none = http::HeaderMap::new();
        let c = channel("openai", "http://up.example");
        let out = Outgoing {
            method: "GET",
            ..outgoing(&none, false)
        };
        assert!(!wire_ready(&c, &out, true));
    }

    /// What `http::HeaderValue` and Pingora refuse, the bytes refuse too: a control byte
    /// in a value (a key with a line break would add a header), a space in the path.
    #[test]
    fn forbidden_bytes_are_refused_as_pingora_refuses_them() {
        let none = http::HeaderMap::new();
        let c = channel("openai", "http://up.example");
        let out = outgoing(&none, false);
        for key in ["sk\r\nx-evil: 1", "sk\0", "sk\x7f"] {
            assert!(request_header(&c, &out, key, &[]).is_err(), "{key:?}");
            let e = wire_header(&c, &out, key, 0).err().expect("refused");
            assert_eq!(e.etype(), &ErrorType::InvalidHTTPHeader);
        }
        // A tab and bytes above ASCII are allowed by both.
        for key in ["sk\tx", "sk-\u{e9}"] {
            let pingora = request_header(&c, &out, key, &[]).unwrap();
            let wire = wire_header(&c, &out, key, 0).unwrap().finish();
            let expected = http_req_header_to_wire(&pingora).unwrap();
            assert_eq!(String::from_utf8_lossy(&wire), names_lower(&expected));
        }
        for path in ["/v1/a b", "/v1/a\r\nb", ""] {
            let out = Outgoing {
                path,
                ..outgoing(&none, false)
            };
            assert!(wire_header(&c, &out, "k", 0).is_err(), "{path:?}");
        }
    }
}
