use super::*;
use crate::store::tasks::TaskRecord;

fn job(image: Option<Image>) -> VideoJob {
    VideoJob {
        model: "client-model".into(),
        prompt: "a red fox".into(),
        seconds: Some(4.0),
        width: Some(1280),
        height: Some(720),
        fps: Some(24),
        seed: Some(9),
        n: 1,
        image,
        extra: serde_json::Map::new(),
    }
}

fn png() -> Image {
    Image::Bytes {
        data: Bytes::from_static(b"\x89PNG-bytes"),
        content_type: "image/png".into(),
        filename: "r.png".into(),
    }
}

fn task(kind: &str) -> TaskRecord {
    TaskRecord {
        id: "task_x".into(),
        key_id: "k".into(),
        endpoint: "/v1/videos".into(),
        model: "client-model".into(),
        channel: "c".into(),
        upstream_id: "up_1".into(),
        upstream_kind: kind.into(),
        status: TaskStatus::Queued,
        progress: 0,
        created_at: 0,
        completed_at: None,
        deadline: 100,
        seconds: 4.0,
        size: None,
        n: 1,
        reserved: 1,
        cost: 0,
        polls: 0,
        result: None,
        error: None,
    }
}

#[test]
fn openai_submission_is_multipart_with_the_file() {
    let (call, kind) = submit(ChannelProtocol::OpenAi, &job(Some(png())), "up-model", 4.0).unwrap();
    assert_eq!(call.path, "/v1/videos");
    assert!(kind.is_empty());
    let boundary = crate::media::multipart::boundary(&call.content_type).unwrap();
    let form = crate::media::multipart::parse(&call.body, &boundary).unwrap();
    assert_eq!(form.field("model"), Some("up-model"));
    assert_eq!(form.field("seconds"), Some("4"));
    assert_eq!(form.field("size"), Some("1280x720"));
    let f = form.file("input_reference").unwrap();
    assert_eq!(&call.body[f.range.clone()], b"\x89PNG-bytes");
    // A URL cannot be uploaded as a file.
    let url = Some(Image::Url("https://img.example/a.png".into()));
    assert!(!accepts(ChannelProtocol::OpenAi, &job(url.clone())));
    assert!(submit(ChannelProtocol::OpenAi, &job(url), "m", 4.0).is_none());
}

#[test]
fn video_a_submission_picks_the_kind_and_base64s_bytes() {
    let (call, kind) = submit(ChannelProtocol::VideoA, &job(Some(png())), "up", 4.0).unwrap();
    assert_eq!(kind, "image2video");
    assert_eq!(call.path, "/v1/videos/image2video");
    let v: Value = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(v["model"], "up");
    assert_eq!(v["image"], b64(b"\x89PNG-bytes"));
    assert_eq!(v["duration"], 4.0);
    let (call, kind) = submit(ChannelProtocol::VideoA, &job(None), "up", 5.0).unwrap();
    assert_eq!(
        (call.path.as_str(), kind.as_str()),
        ("/v1/videos/text2video", "text2video")
    );
    assert_eq!(
        poll(ChannelProtocol::VideoA, &task("image2video"), "up").path,
        "/v1/videos/image2video/up_1"
    );
}

#[test]
fn video_b_submission_and_answers() {
    let (call, _) = submit(ChannelProtocol::VideoB, &job(Some(png())), "jimeng", 4.0).unwrap();
    assert!(call
        .path
        .starts_with("/?Action=CVSync2AsyncSubmitTask&Version="));
    let v: Value = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(v["req_key"], "jimeng");
    assert_eq!(v["binary_data_base64"][0], b64(b"\x89PNG-bytes"));
    assert_eq!(
        submitted(
            ChannelProtocol::VideoB,
            br#"{"code":10000,"message":"Success","data":{"task_id":"b1"}}"#
        ),
        Some("b1".into())
    );
    assert_eq!(
        submitted(
            ChannelProtocol::VideoB,
            br#"{"code":50411,"message":"risk","data":null}"#
        ),
        None
    );
    let p = progress(
        ChannelProtocol::VideoB,
        br#"{"code":10000,"data":{"status":"generating"}}"#,
    )
    .unwrap();
    assert_eq!(p.status, TaskStatus::InProgress);
    let p = progress(
        ChannelProtocol::VideoB,
        br#"{"code":10000,"data":{"status":"done","video_url":"https://cdn.example/v.mp4"}}"#,
    )
    .unwrap();
    assert_eq!(p.status, TaskStatus::Completed);
    assert_eq!(
        p.result.unwrap().upstream_url.as_deref(),
        Some("https://cdn.example/v.mp4")
    );
    let p = progress(
        ChannelProtocol::VideoB,
        br#"{"code":50412,"message":"Output Video Risk Not Pass"}"#,
    )
    .unwrap();
    assert_eq!(p.status, TaskStatus::Failed);
    let p = progress(
        ChannelProtocol::VideoB,
        br#"{"code":10000,"data":{"status":"done"}}"#,
    )
    .unwrap();
    assert_eq!(
        p.status,
        TaskStatus::Failed,
        "done without a video is a failure"
    );
}

#[test]
fn status_answers_of_each_shape() {
    let p = progress(
        ChannelProtocol::OpenAi,
        br#"{"id":"v","status":"completed","progress":100,"seconds":"8","size":"720x1280"}"#,
    )
    .unwrap();
    let r = p.result.unwrap();
    assert_eq!(
        (r.duration, r.width, r.height),
        (Some(8.0), Some(720), Some(1280))
    );
    let p = progress(
        ChannelProtocol::OpenAi,
        br#"{"id":"v","status":"failed","error":{"code":"moderation","message":"blocked"}}"#,
    )
    .unwrap();
    assert_eq!(p.status, TaskStatus::Failed);
    assert_eq!(p.failure.as_deref(), Some("blocked"));
    let p = progress(
        ChannelProtocol::VideoA,
        br#"{"task_id":"a","status":"completed","url":"http://h/f.mp4","format":"mp4",
             "metadata":{"duration":5.0,"fps":24,"width":1280,"height":720,"seed":42}}"#,
    )
    .unwrap();
    let r = p.result.unwrap();
    assert_eq!(r.fps, Some(24));
    assert_eq!(r.seed, Some(42));
    assert!(progress(ChannelProtocol::VideoA, br#"{"status":"weird"}"#).is_none());
    assert!(progress(ChannelProtocol::OpenAi, b"<html>").is_none());
}

#[test]
fn content_sources() {
    let mut t = task("");
    assert_eq!(
        content(ChannelProtocol::OpenAi, &t, Some("thumbnail")),
        Some(Source::Channel(
            "/v1/videos/up_1/content?variant=thumbnail".into()
        ))
    );
    assert_eq!(
        content(ChannelProtocol::OpenAi, &t, Some("a&b=c")),
        Some(Source::Channel("/v1/videos/up_1/content".into()))
    );
    assert_eq!(content(ChannelProtocol::VideoA, &t, None), None);
    t.result = Some(TaskResult {
        upstream_url: Some("https://cdn.example/v.mp4".into()),
        ..TaskResult::default()
    });
    assert_eq!(
        content(ChannelProtocol::VideoB, &t, None),
        Some(Source::Url("https://cdn.example/v.mp4".into()))
    );
}
