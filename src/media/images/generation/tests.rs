use super::super::testutil::families;
use super::*;
use serde_json::json;

fn check(mut body: Value) -> Result<ImageJob, Invalid> {
    check_generation(&mut body, &families())
}

/// The 400's param, asserting the message says something.
fn param_of(body: Value) -> String {
    let err = check(body).unwrap_err();
    assert!(err.message.ends_with('.'), "{}", err.message);
    err.param.unwrap_or_default()
}

fn message_of(body: Value) -> String {
    check(body).unwrap_err().message
}

fn body_with(model: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "prompt": "A cute baby sea otter"});
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    body
}

// --- realistic requests -------------------------------------------------------------

#[test]
fn smallest_family_request() {
    let job = check(json!({
        "model": "dall-e-2", "prompt": "A cute baby sea otter", "n": 2, "size": "512x512",
        "response_format": "b64_json", "user": "user-1234"
    }))
    .unwrap();
    assert_eq!(
        job,
        ImageJob {
            model: "dall-e-2".into(),
            family: Some(Family::Smallest),
            n: 2,
            size: "512x512".into(),
            quality: Some("standard".into()),
        }
    );
}

#[test]
fn middle_family_request() {
    let job = check(json!({
        "model": "dall-e-3", "prompt": "A white siamese cat", "n": 1, "size": "1792x1024",
        "quality": "hd", "style": "natural", "response_format": "url"
    }))
    .unwrap();
    assert_eq!(job.family, Some(Family::Middle));
    assert_eq!((job.n, job.size.as_str()), (1, "1792x1024"));
    assert_eq!(job.quality.as_deref(), Some("hd"));
}

#[test]
fn newest_family_request() {
    let job = check(json!({
        "model": "gpt-image-1", "prompt": "A children's book drawing of a veterinarian",
        "n": 4, "size": "1024x1536", "quality": "high", "background": "transparent",
        "moderation": "low", "output_format": "webp", "output_compression": 80,
        "user": "u"
    }))
    .unwrap();
    assert_eq!(
        job,
        ImageJob {
            model: "gpt-image-1".into(),
            family: Some(Family::Newest),
            n: 4,
            size: "1024x1536".into(),
            quality: Some("high".into()),
        }
    );
}

#[test]
fn family_defaults_for_n_size_and_quality() {
    let job = check(body_with("dall-e-2", json!({}))).unwrap();
    assert_eq!(
        (job.n, job.size.as_str(), job.quality.as_deref()),
        (1, "1024x1024", Some("standard"))
    );
    let job = check(body_with("dall-e-3", json!({}))).unwrap();
    assert_eq!(
        (job.n, job.size.as_str(), job.quality.as_deref()),
        (1, "1024x1024", Some("standard"))
    );
    let job = check(body_with("gpt-image-1-mini", json!({}))).unwrap();
    assert_eq!(
        (job.n, job.size.as_str(), job.quality.as_deref()),
        (1, "auto", Some("auto"))
    );
}

#[test]
fn nulls_are_absent_fields() {
    let job = check(body_with(
        "dall-e-2",
        json!({"n": null, "size": null, "quality": null, "style": null, "background": null}),
    ))
    .unwrap();
    assert_eq!((job.n, job.size.as_str()), (1, "1024x1024"));
}

#[test]
fn unknown_fields_pass() {
    assert!(check(body_with("dall-e-2", json!({"future_option": {"x": 1}}))).is_ok());
}

// --- the body and model -------------------------------------------------------------

#[test]
fn body_must_be_an_object() {
    let err = check(json!(["prompt"])).unwrap_err();
    assert_eq!(err.param, None);
}

#[test]
fn model_must_be_a_non_empty_string() {
    assert_eq!(param_of(json!({"model": 2, "prompt": "p"})), "model");
    assert_eq!(param_of(json!({"model": "", "prompt": "p"})), "model");
}

#[test]
fn missing_model_defaults_to_the_first_smallest_model() {
    let mut body = json!({"prompt": "A cute baby sea otter", "n": 3});
    let job = check_generation(&mut body, &families()).unwrap();
    assert_eq!(job.model, "dall-e-2");
    assert_eq!(job.family, Some(Family::Smallest));
    assert_eq!(body["model"], "dall-e-2");
}

