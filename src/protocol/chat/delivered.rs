//! The generated text a chat stream chunk carries, counted straight from its raw
//! `choices`, without building a tree of it: each choice's delta content (a string, or
//! parts with text), refusal, reasoning (`reasoning_content`, else `reasoning`) and tool
//! call arguments. A value of an unexpected type counts nothing and is never an error,
//! as a lookup in a parsed tree would give.

use crate::protocol::shallow::Name;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// Bytes of generated text in a chunk's raw `choices` member.
pub fn choices_bytes(choices: &RawValue) -> u64 {
    serde_json::from_str::<Each<Choice>>(choices.get()).map_or(0, |c| c.0)
}

/// Defines a value read leniently: the listed visits give a count, every other kind of
/// value counts 0 (its content skipped).
macro_rules! lenient {
    ($name:ident, $what:literal, { $($visits:tt)* }) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_bool<E: de::Error>(self, _: bool) -> Result<$name, E> {
                        Ok($name::default())
                    }
                    fn visit_i64<E: de::Error>(self, _: i64) -> Result<$name, E> {
                        Ok($name::default())
                    }
                    fn visit_u64<E: de::Error>(self, _: u64) -> Result<$name, E> {
                        Ok($name::default())
                    }
                    fn visit_f64<E: de::Error>(self, _: f64) -> Result<$name, E> {
                        Ok($name::default())
                    }
                    fn visit_unit<E: de::Error>(self) -> Result<$name, E> {
                        Ok($name::default())
                    }
                    $($visits)*
                }
                d.deserialize_any(V)
            }
        }
    };
}

/// Skips what is left of an array; counts 0.
macro_rules! skip_seq {
    ($name:ident) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<$name, A::Error> {
            while s.next_element::<IgnoredAny>()?.is_some() {}
            Ok($name::default())
        }
    };
}

/// Skips what is left of an object; counts 0.
macro_rules! skip_map {
    ($name:ident) => {
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<$name, A::Error> {
            while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($name::default())
        }
    };
}

/// Skips a string; counts 0.
macro_rules! skip_str {
    ($name:ident) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<$name, E> {
            Ok($name::default())
        }
    };
}

/// A string's length in bytes (after unescaping); `None` for anything else.
#[derive(Default)]
struct Text(Option<u64>);

lenient!(Text, "a string", {
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Text, E> {
        Ok(Text(Some(s.len() as u64)))
    }
    skip_seq!(Text);
    skip_map!(Text);
});

impl Text {
    fn bytes(&self) -> u64 {
        self.0.unwrap_or(0)
    }
}

/// The sum over an array's items; 0 for anything else.
struct Each<T>(u64, std::marker::PhantomData<T>);

impl<T> Each<T> {
    fn zero() -> Each<T> {
        Each(0, std::marker::PhantomData)
    }
}

trait Count {
    fn count(&self) -> u64;
}

