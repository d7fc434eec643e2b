//! The synchronous non-chat endpoints (spec 4.6, 4.7, 4.19–4.22): what each one accepts
//! (the 400s of section 8, before anything is reserved), which model it names, and what
//! its answer says it consumed. Pure: no I/O; the relay leg is `relay::media`.

pub mod audio;
pub mod images;
pub mod multipart;
pub mod text;

use crate::errors::GatewayError;
use bytes::Bytes;
use serde_json::Value;

/// One endpoint of the family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Media {
    /// `POST /v1/images/generations` (spec 4.6).
    ImageGeneration,
    /// `POST /v1/images/edits`: the SDK's multipart shape, or the native JSON shape of
    /// spec 4.7.
    ImageEdit,
    /// `POST /v1/audio/speech` (spec 4.21): binary audio streamed back.
    Speech,
    /// `POST /v1/audio/transcriptions`, multipart.
    Transcription,
    /// `POST /v1/audio/translations`, multipart.
    Translation,
    /// `POST /v1/embeddings`, or `/v1/engines/{model}/embeddings` with the model in the
    /// path (spec 4.19).
    Embeddings(Option<String>),
    /// `POST /v1/rerank` (spec 4.22).
    Rerank,
    /// `POST /v1/moderations`.
    Moderation,
}

impl Media {
    /// The path on an OpenAI-style upstream.
    pub fn upstream_path(&self) -> &'static str {
        match self {
            Media::ImageGeneration => "/v1/images/generations",
            Media::ImageEdit => "/v1/images/edits",
            Media::Speech => "/v1/audio/speech",
            Media::Transcription => "/v1/audio/transcriptions",
            Media::Translation => "/v1/audio/translations",
            Media::Embeddings(_) => "/v1/embeddings",
            Media::Rerank => "/v1/rerank",
            Media::Moderation => "/v1/moderations",
        }
    }

    /// Multipart uploads (the model is read from the form).
    pub fn is_multipart(&self) -> bool {
        matches!(self, Media::Transcription | Media::Translation)
    }

    /// Whether a request of this endpoint, in the shape it came (`multipart` or JSON),
    /// goes to a channel that speaks `api`: native image edits to DashScope's API, the
    /// rest to OpenAI-style upstreams.
    pub fn served_by(&self, api: Api, multipart: bool) -> bool {
        match self {
            Media::ImageEdit if !multipart => api == Api::DashScope,
            _ => api == Api::OpenAi,
        }
    }

    /// The path on a channel that speaks `api`.
    pub fn path_on(&self, api: Api) -> &'static str {
        match (self, api) {
            (Media::ImageEdit, Api::DashScope) => images::DASHSCOPE_EDIT_PATH,
            _ => self.upstream_path(),
        }
    }

    /// A successful answer of a channel that speaks `api`, in the client's shape.
    pub fn answer_from(&self, api: Api, answer: Bytes) -> Bytes {
        match (self, api) {
            (Media::ImageEdit, Api::DashScope) => images::from_dashscope(answer),
            _ => answer,
        }
    }
}

/// The vendor APIs the media endpoints are sent to (which channel protocol speaks which
/// is the channel's to say: `ChannelProtocol::media_api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The OpenAI API's media endpoints (and the rerank API at the same base).
    OpenAi,
    /// DashScope's multimodal generation, for native image edits.
    DashScope,
    /// Not a media upstream.
    None,
}

/// A JSON object body, or the 400 that says why not.
pub fn parse_json(raw: &[u8]) -> Result<Value, GatewayError> {
    let v: Value = serde_json::from_slice(raw).map_err(|e| {
        GatewayError::bad_request(None, format!("The request body is not valid JSON: {e}."))
    })?;
    if v.is_object() {
        Ok(v)
    } else {
        Err(GatewayError::bad_request(
            None,
            "The request body must be a JSON object.",
        ))
    }
}
