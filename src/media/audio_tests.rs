use super::*;
use crate::media::multipart;
use serde_json::json;

fn speech_error(body: Value) -> Invalid {
    match check_speech(&body) {
        Ok(job) => panic!("accepted {body}: {job:?}"),
        Err(e) => e,
    }
}

fn param(e: &Invalid) -> Option<&str> {
    e.param.as_deref()
}

#[test]
fn speech_accepts_sdk_requests() {
    let job = check_speech(&json!({
        "model": "gpt-4o-mini-tts", "input": "Héllo 👋", "voice": "coral",
        "response_format": "wav", "speed": 1.25, "instructions": "Speak cheerfully.",
        "stream_format": "audio"
    }));
    assert_eq!(
        job,
        Ok(SpeechJob {
            model: "gpt-4o-mini-tts".into(),
            chars: 7
        })
    );
    let custom = json!({"model": "tts-1", "input": "x", "voice": {"id": "voice_123"}});
    assert_eq!(check_speech(&custom).map(|j| j.chars), Ok(1));
    let nulls = json!({"model": "tts-1", "input": "x", "voice": "alloy",
                       "response_format": null, "speed": null, "instructions": null});
    assert!(check_speech(&nulls).is_ok());
    for format in SPEECH_FORMATS {
        let body = json!({"model": "tts-1", "input": "x", "voice": "alloy",
                          "response_format": format});
        assert!(check_speech(&body).is_ok(), "{format}");
    }
}

#[test]
fn speech_input_is_counted_in_characters() {
    // 4096 two-byte characters are 8192 bytes but within the limit.
    let body = |input: String| json!({"model": "tts-1", "voice": "alloy", "input": input});
    assert_eq!(
        check_speech(&body("é".repeat(4096))).map(|j| j.chars),
        Ok(4096)
    );
    let e = speech_error(body("a".repeat(4097)));
    assert_eq!(param(&e), Some("input"));
    assert!(e.message.contains("4097"), "{}", e.message);
}

#[test]
fn speech_rejections_name_their_field() {
    let base = json!({"model": "tts-1", "input": "Hello", "voice": "alloy"});
    let with = |field: &str, value: Value| {
        let mut body = base.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = base.clone();
        body.as_object_mut().map(|o| o.remove(field));
        body
    };
    let cases = [
        (without("model"), "model"),
        (with("model", json!("")), "model"),
        (with("model", json!(5)), "model"),
        (without("input"), "input"),
        (with("input", json!(null)), "input"),
        (with("input", json!("")), "input"),
        (with("input", json!(["Hello"])), "input"),
        (without("voice"), "voice"),
        (with("voice", json!("")), "voice"),
        (with("voice", json!(3)), "voice"),
        (with("voice", json!({"name": "alloy"})), "voice"),
        (with("voice", json!({"id": ""})), "voice"),
        (with("response_format", json!("ogg")), "response_format"),
        (with("response_format", json!("MP3")), "response_format"),
        (with("speed", json!(0.24)), "speed"),
        (with("speed", json!(4.01)), "speed"),
        (with("speed", json!("1.0")), "speed"),
        (
            with("instructions", json!({"tone": "calm"})),
            "instructions",
        ),
    ];
    for (body, field) in cases {
        assert_eq!(param(&speech_error(body.clone())), Some(field), "{body}");
    }
    for speed in [0.25, 4.0] {
        assert!(check_speech(&with("speed", json!(speed))).is_ok());
    }
    let e = speech_error(json!(["model"]));
    assert_eq!(e.param, None);
}

const B: &str = "a1b2c3";

fn form_body(fields: &[(&str, &str)], file: Option<&[u8]>) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{B}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    if let Some(file) = file {
        body.extend_from_slice(
            format!(
                "--{B}\r\nContent-Disposition: form-data; name=\"file\"; \
                 filename=\"a.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(file);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{B}--\r\n").as_bytes());
    body
}

fn form(fields: &[(&str, &str)], file: Option<&[u8]>) -> Form {
    match multipart::parse(&form_body(fields, file), B) {
        Ok(form) => form,
        Err(e) => panic!("{e:?}"),
    }
}

fn transcription_error(fields: &[(&str, &str)], file: Option<&[u8]>) -> Invalid {
    match check_transcription(&form(fields, file)) {
        Ok(job) => panic!("accepted {fields:?}: {job:?}"),
        Err(e) => e,
    }
}

