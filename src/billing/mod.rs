//! Prices, cost, and the reserve-then-settle cycle.
//!
//! Money is integer micro-USD ([`Micros`]) in the store; prices are kept as pico-USD per
//! token so that cheap models (0.075 USD per 1M tokens) stay exact. A request's cost is
//! rounded *up* to the next micro-USD, once, at the end.
//!
//! Why the cap holds (spec 2.1): before the upstream call the gateway reserves the
//! request's worst case (an upper bound on its input tokens plus its output limit), in one
//! atomic store operation. If the key cannot afford that worst case, the store grants what
//! is left and the gateway lowers the request's output limit to fit, so the real cost can
//! never exceed what was reserved. Settling replaces the reservation by the real cost
//! from the upstream's usage.

mod bill;
pub mod calendar;
mod guard;
mod keeper;
mod price;
pub mod raw;

pub use crate::store::bill::{Bill, Kind, Line};
pub use calendar::{Calendar, Clock};
pub use guard::{reserve, reserve_counted, Account, ReservationGuard, SettleOutcome};
pub use price::{Multiplier, Price, Rates, Tier, DEFAULT_MAX_OUTPUT_TOKENS};

use crate::store::Micros;

/// The smallest useful answer: below this, a request is refused rather than truncated.
pub const MIN_OUTPUT_TOKENS: u64 = 16;
/// Allowance per image part: an image URL is a few bytes of JSON but up to a few thousand
/// tokens for the model.
pub const IMAGE_TOKEN_ALLOWANCE: u64 = 3_000;

/// An upper bound on the prompt tokens of a request: every tokenizer the gateway fronts
/// emits at most one token per byte of text, the JSON around the text only adds bytes,
/// and each image part gets a fixed allowance.
pub fn input_token_bound(body: &[u8]) -> u64 {
    body.len() as u64 + image_parts(body) * IMAGE_TOKEN_ALLOWANCE + 64
}

/// Keys that make the object holding them an image part: chat's and responses'
/// `image_url`, generate-content's `inlineData`/`fileData` (any media: an upper bound).
const IMAGE_KEYS: [&[u8]; 5] = [
    b"image_url",
    b"inlineData",
    b"inline_data",
    b"fileData",
    b"file_data",
];
/// `type` values that make their object an image part: chat's `image_url`, responses'
/// `input_image`, messages' `image`.
const IMAGE_TYPES: [&[u8]; 3] = [b"image_url", b"input_image", b"image"];

/// The image parts of a JSON body, in every protocol the gateway fronts: the objects
/// holding an [`IMAGE_KEYS`] key or an [`IMAGE_TYPES`] `type`, each counted once. A byte
/// scan (memchr over quotes and braces) that steps over the inside of every string, so
/// text that says `"type":"image"` is never an image. At most one per object; objects
/// nested deeper than 64 count every marker they hold (still an upper bound).
fn image_parts(body: &[u8]) -> u64 {
    let mut parts = 0;
    let mut depth = 0usize;
    // Bit d: the object open at depth d (1-based) has been counted.
    let mut counted = 0u64;
    let mut after_type_key = false;
    let mut at = 0;
    while let Some(found) = memchr::memchr3(b'"', b'{', b'}', &body[at..]) {
        let i = at + found;
        match body[i] {
            b'{' => {
                depth += 1;
                if (1..=64).contains(&depth) {
                    counted &= !(1u64 << (depth - 1));
                }
                after_type_key = false;
                at = i + 1;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                after_type_key = false;
                at = i + 1;
            }
            _ => {
                let Some(end) = string_end(body, i + 1) else {
                    break;
                };
                let is_key = body[end + 1..]
                    .iter()
                    .find(|b| !b.is_ascii_whitespace())
                    .is_some_and(|b| *b == b':');
                let marks = if is_key {
                    let name = decoded(body, i, end);
                    after_type_key = *name == b"type"[..];
                    IMAGE_KEYS.contains(&&*name)
                } else {
                    let image = after_type_key && IMAGE_TYPES.contains(&&*decoded(body, i, end));
                    after_type_key = false;
                    image
                };
                if marks {
                    match depth {
                        1..=64 if counted & (1u64 << (depth - 1)) != 0 => {}
                        1..=64 => {
                            counted |= 1u64 << (depth - 1);
                            parts += 1;
                        }
                        _ => parts += 1,
                    }
                }
                at = end + 1;
            }
        }
    }
    parts
}

