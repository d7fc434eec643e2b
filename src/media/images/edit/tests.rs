use super::super::testutil::families;
use super::*;
use serde_json::json;

const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A realistic native edit request: one user message with an image and an instruction.
fn edit(model: &str, parameters: Value) -> Value {
    json!({
        "model": model,
        "input": {"messages": [{
            "role": "user",
            "content": [
                {"image": "https://help-static-aliyun-doc.aliyuncs.com/file-manage-files/zh-CN/20250925/fpakfo/image36.webp"},
                {"text": "Make the girl in the picture wear a red hat and keep everything else unchanged."}
            ]
        }]},
        "parameters": parameters
    })
}

fn with_content(content: Value) -> Value {
    json!({"model": "qwen-image-edit", "input": {"messages": [{"role": "user", "content": content}]}})
}

fn param_of(body: Value) -> String {
    let err = check_edit(&body, &families()).unwrap_err();
    assert!(err.message.ends_with('.'), "{}", err.message);
    err.param.unwrap_or_default()
}

fn job(body: Value) -> ImageJob {
    check_edit(&body, &families()).unwrap()
}

#[test]
fn realistic_native_edit() {
    let body = edit(
        "qwen-image-edit",
        json!({"n": 2, "negative_prompt": "low quality, blurry", "prompt_extend": true,
               "watermark": false, "size": "1024*1536", "seed": 1234}),
    );
    assert_eq!(
        job(body),
        ImageJob {
            model: "qwen-image-edit".into(),
            family: None,
            n: 2,
            size: "1024x1536".into(),
            quality: None,
        }
    );
}

#[test]
fn defaults_without_parameters() {
    let mut body = edit("qwen-image-edit", json!({}));
    let j = job(body.clone());
    assert_eq!((j.n, j.size.as_str(), j.quality), (1, "1024x1024", None));
    body.as_object_mut().map(|b| b.remove("parameters"));
    assert_eq!(job(body.clone()).n, 1);
    body["parameters"] = Value::Null;
    assert_eq!(job(body).size, "1024x1024");
}

#[test]
fn family_is_reported_for_a_configured_model() {
    assert_eq!(
        job(edit("gpt-image-1", json!({}))).family,
        Some(Family::Newest)
    );
    assert_eq!(
        job(edit("dall-e-2", json!({}))).family,
        Some(Family::Smallest)
    );
}

#[test]
fn several_messages_and_images() {
    let body = json!({
        "model": "qwen-image-edit-plus",
        "input": {"messages": [
            {"role": "system"},
            {"role": "user", "content": [
                {"image": format!("data:image/png;base64,{PNG_B64}")},
                {"image": PNG_B64},
                {"image": "oss://dashscope-instant/abc/2025-09-25/cat.png", "text": "Put the cat from image 3 on the sofa of image 1."}
            ]}
        ]}
    });
    assert_eq!(job(body).n, 1);
}

// --- required shape -----------------------------------------------------------------

#[test]
fn body_must_be_an_object() {
    assert_eq!(
        check_edit(&json!("edit"), &families()).unwrap_err().param,
        None
    );
}

#[test]
fn model_is_required() {
    let mut body = edit("m", json!({}));
    body.as_object_mut().map(|b| b.remove("model"));
    assert_eq!(param_of(body.clone()), "model");
    body["model"] = json!(7);
    assert_eq!(param_of(body.clone()), "model");
    body["model"] = json!("");
    assert_eq!(param_of(body), "model");
}

#[test]
fn input_is_a_required_object() {
    assert_eq!(param_of(json!({"model": "m"})), "input");
    assert_eq!(
        param_of(json!({"model": "m", "input": "make it red"})),
        "input"
    );
    assert_eq!(param_of(json!({"model": "m", "input": []})), "input");
}

#[test]
fn messages_is_a_required_non_empty_array_of_objects() {
    assert_eq!(
        param_of(json!({"model": "m", "input": {}})),
        "input.messages"
    );
    assert_eq!(
        param_of(json!({"model": "m", "input": {"messages": {}}})),
        "input.messages"
    );
    assert_eq!(
        param_of(json!({"model": "m", "input": {"messages": []}})),
        "input.messages"
    );
    assert_eq!(
        param_of(json!({"model": "m", "input": {"messages": ["hi"]}})),
        "input.messages[0]"
    );
}

#[test]
fn role_and_content_types() {
    let mut body = edit("m", json!({}));
    body["input"]["messages"][0]["role"] = json!(1);
    assert_eq!(param_of(body.clone()), "input.messages[0].role");
    body["input"]["messages"][0]["role"] = json!("user");
    body["input"]["messages"][0]["content"] = json!("make it red");
    assert_eq!(param_of(body), "input.messages[0].content");
}

#[test]
fn content_parts_are_objects_with_an_image_or_a_text() {
    assert_eq!(
        param_of(with_content(json!(["x"]))),
        "input.messages[0].content[0]"
    );
    let body = with_content(json!([{"image": PNG_B64}, {"type": "text"}]));
    assert_eq!(param_of(body), "input.messages[0].content[1]");
    let body = with_content(json!([{"image": 5}, {"text": "t"}]));
    assert_eq!(param_of(body), "input.messages[0].content[0].image");
    let body = with_content(json!([{"image": PNG_B64}, {"text": ["t"]}]));
    assert_eq!(param_of(body), "input.messages[0].content[1].text");
}