#[test]
fn transcription_job_from_an_sdk_form() {
    let fields = [
        ("model", "whisper-1"),
        ("language", "en"),
        ("prompt", "Names: Zoë."),
        ("response_format", "verbose_json"),
        ("temperature", "0.2"),
        ("timestamp_granularities[]", "word"),
        ("timestamp_granularities[]", "segment"),
        ("stream", "false"),
    ];
    let body = form_body(&fields, Some(b"ID3\x04audio"));
    let parsed = multipart::parse(&body, B).unwrap_or_default();
    let job = check_transcription(&parsed).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(job.model, "whisper-1");
    assert_eq!(job.response_format.as_deref(), Some("verbose_json"));
    assert_eq!(&body[job.file.range.clone()], b"ID3\x04audio");
    assert_eq!(job.file.filename.as_deref(), Some("a.mp3"));
    let minimal = check_transcription(&form(&[("model", "whisper-1")], Some(b"x")));
    assert_eq!(minimal.map(|j| j.response_format), Ok(None));
    for format in TRANSCRIPTION_FORMATS {
        let f = form(&[("model", "m"), ("response_format", format)], Some(b"x"));
        assert!(check_transcription(&f).is_ok(), "{format}");
    }
    for t in ["0", "1", "1.0", " 0.5"] {
        let f = form(&[("model", "m"), ("temperature", t)], Some(b"x"));
        assert!(check_transcription(&f).is_ok(), "{t}");
    }
}

#[test]
fn transcription_rejections_name_their_field() {
    let m = ("model", "whisper-1");
    let audio: Option<&[u8]> = Some(b"audio");
    // Form fields, the file, the field named, and a phrase of the message.
    type Case<'a> = (Vec<(&'a str, &'a str)>, Option<&'a [u8]>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (vec![m], None, "file", "required"),
        (vec![m, ("file", "not a file")], None, "file", "file part"),
        (vec![m], Some(b""), "file", "empty"),
        (vec![], audio, "model", "required"),
        (vec![("model", " ")], audio, "model", "empty"),
        (
            vec![m, ("response_format", "mp3")],
            audio,
            "response_format",
            "json",
        ),
        (
            vec![m, ("temperature", "1.5")],
            audio,
            "temperature",
            "0 to 1",
        ),
        (
            vec![m, ("temperature", "-0.1")],
            audio,
            "temperature",
            "0 to 1",
        ),
        (
            vec![m, ("temperature", "NaN")],
            audio,
            "temperature",
            "0 to 1",
        ),
        (
            vec![m, ("temperature", "warm")],
            audio,
            "temperature",
            "0 to 1",
        ),
        (
            vec![
                m,
                ("timestamp_granularities[]", "word"),
                ("timestamp_granularities[]", "char"),
            ],
            audio,
            "timestamp_granularities[]",
            "`word` or `segment`",
        ),
        (
            vec![m, ("timestamp_granularities", "sentence")],
            audio,
            "timestamp_granularities",
            "`word` or `segment`",
        ),
        (
            vec![m, ("stream", "true")],
            audio,
            "stream",
            "not supported",
        ),
        (
            vec![m, ("stream", "True")],
            audio,
            "stream",
            "not supported",
        ),
        (
            vec![m, ("stream", "yes")],
            audio,
            "stream",
            "`true` or `false`",
        ),
    ];
    for (fields, file, field, message) in cases {
        let e = transcription_error(&fields, file);
        assert_eq!(param(&e), Some(field), "{fields:?}");
        assert!(
            e.message.contains(message),
            "{:?} lacks {message:?}",
            e.message
        );
    }
}

fn chunk(id: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut out = id.to_vec();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    if payload.len() % 2 == 1 {
        out.push(0);
    }
    out
}

/// A `fmt ` payload: format, channels, sample rate, bits per sample.
fn fmt(format: u16, channels: u16, rate: u32, bits: u16) -> Vec<u8> {
    let align = channels * bits.div_ceil(8);
    let mut out = Vec::new();
    out.extend_from_slice(&format.to_le_bytes());
    out.extend_from_slice(&channels.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * u32::from(align)).to_le_bytes());
    out.extend_from_slice(&align.to_le_bytes());
    out.extend_from_slice(&bits.to_le_bytes());
    out
}

fn riff(chunks: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = chunks.concat();
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(body.len() as u32 + 4).to_le_bytes());
    out.extend_from_slice(b"WAVE");
    out.extend_from_slice(&body);
    out
}

/// 16 kHz mono 16-bit PCM: 32,000 bytes a second.
fn speech_wav(seconds: f64) -> Vec<u8> {
    let data = vec![0u8; (seconds * 32_000.0) as usize];
    riff(&[
        chunk(b"fmt ", &fmt(1, 1, 16_000, 16)),
        chunk(b"data", &data),
    ])
}

