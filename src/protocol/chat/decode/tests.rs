use super::*;
use crate::protocol::chat::testutil::{decode, splits, stream_ctx};
use crate::protocol::ir::FinishReason;
use crate::protocol::StreamTranslator;

const HEAD: &str = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":"#;

/// An OpenAI stream: one chunk a line, as the API sends them.
fn stream(chunks: &[&str]) -> String {
    let mut s = String::new();
    for c in chunks {
        if *c == "[DONE]" || !c.starts_with('[') {
            s.push_str(&format!("data: {c}\n\n"));
        } else {
            s.push_str(&format!("data: {HEAD}{c}}}\n\n"));
        }
    }
    s
}

/// Two parallel calls, arguments in pieces, then the usage chunk with cached tokens.
fn parallel_calls() -> String {
    stream(&[
        r#"[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"lo"}}]},"logprobs":null,"finish_reason":null}],"usage":null"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"cation\": \"Paris\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_ABC","type":"function","function":{"name":"get_weather","arguments":"{\"location\""}}]},"logprobs":null,"finish_reason":null}],"usage":null"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":": \"Berlin\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null"#,
        r#"[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null"#,
        r#"[],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}"#,
        "[DONE]",
    ])
}

fn events_of(input: &str) -> (Vec<Event>, bool) {
    let all: Vec<_> = splits(input.as_bytes())
        .iter()
        .map(|pieces| decode(decoder(), pieces))
        .collect();
    for (i, got) in all.iter().enumerate() {
        assert_eq!(got, &all[0], "split #{i} differs");
    }
    all[0].clone()
}

fn args(index: usize, fragment: &str) -> Event {
    Event::ToolCallArgs {
        index,
        fragment: fragment.into(),
    }
}

fn start(index: usize, id: &str, name: &str) -> Event {
    Event::ToolCallStart {
        index,
        id: id.into(),
        name: name.into(),
        signature: None,
    }
}

#[test]
fn parallel_tool_calls_in_any_split() {
    let (events, complete) = events_of(&parallel_calls());
    assert!(complete);
    assert_eq!(
        events,
        vec![
            start(0, "call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather"),
            args(0, "{\"lo"),
            args(0, "cation\": \"Paris\"}"),
            start(1, "call_ABC", "get_weather"),
            args(1, "{\"location\""),
            args(1, ": \"Berlin\"}"),
            Event::Finish(FinishReason::ToolCalls),
            Event::Usage(Usage {
                input_tokens: 1117,
                output_tokens: 46,
                cached_input_tokens: 1024,
                cache_creation_input_tokens: 0,
                reasoning_tokens: 0,
                ..Usage::default()
            }),
        ]
    );
}

#[test]
fn reasoning_then_text_then_stop() {
    // DeepSeek's shape: reasoning deltas, then content deltas; usage on the last chunk.
    let input = stream(&[
        r#"[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"logprobs":null,"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"content":null,"reasoning_content":"Compare 9.11"},"logprobs":null,"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"content":null,"reasoning_content":" and 9.9."},"logprobs":null,"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"content":"9.9","reasoning_content":null},"logprobs":null,"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"content":" is larger — ✓.","reasoning_content":null},"logprobs":null,"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"content":"","reasoning_content":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":90,"total_tokens":104,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":80},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":14}"#,
        "[DONE]",
    ]);
    let (events, complete) = events_of(&input);
    assert!(complete);
    assert_eq!(
        events,
        vec![
            Event::Thinking("Compare 9.11".into()),
            Event::Thinking(" and 9.9.".into()),
            Event::Text("9.9".into()),
            Event::Text(" is larger — ✓.".into()),
            Event::Finish(FinishReason::Stop),
            Event::Usage(Usage {
                input_tokens: 14,
                output_tokens: 90,
                reasoning_tokens: 80,
                ..Default::default()
            }),
        ]
    );
    // `reasoning` is the other spelling.
    let input = stream(&[
        r#"[{"index":0,"delta":{"reasoning":"hm"},"finish_reason":null}]"#,
        "[DONE]",
    ]);
    assert_eq!(events_of(&input).0, vec![Event::Thinking("hm".into())]);
}

