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
