//! `POST /v1/images/edits` in both its shapes (issue: video and image vendors as they
//! really are; spec 4.7, 8): the official SDKs' multipart upload to an OpenAI-style
//! channel, forwarded as multipart, and the native JSON shape to DashScope's
//! multimodal-generation API, answered in spec 4.7's shape. Both are checked by the
//! section 8 rules before anything is reserved, and billed per image.

use crate::gateway::{error_of, StoreKind, TestGateway};
use crate::media::{FAMILIES, PRICES};
use crate::mock_upstream::MockUpstream;
use crate::{dashscope, media, media_upstream};
use serde_json::{json, Value};

const BOUNDARY: &str = "----sdk-edit-boundary-42";

/// Text fields, file parts, and the parameter the 400 must name.
type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<(&'a str, Vec<u8>)>, &'a str);

/// A PNG header of the given size, then bytes a text-minded reader would mangle.
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&h.to_be_bytes());
    v.extend_from_slice(b"\x08\x06\0\0\0\r\n--not-the-boundary\r\n\0\xff");
    v
}

/// A multipart edit as the SDK sends it: text fields, then files (field name, bytes).
pub fn edit_form(fields: &[(&str, &str)], files: &[(&str, Vec<u8>)]) -> (String, Vec<u8>) {
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    for (i, (name, data)) in files.iter().enumerate() {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"in{i}.png\"\r\nContent-Type: image/png\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={BOUNDARY}"), body)
}