#[test]
fn wav_duration_from_the_header() {
    assert_eq!(wav_seconds(&speech_wav(2.5)), Some(2.5));
    assert_eq!(max_seconds(&speech_wav(2.5)), 3.0);
    assert_eq!(max_seconds(&speech_wav(0.25)), 1.0);
    // 44.1 kHz stereo 24-bit, with LIST and odd-sized chunks first and data before fmt.
    let rate = 44_100.0 * 2.0 * 3.0;
    let wav = riff(&[
        chunk(b"LIST", b"INFOISFT\x05\0\0\0Lavf\0"),
        chunk(b"junk", b"odd"),
        chunk(b"data", &vec![1u8; (rate * 3.0) as usize]),
        chunk(b"fmt ", &fmt(1, 2, 44_100, 24)),
    ]);
    assert_eq!(wav_seconds(&wav), Some(3.0));
    // Float and WAVE_FORMAT_EXTENSIBLE with a PCM sub-format.
    let float = riff(&[
        chunk(b"fmt ", &fmt(3, 1, 8_000, 32)),
        chunk(b"data", &[0; 64_000]),
    ]);
    assert_eq!(wav_seconds(&float), Some(2.0));
    let mut extensible = fmt(0xFFFE, 1, 8_000, 16);
    extensible.extend_from_slice(&[22, 0, 16, 0, 4, 0, 0, 0, 1, 0]);
    extensible.extend_from_slice(&[0; 14]);
    let wav = riff(&[chunk(b"fmt ", &extensible), chunk(b"data", &[0; 16_000])]);
    assert_eq!(wav_seconds(&wav), Some(1.0));
}

#[test]
fn streamed_and_truncated_wav_use_the_bytes_present() {
    for size in [u32::MAX, 0, 1_000_000] {
        let mut wav = riff(&[chunk(b"fmt ", &fmt(1, 1, 16_000, 16))]);
        wav.extend_from_slice(b"data");
        wav.extend_from_slice(&size.to_le_bytes());
        wav.extend_from_slice(&[0; 48_000]);
        assert_eq!(wav_seconds(&wav), Some(1.5), "size {size:#x}");
        assert_eq!(max_seconds(&wav), 2.0);
    }
}

#[test]
fn header_that_disagrees_with_itself_gets_the_longer_duration() {
    let mut lying = fmt(1, 1, 16_000, 16);
    lying[8..12].copy_from_slice(&1_000_000u32.to_le_bytes());
    let wav = riff(&[chunk(b"fmt ", &lying), chunk(b"data", &[0; 64_000])]);
    assert_eq!(wav_seconds(&wav), Some(2.0));
}

#[test]
fn other_audio_is_bounded_at_eight_kbit() {
    // Compressed WAV (IMA ADPCM), mp3, and WAV headers cut short.
    let adpcm = riff(&[
        chunk(b"fmt ", &fmt(0x11, 1, 16_000, 4)),
        chunk(b"data", &[0; 4_000]),
    ]);
    assert_eq!(wav_seconds(&adpcm), None);
    assert_eq!(max_seconds(&adpcm), adpcm.len() as f64 / 1_000.0);
    let mp3 = vec![0xFFu8; 480_000];
    assert_eq!(max_seconds(&mp3), 480.0);
    assert_eq!(max_seconds(b"ID3"), 1.0);
    assert_eq!(max_seconds(b""), 1.0);
    let no_fmt = riff(&[chunk(b"data", &[0; 3_000])]);
    assert_eq!(wav_seconds(&no_fmt), None);
    let mut streamed_first = b"RIFF\xff\xff\xff\xffWAVEdata\xff\xff\xff\xff".to_vec();
    streamed_first.extend_from_slice(&chunk(b"fmt ", &fmt(1, 1, 16_000, 16)));
    assert_eq!(wav_seconds(&streamed_first), None);
    let short_fmt = riff(&[chunk(b"fmt ", &[1, 0, 1, 0]), chunk(b"data", &[0; 8])]);
    assert_eq!(wav_seconds(&short_fmt), None);
    let silent = riff(&[chunk(b"fmt ", &fmt(1, 0, 0, 16)), chunk(b"data", &[0; 8])]);
    assert_eq!(wav_seconds(&silent), None);
}