#[test]
fn a_stream_cut_before_done_is_not_complete() {
    let full = parallel_calls();
    let cut = &full[..full.find("data: [DONE]").unwrap()];
    let (events, complete) = events_of(cut);
    assert!(!complete);
    assert_eq!(events.len(), 8, "everything before the cut still decodes");
    // Cut inside an event: what came before it decodes, and the stream is broken.
    let cut = &full[..full.find(r#""index":1,"function""#).unwrap() - 40];
    let (events, complete) = events_of(cut);
    assert!(!complete);
    assert_eq!(events.len(), 6, "{events:?}");
    assert_eq!(events.last(), Some(&Event::Broken(Fault::Cut)));
}

/// Half an event, then more: the stream breaks at the half event; only usage reports
/// come through after it.
#[test]
fn half_an_event_breaks_the_stream_and_later_usage_still_counts() {
    let input = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"cont\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    );
    for pieces in splits(input.as_bytes()) {
        let mut d = decoder();
        let mut events = Vec::new();
        let mut broken = None;
        for p in pieces {
            if let Err(b) = d.feed(p, &mut events) {
                broken.get_or_insert(b);
            }
        }
        assert_eq!(d.flush(&mut events), Err(StreamBroken(Fault::NotJson)));
        assert_eq!(broken, Some(StreamBroken(Fault::NotJson)));
        assert!(!d.complete());
        assert_eq!(
            events,
            vec![
                Event::Text("Hel".into()),
                Event::Broken(Fault::NotJson),
                Event::Usage(Usage {
                    input_tokens: 3,
                    output_tokens: 2,
                    ..Usage::default()
                })
            ]
        );
    }
}

#[test]
fn an_error_chunk_mid_stream() {
    let input = stream(&[
        r#"[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]"#,
        r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#,
    ]);
    let (events, complete) = events_of(&input);
    assert_eq!(events, vec![Event::Text("Hel".into()), Event::Error]);
    assert!(!complete);
}

#[test]
fn noise_and_other_choices_are_ignored() {
    let input = concat!(
        ": OPENROUTER PROCESSING\n\n",
        "data: \n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mine\",\"refusal\":null},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"No.\"},\"finish_reason\":\"content_filter\"}]}\n\n",
        "data: [DONE]\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after done\"}}]}\n\n",
    );
    let (events, complete) = events_of(input);
    assert!(complete);
    assert_eq!(
        events,
        vec![
            Event::Text("mine".into()),
            Event::Text("No.".into()),
            Event::Finish(FinishReason::ContentFilter)
        ]
    );
}

#[test]
fn usage_on_every_chunk_is_reported_when_it_changes() {
    let u = |n: u32| format!(r#""usage":{{"prompt_tokens":10,"completion_tokens":{n}}}"#);
    let c1 = format!(
        r#"[{{"index":0,"delta":{{"content":"a"}},"finish_reason":null}}],{}"#,
        u(1)
    );
    let c2 = format!(
        r#"[{{"index":0,"delta":{{"content":""}},"finish_reason":null}}],{}"#,
        u(1)
    );
    let c3 = format!(
        r#"[{{"index":0,"delta":{{}},"finish_reason":"length"}}],{}"#,
        u(2)
    );
    let (events, _) = events_of(&stream(&[&c1, &c2, &c3, "[DONE]"]));
    let usage = |n| {
        Event::Usage(Usage {
            input_tokens: 10,
            output_tokens: n,
            ..Default::default()
        })
    };
    assert_eq!(
        events,
        vec![
            Event::Text("a".into()),
            usage(1),
            Event::Finish(FinishReason::Length),
            usage(2)
        ]
    );
}

#[test]
fn calls_from_lenient_servers() {
    // No index, the id on every piece, the name only on the second piece, no ids at all.
    let input = stream(&[
        r#"[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"arguments":"{\"x\""}}]},"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":":1}"}}]},"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]},"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"index":5,"function":{"name":"h","arguments":"{}"}}]},"finish_reason":null}]"#,
        r#"[{"index":0,"delta":{"tool_calls":[{"index":6,"function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]"#,
        "[DONE]",
    ]);
    let (events, _) = events_of(&input);
    let starts: Vec<(usize, String, String)> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStart {
                index, id, name, ..
            } => Some((*index, id.clone(), name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 4);
    assert_eq!(starts[0], (0, "a".into(), "f".into()));
    assert_eq!(starts[1], (1, "b".into(), "g".into()));
    assert_eq!((starts[2].0, starts[2].2.as_str()), (2, "h"));
    // A call whose name never came still opens before the finish, not lost.
    assert_eq!((starts[3].0, starts[3].2.as_str()), (3, ""));
    let synthesized = [&starts[2].1, &starts[3].1];
    assert_ne!(synthesized[0], synthesized[1]);
    for id in synthesized {
        assert!(
            id.starts_with("call_")
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{id}"
        );
    }
    assert!(
        events.contains(&args(0, "{\"x\":1}")),
        "held args come with the start"
    );
    assert_eq!(events.last(), Some(&Event::Finish(FinishReason::ToolCalls)));
}

#[test]
fn an_oversized_event_breaks_the_stream() {
    let mut d = decoder();
    let mut events = Vec::new();
    d.feed(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n",
        &mut events,
    )
    .unwrap();
    let huge = vec![b'x'; crate::protocol::sse::MAX_EVENT_BYTES + 1];
    assert_eq!(
        d.feed(&huge, &mut events),
        Err(StreamBroken(Fault::TooLarge))
    );
    assert_eq!(
        events,
        vec![Event::Text("ok".into()), Event::Broken(Fault::TooLarge)]
    );
}

/// Chat upstream → pivot → chat client: the whole path, in every split, gives the same
/// bytes, and the client rebuilds the upstream's calls exactly.
#[test]
fn through_the_pivot_and_back() {
    let input = parallel_calls();
    let mut outputs = Vec::new();
    for pieces in splits(input.as_bytes()) {
        let mut t = crate::protocol::translate::Translated::new(
            decoder(),
            super::super::encoder(&stream_ctx(true)),
            "req_7f3a".into(),
        );
        let mut out = Vec::new();
        for p in pieces {
            t.feed(p, &mut out);
        }
        t.finish(None, &mut out);
        assert_eq!(t.usage().cached_input_tokens, 1024);
        outputs.push(String::from_utf8(out).unwrap());
    }
    assert!(outputs.iter().all(|o| o == &outputs[0]));
    let out = &outputs[0];
    assert!(out.ends_with("data: [DONE]\n\n"));
    assert!(!out.contains("gpt-4o") && !out.contains("fp_fc9f"));
    // Rebuild the calls as the SDK's accumulator does.
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for data in out
        .split_terminator("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
    {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        for tc in v["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                calls.push(Default::default());
            }
            if let Some(id) = tc["id"].as_str() {
                calls[i].0 = id.into();
                calls[i].1 = tc["function"]["name"].as_str().unwrap().into();
            }
            calls[i].2 += tc["function"]["arguments"].as_str().unwrap();
        }
    }
    assert_eq!(
        calls,
        vec![
            (
                "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(),
                "get_weather".into(),
                "{\"location\": \"Paris\"}".into()
            ),
            (
                "call_ABC".into(),
                "get_weather".into(),
                "{\"location\": \"Berlin\"}".into()
            ),
        ]
    );
    assert!(out.contains(r#""finish_reason":"tool_calls""#));
    assert!(out.contains(r#""cached_tokens":1024"#));
}

#[test]
fn text_parts_in_a_delta() {
    let input = stream(&[
        r#"[{"index":0,"delta":{"content":[{"type":"text","text":"Bon"},{"type":"text","text":"jour"}]},"finish_reason":"stop"}]"#,
        "[DONE]",
    ]);
    assert_eq!(
        events_of(&input).0,
        vec![
            Event::Text("Bon".into()),
            Event::Text("jour".into()),
            Event::Finish(FinishReason::Stop)
        ]
    );
}
