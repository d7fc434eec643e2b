//! Pieces of the generate-content wire format shared by requests, responses and streams:
//! field spellings, usage, finish reasons, synthesized ids, signatures, and the two
//! framings of a streamed answer. The answer's typed views are in [`answer`] and
//! [`usage`].

pub mod answer;
pub mod usage;

use super::super::ir::FinishReason;
use super::super::limit::{self, Limit};
use super::super::Usage;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub(super) use super::super::invalid;

/// `systemInstruction` → `system_instruction`.
fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A field of `obj` under its JSON name (lowerCamelCase) or its proto name (snake_case):
/// the API accepts both, and its own REST examples use `inline_data`, `system_instruction`.
/// `null` counts as absent.
pub(super) fn field<'a>(obj: &'a Value, camel: &str) -> Option<&'a Value> {
    let o = obj.as_object()?;
    if let Some(v) = o.get(camel).filter(|v| !v.is_null()) {
        return Some(v);
    }
    let snake = snake_case(camel);
    if snake == camel {
        return None;
    }
    o.get(&snake).filter(|v| !v.is_null())
}

/// An object the client may have spelt both ways at once (the API takes either name, and
/// nothing stops a client from sending both). Fields are looked up in the camelCase
/// object first. The relay never adds a second spelling: it lowers the output limit where
/// the client wrote it, and adds it in the spelling of the object the client sent
/// ([`Request::set_output_limit`]).
pub(super) struct Section<'a>(Vec<&'a Value>);

impl<'a> Section<'a> {
    pub(super) fn of(parent: &'a Value, camel: &str) -> Section<'a> {
        let snake = snake_case(camel);
        let objs = [camel, snake.as_str()]
            .iter()
            .filter_map(|k| parent.get(*k))
            .filter(|v| v.is_object())
            .collect();
        Section(objs)
    }

    pub(super) fn get(&self, camel: &str) -> Option<&'a Value> {
        self.0.iter().find_map(|o| field(o, camel))
    }
}

/// `generationConfig` and the members of it the gateway reads or changes, each under
/// its JSON name and its proto name.
const CONFIG: &str = "generationConfig";
const MAX_OUTPUT_TOKENS: &str = "maxOutputTokens";
const CANDIDATE_COUNT: &str = "candidateCount";

/// The output limit of a parsed body: `generationConfig.maxOutputTokens` under either
/// spelling of either name, read as [`Section`] reads every setting.
pub fn output_limit(body: &Value) -> Option<u64> {
    Section::of(body, CONFIG)
        .get(MAX_OUTPUT_TOKENS)
        .and_then(Value::as_u64)
}

/// How many answers the request asks for: `candidateCount` (absent, null or 0: one).
pub fn choices(body: &Value) -> u64 {
    Section::of(body, CONFIG)
        .get(CANDIDATE_COUNT)
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1)
}

