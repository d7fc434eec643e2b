//! Asynchronous video tasks (spec 2.3, 2.4, 3, 4.8–4.16).
//!
//! A submission in any of the four client shapes is read into one [`job::VideoJob`],
//! priced per second of video, reserved in full, and sent to a channel in that channel's
//! shape ([`vendors`]). The gateway answers with its own task id (`task_` + 32
//! alphanumerics); the upstream's id stays in the store. From then on the task belongs to
//! the store: the background [`poller::Poller`] (on every instance) claims due tasks with
//! a lease, asks their upstream, and either saves the progress (polled again after a
//! growing interval) or ends the task, which settles its reservation once — the real
//! cost on success, nothing on failure or timeout. Status requests answer from the
//! store and poll in place when the task is due; content requests stream the video from
//! the upstream through the gateway.

pub mod job;
mod poll;
pub mod poller;
pub mod render;
pub mod service;
pub mod vendors;

/// The client shape a request came in, which decides how answers look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `/v1/videos` (spec 4.8, 4.9): the job record of 2.4.
    Videos,
    /// `/video-a/v1/videos/text2video` (4.10, 4.11).
    TextToVideo,
    /// `/video-a/v1/videos/image2video` (4.12, 4.13).
    ImageToVideo,
    /// `/video-b/?Action=...` (4.14).
    VideoB,
    /// `/v1/video/generations` (4.15, 4.16).
    Generations,
}

/// One video endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VideoRoute {
    Submit(Shape),
    /// Status of a task by id, answered in the shape's record.
    Status(Shape, String),
    /// `GET /v1/videos/{id}/content`.
    Content(String),
    /// `POST /video-b/`: submit or status, by the `Action` query parameter.
    VideoB,
}

/// The video route for a path, if it is one (`p` has no trailing slash).
pub fn route(post: bool, get: bool, p: &str) -> Option<Result<VideoRoute, ()>> {
    let only = |ok: bool, r: VideoRoute| Some(if ok { Ok(r) } else { Err(()) });
    let id_ok = |id: &str| !id.is_empty() && !id.contains('/');
    match p {
        "/v1/videos" => return only(post, VideoRoute::Submit(Shape::Videos)),
        "/v1/video/generations" => return only(post, VideoRoute::Submit(Shape::Generations)),
        "/video-a/v1/videos/text2video" => {
            return only(post, VideoRoute::Submit(Shape::TextToVideo))
        }
        "/video-a/v1/videos/image2video" => {
            return only(post, VideoRoute::Submit(Shape::ImageToVideo))
        }
        "/video-b" => return only(post, VideoRoute::VideoB),
        _ => {}
    }
    if let Some(rest) = p.strip_prefix("/v1/videos/") {
        if let Some(id) = rest.strip_suffix("/content").filter(|id| id_ok(id)) {
            return only(get, VideoRoute::Content(id.to_string()));
        }
        return id_ok(rest).then(|| {
            if get {
                Ok(VideoRoute::Status(Shape::Videos, rest.to_string()))
            } else {
                Err(())
            }
        });
    }
    for (prefix, shape) in [
        ("/video-a/v1/videos/text2video/", Shape::TextToVideo),
        ("/video-a/v1/videos/image2video/", Shape::ImageToVideo),
        ("/v1/video/generations/", Shape::Generations),
    ] {
        if let Some(id) = p.strip_prefix(prefix) {
            return id_ok(id).then(|| {
                if get {
                    Ok(VideoRoute::Status(shape, id.to_string()))
                } else {
                    Err(())
                }
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(true, false, "/v1/videos"),
            Some(Ok(VideoRoute::Submit(Shape::Videos)))
        );
        assert_eq!(
            route(false, true, "/v1/videos/task_1/content"),
            Some(Ok(VideoRoute::Content("task_1".into())))
        );
        assert_eq!(
            route(false, true, "/v1/videos/task_1"),
            Some(Ok(VideoRoute::Status(Shape::Videos, "task_1".into())))
        );
        assert_eq!(route(true, false, "/v1/videos/task_1"), Some(Err(())));
        assert_eq!(
            route(false, true, "/video-a/v1/videos/image2video/t"),
            Some(Ok(VideoRoute::Status(Shape::ImageToVideo, "t".into())))
        );
        assert_eq!(route(false, true, "/video-b"), Some(Err(())));
        assert_eq!(route(false, true, "/v1/videos/a/b"), None);
        assert_eq!(route(false, true, "/v1/models"), None);
    }
}
