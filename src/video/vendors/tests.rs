use super::*;
use crate::video::job::Names;
use serde_json::json;

const OPENAI: ChannelProtocol = ChannelProtocol::OpenAi;
const KLING: ChannelProtocol = ChannelProtocol::VideoA;
const JIMENG: ChannelProtocol = ChannelProtocol::VideoB;

fn job(image: Option<Image>) -> VideoJob {
    VideoJob {
        model: "client-model".into(),
        prompt: "a red fox".into(),
        seconds: None,
        width: None,
        height: None,
        fps: Some(24),
        seed: Some(9),
        n: 1,
        image,
        extra: serde_json::Map::new(),
        names: Names::TASK,
    }
}

fn sized(seconds: Option<f64>, w: u32, h: u32) -> VideoJob {
    VideoJob {
        seconds,
        width: Some(w),
        height: Some(h),
        ..job(None)
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
        multiplier_ppm: None,
        polls: 0,
        result: None,
        error: None,
    }
}

fn param(r: Result<Plan, Unfit>) -> &'static str {
    r.expect_err("unfit").param
}

fn body(call: &Call) -> Value {
    serde_json::from_slice(&call.body).unwrap()
}

#[test]
fn each_vendor_takes_only_its_lengths() {
    let with = |s| VideoJob {
        seconds: Some(s),
        ..job(None)
    };
    for (p, ok, bad) in [
        (OPENAI, &[4.0, 8.0, 12.0][..], &[5.0, 10.0, 2.5][..]),
        (KLING, &[5.0, 10.0][..], &[4.0, 8.0, 12.0][..]),
        (JIMENG, &[5.0, 10.0][..], &[4.0, 6.0][..]),
    ] {
        for s in ok {
            assert_eq!(plan(p, &with(*s), 5.0).unwrap().seconds, *s, "{p:?} {s}");
        }
        for s in bad {
            let e = plan(p, &with(*s), 5.0).unwrap_err();
            assert_eq!(e.param, "duration", "{p:?} {s}");
            assert!(e.message.contains(" or "), "{}", e.message);
        }
    }
    // The client's own name for the field.
    let videos = VideoJob {
        seconds: Some(5.0),
        names: Names::VIDEOS,
        ..job(None)
    };
    assert_eq!(param(plan(OPENAI, &videos, 5.0)), "seconds");
}

#[test]
fn without_a_length_each_vendor_gets_the_nearest_it_takes() {
    assert_eq!(plan(OPENAI, &job(None), 5.0).unwrap().seconds, 4.0);
    assert_eq!(plan(OPENAI, &job(None), 10.0).unwrap().seconds, 8.0);
    assert_eq!(plan(OPENAI, &job(None), 2.0).unwrap().seconds, 4.0);
    assert_eq!(plan(KLING, &job(None), 5.0).unwrap().seconds, 5.0);
    assert_eq!(plan(KLING, &job(None), 3.0).unwrap().seconds, 5.0);
    assert_eq!(plan(JIMENG, &job(None), 60.0).unwrap().seconds, 10.0);
}

#[test]
fn frames_must_be_ones_the_vendor_makes() {
    assert_eq!(
        plan(OPENAI, &sized(None, 1280, 720), 5.0).unwrap().frame,
        Some("1280x720")
    );
    assert_eq!(param(plan(OPENAI, &sized(None, 1920, 1080), 5.0)), "width");
    assert_eq!(
        plan(KLING, &sized(None, 1920, 1080), 5.0).unwrap().frame,
        Some("16:9")
    );
    assert_eq!(
        plan(KLING, &sized(None, 854, 480), 5.0).unwrap().frame,
        Some("16:9"),
        "within 1 %"
    );
    assert_eq!(param(plan(KLING, &sized(None, 1024, 768), 5.0)), "width");
    assert_eq!(
        plan(JIMENG, &sized(None, 1024, 768), 5.0).unwrap().frame,
        Some("4:3")
    );
    assert_eq!(param(plan(JIMENG, &sized(None, 1000, 100), 5.0)), "width");
    let half = VideoJob {
        width: Some(1280),
        ..job(None)
    };
    for p in [OPENAI, KLING, JIMENG] {
        assert_eq!(param(plan(p, &half, 5.0)), "width", "{p:?}");
    }
}

