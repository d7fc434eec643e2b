use super::*;

const HTTPX_BOUNDARY: &str = "3d6b6a416f9b5d1f0e7c2a84b6e1f0c9";

/// A body laid out as httpx (the openai Python SDK's client) writes it: data fields
/// first, then the file with its filename and guessed content type.
fn sdk_body(audio: &[u8]) -> Vec<u8> {
    let b = HTTPX_BOUNDARY;
    let mut body = Vec::new();
    for (name, value) in [
        ("model", "whisper-1"),
        ("response_format", "verbose_json"),
        ("timestamp_granularities[]", "word"),
        ("timestamp_granularities[]", "segment"),
    ] {
        body.extend_from_slice(
            format!("--{b}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"file\"; \
             filename=\"speech.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(audio);
    body.extend_from_slice(format!("\r\n--{b}--\r\n").as_bytes());
    body
}

/// MP3-looking bytes with line breaks, dashes and a near-boundary in them.
fn audio_bytes() -> Vec<u8> {
    let mut audio = vec![0xFF, 0xFB, 0x90, 0x44, 0x00, b'\r', b'\n', b'-', b'-'];
    audio.extend_from_slice(format!("\r\n--{HTTPX_BOUNDARY}x not the end").as_bytes());
    audio.extend_from_slice(&[0x00, 0xC3, 0x28, b'\r']);
    audio
}

fn form(body: &[u8], boundary: &str) -> Form {
    match parse(body, boundary) {
        Ok(form) => form,
        Err(e) => panic!("parse failed: {e:?}"),
    }
}

fn error(body: &[u8], boundary: &str) -> Invalid {
    match parse(body, boundary) {
        Ok(form) => panic!("parsed a malformed body: {form:?}"),
        Err(e) => e,
    }
}

fn crlf(text: &str) -> Vec<u8> {
    text.replace('\n', "\r\n").into_bytes()
}

#[test]
fn boundary_of_content_types() {
    let b = |ct| boundary(ct);
    assert_eq!(
        b("multipart/form-data; boundary=abc123").as_deref(),
        Some("abc123")
    );
    assert_eq!(
        b("multipart/form-data; boundary=\"a b:c\"").as_deref(),
        Some("a b:c")
    );
    assert_eq!(
        b("Multipart/Form-Data;BOUNDARY=xyz").as_deref(),
        Some("xyz")
    );
    assert_eq!(
        b("multipart/form-data; charset=utf-8; Boundary=\"q\\\"x\"").as_deref(),
        Some("q\"x")
    );
    assert_eq!(
        b(" multipart/form-data ; boundary=z ; x=y").as_deref(),
        Some("z")
    );
    assert_eq!(b("multipart/form-data"), None);
    assert_eq!(b("multipart/form-data; boundary="), None);
    assert_eq!(b("multipart/form-data; boundary=\"\""), None);
    assert_eq!(b("multipart/form-data; boundary=\"open"), None);
    assert_eq!(b("multipart/mixed; boundary=abc"), None);
    assert_eq!(b("application/json"), None);
    assert_eq!(b("application/x-www-form-urlencoded; boundary=abc"), None);
}

#[test]
fn rfc_7578_and_html_examples() {
    // RFC 7578 4.6 (field with a charset), and the RFC 2388 / HTML 4 upload example.
    let body = crlf(
        "--AaB03x\n\
         content-disposition: form-data; name=\"field1\"\n\
         content-type: text/plain;charset=UTF-8\n\
         content-transfer-encoding: quoted-printable\n\
         \n\
         Joe owes =E2=82=AC100.\n\
         --AaB03x\n\
         Content-Disposition: form-data; name=\"submit-name\"\n\
         \n\
         Larry\n\
         --AaB03x\n\
         Content-Disposition: form-data; name=\"files\"; filename=\"file1.txt\"\n\
         Content-Type: text/plain\n\
         \n\
         ... contents of file1.txt ...\n\
         --AaB03x--\n",
    );
    let f = form(&body, "AaB03x");
    assert_eq!(f.field("field1"), Some("Joe owes =E2=82=AC100."));
    assert_eq!(f.field("submit-name"), Some("Larry"));
    let file = f
        .file("files")
        .cloned()
        .unwrap_or_else(|| panic!("no file"));
    assert_eq!(file.filename.as_deref(), Some("file1.txt"));
    assert_eq!(file.content_type.as_deref(), Some("text/plain"));
    assert_eq!(&body[file.range], b"... contents of file1.txt ...");
    let larry = &f.fields[1];
    assert_eq!(&body[larry.range.clone()], b"Larry");
}

#[test]
fn sdk_body_with_binary_file() {
    let audio = audio_bytes();
    let body = sdk_body(&audio);
    let f = form(&body, HTTPX_BOUNDARY);
    assert_eq!(f.field("model"), Some("whisper-1"));
    assert_eq!(f.field("response_format"), Some("verbose_json"));
    let granularities: Vec<_> = f.field_values("timestamp_granularities[]").collect();
    assert_eq!(granularities, ["word", "segment"]);
    assert_eq!(f.files.len(), 1);
    let file = &f.files[0];
    assert_eq!(file.name, "file");
    assert_eq!(file.filename.as_deref(), Some("speech.mp3"));
    assert_eq!(file.content_type.as_deref(), Some("audio/mpeg"));
    assert_eq!(&body[file.range.clone()], &audio[..]);
    assert_eq!(f.file("model"), None);
    assert_eq!(f.field("file"), None);
}

#[test]
fn lf_only_preamble_padding_and_epilogue() {
    let body = b"This is the preamble.\n--xyz  \t\n\
        Content-Disposition: form-data; name=\"model\"\n\n\
        whisper-1\n--xyz\n\
        content-disposition: form-data; name=\"file\"; filename=\"a.wav\"\n\n\
        RIFF\r\n--xyz--\nepilogue --xyz\n";
    let f = form(body, "xyz");
    assert_eq!(f.field("model"), Some("whisper-1"));
    let file = f.file("file").cloned().unwrap_or_else(|| panic!("no file"));
    // The CR before the LF belongs to the delimiter, not to the file.
    assert_eq!(&body[file.range], b"RIFF");
}

#[test]
fn empty_parts_and_empty_form() {
    let body = crlf(
        "--b\nContent-Disposition: form-data; name=\"a\"\n\n\n\
         --b\nContent-Disposition: form-data; name=\"c\"\n\n--b\n\
         Content-Disposition: form-data; name=\"d\"; filename=\"\"\n\n\n--b--",
    );
    let f = form(&body, "b");
    assert_eq!(f.field("a"), Some(""));
    assert_eq!(f.field("c"), Some(""));
    let d = f.file("d").cloned().unwrap_or_else(|| panic!("no file"));
    assert_eq!(d.filename.as_deref(), Some(""));
    assert!(d.range.is_empty());
    assert_eq!(form(b"--b--\r\n", "b"), Form::default());
}

#[test]
fn quoted_names_escapes_and_extended_filenames() {
    let body = crlf(
        "--b\nContent-Disposition: form-data; name=\"a\\\"b\"; filename=\"C:\\\\x;y.wav\"\n\n1\n\
         --b\nContent-Disposition: form-data; name=file; filename=\"plain.mp3\"; \
         filename*=UTF-8''na%C3%AFve.mp3\n\n2\n\
         --b\nContent-Disposition: form-data; name=\"f2\"; filename*=ISO-8859-1''x%E9; \
         filename=\"fallback.ogg\"\n\n3\n--b--\n",
    );
    let f = form(&body, "b");
    assert_eq!(f.files[0].name, "a\"b");
    assert_eq!(f.files[0].filename.as_deref(), Some("C:\\x;y.wav"));
    assert_eq!(f.files[1].filename.as_deref(), Some("naïve.mp3"));
    assert_eq!(f.files[2].filename.as_deref(), Some("fallback.ogg"));
}

#[test]
fn header_names_case_folding_and_unknown_headers() {
    let body = crlf(
        "--b\nCONTENT-DISPOSITION: Form-Data;\n name=\"model\"\nX-Other: 1\n\tfolded\n\n\
         gpt-4o-transcribe\n--b--\n",
    );
    assert_eq!(form(&body, "b").field("model"), Some("gpt-4o-transcribe"));
}

#[test]
fn typed_part_without_filename_is_a_file() {
    let body = crlf(
        "--b\nContent-Disposition: form-data; name=\"file\"\nContent-Type: audio/wav\n\n\
         \u{0}\u{1}\n--b\nContent-Disposition: form-data; name=\"prompt\"\n\
         Content-Type: text/plain; charset=utf-8\n\nhello\n--b--\n",
    );
    let f = form(&body, "b");
    assert_eq!(f.file("file").map(|p| p.range.len()), Some(2));
    assert_eq!(f.field("prompt"), Some("hello"));
}

#[test]
fn first_field_and_file_win() {
    let body = crlf(
        "--b\nContent-Disposition: form-data; name=\"m\"\n\none\n\
         --b\nContent-Disposition: form-data; name=\"m\"\n\ntwo\n\
         --b\nContent-Disposition: form-data; name=\"f\"; filename=\"1\"\n\nx\n\
         --b\nContent-Disposition: form-data; name=\"f\"; filename=\"2\"\n\ny\n--b--\n",
    );
    let f = form(&body, "b");
    assert_eq!(f.field("m"), Some("one"));
    assert_eq!(f.file("f").and_then(|p| p.filename.as_deref()), Some("1"));
}

#[test]
fn malformed_bodies() {
    let disposition = |rest: &str| crlf(&format!("--b\nContent-Disposition: {rest}\n\nv\n--b--\n"));
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (crlf("--b\nContent-Disposition: form-data; name=\"a\"\n\nv\n"), "b", "closing boundary"),
        (crlf("--b\nContent-Disposition: form-data; name=\"a\"\n\nv\n--b"), "b", "closing boundary"),
        (crlf("--b\nContent-Disposition: form-data; name=\"a\"\n\nv\n--bb--"), "b", "closing boundary"),
        (crlf("--b\nContent-Disposition: form-data; name=\"a\"\n"), "b", "inside the headers"),
        (crlf("--b\nContent-Disposition: form-data; name=\"a\"\n\nv\n--b--\n"), "c", "does not contain"),
        (Vec::new(), "b", "does not contain"),
        (crlf("--b\nContent-Type: text/plain\n\nv\n--b--\n"), "b", "no Content-Disposition"),
        (disposition("attachment; name=\"a\""), "b", "expected `form-data`"),
        (disposition("form-data; filename=\"a.mp3\""), "b", "no `name`"),
        (disposition("form-data; name=\"a"), "b", "not closed"),
        (disposition("form-data; name=\"a\"x"), "b", "text follows"),
        (crlf("--b\nContent-Disposition form-data\n\nv\n--b--\n"), "b", "without a colon"),
        (crlf("--b\n folded first\n\nv\n--b--\n"), "b", "folded"),
        (
            crlf("--b\nContent-Disposition: form-data; name=a\ncontent-disposition: form-data; name=b\n\nv\n--b--\n"),
            "b",
            "repeats",
        ),
        (crlf("--b--\n"), "", "boundary is empty"),
        (crlf("--a\nb--\n"), "a\nb", "line break"),
    ];
    for (body, boundary, expected) in cases {
        let e = error(&body, boundary);
        assert_eq!(e.param, None, "{expected}");
        assert!(
            e.message.contains(expected),
            "{:?} lacks {expected:?}",
            e.message
        );
    }
}

#[test]
fn header_block_limit() {
    let header = |len: usize| {
        let mut body = crlf("--b\nContent-Disposition: form-data; name=\"a\"\nX-Pad: ");
        body.resize(body.len() + len, b'p');
        body.extend_from_slice(&crlf("\n\nv\n--b--\n"));
        body
    };
    // 16 KiB of headers (blank line included) is the most a part may carry.
    let fixed = "Content-Disposition: form-data; name=\"a\"\r\nX-Pad: \r\n\r\n".len();
    let fits = header(MAX_HEADER_BYTES - fixed);
    assert_eq!(form(&fits, "b").field("a"), Some("v"));
    let e = error(&header(MAX_HEADER_BYTES - fixed + 1), "b");
    assert!(e.message.contains("longer than 16 KiB"), "{}", e.message);
}

#[test]
fn part_count_limit() {
    let body = |parts: usize| {
        let mut body = Vec::new();
        for i in 0..parts {
            body.extend_from_slice(&crlf(&format!(
                "--b\nContent-Disposition: form-data; name=\"f{i}\"\n\n{i}\n"
            )));
        }
        body.extend_from_slice(b"--b--\r\n");
        body
    };
    assert_eq!(form(&body(MAX_PARTS), "b").fields.len(), MAX_PARTS);
    let e = error(&body(MAX_PARTS + 1), "b");
    assert!(e.message.contains("more than 256 parts"), "{}", e.message);
}

#[test]
fn text_field_limits_name_the_field() {
    let field = |value: &[u8]| {
        let mut body = crlf("--b\nContent-Disposition: form-data; name=\"prompt\"\n\n");
        body.extend_from_slice(value);
        body.extend_from_slice(b"\r\n--b--\r\n");
        body
    };
    let max = "é".repeat(MAX_FIELD_BYTES / 2);
    assert_eq!(
        form(&field(max.as_bytes()), "b").field("prompt"),
        Some(&max[..])
    );
    let e = error(&field(&vec![b'a'; MAX_FIELD_BYTES + 1]), "b");
    assert_eq!(e.param.as_deref(), Some("prompt"));
    assert!(e.message.contains("64 KiB"), "{}", e.message);
    let e = error(&field(&[b'a', 0xC3, 0x28]), "b");
    assert_eq!(e.param.as_deref(), Some("prompt"));
    assert!(e.message.contains("UTF-8"), "{}", e.message);
    // Files are bytes: neither limit applies to them.
    let mut body = crlf("--b\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\n\n");
    body.extend_from_slice(&vec![0xFF; MAX_FIELD_BYTES * 2]);
    body.extend_from_slice(b"\r\n--b--\r\n");
    assert_eq!(form(&body, "b").files[0].range.len(), MAX_FIELD_BYTES * 2);
}

#[test]
fn twenty_mib_file_full_of_line_breaks_and_dashes_parses_whole() {
    let mut audio = vec![0u8; 20 * 1024 * 1024];
    // Line breaks and dashes all through the file, as real compressed audio has.
    for (i, byte) in audio.iter_mut().enumerate() {
        *byte = match i % 4099 {
            0 => b'\r',
            1 => b'\n',
            2 | 3 => b'-',
            n => (n * 31 % 251) as u8,
        };
    }
    let body = sdk_body(&audio);
    // How fast is for benches/micro.rs to say; a scan that went back over the file at
    // every line break would make this test take minutes.
    let f = form(&body, HTTPX_BOUNDARY);
    let file = f.file("file").cloned().unwrap_or_else(|| panic!("no file"));
    let head = body.len() - audio.len() - HTTPX_BOUNDARY.len() - 8;
    assert_eq!(file.range, head..head + audio.len());
    assert!(body[file.range] == audio[..]);
}

#[test]
fn replace_field_keeps_every_other_byte() {
    let audio = audio_bytes();
    let body = sdk_body(&audio);
    let f = form(&body, HTTPX_BOUNDARY);
    let replaced = replace_field(&body, &f, "model", "whisper-large-v3")
        .unwrap_or_else(|| panic!("no model field"));
    let at = f.fields[0].range.start;
    assert_eq!(&replaced[..at], &body[..at]);
    assert_eq!(&replaced[at..at + 16], b"whisper-large-v3");
    assert_eq!(&replaced[at + 16..], &body[f.fields[0].range.end..]);
    let again = form(&replaced, HTTPX_BOUNDARY);
    assert_eq!(again.field("model"), Some("whisper-large-v3"));
    assert_eq!(again.field("response_format"), Some("verbose_json"));
    let file = again
        .file("file")
        .cloned()
        .unwrap_or_else(|| panic!("no file"));
    assert_eq!(&replaced[file.range], &audio[..]);

    // Only the first of repeated fields changes.
    let replaced = replace_field(&body, &f, "timestamp_granularities[]", "segment")
        .unwrap_or_else(|| panic!("no field"));
    let values: Vec<_> = form(&replaced, HTTPX_BOUNDARY)
        .field_values("timestamp_granularities[]")
        .map(str::to_string)
        .collect();
    assert_eq!(values, ["segment", "segment"]);

    assert_eq!(replace_field(&body, &f, "language", "en"), None);
    assert_eq!(replace_field(&body, &f, "file", "x"), None);
    assert_eq!(replace_field(&body, &f, "model", "a\r\n--x"), None);
    assert_eq!(replace_field(&body[..10], &f, "model", "m"), None);
}
