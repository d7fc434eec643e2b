//! A chat answer's `usage` read straight from its raw text: the same figures as
//! [`super::usage_of`] on the parsed value, without building that value (a map of owned
//! strings, for a handful of numbers). Every answer and the last event of every stream pass
//! through here.

use super::super::Usage;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// `usage` from its raw JSON; zeros for what is not an object, and for each figure that
/// is absent or not a whole number (as `usage_of` reads them).
pub fn usage_raw(raw: &RawValue) -> Usage {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    (&mut de).deserialize_any(Top).unwrap_or_default()
}

/// A number read as `Value::as_u64` reads it: anything else is 0.
struct Count(u64);

impl<'de> de::Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        d.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
        Ok(Count(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
        Ok(Count(u64::try_from(v).unwrap_or(0)))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Count, E> {
        Ok(Count(0))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
        Ok(Count(0))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Count, E> {
        Ok(Count(0))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
        Ok(Count(0))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Count, A::Error> {
        while s.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Count(0))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Count, A::Error> {
        while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count(0))
    }
}

/// The counts of a details object (`prompt_tokens_details`, `completion_tokens_details`)
/// the gateway reads: zeros when the details are not an object or lack them.
#[derive(Default)]
struct Details {
    cached: u64,
    reasoning: u64,
    audio: u64,
}

impl<'de> de::Deserialize<'de> for Details {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Details, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Details;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Details, A::Error> {
                let mut d = Details::default();
                while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    let field = match k.as_ref() {
                        "cached_tokens" => &mut d.cached,
                        "reasoning_tokens" => &mut d.reasoning,
                        "audio_tokens" => &mut d.audio,
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *field = m.next_value::<Count>()?.0;
                }
                Ok(d)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Details, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Details::default())
            }
        }
        d.deserialize_any(V)
    }
}

struct Top;

impl<'de> Visitor<'de> for Top {
    type Value = Usage;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a usage object")
    }
    /// Each member as it comes; a repeated one counts as its last (as a parsed object).
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Usage, A::Error> {
        let mut u = Usage::default();
        while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            match k.as_ref() {
                "prompt_tokens" => u.input_tokens = m.next_value::<Count>()?.0,
                "completion_tokens" => u.output_tokens = m.next_value::<Count>()?.0,
                "prompt_tokens_details" => {
                    let d = m.next_value::<Details>()?;
                    u.cached_input_tokens = d.cached;
                    u.audio_input_tokens = d.audio;
                }
                "completion_tokens_details" => {
                    let d = m.next_value::<Details>()?;
                    u.reasoning_tokens = d.reasoning;
                    u.audio_output_tokens = d.audio;
                }
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Every shape of `usage` reads as the parsed value reads: numbers of every kind,
    /// members missing, repeated, escaped or of another type, details of every type,
    /// and what is not an object at all.
    #[test]
    fn the_raw_reading_matches_the_parsed_one() {
        let cases = [
            r#"{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}"#,
            r#"{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":1,"x":[1,{"a":2}]}}"#,
            r#"{"prompt_tokens":-1,"completion_tokens":2.5,"prompt_tokens_details":null,"completion_tokens_details":[1]}"#,
            r#"{"prompt_tokens":"7","completion_tokens":true,"prompt_tokens_details":"x","completion_tokens_details":{"reasoning_tokens":"2"}}"#,
            r#"{"prompt_tokens":1,"prompt_tokens":9,"completion_tokens":{"n":1},"completion_tokens":[2]}"#,
            r#"{"prompt_tokens_details":{"cached_tokens":4,"cached_tokens":5},"prompt_tokens_details":{"other":1}}"#,
            r#"{"prompt\u005ftokens":11,"completion_tokens":18446744073709551615,"extra":{"deep":[[[]]]}}"#,
            r#"{"prompt_tokens":1e3,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":-3}}"#,
            r#"{"prompt_tokens":90,"completion_tokens":40,"prompt_tokens_details":{"audio_tokens":30,"cached_tokens":8,"audio_tokens":31},"completion_tokens_details":{"audio_tokens":20,"reasoning_tokens":5,"accepted_prediction_tokens":2}}"#,
            r#"{"prompt_tokens_details":{"audio_tokens":"3","reasoning_tokens":4},"completion_tokens_details":{"cached_tokens":6,"audio_tokens":null}}"#,
            r#"{}"#,
            r#"null"#,
            r#"[1,2]"#,
            r#""usage""#,
            r#"42"#,
        ];
        for case in cases {
            let raw: Box<RawValue> = serde_json::from_str(case).unwrap();
            let parsed: Value = serde_json::from_str(case).unwrap();
            assert_eq!(usage_raw(&raw), super::super::usage_of(&parsed), "{case}");
        }
        let raw: Box<RawValue> = serde_json::from_str(cases[8]).unwrap();
        let u = usage_raw(&raw);
        let want = Usage {
            input_tokens: 90,
            output_tokens: 40,
            cached_input_tokens: 8,
            audio_input_tokens: 31,
            reasoning_tokens: 5,
            audio_output_tokens: 20,
            ..Usage::default()
        };
        assert_eq!(u, want);
    }
}
