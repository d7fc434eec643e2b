//! Which handler a (method, path) goes to. One table, so the set of served paths is
//! visible in one place.

use crate::auth::Accepts;
use crate::errors::{ErrorShape, GatewayError};
use crate::media::Media;
use crate::protocol::Protocol;
pub use crate::relay::Relay;
use crate::video::VideoRoute;
use http::Method;

/// A served endpoint: the request is authenticated, then handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The synchronous non-chat endpoints (spec 4.6, 4.7, 4.19–4.22).
    Media(Media),
    /// `GET /v1/realtime`: a WebSocket relayed both ways (spec 4.20).
    Realtime,
    /// The asynchronous video endpoints (spec 4.8–4.16).
    Video(VideoRoute),
    /// `GET /v1/models` (spec 4.1): format chosen from the headers.
    Models,
    /// `GET /v1beta/models` (spec 4.2), and one model by name.
    GeminiModels,
    GeminiModel(String),
    UsageToken,
    LogToken,
    Relay(Relay),
    /// A response the gateway stored (spec 4.4): read, deleted, or its input items listed.
    StoredResponse(Stored),
}

/// What is done with a stored response, by its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Get(String),
    Delete(String),
    InputItems(String),
}

/// A request the table turns away, before authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Spec 4.23: listed, not implemented.
    NotImplemented,
    MethodNotAllowed,
    NotFound,
}

impl From<Refused> for GatewayError {
    fn from(r: Refused) -> GatewayError {
        match r {
            Refused::NotImplemented => GatewayError::NotImplemented,
            Refused::MethodNotAllowed => GatewayError::MethodNotAllowed,
            Refused::NotFound => GatewayError::NotFound,
        }
    }
}

impl Route {
    pub fn accepts(&self, path: &str) -> Accepts {
        let gen = path.starts_with("/v1beta/");
        match self {
            Route::Models => Accepts {
                x_api_key: true,
                gen_key: true,
                ws_protocol: false,
            },
            Route::Relay(r) if r.protocol == Protocol::Messages => Accepts {
                x_api_key: true,
                ..Accepts::default()
            },
            Route::Realtime => Accepts {
                ws_protocol: true,
                ..Accepts::default()
            },
            _ => Accepts {
                gen_key: gen,
                ..Accepts::default()
            },
        }
    }
}

/// The error envelope family of a request: its protocol's when it is relayed, else the
/// one its path belongs to (a refused request has only its path).
pub fn error_shape(served: Option<&Route>, path: &str) -> ErrorShape {
    match served {
        Some(Route::Relay(r)) if r.protocol == Protocol::Messages => ErrorShape::Messages,
        _ if path.starts_with("/v1/messages") => ErrorShape::Messages,
        _ if path.starts_with("/v1beta/") => ErrorShape::Gemini,
        _ => ErrorShape::Default,
    }
}

pub fn route(method: &Method, path: &str) -> Result<Route, Refused> {
    // The trailing-slash variants of spec 4.18 and friends are the same endpoints.
    let p = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let get = method == Method::GET;
    // The local reads answer HEAD as GET (the proxy writes no body for it).
    let read = get || method == Method::HEAD;
    let post = method == Method::POST;
    let only = |ok: bool, r: Route| {
        if ok {
            Ok(r)
        } else {
            Err(Refused::MethodNotAllowed)
        }
    };
    if let Some(v) = crate::video::route(post, get, p) {
        // The video table refuses only a method: its `Err` carries nothing more.
        return v.map(Route::Video).map_err(|()| Refused::MethodNotAllowed);
    }
    let relay = |protocol| Relay {
        protocol,
        path_model: None,
        path_stream: false,
        compact: false,
    };
    match p {
        "/v1/models" => only(read, Route::Models),
        "/v1beta/models" => only(read, Route::GeminiModels),
        "/api/usage/token" => only(read, Route::UsageToken),
        "/api/log/token" => only(read, Route::LogToken),
        "/v1/chat/completions" => only(post, Route::Relay(relay(Protocol::Chat))),
        "/v1/messages" => only(post, Route::Relay(relay(Protocol::Messages))),
        "/v1/responses" => only(post, Route::Relay(relay(Protocol::Responses))),
        "/v1/images/generations" => only(post, Route::Media(Media::ImageGeneration)),
        "/v1/images/edits" => only(post, Route::Media(Media::ImageEdit)),
        "/v1/audio/speech" => only(post, Route::Media(Media::Speech)),
        "/v1/audio/transcriptions" => only(post, Route::Media(Media::Transcription)),
        "/v1/audio/translations" => only(post, Route::Media(Media::Translation)),
        "/v1/embeddings" => only(post, Route::Media(Media::Embeddings(None))),
        "/v1/rerank" => only(post, Route::Media(Media::Rerank)),
        "/v1/moderations" => only(post, Route::Media(Media::Moderation)),
        "/v1/realtime" => only(get, Route::Realtime),
        "/v1/responses/compact" => only(
            post,
            Route::Relay(Relay {
                compact: true,
                ..relay(Protocol::Responses)
            }),
        ),
        _ => {
            if let Some(rest) = p.strip_prefix("/v1beta/models/") {
                return gemini(method, rest);
            }
            if let Some(rest) = p.strip_prefix("/v1/responses/") {
                return stored(method, rest);
            }
            // spec 4.19: the model in the path.
            if let Some(model) = p
                .strip_prefix("/v1/engines/")
                .and_then(|r| r.strip_suffix("/embeddings"))
                .filter(|m| !m.is_empty() && !m.contains('/'))
            {
                return only(
                    post,
                    Route::Media(Media::Embeddings(Some(model.to_string()))),
                );
            }
            not_implemented(method, p)
        }
    }
}

