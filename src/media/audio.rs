//! Audio endpoints (spec 4.20, 4.21): validation of speech requests and transcription
//! forms, and the seconds of audio a transcription is billed for.

use super::multipart::{FilePart, Form};
use crate::protocol::{Invalid, Usage};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeechJob {
    pub model: String,
    /// Characters of `input`: what speech is billed by.
    pub chars: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptionJob {
    pub model: String,
    pub response_format: Option<String>,
    pub file: FilePart,
}

/// Spec 4.21: `model`, `input`, `voice` required; `response_format`, `speed` checked.
pub fn check_speech(body: &Value) -> Result<SpeechJob, Invalid> {
    todo!()
}

/// A transcription or translation form: `file` and `model` required, the rest checked.
pub fn check_transcription(form: &Form) -> Result<TranscriptionJob, Invalid> {
    todo!()
}

/// An upper bound of an upload's duration in seconds, for the reservation.
pub fn max_seconds(file: &[u8]) -> f64 {
    todo!()
}

/// The seconds to bill from a successful answer.
pub fn billed_seconds(response_format: Option<&str>, answer: &[u8], file: &[u8]) -> f64 {
    todo!()
}

/// Token usage, when the answer reports tokens instead of seconds.
pub fn token_usage(answer: &[u8]) -> Option<Usage> {
    todo!()
}
