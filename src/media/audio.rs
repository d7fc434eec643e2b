//! Audio endpoints (spec 4.20, 4.21): validation of speech requests and transcription
//! forms, and the seconds of audio a transcription is billed for.

use super::multipart::{FilePart, Form};
use crate::protocol::{Invalid, Usage};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeechJob {
    pub model: String,
    /// Characters of `input`: what speech is billed by.
    pub chars: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptionJob {
    pub model: String,
    pub response_format: Option<String>,
    pub file: FilePart,
}

/// Spec 4.21: `model`, `input`, `voice` required; `response_format`, `speed` checked.
/// An optional field sent as `null` counts as absent.
pub fn check_speech(body: &Value) -> Result<SpeechJob, Invalid> {
    let obj = body.as_object().ok_or_else(|| Invalid {
        param: None,
        message: "The request body must be a JSON object.".to_string(),
    })?;
    let model = required_string(obj, "model")?;
    let input = required_string(obj, "input")?;
    let chars = input.chars().count();
    if chars > MAX_SPEECH_CHARS {
        return Err(invalid(
            "input",
            format!("`input` has {chars} characters; at most {MAX_SPEECH_CHARS} are allowed."),
        ));
    }
    // A built-in voice by name, or a custom voice as `{"id": "voice_..."}`.
    match obj.get("voice") {
        None | Some(Value::Null) => return Err(invalid("voice", "`voice` is required.")),
        Some(Value::String(name)) if !name.is_empty() => {}
        Some(Value::Object(voice))
            if voice
                .get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| !id.is_empty()) => {}
        Some(_) => {
            return Err(invalid(
                "voice",
                "`voice` must be a voice name or an object with a non-empty `id`.",
            ))
        }
    }
    if let Some(format) = optional(obj, "response_format") {
        match format.as_str() {
            Some(f) if SPEECH_FORMATS.contains(&f) => {}
            _ => {
                return Err(invalid(
                    "response_format",
                    format!(
                        "`response_format` must be one of {}.",
                        SPEECH_FORMATS.join(", ")
                    ),
                ))
            }
        }
    }
    if let Some(speed) = optional(obj, "speed") {
        if !speed.as_f64().is_some_and(|s| (0.25..=4.0).contains(&s)) {
            return Err(invalid(
                "speed",
                "`speed` must be a number from 0.25 to 4.0.",
            ));
        }
    }
    if optional(obj, "instructions").is_some_and(|i| !i.is_string()) {
        return Err(invalid("instructions", "`instructions` must be a string."));
    }
    Ok(SpeechJob {
        model: model.to_string(),
        chars: chars as u64,
    })
}

/// A transcription or translation form: `file` and `model` required, the rest checked.
pub fn check_transcription(form: &Form) -> Result<TranscriptionJob, Invalid> {
    let file = match form.file("file") {
        Some(file) => file,
        None if form.field("file").is_some() => {
            return Err(invalid(
                "file",
                "`file` must be uploaded as a file part (with a filename), not as text.",
            ))
        }
        None => {
            return Err(invalid(
                "file",
                "`file` is required: the audio to transcribe, as a file part.",
            ))
        }
    };
    if file.range.is_empty() {
        return Err(invalid("file", "The uploaded `file` is empty."));
    }
    let model = match form.field("model") {
        None => return Err(invalid("model", "`model` is required.")),
        Some(m) if m.trim().is_empty() => {
            return Err(invalid("model", "`model` must not be empty."))
        }
        Some(m) => m,
    };
    let response_format = form.field("response_format");
    if let Some(format) = response_format {
        if !TRANSCRIPTION_FORMATS.contains(&format) {
            return Err(invalid(
                "response_format",
                format!(
                    "`response_format` must be one of {}.",
                    TRANSCRIPTION_FORMATS.join(", ")
                ),
            ));
        }
    }
    if let Some(temperature) = form.field("temperature") {
        let value = temperature.trim().parse::<f64>().ok();
        if !value.is_some_and(|t| (0.0..=1.0).contains(&t)) {
            return Err(invalid(
                "temperature",
                "`temperature` must be a number from 0 to 1.",
            ));
        }
    }
    // The SDKs send arrays as repeated `name[]` fields; some clients drop the brackets.
    for name in ["timestamp_granularities[]", "timestamp_granularities"] {
        if form
            .field_values(name)
            .any(|g| !matches!(g, "word" | "segment"))
        {
            return Err(invalid(
                name,
                format!("Each `{name}` value must be `word` or `segment`."),
            ));
        }
    }
    match form.field("stream").map(str::trim) {
        None => {}
        Some(s) if s.eq_ignore_ascii_case("false") => {}
        Some(s) if s.eq_ignore_ascii_case("true") => {
            return Err(invalid(
                "stream",
                "Streaming transcriptions are not supported by this gateway; omit `stream` or \
                 set it to false.",
            ))
        }
        Some(_) => return Err(invalid("stream", "`stream` must be `true` or `false`.")),
    }
    Ok(TranscriptionJob {
        model: model.to_string(),
        response_format: response_format.map(str::to_string),
        file: file.clone(),
    })
}

