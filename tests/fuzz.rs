//! Property tests over bytes for every parser that reads what a client or an upstream
//! sends: the SSE decoder and each upstream protocol's stream translator, the one-level
//! chat body reader, the multipart parser and the WebSocket frame reader. Any bytes, any
//! split: no panic, bounded output, and the same result whole as in pieces. The case
//! counts keep the whole file to a few seconds; a failure is a bug (proptest prints the
//! smallest input it found).

use model_gateway::media::multipart;
use model_gateway::protocol::shallow::Shallow;
use model_gateway::protocol::sse::{self, MAX_EVENT_BYTES};
use model_gateway::protocol::{chat, stream_translator, Protocol, StreamContext};
use model_gateway::realtime::frames::{Collect, FrameReader, Sniff};
use proptest::prelude::*;
use serde_json::Value;
use std::ops::ControlFlow;

/// Pieces of upstream streams of every protocol, whole and broken, to build inputs that
/// get past the first byte more often than random bytes do.
const FRAGMENTS: &[&str] = &[
    "data: ",
    "event: ",
    "\n",
    "\r\n",
    "\n\n",
    "\r",
    ": keep-alive\n\n",
    "[DONE]",
    r#"{"choices":[{"index":0,"delta":{"content":"hi","reasoning_content":"r"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
    r#"{"type":"message_start","message":{"model":"m","usage":{"input_tokens":3,"output_tokens":1}}}"#,
    r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#,
    r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":""}}"#,
    r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"x"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
    r#"{"type":"message_stop"}"#,
    r#"{"type":"error","error":{"type":"overloaded_error","message":"m"}}"#,
    r#"{"candidates":[{"content":{"parts":[{"text":"g"},{"text":"t","thought":true},{"functionCall":{"name":"f","args":{"a":1}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2}}"#,
    r#"{"candidates":[{"content":{"parts":[{"text":"g"}]}}],"modelVersion":"v"}"#,
    r#"{"type":"response.output_text.delta","sequence_number":1,"delta":"r"}"#,
    r#"{"type":"response.completed","sequence_number":2,"response":{"model":"m","usage":{"input_tokens":1,"output_tokens":2}}}"#,
    r#"{"error":{"message":"e"}}"#,
    r#"{""#,
    "\u{e9}",
    "{}",
];

/// Upstream-like bytes: fragments, with random bytes (invalid UTF-8 included) among them.
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => (0..FRAGMENTS.len()).prop_map(|i| FRAGMENTS[i].as_bytes().to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..48).prop_map(|ps| ps.concat())
}

/// Cuts `input` at the given sizes (cycled), never an empty piece.
fn split<'a>(input: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = input;
    let mut k = 0;
    while !rest.is_empty() {
        let n = sizes
            .get(k % sizes.len().max(1))
            .copied()
            .unwrap_or(1)
            .max(1);
        let n = n.min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
        k += 1;
    }
    out
}

fn sse_events(pieces: &[&[u8]]) -> Vec<sse::Event> {
    let mut d = sse::Decoder::new();
    let mut out = Vec::new();
    for p in pieces {
        d.feed(p, &mut out);
    }
    d.flush(&mut out);
    out
}

const PAIRS: &[(Protocol, Protocol)] = &[
    (Protocol::Chat, Protocol::Chat),
    (Protocol::Chat, Protocol::Messages),
    (Protocol::Chat, Protocol::Gemini),
    (Protocol::Chat, Protocol::Responses),
    (Protocol::Messages, Protocol::Chat),
    (Protocol::Messages, Protocol::Messages),
    (Protocol::Messages, Protocol::Gemini),
    (Protocol::Messages, Protocol::Responses),
    (Protocol::Gemini, Protocol::Chat),
    (Protocol::Gemini, Protocol::Messages),
    (Protocol::Gemini, Protocol::Gemini),
    (Protocol::Gemini, Protocol::Responses),
    (Protocol::Responses, Protocol::Responses),
];