/// `/v1/responses/{id}` (GET, DELETE) and `/v1/responses/{id}/input_items` (GET).
fn stored(method: &Method, rest: &str) -> Result<Route, Refused> {
    let read = method == Method::GET || method == Method::HEAD;
    let (id, items) = match rest.split_once('/') {
        None => (rest, false),
        Some((id, "input_items")) => (id, true),
        Some(_) => return Err(Refused::NotFound),
    };
    if id.is_empty() || id.contains('/') {
        return Err(Refused::NotFound);
    }
    let id = id.to_string();
    match (items, read, method == Method::DELETE) {
        (true, true, _) => Ok(Route::StoredResponse(Stored::InputItems(id))),
        (false, true, _) => Ok(Route::StoredResponse(Stored::Get(id))),
        (false, _, true) => Ok(Route::StoredResponse(Stored::Delete(id))),
        _ => Err(Refused::MethodNotAllowed),
    }
}

fn gemini(method: &Method, rest: &str) -> Result<Route, Refused> {
    if let Some((model, action)) = rest.rsplit_once(':') {
        let stream = match action {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return Err(Refused::NotFound),
        };
        if model.is_empty() || model.contains('/') {
            return Err(Refused::NotFound);
        }
        if method != Method::POST {
            return Err(Refused::MethodNotAllowed);
        }
        return Ok(Route::Relay(Relay {
            protocol: Protocol::Gemini,
            path_model: Some(model.to_string()),
            path_stream: stream,
            compact: false,
        }));
    }
    if rest.is_empty() || rest.contains('/') {
        return Err(Refused::NotFound);
    }
    if method != Method::GET && method != Method::HEAD {
        return Err(Refused::MethodNotAllowed);
    }
    Ok(Route::GeminiModel(rest.to_string()))
}

/// Spec 4.23: files and fine-tunes are listed but not implemented.
fn not_implemented(method: &Method, p: &str) -> Result<Route, Refused> {
    let seg: Vec<&str> = p.split('/').skip(1).collect();
    let m = method.as_str();
    let listed = match seg.as_slice() {
        ["v1", "fine-tunes"] => m == "GET" || m == "POST",
        ["v1", "fine-tunes", _] => m == "GET",
        ["v1", "fine-tunes", _, "cancel"] => m == "POST",
        ["v1", "fine-tunes", _, "events"] => m == "GET",
        ["v1", "files"] => m == "GET" || m == "POST",
        ["v1", "files", _] => m == "GET" || m == "DELETE",
        ["v1", "files", _, "content"] => m == "GET",
        _ => return Err(Refused::NotFound),
    };
    Err(if listed {
        Refused::NotImplemented
    } else {
        Refused::MethodNotAllowed
    })
}

impl Route {
    /// The metrics' `route` label: one name per endpoint (not the raw path, which carries
    /// model names and task ids); each is in the observer's table of routes.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Relay(r) => match r.protocol {
                Protocol::Chat => "chat_completions",
                Protocol::Messages => "messages",
                Protocol::Gemini => "generate_content",
                Protocol::Responses if r.compact => "responses_compact",
                Protocol::Responses => "responses",
                // Upstream only: no route relays it.
                Protocol::Converse => "not_found",
            },
            Route::Media(m) => match m {
                Media::ImageGeneration => "images_generations",
                Media::ImageEdit => "images_edits",
                Media::Speech => "audio_speech",
                Media::Transcription => "audio_transcriptions",
                Media::Translation => "audio_translations",
                Media::Embeddings(_) => "embeddings",
                Media::Rerank => "rerank",
                Media::Moderation => "moderations",
            },
            Route::Realtime => "realtime",
            Route::Video(_) => "video",
            Route::Models | Route::GeminiModels | Route::GeminiModel(_) => "models",
            Route::UsageToken => "usage",
            Route::LogToken => "log",
            Route::StoredResponse(_) => "responses_stored",
        }
    }
}