#[test]
fn subtitle_timestamps() {
    assert_eq!(timestamp("00:01:02,500"), Some(62.5));
    assert_eq!(timestamp("01:02.250"), Some(62.25));
    assert_eq!(timestamp("1:00:00.000"), Some(3600.0));
    assert_eq!(timestamp("00:00:07"), Some(7.0));
    for bad in ["", "12", "1:2:3:4", "aa:bb.ccc", "00:01,5x", "00::01"] {
        assert_eq!(timestamp(bad), None, "{bad}");
    }
    let srt = "1\n00:00:00,000 --> 00:00:04,200\nHello.\n\n\
               2\n00:00:04,200 --> 00:01:02,500\nA longer line --> with an arrow.\n";
    assert_eq!(last_cue_end(srt.as_bytes()), Some(62.5));
    let vtt = "WEBVTT\n\n00:00.000 --> 00:03.480 align:start position:0%\nHi\n\n\
               00:03.480 --> 01:05.120\nThere\n";
    assert_eq!(last_cue_end(vtt.as_bytes()), Some(65.12));
    assert_eq!(last_cue_end(b"WEBVTT\n\n"), None);
}

#[test]
fn billing_follows_the_reported_seconds_first() {
    let mp3 = vec![0u8; 320_000]; // 20 s at 128 kbit/s, bound 320 s
    let bill = |format, answer: &str| billed_seconds(format, answer.as_bytes(), &mp3);
    // 1. usage seconds, even next to a `duration`.
    let answer = r#"{"text":"Hi","duration":8.47,"usage":{"type":"duration","seconds":9}}"#;
    assert_eq!(bill(Some("verbose_json"), answer), 9.0);
    // 2. verbose_json duration when usage is absent, in tokens, or unusable.
    assert_eq!(
        bill(Some("verbose_json"), r#"{"text":"Hi","duration":8.47}"#),
        8.47
    );
    let tokens = r#"{"duration":"12.5","usage":{"type":"tokens","input_tokens":3}}"#;
    assert_eq!(bill(None, tokens), 12.5);
    let negative = r#"{"duration":30,"usage":{"type":"duration","seconds":-4}}"#;
    assert_eq!(bill(None, negative), 30.0);
    // 3. subtitles, only when that format was asked for.
    let srt = "1\n00:00:00,000 --> 00:00:41,000\nHello\n";
    assert_eq!(bill(Some("srt"), srt), 41.0);
    assert_eq!(
        bill(Some("vtt"), "WEBVTT\n\n00:41.500 --> 00:42.000\nx\n"),
        42.0
    );
    // 5. the size estimate, at least a second.
    assert_eq!(bill(Some("text"), srt), 20.0);
    assert_eq!(bill(None, r#"{"text":"Hi"}"#), 20.0);
    assert_eq!(billed_seconds(None, b"Hi", b"tiny"), 1.0);
    // 4. a WAV's exact header duration.
    let wav = speech_wav(2.5);
    assert_eq!(billed_seconds(Some("text"), b"Hello", &wav), 2.5);
    assert_eq!(billed_seconds(None, br#"{"duration":2.4}"#, &wav), 2.4);
}

#[test]
fn billing_never_exceeds_the_reservation() {
    let wav = speech_wav(2.5);
    let big = br#"{"usage":{"type":"duration","seconds":1e300}}"#;
    assert_eq!(billed_seconds(None, big, &wav), 3.0);
    let srt = b"1\n99:00:00,000 --> 99:59:59,999\nx\n";
    assert_eq!(billed_seconds(Some("srt"), srt, &[0; 5_000]), 5.0);
    let nan = br#"{"duration":"NaN"}"#;
    let billed = billed_seconds(None, nan, &[0; 32_000]);
    assert_eq!(billed, 2.0);
    let infinite = br#"{"duration":"inf","usage":{"type":"duration","seconds":"-inf"}}"#;
    assert_eq!(billed_seconds(None, infinite, &[0; 32_000]), 2.0);
}

#[test]
fn token_usage_of_token_priced_models() {
    let answer = br#"{"text":"Hi","usage":{"type":"tokens","input_tokens":14,
        "input_token_details":{"text_tokens":0,"audio_tokens":14},
        "output_tokens":45,"total_tokens":59}}"#;
    assert_eq!(
        token_usage(answer),
        Some(Usage {
            input_tokens: 14,
            output_tokens: 45,
            audio_input_tokens: 14,
            ..Usage::default()
        })
    );
    let only_input = br#"{"usage":{"type":"tokens","input_tokens":7}}"#;
    assert_eq!(
        token_usage(only_input).map(|u| (u.input_tokens, u.output_tokens)),
        Some((7, 0))
    );
    assert_eq!(
        token_usage(br#"{"usage":{"type":"duration","seconds":9}}"#),
        None
    );
    assert_eq!(token_usage(br#"{"usage":{"type":"tokens"}}"#), None);
    assert_eq!(token_usage(br#"{"text":"Hi"}"#), None);
    assert_eq!(token_usage(b"plain transcript"), None);
}
