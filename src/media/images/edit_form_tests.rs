use super::super::testutil::families;
use super::*;

const B: &str = "----sdk-boundary-0123";

/// A PNG header of the given size (enough for the checks: signature and IHDR).
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut v = PNG_SIGNATURE.to_vec();
    v.extend_from_slice(&[0, 0, 0, 13]);
    v.extend_from_slice(b"IHDR");
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&h.to_be_bytes());
    v.extend_from_slice(b"\x08\x06\0\0\0\r\n--not-a-boundary\r\n\xff\x00");
    v
}

/// A form as the SDK writes it: text fields, then files (name, filename, bytes).
fn form(fields: &[(&str, &str)], files: &[(&str, Vec<u8>)]) -> Bytes {
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{B}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    for (name, data) in files {
        body.extend_from_slice(
            format!(
                "--{B}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"f.png\"\r\nContent-Type: image/png\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{B}--\r\n").as_bytes());
    Bytes::from(body)
}

fn check(fields: &[(&str, &str)], files: &[(&str, Vec<u8>)]) -> Result<FormEdit, Invalid> {
    check_edit_form(form(fields, files), B, &families())
}

fn param(fields: &[(&str, &str)], files: &[(&str, Vec<u8>)]) -> String {
    let e = check(fields, files).expect_err("a 400");
    assert!(e.message.ends_with('.'), "{}", e.message);
    e.param.unwrap_or_default()
}

#[test]
fn the_sdk_shape_for_the_smallest_family() {
    let e = check(
        &[
            ("model", "dall-e-2"),
            ("prompt", "a hat"),
            ("n", "2"),
            ("size", "512x512"),
            ("response_format", "b64_json"),
        ],
        &[("image", png(512, 512)), ("mask", png(512, 512))],
    )
    .unwrap();
    assert_eq!(
        e.job,
        ImageJob {
            model: "dall-e-2".into(),
            family: Some(Family::Smallest),
            n: 2,
            size: "512x512".into(),
            quality: Some("standard".into()),
        }
    );
    assert_eq!(
        e.body,
        form(
            &[
                ("model", "dall-e-2"),
                ("prompt", "a hat"),
                ("n", "2"),
                ("size", "512x512"),
                ("response_format", "b64_json")
            ],
            &[("image", png(512, 512)), ("mask", png(512, 512))],
        ),
        "forwarded as it came"
    );
}

#[test]
fn several_images_for_the_newest_family() {
    let e = check(
        &[
            ("model", "gpt-image-1"),
            ("prompt", "merge"),
            ("quality", "high"),
            ("size", "1536x1024"),
            ("input_fidelity", "high"),
        ],
        &[
            ("image[]", png(64, 32)),
            ("image[]", b"\xFF\xD8\xFFjpeg".to_vec()),
        ],
    )
    .unwrap();
    assert_eq!(
        (e.job.n, e.job.size.as_str(), e.job.quality.as_deref()),
        (1, "1536x1024", Some("high"))
    );
}

#[test]
fn a_missing_model_is_chosen_and_written_into_the_form() {
    let e = check(&[("prompt", "a hat")], &[("image", png(8, 8))]).unwrap();
    assert_eq!(e.job.model, "dall-e-2");
    assert_eq!(e.form.field("model"), Some("dall-e-2"));
    assert_eq!(e.form.field("prompt"), Some("a hat"));
    let f = e.form.file("image").unwrap();
    assert_eq!(
        &e.body[f.range.clone()],
        &png(8, 8)[..],
        "the file's bytes unchanged"
    );
    // A GPT-image-only option picks the newest family.
    let e = check(
        &[("prompt", "p"), ("background", "transparent")],
        &[("image", png(8, 8))],
    )
    .unwrap();
    assert_eq!(e.job.model, "gpt-image-1");
    assert_eq!(e.form.field("model"), Some("gpt-image-1"));
}

#[test]
fn section_8_and_the_reference_refuse_with_the_field_named() {
    let img = || vec![("image", png(16, 16))];
    for (fields, files, p) in [
        (vec![("model", "dall-e-2")], img(), "prompt"),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![],
            "image",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![("image", vec![])],
            "image",
        ),
        (vec![("model", "dall-e-3"), ("prompt", "p")], img(), "model"),
        (
            vec![("model", "dall-e-2"), ("prompt", "p"), ("n", "11")],
            img(),
            "n",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p"), ("n", "two")],
            img(),
            "n",
        ),
        (
            vec![
                ("model", "dall-e-2"),
                ("prompt", "p"),
                ("size", "1536x1024"),
            ],
            img(),
            "size",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p"), ("quality", "high")],
            img(),
            "quality",
        ),
        (
            vec![
                ("model", "dall-e-2"),
                ("prompt", "p"),
                ("background", "opaque"),
            ],
            img(),
            "background",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![("image", png(16, 8))],
            "image",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![("image", b"GIF89a".to_vec())],
            "image",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![("image", png(8, 8)), ("image", png(8, 8))],
            "image",
        ),
        (
            vec![("model", "dall-e-2"), ("prompt", "p")],
            vec![("image", png(16, 16)), ("mask", png(8, 8))],
            "mask",
        ),
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
                ("size", "256x256"),
            ],
            img(),
            "size",
        ),
        (
            vec![
                ("model", "gpt-image-1"),
                ("prompt", "p"),
                ("output_compression", "50"),
            ],
            img(),
            "output_compression",
        ),
        (
            vec![
                ("model", "gpt-image-1"),
                ("prompt", "p"),
                ("stream", "true"),
            ],
            img(),
            "stream",
        ),
        (
            vec![("model", "gpt-image-1"), ("prompt", "p")],
            vec![("image", b"text".to_vec())],
            "image",
        ),
    ] {
        assert_eq!(param(&fields, &files), p, "{fields:?}");
    }
    let long = "x".repeat(1001);
    assert_eq!(
        param(&[("model", "dall-e-2"), ("prompt", &long)], &img()),
        "prompt"
    );
    assert!(check(&[("model", "gpt-image-1"), ("prompt", &long)], &img()).is_ok());
    let many: Vec<_> = (0..17).map(|_| ("image[]", png(8, 8))).collect();
    assert_eq!(
        param(&[("model", "gpt-image-1"), ("prompt", "p")], &many),
        "image"
    );
}

#[test]
fn a_model_outside_the_families_passes_with_generic_checks() {
    let e = check(
        &[("model", "flux-kontext"), ("prompt", "p"), ("n", "3")],
        &[("image", b"anything".to_vec())],
    )
    .unwrap();
    assert_eq!(
        (e.job.family, e.job.n, e.job.size.as_str()),
        (None, 3, "1024x1024")
    );
}

#[test]
fn a_broken_form_is_a_400_not_a_panic() {
    let e = check_edit_form(Bytes::from_static(b"--x\r\nnot a part"), "x", &families());
    assert!(e.is_err());
    let mut cut = form(&[("prompt", "p")], &[("image", png(8, 8))]).to_vec();
    cut.truncate(cut.len() / 2);
    assert!(check_edit_form(Bytes::from(cut), B, &families()).is_err());
}