#[test]
fn missing_model_with_a_newest_only_parameter_defaults_to_the_first_newest_model() {
    // Each newest-only parameter alone picks the newest family.
    for extra in [
        json!({"background": "opaque"}),
        json!({"moderation": "low"}),
        json!({"output_format": "webp"}),
        json!({"partial_images": 2}),
    ] {
        let mut body = json!({"prompt": "A cute baby sea otter"});
        if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra.clone()) {
            b.extend(extra);
        }
        let job = check_generation(&mut body, &families()).unwrap();
        assert_eq!(job.model, "gpt-image-1", "{extra}");
        assert_eq!(job.family, Some(Family::Newest));
        assert_eq!(body["model"], "gpt-image-1");
    }
    // `output_compression` alone picks the newest family too, whose png default then
    // refuses it (not the smallest family's newest-only refusal).
    let mut body = json!({"prompt": "p", "output_compression": 50});
    let err = check_generation(&mut body, &families()).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("output_compression"));
    assert!(err.message.contains("png"), "{}", err.message);
    assert_eq!(body["model"], "gpt-image-1");
}

#[test]
fn a_null_newest_only_parameter_does_not_pick_the_newest_model() {
    let mut body = json!({"prompt": "p", "background": null});
    assert_eq!(
        check_generation(&mut body, &families()).unwrap().model,
        "dall-e-2"
    );
}

#[test]
fn model_is_required_when_there_is_no_family_to_default_to() {
    let none = Families::default();
    let err = check_generation(&mut json!({"prompt": "p"}), &none).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("model"));
    // A newest-only parameter defaults to the newest family, which may be missing alone.
    let only_smallest = Families {
        smallest: vec!["dall-e-2".into()],
        ..Families::default()
    };
    let mut body = json!({"prompt": "p", "background": "opaque"});
    let err = check_generation(&mut body, &only_smallest).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("model"));
    assert!(body.get("model").is_none());
    let only_newest = Families {
        newest: vec!["gpt-image-1".into()],
        ..Families::default()
    };
    let err = check_generation(&mut json!({"prompt": "p"}), &only_newest).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("model"));
}

// --- prompt -------------------------------------------------------------------------

#[test]
fn prompt_is_a_required_non_empty_string() {
    assert_eq!(param_of(json!({"model": "dall-e-2"})), "prompt");
    assert_eq!(
        param_of(json!({"model": "dall-e-2", "prompt": null})),
        "prompt"
    );
    assert_eq!(
        param_of(json!({"model": "dall-e-2", "prompt": ""})),
        "prompt"
    );
    assert_eq!(
        param_of(json!({"model": "dall-e-2", "prompt": ["a"]})),
        "prompt"
    );
}

#[test]
fn prompt_limit_per_family_at_the_limit_and_one_over() {
    for (model, limit) in [
        ("dall-e-2", 1000),
        ("dall-e-3", 4000),
        ("gpt-image-1", 32000),
    ] {
        assert!(
            check(json!({"model": model, "prompt": "a".repeat(limit)})).is_ok(),
            "{model}"
        );
        let over = json!({"model": model, "prompt": "a".repeat(limit + 1)});
        assert_eq!(param_of(over.clone()), "prompt", "{model}");
        assert!(message_of(over).contains(&limit.to_string()));
    }
}

#[test]
fn prompt_length_counts_characters_not_bytes() {
    // 1000 three-byte characters: 3000 bytes, within the smallest family's 1000.
    assert!(check(json!({"model": "dall-e-2", "prompt": "海".repeat(1000)})).is_ok());
    assert_eq!(
        param_of(json!({"model": "dall-e-2", "prompt": "海".repeat(1001)})),
        "prompt"
    );
    // Emoji are one scalar value each (four bytes).
    assert!(check(json!({"model": "dall-e-2", "prompt": "🦦".repeat(1000)})).is_ok());
}

// --- n ------------------------------------------------------------------------------

#[test]
fn n_bounds() {
    for model in ["dall-e-2", "gpt-image-1"] {
        assert_eq!(check(body_with(model, json!({"n": 1}))).unwrap().n, 1);
        assert_eq!(check(body_with(model, json!({"n": 10}))).unwrap().n, 10);
        assert_eq!(param_of(body_with(model, json!({"n": 0}))), "n");
        assert_eq!(param_of(body_with(model, json!({"n": 11}))), "n");
        assert_eq!(param_of(body_with(model, json!({"n": -1}))), "n");
    }
}

#[test]
fn n_must_be_an_integer() {
    for n in [json!("2"), json!(2.0), json!(1.5), json!(true), json!([1])] {
        assert_eq!(param_of(body_with("dall-e-2", json!({"n": n}))), "n");
    }
}

#[test]
fn middle_family_makes_one_image() {
    assert_eq!(check(body_with("dall-e-3", json!({"n": 1}))).unwrap().n, 1);
    let body = body_with("dall-e-3", json!({"n": 2}));
    assert_eq!(param_of(body.clone()), "n");
    assert!(message_of(body).contains("dall-e-3"));
}

// --- size and quality ---------------------------------------------------------------

