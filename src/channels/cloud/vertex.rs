//! Google Vertex AI (`vertex` channels), written from Google's references:
//!
//! - Gemini models: "Vertex AI API: projects.locations.publishers.models.generateContent"
//!   and "...streamGenerateContent" (cloud.google.com/vertex-ai/docs/reference/rest/v1/
//!   projects.locations.publishers.models): `POST /v1/{model}:generateContent` and
//!   `:streamGenerateContent` with `model` the resource name
//!   `projects/{project}/locations/{location}/publishers/google/models/{model}`; the body
//!   and the answer are the generate-content protocol's (`contents`, `usageMetadata`...),
//!   streamed as server-sent events with `alt=sse`.
//! - Claude models: "Use Anthropic's Claude models on Vertex AI" (cloud.google.com/
//!   vertex-ai/generative-ai/docs/partner-models/claude): `:rawPredict` and
//!   `:streamRawPredict` on `.../publishers/anthropic/models/{model}`, whose body is the
//!   Anthropic Messages API's without `model` (it is in the path) and with
//!   `anthropic_version: "vertex-2023-10-16"` (instead of the `anthropic-version` header).
//! - The service endpoint: "Vertex AI API: Service endpoint" (`https://{location}-
//!   aiplatform.googleapis.com`, and `https://aiplatform.googleapis.com` for the `global`
//!   location).
//! - Authentication: an OAuth 2.0 access token of a service account with the
//!   `cloud-platform` scope ([`super::service_account`]), as `Authorization: Bearer`.
//!
//! Which publisher serves a model is read from its upstream name (after the channel's
//! `model_map`): a name starting with `claude` is Anthropic's, any other Google's.

use super::service_account::{KeyFile, ServiceAccount, CLOUD_PLATFORM};
use super::{AuthError, Cloud, Outbound, Target, TokenClient};
use crate::channels::raw::{invalid, Invalid, RawChannel};
use crate::protocol::Protocol;
use async_trait::async_trait;
use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `anthropic_version` Vertex AI takes in a Claude request's body.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// A vertex channel's project, location and service account.
pub struct Vertex {
    project: String,
    location: String,
    account: ServiceAccount,
}

/// The host of a location's service endpoint.
pub fn base_url(location: &str) -> String {
    if location == "global" {
        "https://aiplatform.googleapis.com".into()
    } else {
        format!("https://{location}-aiplatform.googleapis.com")
    }
}

/// Which publisher serves `model` on Vertex AI, and so the protocol it is spoken to in.
fn is_claude(model: &str) -> bool {
    model.starts_with("claude")
}

impl Vertex {
    /// Validates a vertex channel's options; reads and checks its key file.
    pub fn from_raw(c: &RawChannel) -> Result<Vertex, Invalid> {
        let project = required(c.project.as_deref(), "project")?;
        if project.contains(['/', '?', '#', '%']) || project.contains(char::is_whitespace) {
            return Err(invalid(
                "project",
                format!("`{project}` is not a Google Cloud project id"),
            ));
        }
        let location = location(c)?;
        if !c.api_key.is_empty() || !c.api_keys.is_empty() {
            return Err(invalid(
                "api_key",
                "`vertex` channels authenticate with the service account of `credentials_file`, not an API key",
            ));
        }
        let path = required(c.credentials_file.as_deref(), "credentials_file")?;
        let text = std::fs::read(&path)
            .map_err(|e| invalid("credentials_file", format!("cannot read `{path}`: {e}")))?;
        let file: KeyFile = serde_json::from_slice(&text).map_err(|e| {
            invalid(
                "credentials_file",
                format!("`{path}` is not a service account key file: {e}"),
            )
        })?;
        let account = ServiceAccount::new(file, CLOUD_PLATFORM)
            .map_err(|e| invalid("credentials_file", format!("`{path}`: {e}")))?;
        Ok(Vertex {
            project,
            location,
            account,
        })
    }

