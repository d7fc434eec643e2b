//! Conversation state kept by the gateway (spec 4.4): the items a request adds to a
//! conversation, the whole conversation a chained request is sent with, and the pages of
//! `GET /v1/responses/{id}/input_items`.

use super::invalid;
use crate::protocol::Invalid;
use serde_json::{json, Map, Value};

/// The items `input` holds: a string is one user message.
pub fn input_items(input: Option<&Value>) -> Vec<Value> {
    match input {
        Some(Value::String(s)) => vec![json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": s}],
        })],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

/// The response object of the stream's closing event (`response.completed` or
/// `response.incomplete`) among the events in `out`.
pub fn final_response(out: &[u8]) -> Option<Value> {
    let mut events = Vec::new();
    let mut d = crate::protocol::sse::Decoder::new();
    d.feed(out, &mut events);
    d.flush(&mut events);
    events.into_iter().rev().find_map(|ev| {
        let kind = ev.event.as_deref()?;
        if kind != "response.completed" && kind != "response.incomplete" {
            return None;
        }
        let mut v: Value = serde_json::from_str(&ev.data).ok()?;
        Some(v.get_mut("response")?.take())
    })
}

/// One earlier turn, as it is replayed: its input items, then its output items.
pub struct Turn<'a> {
    pub input: &'a [Value],
    pub output: &'a [Value],
    /// The output came from a native Responses API upstream: its items (and their ids)
    /// are the upstream's own and go back as they came.
    pub native: bool,
}

/// The conversation before a chained request, oldest first. Output items the gateway
/// rendered lose their `id` and `status` (they name nothing upstream); everything else
/// (reasoning with its signature, tool calls and their outputs) stays as it was.
pub fn history(turns: &[Turn<'_>]) -> Vec<Value> {
    let mut out = Vec::new();
    for t in turns {
        out.extend(t.input.iter().cloned());
        for item in t.output {
            let mut item = item.clone();
            if let Some(o) = item.as_object_mut() {
                if !t.native {
                    o.remove("id");
                    o.remove("status");
                }
                o.retain(|_, v| !v.is_null());
            }
            out.push(item);
        }
    }
    out
}

/// Drops the oldest items of `items` until `fits` says the rest fit, keeping the
/// conversation well formed: it restarts at a user message, so no tool output is left
/// without its call. `None` when even the last user message onwards does not fit.
pub fn truncate(items: Vec<Value>, fits: impl Fn(&[Value]) -> bool) -> Option<Vec<Value>> {
    if fits(&items) {
        return Some(items);
    }
    let starts: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, v)| is_user_message(v))
        .map(|(i, _)| i)
        .filter(|i| *i > 0)
        .collect();
    for start in starts {
        if fits(&items[start..]) {
            return Some(items[start..].to_vec());
        }
    }
    None
}

fn is_user_message(v: &Value) -> bool {
    v.get("role").and_then(Value::as_str) == Some("user")
        && v.get("type").and_then(Value::as_str).unwrap_or("message") == "message"
}

/// The id an input item is listed under: its own, else one made from the response's id
/// and its place (stable, so `after` finds it again).
fn listed_id(item: &Value, response_id: &str, n: usize) -> String {
    if let Some(id) = item.get("id").and_then(Value::as_str) {
        return id.to_string();
    }
    let prefix = match item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
    {
        "message" => "msg",
        "function_call" => "fc",
        "function_call_output" => "fco",
        "reasoning" => "rs",
        _ => "item",
    };
    let tail = response_id.strip_prefix("resp_").unwrap_or(response_id);
    format!("{prefix}_{tail}_{n}")
}

/// An input item as the list shows it: with its id, its type, and a message's text
/// content as content parts.
fn listed(item: &Value, response_id: &str, n: usize) -> Value {
    let mut o = item.as_object().cloned().unwrap_or_default();
    o.entry("type").or_insert_with(|| "message".into());
    if o.get("type").and_then(Value::as_str) == Some("message") {
        if let Some(Value::String(text)) = o.get("content") {
            let part = if o.get("role").and_then(Value::as_str) == Some("assistant") {
                json!({"type": "output_text", "text": text, "annotations": []})
            } else {
                json!({"type": "input_text", "text": text})
            };
            o.insert("content".into(), json!([part]));
        }
        o.entry("status").or_insert_with(|| "completed".into());
    }
    o.insert("id".into(), listed_id(item, response_id, n).into());
    Value::Object(o)
}

/// The query of `GET /v1/responses/{id}/input_items`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub after: Option<String>,
    pub limit: usize,
    /// Newest first (the default, as OpenAI's).
    pub desc: bool,
}

