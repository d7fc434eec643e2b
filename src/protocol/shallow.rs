//! A JSON object read one level deep, borrowed from the body: each member's name and the
//! raw text of its value. Same-protocol requests are checked and relayed from this, so a
//! large body is never turned into a tree of owned strings and written out again: the
//! only copy is the body sent upstream, with the few members the gateway changes
//! rewritten in place.

use super::{invalid, Invalid};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// A member name: borrowed from the body unless it holds escapes.
pub(crate) struct Name<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The members of one JSON object, in order, as they came (duplicates included).
pub struct Shallow<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'de> Deserialize<'de> for Shallow<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Shallow<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Shallow<'de>, A::Error> {
                let mut members = Vec::with_capacity(m.size_hint().unwrap_or(8));
                while let Some((Name(k), v)) = m.next_entry::<Name<'de>, &'de RawValue>()? {
                    members.push((k, v));
                }
                Ok(Shallow { members })
            }
        }
        d.deserialize_map(V)
    }
}

/// The items of a JSON array, raw.
struct Items<'a>(Vec<&'a RawValue>);

impl<'de> Deserialize<'de> for Items<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Items<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Items<'de>, A::Error> {
                let mut v = Vec::with_capacity(s.size_hint().unwrap_or(8));
                while let Some(item) = s.next_element::<&'de RawValue>()? {
                    v.push(item);
                }
                Ok(Items(v))
            }
        }
        d.deserialize_seq(V)
    }
}

/// What kind of JSON value a raw value is, from its first character.
fn first(v: &RawValue) -> u8 {
    v.get().as_bytes().first().copied().unwrap_or(b' ')
}

impl<'a> Shallow<'a> {
    /// The body as an object, with the 400s of `parse_request` for anything else.
    pub fn parse(body: &'a [u8]) -> Result<Shallow<'a>, Invalid> {
        match serde_json::from_slice::<Shallow<'a>>(body) {
            Ok(s) => Ok(s),
            // Valid JSON that is not an object says so; anything else is not JSON.
            Err(e) => Err(match serde_json::from_slice::<de::IgnoredAny>(body) {
                Ok(_) => Invalid {
                    param: None,
                    message: "The request body must be a JSON object.".into(),
                },
                Err(_) => Invalid {
                    param: None,
                    message: format!("The request body is not valid JSON: {e}."),
                },
            }),
        }
    }

    /// An object member's raw value (the last one, as a parsed object would keep).
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// A small member parsed (flags, numbers, short strings); `None` when absent.
    pub fn value(&self, name: &str) -> Option<Value> {
        self.get(name)
            .and_then(|v| serde_json::from_str::<Value>(v.get()).ok())
    }

    pub fn is_object(v: &RawValue) -> bool {
        first(v) == b'{'
    }

    pub fn is_array(v: &RawValue) -> bool {
        first(v) == b'['
    }

    pub fn is_string(v: &RawValue) -> bool {
        first(v) == b'"'
    }

    pub fn is_null(v: &RawValue) -> bool {
        v.get() == "null"
    }

