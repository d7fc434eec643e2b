//! The usage object of a chat answer and of a stream's usage chunk, typed.

use crate::protocol::lenient::{view, Count, Member};
use crate::protocol::Usage;

view! {
    /// `usage` (OpenAI API reference, "The chat completion object", `usage`):
    /// `prompt_tokens_details.{cached_tokens, audio_tokens}` are shares of
    /// `prompt_tokens`, `completion_tokens_details.{reasoning_tokens, audio_tokens}` of
    /// `completion_tokens`. Chat has no cache-write count: writes stay inside
    /// `prompt_tokens`.
    pub struct CompletionUsage {
        prompt_tokens: Count = "prompt_tokens",
        completion_tokens: Count = "completion_tokens",
        prompt_tokens_details: Member<PromptTokensDetails> = "prompt_tokens_details",
        completion_tokens_details: Member<CompletionTokensDetails> = "completion_tokens_details",
    }
}

view! {
    /// `usage.prompt_tokens_details`.
    pub struct PromptTokensDetails {
        cached_tokens: Count = "cached_tokens",
        audio_tokens: Count = "audio_tokens",
    }
}

view! {
    /// `usage.completion_tokens_details`.
    pub struct CompletionTokensDetails {
        reasoning_tokens: Count = "reasoning_tokens",
        audio_tokens: Count = "audio_tokens",
    }
}

impl CompletionUsage {
    /// The figures the gateway prices; zeros for what the upstream left out.
    pub fn to_usage(&self) -> Usage {
        let prompt = self.prompt_tokens_details.object();
        let completion = self.completion_tokens_details.object();
        Usage {
            input_tokens: self.prompt_tokens.get(),
            output_tokens: self.completion_tokens.get(),
            cached_input_tokens: prompt.map_or(0, |p| p.cached_tokens.get()),
            audio_input_tokens: prompt.map_or(0, |p| p.audio_tokens.get()),
            reasoning_tokens: completion.map_or(0, |c| c.reasoning_tokens.get()),
            audio_output_tokens: completion.map_or(0, |c| c.audio_tokens.get()),
            ..Usage::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every detail the gateway prices is read: cache reads, audio in and out, reasoning.
    #[test]
    fn reads_every_priced_detail() {
        let text = r#"{"prompt_tokens":120,"completion_tokens":60,"total_tokens":180,
            "prompt_tokens_details":{"cached_tokens":40,"audio_tokens":30},
            "completion_tokens_details":{"reasoning_tokens":25,"audio_tokens":15,
            "accepted_prediction_tokens":1,"rejected_prediction_tokens":2}}"#;
        let u: CompletionUsage = serde_json::from_str(text).unwrap();
        let want = Usage {
            input_tokens: 120,
            output_tokens: 60,
            cached_input_tokens: 40,
            audio_input_tokens: 30,
            reasoning_tokens: 25,
            audio_output_tokens: 15,
            ..Usage::default()
        };
        assert_eq!(u.to_usage(), want);
        let parsed: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(super::super::super::usage_of(&parsed), want);
    }
}
