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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::WireUsage;
    use crate::protocol::Usage;

    /// Every detail the gateway prices is read: cache reads, cache writes with their
    /// 5-minute and 1-hour shares, web searches.
    #[test]
    fn reads_every_priced_detail() {
        let text = r#"{"input_tokens":10,"cache_read_input_tokens":200,
            "cache_creation_input_tokens":70,
            "cache_creation":{"ephemeral_5m_input_tokens":30,"ephemeral_1h_input_tokens":40},
            "output_tokens":55,"server_tool_use":{"web_search_requests":3},
            "service_tier":"standard"}"#;
        let u: MessageUsage = serde_json::from_str(text).unwrap();
        assert_eq!(u.input_tokens, Count(Some(10)));
        assert_eq!(u.cache_read_input_tokens, Count(Some(200)));
        assert_eq!(u.cache_creation_input_tokens, Count(Some(70)));
        assert_eq!(u.output_tokens, Count(Some(55)));
        let c = u.cache_creation.object().unwrap();
        assert_eq!(
            (c.ephemeral_5m_input_tokens, c.ephemeral_1h_input_tokens),
            (Count(Some(30)), Count(Some(40)))
        );
        let s = u.server_tool_use.object().unwrap();
        assert_eq!(s.web_search_requests, Count(Some(3)));
        let want = Usage {
            input_tokens: 280,
            output_tokens: 55,
            cached_input_tokens: 200,
            cache_creation_input_tokens: 70,
            cache_write_1h_tokens: 40,
            web_search_requests: 3,
            ..Usage::default()
        };
        assert_eq!(WireUsage::of(&Member::Object(u)).to_usage(), want);
    }
}