#[test]
fn each_family_accepts_its_sizes_only() {
    let all = [
        "256x256",
        "512x512",
        "1024x1024",
        "1792x1024",
        "1024x1792",
        "1536x1024",
        "1024x1536",
        "auto",
    ];
    let allowed: [(&str, &[&str]); 3] = [
        ("dall-e-2", &["256x256", "512x512", "1024x1024"]),
        ("dall-e-3", &["1024x1024", "1792x1024", "1024x1792"]),
        (
            "gpt-image-1",
            &["1024x1024", "1536x1024", "1024x1536", "auto"],
        ),
    ];
    for (model, sizes) in allowed {
        for size in all {
            let result = check(body_with(model, json!({"size": size})));
            if sizes.contains(&size) {
                assert_eq!(result.unwrap().size, size, "{model} {size}");
            } else {
                let err = result.unwrap_err();
                assert_eq!(err.param.as_deref(), Some("size"), "{model} {size}");
                for s in sizes {
                    assert!(err.message.contains(&format!("`{s}`")), "{}", err.message);
                }
            }
        }
    }
}

#[test]
fn size_must_be_a_string() {
    assert_eq!(
        param_of(body_with("dall-e-2", json!({"size": 1024}))),
        "size"
    );
    assert_eq!(
        param_of(body_with("dall-e-2", json!({"size": "1024*1024"}))),
        "size"
    );
}

#[test]
fn each_family_accepts_its_qualities_only() {
    let all = ["standard", "hd", "low", "medium", "high", "auto"];
    let allowed: [(&str, &[&str]); 3] = [
        ("dall-e-2", &["standard"]),
        ("dall-e-3", &["standard", "hd"]),
        ("gpt-image-1", &["low", "medium", "high", "auto"]),
    ];
    for (model, qualities) in allowed {
        for quality in all {
            let result = check(body_with(model, json!({"quality": quality})));
            if qualities.contains(&quality) {
                assert_eq!(result.unwrap().quality.as_deref(), Some(quality));
            } else {
                assert_eq!(
                    result.unwrap_err().param.as_deref(),
                    Some("quality"),
                    "{model} {quality}"
                );
            }
        }
    }
    assert_eq!(
        param_of(body_with("dall-e-3", json!({"quality": 1}))),
        "quality"
    );
}

// --- newest-only parameters ---------------------------------------------------------

#[test]
fn newest_only_parameters_are_refused_on_other_families() {
    for model in ["dall-e-2", "dall-e-3"] {
        for (key, value) in [
            ("background", json!("opaque")),
            ("moderation", json!("auto")),
            ("output_format", json!("png")),
            ("output_compression", json!(100)),
            ("partial_images", json!(1)),
        ] {
            let body = body_with(model, json!({ key: value }));
            assert_eq!(param_of(body.clone()), key, "{model}");
            let message = message_of(body);
            assert!(message.contains("`gpt-image-1`"), "{message}");
            assert!(message.contains(model), "{message}");
        }
    }
}

#[test]
fn background_and_moderation_values() {
    for b in ["transparent", "opaque", "auto"] {
        assert!(check(body_with("gpt-image-1", json!({"background": b}))).is_ok());
    }
    assert_eq!(
        param_of(body_with("gpt-image-1", json!({"background": "white"}))),
        "background"
    );
    assert_eq!(
        param_of(body_with("gpt-image-1", json!({"background": true}))),
        "background"
    );
    for m in ["low", "auto"] {
        assert!(check(body_with("gpt-image-1", json!({"moderation": m}))).is_ok());
    }
    assert_eq!(
        param_of(body_with("gpt-image-1", json!({"moderation": "high"}))),
        "moderation"
    );
}

#[test]
fn output_format_values() {
    for f in ["png", "webp", "jpeg"] {
        assert!(check(body_with("gpt-image-1", json!({"output_format": f}))).is_ok());
    }
    assert_eq!(
        param_of(body_with("gpt-image-1", json!({"output_format": "gif"}))),
        "output_format"
    );
    assert_eq!(
        param_of(body_with("gpt-image-1", json!({"output_format": "jpg"}))),
        "output_format"
    );
}

#[test]
fn transparent_background_needs_a_format_with_transparency() {
    let body = body_with(
        "gpt-image-1",
        json!({"background": "transparent", "output_format": "jpeg"}),
    );
    assert_eq!(param_of(body), "output_format");
    for f in ["png", "webp"] {
        let body = body_with(
            "gpt-image-1",
            json!({"background": "transparent", "output_format": f}),
        );
        assert!(check(body).is_ok(), "{f}");
    }
    // png is the default format, so transparent alone is fine; jpeg with opaque is too.
    assert!(check(body_with(
        "gpt-image-1",
        json!({"background": "transparent"})
    ))
    .is_ok());
    assert!(check(body_with(
        "gpt-image-1",
        json!({"background": "opaque", "output_format": "jpeg"})
    ))
    .is_ok());
}

