//! The pivot of every cross-protocol translation: one neutral request, response and
//! stream-event model. Each protocol converts to and from it, so N protocols need N
//! adapters instead of N² pair translations, and a feature one protocol carries (tool
//! call ids, thinking signatures, cached-token usage) has one place to live on the way
//! through. Same-protocol traffic never comes here: it is passed through untouched.

use super::sse::Fault;
use super::Usage;
use serde_json::Value;

/// A generation request, as every protocol understands it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// System / developer instructions, in order (chat `system`/`developer` messages,
    /// messages `system`, generate-content `systemInstruction`, responses `instructions`).
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    /// Output-token limit (chat `max_completion_tokens`/`max_tokens`, messages
    /// `max_tokens`, `generationConfig.maxOutputTokens`, responses `max_output_tokens`).
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub reasoning: Option<Reasoning>,
    pub response_format: Option<ResponseFormat>,
    /// An end-user identifier (chat/responses `user`, messages `metadata.user_id`).
    pub user: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One turn. Tool results travel in `User` turns (as the messages protocol has them);
/// the chat adapter splits them into `tool` messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Image(Image),
    ToolCall(ToolCall),
    ToolResult(ToolResult),
    /// Visible reasoning; `signature` must come back verbatim on the next turn
    /// (messages protocol) for multi-turn tool use to keep working.
    Thinking {
        text: String,
        signature: Option<String>,
    },
    /// Encrypted reasoning (messages `redacted_thinking`), opaque.
    RedactedThinking(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// An `http(s)` URL (a `data:` URL is parsed into `Base64`).
    Url(String),
    Base64 {
        media_type: String,
        data: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Stable across the round trip: the client sends it back with the result.
    pub id: String,
    pub name: String,
    /// The arguments as JSON text (what chat carries; objects elsewhere are serialized).
    pub arguments: String,
    /// A generate-content `thoughtSignature` riding on the call; must be returned with
    /// it. Protocols with no field for it carry it inside the id (see [`split_call_id`]).
    pub signature: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub call_id: String,
    /// The function's name when the protocol says it (generate-content needs it; the
    /// adapter looks it up from the earlier call by id otherwise).
    pub name: Option<String>,
    /// Text and image parts only.
    pub content: Vec<Part>,
    pub is_error: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool must be called (chat `required`, messages `any`, generate-content `ANY`).
    Required,
    /// This tool must be called.
    Tool(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

/// Reasoning settings. Protocols speak either an effort level (chat, responses) or a
/// token budget (messages, generate-content); [`Reasoning::budget`] and
/// [`Reasoning::effort`] convert one into the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reasoning {
    /// Reasoning explicitly off (messages `thinking.type: disabled`, budget 0).
    pub disabled: bool,
    pub effort: Option<Effort>,
    pub budget_tokens: Option<u64>,
}

/// Budgets used when only an effort level is known.
const BUDGET_LOW: u64 = 1024;
const BUDGET_MEDIUM: u64 = 8192;
const BUDGET_HIGH: u64 = 24576;

impl Reasoning {
    pub fn budget(&self) -> u64 {
        if self.disabled {
            return 0;
        }
        if let Some(b) = self.budget_tokens {
            return b;
        }
        match self.effort.unwrap_or(Effort::Medium) {
            Effort::Minimal | Effort::Low => BUDGET_LOW,
            Effort::Medium => BUDGET_MEDIUM,
            Effort::High => BUDGET_HIGH,
        }
    }

    pub fn effort(&self) -> Effort {
        if let Some(e) = self.effort {
            return e;
        }
        match self.budget_tokens {
            Some(0) => Effort::Minimal,
            Some(b) if b <= BUDGET_LOW * 2 => Effort::Low,
            Some(b) if b <= BUDGET_MEDIUM => Effort::Medium,
            Some(_) => Effort::High,
            None => Effort::Medium,
        }
    }
}

impl Effort {
    pub fn parse(s: &str) -> Option<Effort> {
        match s {
            // "none" is not an effort but reasoning off: each adapter maps it to `disabled`.
            "minimal" => Some(Effort::Minimal),
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" | "xhigh" => Some(Effort::High),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
        strict: Option<bool>,
    },
}

/// A complete answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    /// Text, thinking and tool-call parts, in the order produced.
    pub content: Vec<Part>,
    pub finish: Option<FinishReason>,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// Natural end (chat `stop`, messages `end_turn`, generate-content `STOP`).
    Stop,
    /// The output limit was reached.
    Length,
    ToolCalls,
    /// A stop sequence matched (which one, when the protocol says).
    StopSequence(Option<String>),
    ContentFilter,
    /// Anything else the upstream reported, kept for the log.
    Other(String),
}

/// One step of a streamed answer, upstream-neutral. Decoders emit these in the order the
/// upstream produced them; encoders turn them into the client protocol's events.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Text(String),
    Thinking(String),
    /// The signature of the thinking text streamed so far (closes that thinking block).
    ThinkingSignature(String),
    RedactedThinking(String),
    /// A tool call begins. `index` counts tool calls within the answer, from 0.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
        signature: Option<String>,
    },
    /// A piece of the JSON arguments of tool call `index`.
    ToolCallArgs {
        index: usize,
        fragment: String,
    },
    /// Usage so far, as totals (not increments): the latest one wins.
    Usage(Usage),
    Finish(FinishReason),
    /// The upstream reported an error inside the stream. Its text is not kept: the client
    /// is told a stable sanitized message (spec 7.2).
    Error,
    /// The upstream's stream broke here: an event that could not be read. It comes once,
    /// in its place among the events, so the client's stream ends exactly there whatever
    /// the reads' boundaries (only usage reports follow it).
    Broken(Fault),
}

