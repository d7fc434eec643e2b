use super::*;
use crate::protocol::chat::delivered::choices_bytes;
use crate::protocol::shallow::Shallow;
use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// What the general reader finds, where the scan says a chunk is plain: the same
/// members, the same count, and it is JSON.
fn agrees(text: &str) -> Option<Plain> {
    let p = scan(text)?;
    let raw: &RawValue = serde_json::from_str(text).expect("a plain chunk is JSON");
    let top = Shallow::object(raw).expect("an object");
    for (name, m) in [
        ("model", &p.model),
        ("usage", &p.usage),
        ("error", &p.error),
        ("choices", &p.choices),
    ] {
        assert_eq!(
            top.get(name).map(RawValue::get),
            m.as_ref().map(|m| &text[m.value.clone()]),
            "{name} in {text}"
        );
        if let Some(m) = m {
            assert!(text[m.start..].starts_with(&format!("\"{name}\":")));
        }
    }
    assert_eq!(
        p.delivered,
        top.get("choices").map_or(0, choices_bytes),
        "{text}"
    );
    Some(p)
}

#[test]
fn reads_what_upstreams_write() {
    let chunks = [
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Q"}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"line\none \"q\" \\ /"},"logprobs":null,"finish_reason":null}],"model":"m"}"#,
        r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}},"model":"m"}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"think","reasoning":"other longer"}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"only this","reasoning_content":null}}]}"#,
        r#"{"choices":[{"delta":{"content":[{"type":"text","text":"ab"},{"text":5},"x",{"text":"cd"}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}},{"function":null},7]}}]}"#,
        r#"{"choices":[{"delta":{"function_call":{"arguments":"{}"}}}]}"#,
        r#"{"choices":[{"delta":null},{"delta":"text"},3,null,{"delta":{"content":7,"refusal":[1]}}]}"#,
        r#"{"choices":{"delta":{"content":"not an array"}}}"#,
        r#"{"choices":[{"delta":{"content":"a","content":"bc"},"delta":{"refusal":"d"}}]}"#,
        r#"{"choices":[ { "delta" : { "content" : "spaced inside" } } ]}"#,
        r#"{"x":-0.5,"y":[true,false,null,{}],"z":0,"w":12.25,"v":-7}"#,
        r#"{"error":{"message":"m"}}"#,
        r#"{}"#,
        "{\"choices\":[{\"delta\":{\"content\":\"caf\u{e9} \u{1f600}\"}}]}",
    ];
    for text in chunks {
        assert!(agrees(text).is_some(), "plain: {text}");
    }
    let p = agrees(chunks[1]).unwrap();
    assert_eq!(p.delivered, "line\none \"q\" \\ /".len() as u64);
}

#[test]
fn leaves_everything_else_to_the_general_reader() {
    let chunks = [
        r#"{ "id":"c"}"#,
        r#"{"id": "c"}"#,
        r#"{"id":"c" ,"x":1}"#,
        r#"{"id":"c","id":"d"}"#,
        r#"{"mod\u0065l":"m"}"#,
        r#"{"m\"":"m"}"#,
        r#"{"choices":[{"delta":{"content":"\u00e9"}}]}"#,
        r#"{"choices":[{"del\u0074a":{"content":"x"}}]}"#,
        r#"{"a":"\x"}"#,
        r#"{"a":tru}"#,
        r#"{"a":01}"#,
        r#"{"a":1.}"#,
        r#"{"a":-}"#,
        r#"{"a":1e}"#,
        r#"{"a":1e5}"#,
        r#"{"choices":[{"delta":{"content":"x","n":1e400}}]}"#,
        r#"{"a":[1,]}"#,
        r#"{"a":{"b":1,}}"#,
        r#"{"a":1}x"#,
        r#"{"a":1"#,
        r#"{"choices":["#,
        "{\"a\":\"tab\there\"}",
        r#"[1]"#,
        r#""s""#,
        r#"7"#,
        "",
    ];
    for text in chunks {
        assert_eq!(scan(text), None, "{text}");
    }
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(150), "]".repeat(150));
    assert_eq!(scan(&deep), None);
    let many: String = (0..40)
        .map(|i| format!("\"k{i}\":{i}"))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(scan(&format!("{{{many}}}")), None);
}

/// Upstream-like chunks: any JSON under the members the relay reads.
fn member() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-100_000i64..100_000).prop_map(|i| Value::from(i as f64 / 100.0)),
        "[a-z \"\\\\/\n\té😀]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::vec(
                (
                    prop_oneof![
                        Just("content".to_string()),
                        Just("delta".to_string()),
                        Just("text".to_string()),
                        Just("refusal".to_string()),
                        Just("reasoning".to_string()),
                        Just("reasoning_content".to_string()),
                        Just("tool_calls".to_string()),
                        Just("function".to_string()),
                        Just("function_call".to_string()),
                        Just("arguments".to_string()),
                        "[a-z]{1,6}",
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the chunk, a plain one reads as the general reader reads it; a compact
    /// object of distinct names without `\u` escapes is always plain.
    #[test]
    fn plain_chunks_read_as_the_general_reader_reads_them(
        members in proptest::collection::vec(
            (prop_oneof![
                Just("model".to_string()), Just("usage".to_string()),
                Just("choices".to_string()), Just("error".to_string()), "[a-z]{1,5}",
            ], member()),
            0..6,
        ),
        cut in any::<prop::sample::Index>(),
    ) {
        let obj: serde_json::Map<String, Value> = members.into_iter().collect();
        let text = Value::Object(obj).to_string();
        prop_assert!(agrees(&text).is_some() || text.contains("\\u"), "{}", text);
        // Any prefix, and any one byte changed, is either read the same way or left.
        let at = cut.index(text.len().max(1));
        if text.is_char_boundary(at) {
            let _ = agrees(&text[..at]);
            let mut changed = text.clone().into_bytes();
            changed[at] = b'"';
            if let Ok(t) = String::from_utf8(changed) {
                let _ = agrees(&t);
            }
        }
    }
}

#[test]
fn a_usage_chunk_and_its_members() {
    let text =
        json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 3}, "model": "m"}).to_string();
    let p = agrees(&text).unwrap();
    assert_eq!(&text[p.usage.unwrap().value], r#"{"prompt_tokens":3}"#);
    assert_eq!(&text[p.model.unwrap().value], r#""m""#);
    assert_eq!(p.delivered, 0);
}