impl ListQuery {
    /// `after`, `limit` (1 to 100, default 20) and `order` (`asc` or `desc`).
    pub fn parse(query: Option<&str>) -> Result<ListQuery, Invalid> {
        let mut q = ListQuery {
            after: None,
            limit: 20,
            desc: true,
        };
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match k.as_ref() {
                "after" if !v.is_empty() => q.after = Some(v.into_owned()),
                "limit" => {
                    q.limit = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| {
                            invalid("limit", "`limit` must be an integer from 1 to 100.")
                        })?
                }
                "order" => {
                    q.desc = match v.as_ref() {
                        "asc" => false,
                        "desc" => true,
                        _ => return Err(invalid("order", "`order` must be `asc` or `desc`.")),
                    }
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

/// One page of a response's input items, as OpenAI's list object.
pub fn input_items_page(
    items: &[Value],
    response_id: &str,
    q: &ListQuery,
) -> Result<Value, Invalid> {
    let mut all: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(n, item)| listed(item, response_id, n))
        .collect();
    if q.desc {
        all.reverse();
    }
    let start = match &q.after {
        None => 0,
        Some(after) => {
            all.iter()
                .position(|v| v.get("id").and_then(Value::as_str) == Some(after.as_str()))
                .ok_or_else(|| {
                    invalid(
                        "after",
                        format!("No input item with id '{after}' in this response."),
                    )
                })?
                + 1
        }
    };
    let rest = &all[start.min(all.len())..];
    let page: Vec<Value> = rest.iter().take(q.limit).cloned().collect();
    let id_of = |v: Option<&Value>| v.and_then(|v| v.get("id")).cloned().unwrap_or(Value::Null);
    let mut o = Map::new();
    o.insert("object".into(), "list".into());
    o.insert("first_id".into(), id_of(page.first()));
    o.insert("last_id".into(), id_of(page.last()));
    o.insert("has_more".into(), (rest.len() > page.len()).into());
    o.insert("data".into(), Value::Array(page));
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn a_string_input_is_one_user_message() {
        let items = input_items(Some(&json!("hi")));
        assert_eq!(items[0]["role"], "user");
        assert_eq!(items[0]["content"][0]["text"], "hi");
        assert!(input_items(None).is_empty());
    }

    #[test]
    fn history_keeps_native_ids_and_drops_the_gateways() {
        let input = [user("a")];
        let ours = [
            json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": []}),
        ];
        let theirs =
            [json!({"type": "reasoning", "id": "rs_9", "encrypted_content": "e", "summary": []})];
        let h = history(&[
            Turn {
                input: &input,
                output: &ours,
                native: false,
            },
            Turn {
                input: &[],
                output: &theirs,
                native: true,
            },
        ]);
        assert_eq!(h.len(), 3);
        assert!(h[1].get("id").is_none() && h[1].get("status").is_none());
        assert_eq!(h[2]["id"], "rs_9");
    }

    #[test]
    fn truncation_restarts_at_a_user_message() {
        let items = vec![
            user("one"),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c", "output": "x"}),
            user("two"),
            user("three"),
        ];
        let kept = truncate(items.clone(), |i| i.len() <= 2).unwrap();
        assert_eq!(kept, items[3..].to_vec());
        assert!(truncate(items.clone(), |_| false).is_none());
        assert_eq!(truncate(items.clone(), |_| true).unwrap().len(), 5);
    }

    #[test]
    fn pages_follow_after_and_order() {
        let items: Vec<Value> = (0..5).map(|i| user(&i.to_string())).collect();
        let q = |s: &str| ListQuery::parse(Some(s)).unwrap();
        let p = input_items_page(&items, "resp_r", &q("limit=2&order=asc")).unwrap();
        assert_eq!(p["first_id"], "msg_r_0");
        assert_eq!(p["last_id"], "msg_r_1");
        assert_eq!(p["has_more"], true);
        assert_eq!(p["data"][0]["content"][0]["type"], "input_text");
        let p = input_items_page(&items, "resp_r", &q("limit=2&order=asc&after=msg_r_3")).unwrap();
        assert_eq!(p["data"].as_array().unwrap().len(), 1);
        assert_eq!(p["has_more"], false);
        let p = input_items_page(&items, "resp_r", &q("")).unwrap();
        assert_eq!(p["first_id"], "msg_r_4", "newest first by default");
        assert!(ListQuery::parse(Some("limit=0")).is_err());
        assert!(ListQuery::parse(Some("order=up")).is_err());
        assert!(input_items_page(&items, "resp_r", &q("after=nope")).is_err());
    }
}
