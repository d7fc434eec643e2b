//! A responses upstream's answer, whole or streamed, typed where the gateway reads it:
//! usage, the stream events' type, sequence number and text deltas, and the response
//! object they carry. Members the gateway does not read are skipped (read-only views);
//! what it rewrites (the model, an error's message, the cost) is changed in the tree the
//! event is relayed from.

use crate::protocol::chat::wire::usage::{
    CompletionTokensDetails, CompletionUsage, PromptTokensDetails,
};
use crate::protocol::lenient::{view, Count, Member, Present, Text};
use crate::protocol::Usage;

view! {
    /// `usage` of a response object (OpenAI API reference, Responses, the response
    /// object, `usage`): `input_tokens` includes `input_tokens_details.cached_tokens`
    /// (and the cache writes some compatible servers report as `cache_write_tokens`),
    /// `output_tokens` includes `output_tokens_details.reasoning_tokens`. Some upstreams
    /// send spec 2.6's chat-style names instead; they are read when neither of the
    /// Responses totals is there.
    pub struct ResponseUsage {
        input_tokens: Present<Count> = "input_tokens",
        output_tokens: Present<Count> = "output_tokens",
        input_tokens_details: Member<InputTokensDetails> = "input_tokens_details",
        output_tokens_details: Member<OutputTokensDetails> = "output_tokens_details",
        prompt_tokens: Count = "prompt_tokens",
        completion_tokens: Count = "completion_tokens",
        prompt_tokens_details: Member<PromptTokensDetails> = "prompt_tokens_details",
        completion_tokens_details: Member<CompletionTokensDetails> = "completion_tokens_details",
    }
}

view! {
    /// `usage.input_tokens_details`.
    pub struct InputTokensDetails {
        cached_tokens: Count = "cached_tokens",
        cache_write_tokens: Count = "cache_write_tokens",
    }
}

view! {
    /// `usage.output_tokens_details`.
    pub struct OutputTokensDetails {
        reasoning_tokens: Count = "reasoning_tokens",
    }
}

impl ResponseUsage {
    pub fn to_usage(&self) -> Usage {
        if !self.input_tokens.is_there() && !self.output_tokens.is_there() {
            return CompletionUsage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.completion_tokens,
                prompt_tokens_details: self.prompt_tokens_details.clone(),
                completion_tokens_details: self.completion_tokens_details.clone(),
            }
            .to_usage();
        }
        let count = |c: &Present<Count>| c.get().map_or(0, |c| c.get());
        let input = self.input_tokens_details.object();
        Usage {
            input_tokens: count(&self.input_tokens),
            output_tokens: count(&self.output_tokens),
            cached_input_tokens: input.map_or(0, |d| d.cached_tokens.get()),
            cache_creation_input_tokens: input.map_or(0, |d| d.cache_write_tokens.get()),
            reasoning_tokens: self
                .output_tokens_details
                .object()
                .map_or(0, |d| d.reasoning_tokens.get()),
            ..Usage::default()
        }
    }
}

view! {
    /// A stream event (OpenAI API reference, Responses, "Streaming events"): its `type`
    /// (also on the event line), `sequence_number`, the text of a `*.delta` event, and the
    /// response object of `response.*` events.
    pub struct StreamEvent<'a> {
        kind: Text<'a> = "type",
        sequence_number: Count = "sequence_number",
        delta: Text<'a> = "delta",
        response: Member<ResponseObject<'a>> = "response",
    }
}

view! {
    /// The response object (OpenAI API reference, Responses, the response object), as far
    /// as the gateway reads it: its usage, and a failed response's `error`.
    pub struct ResponseObject<'a> {
        usage: Member<ResponseUsage> = "usage",
        error: Member<ResponseError<'a>> = "error",
    }
}

view! {
    /// A failed response's `error` (`code`, `message`). Its words never reach the client.
    pub struct ResponseError<'a> {
        code: Text<'a> = "code",
        message: Text<'a> = "message",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every detail the gateway prices is read, under the Responses names (cache reads
    /// and writes, reasoning) and under the chat-style names (cache reads, audio in and
    /// out, reasoning) when those are all an upstream sent.
    #[test]
    fn reads_every_priced_detail() {
        let text = r#"{"input_tokens":500,"output_tokens":90,"total_tokens":590,
            "input_tokens_details":{"cached_tokens":100,"cache_write_tokens":300},
            "output_tokens_details":{"reasoning_tokens":40}}"#;
        let u: ResponseUsage = serde_json::from_str(text).unwrap();
        let want = Usage {
            input_tokens: 500,
            output_tokens: 90,
            cached_input_tokens: 100,
            cache_creation_input_tokens: 300,
            reasoning_tokens: 40,
            ..Usage::default()
        };
        assert_eq!(u.to_usage(), want);
        let chat_style = r#"{"prompt_tokens":70,"completion_tokens":30,
            "prompt_tokens_details":{"cached_tokens":20,"audio_tokens":10},
            "completion_tokens_details":{"reasoning_tokens":5,"audio_tokens":8}}"#;
        let u: ResponseUsage = serde_json::from_str(chat_style).unwrap();
        let want = Usage {
            input_tokens: 70,
            output_tokens: 30,
            cached_input_tokens: 20,
            audio_input_tokens: 10,
            reasoning_tokens: 5,
            audio_output_tokens: 8,
            ..Usage::default()
        };
        assert_eq!(u.to_usage(), want);
        // A Responses total, even one that is not a count, means the Responses names.
        let u: ResponseUsage =
            serde_json::from_str(r#"{"input_tokens":null,"prompt_tokens":70}"#).unwrap();
        assert_eq!(u.to_usage(), Usage::default());
    }
}