#[test]
fn output_compression_bounds_and_format() {
    for c in [0, 100] {
        let body = body_with(
            "gpt-image-1",
            json!({"output_format": "jpeg", "output_compression": c}),
        );
        assert!(check(body).is_ok());
    }
    for c in [json!(-1), json!(101), json!("50"), json!(50.5)] {
        let body = body_with(
            "gpt-image-1",
            json!({"output_format": "webp", "output_compression": c}),
        );
        assert_eq!(param_of(body), "output_compression");
    }
    // Not with png, explicit or by default.
    let body = body_with(
        "gpt-image-1",
        json!({"output_format": "png", "output_compression": 50}),
    );
    assert_eq!(param_of(body), "output_compression");
    assert_eq!(
        param_of(body_with("gpt-image-1", json!({"output_compression": 50}))),
        "output_compression"
    );
}

#[test]
fn partial_images_bounds() {
    assert!(check(body_with("gpt-image-1", json!({"partial_images": 0}))).is_ok());
    assert!(check(body_with("gpt-image-1", json!({"partial_images": 3}))).is_ok());
    assert_eq!(
        param_of(body_with("gpt-image-1", json!({"partial_images": 4}))),
        "partial_images"
    );
}

// --- style, response_format, user, stream -------------------------------------------

#[test]
fn style_is_middle_only() {
    for s in ["vivid", "natural"] {
        assert!(check(body_with("dall-e-3", json!({"style": s}))).is_ok());
        assert_eq!(
            param_of(body_with("dall-e-2", json!({"style": s}))),
            "style"
        );
        assert_eq!(
            param_of(body_with("gpt-image-1", json!({"style": s}))),
            "style"
        );
    }
    assert_eq!(
        param_of(body_with("dall-e-3", json!({"style": "cartoon"}))),
        "style"
    );
    assert_eq!(
        param_of(body_with("dall-e-3", json!({"style": 1}))),
        "style"
    );
}

#[test]
fn response_format_is_not_for_the_newest_family() {
    for model in ["dall-e-2", "dall-e-3"] {
        for f in ["url", "b64_json"] {
            assert!(check(body_with(model, json!({"response_format": f}))).is_ok());
        }
        assert_eq!(
            param_of(body_with(model, json!({"response_format": "png"}))),
            "response_format"
        );
    }
    let body = body_with("gpt-image-1", json!({"response_format": "b64_json"}));
    assert_eq!(param_of(body.clone()), "response_format");
    assert!(message_of(body).contains("b64_json"));
}

#[test]
fn user_must_be_a_string() {
    assert_eq!(param_of(body_with("dall-e-2", json!({"user": 42}))), "user");
}

#[test]
fn streaming_is_refused() {
    for model in ["gpt-image-1", "my-image-model"] {
        assert_eq!(
            param_of(body_with(model, json!({"stream": true}))),
            "stream"
        );
        assert!(check(body_with(model, json!({"stream": false}))).is_ok());
        assert_eq!(
            param_of(body_with(model, json!({"stream": "true"}))),
            "stream"
        );
    }
}

// --- a model outside the families ---------------------------------------------------

#[test]
fn unknown_model_gets_the_generic_rules_only() {
    let job = check(json!({
        "model": "flux-pro", "prompt": "a".repeat(40000), "n": 10, "size": "2048x2048",
        "quality": "ultra", "style": "anime", "background": "transparent",
        "output_format": "jpeg", "response_format": "url"
    }))
    .unwrap();
    assert_eq!(
        job,
        ImageJob {
            model: "flux-pro".into(),
            family: None,
            n: 10,
            size: "2048x2048".into(),
            quality: Some("ultra".into()),
        }
    );
    let job = check(json!({"model": "flux-pro", "prompt": "p"})).unwrap();
    assert_eq!(
        (job.n, job.size.as_str(), job.quality),
        (1, "1024x1024", None)
    );
}

#[test]
fn unknown_model_still_checks_prompt_n_size_and_quality() {
    assert_eq!(param_of(json!({"model": "flux-pro"})), "prompt");
    assert_eq!(
        param_of(json!({"model": "flux-pro", "prompt": 3})),
        "prompt"
    );
    assert_eq!(param_of(body_with("flux-pro", json!({"n": 11}))), "n");
    assert_eq!(param_of(body_with("flux-pro", json!({"n": 0}))), "n");
    assert_eq!(param_of(body_with("flux-pro", json!({"n": "2"}))), "n");
    assert_eq!(
        param_of(body_with("flux-pro", json!({"size": 512}))),
        "size"
    );
    assert_eq!(
        param_of(body_with("flux-pro", json!({"quality": true}))),
        "quality"
    );
}
