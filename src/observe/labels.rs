//! Label values, all from fixed tables: a metric's series count is bounded by the
//! configuration (models, channels) and these lists, never by what a caller sends.

use crate::errors::ErrorShape;
use crate::media::Media;
use crate::protocol::Protocol;
use crate::route::Route;

/// The `route` label: one name per endpoint the gateway serves (not the raw path, which
/// carries model names and task ids).
pub const ROUTES: &[&str] = &[
    "chat_completions",
    "messages",
    "generate_content",
    "responses",
    "responses_compact",
    "images_generations",
    "images_edits",
    "audio_speech",
    "audio_transcriptions",
    "audio_translations",
    "embeddings",
    "rerank",
    "moderations",
    "realtime",
    "video",
    "models",
    "usage",
    "log",
    "not_implemented",
    "method_not_allowed",
    "not_found",
];

/// Index into [`ROUTES`] of a routed request.
pub fn route_index(route: &Route) -> usize {
    let name = match route {
        Route::Relay(r) => match r.protocol {
            Protocol::Chat => "chat_completions",
            Protocol::Messages => "messages",
            Protocol::Gemini => "generate_content",
            Protocol::Responses if r.compact => "responses_compact",
            Protocol::Responses => "responses",
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
        Route::NotImplemented => "not_implemented",
        Route::MethodNotAllowed => "method_not_allowed",
        Route::NotFound => "not_found",
    };
    ROUTES
        .iter()
        .position(|r| *r == name)
        .unwrap_or(ROUTES.len() - 1)
}

/// The `protocol` label: the client's protocol for relayed requests, else the error
/// envelope family the path belongs to.
pub fn protocol(route: &Route, shape: ErrorShape) -> &'static str {
    match route {
        Route::Relay(r) => match r.protocol {
            Protocol::Chat => "chat",
            Protocol::Messages => "messages",
            Protocol::Gemini => "generate-content",
            Protocol::Responses => "responses",
        },
        _ => match shape {
            ErrorShape::Default => "default",
            ErrorShape::Messages => "messages",
            ErrorShape::Gemini => "generate-content",
        },
    }
}

/// The `status` label, without formatting a number per request.
// The codes the gateway answers with come first; any other falls into its class.
#[allow(clippy::match_overlapping_arm)]
pub fn status(s: u16) -> &'static str {
    match s {
        0 => "0",
        101 => "101",
        200 => "200",
        201 => "201",
        204 => "204",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        409 => "409",
        413 => "413",
        422 => "422",
        429 => "429",
        500 => "500",
        501 => "501",
        502 => "502",
        503 => "503",
        504 => "504",
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn every_route_has_a_label() {
        let r = crate::route::route;
        assert_eq!(
            ROUTES[route_index(&r(&Method::POST, "/v1/chat/completions"))],
            "chat_completions"
        );
        assert_eq!(
            ROUTES[route_index(&r(&Method::POST, "/v1/responses/compact"))],
            "responses_compact"
        );
        assert_eq!(
            ROUTES[route_index(&r(&Method::GET, "/v1beta/models/x"))],
            "models"
        );
        assert_eq!(ROUTES[route_index(&r(&Method::GET, "/nope"))], "not_found");
        assert_eq!(
            ROUTES[route_index(&r(&Method::POST, "/v1/videos"))],
            "video"
        );
        assert_eq!(status(200), "200");
        assert_eq!(status(418), "4xx");
        assert_eq!(status(599), "5xx");
    }
}