/// ConverseStream payloads (message type, event or exception type, JSON), the last one
/// half an object.
const CONVERSE: &[(&str, &str, &str)] = &[
    ("event", "messageStart", r#"{"role":"assistant"}"#),
    (
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"h\u00e9"}}"#,
    ),
    (
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":1,"delta":{"reasoningContent":{"text":"t"}}}"#,
    ),
    (
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":1,"delta":{"reasoningContent":{"signature":"s"}}}"#,
    ),
    (
        "event",
        "contentBlockStart",
        r#"{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}"#,
    ),
    (
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":2,"delta":{"toolUse":{"input":"{\"a\":"}}}"#,
    ),
    ("event", "contentBlockStop", r#"{"contentBlockIndex":2}"#),
    ("event", "messageStop", r#"{"stopReason":"end_turn"}"#),
    (
        "event",
        "metadata",
        r#"{"usage":{"inputTokens":1,"outputTokens":2,"cacheReadInputTokens":3}}"#,
    ),
    ("exception", "throttlingException", r#"{"message":"m"}"#),
    ("event", "contentBlockDelta", r#"{""#),
];

/// One AWS event-stream frame.
fn converse_frame(kind: &str, name: &str, json: &str) -> Vec<u8> {
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    let type_header = if kind == "event" {
        ":event-type"
    } else {
        ":exception-type"
    };
    let m = Message::new(json.as_bytes().to_vec())
        .add_header(Header::new(
            type_header,
            HeaderValue::String(name.to_string().into()),
        ))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String(kind.to_string().into()),
        ));
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

/// ConverseStream-like bytes: whole frames, with random bytes (a broken frame) among them.
fn converse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        6 => (0..CONVERSE.len()).prop_map(|i| {
            let (kind, name, json) = CONVERSE[i];
            converse_frame(kind, name, json)
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|ps| ps.concat())
}

fn translate(pair: (Protocol, Protocol), sse: bool, pieces: &[&[u8]]) -> (Vec<u8>, u64) {
    let ctx = StreamContext {
        client_model: "alias".into(),
        request_id: "req_f".into(),
        created: 1,
        client_wants_usage: true,
        client_sse: sse,
        charge: None,
    };
    let mut t = stream_translator(pair.0, pair.1, ctx);
    let mut out = Vec::new();
    for p in pieces {
        t.feed(p, &mut out);
    }
    t.finish(None, &mut out);
    (out, t.delivered_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn sse_decoder_any_bytes_any_split(
        input in prop_oneof![stream_bytes(), proptest::collection::vec(any::<u8>(), 0..512)],
        sizes in proptest::collection::vec(1usize..24, 1..8),
    ) {
        let whole = sse_events(&[&input]);
        prop_assert_eq!(&sse_events(&split(&input, &sizes)), &whole);
        prop_assert_eq!(&sse_events(&split(&input, &[1])), &whole);
        // Bounded: an event per line end at most, none larger than the bound.
        let line_ends = input.iter().filter(|b| matches!(b, b'\n' | b'\r')).count();
        prop_assert!(whole.len() <= line_ends + 1);
        for e in &whole {
            prop_assert!(e.data.len() <= MAX_EVENT_BYTES);
        }
    }

    /// Every upstream protocol's stream, to every client protocol.
    /// ConverseStream (Bedrock) answers to every client protocol: the same output
    /// whatever the reads' boundaries, text for the client, never a panic.
    #[test]
    fn converse_streams_any_frames_any_split(
        input in converse_bytes(),
        sizes in proptest::collection::vec(1usize..48, 1..6),
        client in 0..4usize,
        sse in any::<bool>(),
    ) {
        let clients = [Protocol::Chat, Protocol::Messages, Protocol::Gemini, Protocol::Responses];
        let pair = (Protocol::Converse, clients[client]);
        let (whole, delivered) = translate(pair, sse, &[&input]);
        let (pieces, delivered_split) = translate(pair, sse, &split(&input, &sizes));
        prop_assert_eq!(&whole, &pieces, "{:?}", pair);
        prop_assert_eq!(delivered, delivered_split);
        let (bytes, _) = translate(pair, sse, &split(&input, &[1]));
        prop_assert_eq!(&whole, &bytes, "{:?} byte by byte", pair);
        prop_assert!(String::from_utf8(whole.clone()).is_ok(), "the client gets text");
        prop_assert!(delivered <= input.len() as u64, "{delivered} from {}", input.len());
    }

    #[test]
    fn stream_translators_any_bytes_any_split(
        input in stream_bytes(),
        sizes in proptest::collection::vec(1usize..48, 1..6),
        pair in 0..PAIRS.len(),
        sse in any::<bool>(),
    ) {
        let pair = PAIRS[pair];
        let (whole, delivered) = translate(pair, sse, &[&input]);
        let (pieces, delivered_split) = translate(pair, sse, &split(&input, &sizes));
        prop_assert_eq!(&whole, &pieces, "{:?}", pair);
        prop_assert_eq!(delivered, delivered_split);
        let (bytes, _) = translate(pair, sse, &split(&input, &[1]));
        prop_assert_eq!(&whole, &bytes, "{:?} byte by byte", pair);
        prop_assert!(String::from_utf8(whole.clone()).is_ok(), "the client gets text");
        prop_assert!(whole.len() <= 64 * input.len() + 8 * 1024, "{} from {}", whole.len(), input.len());
        prop_assert!(delivered <= input.len() as u64, "{delivered} from {}", input.len());
    }

    /// Any bytes: a one-level read never panics, and what it reads writes back as the
    /// same object a full parse gives.
    #[test]
    fn shallow_reader_any_bytes(
        input in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            stream_bytes(),
            json_object().prop_map(|v| v.to_string().into_bytes()),
        ],
    ) {
        let full: Option<Value> = serde_json::from_slice(&input).ok();
        match Shallow::parse(&input) {
            Ok(top) => {
                let full = full.expect("what the shallow reader takes is JSON");
                prop_assert!(full.is_object());
                let written: Value = serde_json::from_slice(&top.write(&[], 0)).unwrap();
                prop_assert_eq!(&written, &full);
                prop_assert_eq!(chat::validate_shallow(&top), chat::validate(&full));
            }
            Err(_) => prop_assert!(!full.is_some_and(|v| v.is_object())),
        }
    }

    /// Any bytes under any boundary: no panic; a form built from fields reads back.
    #[test]
    fn multipart_any_bytes(
        input in proptest::collection::vec(any::<u8>(), 0..512),
        boundary in "[a-zA-Z0-9'()+_,./:=?-]{1,40}",
    ) {
        let _ = multipart::parse(&input, &boundary);
        let mut framed = format!("--{boundary}\r\n").into_bytes();
        framed.extend_from_slice(&input);
        let _ = multipart::parse(&framed, &boundary);
    }

    #[test]
    fn multipart_forms_read_back(
        fields in proptest::collection::vec(("[a-z_]{1,12}", "[ -~]{0,40}"), 1..8),
        boundary in "[a-zA-Z0-9]{8,30}",
    ) {
        let mut body = Vec::new();
        for (name, value) in &fields {
            body.extend_from_slice(format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            ).as_bytes());
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        let form = multipart::parse(&body, &boundary).unwrap();
        for (name, value) in &fields {
            // The first value of a name is the one `field` answers.
            let first = fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
            prop_assert_eq!(form.field(name), first, "{} = {:?}", name, value);
        }
    }

    /// Any bytes, any split: the same frames, texts and verdict.
    #[test]
    fn websocket_frames_any_bytes_any_split(
        input in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            frames().prop_map(|fs| fs.concat()),
        ],
        sizes in proptest::collection::vec(1usize..32, 1..6),
    ) {
        let whole = read_frames(&[&input]);
        prop_assert_eq!(&read_frames(&split(&input, &sizes)), &whole);
        prop_assert_eq!(&read_frames(&split(&input, &[1])), &whole);
    }

    /// Well-formed frames (masked or not, text split in fragments, control frames
    /// between) are all read, and text messages come out whole.
    #[test]
    fn websocket_messages_come_out_whole(
        messages in proptest::collection::vec(("[ -~]{0,60}", 1usize..4, any::<bool>()), 1..6),
        sizes in proptest::collection::vec(1usize..32, 1..6),
    ) {
        let mut input = Vec::new();
        let mut frame_count = 0u64;
        for (text, parts, masked) in &messages {
            let bytes = text.as_bytes();
            let chunk = bytes.len().div_ceil(*parts).max(1);
            let pieces: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(chunk).collect() };
            for (i, p) in pieces.iter().enumerate() {
                let op = if i == 0 { 0x1 } else { 0x0 };
                input.extend(frame(op, i + 1 == pieces.len(), p, *masked));
                frame_count += 1;
                // A ping between fragments is allowed.
                input.extend(frame(0x9, true, b"p", *masked));
                frame_count += 1;
            }
        }
        let (frames, texts, error) = read_frames(&split(&input, &sizes));
        prop_assert_eq!(error, None);
        prop_assert_eq!(frames, frame_count);
        let expected: Vec<Vec<u8>> = messages.iter().map(|(t, _, _)| t.as_bytes().to_vec()).collect();
        prop_assert_eq!(texts, expected);
    }
}