/// A generate-content request, typed where the gateway acts on it: the generation
/// config under both spellings. The model is named in the path.
#[derive(Debug, Deserialize, Serialize)]
pub struct Request {
    #[serde(rename = "generationConfig")]
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_config: Option<Config>,
    #[serde(rename = "generation_config")]
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_config_proto: Option<Config>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A generation config as sent: an object, or anything else (`null`) kept as it came.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Config {
    Object(Box<GenerationConfig>),
    Other(Value),
}

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct GenerationConfig {
    #[serde(rename = "maxOutputTokens")]
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<Limit>,
    #[serde(rename = "max_output_tokens")]
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens_proto: Option<Limit>,
    #[serde(rename = "candidateCount")]
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_count: Option<Limit>,
    #[serde(rename = "candidate_count")]
    #[serde(default, deserialize_with = "limit::present")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_count_proto: Option<Limit>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A member that is there and not `null` ([`field`]'s rule).
fn set(slot: &Option<Limit>) -> bool {
    !matches!(slot, None | Some(Limit::Other(Value::Null)))
}

impl GenerationConfig {
    fn limits(&mut self) -> [&mut Option<Limit>; 2] {
        [
            &mut self.max_output_tokens,
            &mut self.max_output_tokens_proto,
        ]
    }
}

impl Request {
    /// The config objects in the order [`Section`] reads them: the JSON name first.
    fn configs(&self) -> impl Iterator<Item = &GenerationConfig> {
        [&self.generation_config, &self.generation_config_proto]
            .into_iter()
            .filter_map(|c| match c {
                Some(Config::Object(g)) => Some(&**g),
                _ => None,
            })
    }

    /// The first of a setting's two spellings that is set, in the first object that
    /// sets it.
    fn setting(&self, pick: fn(&GenerationConfig) -> [&Option<Limit>; 2]) -> Option<u64> {
        self.configs()
            .find_map(|g| pick(g).into_iter().find(|s| set(s)))
            .and_then(limit::tokens)
    }

    pub fn output_limit(&self) -> Option<u64> {
        self.setting(|g| [&g.max_output_tokens, &g.max_output_tokens_proto])
    }

    pub fn choices(&self) -> u64 {
        self.setting(|g| [&g.candidate_count, &g.candidate_count_proto])
            .unwrap_or(1)
            .max(1)
    }

    /// Lowers (never raises) the limit to `cap` under every spelling the client set it
    /// in; when it set none, adds it to the config object it sent (in that object's
    /// spelling), or to a new `generationConfig`.
    pub fn set_output_limit(&mut self, cap: u64) {
        let mut lowered = false;
        for c in [
            &mut self.generation_config,
            &mut self.generation_config_proto,
        ] {
            if let Some(Config::Object(g)) = c {
                for slot in g.limits() {
                    if set(slot) {
                        limit::lower(slot, cap);
                        lowered = true;
                    }
                }
            }
        }
        if lowered {
            return;
        }
        match (
            &mut self.generation_config,
            &mut self.generation_config_proto,
        ) {
            (Some(Config::Object(g)), _) => limit::lower(&mut g.max_output_tokens, cap),
            (_, Some(Config::Object(g))) => limit::lower(&mut g.max_output_tokens_proto, cap),
            (camel, _) => {
                *camel = Some(Config::Object(Box::new(GenerationConfig {
                    max_output_tokens: Some(Limit::Tokens(cap)),
                    ..GenerationConfig::default()
                })))
            }
        }
    }
}

/// The inverse of [`usage::UsageMetadata::to_usage`]; the optional counts appear only when non-zero, as the
/// API itself reports them. The modality breakdowns are written only when some input or
/// output was audio or image (text makes up the rest).
pub(super) fn usage_metadata(u: &Usage) -> Value {
    let reasoning = u.reasoning_tokens.min(u.output_tokens);
    let mut m = Map::new();
    m.insert("promptTokenCount".into(), u.input_tokens.into());
    m.insert(
        "candidatesTokenCount".into(),
        (u.output_tokens - reasoning).into(),
    );
    m.insert(
        "totalTokenCount".into(),
        (u.input_tokens + u.output_tokens).into(),
    );
    if u.cached_input_tokens > 0 {
        m.insert(
            "cachedContentTokenCount".into(),
            u.cached_input_tokens.into(),
        );
    }
    if reasoning > 0 {
        m.insert("thoughtsTokenCount".into(), reasoning.into());
    }
    let prompt = modalities(u.input_tokens, u.audio_input_tokens, u.image_input_tokens);
    if let Some(details) = prompt {
        m.insert("promptTokensDetails".into(), details);
    }
    let candidates = modalities(
        u.output_tokens - reasoning,
        u.audio_output_tokens,
        u.image_output_tokens,
    );
    if let Some(details) = candidates {
        m.insert("candidatesTokensDetails".into(), details);
    }
    Value::Object(m)
}

/// A `ModalityTokenCount` list for `total` tokens of which `audio` and `image` were
/// audio and images; `None` when all were text.
fn modalities(total: u64, audio: u64, image: u64) -> Option<Value> {
    if audio == 0 && image == 0 {
        return None;
    }
    let audio = audio.min(total);
    let image = image.min(total - audio);
    let list = [
        ("TEXT", total - audio - image),
        ("AUDIO", audio),
        ("IMAGE", image),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(modality, n)| json!({"modality": modality, "tokenCount": n}))
    .collect();
    Some(Value::Array(list))
}

pub(super) fn finish_to_wire(f: Option<&FinishReason>) -> &'static str {
    match f {
        None
        | Some(FinishReason::Stop | FinishReason::ToolCalls | FinishReason::StopSequence(_)) => {
            "STOP"
        }
        Some(FinishReason::Length) => "MAX_TOKENS",
        Some(FinishReason::ContentFilter) => "SAFETY",
        Some(FinishReason::Other(_)) => "OTHER",
    }
}

/// `STOP` is what the API says after function calls too; the pivot wants `ToolCalls`.
pub(super) fn finish_from_wire(reason: &str, has_calls: bool) -> FinishReason {
    match reason {
        "STOP" if has_calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// FNV-1a over the pieces (with a separator), for ids that must be deterministic.
fn fnv1a(pieces: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in pieces {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// An id for a function call the upstream gave none. The index makes it unique within
/// the answer; the hash of the answer's id and the call makes a repeat across turns
/// unlikely (clients keep every turn's ids in one history).
pub(super) fn upstream_call_id(response_id: &str, name: &str, args: &str, index: usize) -> String {
    let h = fnv1a(&[response_id, name, args]);
    format!("call_{:012x}_{index}", h & 0xffff_ffff_ffff)
}

/// Gemini signatures arrive in standard base64. The API accepts the URL-safe alphabet
/// without padding for the same bytes, and in that form a signature carried inside a tool
/// call id ([`super::super::ir::join_call_id`]) keeps the id within `[a-zA-Z0-9_-]`.
pub(super) fn signature_from_upstream(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '=')
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect()
}

/// A signature a generate-content client sends back. The google-genai SDK decodes the
/// bytes fields it receives and re-encodes them in the URL-safe alphabet; signatures of
/// other providers (standard base64) must go back to them exactly as they were issued.
pub(super) fn signature_from_client(s: &str) -> String {
    if !s.contains(['-', '_']) {
        return s.to_string();
    }
    let mut out: String = s
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !out.len().is_multiple_of(4) {
        out.push('=');
    }
    out
}

/// A signature as a generate-content client may see it. The google-genai SDK decodes
/// `thoughtSignature` as base64 and fails on the whole answer if it cannot; a signature
/// that is not base64 (none of today's providers issue one) is left out instead.
pub(super) fn client_signature(s: Option<&str>) -> Option<&str> {
    let s = s.filter(|s| !s.is_empty())?;
    let body = s.trim_end_matches('=');
    let padding = s.len() - body.len();
    let alphabet = body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'));
    (alphabet && padding <= 2 && body.len() % 4 != 1).then_some(s)
}

fn error_body(message: &str) -> Value {
    json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}})
}

/// The terminal error chunk of an `alt=sse` stream; the google-genai SDK raises any chunk
/// that starts with `{"error":`.
pub(super) fn error_event(message: &str) -> Vec<u8> {
    format!("data: {}\r\n\r\n", error_body(message)).into_bytes()
}

/// Writes a streamed answer in the client's framing: server-sent events with `alt=sse`,
/// otherwise one JSON array written element by element (what the API sends then).
#[derive(Debug)]
pub(super) struct ChunkWriter {
    sse: bool,
    started: bool,
    closed: bool,
}

impl ChunkWriter {
    pub(super) fn new(sse: bool) -> ChunkWriter {
        ChunkWriter {
            sse,
            started: false,
            closed: false,
        }
    }

