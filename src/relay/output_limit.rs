//! The output-token limit of a request, in each client protocol's own field, and how
//! many answers it asks for. Read to size the reservation; then always written into the
//! request sent upstream, lowered to what the grant pays for (never raised above the
//! client's own), so no upstream writes more than was reserved.

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

/// How many answers a request asks for: chat `n`, generate-content `candidateCount`
/// (absent, null or 0: one). Each is billed, so each is reserved.
pub fn choices(protocol: Protocol, body: &Value) -> u64 {
    let n = match protocol {
        Protocol::Chat => body.get("n").and_then(Value::as_u64),
        Protocol::Gemini => ["generationConfig", "generation_config"]
            .iter()
            .find_map(|c| {
                let g = body.get(*c)?;
                g.get("candidateCount")
                    .or_else(|| g.get("candidate_count"))
                    .and_then(Value::as_u64)
            }),
        Protocol::Messages | Protocol::Responses => None,
    };
    n.unwrap_or(1).max(1)
}

/// Lowers (never raises) the request's output limit to `cap`, adding the field if absent.
/// `chat_field`: the member a chat upstream reads the limit from.
pub fn cap(protocol: Protocol, body: &mut Value, cap: u64, chat_field: &'static str) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    match protocol {
        Protocol::Chat => {
            let present = |f: &str| obj.get(f).and_then(Value::as_u64);
            for (f, v) in chat_plan(present, cap, chat_field) {
                obj.insert(f.into(), v.into());
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

/// The chat members to write so that a request carries at most `cap`: the limits the
/// client wrote are lowered in place; when it wrote none, `chat_field` is added. A
/// channel that reads only `max_tokens` always gets `max_tokens`.
pub fn chat_plan(
    present: impl Fn(&str) -> Option<u64>,
    cap: u64,
    chat_field: &'static str,
) -> Vec<(&'static str, u64)> {
    let written: Vec<u64> = CHAT_FIELDS.iter().filter_map(|f| present(f)).collect();
    let mut out = Vec::new();
    for f in CHAT_FIELDS {
        match present(f) {
            Some(cur) if cur > cap => out.push((*f, cap)),
            Some(_) => {}
            None if *f == chat_field && (written.is_empty() || chat_field == "max_tokens") => {
                let v = written.iter().copied().min().unwrap_or(cap).min(cap);
                out.push((*f, v));
            }
            None => {}
        }
    }
    out
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
        const F: &str = "max_completion_tokens";
        let mut b = json!({"max_tokens": 500});
        assert_eq!(requested(Protocol::Chat, &b), Some(500));
        cap(Protocol::Chat, &mut b, 100, F);
        assert_eq!(b, json!({"max_tokens": 100}));
        let mut b = json!({});
        cap(Protocol::Chat, &mut b, 7, F);
        assert_eq!(b, json!({"max_completion_tokens": 7}));
        let mut b = json!({"max_completion_tokens": 5});
        cap(Protocol::Chat, &mut b, 7, F);
        assert_eq!(b, json!({"max_completion_tokens": 5}), "never raised");
        let mut b = json!({"max_completion_tokens": 50});
        cap(Protocol::Chat, &mut b, 7, "max_tokens");
        assert_eq!(b, json!({"max_completion_tokens": 7, "max_tokens": 7}));
        let mut b = json!({"max_tokens": 3});
        cap(Protocol::Chat, &mut b, 7, F);
        assert_eq!(b, json!({"max_tokens": 3}), "never raised");
    }

    #[test]
    fn chat_plan_lowers_what_was_written() {
        const F: &str = "max_completion_tokens";
        assert_eq!(chat_plan(|_| None, 9, F), vec![(F, 9)]);
        let mt = |f: &str| (f == "max_tokens").then_some(20);
        assert_eq!(chat_plan(mt, 9, F), vec![("max_tokens", 9)]);
        let small = |f: &str| (f == "max_tokens").then_some(5);
        assert_eq!(chat_plan(small, 9, F), vec![], "never raised");
        let mct = |f: &str| (f == F).then_some(5);
        assert_eq!(
            chat_plan(mct, 9, "max_tokens"),
            vec![("max_tokens", 5)],
            "a max_tokens channel is told the client's own smaller limit"
        );
    }

    #[test]
    fn choices_per_protocol() {
        assert_eq!(choices(Protocol::Chat, &json!({"n": 4})), 4);
        assert_eq!(choices(Protocol::Chat, &json!({"n": 0})), 1);
        assert_eq!(choices(Protocol::Chat, &json!({})), 1);
        let g = json!({"generationConfig": {"candidateCount": 3}});
        assert_eq!(choices(Protocol::Gemini, &g), 3);
        assert_eq!(choices(Protocol::Messages, &json!({"n": 4})), 1);
    }

    #[test]
    fn other_protocols() {
        const F: &str = "max_completion_tokens";
        let mut g = json!({"contents": []});
        cap(Protocol::Gemini, &mut g, 9, F);
        assert_eq!(requested(Protocol::Gemini, &g), Some(9));
        let mut m = json!({"max_tokens": 1000});
        cap(Protocol::Messages, &mut m, 10, F);
        assert_eq!(requested(Protocol::Messages, &m), Some(10));
        let mut g = json!({"generation_config": {"max_output_tokens": 50}});
        assert_eq!(requested(Protocol::Gemini, &g), Some(50));
        cap(Protocol::Gemini, &mut g, 9, F);
        assert_eq!(g, json!({"generation_config": {"max_output_tokens": 9}}));
        let mut g = json!({"generation_config": {"temperature": 1}});
        cap(Protocol::Gemini, &mut g, 9, F);
        assert_eq!(
            g,
            json!({"generation_config": {"temperature": 1, "max_output_tokens": 9}})
        );
        let mut r = json!({});
        cap(Protocol::Responses, &mut r, 3, F);
        assert_eq!(requested(Protocol::Responses, &r), Some(3));
    }
}
