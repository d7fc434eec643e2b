//! `usageMetadata`, typed, and its reading as the gateway prices it.

use crate::protocol::lenient::{view, Count, List, Text};
use crate::protocol::Usage;

view! {
    /// `usageMetadata` (Gemini API reference, GenerateContentResponse, UsageMetadata).
    /// `promptTokenCount` already includes `cachedContentTokenCount`;
    /// `candidatesTokenCount` excludes `thoughtsTokenCount`. The `*Details` lists break
    /// a count down by modality.
    pub struct UsageMetadata<'a> {
        prompt_token_count: Count = "promptTokenCount",
        candidates_token_count: Count = "candidatesTokenCount",
        thoughts_token_count: Count = "thoughtsTokenCount",
        tool_use_prompt_token_count: Count = "toolUsePromptTokenCount",
        cached_content_token_count: Count = "cachedContentTokenCount",
        prompt_tokens_details: List<ModalityTokenCount<'a>> = "promptTokensDetails",
        cache_tokens_details: List<ModalityTokenCount<'a>> = "cacheTokensDetails",
        tool_use_prompt_tokens_details: List<ModalityTokenCount<'a>> = "toolUsePromptTokensDetails",
        candidates_tokens_details: List<ModalityTokenCount<'a>> = "candidatesTokensDetails",
    }
}

view! {
    /// One item of a breakdown (Gemini API reference, ModalityTokenCount).
    pub struct ModalityTokenCount<'a> {
        modality: Text<'a> = "modality",
        token_count: Count = "tokenCount",
    }
}

/// The tokens of one modality in a breakdown.
fn modality_count(items: &List<ModalityTokenCount<'_>>, modality: &str) -> u64 {
    items
        .items()
        .iter()
        .filter(|i| i.modality.as_str() == Some(modality))
        .filter_map(|i| i.token_count.0)
        .fold(0, u64::saturating_add)
}

impl UsageMetadata<'_> {
    /// The thoughts are billed as output and counted in it here. Tokens of server-side
    /// tool prompts (`toolUsePromptTokenCount`) are billed as input, so they are added to
    /// it. The audio and image shares come from the breakdowns: the prompt's and the tool
    /// prompt's less the cached content's (a cached token is priced as cached, whatever
    /// its modality), and the candidates'.
    pub fn to_usage(&self) -> Usage {
        let thoughts = self.thoughts_token_count.get();
        let input_share = |modality: &str| {
            modality_count(&self.prompt_tokens_details, modality)
                .saturating_sub(modality_count(&self.cache_tokens_details, modality))
                .saturating_add(modality_count(
                    &self.tool_use_prompt_tokens_details,
                    modality,
                ))
        };
        let output = |modality: &str| modality_count(&self.candidates_tokens_details, modality);
        Usage {
            input_tokens: self.prompt_token_count.get() + self.tool_use_prompt_token_count.get(),
            output_tokens: self.candidates_token_count.get() + thoughts,
            cached_input_tokens: self.cached_content_token_count.get(),
            cache_creation_input_tokens: 0,
            reasoning_tokens: thoughts,
            audio_input_tokens: input_share("AUDIO"),
            image_input_tokens: input_share("IMAGE"),
            audio_output_tokens: output("AUDIO"),
            image_output_tokens: output("IMAGE"),
            ..Usage::default()
        }
    }
}