    /// The items of an array member, each raw.
    pub fn items(v: &'a RawValue) -> Option<Vec<&'a RawValue>> {
        serde_json::from_str::<Items<'a>>(v.get()).ok().map(|i| i.0)
    }

    /// An object item read one level deep.
    pub fn object(v: &'a RawValue) -> Option<Shallow<'a>> {
        if !Self::is_object(v) {
            return None;
        }
        serde_json::from_str::<Shallow<'a>>(v.get()).ok()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The object written back with `changes` applied: a member named there takes the
    /// new raw JSON text (added at the end when absent), every other member is copied
    /// as it came. Each name is written once, where it first appeared, with its last
    /// value (what parsing into an object and writing it out again would give).
    ///
    /// Linear in the number of members: one pass records each name's last value, one
    /// pass writes each name at its first place; both are hash lookups, never a scan of
    /// the members seen before.
    pub fn write(&self, changes: &[(&str, &str)], extra: usize) -> Vec<u8> {
        self.rewrite(changes, &[], extra)
    }

    /// As [`Shallow::write`], without the members named in `drop`.
    pub fn rewrite(&self, changes: &[(&str, &str)], drop: &[&str], extra: usize) -> Vec<u8> {
        if self.members.len() + changes.len() <= SMALL {
            self.rewrite_small(changes, drop, extra)
        } else {
            self.rewrite_hashed(changes, drop, extra)
        }
    }

    /// The room the rewritten object needs.
    fn capacity(&self, changes: &[(&str, &str)], extra: usize) -> usize {
        self.members
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum::<usize>()
            + extra
            + changes
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + 2
    }

    /// [`Shallow::rewrite`] by scans, for the few members of a typical body or answer:
    /// a handful of short comparisons cost less than hashing every name.
    fn rewrite_small(&self, changes: &[(&str, &str)], drop: &[&str], extra: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.capacity(changes, extra));
        out.push(b'{');
        let mut all = [""; SMALL];
        let mut n = 0;
        for name in self.members.iter().map(|(k, _)| k.as_ref()) {
            all[n] = name;
            n += 1;
        }
        for (name, _) in changes {
            all[n] = name;
            n += 1;
        }
        let names = &all[..n];
        for (i, name) in names.iter().enumerate() {
            if drop.contains(name) || names[..i].contains(name) {
                continue;
            }
            let value = match changes.iter().rev().find(|(n, _)| n == name) {
                Some((_, v)) => *v,
                None => match self.get(name) {
                    Some(v) => v.get(),
                    None => continue,
                },
            };
            put(&mut out, name, value);
        }
        out.push(b'}');
        out
    }

    fn rewrite_hashed(&self, changes: &[(&str, &str)], drop: &[&str], extra: usize) -> Vec<u8> {
        let mut last: HashMap<&str, &str> = HashMap::with_capacity(self.members.len());
        for (k, v) in &self.members {
            last.insert(k, v.get());
        }
        for (n, v) in changes {
            last.insert(n, v);
        }
        for n in drop {
            last.remove(n);
        }
        let mut out = Vec::with_capacity(self.capacity(changes, extra));
        out.push(b'{');
        let names = self.members.iter().map(|(k, _)| k.as_ref());
        for name in names.chain(changes.iter().map(|(n, _)| *n)) {
            // Taken out once written: a later duplicate finds nothing.
            if let Some(value) = last.remove(name) {
                put(&mut out, name, value);
            }
        }
        out.push(b'}');
        out
    }
}

/// Members (and changes) up to which [`Shallow::rewrite`] scans instead of hashing.
const SMALL: usize = 16;

/// Writes one member after the `{` or the members already in `out`.
fn put(out: &mut Vec<u8>, name: &str, value: &str) {
    if out.len() > 1 {
        out.push(b',');
    }
    // A member name is a JSON string; writing one cannot fail.
    let _ = serde_json::to_writer(&mut *out, name);
    out.push(b':');
    out.extend_from_slice(value.as_bytes());
}

/// `model` as the JSON protocols require it: a non-empty string.
pub fn check_model(top: &Shallow<'_>) -> Result<(), Invalid> {
    match top.value("model") {
        Some(Value::String(m)) if !m.is_empty() => Ok(()),
        Some(_) => Err(invalid("model", "`model` must be a non-empty string.")),
        None => Err(invalid("model", "`model` is required.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scanning and the hashing rewrite give the same bytes, duplicates, changes of
    /// present and absent members, and dropped members included.
    #[test]
    fn the_small_rewrite_writes_what_the_hashed_one_does() {
        let bodies = [
            r#"{}"#,
            r#"{"model":"a","n":1}"#,
            r#"{"model":"a","n":1,"model":"b","x":[1,{"y":2}],"n":3}"#,
            r#"{"stream":true,"usage":{"a":1},"model":"m","k\u0065y":"v","key":"w"}"#,
        ];
        let changes: &[&[(&str, &str)]] = &[
            &[],
            &[("model", "\"c\"")],
            &[("new", "1"), ("model", "2"), ("new", "3")],
        ];
        let drops: &[&[&str]] = &[&[], &["usage", "n"], &["model"], &["new"]];
        for body in bodies {
            let s = Shallow::parse(body.as_bytes()).unwrap();
            for c in changes {
                for d in drops {
                    let small = String::from_utf8(s.rewrite_small(c, d, 0)).unwrap();
                    let hashed = String::from_utf8(s.rewrite_hashed(c, d, 0)).unwrap();
                    assert_eq!(small, hashed, "{body} {c:?} {d:?}");
                    let parsed: Value = serde_json::from_str(&small).unwrap();
                    assert!(parsed.is_object());
                }
            }
        }
    }

    #[test]
    fn reads_one_level_and_writes_back_with_changes() {
        let body =
            br#"{"model":"a","messages":[{"role":"user","content":"x\"y"}],"n":1,"k\u0065y":2}"#;
        let s = Shallow::parse(body).unwrap();
        assert_eq!(s.get("n").unwrap().get(), "1");
        assert_eq!(
            s.get("key").unwrap().get(),
            "2",
            "escaped names are decoded"
        );
        let msgs = Shallow::items(s.get("messages").unwrap()).unwrap();
        let m = Shallow::object(msgs[0]).unwrap();
        assert_eq!(m.get("content").unwrap().get(), r#""x\"y""#);
        let out = s.write(
            &[
                ("model", "\"b\""),
                ("stream_options", "{\"include_usage\":true}"),
            ],
            0,
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["model"], "b");
        assert_eq!(v["messages"][0]["content"], "x\"y");
        assert_eq!(v["key"], 2);
        assert_eq!(v["stream_options"]["include_usage"], true);
        let mut expected: Value = serde_json::from_slice(body).unwrap();
        expected["model"] = "b".into();
        expected["stream_options"] = serde_json::json!({"include_usage": true});
        assert_eq!(v, expected);
    }

    #[test]
    fn duplicates_keep_the_first_place_and_the_last_value() {
        let s = Shallow::parse(br#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(s.write(&[], 0), br#"{"a":3,"b":2}"#);
        let v: Value = serde_json::from_slice(br#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(serde_json::to_vec(&v).unwrap(), br#"{"a":3,"b":2}"#);
    }

    /// 100,000 tiny members (1 MiB): read, checked and written back whole. Each member is
    /// visited a fixed number of times (a hash lookup each), so the work grows with the
    /// body; comparing each member with every earlier one took 5·10⁹ comparisons here
    /// (minutes: the suite's time shows it). How fast it is, is the micro bench's to say,
    /// not a timed assertion's (a busy machine made one fail).
    #[test]
    fn a_body_of_many_members_costs_time_in_proportion_to_its_size() {
        let mut body = String::from(r#"{"model":"m","messages":[{"role":"user","content":"x"}]"#);
        for i in 0..100_000 {
            body.push_str(&format!(",\"k{i:05}\":1"));
        }
        body.push('}');
        assert!(body.len() > 1_000_000);
        let top = Shallow::parse(body.as_bytes()).unwrap();
        crate::protocol::chat::validate_shallow(&top).unwrap();
        let out = top.write(&[("model", "\"up\""), ("stream_options", "{}")], 0);
        assert_eq!(out.len(), body.len() + 1 + r#","stream_options":{}"#.len());
    }

    #[test]
    fn errors_match_a_full_parse() {
        let e = Shallow::parse(b"[1,2]").err().unwrap();
        assert_eq!(e.message, "The request body must be a JSON object.");
        let e = Shallow::parse(b"{\"a\":").err().unwrap();
        assert!(
            e.message.starts_with("The request body is not valid JSON"),
            "{}",
            e.message
        );
        let e = Shallow::parse(b"{\"a\":tru}").err().unwrap();
        assert!(e.message.starts_with("The request body is not valid JSON"));
    }
}
