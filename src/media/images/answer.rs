//! What an image answer delivered (spec 4.6 and 4.7 success bodies), for settling.

use super::Delivered;
use crate::protocol::Usage;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

/// Only what settling needs. `data` items are skipped unread: they hold megabytes of
/// base64 that need not be copied to be counted.
#[derive(Deserialize)]
struct Answer {
    data: Vec<IgnoredAny>,
    #[serde(default)]
    size: Option<Value>,
    #[serde(default)]
    quality: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
}

/// What an answer delivered: the number of images in `data`, the size and quality it
/// reports (when it does), and token usage (when it reports any). `None` when the answer
/// is not JSON or has no `data` array.
pub fn delivered(answer: &[u8]) -> Option<Delivered> {
    let answer: Answer = serde_json::from_slice(answer).ok()?;
    let text = |v: Option<Value>| match v {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    Some(Delivered {
        images: answer.data.len() as u64,
        size: text(answer.size),
        quality: text(answer.quality),
        usage: answer.usage.as_ref().and_then(usage),
    })
}

/// Spec 4.6 `usage`: `input_tokens` (text and image input, cached included),
/// `output_tokens`, `input_tokens_details.{cached_tokens, image_tokens}` (OpenAI API
/// reference, "The image generation response", `usage`). Image models generate image
/// tokens: the output is image output unless `output_tokens_details` splits it. A usage
/// object without token counts (some native answers report only an image count) is no
/// token usage.
fn usage(u: &Value) -> Option<Usage> {
    let count = |v: Option<&Value>| v.and_then(Value::as_u64);
    let input = count(u.get("input_tokens"));
    let output = count(u.get("output_tokens"));
    if input.is_none() && output.is_none() {
        return None;
    }
    let detail = |of: &str, name: &str| count(u.get(of).and_then(|d| d.get(name)));
    let output = output.unwrap_or(0);
    Some(Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output,
        cached_input_tokens: detail("input_tokens_details", "cached_tokens").unwrap_or(0),
        image_input_tokens: detail("input_tokens_details", "image_tokens").unwrap_or(0),
        image_output_tokens: detail("output_tokens_details", "image_tokens").unwrap_or(output),
        ..Usage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_family_url_answer() {
        let answer = br#"{
          "created": 1713833628,
          "data": [
            {"url": "https://oaidalleapiprodscus.blob.core.windows.net/private/org-x/user-y/img-1.png?st=2024-04-23T00%3A53%3A48Z&sig=abc"},
            {"url": "https://oaidalleapiprodscus.blob.core.windows.net/private/org-x/user-y/img-2.png?st=2024-04-23T00%3A53%3A48Z&sig=def"}
          ]
        }"#;
        assert_eq!(
            delivered(answer),
            Some(Delivered {
                images: 2,
                size: None,
                quality: None,
                usage: None
            })
        );
    }

    #[test]
    fn middle_family_answer_with_revised_prompt() {
        let answer = br#"{
          "created": 1713833628,
          "data": [{
            "b64_json": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
            "revised_prompt": "A photorealistic image of a sea otter wearing a tiny red beret, floating on calm water at sunset."
          }]
        }"#;
        let d = delivered(answer).unwrap();
        assert_eq!(d.images, 1);
        assert_eq!(d.usage, None);
    }

    #[test]
    fn newest_family_b64_answer_with_usage() {
        let answer = br#"{
          "created": 1745000000,
          "background": "opaque",
          "data": [
            {"b64_json": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="},
            {"b64_json": "UklGRiQAAABXRUJQVlA4IBgAAAAwAQCdASoBAAEAAwA0JaQAA3AA/vuUAAA="}
          ],
          "output_format": "png",
          "quality": "high",
          "size": "1536x1024",
          "usage": {
            "input_tokens": 50,
            "input_tokens_details": {"image_tokens": 0, "text_tokens": 50, "cached_tokens": 10},
            "output_tokens": 12288,
            "total_tokens": 12338
          }
        }"#;
        assert_eq!(
            delivered(answer),
            Some(Delivered {
                images: 2,
                size: Some("1536x1024".into()),
                quality: Some("high".into()),
                usage: Some(Usage {
                    input_tokens: 50,
                    output_tokens: 12288,
                    cached_input_tokens: 10,
                    image_output_tokens: 12288,
                    ..Usage::default()
                }),
            })
        );
    }

    #[test]
    fn usage_without_cached_details() {
        let answer = br#"{"created":1,"data":[{"b64_json":"AAAA"}],
            "usage":{"input_tokens":7,"input_tokens_details":{"text_tokens":7,"image_tokens":0},
                     "output_tokens":4160,"total_tokens":4167}}"#;
        let usage = delivered(answer).unwrap().usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_input_tokens
            ),
            (7, 4160, 0)
        );
    }

    #[test]
    fn image_input_and_split_output_are_their_own_kinds() {
        let answer = br#"{"created":1,"data":[{"b64_json":"AAAA"}],
            "usage":{"input_tokens":300,"input_tokens_details":{"text_tokens":40,"image_tokens":260},
                     "output_tokens":1100,"output_tokens_details":{"text_tokens":100,"image_tokens":1000},
                     "total_tokens":1400}}"#;
        let u = delivered(answer).unwrap().usage.unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.image_input_tokens,
                u.output_tokens,
                u.image_output_tokens
            ),
            (300, 260, 1100, 1000)
        );
    }

    #[test]
    fn native_edit_answer_without_token_counts() {
        let answer = br#"{"created":1750000000,
            "data":[{"url":"https://dashscope-result.oss-cn-beijing.aliyuncs.com/edit/1.png","revised_prompt":"a red hat"}],
            "usage":{"image_count":1,"width":1024,"height":1024}}"#;
        let d = delivered(answer).unwrap();
        assert_eq!((d.images, d.usage), (1, None));
    }

    #[test]
    fn empty_data_delivered_nothing() {
        assert_eq!(delivered(br#"{"created":1,"data":[]}"#).unwrap().images, 0);
    }

    #[test]
    fn odd_top_level_fields_are_ignored() {
        let d = delivered(br#"{"data":[{}],"size":1024,"quality":null,"usage":"n/a"}"#).unwrap();
        assert_eq!(
            d,
            Delivered {
                images: 1,
                ..Delivered::default()
            }
        );
    }

    #[test]
    fn no_data_array_is_none() {
        assert_eq!(delivered(b"not json"), None);
        assert_eq!(delivered(b""), None);
        assert_eq!(delivered(br#"{"created":1}"#), None);
        assert_eq!(delivered(br#"{"data":null}"#), None);
        assert_eq!(delivered(br#"{"data":{"url":"x"}}"#), None);
        assert_eq!(delivered(br#"[{"url":"x"}]"#), None);
        assert_eq!(
            delivered(br#"{"error":{"message":"Your request was rejected","type":"image_generation_user_error"}}"#),
            None
        );
    }
}