/// Upstream stream bytes → events. Never assumes one read is one event; buffers are
/// bounded (the SSE decoder's limit).
///
/// At the first event that cannot be read (oversized, not UTF-8, not the protocol's
/// JSON: half an event, say) `feed` or `flush` answer `Err` and keep answering it: the
/// events before the fault are in `events`, then [`Event::Broken`], and from then on
/// only usage reports are added (the client's answer ends at the fault; the bill still
/// counts what the upstream reports later).
pub trait StreamDecoder: Send {
    /// Bytes in, any split; completed events appended to `events`.
    fn feed(&mut self, chunk: &[u8], events: &mut Vec<Event>) -> Result<(), StreamBroken>;
    /// The body ended: decode whatever was left unterminated.
    fn flush(&mut self, events: &mut Vec<Event>) -> Result<(), StreamBroken>;
    /// Whether the upstream's own end-of-stream marker was seen (chat `[DONE]`, messages
    /// `message_stop`, a generate-content chunk with a `finishReason`); a stream that
    /// ends without it was cut.
    fn complete(&self) -> bool;
}

/// The stream broke at an event that could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBroken(pub Fault);

impl StreamBroken {
    /// `Err` once a decoder met a fault.
    pub fn check(fault: Option<Fault>) -> Result<(), StreamBroken> {
        fault.map_or(Ok(()), |f| Err(StreamBroken(f)))
    }
}

/// Decodes one upstream event's JSON with `decode`, unless the stream already broke, in
/// which case only the usage reports `decode` finds are kept. Records the first fault.
pub fn decode_json<D>(
    ev: &super::sse::Event,
    broken: &mut Option<Fault>,
    events: &mut Vec<Event>,
    mut decode: D,
) where
    D: FnMut(&Value, &mut Vec<Event>),
{
    let v = match ev.json() {
        Ok(Some(v)) => v,
        Ok(None) => return,
        Err(f) => {
            if broken.is_none() {
                *broken = Some(f);
                events.push(Event::Broken(f));
            }
            return;
        }
    };
    if broken.is_none() {
        decode(&v, events);
        return;
    }
    let mut later = Vec::new();
    decode(&v, &mut later);
    events.extend(later.into_iter().filter(|e| matches!(e, Event::Usage(_))));
}