/// The index of the quote that closes the string whose content starts at `from`.
fn string_end(body: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        let i = at + memchr::memchr2(b'"', b'\\', body.get(at..)?)?;
        if body[i] == b'"' {
            return Some(i);
        }
        at = i + 2;
    }
}

/// The JSON string `body[open..=close]` (quotes included), decoded: borrowed unless it
/// holds an escape, which is rare in keys (`"image\u005furl"` is `image_url`). A string
/// that does not decode is left as written.
fn decoded(body: &[u8], open: usize, close: usize) -> std::borrow::Cow<'_, [u8]> {
    let raw = &body[open + 1..close];
    if memchr::memchr(b'\\', raw).is_none() {
        return raw.into();
    }
    match serde_json::from_slice::<String>(&body[open..=close]) {
        Ok(s) => s.into_bytes().into(),
        Err(_) => raw.into(),
    }
}

/// What to reserve for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Below this the request is refused (input bound plus the smallest useful answer).
    pub min: Micros,
    /// The worst case with the request's own output limit.
    pub max: Micros,
    pub input: Micros,
    pub output_tokens: u64,
}

impl Estimate {
    pub fn new(price: &Price, body: &[u8], requested_output: Option<u64>) -> Estimate {
        let output_tokens = requested_output.unwrap_or(price.max_output_tokens).max(1);
        let input = price.input_bound(body);
        Estimate {
            min: input.saturating_add(price.output_cost(output_tokens.min(MIN_OUTPUT_TOKENS))),
            max: input.saturating_add(price.output_cost(output_tokens)),
            input,
            output_tokens,
        }
    }

