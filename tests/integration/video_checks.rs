//! Video requests that are refused before anything is reserved or sent (spec 4.8–4.15,
//! 7): missing or malformed fields, and the `/video-b/` query parameters.

use crate::gateway::{error_of, StoreKind, TestGateway};
use crate::video::{config, png, post_json, submit, submit_raw, Client};
use crate::video_upstream::{b64_encode, VideoUpstream};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------
// Validation.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_400_before_any_upstream_call() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;
    let ok_image = format!("data:image/png;base64,{}", b64_encode(&png()));
    let a_t = Client::A("text2video");
    let a_i = Client::A("image2video");
    let cases: Vec<(Client, Value, &str)> = vec![
        (
            Client::Videos,
            json!({"prompt": "p", "seconds": "4"}),
            "missing model",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "seconds": "4"}),
            "missing prompt",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "abc"}),
            "seconds abc",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "61"}),
            "seconds above max",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "0"}),
            "seconds 0",
        ),
        (a_t, json!({"prompt": "p"}), "missing model"),
        (a_t, json!({"model": "kling-v1"}), "missing prompt"),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "duration": "abc"}),
            "duration abc",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "duration": 61}),
            "duration above max",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "n": 0}),
            "n 0",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "n": 5}),
            "n 5",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "width": 0}),
            "width 0",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "height": -720}),
            "height negative",
        ),
        (
            a_t,
            json!({"model": "kling-v1", "prompt": "p", "fps": 0}),
            "fps 0",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p"}),
            "image2video without image",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p", "image": "not an image!"}),
            "image neither URL nor Base64",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p", "image": "ftp://img.example/in.png"}),
            "image ftp URL",
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "p", "image": "data:image/png;base64,@@@@"}),
            "bad data URL",
        ),
        (Client::Generations, json!({"prompt": "p"}), "missing model"),
        (
            Client::Generations,
            json!({"model": "kling-v1"}),
            "missing prompt",
        ),
        (
            Client::Generations,
            json!({"model": "kling-v1", "prompt": "p", "n": 5}),
            "n 5",
        ),
        (
            Client::Generations,
            json!({"model": "kling-v1", "prompt": "p", "duration": "abc"}),
            "duration abc",
        ),
        (
            Client::Generations,
            json!({"model": "kling-v1", "prompt": "p", "image": "%%%"}),
            "bad image",
        ),
        (Client::B, json!({"prompt": "p"}), "missing req_key"),
        (
            Client::B,
            json!({"req_key": "jimeng-v30"}),
            "missing prompt",
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "p", "duration": "abc"}),
            "duration abc",
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "p", "binary_data_base64": ["***"]}),
            "bad Base64",
        ),
        // A good image in the same shapes is accepted (below): the rejections are about the image.
    ];
    for (client, body, what) in &cases {
        let (s, text) = submit_raw(&gw, &key, *client, body).await;
        assert_eq!(s, 400, "{what}: {client:?} {body}: {text}");
        error_of(&text);
    }
    // video-b: the Action and Version query parameters.
    let body = json!({"req_key": "jimeng-v30", "prompt": "p"});
    for path in [
        "/video-b/?Version=2022-08-31",
        "/video-b/?Action=&Version=2022-08-31",
        "/video-b/?Action=DeleteTask&Version=2022-08-31",
        "/video-b/?Action=CVSync2AsyncSubmitTask",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=2022-8-31",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=latest",
        "/video-b/?Action=CVSync2AsyncSubmitTask&Version=2022-08-31x",
        "/video-b/?Action=CVSync2AsyncGetResult&Version=22-08-31",
        "/video-b/",
    ] {
        let (s, text) = post_json(&gw, path, &key, &body).await;
        assert_eq!(s, 400, "{path}: {text}");
        error_of(&text);
    }
    assert!(
        up.requests().is_empty(),
        "no rejected request reached the upstream: {:?}",
        up.requests().iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert_eq!(gw.used_micros(&kid).await, 0);

    // The same shapes with valid values pass validation.
    for (client, body) in [
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "ok data url", "image": ok_image}),
        ),
        (
            a_i,
            json!({"model": "kling-v1", "prompt": "ok plain", "image": b64_encode(&png()), "n": 1}),
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "ok b", "duration": "5"}),
        ),
    ] {
        submit(&gw, &key, client, body).await;
    }
    assert!(
        up.submits().len() >= 3,
        "the valid requests reached the upstream"
    );
}