impl<'de, T: Deserialize<'de> + Count> Deserialize<'de> for Each<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Count> Visitor<'de> for V<T> {
            type Value = Each<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Each<T>, A::Error> {
                let mut n = 0;
                while let Some(item) = s.next_element::<T>()? {
                    n += item.count();
                }
                Ok(Each(n, std::marker::PhantomData))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Each<T>, E> {
                Ok(Each::zero())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Each<T>, E> {
                Ok(Each::zero())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Each<T>, E> {
                Ok(Each::zero())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Each<T>, E> {
                Ok(Each::zero())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Each<T>, E> {
                Ok(Each::zero())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Each<T>, E> {
                Ok(Each::zero())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Each<T>, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Each::zero())
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// An object read for one member (`$field`, counted as `$inner`); anything else counts 0.
macro_rules! holder {
    ($name:ident, $what:literal, $field:literal, $inner:ty, $count:expr) => {
        #[derive(Default)]
        struct $name(u64);

        lenient!($name, $what, {
            skip_str!($name);
            skip_seq!($name);
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<$name, A::Error> {
                let mut n = 0;
                while let Some(k) = m.next_key::<Name>()? {
                    if k.0 == $field {
                        let v: $inner = m.next_value()?;
                        n += $count(&v);
                    } else {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
                Ok($name(n))
            }
        });

        impl Count for $name {
            fn count(&self) -> u64 {
                self.0
            }
        }
    };
}

holder!(Choice, "a choice", "delta", Delta, |d: &Delta| d.0);
holder!(Part, "a content part", "text", Text, Text::bytes);
holder!(Function, "a function call", "arguments", Text, Text::bytes);
holder!(Call, "a tool call", "function", Function, |f: &Function| f
    .0);

/// A delta's content: a string, or parts with text.
#[derive(Default)]
struct Content(u64);

lenient!(Content, "content", {
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
        Ok(Content(s.len() as u64))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Content, A::Error> {
        let mut n = 0;
        while let Some(p) = s.next_element::<Part>()? {
            n += p.0;
        }
        Ok(Content(n))
    }
    skip_map!(Content);
});

/// A choice's delta.
#[derive(Default)]
struct Delta(u64);

lenient!(Delta, "a delta", {
    skip_str!(Delta);
    skip_seq!(Delta);
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Delta, A::Error> {
        let (mut n, mut reasoning_content, mut reasoning) = (0, None, None);
        while let Some(k) = m.next_key::<Name>()? {
            match k.0.as_ref() {
                "content" => n += m.next_value::<Content>()?.0,
                "refusal" => n += m.next_value::<Text>()?.bytes(),
                "reasoning_content" => reasoning_content = m.next_value::<Text>()?.0,
                "reasoning" => reasoning = m.next_value::<Text>()?.0,
                "tool_calls" => n += m.next_value::<Each<Call>>()?.0,
                "function_call" => n += m.next_value::<Function>()?.0,
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Delta(n + reasoning_content.or(reasoning).unwrap_or(0)))
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// `reasoning_content`, else `reasoning`, looked up in the tree.
    fn reasoning_text(d: &Value) -> Option<&str> {
        d["reasoning_content"]
            .as_str()
            .or_else(|| d["reasoning"].as_str())
    }

    /// The same count from a parsed tree: what the stream relay counted before.
    fn from_tree(chunk: &Value) -> u64 {
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return 0;
        };
        let len = |v: &Value| v.as_str().map_or(0, str::len) as u64;
        let mut n = 0;
        for c in choices {
            let d = &c["delta"];
            n += len(&d["content"]) + len(&d["refusal"]);
            n += reasoning_text(d).map_or(0, str::len) as u64;
            if let Some(parts) = d["content"].as_array() {
                n += parts.iter().map(|p| len(&p["text"])).sum::<u64>();
            }
            if let Some(calls) = d["tool_calls"].as_array() {
                n += calls
                    .iter()
                    .map(|t| len(&t["function"]["arguments"]))
                    .sum::<u64>();
            }
            n += len(&d["function_call"]["arguments"]);
        }
        n
    }

    #[test]
    fn counts_as_a_parsed_tree_does_whatever_the_shapes() {
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"content":"Hi there"}}]}"#,
            r#"{"choices":[{"delta":{"content":"caf\u00e9 \"q\""}},{"delta":{"refusal":"no"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"think","reasoning":"other longer"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"only this","reasoning_content":null}}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"ab"},{"text":5},"x",{"text":"cd"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}},{"function":null},7]}}]}"#,
            r#"{"choices":[{"delta":{"function_call":{"arguments":"{}"}}}]}"#,
            r#"{"choices":[{"delta":null},{"delta":"text"},3,null,{"delta":{"content":7,"refusal":[1]}}]}"#,
            r#"{"choices":{"delta":{"content":"not an array"}}}"#,
            r#"{"choices":"x"}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":3}}"#,
            r#"{"choices":[{"delta":{"content":"a","nested":{"content":"ignored"}},"message":{"content":"ignored"}}]}"#,
        ];
        for text in chunks {
            let v: Value = serde_json::from_str(text).unwrap();
            let raw: &RawValue = serde_json::from_str::<&RawValue>(text).unwrap();
            let top = crate::protocol::shallow::Shallow::object(raw).unwrap();
            let counted = top.get("choices").map_or(0, choices_bytes);
            assert_eq!(counted, from_tree(&v), "{text}");
        }
    }
}
