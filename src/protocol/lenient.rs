//! The pieces of the typed views the protocols read upstream answers through (usage,
//! choices and candidates, content blocks, tool calls, stream events, errors).
//!
//! An answer is read as a lookup in a parsed tree would read it: a member of the wrong
//! type reads as absent (a count as 0), a repeated member as its last, and nothing but
//! text that is not JSON is an error. A misspelt member name, though, no longer compiles.
//! Each view reads from the raw text (borrowing strings without escapes) or from a parsed
//! [`serde_json::Value`] alike.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// Implements `visit_*` for every kind of JSON value but those a view reads: each gives
/// `$default` (arrays and objects are skipped to their end).
macro_rules! others_are {
    ($out:ty, $default:expr; $($kind:ident)*) => {
        $($crate::protocol::lenient::others_are!(@one $kind, $out, $default);)*
    };
    (@one bool, $out:ty, $default:expr) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<$out, E> {
            Ok($default)
        }
    };
    (@one num, $out:ty, $default:expr) => {
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<$out, E> {
            Ok($default)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<$out, E> {
            Ok($default)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<$out, E> {
            Ok($default)
        }
    };
    (@one str, $out:ty, $default:expr) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<$out, E> {
            Ok($default)
        }
    };
    (@one null, $out:ty, $default:expr) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<$out, E> {
            Ok($default)
        }
    };
    (@one seq, $out:ty, $default:expr) => {
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<$out, A::Error> {
            while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok($default)
        }
    };
    (@one map, $out:ty, $default:expr) => {
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<$out, A::Error> {
            while m.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
            Ok($default)
        }
    };
}
pub(crate) use others_are;

/// Declares a read-only view of a JSON object: a struct of the members named (each under
/// its wire name), read leniently ([module docs](self)); unknown members are skipped, and
/// a value that is not an object reads as the default (every member absent).
macro_rules! view {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident $(<$lt:lifetime>)? {
            $($(#[$fmeta:meta])* $field:ident : $ty:ty = $key:literal),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, PartialEq)]
        $vis struct $name $(<$lt>)? {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl<'de $(: $lt, $lt)?> serde::Deserialize<'de> for $name $(<$lt>)? {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V $(<$lt>)? (std::marker::PhantomData<$name $(<$lt>)?>);
                impl<'de $(: $lt, $lt)?> serde::de::Visitor<'de> for V $(<$lt>)? {
                    type Value = $name $(<$lt>)?;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " object"))
                    }
                    /// Each member as it comes; a repeated one counts as its last.
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut m: A,
                    ) -> Result<Self::Value, A::Error> {
                        let mut out = <Self::Value as Default>::default();
                        while let Some(k) = m.next_key::<$crate::protocol::shallow::Name<'de>>()? {
                            match k.0.as_ref() {
                                $($key => out.$field = m.next_value()?,)*
                                _ => {
                                    m.next_value::<serde::de::IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                    $crate::protocol::lenient::others_are!(
                        Self::Value, <Self::Value as Default>::default(); bool num str null seq
                    );
                }
                d.deserialize_any(V(std::marker::PhantomData))
            }
        }
    };
}
pub(crate) use view;

/// A count as `Value::as_u64` reads it: a whole number from 0 up, otherwise (a string,
/// a fraction, a negative number, anything else) `None`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Count(pub Option<u64>);

impl Count {
    /// The count, 0 when there is none.
    pub fn get(self) -> u64 {
        self.0.unwrap_or(0)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a count")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Count, E> {
                Ok(Count(None))
            }
            others_are!(Count, Count(None); bool str null seq map);
        }
        d.deserialize_any(V)
    }
}

/// A string as `Value::as_str` reads it (anything else: `None`), borrowed when its
/// text has no escapes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Option<Cow<'a, str>>);

impl Text<'_> {
    pub fn as_str(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// The string, empty when there is none.
    pub fn or_empty(&self) -> &str {
        self.as_str().unwrap_or("")
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'a>, D::Error> {
        struct V<'a>(PhantomData<Text<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(s.to_string()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(s))))
            }
            others_are!(Text<'a>, Text(None); bool num null seq map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A boolean as `Value::as_bool` reads it (anything else: `None`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Flag, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a boolean")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Flag, E> {
                Ok(Flag(Some(b)))
            }
            others_are!(Flag, Flag(None); num str null seq map);
        }
        d.deserialize_any(V)
    }
}

/// An array read item by item as `T` (`None` when the value is not an array).
#[derive(Debug, Clone, PartialEq)]
pub struct List<T>(pub Option<Vec<T>>);

impl<T> Default for List<T> {
    fn default() -> List<T> {
        List(None)
    }
}