/// A JSON object shaped like a chat request, with random members and values.
fn json_object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| n.into()),
        (0u64..300).prop_map(|n| n.into()),
        "[a-z\"\\\\é ]{0,8}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec(("[a-z]{1,6}", inner), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    let names = prop_oneof![
        Just("model".to_string()),
        Just("messages".to_string()),
        Just("n".to_string()),
        Just("stream".to_string()),
        Just("max_tokens".to_string()),
        Just("tools".to_string()),
        Just("stream_options".to_string()),
        "[a-z]{1,8}",
    ];
    proptest::collection::vec((names, value), 0..8)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn frame(op: u8, fin: bool, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut f = vec![(if fin { 0x80 } else { 0 }) | op];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => f.push(mask_bit | n as u8),
        n @ 126..=65535 => {
            f.push(mask_bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(mask_bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = [0x12, 0x34, 0x56, 0x78];
        f.extend_from_slice(&key);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        f.extend_from_slice(payload);
    }
    f
}

/// Random frames, well formed or not.
fn frames() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let one = (
        prop_oneof![
            Just(0x0u8),
            Just(0x1),
            Just(0x2),
            Just(0x8),
            Just(0x9),
            Just(0xA),
            0u8..16
        ],
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..200),
        any::<bool>(),
    )
        .prop_map(|(op, fin, payload, masked)| frame(op, fin, &payload, masked));
    proptest::collection::vec(one, 0..6)
}

fn keep_all(_: &[u8]) -> Sniff {
    Sniff::Keep
}

/// (frames read, collected texts, first error) for `pieces` fed in order.
fn read_frames(pieces: &[&[u8]]) -> (u64, Vec<Vec<u8>>, Option<&'static str>) {
    let mut r = FrameReader::new(Some(Collect {
        cap: 1 << 16,
        sniff: keep_all,
    }));
    let mut texts = Vec::new();
    for p in pieces {
        let fed = r.feed(p, |_, text| {
            if let Some(t) = text {
                texts.push(t.to_vec());
            }
            ControlFlow::Continue(())
        });
        if let Err(e) = fed {
            return (r.frames(), texts, Some(e.reason));
        }
    }
    (r.frames(), texts, None)
}
