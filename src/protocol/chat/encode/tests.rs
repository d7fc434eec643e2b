use super::*;
use crate::protocol::chat::testutil::stream_ctx;

fn encode(events: &[Event], wants_usage: bool, error: Option<&str>) -> String {
    let mut e = encoder(&stream_ctx(wants_usage));
    let mut out = Vec::new();
    for ev in events {
        e.event(ev, &mut out);
    }
    e.finish(error, &mut out);
    String::from_utf8(out).unwrap()
}

/// The chunks' JSON, `[DONE]` left out; panics on a line that is not an SSE data event.
fn chunks(stream: &str) -> Vec<Value> {
    assert!(stream.ends_with("\n\n"), "{stream}");
    stream
        .split_terminator("\n\n")
        .map(|e| e.strip_prefix("data: ").expect("a data event"))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn deltas(stream: &str) -> Vec<Value> {
    chunks(stream)
        .into_iter()
        .filter(|c| c["choices"].as_array().is_some_and(|a| !a.is_empty()))
        .map(|c| c["choices"][0]["delta"].clone())
        .collect()
}

const HEAD: &str = r#"{"id":"chatcmpl-req_7f3a","object":"chat.completion.chunk","created":1735689600,"model":"my-alias","choices":"#;

#[test]
fn text_with_usage_byte_for_byte() {
    let usage = Usage {
        input_tokens: 1500,
        output_tokens: 12,
        cached_input_tokens: 1024,
        cache_creation_input_tokens: 100,
        reasoning_tokens: 0,
        ..Usage::default()
    };
    let out = encode(
        &[
            Event::Text("Hel".into()),
            Event::Text("lo".into()),
            Event::Usage(usage),
            Event::Finish(FinishReason::Stop),
        ],
        true,
        None,
    );
    let expected = [
        format!(
            r#"data: {HEAD}[{{"index":0,"delta":{{"role":"assistant","content":"Hel"}},"logprobs":null,"finish_reason":null}}]}}"#
        ),
        format!(
            r#"data: {HEAD}[{{"index":0,"delta":{{"content":"lo"}},"logprobs":null,"finish_reason":null}}]}}"#
        ),
        format!(
            r#"data: {HEAD}[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"stop"}}]}}"#
        ),
        format!(
            r#"data: {HEAD}[],"usage":{{"prompt_tokens":1500,"completion_tokens":12,"total_tokens":1512,"prompt_tokens_details":{{"cached_tokens":1024}},"completion_tokens_details":{{"reasoning_tokens":0}}}}}}"#
        ),
        "data: [DONE]".to_string(),
    ];
    assert_eq!(out, expected.join("\n\n") + "\n\n");
}

#[test]
fn usage_chunk_only_when_asked() {
    let events = [Event::Text("x".into()), Event::Usage(Usage::default())];
    let out = encode(&events, false, None);
    assert!(!out.contains("usage"), "{out}");
    assert!(out.ends_with("\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"));
}

#[test]
fn parallel_tool_calls_with_signatures_and_thinking() {
    let events = [
        Event::Thinking("Two cities.".into()),
        Event::ThinkingSignature("EqQBCkgIARAB".into()),
        Event::RedactedThinking("EmwKAhgB".into()),
        Event::Text("Checking.".into()),
        Event::ToolCallStart {
            index: 0,
            id: "toolu_01".into(),
            name: "get_weather".into(),
            signature: None,
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "{\"city\":".into(),
        },
        Event::ToolCallArgs {
            index: 0,
            fragment: "\"Paris\"}".into(),
        },
        Event::ToolCallStart {
            index: 1,
            id: "fc_2".into(),
            name: "get_weather".into(),
            signature: Some("CiQBVKhc".into()),
        },
        Event::ToolCallArgs {
            index: 1,
            fragment: String::new(),
        },
        Event::ToolCallArgs {
            index: 1,
            fragment: "{\"city\":\"Berlin\"}".into(),
        },
        // The messages protocol says `tool_use`, generate-content just `STOP`.
        Event::Finish(FinishReason::Stop),
    ];
    let out = encode(&events, false, None);
    assert_eq!(
        deltas(&out),
        vec![
            json!({"role": "assistant", "content": "", "reasoning_content": "Two cities."}),
            json!({"content": "Checking."}),
            json!({"tool_calls": [{"index": 0, "id": "toolu_01", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
            json!({"tool_calls": [{"index": 1, "id": "fc_2__sig__CiQBVKhc", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"city\":\"Berlin\"}"}}]}),
            json!({}),
        ]
    );
    let last = chunks(&out).pop().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn finish_reasons_on_the_last_delta() {
    let reason = |events: &[Event]| {
        let out = encode(events, false, None);
        chunks(&out).pop().unwrap()["choices"][0]["finish_reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(reason(&[Event::Text("x".into())]), "stop");
    assert_eq!(
        reason(&[Event::Finish(FinishReason::Length), Event::Text("x".into())]),
        "length"
    );
    assert_eq!(
        reason(&[Event::Finish(FinishReason::ContentFilter)]),
        "content_filter"
    );
    assert_eq!(
        reason(&[Event::Finish(FinishReason::StopSequence(None))]),
        "stop"
    );
    let call = Event::ToolCallStart {
        index: 0,
        id: "c".into(),
        name: "f".into(),
        signature: None,
    };
    assert_eq!(reason(std::slice::from_ref(&call)), "tool_calls");
    // The output limit cut a call short: the client must know it was cut.
    assert_eq!(
        reason(&[call, Event::Finish(FinishReason::Length)]),
        "length"
    );
}

#[test]
fn the_first_chunk_carries_the_role_whatever_opens_the_stream() {
    for first in [
        Event::Usage(Usage::default()),
        Event::Finish(FinishReason::Stop),
        Event::ThinkingSignature("s".into()),
        Event::Text(String::new()),
    ] {
        let out = encode(&[first.clone(), Event::Text("a".into())], false, None);
        assert_eq!(
            deltas(&out)[..2],
            [
                json!({"role": "assistant", "content": ""}),
                json!({"content": "a"})
            ],
            "{first:?}"
        );
    }
    let out = encode(
        &[Event::ToolCallStart {
            index: 0,
            id: "c".into(),
            name: "f".into(),
            signature: None,
        }],
        false,
        None,
    );
    assert_eq!(deltas(&out)[0]["role"], "assistant");
    assert_eq!(deltas(&out)[0]["tool_calls"][0]["id"], "c");
}

#[test]
fn an_empty_answer_still_closes_properly() {
    let out = encode(&[], true, None);
    assert_eq!(
        deltas(&out),
        vec![json!({"role": "assistant", "content": ""}), json!({})]
    );
    assert_eq!(chunks(&out).len(), 3, "role, finish, usage");
    assert!(out.ends_with("data: [DONE]\n\n"));
}

#[test]
fn a_broken_stream_ends_with_the_error_event() {
    let msg = "The upstream provider reported an error mid-stream. (request id: req_7f3a)";
    let out = encode(&[Event::Text("partial".into())], true, Some(msg));
    let all = chunks(&out);
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["error"]["message"], msg);
    assert_eq!(all[1]["error"]["type"], "upstream_error");
    assert!(!out.contains("[DONE]"));
    assert!(!out.contains("usage"));
    // Nothing was sent yet: the error alone.
    let out = encode(&[], false, Some(msg));
    assert_eq!(chunks(&out).len(), 1);
}

#[test]
fn finish_is_final() {
    let mut e = encoder(&stream_ctx(false));
    let mut out = Vec::new();
    e.finish(None, &mut out);
    let len = out.len();
    e.event(&Event::Text("late".into()), &mut out);
    e.finish(Some("again"), &mut out);
    assert_eq!(out.len(), len);
}

/// Text and reasoning after the first delta are written straight, byte for byte as the
/// general chunk writer writes them (escapes, non-ASCII, an awkward model name).
#[test]
fn text_written_straight_is_the_general_chunk() {
    let mut ctx = stream_ctx(false);
    ctx.client_model = "m \"q\" é".into();
    ctx.created = -5;
    let texts = [
        "plain",
        "line\nbreak \"quoted\" back\\slash tab\t",
        "caf\u{e9} \u{1f600} \u{1} \u{7f}",
        "</script>",
    ];
    for (key, make) in [
        ("content", Event::Text as fn(String) -> Event),
        ("reasoning_content", Event::Thinking),
    ] {
        for t in texts {
            let mut e = Encoder {
                ctx: ctx.clone(),
                id: "chatcmpl-x".into(),
                head: Vec::new(),
                started: true,
                tool_calls: false,
                finish: None,
                usage: None,
                finished: false,
            };
            let mut general = Vec::new();
            e.delta(one(key, t.into()), &mut general);
            let mut fast = encoder(&StreamContext {
                request_id: "x".into(),
                ..ctx.clone()
            });
            let mut first = Vec::new();
            fast.event(&Event::Text("first".into()), &mut first);
            let mut straight = Vec::new();
            fast.event(&make(t.into()), &mut straight);
            assert_eq!(
                String::from_utf8(straight).unwrap(),
                String::from_utf8(general).unwrap(),
                "{key}: {t:?}"
            );
        }
    }
}
