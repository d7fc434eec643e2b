//! A generate-content upstream's answer, whole or streamed (each chunk is a whole
//! `GenerateContentResponse`), typed where the gateway reads it: the first candidate's
//! parts (text, thoughts, function calls), finish and block reasons, usage and errors.
//! Members the gateway does not read are skipped (read-only views).

use super::usage::UsageMetadata;
use crate::protocol::lenient::{view, Flag, List, Member, Present, Text};
use serde_json::Value;

view! {
    /// Gemini API reference, GenerateContentResponse. A body with none of
    /// `candidates`, `promptFeedback` and `usageMetadata` is not one. An `error` member
    /// (google.rpc.Status) is an upstream failure mid-stream.
    pub struct GenerateContentResponse<'a> {
        candidates: Present<List<Candidate<'a>>> = "candidates",
        prompt_feedback: Present<PromptFeedback<'a>> = "promptFeedback",
        usage_metadata: Member<UsageMetadata<'a>> = "usageMetadata",
        response_id: Text<'a> = "responseId",
        error: Member<Status<'a>> = "error",
    }
}

impl<'a> GenerateContentResponse<'a> {
    /// Whether the body is an answer at all.
    pub fn is_answer(&self) -> bool {
        self.candidates.is_there()
            || self.prompt_feedback.is_there()
            || self.usage_metadata.present()
    }

    /// The candidates; none when there are none.
    pub fn candidates(&self) -> &[Candidate<'a>] {
        self.candidates.get().map_or(&[], List::items)
    }

    /// Whether the prompt was blocked (`promptFeedback.blockReason`).
    pub fn blocked(&self) -> bool {
        self.prompt_feedback
            .get()
            .is_some_and(|f| f.block_reason.as_str().is_some())
    }
}

view! {
    /// Gemini API reference, Candidate. `finishReason` is there once the candidate is
    /// finished.
    pub struct Candidate<'a> {
        content: Member<Content<'a>> = "content",
        finish_reason: Present<Text<'a>> = "finishReason",
    }
}

impl<'a> Candidate<'a> {
    /// The parts of the candidate's content; none when there are none.
    pub fn parts(&self) -> &[Part<'a>] {
        self.content.object().map_or(&[], |c| c.parts.items())
    }

    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.get().and_then(Text::as_str)
    }
}

view! {
    /// Gemini API reference, Content (the answer's: `role` is not read).
    pub struct Content<'a> {
        parts: List<Part<'a>> = "parts",
    }
}

view! {
    /// Gemini API reference, Part: text (a thought when `thought` is true), or a
    /// `functionCall`; `thoughtSignature` signs either.
    pub struct Part<'a> {
        text: Text<'a> = "text",
        thought: Flag = "thought",
        thought_signature: Text<'a> = "thoughtSignature",
        function_call: Present<FunctionCall<'a>> = "functionCall",
    }
}

view! {
    /// Gemini API reference, FunctionCall. `args` is an object, kept as it came.
    pub struct FunctionCall<'a> {
        id: Text<'a> = "id",
        name: Text<'a> = "name",
        args: Value = "args",
    }
}

view! {
    /// Gemini API reference, PromptFeedback.
    pub struct PromptFeedback<'a> {
        block_reason: Text<'a> = "blockReason",
    }
}

view! {
    /// An error body's `error` (google.rpc.Status: `code`, `message`, `status`). Its
    /// words never reach the client.
    pub struct Status<'a> {
        message: Text<'a> = "message",
        status: Text<'a> = "status",
    }
}
