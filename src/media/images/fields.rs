//! Typed reads of request fields, each failing with a 400 that names the field.

use crate::protocol::Invalid;
use serde_json::{Map, Value};
use std::ops::RangeInclusive;

pub(super) fn invalid(param: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        param: Some(param.into()),
        message: message.into(),
    }
}

/// A field that is set: JSON `null` counts as absent, as the OpenAI SDKs send `null` for
/// "not given" and the upstream API treats it so.
pub(super) fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// `obj[key]` as a string when set; `param` is the name the 400 carries.
pub(super) fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    param: &str,
) -> Result<Option<&'a str>, Invalid> {
    match present(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(param, format!("`{param}` must be a string."))),
    }
}

pub(super) fn opt_bool(
    obj: &Map<String, Value>,
    key: &str,
    param: &str,
) -> Result<Option<bool>, Invalid> {
    match present(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(param, format!("`{param}` must be a boolean."))),
    }
}

/// An integer within `range` when set. `2.0` and `"2"` are not integers: the upstream
/// APIs reject both, so the gateway does before anything is reserved.
pub(super) fn opt_int(
    obj: &Map<String, Value>,
    key: &str,
    param: &str,
    range: RangeInclusive<i64>,
) -> Result<Option<i64>, Invalid> {
    let Some(value) = present(obj, key) else {
        return Ok(None);
    };
    match value.as_i64() {
        Some(i) if range.contains(&i) => Ok(Some(i)),
        _ => Err(invalid(
            param,
            format!(
                "`{param}` must be an integer from {} to {}.",
                range.start(),
                range.end()
            ),
        )),
    }
}

/// `value` is one of `allowed`; the message lists them, `whom` says for which model.
pub(super) fn one_of(
    value: &str,
    allowed: &[&str],
    param: &str,
    whom: &str,
) -> Result<(), Invalid> {
    if allowed.contains(&value) {
        return Ok(());
    }
    Err(invalid(
        param,
        format!("`{param}` must be one of {}{whom}.", listing(allowed)),
    ))
}

/// `a`, `b`, `c`: how allowed values are listed in messages.
pub(super) fn listing(values: &[&str]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
    quoted.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("test bodies are objects"),
        }
    }

    #[test]
    fn null_counts_as_absent() {
        let o = obj(json!({"a": null, "b": 1}));
        assert!(present(&o, "a").is_none());
        assert!(present(&o, "missing").is_none());
        assert_eq!(present(&o, "b"), Some(&json!(1)));
        assert_eq!(opt_str(&o, "a", "a"), Ok(None));
        assert_eq!(opt_int(&o, "a", "a", 1..=10), Ok(None));
        assert_eq!(opt_bool(&o, "a", "a"), Ok(None));
    }

    #[test]
    fn integers_are_typed_and_bounded() {
        let o = obj(json!({"i": 3, "f": 3.0, "s": "3", "big": 18446744073709551615u64}));
        assert_eq!(opt_int(&o, "i", "i", 1..=10), Ok(Some(3)));
        for key in ["f", "s", "big"] {
            let err = opt_int(&o, key, key, 1..=10).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(key));
            assert!(err.message.contains("from 1 to 10"), "{}", err.message);
        }
        assert!(opt_int(&o, "i", "i", 4..=10).is_err());
    }

    #[test]
    fn strings_and_booleans_are_typed() {
        let o = obj(json!({"s": "x", "n": 1, "b": true}));
        assert_eq!(opt_str(&o, "s", "s"), Ok(Some("x")));
        assert_eq!(
            opt_str(&o, "n", "p.n").unwrap_err().param.as_deref(),
            Some("p.n")
        );
        assert_eq!(opt_bool(&o, "b", "b"), Ok(Some(true)));
        assert!(opt_bool(&o, "s", "s").is_err());
    }

    #[test]
    fn one_of_lists_the_allowed_values() {
        assert!(one_of("a", &["a", "b"], "x", "").is_ok());
        let err = one_of("c", &["a", "b"], "x", " for m").unwrap_err();
        assert_eq!(err.message, "`x` must be one of `a`, `b` for m.");
    }
}