/// Events → client stream bytes.
pub trait StreamEncoder: Send {
    fn event(&mut self, ev: &Event, out: &mut Vec<u8>);
    /// Ends the client's stream. `None`: a clean end (the closing events the client's SDK
    /// expects). `Some(message)`: the stream broke; emit the protocol's terminal error
    /// event with this message (sanitized, request id included). Called exactly once.
    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>);
}

/// Separator between a tool call id and a signature carried inside it, for client
/// protocols with no field of their own for the signature.
pub const SIGNATURE_SEPARATOR: &str = "__sig__";

/// A tool call id as shown to a client that has no signature field.
pub fn join_call_id(id: &str, signature: Option<&str>) -> String {
    match signature {
        Some(s) if !s.is_empty() => format!("{id}{SIGNATURE_SEPARATOR}{s}"),
        _ => id.to_string(),
    }
}

/// The inverse of [`join_call_id`]: the id the upstream knows, and the signature.
pub fn split_call_id(id: &str) -> (&str, Option<&str>) {
    match id.split_once(SIGNATURE_SEPARATOR) {
        Some((i, s)) if !s.is_empty() => (i, Some(s)),
        _ => (id, None),
    }
}

/// Parses `data:<media type>;base64,<data>`.
pub fn parse_data_url(url: &str) -> Option<Image> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some(Image::Base64 {
        media_type: if media_type.is_empty() {
            "application/octet-stream".into()
        } else {
            media_type.to_string()
        },
        data: data.to_string(),
    })
}

impl Image {
    /// From a URL that may be a `data:` URL.
    pub fn from_url(url: &str) -> Image {
        parse_data_url(url).unwrap_or_else(|| Image::Url(url.to_string()))
    }

    /// As a URL (`data:` for inline data), for protocols that only take URLs.
    pub fn to_url(&self) -> String {
        match self {
            Image::Url(u) => u.clone(),
            Image::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        }
    }

    /// A media type guessed from a URL's extension, for protocols that require one.
    pub fn guess_media_type(url: &str) -> &'static str {
        let path = url
            .split(['?', '#'])
            .next()
            .unwrap_or(url)
            .to_ascii_lowercase();
        match path.rsplit('.').next() {
            Some("png") => "image/png",
            Some("gif") => "image/gif",
            Some("webp") => "image/webp",
            Some("heic") => "image/heic",
            _ => "image/jpeg",
        }
    }
}

/// Tool-call arguments as an object, for protocols that carry objects: invalid or
/// non-object JSON becomes `{}` (the model produced something unusable; the caller
/// still gets the call and its id).
pub fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::Object(Default::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_carry_signatures_both_ways() {
        let joined = join_call_id("call_1", Some("c2ln"));
        assert_eq!(split_call_id(&joined), ("call_1", Some("c2ln")));
        assert_eq!(split_call_id("call_1"), ("call_1", None));
        assert_eq!(join_call_id("call_1", None), "call_1");
    }

    #[test]
    fn reasoning_converts_between_effort_and_budget() {
        let r = Reasoning {
            effort: Some(Effort::High),
            ..Default::default()
        };
        assert_eq!(r.budget(), BUDGET_HIGH);
        let r = Reasoning {
            budget_tokens: Some(2000),
            ..Default::default()
        };
        assert_eq!(r.effort(), Effort::Low);
        assert_eq!(
            Reasoning {
                disabled: true,
                ..Default::default()
            }
            .budget(),
            0
        );
    }

    #[test]
    fn data_urls() {
        assert_eq!(
            Image::from_url("data:image/png;base64,AAAA"),
            Image::Base64 {
                media_type: "image/png".into(),
                data: "AAAA".into()
            }
        );
        assert_eq!(
            Image::from_url("https://x/y.png"),
            Image::Url("https://x/y.png".into())
        );
        assert_eq!(
            Image::guess_media_type("https://x/y.WEBP?a=1"),
            "image/webp"
        );
    }
}
