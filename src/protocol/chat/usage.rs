//! A chat answer's `usage` read straight from its raw text: the same figures as
//! [`super::usage_of`] on the parsed value, without building that value (a map of owned
//! strings, for five numbers). Every answer and the last event of every stream pass
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

/// One member of a details object (`cached_tokens` of `prompt_tokens_details`): 0 when
/// the details are not an object or lack it.
struct Detail<const WHICH: u8>(u64);

/// The member a [`Detail`] reads.
const CACHED: u8 = 0;
const REASONING: u8 = 1;

impl<'de, const WHICH: u8> de::Deserialize<'de> for Detail<WHICH> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Detail<WHICH>, D::Error> {
        struct V<const W: u8>;
        impl<'de, const W: u8> Visitor<'de> for V<W> {
            type Value = Detail<W>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Detail<W>, A::Error> {
                let name = if W == CACHED {
                    "cached_tokens"
                } else {
                    "reasoning_tokens"
                };
                let mut n = 0;
                while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    if k == name {
                        n = m.next_value::<Count>()?.0;
                    } else {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Detail(n))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Detail<W>, E> {
                Ok(Detail(0))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Detail<W>, E> {
                Ok(Detail(0))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Detail<W>, E> {
                Ok(Detail(0))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Detail<W>, E> {
                Ok(Detail(0))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Detail<W>, E> {
                Ok(Detail(0))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Detail<W>, E> {
                Ok(Detail(0))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Detail<W>, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Detail(0))
            }
        }
        d.deserialize_any(V::<WHICH>)
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
                    u.cached_input_tokens = m.next_value::<Detail<CACHED>>()?.0
                }
                "completion_tokens_details" => {
                    u.reasoning_tokens = m.next_value::<Detail<REASONING>>()?.0
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
        let raw: Box<RawValue> = serde_json::from_str(cases[1]).unwrap();
        let u = usage_raw(&raw);
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cached_input_tokens,
                u.reasoning_tokens
            ),
            (7, 3, 2, 1)
        );
    }
}
