//! Which handler a (method, path) goes to. One table, so the set of served paths is
//! visible in one place.

use crate::auth::Accepts;
use crate::errors::{ErrorShape, GatewayError};
use crate::media::Media;
use crate::protocol::Protocol;
pub use crate::relay::Relay;
use crate::video::{Shape, VideoRoute};
use http::Method;
use table::{Endpoint, Lookup, Param, Verb, GET, POST, READ};

const DELETE: &[Verb] = &[Verb::Delete];

pub mod table;

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

/// Builds a row's route from its path parameter (`""` when it has none), or says which
/// refusal the row stands for.
pub type Make = fn(&str) -> Result<Route, Refused>;

const fn row(methods: &'static [Verb], path: &'static str, make: Make) -> Endpoint<Make> {
    Endpoint::new(methods, path, make)
}

const fn relay(protocol: Protocol) -> Relay {
    Relay {
        protocol,
        path_model: None,
        path_stream: false,
        compact: false,
    }
}

fn gemini(model: &str, stream: bool) -> Result<Route, Refused> {
    Ok(Route::Relay(Relay {
        path_model: Some(model.to_string()),
        path_stream: stream,
        ..relay(Protocol::Gemini)
    }))
}

/// Every endpoint of the client listener, in lookup order: [`route`] dispatches by it,
/// and `openapi/client.yaml` documents exactly these (tests/integration/openapi.rs).
pub static ENDPOINTS: &[Endpoint<Make>] = &[
    row(READ, "/v1/models", |_| Ok(Route::Models)),
    row(READ, "/v1beta/models", |_| Ok(Route::GeminiModels)),
    row(POST, "/v1beta/models/{model}:generateContent", |m| {
        gemini(m, false)
    }),
    row(POST, "/v1beta/models/{model}:streamGenerateContent", |m| {
        gemini(m, true)
    }),
    row(READ, "/v1beta/models/{model}", |m| {
        Ok(Route::GeminiModel(m.to_string()))
    })
    .with_param(Param::NoColon),
    row(READ, "/api/usage/token", |_| Ok(Route::UsageToken)),
    row(READ, "/api/log/token", |_| Ok(Route::LogToken)),
    row(POST, "/v1/chat/completions", |_| {
        Ok(Route::Relay(relay(Protocol::Chat)))
    }),
    row(POST, "/v1/messages", |_| {
        Ok(Route::Relay(relay(Protocol::Messages)))
    }),
    row(POST, "/v1/responses", |_| {
        Ok(Route::Relay(relay(Protocol::Responses)))
    }),
    row(POST, "/v1/responses/compact", |_| {
        Ok(Route::Relay(Relay {
            compact: true,
            ..relay(Protocol::Responses)
        }))
    }),
    // spec 4.4: responses the gateway stored (after `compact`, a POST of its own).
    row(READ, "/v1/responses/{response_id}", |id| {
        stored(Stored::Get(id.to_string()))
    }),
    row(DELETE, "/v1/responses/{response_id}", |id| {
        stored(Stored::Delete(id.to_string()))
    }),
    row(READ, "/v1/responses/{response_id}/input_items", |id| {
        stored(Stored::InputItems(id.to_string()))
    }),
    row(POST, "/v1/images/generations", |_| {
        media(Media::ImageGeneration)
    }),
    row(POST, "/v1/images/edits", |_| media(Media::ImageEdit)),
    row(POST, "/v1/audio/speech", |_| media(Media::Speech)),
    row(POST, "/v1/audio/transcriptions", |_| {
        media(Media::Transcription)
    }),
    row(POST, "/v1/audio/translations", |_| {
        media(Media::Translation)
    }),
    row(POST, "/v1/embeddings", |_| media(Media::Embeddings(None))),
    // spec 4.19: the model in the path.
    row(POST, "/v1/engines/{model}/embeddings", |m| {
        media(Media::Embeddings(Some(m.to_string())))
    }),
    row(POST, "/v1/rerank", |_| media(Media::Rerank)),
    row(POST, "/v1/moderations", |_| media(Media::Moderation)),
    row(GET, "/v1/realtime", |_| Ok(Route::Realtime)),
    // spec 4.8–4.16: the video task endpoints, one submission and one status per shape.
    row(POST, "/v1/videos", |_| submit(Shape::Videos)),
    row(READ, "/v1/videos/{task_id}", |id| status(Shape::Videos, id)),
    row(READ, "/v1/videos/{task_id}/content", |id| {
        Ok(Route::Video(VideoRoute::Content(id.to_string())))
    }),
    row(POST, "/video-a/v1/videos/text2video", |_| {
        submit(Shape::TextToVideo)
    }),
    row(READ, "/video-a/v1/videos/text2video/{task_id}", |id| {
        status(Shape::TextToVideo, id)
    }),
    row(POST, "/video-a/v1/videos/image2video", |_| {
        submit(Shape::ImageToVideo)
    }),
    row(READ, "/video-a/v1/videos/image2video/{task_id}", |id| {
        status(Shape::ImageToVideo, id)
    }),
    row(POST, "/video-b", |_| Ok(Route::Video(VideoRoute::VideoB))),
    row(POST, "/v1/video/generations", |_| {
        submit(Shape::Generations)
    }),
    row(READ, "/v1/video/generations/{task_id}", |id| {
        status(Shape::Generations, id)
    }),
    // spec 4.23: files and fine-tunes are listed but not implemented.
    row(&[Verb::Get, Verb::Post], "/v1/fine-tunes", not_implemented),
    row(GET, "/v1/fine-tunes/{fine_tune_id}", not_implemented),
    row(
        POST,
        "/v1/fine-tunes/{fine_tune_id}/cancel",
        not_implemented,
    ),
    row(GET, "/v1/fine-tunes/{fine_tune_id}/events", not_implemented),
    row(&[Verb::Get, Verb::Post], "/v1/files", not_implemented),
    row(
        &[Verb::Get, Verb::Delete],
        "/v1/files/{file_id}",
        not_implemented,
    ),
    row(GET, "/v1/files/{file_id}/content", not_implemented),
];

