//! The value of an output-limit member, shared by the protocols' typed request views
//! (`chat::wire`, `messages::wire`, `gemini::wire`, `responses::wire`), and the edit of a
//! parsed body through one of them.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// An output limit (or a count) as the client wrote it: a token count, or anything else
/// (`null`, which validation lets through), kept as it came so a round trip changes
/// nothing the gateway did not mean to change.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    Tokens(u64),
    Other(Value),
}

impl Limit {
    pub fn tokens(&self) -> Option<u64> {
        match self {
            Limit::Tokens(n) => Some(*n),
            Limit::Other(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Limit, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(match v.as_u64() {
            Some(n) => Limit::Tokens(n),
            None => Limit::Other(v),
        })
    }
}

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Limit::Tokens(n) => n.serialize(s),
            Limit::Other(v) => v.serialize(s),
        }
    }
}

/// The tokens of an optional member (absent, `null` or not a count: `None`).
pub fn tokens(slot: &Option<Limit>) -> Option<u64> {
    slot.as_ref().and_then(Limit::tokens)
}

/// A member that is present, even as `null` (`Option`'s own impl would read `null` as
/// absent and drop it on the way out). Use with `#[serde(default)]`.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A string member (the model) borrowed from the body's text when it has no escapes:
/// serde's own `Cow` reading always copies. `null` reads as absent, as `Option`'s own
/// impl reads it. Use with `#[serde(borrow, default)]`.
pub fn borrowed<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'a, str>>, D::Error> {
    struct V<'a>(std::marker::PhantomData<&'a ()>);
    impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
        type Value = Option<Cow<'a, str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(s)))
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(s.to_string())))
        }
        fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(s)))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_str(self)
        }
    }
    d.deserialize_option(V(std::marker::PhantomData))
}

/// Lowers (never raises) a limit to `cap`; a member that is absent or not a count gets
/// `cap`.
pub fn lower(slot: &mut Option<Limit>, cap: u64) {
    if tokens(slot).is_none_or(|cur| cur > cap) {
        *slot = Some(Limit::Tokens(cap));
    }
}

/// Edits a parsed body through its protocol's typed view: the body is read into `T`,
/// changed by `f`, and written back. A body that does not fit the view (validation lets
/// none through) is an error, never a body relayed without its limit.
pub fn edit<T: Deserialize<'static> + Serialize>(
    body: &mut Value,
    f: impl FnOnce(&mut T),
) -> Result<(), serde_json::Error> {
    let order = key_order(body);
    let mut view = T::deserialize(std::mem::take(body))?;
    f(&mut view);
    *body = serde_json::to_value(&view)?;
    reorder(body, &order);
    Ok(())
}

/// The member names of an object and of the objects in it, in order.
type KeyOrder = Vec<(String, Vec<String>)>;

fn key_order(body: &Value) -> KeyOrder {
    let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect());
    body.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), keys(v).unwrap_or_default()))
        .collect()
}

/// Puts the members of a serialized view back in the order the client wrote them, two
/// levels deep (a view writes its typed members first); added members come last.
fn reorder(body: &mut Value, order: &KeyOrder) {
    fn sorted<'k>(obj: &mut Map<String, Value>, names: impl Iterator<Item = &'k String>) {
        let mut out = Map::new();
        for k in names {
            if let Some((k, v)) = obj.remove_entry(k) {
                out.insert(k, v);
            }
        }
        out.append(obj);
        *obj = out;
    }
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    for (k, inner) in order {
        if let Some(Value::Object(o)) = obj.get_mut(k) {
            sorted(o, inner.iter());
        }
    }
    sorted(obj, order.iter().map(|(k, _)| k));
}

#[cfg(test)]
pub mod testing {
    use crate::protocol::{parse_request, set_output_limit, Protocol};
    use serde_json::value::RawValue;
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// Every top-level member of the JSON text `before` but those in `changed` is in
    /// `after` with the same raw text, byte for byte; `after` has no member `before`
    /// lacks outside `changed`.
    pub fn same_text_except(before: &str, after: &str, changed: &[&str]) {
        let b: BTreeMap<String, &RawValue> = serde_json::from_str(before).unwrap();
        let a: BTreeMap<String, &RawValue> = serde_json::from_str(after).unwrap();
        for (k, v) in &b {
            if changed.contains(&k.as_str()) {
                continue;
            }
            let out = a.get(k).unwrap_or_else(|| panic!("{k} lost"));
            assert_eq!(out.get(), v.get(), "{k} changed");
        }
        for k in a.keys() {
            assert!(
                b.contains_key(k) || changed.contains(&k.as_str()),
                "{k} appeared"
            );
        }
    }

    /// The relay's path for a request text: parsed and validated, its output limit
    /// lowered to `cap` through the protocol's typed view, and written again.
    pub fn relayed(p: Protocol, text: &str, cap: u64, chat_field: &str) -> String {
        let mut v = parse_request(p, text.as_bytes()).unwrap();
        set_output_limit(p, &mut v, cap, chat_field).unwrap();
        serde_json::to_string(&v).unwrap()
    }

    /// Every member of `before` but those in `changed` is in `after` with the same
    /// value, written the same way, and `after` has no member `before` lacks outside
    /// `changed`. `path` names the object in the messages.
    pub fn same_except(before: &Value, after: &Value, changed: &[&str], path: &str) {
        let (b, a) = (before.as_object().unwrap(), after.as_object().unwrap());
        for (k, v) in b {
            if changed.contains(&k.as_str()) {
                continue;
            }
            let out = a.get(k).unwrap_or_else(|| panic!("{path}.{k} lost"));
            assert_eq!(
                serde_json::to_string(out).unwrap(),
                serde_json::to_string(v).unwrap(),
                "{path}.{k} changed"
            );
        }
        let kept = |o: &serde_json::Map<String, Value>| -> Vec<String> {
            o.keys()
                .filter(|k| !changed.contains(&k.as_str()))
                .cloned()
                .collect()
        };
        assert_eq!(kept(a), kept(b), "{path}: members reordered");
        for k in a.keys() {
            assert!(
                b.contains_key(k) || changed.contains(&k.as_str()),
                "{path}.{k} appeared"
            );
        }
    }
}