/// An upper bound of an upload's duration in seconds, for the reservation.
///
/// WAV headers give the duration exactly (rounded up to a whole second, as upstreams
/// report whole seconds); other containers would need a decoder, so they are assumed
/// to run at the lowest bitrate speech codecs use, which can only overstate their
/// length.
pub fn max_seconds(file: &[u8]) -> f64 {
    wav_seconds(file)
        .map(f64::ceil)
        .unwrap_or(file.len() as f64 / LOWEST_BYTES_PER_SECOND)
        .max(1.0)
}

/// The seconds to bill from a successful answer: what the upstream reports (usage
/// seconds, `duration`, the last subtitle cue), else the WAV header, else an estimate
/// from the size; never more than [`max_seconds`], which was reserved.
pub fn billed_seconds(response_format: Option<&str>, answer: &[u8], file: &[u8]) -> f64 {
    let json = serde_json::from_slice::<Value>(answer).ok();
    let reported = json.as_ref().and_then(|answer| {
        let usage = answer.get("usage");
        let seconds = usage
            .filter(|u| u.get("type").and_then(Value::as_str) == Some("duration"))
            .and_then(|u| u.get("seconds"))
            .and_then(seconds_value)
            .filter(|s| valid_seconds(*s));
        // verbose_json's `duration`; some compatible upstreams send it as a string.
        seconds.or_else(|| {
            answer
                .get("duration")
                .and_then(seconds_value)
                .filter(|s| valid_seconds(*s))
        })
    });
    let subtitles = || match response_format {
        Some("srt" | "vtt") => last_cue_end(answer),
        _ => None,
    };
    let seconds = reported
        .or_else(subtitles)
        .or_else(|| wav_seconds(file))
        .unwrap_or_else(|| (file.len() as f64 / TYPICAL_BYTES_PER_SECOND).max(1.0));
    seconds.clamp(0.0, max_seconds(file))
}

/// Token usage, when the answer reports tokens instead of seconds.
pub fn token_usage(answer: &[u8]) -> Option<Usage> {
    let answer: Value = serde_json::from_slice(answer).ok()?;
    let usage = answer.get("usage")?;
    if usage.get("type").and_then(Value::as_str) != Some("tokens") {
        return None;
    }
    let input = usage.get("input_tokens").and_then(Value::as_u64);
    let output = usage.get("output_tokens").and_then(Value::as_u64);
    if input.is_none() && output.is_none() {
        return None;
    }
    // OpenAI API reference, "The transcription object": `input_token_details.
    // {text_tokens, audio_tokens}` splits the input.
    let audio = usage
        .get("input_token_details")
        .and_then(|d| d.get("audio_tokens"))
        .and_then(Value::as_u64);
    Some(Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        audio_input_tokens: audio.unwrap_or(0),
        ..Usage::default()
    })
}

const MAX_SPEECH_CHARS: usize = 4096;
const SPEECH_FORMATS: [&str; 6] = ["mp3", "opus", "aac", "flac", "wav", "pcm"];
const TRANSCRIPTION_FORMATS: [&str; 6] = [
    "json",
    "text",
    "srt",
    "verbose_json",
    "vtt",
    "diarized_json",
];
/// 8 kbit/s: the lowest bitrate speech codecs use; the reservation's bound.
const LOWEST_BYTES_PER_SECOND: f64 = 1_000.0;
/// 128 kbit/s: a common bitrate for uploaded speech; the estimate when nothing is reported.
const TYPICAL_BYTES_PER_SECOND: f64 = 16_000.0;

use crate::protocol::invalid;

fn optional<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn required_string<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a str, Invalid> {
    match optional(obj, name) {
        None => Err(invalid(name, format!("`{name}` is required."))),
        Some(Value::String(s)) if s.is_empty() => {
            Err(invalid(name, format!("`{name}` must not be empty.")))
        }
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(invalid(name, format!("`{name}` must be a string."))),
    }
}