    /// The output limit that keeps the request within `granted`; `None` when the grant
    /// covers the request's own limit (nothing to rewrite).
    pub fn output_cap(&self, price: &Price, granted: Micros) -> Option<u64> {
        if granted >= self.max {
            return None;
        }
        let cap = price.affordable_output(granted - self.input);
        Some(cap.clamp(1, self.output_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::billing::raw::RawPrice;
    use crate::protocol::Usage;

    fn price(input: f64, output: f64, cached: Option<f64>) -> Price {
        Price::from_raw(&RawPrice {
            input: Some(input),
            output: Some(output),
            cached_input: cached,
            ..RawPrice::default()
        })
        .unwrap()
    }

    #[test]
    fn units_other_than_tokens() {
        let p = Price::from_raw(&RawPrice {
            per_image: [
                ("1024x1024".to_string(), 0.04),
                ("1024x1024/hd".into(), 0.08),
            ]
            .into_iter()
            .collect(),
            per_million_chars: Some(15.0),
            per_minute: Some(0.006),
            per_second: Some(0.1),
            ..RawPrice::default()
        })
        .unwrap();
        assert!(!p.per_token());
        assert_eq!(p.image("1024x1024", Some("hd")), Some(80_000));
        assert_eq!(p.image("1024x1024", Some("standard")), Some(40_000));
        assert_eq!(p.image("auto", None), Some(80_000));
        assert_eq!(p.image("1024x1024", Some("auto")), Some(80_000));
        assert_eq!(p.image("512x512", None), None);
        assert_eq!(p.chars(1000), Some(15_000));
        assert_eq!(p.seconds(60.0), Some(6_000));
        assert_eq!(p.seconds(0.5), Some(50));
        assert_eq!(p.video(4.0, 2), Some(800_000));
        assert_eq!(
            p.video(0.0001, 1),
            Some(100),
            "rounds up to the millisecond"
        );
        assert!(Price::from_raw(&RawPrice::default()).is_err());
    }

    #[test]
    fn cost_is_exact_and_rounds_up_once() {
        let p = price(0.15, 0.60, Some(0.075));
        let u = Usage {
            input_tokens: 1000,
            output_tokens: 500,
            cached_input_tokens: 200,
            ..Usage::default()
        };
        // 800*0.15 + 200*0.075 + 500*0.6 = 120 + 15 + 300 = 435 micro-USD
        assert_eq!(p.cost(&u), 435);
        let tiny = Usage {
            input_tokens: 1,
            ..Usage::default()
        };
        assert_eq!(p.cost(&tiny), 1, "0.15 micro-USD rounds up to 1");
        assert_eq!(p.cost(&Usage::default()), 0);
    }

    #[test]
    fn inconsistent_usage_never_underflows() {
        let p = price(1.0, 1.0, None);
        let u = Usage {
            input_tokens: 10,
            cached_input_tokens: 50,
            cache_creation_input_tokens: 50,
            ..Usage::default()
        };
        assert_eq!(p.cost(&u), 10);
    }

    #[test]
    fn estimate_bounds_and_cap() {
        let p = price(1.0, 2.0, None);
        let body = vec![b'a'; 936];
        let e = Estimate::new(&p, &body, Some(100));
        assert_eq!(e.input, 1000); // 936 + 64 tokens at 1 micro-USD each
        assert_eq!(e.max, 1200);
        assert_eq!(e.min, 1032);
        assert_eq!(e.output_cap(&p, 1200), None);
        assert_eq!(e.output_cap(&p, 1100), Some(50));
    }

    #[test]
    fn images_get_an_allowance() {
        let body = br#"{"content":[{"type":"image_url","image_url":{"url":"https://x"}}]}"#;
        assert_eq!(
            input_token_bound(body),
            body.len() as u64 + IMAGE_TOKEN_ALLOWANCE + 64
        );
    }

    #[test]
    fn each_protocol_s_image_parts_count_once() {
        for (body, parts) in [
            // chat: `type` and key in one part, twice.
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"high"}},{"image_url":{"url":"data:image/png;base64,AA"},"type":"image_url"}]}]}"#,
                2,
            ),
            // responses: by URL and by file id.
            (
                r#"{"input":[{"role":"user","content":[{"type":"input_text","text":"t"},{"type":"input_image","image_url":"https://x"},{"type" : "input_image","file_id":"file-1"}]}]}"#,
                2,
            ),
            // messages: the block, not its `source`.
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}},{"type":"text","text":"t"}]}]}"#,
                1,
            ),
            // generate-content, both spellings.
            (
                r#"{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA"}},{"file_data":{"file_uri":"gs://b/o"}},{"text":"t"}]}]}"#,
                2,
            ),
            // An escaped key is the key it decodes to.
            (r#"{"content":[{"image\u005furl":{"url":"u"}}]}"#, 1),
        ] {
            assert_eq!(image_parts(body.as_bytes()), parts, "{body}");
        }
    }

    #[test]
    fn text_is_never_an_image_part() {
        for body in [
            r#"{"input":"an image, an image, an image"}"#,
            r#"{"content":"image_url"}"#,
            r#"{"type":"text","text":"image"}"#,
            r#"{"content":"{\"type\":\"image\",\"image_url\":{}}"}"#,
            r#"{"content":"say \"image_url\" and \\"}"#,
            r#"{"a":"\"image_url\":"}"#,
            r#"{"content":"unterminated \"image_url\": "#,
        ] {
            assert_eq!(image_parts(body.as_bytes()), 0, "{body}");
            assert_eq!(input_token_bound(body.as_bytes()), body.len() as u64 + 64);
        }
    }

    proptest::proptest! {
        /// Whatever a text says (quotes, braces, escapes, the markers themselves), as a
        /// string value it adds no image allowance, in any of the protocols' text slots.
        #[test]
        fn no_text_counts_as_an_image(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "image", "image_url", "\"type\":\"image\"", "input_image", "inlineData",
                    "{", "}", "\"", "\\", ":", " ", "\u{1}", "é", "a",
                ]),
                0..24,
            ),
        ) {
            let text: String = pieces.concat();
            for body in [
                serde_json::json!({"messages": [{"role": "user", "content": text}]}),
                serde_json::json!({"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}),
                serde_json::json!({"input": text, "instructions": text}),
                serde_json::json!({"contents": [{"parts": [{"text": text}]}]}),
            ] {
                let raw = serde_json::to_vec(&body).unwrap();
                proptest::prop_assert_eq!(image_parts(&raw), 0, "{}", body);
            }
        }

        /// Every image part counts, whatever text surrounds it.
        #[test]
        fn every_image_part_counts(
            kinds in proptest::collection::vec(0usize..5, 0..12),
            text in "[a-z\"{}: ]{0,12}",
        ) {
            let part = |k: usize| match k {
                0 => serde_json::json!({"type": "image_url", "image_url": {"url": text}}),
                1 => serde_json::json!({"type": "input_image", "image_url": text}),
                2 => serde_json::json!({"type": "image", "source": {"type": "url", "url": text}}),
                3 => serde_json::json!({"inlineData": {"mimeType": "image/png", "data": text}}),
                _ => serde_json::json!({"type": "text", "text": text}),
            };
            let content: Vec<_> = kinds.iter().map(|k| part(*k)).collect();
            let body = serde_json::json!({"messages": [{"role": "user", "content": content}]});
            let images = kinds.iter().filter(|k| **k < 4).count() as u64;
            proptest::prop_assert_eq!(image_parts(&serde_json::to_vec(&body).unwrap()), images);
        }
    }
}
