//! A messages upstream's answer, whole or streamed, typed where the gateway reads it:
//! content blocks (text, thinking, tool use), the stop reason, usage and errors. Members
//! the gateway does not read are skipped (read-only views).

use super::usage::MessageUsage;
use crate::protocol::lenient::{view, Count, List, Member, Text};
use serde_json::Value;

view! {
    /// A message (Anthropic API reference, Messages, the response body).
    pub struct Message<'a> {
        kind: Text<'a> = "type",
        content: List<ContentBlock<'a>> = "content",
        stop_reason: Text<'a> = "stop_reason",
        stop_sequence: Text<'a> = "stop_sequence",
        usage: Member<MessageUsage> = "usage",
    }
}

view! {
    /// A content block: `text`, `thinking` (with its `signature`), `redacted_thinking`
    /// (`data`) or `tool_use` (`id`, `name`, and `input`, an object kept as it came).
    /// Server tool blocks and kinds added later are read as their `type` only.
    pub struct ContentBlock<'a> {
        kind: Text<'a> = "type",
        text: Text<'a> = "text",
        thinking: Text<'a> = "thinking",
        signature: Text<'a> = "signature",
        data: Text<'a> = "data",
        id: Text<'a> = "id",
        name: Text<'a> = "name",
        input: Value = "input",
    }
}

view! {
    /// A stream event (Anthropic API reference, "Streaming Messages"): `message_start`
    /// (`message`), `content_block_start` (`index`, `content_block`),
    /// `content_block_delta` (`index`, `delta`), `message_delta` (`delta`, `usage`),
    /// `message_stop`, `ping` and `error` (`error`).
    pub struct StreamEvent<'a> {
        kind: Text<'a> = "type",
        message: Member<MessageStart> = "message",
        index: Count = "index",
        content_block: Member<ContentBlock<'a>> = "content_block",
        delta: Member<Delta<'a>> = "delta",
        usage: Member<MessageUsage> = "usage",
        error: Member<ErrorBody<'a>> = "error",
    }
}

view! {
    /// `message_start`'s `message`: the gateway reads its usage (the input figures).
    pub struct MessageStart {
        usage: Member<MessageUsage> = "usage",
    }
}

view! {
    /// The `delta` of `content_block_delta` (`text_delta`, `thinking_delta`,
    /// `signature_delta`, `input_json_delta`) and of `message_delta` (`stop_reason`,
    /// `stop_sequence`).
    pub struct Delta<'a> {
        kind: Text<'a> = "type",
        text: Text<'a> = "text",
        thinking: Text<'a> = "thinking",
        signature: Text<'a> = "signature",
        partial_json: Text<'a> = "partial_json",
        stop_reason: Text<'a> = "stop_reason",
        stop_sequence: Text<'a> = "stop_sequence",
    }
}

view! {
    /// An error's `error` (Anthropic API reference, "Errors": `{"type": "error", "error":
    /// {"type", "message"}}`). The type tells the SDKs whether to retry; the message never
    /// reaches the client.
    pub struct ErrorBody<'a> {
        kind: Text<'a> = "type",
        message: Text<'a> = "message",
    }
}
