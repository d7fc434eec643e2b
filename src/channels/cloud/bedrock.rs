//! `bedrock` channels: Amazon Bedrock Runtime (Amazon Bedrock API Reference, Bedrock
//! Runtime: Converse, ConverseStream). Every model is spoken to through the Converse API
//! ([`Protocol::Converse`]) at `/model/{modelId}/converse` or `/converse-stream`, the
//! model id (a foundation model, an inference profile, an ARN) taken from the channel's
//! model map and percent-encoded.
//!
//! Each request is signed with AWS Signature Version 4 (AWS General Reference, "Signing
//! AWS API requests") by AWS's own signer (`aws-sigv4`): service `bedrock`, the channel's
//! region, the key pair and an optional session token; the signed headers are `host`,
//! `x-amz-date`, `x-amz-content-sha256` (the body's SHA-256) and, with temporary
//! credentials, `x-amz-security-token`. A Bedrock API key is sent as a bearer token
//! instead.

use super::{AuthError, Cloud, Invalid, Outbound, RawChannel, Target, TokenClient};
use crate::channels::raw::invalid;
use crate::protocol::{self, Protocol};
use async_trait::async_trait;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use serde_json::json;
use std::time::{Duration, UNIX_EPOCH};

/// The signing name of Bedrock Runtime.
const SERVICE: &str = "bedrock";
/// What a ConverseStream answer is (AWS event stream encoding).
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

pub struct Bedrock {
    region: String,
    auth: Auth,
}

enum Auth {
    SigV4(Credentials),
    /// A Bedrock API key (`Authorization: Bearer`).
    ApiKey(String),
}

impl Bedrock {
    /// The channel's options, checked: `region`, and either the key pair (with an
    /// optional `session_token`) or `api_key`.
    pub fn from_raw(c: &RawChannel) -> Result<Bedrock, Invalid> {
        for (field, set) in [
            ("api_version", c.api_version.is_some()),
            ("entra", c.entra.is_some()),
            ("project", c.project.is_some()),
            ("location", c.location.is_some()),
            ("credentials_file", c.credentials_file.is_some()),
        ] {
            if set {
                return Err(invalid(field, "is not an option of `bedrock` channels"));
            }
        }
        let region = c.region.as_deref().map(str::trim).unwrap_or("");
        if region.is_empty() {
            return Err(invalid(
                "region",
                "is required for `bedrock` channels (the AWS region, e.g. `us-east-1`)",
            ));
        }
        if !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(invalid(
                "region",
                format!("`{region}` is not an AWS region name (e.g. `us-east-1`)"),
            ));
        }
        if !c.api_keys.is_empty() {
            return Err(invalid(
                "api_keys",
                "`bedrock` channels take one `api_key` (a Bedrock API key)",
            ));
        }
        let (ak, sk) = (c.access_key.trim(), c.secret_key.trim());
        let token = c.session_token.trim();
        let api_key = c.api_key.trim();
        let auth = match (ak.is_empty(), sk.is_empty()) {
            (false, false) => {
                if !api_key.is_empty() {
                    return Err(invalid(
                        "api_key",
                        "a `bedrock` channel signs with `access_key` and `secret_key` or sends `api_key`, not both",
                    ));
                }
                Auth::SigV4(Credentials::new(
                    ak,
                    sk,
                    (!token.is_empty()).then(|| token.to_string()),
                    None,
                    "model-gateway channel",
                ))
            }
            (true, false) => {
                return Err(invalid("access_key", "is required with `secret_key`"));
            }
            (false, true) => {
                return Err(invalid("secret_key", "is required with `access_key`"));
            }
            (true, true) => {
                if !token.is_empty() {
                    return Err(invalid(
                        "session_token",
                        "goes with `access_key` and `secret_key`",
                    ));
                }
                if api_key.is_empty() {
                    return Err(invalid(
                        "access_key",
                        "a `bedrock` channel needs `access_key` and `secret_key` (SigV4), or `api_key` (a Bedrock API key)",
                    ));
                }
                Auth::ApiKey(api_key.to_string())
            }
        };
        Ok(Bedrock {
            region: region.to_string(),
            auth,
        })
    }

    /// The SigV4 headers of `req` at Unix time `now`.
    fn sign(
        &self,
        creds: &Credentials,
        req: &Outbound<'_>,
        now: i64,
    ) -> Result<Vec<(&'static str, String)>, AuthError> {
        let identity = creds.clone().into();
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let time = UNIX_EPOCH + Duration::from_secs(u64::try_from(now).unwrap_or(0));
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SERVICE)
            .time(time)
            .settings(settings)
            .build()
            .map_err(|e| AuthError::caused("SigV4 signing parameters", e))?
            .into();
        // Only `host` of the headers sent is signed: the signer adds its own.
        let uri = format!("https://{}{}", req.host, req.path);
        let signable = SignableRequest::new(
            req.method,
            uri,
            [("host", req.host)].into_iter(),
            SignableBody::Bytes(req.body),
        )
        .map_err(|e| AuthError::caused("a request SigV4 cannot sign", e))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| AuthError::caused("SigV4 signing", e))?
            .into_parts();
        let (headers, _query) = instructions.into_parts();
        let mut out = Vec::with_capacity(headers.len());
        for h in headers {
            let name = match h.name() {
                "authorization" => "authorization",
                "x-amz-date" => "x-amz-date",
                "x-amz-content-sha256" => "x-amz-content-sha256",
                "x-amz-security-token" => "x-amz-security-token",
                other => {
                    return Err(AuthError::new(format!(
                        "SigV4 signing gave an unexpected header `{other}`"
                    )))
                }
            };
            out.push((name, h.value().to_string()));
        }
        Ok(out)
    }
}

#[async_trait]
impl Cloud for Bedrock {
    fn wire(&self, _client: Protocol, _model: &str) -> Protocol {
        Protocol::Converse
    }

    fn target(&self, t: &mut Target) -> Result<(), protocol::Invalid> {
        if t.wire != Some(Protocol::Converse) {
            return Err(protocol::Invalid {
                param: None,
                message: "Amazon Bedrock channels serve chat-style requests only.".into(),
            });
        }
        t.path = protocol::converse::path(&t.model, t.stream);
        Ok(())
    }

    async fn authenticate(
        &self,
        _http: &dyn TokenClient,
        req: &Outbound<'_>,
        now: i64,
    ) -> Result<Vec<(&'static str, String)>, AuthError> {
        let stream = req.path.ends_with("/converse-stream");
        let accept = if stream {
            EVENT_STREAM
        } else {
            "application/json"
        };
        let mut headers = vec![("accept", accept.to_string())];
        match &self.auth {
            Auth::ApiKey(key) => headers.push(("authorization", format!("Bearer {key}"))),
            Auth::SigV4(creds) => headers.extend(self.sign(creds, req, now)?),
        }
        Ok(headers)
    }

    fn auth_state(&self) -> serde_json::Value {
        match &self.auth {
            Auth::SigV4(c) => json!({
                "kind": "sigv4",
                "region": self.region,
                "session_token": c.session_token().is_some(),
            }),
            Auth::ApiKey(_) => json!({"kind": "api_key", "region": self.region}),
        }
    }

    /// The secret key and session token (an API key is among the channel's keys too).
    fn secrets(&self) -> Vec<&str> {
        match &self.auth {
            Auth::SigV4(c) => std::iter::once(c.secret_access_key())
                .chain(c.session_token())
                .collect(),
            Auth::ApiKey(k) => vec![k.as_str()],
        }
    }
}

#[cfg(test)]
#[path = "bedrock_tests.rs"]
mod tests;