#[test]
fn one_video_per_task_and_no_url_for_the_openai_file() {
    let two = VideoJob { n: 2, ..job(None) };
    for p in [OPENAI, KLING, JIMENG] {
        assert_eq!(param(plan(p, &two, 5.0)), "n", "{p:?}");
    }
    let url = job(Some(Image::Url("https://img.example/a.png".into())));
    assert_eq!(param(plan(OPENAI, &url, 5.0)), "image");
    assert!(plan(KLING, &url, 5.0).is_ok());
    assert!(plan(JIMENG, &url, 5.0).is_ok());
    assert!(plan(ChannelProtocol::Gemini, &url, 5.0).is_err());
}

#[test]
fn openai_submission_is_multipart_with_the_file() {
    let j = VideoJob {
        seconds: Some(8.0),
        ..sized(None, 1280, 720)
    };
    let j = VideoJob {
        image: Some(png()),
        ..j
    };
    let p = plan(OPENAI, &j, 5.0).unwrap();
    let (call, kind) = submit(OPENAI, &j, &p, "up-model").unwrap();
    assert_eq!(call.path, "/v1/videos");
    assert!(kind.is_empty());
    let boundary = crate::media::multipart::boundary(&call.content_type).unwrap();
    let form = crate::media::multipart::parse(&call.body, &boundary).unwrap();
    assert_eq!(form.field("model"), Some("up-model"));
    assert_eq!(form.field("seconds"), Some("8"));
    assert_eq!(form.field("size"), Some("1280x720"));
    let f = form.file("input_reference").unwrap();
    assert_eq!(&call.body[f.range.clone()], b"\x89PNG-bytes");
}

#[test]
fn kling_submission_follows_its_reference() {
    let mut j = sized(Some(10.0), 720, 1280);
    j.extra.insert(
        "metadata".into(),
        json!({"negative_prompt": "blurry", "callback_url": "https://elsewhere.example/"}),
    );
    j.extra.insert("mode".into(), json!("pro"));
    let p = plan(KLING, &j, 5.0).unwrap();
    let (call, kind) = submit(KLING, &j, &p, "kling-v1-6").unwrap();
    assert_eq!(
        (call.path.as_str(), kind.as_str()),
        ("/v1/videos/text2video", "text2video")
    );
    let b = body(&call);
    assert_eq!(
        b,
        json!({"model_name": "kling-v1-6", "prompt": "a red fox", "duration": "10",
               "aspect_ratio": "9:16", "negative_prompt": "blurry", "mode": "pro"})
    );
    let j = job(Some(png()));
    let p = plan(KLING, &j, 5.0).unwrap();
    let (call, kind) = submit(KLING, &j, &p, "m").unwrap();
    assert_eq!(
        (call.path.as_str(), kind.as_str()),
        ("/v1/videos/image2video", "image2video")
    );
    assert_eq!(body(&call)["image"], b64(b"\x89PNG-bytes"), "bare Base64");
    assert_eq!(body(&call)["duration"], "5");
    assert_eq!(
        poll(KLING, &task("image2video"), "m").path,
        "/v1/videos/image2video/up_1"
    );
}

