//! Test helpers: random splits of a byte stream, a messages SSE reader, and a strict
//! accumulator that builds the final message the way the official SDKs do while checking
//! the event order they rely on.

use serde_json::Value;

/// A small deterministic generator (xorshift64*), so random splits are reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

/// `input` cut into pieces of 1 to `max` bytes (mid-UTF-8 and mid-line included).
pub fn random_pieces(input: &[u8], seed: u64, max: usize) -> Vec<&[u8]> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let n = (1 + rng.below(max)).min(input.len() - at);
        out.push(&input[at..at + n]);
        at += n;
    }
    out
}

/// Every split worth testing: one piece, bytes one by one, and random sizes.
pub fn splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut all = vec![vec![input], input.chunks(1).collect()];
    for seed in 1..=12 {
        all.push(random_pieces(input, seed, 1 + (seed as usize * 7) % 40));
    }
    all
}

/// `event: X\ndata: Y\n\n` events, as (name, data).
pub fn parse_sse(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(bytes).expect("utf-8");
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "half an event: {text}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e.split_once('\n').expect("two lines");
            let name = name.strip_prefix("event: ").expect("event line");
            let data = data.strip_prefix("data: ").expect("data line");
            (name.to_string(), serde_json::from_str(data).expect("json"))
        })
        .collect()
}

/// The final message the SDKs build from these events, or the error event's message.
/// Strict: one block open at a time, indices in order, `message_stop` last. With
/// `by_index`, a delta may also address a block already stopped (the SDKs look blocks
/// up by index).
pub fn accumulate(events: &[(String, Value)], by_index: bool) -> Result<Value, String> {
    let mut it = events.iter();
    let (name, first) = it.next().expect("no events");
    assert_eq!(name, "message_start", "message_start comes first");
    let mut msg = first["message"].clone();
    assert_eq!(msg["content"], serde_json::json!([]));
    let mut open: Option<usize> = None;
    let mut json_bufs: Vec<String> = Vec::new();
    let mut stopped = false;
    for (name, ev) in it {
        assert!(!stopped, "{name} after message_stop");
        assert_eq!(ev["type"], name.as_str(), "event name matches its type");
        let blocks = msg["content"].as_array_mut().expect("content");
        match name.as_str() {
            "content_block_start" => {
                assert!(open.is_none(), "a block started while {open:?} is open");
                let i = ev["index"].as_u64().unwrap() as usize;
                assert_eq!(i, blocks.len(), "indices count from 0 in order");
                blocks.push(ev["content_block"].clone());
                json_bufs.push(String::new());
                open = Some(i);
            }
            "content_block_delta" => {
                let i = ev["index"].as_u64().unwrap() as usize;
                if !(by_index && i < blocks.len()) {
                    assert_eq!(Some(i), open, "delta for a block that is not open");
                }
                let b = &mut blocks[i];
                let d = &ev["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        assert_eq!(b["type"], "text");
                        b["text"] = (b["text"].as_str().unwrap().to_string()
                            + d["text"].as_str().unwrap())
                        .into();
                    }
                    "thinking_delta" => {
                        assert_eq!(b["type"], "thinking");
                        b["thinking"] = (b["thinking"].as_str().unwrap().to_string()
                            + d["thinking"].as_str().unwrap())
                        .into();
                    }
                    "signature_delta" => {
                        assert_eq!(b["type"], "thinking");
                        b["signature"] = d["signature"].clone();
                    }
                    "input_json_delta" => {
                        assert_eq!(b["type"], "tool_use");
                        json_bufs[i].push_str(d["partial_json"].as_str().unwrap());
                        b["input"] = serde_json::from_str(&json_bufs[i])
                            .unwrap_or(Value::String("(partial)".into()));
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                let i = ev["index"].as_u64().unwrap() as usize;
                assert_eq!(Some(i), open, "stop for a block that is not open");
                open = None;
            }
            "message_delta" => {
                msg["stop_reason"] = ev["delta"]["stop_reason"].clone();
                msg["stop_sequence"] = ev["delta"]["stop_sequence"].clone();
                for (k, v) in ev["usage"].as_object().unwrap() {
                    msg["usage"][k] = v.clone();
                }
            }
            "message_stop" => {
                assert!(open.is_none(), "message_stop with a block open");
                stopped = true;
            }
            "ping" => {}
            "error" => {
                assert_eq!(ev["error"]["type"], "api_error");
                return Err(ev["error"]["message"].as_str().unwrap().to_string());
            }
            other => panic!("unknown event {other}"),
        }
    }
    assert!(stopped, "the stream ended without message_stop or error");
    for (i, b) in msg["content"].as_array().unwrap().iter().enumerate() {
        if b["type"] == "tool_use" && !json_bufs[i].is_empty() {
            assert!(
                serde_json::from_str::<Value>(&json_bufs[i]).is_ok(),
                "tool input {i} is not JSON: {}",
                json_bufs[i]
            );
        }
    }
    Ok(msg)
}
