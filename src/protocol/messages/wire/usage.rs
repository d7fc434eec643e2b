//! The usage object of a messages answer and of its stream's `message_start` and
//! `message_delta` events, typed.

use crate::protocol::lenient::{view, Count, Member};

view! {
    /// `usage` (Anthropic API reference, Messages, `usage`; streamed in `message_start`
    /// and, as totals so far, `message_delta`). `input_tokens` EXCLUDES cache reads and
    /// cache writes. `cache_creation` breaks the writes down by lifetime;
    /// `server_tool_use.web_search_requests` counts the searches the server ran.
    pub struct MessageUsage {
        input_tokens: Count = "input_tokens",
        cache_read_input_tokens: Count = "cache_read_input_tokens",
        cache_creation_input_tokens: Count = "cache_creation_input_tokens",
        output_tokens: Count = "output_tokens",
        cache_creation: Member<CacheCreation> = "cache_creation",
        server_tool_use: Member<ServerToolUse> = "server_tool_use",
    }
}

view! {
    /// `usage.cache_creation`: the cache writes by how long they are kept.
    pub struct CacheCreation {
        ephemeral_5m_input_tokens: Count = "ephemeral_5m_input_tokens",
        ephemeral_1h_input_tokens: Count = "ephemeral_1h_input_tokens",
    }
}

view! {
    /// `usage.server_tool_use`: the server tools the upstream ran, billed per request.
    pub struct ServerToolUse {
        web_search_requests: Count = "web_search_requests",
    }
}