#[test]
fn jimeng_submission_follows_its_reference() {
    let j = VideoJob {
        image: Some(Image::Url("https://img.example/a.png".into())),
        ..sized(Some(10.0), 1920, 1080)
    };
    let p = plan(JIMENG, &j, 5.0).unwrap();
    let (call, _) = submit(JIMENG, &j, &p, "jimeng_t2v_v30").unwrap();
    assert_eq!(
        call.path,
        "/?Action=CVSync2AsyncSubmitTask&Version=2022-08-31"
    );
    assert_eq!(
        body(&call),
        json!({"req_key": "jimeng_t2v_v30", "prompt": "a red fox", "frames": 241,
               "aspect_ratio": "16:9", "seed": 9, "image_urls": ["https://img.example/a.png"]})
    );
    let j = job(Some(png()));
    let (call, _) = submit(JIMENG, &j, &plan(JIMENG, &j, 5.0).unwrap(), "k").unwrap();
    assert_eq!(body(&call)["frames"], 121);
    assert_eq!(body(&call)["binary_data_base64"][0], b64(b"\x89PNG-bytes"));
    let p = poll(JIMENG, &task(""), "k");
    assert_eq!(p.path, "/?Action=CVSync2AsyncGetResult&Version=2022-08-31");
    assert_eq!(body(&p), json!({"req_key": "k", "task_id": "up_1"}));
}

#[test]
fn submission_answers() {
    let read = |p, v: Value| submitted(p, v.to_string().as_bytes());
    assert_eq!(
        read(OPENAI, json!({"id": "video_1", "status": "queued"})),
        Submitted::Task("video_1".into())
    );
    assert_eq!(
        read(
            KLING,
            json!({"code": 0, "message": "SUCCEED", "data": {"task_id": "86", "task_status": "submitted"}})
        ),
        Submitted::Task("86".into())
    );
    assert_eq!(
        read(KLING, json!({"task_id": "86", "status": "queued"})),
        Submitted::Unreadable,
        "not Kling's envelope"
    );
    assert_eq!(
        read(JIMENG, json!({"code": 10000, "data": {"task_id": "7"}})),
        Submitted::Task("7".into())
    );
    assert_eq!(
        read(
            JIMENG,
            json!({"code": 50412, "message": "Text Risk Not Pass"})
        ),
        Submitted::Refused(400)
    );
    assert_eq!(
        read(JIMENG, json!({"code": 50429})),
        Submitted::Refused(429)
    );
    assert_eq!(submitted(JIMENG, b"<html>"), Submitted::Unreadable);
}

fn state(p: Polled) -> TaskStatus {
    match p {
        Polled::Progress(p) => p.status,
        Polled::Failed(f) => panic!("failed: {f:?}"),
        Polled::Retry(why) => panic!("retry: {why}"),
    }
}

fn failure(p: Polled) -> String {
    match p {
        Polled::Failed(f) => f.message,
        other => panic!("not a failure: {other:?}"),
    }
}

fn retried(p: Polled) -> bool {
    matches!(p, Polled::Retry(_))
}

