//! The output-token limit of a request, in each client protocol's own field. Read to size
//! the reservation; lowered when the key can only afford less (see `billing`).

use crate::protocol::Protocol;
use serde_json::{Map, Value};

const GEMINI_SPELLINGS: [(&str, &str); 2] = [
    ("generationConfig", "maxOutputTokens"),
    ("generation_config", "max_output_tokens"),
];

/// The members a chat request names its output limit in.
pub const CHAT_FIELDS: &[&str] = &["max_completion_tokens", "max_tokens"];

pub fn requested(protocol: Protocol, body: &Value) -> Option<u64> {
    match protocol {
        Protocol::Chat => {
            let a = body.get("max_completion_tokens").and_then(Value::as_u64);
            let b = body.get("max_tokens").and_then(Value::as_u64);
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Protocol::Messages => body.get("max_tokens").and_then(Value::as_u64),
        Protocol::Responses => body.get("max_output_tokens").and_then(Value::as_u64),
        // The API takes both spellings (its REST examples use snake case).
        Protocol::Gemini => GEMINI_SPELLINGS.iter().find_map(|(config, field)| {
            body.get(*config)
                .and_then(|g| g.get(*field))
                .and_then(Value::as_u64)
        }),
    }
}

/// Lowers (never raises) the request's output limit to `cap`, adding the field if absent.
pub fn cap(protocol: Protocol, body: &mut Value, cap: u64) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    match protocol {
        Protocol::Chat => {
            let mut any = false;
            for f in ["max_completion_tokens", "max_tokens"] {
                if let Some(v) = obj.get_mut(f) {
                    lower(v, cap);
                    any = true;
                }
            }
            if !any {
                // The field every current chat model accepts (reasoning models refuse max_tokens).
                obj.insert("max_completion_tokens".into(), cap.into());
            }
        }
        Protocol::Messages => set_lower(obj, "max_tokens", cap),
        Protocol::Responses => set_lower(obj, "max_output_tokens", cap),
        Protocol::Gemini => {
            // Lower the limit where the client wrote it; add it in camel case otherwise.
            let (config, field) = GEMINI_SPELLINGS
                .iter()
                .copied()
                .find(|(c, f)| obj.get(*c).is_some_and(|g| g.get(*f).is_some()))
                .or_else(|| {
                    GEMINI_SPELLINGS
                        .iter()
                        .copied()
                        .find(|(c, _)| obj.get(*c).is_some_and(Value::is_object))
                })
                .unwrap_or(GEMINI_SPELLINGS[0]);
            let g = obj
                .entry(config)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(g) = g.as_object_mut() {
                set_lower(g, field, cap);
            }
        }
    }
}

fn set_lower(obj: &mut Map<String, Value>, field: &str, cap: u64) {
    match obj.get_mut(field) {
        Some(v) => lower(v, cap),
        None => {
            obj.insert(field.into(), cap.into());
        }
    }
}

fn lower(v: &mut Value, cap: u64) {
    if v.as_u64().is_none_or(|cur| cur > cap) {
        *v = cap.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_fields() {
        let mut b = json!({"max_tokens": 500});
        assert_eq!(requested(Protocol::Chat, &b), Some(500));
        cap(Protocol::Chat, &mut b, 100);
        assert_eq!(b, json!({"max_tokens": 100}));
        let mut b = json!({});
        cap(Protocol::Chat, &mut b, 7);
        assert_eq!(b, json!({"max_completion_tokens": 7}));
        let mut b = json!({"max_completion_tokens": 5});
        cap(Protocol::Chat, &mut b, 7);
        assert_eq!(b, json!({"max_completion_tokens": 5}), "never raised");
    }

    #[test]
    fn other_protocols() {
        let mut g = json!({"contents": []});
        cap(Protocol::Gemini, &mut g, 9);
        assert_eq!(requested(Protocol::Gemini, &g), Some(9));
        let mut m = json!({"max_tokens": 1000});
        cap(Protocol::Messages, &mut m, 10);
        assert_eq!(requested(Protocol::Messages, &m), Some(10));
        let mut g = json!({"generation_config": {"max_output_tokens": 50}});
        assert_eq!(requested(Protocol::Gemini, &g), Some(50));
        cap(Protocol::Gemini, &mut g, 9);
        assert_eq!(g, json!({"generation_config": {"max_output_tokens": 9}}));
        let mut g = json!({"generation_config": {"temperature": 1}});
        cap(Protocol::Gemini, &mut g, 9);
        assert_eq!(
            g,
            json!({"generation_config": {"temperature": 1, "max_output_tokens": 9}})
        );
        let mut r = json!({});
        cap(Protocol::Responses, &mut r, 3);
        assert_eq!(requested(Protocol::Responses, &r), Some(3));
    }
}