impl<T> List<T> {
    /// The items; none when the value was not an array.
    pub fn items(&self) -> &[T] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<List<T>, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<List<T>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = s.next_element::<T>()? {
                    items.push(item);
                }
                Ok(List(Some(items)))
            }
            others_are!(List<T>, List(None); bool num str null map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A member as it came: absent (the default), `null`, an object read as `T`, or a value
/// of another kind (skipped).
#[derive(Debug, Default, Clone, PartialEq)]
pub enum Member<T> {
    #[default]
    Absent,
    Null,
    Object(T),
    Other,
}

impl<T> Member<T> {
    /// The object, when the member is one.
    pub fn object(&self) -> Option<&T> {
        match self {
            Member::Object(t) => Some(t),
            _ => None,
        }
    }

    /// Present, whatever its value (`null` included).
    pub fn present(&self) -> bool {
        !matches!(self, Member::Absent)
    }

    /// Present and not `null`.
    pub fn set(&self) -> bool {
        !matches!(self, Member::Absent | Member::Null)
    }
}

impl<T: Default> Member<T> {
    /// The object, or `T` with every member absent (a lookup into what is not an
    /// object finds nothing).
    pub fn or_default(self) -> T {
        match self {
            Member::Object(t) => t,
            _ => T::default(),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Member<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Member<T>, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Member<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Member<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(m)).map(Member::Object)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Member<T>, E> {
                Ok(Member::Null)
            }
            others_are!(Member<T>, Member::Other; bool num str seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A member that is there, whatever its value (`null` included), read as `T`; `None`
/// when absent. For the members whose presence alone says something.
#[derive(Debug, Clone, PartialEq)]
pub struct Present<T>(pub Option<T>);

impl<T> Default for Present<T> {
    fn default() -> Present<T> {
        Present(None)
    }
}

impl<T> Present<T> {
    pub fn get(&self) -> Option<&T> {
        self.0.as_ref()
    }

    pub fn is_there(&self) -> bool {
        self.0.is_some()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Present<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Present<T>, D::Error> {
        T::deserialize(d).map(|t| Present(Some(t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    view! {
        struct Probe<'a> {
            n: Count = "n",
            s: Text<'a> = "s",
            b: Flag = "b",
            list: List<Count> = "list",
            inner: Member<Inner> = "inner",
        }
    }

    view! {
        struct Inner {
            n: Count = "n",
        }
    }

    /// Every kind of value, read from the raw text and from a parsed tree, gives what a
    /// lookup in the tree gives; a repeated member counts as its last.
    #[test]
    fn reads_as_a_lookup_in_a_parsed_tree() {
        let cases = [
            r#"{"n":7,"s":"a","b":true,"list":[1,"x",-2],"inner":{"n":3}}"#,
            r#"{"n":-1,"s":5,"b":"yes","list":{"a":1},"inner":null}"#,
            r#"{"n":1.5,"s":"caf\u00e9","b":null,"list":"x","inner":[1]}"#,
            r#"{"n":1,"n":"9","s":null,"s":"last","inner":{"n":1,"m":{"deep":[]}},"zz":[[{}]]}"#,
            r#"{"n\u0020":1,"inner":7}"#,
            r#"[1,2]"#,
            r#""text""#,
            r#"null"#,
        ];
        for case in cases {
            let v: Value = serde_json::from_str(case).unwrap();
            let raw: Probe<'_> = serde_json::from_str(case).unwrap();
            let tree = Probe::deserialize(&v).unwrap();
            assert_eq!(raw, tree, "{case}");
            assert_eq!(raw.n.0, v["n"].as_u64(), "{case}");
            assert_eq!(raw.s.as_str(), v["s"].as_str(), "{case}");
            assert_eq!(raw.b.0, v["b"].as_bool(), "{case}");
            let list = v["list"]
                .as_array()
                .map(|l| l.iter().map(|i| Count(i.as_u64())).collect::<Vec<_>>());
            assert_eq!(raw.list.0, list, "{case}");
            let inner = raw.inner.object().map(|i| i.n.0);
            assert_eq!(
                inner,
                v["inner"].is_object().then(|| v["inner"]["n"].as_u64())
            );
            assert_eq!(raw.inner.present(), v.get("inner").is_some(), "{case}");
            assert_eq!(raw.inner.set(), !v["inner"].is_null(), "{case}");
        }
        // Text without escapes is borrowed from the input.
        let text = r#"{"s":"plain"}"#;
        let p: Probe<'_> = serde_json::from_str(text).unwrap();
        assert!(matches!(p.s.0, Some(Cow::Borrowed("plain"))));
    }
}