#[test]
fn jimeng_answers_every_terminal_state_and_retries_the_rest() {
    let read = |status, v: Value| read_poll(JIMENG, status, v.to_string().as_bytes());
    let ok = |d: Value| json!({"code": 10000, "message": "Success", "data": d});
    assert_eq!(
        state(read(200, ok(json!({"status": "in_queue"})))),
        TaskStatus::Queued
    );
    assert_eq!(
        state(read(200, ok(json!({"status": "generating"})))),
        TaskStatus::InProgress
    );
    match read(
        200,
        ok(json!({"status": "done", "video_url": "https://v.example/1.mp4"})),
    ) {
        Polled::Progress(p) => {
            assert_eq!(p.status, TaskStatus::Completed);
            assert_eq!(
                p.result.unwrap().upstream_url.as_deref(),
                Some("https://v.example/1.mp4")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        failure(read(200, ok(json!({"status": "done", "video_url": ""}))))
            .contains("without a video")
    );
    assert!(failure(read(200, ok(json!({"status": "not_found"})))).contains("no longer knows"));
    assert!(failure(read(200, ok(json!({"status": "expired"})))).contains("expired"));
    let m = failure(read(
        400,
        json!({"code": 50516, "message": "Post Video Risk Not Pass"}),
    ));
    assert!(
        m.contains("refused the generated video (Post Video Risk Not Pass)"),
        "{m}"
    );
    let m = failure(read(
        200,
        json!({"code": 50412, "message": "Text Risk Not Pass"}),
    ));
    assert!(m.contains("refused the prompt"), "{m}");
    let m = failure(read(
        400,
        json!({"code": 50207, "message": "bad things at 10.0.0.7"}),
    ));
    assert!(m.contains("code 50207") && !m.contains("10.0.0.7"), "{m}");
    assert!(retried(read(
        429,
        json!({"code": 50429, "message": "Request Has Reached API Limit"})
    )));
    assert!(retried(read(200, json!({"code": 50430}))));
    assert!(retried(read(
        500,
        json!({"code": 50500, "message": "Internal Error"})
    )));
    assert!(retried(read(502, json!({"code": 1}))));
    assert!(retried(read_poll(
        JIMENG,
        401,
        br#"{"ResponseMetadata": {"Error": {"Code": "SignatureDoesNotMatch"}}}"#
    )));
    assert!(retried(read_poll(
        JIMENG,
        504,
        b"<html>gateway timeout</html>"
    )));
    assert!(retried(read(200, ok(json!({"status": "rendering"})))));
}

#[test]
fn kling_answers() {
    let read = |status, v: Value| read_poll(KLING, status, v.to_string().as_bytes());
    let data = |d: Value| json!({"code": 0, "message": "SUCCEED", "request_id": "r", "data": d});
    assert_eq!(
        state(read(200, data(json!({"task_status": "submitted"})))),
        TaskStatus::Queued
    );
    assert_eq!(
        state(read(200, data(json!({"task_status": "processing"})))),
        TaskStatus::InProgress
    );
    let done = read(
        200,
        data(json!({"task_status": "succeed", "task_result": {"videos": [
            {"id": "v", "url": "https://cdn.example/v.mp4", "duration": "5.042"}]}})),
    );
    match done {
        Polled::Progress(p) => {
            let r = p.result.unwrap();
            assert_eq!(r.upstream_url.as_deref(), Some("https://cdn.example/v.mp4"));
            assert_eq!(r.duration, Some(5.042));
        }
        other => panic!("{other:?}"),
    }
    match read(
        200,
        data(json!({"task_status": "failed", "task_status_msg": "risk control on host-7"})),
    ) {
        Polled::Failed(f) => {
            assert!(!f.message.contains("host-7"), "{}", f.message);
            assert_eq!(f.detail, "risk control on host-7");
        }
        other => panic!("{other:?}"),
    }
    assert!(failure(read(404, json!({"code": 1203}))).contains("no longer knows"));
    for (status, code) in [(401, 1004), (429, 1302), (500, 5000), (200, 1200)] {
        assert!(
            retried(read(status, json!({"code": code}))),
            "{status} {code}"
        );
    }
    assert!(
        retried(read(200, json!({"task_id": "1", "status": "completed"}))),
        "our own shape is not Kling's"
    );
}

#[test]
fn openai_answers() {
    let read = |status, v: Value| read_poll(OPENAI, status, v.to_string().as_bytes());
    match read(
        200,
        json!({"id": "v", "status": "completed", "progress": 100, "seconds": "8", "size": "1280x720"}),
    ) {
        Polled::Progress(p) => {
            let r = p.result.unwrap();
            assert_eq!(
                (r.duration, r.width, r.height),
                (Some(8.0), Some(1280), Some(720))
            );
        }
        other => panic!("{other:?}"),
    }
    let m = failure(read(
        200,
        json!({"status": "failed", "error": {"code": "moderation_blocked", "message": "at gpu-7"}}),
    ));
    assert!(
        m.contains("(moderation_blocked)") && !m.contains("gpu-7"),
        "{m}"
    );
    assert!(failure(read(404, json!({"error": {"message": "no"}}))).contains("no longer knows"));
    assert!(retried(read(429, json!({"error": {}}))));
    assert!(retried(read(503, json!({"error": {}}))));
    assert_eq!(
        content(OPENAI, &task(""), Some("thumbnail")),
        Some(Source::Channel(
            "/v1/videos/up_1/content?variant=thumbnail".into()
        ))
    );
}