#[test]
fn an_edit_needs_an_image() {
    let body = with_content(json!([{"text": "make it red"}]));
    let err = check_edit(&body, &families()).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("input.messages"));
    assert!(err.message.contains("image"), "{}", err.message);
    // Messages without content carry no image either.
    let body = json!({"model": "m", "input": {"messages": [{"role": "user"}]}});
    assert_eq!(param_of(body), "input.messages");
}

#[test]
fn an_edit_needs_a_text() {
    let body = with_content(json!([{"image": PNG_B64}]));
    let err = check_edit(&body, &families()).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("input.messages"));
    assert!(err.message.contains("text"), "{}", err.message);
    let body = with_content(json!([{"image": PNG_B64, "text": "  "}]));
    assert_eq!(param_of(body), "input.messages");
}

#[test]
fn image_forms() {
    for image in [
        "https://example.com/a.png".to_string(),
        "HTTP://example.com/a.png".to_string(),
        format!("data:image/jpeg;base64,{PNG_B64}"),
        format!("DATA:image/PNG;BASE64,{PNG_B64}"),
        PNG_B64.to_string(),
        "iVBORw0KGgo-_".to_string(),
    ] {
        let body = with_content(json!([{"image": image}, {"text": "t"}]));
        assert!(check_edit(&body, &families()).is_ok(), "{image}");
    }
    for image in [
        "",
        "ftp://example.com/a.png",
        "https://",
        "data:image/png;base64,",
        "data:text/plain;base64,aGVsbG8=",
        "data:image/png,rawbytes",
        "data:image/png;base64,not base64!",
        "a picture of a cat",
        "abc===",
        "/tmp/cat.png",
    ] {
        let body = with_content(json!([{"text": "t"}, {"image": image}]));
        assert_eq!(
            param_of(body),
            "input.messages[0].content[1].image",
            "{image}"
        );
    }
}

// --- parameters ---------------------------------------------------------------------

#[test]
fn parameters_must_be_an_object() {
    assert_eq!(param_of(edit("m", json!([1]))), "parameters");
    assert_eq!(param_of(edit("m", json!("n=2"))), "parameters");
}

#[test]
fn n_bounds_and_type() {
    assert_eq!(job(edit("m", json!({"n": 1}))).n, 1);
    assert_eq!(job(edit("m", json!({"n": 10}))).n, 10);
    for n in [json!(0), json!(11), json!("2"), json!(2.5)] {
        assert_eq!(param_of(edit("m", json!({ "n": n }))), "parameters.n");
    }
}

#[test]
fn middle_family_edits_make_one_image() {
    assert_eq!(job(edit("dall-e-3", json!({"n": 1}))).n, 1);
    assert_eq!(param_of(edit("dall-e-3", json!({"n": 2}))), "parameters.n");
    assert_eq!(job(edit("gpt-image-1", json!({"n": 2}))).n, 2);
}

#[test]
fn negative_prompt_is_a_string_of_at_most_500_characters() {
    assert!(check_edit(
        &edit("m", json!({"negative_prompt": "x".repeat(500)})),
        &families()
    )
    .is_ok());
    // Characters, not bytes.
    assert!(check_edit(
        &edit("m", json!({"negative_prompt": "模".repeat(500)})),
        &families()
    )
    .is_ok());
    let over = edit("m", json!({"negative_prompt": "x".repeat(501)}));
    assert_eq!(param_of(over), "parameters.negative_prompt");
    assert_eq!(
        param_of(edit("m", json!({"negative_prompt": 1}))),
        "parameters.negative_prompt"
    );
}

#[test]
fn boolean_parameters() {
    assert!(check_edit(
        &edit("m", json!({"prompt_extend": false, "watermark": true})),
        &families()
    )
    .is_ok());
    assert_eq!(
        param_of(edit("m", json!({"prompt_extend": "true"}))),
        "parameters.prompt_extend"
    );
    assert_eq!(
        param_of(edit("m", json!({"watermark": 0}))),
        "parameters.watermark"
    );
}

#[test]
fn seed_is_a_non_negative_32_bit_integer() {
    assert!(check_edit(&edit("m", json!({"seed": 0})), &families()).is_ok());
    assert!(check_edit(&edit("m", json!({"seed": 2147483647})), &families()).is_ok());
    for seed in [json!(-1), json!(2147483648u64), json!("42"), json!(4.2)] {
        assert_eq!(
            param_of(edit("m", json!({ "seed": seed }))),
            "parameters.seed"
        );
    }
}

#[test]
fn sizes_in_either_spelling_are_normalised() {
    for (size, normal) in [
        ("1024*1024", "1024x1024"),
        ("1024x1024", "1024x1024"),
        ("256*4096", "256x4096"),
        ("1328x1328", "1328x1328"),
    ] {
        assert_eq!(job(edit("m", json!({ "size": size }))).size, normal);
    }
    for size in [
        json!("255*1024"),
        json!("1024*4097"),
        json!("1024"),
        json!("1024x"),
        json!("1024X1024"),
        json!("1024*1024*2"),
        json!("+1024*1024"),
        json!(" 1024*1024"),
        json!("auto"),
        json!(1024),
    ] {
        assert_eq!(
            param_of(edit("m", json!({ "size": size }))),
            "parameters.size",
            "{size}"
        );
    }
}