    pub(super) fn chunk(&mut self, v: &Value, out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        if self.sse {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(v.to_string().as_bytes());
            out.extend_from_slice(b"\r\n\r\n");
        } else {
            out.extend_from_slice(if self.started { b",\r\n" } else { b"[" });
            out.extend_from_slice(v.to_string().as_bytes());
        }
        self.started = true;
    }

    /// Ends the stream; an array that never had an element is still valid JSON.
    pub(super) fn close(&mut self, out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        if !self.sse {
            if !self.started {
                out.push(b'[');
            }
            out.push(b']');
        }
        self.closed = true;
    }

    /// Ends the stream with the error chunk (SSE) or error element (array).
    pub(super) fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        self.chunk(&error_body(message), out);
        self.close(out);
    }

    pub(super) fn closed(&self) -> bool {
        self.closed
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;

/// `/v1beta/models/{model}:generateContent`, or the streaming method asking for SSE. A
/// model given as a resource name (`models/x`, `tunedModels/y`) is used as it is.
pub(super) fn model_path(model: &str, stream: bool) -> String {
    let model = model.trim_start_matches('/');
    let resource = if model.contains('/') {
        model.to_string()
    } else {
        format!("models/{model}")
    };
    if stream {
        format!("/v1beta/{resource}:streamGenerateContent?alt=sse")
    } else {
        format!("/v1beta/{resource}:generateContent")
    }
}