fn valid_seconds(seconds: f64) -> bool {
    seconds.is_finite() && seconds >= 0.0
}

fn seconds_value(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The latest cue end of an SRT (`00:01:02,500 --> ...`) or WebVTT (`01:02.500`) answer.
/// The latest rather than the last line's, in case cues are out of order.
fn last_cue_end(answer: &[u8]) -> Option<f64> {
    String::from_utf8_lossy(answer)
        .lines()
        .filter_map(|line| line.split_once("-->"))
        // WebVTT cue settings may follow the end time.
        .filter_map(|(_, end)| timestamp(end.split_whitespace().next()?))
        .filter(|s| valid_seconds(*s))
        .reduce(f64::max)
}

/// `hh:mm:ss,mmm` (SRT) or `[hh:]mm:ss.mmm` (WebVTT).
fn timestamp(text: &str) -> Option<f64> {
    let (clock, fraction) = text.split_once([',', '.']).unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let fraction = match fraction {
        "" => 0.0,
        f if digits(f) => format!("0.{f}").parse::<f64>().ok()?,
        _ => return None,
    };
    let mut seconds = 0.0;
    let mut fields = 0;
    for field in clock.split(':') {
        if !digits(field) {
            return None;
        }
        seconds = seconds * 60.0 + field.parse::<f64>().ok()?;
        fields += 1;
    }
    (2..=3).contains(&fields).then_some(seconds + fraction)
}

/// The exact duration of a PCM-family WAV (RIFF/RF64 `WAVE`): the `data` chunk's size
/// over the bytes per second of its `fmt ` chunk, chunks in any order. `None` for
/// anything else, compressed WAV formats included (their header rates are not exact).
fn wav_seconds(file: &[u8]) -> Option<f64> {
    let header = file.get(..12)?;
    if !matches!(&header[..4], b"RIFF" | b"RF64") || &header[8..12] != b"WAVE" {
        return None;
    }
    let mut rate = None;
    let mut data = None;
    let mut at = 12;
    while rate.is_none() || data.is_none() {
        let chunk = file.get(at..at + 8)?;
        let size = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        let start = at + 8;
        let remaining = file.len() - start;
        match &chunk[..4] {
            b"fmt " => {
                let fmt = &file[start..start + (size as usize).min(remaining)];
                rate = Some(pcm_bytes_per_second(fmt)?);
            }
            // A streamed WAV was written before its length was known: 0xFFFFFFFF (or 0,
            // or a size past the end) means "until the end of the file".
            b"data" if size == u32::MAX || size == 0 || size as usize > remaining => {
                data = Some(remaining);
                break;
            }
            b"data" => data = Some(size as usize),
            _ => {}
        }
        // Chunks are padded to an even size.
        at = start
            .checked_add(size as usize)?
            .checked_add(size as usize & 1)?;
    }
    let seconds = data? as f64 / rate? as f64;
    valid_seconds(seconds).then_some(seconds)
}

/// Bytes per second of a `fmt ` chunk whose samples have a fixed size (PCM, float,
/// A-law, µ-law). A header whose fields disagree gets its smallest rate, so the
/// duration stays an upper bound.
fn pcm_bytes_per_second(fmt: &[u8]) -> Option<u64> {
    let u16_at = |i: usize| Some(u16::from_le_bytes([*fmt.get(i)?, *fmt.get(i + 1)?]));
    let u32_at = |i: usize| {
        Some(u32::from_le_bytes([
            *fmt.get(i)?,
            *fmt.get(i + 1)?,
            *fmt.get(i + 2)?,
            *fmt.get(i + 3)?,
        ]))
    };
    let mut format = u16_at(0)?;
    if format == 0xFFFE {
        // WAVE_FORMAT_EXTENSIBLE: the real format opens the sub-format GUID.
        format = u16_at(24)?;
    }
    if !matches!(format, 1 | 3 | 6 | 7) {
        return None;
    }
    let channels = u64::from(u16_at(2)?);
    let sample_rate = u64::from(u32_at(4)?);
    let byte_rate = u64::from(u32_at(8)?);
    let block_align = u64::from(u16_at(12)?);
    let bits = u64::from(u16_at(14)?);
    [
        byte_rate,
        sample_rate * block_align,
        sample_rate * channels * bits.div_ceil(8),
    ]
    .into_iter()
    .filter(|rate| *rate > 0)
    .min()
}

#[cfg(test)]
#[path = "audio_tests.rs"]
mod tests;