fn stored(s: Stored) -> Result<Route, Refused> {
    Ok(Route::StoredResponse(s))
}

fn media(m: Media) -> Result<Route, Refused> {
    Ok(Route::Media(m))
}

fn submit(shape: Shape) -> Result<Route, Refused> {
    Ok(Route::Video(VideoRoute::Submit(shape)))
}

fn status(shape: Shape, id: &str) -> Result<Route, Refused> {
    Ok(Route::Video(VideoRoute::Status(shape, id.to_string())))
}

fn not_implemented(_: &str) -> Result<Route, Refused> {
    Err(Refused::NotImplemented)
}

/// The route of a request, by [`ENDPOINTS`]; the trailing-slash variants of spec 4.6,
/// 4.7 and 4.18 are the same endpoints.
pub fn route(method: &Method, path: &str) -> Result<Route, Refused> {
    match table::find(ENDPOINTS, method, path) {
        Lookup::Found(row, param) => (row.target)(param),
        Lookup::WrongMethod => Err(Refused::MethodNotAllowed),
        Lookup::NoPath => Err(Refused::NotFound),
    }
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
        assert_eq!(
            route(&Method::HEAD, "/v1/realtime"),
            Err(Refused::MethodNotAllowed)
        );
        assert_eq!(route(&Method::HEAD, "/v1/models"), Ok(Route::Models));
        assert_eq!(
            route(&Method::HEAD, "/v1/files"),
            Err(Refused::MethodNotAllowed)
        );
    }

    #[test]
    fn generate_content_paths() {
        // A `:` in the last segment is an action: an unknown one is not a model read.
        assert_eq!(
            route(&Method::GET, "/v1beta/models/g:bogus"),
            Err(Refused::NotFound)
        );
        assert_eq!(
            route(&Method::POST, "/v1beta/models/g:bogus"),
            Err(Refused::NotFound)
        );
        assert_eq!(
            route(&Method::GET, "/v1beta/models/g:generateContent"),
            Err(Refused::MethodNotAllowed)
        );
        assert_eq!(
            route(&Method::POST, "/v1beta/models/g"),
            Err(Refused::MethodNotAllowed)
        );
        assert_eq!(
            route(&Method::POST, "/v1beta/models/a/b:generateContent"),
            Err(Refused::NotFound)
        );
        assert_eq!(
            route(&Method::POST, "/v1beta/models/:generateContent"),
            Err(Refused::NotFound)
        );
    }

    #[test]
    fn video_routes() {
        let video = |m: Method, p: &str| route(&m, p);
        assert_eq!(
            video(Method::POST, "/v1/videos"),
            Ok(Route::Video(VideoRoute::Submit(Shape::Videos)))
        );
        assert_eq!(
            video(Method::GET, "/v1/videos/task_1/content"),
            Ok(Route::Video(VideoRoute::Content("task_1".into())))
        );
        assert_eq!(
            video(Method::GET, "/v1/videos/task_1"),
            Ok(Route::Video(VideoRoute::Status(
                Shape::Videos,
                "task_1".into()
            )))
        );
        assert_eq!(
            video(Method::POST, "/v1/videos/task_1"),
            Err(Refused::MethodNotAllowed)
        );
        assert_eq!(
            video(Method::GET, "/video-a/v1/videos/image2video/t"),
            Ok(Route::Video(VideoRoute::Status(
                Shape::ImageToVideo,
                "t".into()
            )))
        );
        assert_eq!(
            video(Method::POST, "/video-b/"),
            Ok(Route::Video(VideoRoute::VideoB))
        );
        assert_eq!(
            video(Method::GET, "/video-b"),
            Err(Refused::MethodNotAllowed)
        );
        assert_eq!(video(Method::GET, "/v1/videos/a/b"), Err(Refused::NotFound));
        assert_eq!(
            video(Method::GET, "/v1/video/generations/t/"),
            Ok(Route::Video(VideoRoute::Status(
                Shape::Generations,
                "t".into()
            )))
        );
    }

    /// Each template has at most one parameter, and no two rows answer the same method
    /// on the same template.
    #[test]
    fn rows_are_well_formed() {
        let ops = table::operations(ENDPOINTS);
        for (i, (v, p)) in ops.iter().enumerate() {
            assert!(p.matches('{').count() <= 1, "{p}");
            assert!(!ops[..i].contains(&(*v, *p)), "{v:?} {p} twice");
        }
    }
}
