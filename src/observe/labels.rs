//! Label values, all from fixed tables: a metric's series count is bounded by the
//! configuration (models, channels) and these lists, never by what a caller sends.

/// The `route` label: one name per endpoint the gateway serves (not the raw path, which
/// carries model names and task ids).
pub const ROUTES: &[&str] = &[
    "chat_completions",
    "messages",
    "generate_content",
    "responses",
    "responses_compact",
    "responses_stored",
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

/// Index into [`ROUTES`] of a route's label (the last, `not_found`, for a name not in
/// the table).
pub fn route_index(name: &str) -> usize {
    ROUTES
        .iter()
        .position(|r| *r == name)
        .unwrap_or(ROUTES.len() - 1)
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

    #[test]
    fn statuses_and_unknown_routes_have_a_label() {
        assert_eq!(ROUTES[route_index("video")], "video");
        assert_eq!(ROUTES[route_index("no such route")], "not_found");
        assert_eq!(status(200), "200");
        assert_eq!(status(418), "4xx");
        assert_eq!(status(599), "5xx");
    }
}
