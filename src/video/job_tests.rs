use super::*;
use serde_json::json;

const B: Bounds = Bounds { max_seconds: 60.0 };
/// A 1x1 PNG.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn param(r: Result<VideoJob, Invalid>) -> String {
    r.expect_err("a 400").param.unwrap_or_default()
}

#[test]
fn task_body_reads_every_field() {
    let j = from_task_json(
        &json!({"model": "m", "prompt": "a cat", "duration": 8, "width": 1280, "height": 720,
                "fps": 24, "seed": -3, "n": 2, "image": "https://img.example/c.png",
                "response_format": "url", "metadata": {"style": "anime"}}),
        false,
        B,
    )
    .unwrap();
    assert_eq!(j.seconds, Some(8.0));
    assert_eq!(j.size().as_deref(), Some("1280x720"));
    assert_eq!(j.fps, Some(24));
    assert_eq!(j.seed, Some(-3));
    assert_eq!(j.n, 2);
    assert_eq!(
        j.image,
        Some(Image::Url("https://img.example/c.png".into()))
    );
    assert_eq!(j.extra["metadata"]["style"], "anime");
    assert!(!j.extra.contains_key("model"));
}

#[test]
fn task_body_400s_name_the_parameter() {
    let base = json!({"model": "m", "prompt": "p"});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        from_task_json(&b, false, B)
    };
    assert_eq!(
        param(from_task_json(&json!({"prompt": "p"}), false, B)),
        "model"
    );
    assert_eq!(
        param(from_task_json(&json!({"model": "m"}), false, B)),
        "prompt"
    );
    assert_eq!(param(with("prompt", json!("  "))), "prompt");
    assert_eq!(param(with("duration", json!("abc"))), "duration");
    assert_eq!(param(with("duration", json!(-1))), "duration");
    assert_eq!(param(with("duration", json!(61))), "duration");
    assert_eq!(param(with("n", json!(0))), "n");
    assert_eq!(param(with("n", json!(5))), "n");
    assert_eq!(param(with("n", json!(1.5))), "n");
    assert_eq!(param(with("width", json!(0))), "width");
    assert_eq!(param(with("height", json!(-720))), "height");
    assert_eq!(param(with("fps", json!("24"))), "fps");
    assert_eq!(param(with("seed", json!("x"))), "seed");
    assert_eq!(param(with("image", json!("not an image!"))), "image");
    assert_eq!(param(with("image", json!("ftp://x/y.png"))), "image");
    assert_eq!(param(from_task_json(&base, true, B)), "image");
    assert!(
        with("duration", json!("8")).is_ok(),
        "a numeric string is a number"
    );
}

#[test]
fn images_as_base64_or_data_url_become_bytes() {
    for s in [
        PNG_B64.to_string(),
        format!("data:image/png;base64,{PNG_B64}"),
    ] {
        match image_text(&s, "image").unwrap() {
            Image::Bytes {
                data, content_type, ..
            } => {
                assert!(data.starts_with(b"\x89PNG"));
                assert_eq!(content_type, "image/png");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(image_text("data:image/png,notbase64", "image").is_err());
}

#[test]
fn videos_form_and_json() {
    let boundary = "XyZ";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsora-2\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\na dog\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"seconds\"\r\n\r\n4\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"size\"\r\n\r\n720x1280\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"input_reference\"; filename=\"r.png\"\r\nContent-Type: image/png\r\n\r\n\x01\x02\x03\r\n\
         --{boundary}--\r\n"
    );
    let raw = Bytes::from(body);
    let form = crate::media::multipart::parse(&raw, boundary).unwrap();
    let j = from_videos_form(&raw, &form, B).unwrap();
    assert_eq!(j.model, "sora-2");
    assert_eq!(j.seconds, Some(4.0));
    assert_eq!((j.width, j.height), (Some(720), Some(1280)));
    match j.image {
        Some(Image::Bytes { data, filename, .. }) => {
            assert_eq!(&data[..], b"\x01\x02\x03");
            assert_eq!(filename, "r.png");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        param(from_videos_json(
            &json!({"model": "m", "prompt": "p", "seconds": "abc"}),
            B
        )),
        "seconds"
    );
    assert_eq!(
        param(from_videos_json(
            &json!({"model": "m", "prompt": "p", "size": "big"}),
            B
        )),
        "size"
    );
}

#[test]
fn video_b_body() {
    let j = from_video_b(
        &json!({"req_key": "jimeng", "prompt": "p", "binary_data_base64": [PNG_B64]}),
        B,
    )
    .unwrap();
    assert_eq!(j.model, "jimeng");
    assert!(matches!(j.image, Some(Image::Bytes { .. })));
    assert_eq!(param(from_video_b(&json!({"prompt": "p"}), B)), "req_key");
    assert_eq!(
        param(from_video_b(
            &json!({"req_key": "k", "prompt": "p", "binary_data_base64": ["https://x.example/a.png"]}),
            B
        )),
        "binary_data_base64"
    );
    assert_eq!(
        param(from_video_b(
            &json!({"req_key": "k", "prompt": "p", "binary_data_base64": "abc"}),
            B
        )),
        "binary_data_base64"
    );
}
