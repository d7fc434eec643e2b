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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every detail the gateway prices is read: cached content, thoughts, the tool
    /// prompt, and the audio and image shares of input (less what was cached) and output.
    #[test]
    fn reads_every_priced_detail() {
        let text = r#"{"promptTokenCount":1000,"candidatesTokenCount":300,
            "thoughtsTokenCount":50,"toolUsePromptTokenCount":20,"cachedContentTokenCount":400,
            "totalTokenCount":1370,
            "promptTokensDetails":[{"modality":"TEXT","tokenCount":500},{"modality":"AUDIO","tokenCount":300},{"modality":"IMAGE","tokenCount":200}],
            "cacheTokensDetails":[{"modality":"AUDIO","tokenCount":100},{"modality":"IMAGE","tokenCount":50}],
            "toolUsePromptTokensDetails":[{"modality":"AUDIO","tokenCount":5}],
            "candidatesTokensDetails":[{"modality":"TEXT","tokenCount":200},{"modality":"AUDIO","tokenCount":60},{"modality":"IMAGE","tokenCount":40}]}"#;
        let m: UsageMetadata<'_> = serde_json::from_str(text).unwrap();
        // Modality names without escapes are borrowed from the answer.
        let first = &m.prompt_tokens_details.items()[0];
        assert!(matches!(
            first.modality.0,
            Some(std::borrow::Cow::Borrowed("TEXT"))
        ));
        let want = Usage {
            input_tokens: 1020,
            output_tokens: 350,
            cached_input_tokens: 400,
            reasoning_tokens: 50,
            audio_input_tokens: 300 - 100 + 5,
            image_input_tokens: 200 - 50,
            audio_output_tokens: 60,
            image_output_tokens: 40,
            ..Usage::default()
        };
        assert_eq!(m.to_usage(), want);
    }
}