impl Refused {
    /// The metrics' `route` label of a refused request; each is in the observer's table.
    pub fn label(self) -> &'static str {
        match self {
            Refused::NotImplemented => "not_implemented",
            Refused::MethodNotAllowed => "method_not_allowed",
            Refused::NotFound => "not_found",
        }
    }
}

/// The metrics' `route` label of a request, served or refused.
pub fn label(routed: &Result<Route, Refused>) -> &'static str {
    match routed {
        Ok(route) => route.label(),
        Err(refused) => refused.label(),
    }
}

/// The metrics' `protocol` label: the client's protocol for relayed requests, else
/// the error envelope family the path belongs to.
pub fn protocol_label(served: Option<&Route>, shape: ErrorShape) -> &'static str {
    match served {
        Some(Route::Relay(r)) => match r.protocol {
            Protocol::Chat => "chat",
            Protocol::Messages => "messages",
            Protocol::Gemini => "generate-content",
            Protocol::Responses => "responses",
            Protocol::Converse => "default",
        },
        _ => match shape {
            ErrorShape::Default => "default",
            ErrorShape::Messages => "messages",
            ErrorShape::Gemini => "generate-content",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_a_label_in_the_metrics_table() {
        let label_of = |m: Method, p: &str| label(&route(&m, p));
        assert_eq!(
            label_of(Method::POST, "/v1/chat/completions"),
            "chat_completions"
        );
        assert_eq!(
            label_of(Method::POST, "/v1/responses/compact"),
            "responses_compact"
        );
        assert_eq!(label_of(Method::GET, "/v1beta/models/x"), "models");
        assert_eq!(label_of(Method::GET, "/nope"), "not_found");
        assert_eq!(label_of(Method::POST, "/v1/videos"), "video");
        for (m, p) in [
            (Method::POST, "/v1/chat/completions"),
            (Method::POST, "/v1/messages"),
            (Method::POST, "/v1beta/models/g:generateContent"),
            (Method::POST, "/v1/responses"),
            (Method::POST, "/v1/responses/compact"),
            (Method::POST, "/v1/images/generations"),
            (Method::POST, "/v1/images/edits"),
            (Method::POST, "/v1/audio/speech"),
            (Method::POST, "/v1/audio/transcriptions"),
            (Method::POST, "/v1/audio/translations"),
            (Method::POST, "/v1/embeddings"),
            (Method::POST, "/v1/rerank"),
            (Method::POST, "/v1/moderations"),
            (Method::GET, "/v1/realtime"),
            (Method::POST, "/v1/videos"),
            (Method::GET, "/v1/models"),
            (Method::GET, "/api/usage/token"),
            (Method::GET, "/api/log/token"),
            (Method::POST, "/v1/files"),
            (Method::PUT, "/v1/models"),
            (Method::GET, "/nope"),
        ] {
            let l = label_of(m, p);
            assert!(crate::observe::labels::ROUTES.contains(&l), "{p}: {l}");
        }
    }

    #[test]
    fn table() {
        assert_eq!(route(&Method::GET, "/v1/models"), Ok(Route::Models));
        assert_eq!(
            route(&Method::POST, "/v1/models"),
            Err(Refused::MethodNotAllowed)
        );
        assert!(matches!(
            route(&Method::POST, "/v1/chat/completions"),
            Ok(Route::Relay(_))
        ));
        assert_eq!(
            route(&Method::GET, "/v1/chat/completions"),
            Err(Refused::MethodNotAllowed)
        );
        assert_eq!(route(&Method::GET, "/v1/nope"), Err(Refused::NotFound));
        assert_eq!(
            route(&Method::DELETE, "/v1/files/f1"),
            Err(Refused::NotImplemented)
        );
        assert_eq!(
            route(&Method::PUT, "/v1/files/f1"),
            Err(Refused::MethodNotAllowed)
        );
        assert_eq!(
            route(&Method::POST, "/v1/fine-tunes/x/cancel"),
            Err(Refused::NotImplemented)
        );
        assert_eq!(
            route(&Method::GET, "/v1/fine-tunes/x/events"),
            Err(Refused::NotImplemented)
        );
        match route(
            &Method::POST,
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent/",
        ) {
            Ok(Route::Relay(r)) => {
                assert_eq!(r.path_model.as_deref(), Some("gemini-2.5-pro"));
                assert!(r.path_stream);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            route(&Method::GET, "/v1beta/models/g1"),
            Ok(Route::GeminiModel("g1".into()))
        );
        assert_eq!(
            route(&Method::POST, "/v1/images/generations/"),
            Ok(Route::Media(Media::ImageGeneration))
        );
        assert_eq!(
            route(&Method::POST, "/v1/engines/e5/embeddings"),
            Ok(Route::Media(Media::Embeddings(Some("e5".into()))))
        );
        assert_eq!(route(&Method::GET, "/v1/realtime"), Ok(Route::Realtime));
    }
}