async fn post_form(gw: &TestGateway, key: &str, ct: String, body: Vec<u8>) -> (u16, String) {
    let r = gw
        .http
        .post(gw.url("/v1/images/edits"))
        .bearer_auth(key)
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The OpenAI-style media channel and a DashScope channel for the native shape.
async fn setup() -> (MockUpstream, MockUpstream, TestGateway, String, String) {
    let up = media_upstream::start().await;
    let ds = dashscope::start().await;
    let cfg = format!(
        "{FAMILIES}channels:\n{}\
         \x20 - {{ name: qwen, protocol: dashscope, base_url: \"{}\", api_key: {}, models: [qwen-image-edit, qwen-edit-alias], model_map: {{ qwen-edit-alias: qwen-image-edit-plus }} }}\n\
         prices:\n{PRICES}  qwen-edit-alias: {{ per_image: {{ \"*\": 0.03 }} }}\n",
        media::channel(&up.base_url()),
        ds.base_url(),
        dashscope::API_KEY,
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    (up, ds, gw, key, id)
}

// Row 4: `client.images.edit(...)` from the official SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_multipart_edit_is_forwarded_as_multipart_and_billed_per_image() {
    let (up, _ds, gw, key, id) = setup().await;
    let image = png(512, 512);
    let (ct, body) = edit_form(
        &[
            ("model", "dall-e-2"),
            ("prompt", "add a red hat"),
            ("n", "2"),
            ("size", "512x512"),
        ],
        &[("image", image.clone()), ("mask", png(512, 512))],
    );
    let (s, text) = post_form(&gw, &key, ct.clone(), body.clone()).await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 2, "{text}");
    let sent = up.last();
    assert_eq!(sent.path, "/v1/images/edits");
    assert_eq!(sent.header("content-type"), Some(ct.as_str()));
    assert!(sent.body == body, "the upload arrives byte-exact");
    assert_eq!(gw.used_micros(&id).await, 2 * 18_000, "two 512x512 images");

    // No model: the SDK's default is priced and written into the form.
    let (ct, body) = edit_form(&[("prompt", "add a scarf")], &[("image", png(256, 256))]);
    let (s, text) = post_form(&gw, &key, ct, body).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(
        media_upstream::form_field(&up.last().body, "model").as_deref(),
        Some("dall-e-2")
    );
    assert_eq!(gw.used_micros(&id).await, 2 * 18_000 + 20_000);

    // Several images (`image[]`) for the newest family, billed by the tokens reported.
    let (ct, body) = edit_form(
        &[
            ("model", "gpt-image-1"),
            ("prompt", "merge them"),
            ("quality", "high"),
        ],
        &[("image[]", png(64, 64)), ("image[]", png(32, 32))],
    );
    let (s, text) = post_form(&gw, &key, ct, body).await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v["data"][0]["b64_json"].is_string(), "{text}");
    // 50 input tokens at 5/M + 1050 output tokens at 40/M.
    assert_eq!(
        gw.used_micros(&id).await,
        2 * 18_000 + 20_000 + 250 + 42_000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_edits_break_no_rule_of_section_8_before_anything_is_reserved() {
    let (up, _ds, gw, key, id) = setup().await;
    let img = || vec![("image", png(64, 64))];
    let long = "x".repeat(1001);
    let cases: Vec<Case> = vec![
        (vec![("model", "dall-e-2")], img(), "prompt"),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![],
            "image",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", &long)],
            img(),
            "prompt",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p"), ("n", "11")],
            img(),
            "n",
        ),
        (
            vec![
                ("model", "dall-e-2"),
                ("prompt", "p"),
                ("size", "1792x1024"),
            ],
            img(),
            "size",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![("image", png(64, 32))],
            "image",
        ),
        (vec![("model", "dall-e-3"), ("prompt", "p")], img(), "model"),
        (
            vec![
                ("model", "gpt-image-1"),
                ("prompt", "p"),
                ("response_format", "url"),
            ],
            img(),
            "response_format",
        ),
        (
            vec![
                ("model", "gpt-image-1"),
                ("prompt", "p"),
                ("size", "512x512"),
            ],
            img(),
            "size",
        ),
    ];
    for (fields, files, param) in &cases {
        let (ct, body) = edit_form(fields, files);
        let (s, text) = post_form(&gw, &key, ct, body).await;
        assert_eq!(s, 400, "{fields:?}: {text}");
        assert_eq!(error_of(&text)["param"], *param, "{fields:?}: {text}");
    }
    assert!(up.requests().is_empty(), "the upstream saw nothing");
    assert_eq!(gw.used_micros(&id).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_shape_goes_to_dashscope_and_answers_in_spec_4_7() {
    let (up, ds, gw, key, id) = setup().await;
    let body = json!({"model": "qwen-edit-alias", "input": {"messages": [{"role": "user", "content": [
        {"image": "https://img.example/in.png"}, {"text": "make it blue"}]}]},
        "parameters": {"n": 2, "negative_prompt": "blurry", "watermark": false, "size": "1024x768"}});
    let (s, _, text) = gw.post("/v1/images/edits", &key, &body).await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v["created"].is_i64(), "{text}");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "{text}");
    assert!(
        data[0]["url"]
            .as_str()
            .unwrap()
            .contains("qwen-image-edit-plus"),
        "{text}"
    );
    let sent = ds.last();
    assert_eq!(sent.path, dashscope::PATH);
    let sent = sent.json();
    assert_eq!(
        sent["model"], "qwen-image-edit-plus",
        "the channel's model name"
    );
    assert_eq!(
        sent["input"], body["input"],
        "the native shape is forwarded"
    );
    assert_eq!(
        sent["parameters"]["size"], "1024*768",
        "as the API spells sizes"
    );
    assert_eq!(gw.used_micros(&id).await, 60_000, "two images at 0.03");
    assert!(
        up.requests().is_empty(),
        "not sent to the OpenAI-style channel"
    );

    // The native shape's own 400s, before DashScope sees anything.
    let calls = ds.requests().len();
    for bad in [
        json!({"model": "qwen-image-edit", "input": {"messages": [{"role": "user", "content": [{"text": "no image"}]}]}}),
        json!({"model": "qwen-image-edit"}),
        json!({"model": "qwen-image-edit", "input": {"messages": "x"}}),
        json!({"model": "qwen-image-edit", "input": {"messages": [{"content": [{"image": "https://x/y.png", "text": "t"}]}]}, "parameters": {"n": 0}}),
    ] {
        let (s, _, text) = gw.post("/v1/images/edits/", &key, &bad).await;
        assert_eq!(s, 400, "{bad}: {text}");
        assert!(error_of(&text)["param"].is_string(), "{text}");
    }
    assert_eq!(ds.requests().len(), calls);

    // A refusal by the vendor is sanitized and refunded.
    let refused = json!({"model": "qwen-image-edit", "input": {"messages": [{"role": "user", "content": [
        {"image": "https://img.example/in.png"}, {"text": dashscope::REFUSED}]}]}});
    let (s, _, text) = gw.post("/v1/images/edits", &key, &refused).await;
    assert_eq!(s, 400, "{text}");
    assert_eq!(error_of(&text)["type"], "upstream_error");
    assert!(!text.contains("ds-node"), "{text}");
    assert_eq!(gw.used_micros(&id).await, 60_000);
}

// Row 5: a native edit's answer (spec 4.7: `data` items with `url`, `b64_json` and
// `revised_prompt`, all strings). DashScope answers URLs and, for these models, no text:
// the other two members are empty strings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_edit_answers_every_member_of_spec_4_7() {
    let (_up, _ds, gw, key, _id) = setup().await;
    let body = json!({"model": "qwen-image-edit", "input": {"messages": [{"role": "user", "content": [
        {"image": "https://img.example/in.png"}, {"text": "make it blue"}]}]}});
    let (s, _, text) = gw.post("/v1/images/edits", &key, &body).await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let item = &v["data"][0];
    assert_eq!(
        item["url"], "https://dashscope-result.example/qwen-image-edit/0.png?Expires=1",
        "{text}"
    );
    assert_eq!(item["b64_json"], "", "{text}");
    assert_eq!(item["revised_prompt"], "", "{text}");
    assert_eq!(item.as_object().unwrap().len(), 3, "{text}");
}
