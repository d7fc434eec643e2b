//! A chat upstream's answer, whole or streamed, typed where the gateway reads it: the
//! choices with their message or delta, tool calls, the finish reason, usage and errors.
//! Members the gateway does not read are skipped (read-only views).

use super::usage::CompletionUsage;
use crate::protocol::lenient::{others_are, view, Count, List, Member, Text};
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

view! {
    /// A completion (OpenAI API reference, "The chat completion object"). `id` and
    /// `created` are kept as they came: with a call's position and name they seed the id
    /// of a tool call that came without one.
    pub struct Completion<'a> {
        id: Value = "id",
        created: Value = "created",
        choices: List<Choice<'a>> = "choices",
        usage: Member<CompletionUsage> = "usage",
    }
}

view! {
    /// One of `choices`.
    pub struct Choice<'a> {
        index: Count = "index",
        message: Member<Message<'a>> = "message",
        finish_reason: Text<'a> = "finish_reason",
    }
}

view! {
    /// `choices[].message`. `reasoning_content` (DeepSeek and most compatible servers)
    /// or `reasoning` (some others) carry the thinking; `function_call` is the legacy
    /// single call some compatible servers still answer with.
    pub struct Message<'a> {
        content: Content<'a> = "content",
        refusal: Text<'a> = "refusal",
        reasoning_content: Text<'a> = "reasoning_content",
        reasoning: Text<'a> = "reasoning",
        tool_calls: List<ToolCall<'a>> = "tool_calls",
        function_call: Member<Function<'a>> = "function_call",
    }
}

view! {
    /// `message.tool_calls[]`.
    pub struct ToolCall<'a> {
        id: Text<'a> = "id",
        function: Member<Function<'a>> = "function",
    }
}

view! {
    /// A call's `function`. `arguments` is JSON text; a server that sends an object
    /// instead is read as its JSON.
    pub struct Function<'a> {
        name: Text<'a> = "name",
        arguments: Value = "arguments",
    }
}

view! {
    /// A content part (`{"type": "text", "text": ...}`), as some compatible servers
    /// answer text.
    pub struct ContentPart<'a> {
        kind: Text<'a> = "type",
        text: Text<'a> = "text",
    }
}

/// `content`: a string, or (some compatible servers) parts with text; anything else
/// reads as none.
#[derive(Debug, Default, Clone, PartialEq)]
pub enum Content<'a> {
    #[default]
    None,
    Text(Cow<'a, str>),
    Parts(Vec<ContentPart<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Content<'a>, D::Error> {
        struct V<'a>(std::marker::PhantomData<Content<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or content parts")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Owned(s.to_string())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Content<'a>, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = s.next_element::<ContentPart<'a>>()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
            others_are!(Content<'a>, Content::None; bool num null map);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

view! {
    /// A stream chunk (OpenAI API reference, "The chat completion chunk object"); the
    /// last one carries `usage` when asked for. An `error` member (not `null`) is an
    /// upstream failure mid-stream.
    pub struct Chunk<'a> {
        error: Member<ErrorBody<'a>> = "error",
        id: Value = "id",
        created: Value = "created",
        choices: List<ChunkChoice<'a>> = "choices",
        usage: Member<CompletionUsage> = "usage",
    }
}

view! {
    /// One of a chunk's `choices`.
    pub struct ChunkChoice<'a> {
        index: Count = "index",
        delta: Member<Delta<'a>> = "delta",
        finish_reason: Text<'a> = "finish_reason",
    }
}

view! {
    /// `choices[].delta`: the pieces of the message.
    pub struct Delta<'a> {
        content: Content<'a> = "content",
        refusal: Text<'a> = "refusal",
        reasoning_content: Text<'a> = "reasoning_content",
        reasoning: Text<'a> = "reasoning",
        tool_calls: List<ToolCallDelta<'a>> = "tool_calls",
    }
}

view! {
    /// `delta.tool_calls[]`: a piece of a call, keyed by `index`. The first piece
    /// normally holds the id and the name, later ones argument text.
    pub struct ToolCallDelta<'a> {
        index: Count = "index",
        id: Text<'a> = "id",
        function: Member<FunctionDelta<'a>> = "function",
    }
}

view! {
    /// A call piece's `function`.
    pub struct FunctionDelta<'a> {
        name: Text<'a> = "name",
        arguments: Text<'a> = "arguments",
    }
}

view! {
    /// An upstream error body's `error` (OpenAI API reference, "Error codes": `{"error":
    /// {"message", "type", "param", "code"}}`). Its words never reach the client.
    pub struct ErrorBody<'a> {
        message: Text<'a> = "message",
        kind: Text<'a> = "type",
    }
}

/// The thinking of a message or delta: `reasoning_content`, else `reasoning`.
pub fn reasoning<'t>(reasoning_content: &'t Text<'_>, reasoning: &'t Text<'_>) -> Option<&'t str> {
    reasoning_content.as_str().or_else(|| reasoning.as_str())
}