    fn model_path(&self, publisher: &str, model: &str, method: &str) -> String {
        format!(
            "/v1/projects/{}/locations/{}/publishers/{publisher}/models/{model}:{method}",
            self.project, self.location
        )
    }
}

/// The channel's `location` (required), for a channel that names one.
pub fn location(c: &RawChannel) -> Result<String, Invalid> {
    let location = required(c.location.as_deref(), "location")?;
    let fits = location
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !fits {
        return Err(invalid(
            "location",
            format!("`{location}` is not a Google Cloud location (`us-central1`, `global`)"),
        ));
    }
    Ok(location)
}

fn required(v: Option<&str>, field: &str) -> Result<String, Invalid> {
    let v = v.map(str::trim).unwrap_or("");
    if v.is_empty() {
        return Err(invalid(field, "is required for `vertex` channels"));
    }
    Ok(v.to_string())
}

/// The body of a messages request as the messages protocol wrote it (Messages API
/// reference, "Create a Message"): every member is kept in order but `model`.
#[derive(Deserialize)]
struct MessagesBody {
    /// In the path on Vertex AI, refused in the body.
    #[serde(default, rename = "model")]
    _model: IgnoredAny,
    /// Vertex AI's own value is written instead.
    #[serde(default, rename = "anthropic_version")]
    _version: IgnoredAny,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// The body of `rawPredict` and `streamRawPredict` ("Use Anthropic's Claude models on
/// Vertex AI"): the messages body without `model`, with `anthropic_version`.
#[derive(Serialize)]
struct RawPredictBody {
    anthropic_version: &'static str,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

fn refused(message: impl Into<String>) -> crate::protocol::Invalid {
    crate::protocol::Invalid {
        param: Some("model".into()),
        message: message.into(),
    }
}

#[async_trait]
impl Cloud for Vertex {
    fn wire(&self, _client: Protocol, model: &str) -> Protocol {
        if is_claude(model) {
            Protocol::Messages
        } else {
            Protocol::Gemini
        }
    }

    fn target(&self, t: &mut Target) -> Result<(), crate::protocol::Invalid> {
        // The model is one segment of the resource name.
        if t.model.is_empty() || t.model.contains(['/', '?', '#', '%', ' ']) {
            return Err(refused(format!(
                "`{}` is not a model name Vertex AI serves",
                t.model
            )));
        }
        match t.wire {
            Some(Protocol::Gemini) => {
                let method = if t.stream {
                    "streamGenerateContent?alt=sse"
                } else {
                    "generateContent"
                };
                t.path = self.model_path("google", &t.model, method);
            }
            Some(Protocol::Messages) => {
                let method = if t.stream {
                    "streamRawPredict"
                } else {
                    "rawPredict"
                };
                t.path = self.model_path("anthropic", &t.model, method);
                let body: MessagesBody =
                    serde_json::from_slice(&t.body).map_err(|e| crate::protocol::Invalid {
                        param: None,
                        message: format!("the messages body cannot be read again: {e}"),
                    })?;
                let out = RawPredictBody {
                    anthropic_version: ANTHROPIC_VERSION,
                    rest: body.rest,
                };
                t.body = Bytes::from(serde_json::to_vec(&out).map_err(|e| {
                    crate::protocol::Invalid {
                        param: None,
                        message: format!("writing the rawPredict body: {e}"),
                    }
                })?);
            }
            _ => {
                return Err(refused(
                    "Vertex AI channels serve chat-style requests to Gemini and Claude models only",
                ))
            }
        }
        Ok(())
    }

    async fn authenticate(
        &self,
        http: &dyn TokenClient,
        _req: &Outbound<'_>,
        now: i64,
    ) -> Result<Vec<(&'static str, String)>, AuthError> {
        let bearer = self.account.bearer(http, now).await?;
        Ok(vec![("authorization", bearer)])
    }

    fn refused(&self, _status: u16) {
        self.account.forget();
    }

    fn auth_state(&self) -> Value {
        self.account.state()
    }
}

#[cfg(test)]
#[path = "vertex_tests.rs"]
mod tests;
