//! What the demo model answers, in the shapes of OpenAI's API reference ("Chat
//! Completions": the chat completion object and its chunk object; "Embeddings"; "Models").

use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// What the connection writes back.
pub enum Reply {
    Whole {
        status: u16,
        body: Vec<u8>,
    },
    /// Server-sent events, `interval` apart.
    Stream {
        events: Vec<String>,
        interval: Duration,
        end: End,
    },
    /// No answer at all: the connection stays open until the peer leaves.
    Hang,
}

/// How a stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Done,
    /// The connection closes after the first events.
    Cut,
    /// The first events, then silence.
    Stall,
}

/// A failure asked for by model name or by a marker in the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Error,
    Overloaded,
    Timeout,
    Stall,
    Cut,
}

impl Fault {
    const ALL: [(Fault, &'static str); 5] = [
        (Fault::Error, "error"),
        (Fault::Overloaded, "overloaded"),
        (Fault::Timeout, "timeout"),
        (Fault::Stall, "stall"),
        (Fault::Cut, "cut"),
    ];

    fn of(model: &str, prompt: &str) -> Option<Fault> {
        Fault::ALL.iter().find_map(|(f, name)| {
            let by_model = model.strip_prefix("demo-") == Some(*name);
            let by_marker = prompt.contains(&format!("[demo:{name}]"));
            (by_model || by_marker).then_some(*f)
        })
    }
}

pub fn handle(method: &str, path: &str, body: &[u8]) -> Reply {
    let (rate, route) = split_prefix(path);
    let route = route.split('?').next().unwrap_or("");
    match (method, route) {
        ("POST", "/v1/chat/completions") => chat(body, rate),
        ("POST", "/v1/embeddings") => embeddings(body),
        ("GET", "/v1/models") => whole(
            200,
            json!({"object": "list", "data": [
                {"id": "demo", "object": "model", "created": 0, "owned_by": "model-gateway"}
            ]}),
        ),
        (_, "/v1/chat/completions" | "/v1/embeddings" | "/v1/models") => {
            error(405, "invalid_request_error", "Method not allowed.")
        }
        _ => error(
            404,
            "invalid_request_error",
            &format!("The demo model does not serve {route}."),
        ),
    }
}

/// The token rate in the path's `/demo/{rate}` prefix, and the path after it.
fn split_prefix(path: &str) -> (u32, &str) {
    let Some(rest) = path.strip_prefix("/demo/") else {
        return (super::DEFAULT_TOKENS_PER_SECOND, path);
    };
    let (rate, route) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    (
        rate.parse().unwrap_or(super::DEFAULT_TOKENS_PER_SECOND),
        route,
    )
}

pub fn error_body(status: u16, message: &str) -> Vec<u8> {
    let kind = match status {
        429 => "rate_limit_exceeded",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        .to_string()
        .into_bytes()
}

fn error(status: u16, kind: &str, message: &str) -> Reply {
    whole(
        status,
        json!({"error": {"message": message, "type": kind, "param": null, "code": null}}),
    )
}

fn whole(status: u16, v: Value) -> Reply {
    Reply::Whole {
        status,
        body: v.to_string().into_bytes(),
    }
}

/// The members of a chat request the demo model reads.
#[derive(Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<Message>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    tools: Vec<Tool>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    n: Option<u64>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Value,
}

#[derive(Deserialize)]
struct Tool {
    function: Function,
}

#[derive(Deserialize)]
struct Function {
    name: String,
    #[serde(default)]
    parameters: Value,
}

/// The text of a message's content: a string, or its text parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// Tokens of a text, as a tokenizer would count them roughly: four bytes a token.
fn tokens_of(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// One answer, before it is written whole or as events.
struct Made {
    /// Words of the text, each one token, each with its trailing space.
    words: Vec<String>,
    call: Option<(String, String)>,
    finish: &'static str,
    usage: Value,
}

fn chat(body: &[u8], rate: u32) -> Reply {
    let req: ChatRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                400,
                "invalid_request_error",
                &format!("The demo model cannot read the request: {e}."),
            )
        }
    };
    let last_user = req
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| text_of(&m.content))
        .unwrap_or_default();
    match Fault::of(&req.model, &last_user) {
        Some(Fault::Error) => {
            return error(500, "server_error", "The demo model failed, as asked.")
        }
        Some(Fault::Overloaded) => {
            return error(
                429,
                "rate_limit_exceeded",
                "The demo model is overloaded, as asked.",
            )
        }
        Some(Fault::Timeout) => return Reply::Hang,
        _ => {}
    }
    let made = make(&req, &last_user);
    let end = match Fault::of(&req.model, &last_user) {
        Some(Fault::Stall) => End::Stall,
        Some(Fault::Cut) => End::Cut,
        _ => End::Done,
    };
    let id = format!("chatcmpl-demo{:016x}", crate::ids::fnv1a(body));
    let created = crate::ids::now_secs();
    if req.stream {
        let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        Reply::Stream {
            events: events(&req, &made, &id, created, include_usage),
            interval: Duration::from_micros(1_000_000 / u64::from(rate.max(1))),
            end,
        }
    } else if end == End::Done {
        whole(200, completion(&req, &made, &id, created))
    } else {
        Reply::Hang
    }
}

fn make(req: &ChatRequest, last_user: &str) -> Made {
    let limit = match (req.max_completion_tokens, req.max_tokens) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(4096),
    };
    let prompt_bytes: usize = req
        .messages
        .iter()
        .map(|m| text_of(&m.content).len() + 4 * 4)
        .sum::<usize>()
        + req
            .tools
            .iter()
            .map(|t| t.function.name.len() + t.function.parameters.to_string().len())
            .sum::<usize>();
    let choices = req.n.unwrap_or(1).max(1);
    let call = tool_call(req);
    let (words, finish) = match &call {
        Some(_) => (Vec::new(), "tool_calls"),
        None => {
            let all = sentence(last_user);
            if all.len() as u64 > limit {
                (all[..limit as usize].to_vec(), "length")
            } else {
                (all, "stop")
            }
        }
    };
    let written = words.len() as u64
        + call
            .as_ref()
            .map_or(0, |(n, a)| tokens_of(n.len() + a.len()));
    let prompt = tokens_of(prompt_bytes);
    let completion = written * choices;
    Made {
        usage: json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }),
        words,
        call,
        finish,
    }
}

/// The answer's text, a word a token.
fn sentence(last_user: &str) -> Vec<String> {
    let asked: Vec<&str> = last_user.split_whitespace().take(12).collect();
    let mut text = String::from("Hello from the demo model of model-gateway.");
    if !asked.is_empty() {
        text.push_str(&format!(" You said: \"{}\".", asked.join(" ")));
    }
    text.push_str(
        " This answer is made up inside the gateway, paced like a real model, so you can \
         try keys, budgets, streaming and every client protocol without a provider key.",
    );
    text.split(' ').map(|w| format!("{w} ")).collect()
}

/// A call of the tool the request names, or of its first tool, unless it forbids calls
/// or the conversation already carries a tool's result.
fn tool_call(req: &ChatRequest) -> Option<(String, String)> {
    if req.tools.is_empty() || req.messages.last().is_some_and(|m| m.role == "tool") {
        return None;
    }
    let named = match &req.tool_choice {
        Some(Value::String(s)) if s == "none" => return None,
        Some(Value::Object(o)) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str),
        _ => None,
    };
    let tool = named
        .and_then(|n| req.tools.iter().find(|t| t.function.name == n))
        .unwrap_or(&req.tools[0]);
    let args = example_of(&tool.function.parameters);
    Some((tool.function.name.clone(), args.to_string()))
}

/// A value that fits a JSON schema: each property filled by its type.
fn example_of(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => json!("demo"),
        Some("integer") | Some("number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("null") => Value::Null,
        _ => {
            let mut out = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, s) in props {
                    out.insert(name.clone(), example_of(s));
                }
            }
            Value::Object(out)
        }
    }
}

fn message_of(made: &Made) -> Value {
    let mut m = json!({"role": "assistant", "content": null, "refusal": null});
    match &made.call {
        Some((name, args)) => {
            m["tool_calls"] = json!([{
                "id": "call_demo0",
                "type": "function",
                "function": {"name": name, "arguments": args},
            }]);
        }
        None => m["content"] = json!(made.words.concat().trim_end()),
    }
    m
}

fn completion(req: &ChatRequest, made: &Made, id: &str, created: i64) -> Value {
    let choices: Vec<Value> = (0..req.n.unwrap_or(1).max(1))
        .map(|i| {
            json!({
                "index": i,
                "message": message_of(made),
                "logprobs": null,
                "finish_reason": made.finish,
            })
        })
        .collect();
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "choices": choices,
        "usage": made.usage,
        "system_fingerprint": "fp_demo",
    })
}

fn events(
    req: &ChatRequest,
    made: &Made,
    id: &str,
    created: i64,
    include_usage: bool,
) -> Vec<String> {
    let chunk = |choices: Value, usage: Option<&Value>| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": req.model,
            "system_fingerprint": "fp_demo",
            "choices": choices,
        });
        if include_usage {
            c["usage"] = usage.cloned().unwrap_or(Value::Null);
        }
        format!("data: {c}\n\n")
    };
    let n = req.n.unwrap_or(1).max(1);
    let each = |delta: Value, finish: Option<&str>| {
        let choices: Vec<Value> = (0..n)
            .map(|i| json!({"index": i, "delta": delta, "logprobs": null, "finish_reason": finish}))
            .collect();
        chunk(Value::Array(choices), None)
    };
    let mut out = vec![each(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )];
    match &made.call {
        Some((name, args)) => {
            out.push(each(
                json!({"tool_calls": [{"index": 0, "id": "call_demo0", "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                None,
            ));
            for piece in pieces(args, 8) {
                out.push(each(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        None => {
            for w in &made.words {
                out.push(each(json!({"content": w}), None));
            }
        }
    }
    out.push(each(json!({}), Some(made.finish)));
    if include_usage {
        out.push(chunk(json!([]), Some(&made.usage)));
    }
    out.push("data: [DONE]\n\n".into());
    out
}

/// `s` in pieces of at most `n` characters.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// The members of an embeddings request the demo model reads.
#[derive(Deserialize)]
struct EmbeddingsRequest {
    model: String,
    input: Value,
    #[serde(default)]
    dimensions: Option<usize>,
    #[serde(default)]
    encoding_format: Option<String>,
}

/// Dimensions of a demo embedding when the request names none (text-embedding-3-small's).
const DEMO_DIMENSIONS: usize = 1536;

fn embeddings(body: &[u8]) -> Reply {
    let req: EmbeddingsRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                400,
                "invalid_request_error",
                &format!("The demo model cannot read the request: {e}."),
            )
        }
    };
    if let Some(Fault::Error) = Fault::of(&req.model, "") {
        return error(500, "server_error", "The demo model failed, as asked.");
    }
    let inputs: Vec<String> = match &req.input {
        Value::Array(items) if items.iter().all(Value::is_number) => vec![req.input.to_string()],
        Value::Array(items) => items.iter().map(|i| i.to_string()).collect(),
        other => vec![other.to_string()],
    };
    let dims = req.dimensions.unwrap_or(DEMO_DIMENSIONS).clamp(1, 3072);
    let base64 = req.encoding_format.as_deref() == Some("base64");
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let v = vector(text, dims);
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let tokens: u64 = inputs.iter().map(|t| tokens_of(t.len())).sum();
    whole(
        200,
        json!({
            "object": "list",
            "data": data,
            "model": req.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    )
}

/// A unit vector that depends only on the text: the same input embeds the same.
fn vector(text: &str, dims: usize) -> Vec<f32> {
    let mut state = crate::ids::fnv1a(text.as_bytes()) | 1;
    let mut v: Vec<f32> = (0..dims)
        .map(|_| {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    #[test]
    fn a_whole_answer_has_text_usage_and_the_limit() {
        let r = handle(
            "POST",
            "/demo/0/v1/chat/completions",
            &body(json!({"model": "demo", "max_tokens": 3,
                "messages": [{"role": "user", "content": "hi there"}]})),
        );
        let Reply::Whole { status, body } = r else {
            panic!("whole")
        };
        assert_eq!(status, 200);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], 3);
        assert_eq!(v["choices"][0]["message"]["content"], "Hello from the");
    }

    #[test]
    fn tools_offered_get_a_call_with_arguments_that_fit_the_schema() {
        let r = handle(
            "POST",
            "/v1/chat/completions",
            &body(
                json!({"model": "demo", "messages": [{"role": "user", "content": "weather?"}],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                  "parameters": {"type": "object", "properties": {
                     "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}}}}]}),
            ),
        );
        let Reply::Whole { body, .. } = r else {
            panic!("whole")
        };
        let v: Value = serde_json::from_slice(&body).unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "get_weather");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "demo", "unit": "c"}));
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn a_stream_ends_with_usage_when_asked_and_done() {
        let r = handle(
            "POST",
            "/demo/1000/v1/chat/completions",
            &body(json!({"model": "demo", "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": "hi"}]})),
        );
        let Reply::Stream {
            events,
            interval,
            end,
        } = r
        else {
            panic!("stream")
        };
        assert_eq!(interval, Duration::from_millis(1));
        assert_eq!(end, End::Done);
        assert_eq!(events.last().unwrap(), "data: [DONE]\n\n");
        let usage: Value =
            serde_json::from_str(events[events.len() - 2].trim_start_matches("data: ")).unwrap();
        assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 10);
        assert_eq!(usage["choices"], json!([]));
    }

    #[test]
    fn faults_come_by_model_name_or_marker() {
        let ask = |model: &str, text: &str| {
            handle(
                "POST",
                "/v1/chat/completions",
                &body(json!({"model": model, "messages": [{"role": "user", "content": text}]})),
            )
        };
        assert!(matches!(
            ask("demo-error", "x"),
            Reply::Whole { status: 500, .. }
        ));
        assert!(matches!(
            ask("demo", "please [demo:overloaded]"),
            Reply::Whole { status: 429, .. }
        ));
        assert!(matches!(ask("demo-timeout", "x"), Reply::Hang));
        assert!(matches!(
            ask("demo", "ok"),
            Reply::Whole { status: 200, .. }
        ));
    }

    #[test]
    fn embeddings_have_the_asked_shape_and_are_stable() {
        let ask = |format: &str| {
            let Reply::Whole { body, .. } = handle(
                "POST",
                "/v1/embeddings",
                &body(
                    json!({"model": "demo", "input": ["a", "b"], "dimensions": 8,
                    "encoding_format": format}),
                ),
            ) else {
                panic!("whole")
            };
            serde_json::from_slice::<Value>(&body).unwrap()
        };
        let v = ask("float");
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 8);
        assert_eq!(ask("float"), v);
        let b = ask("base64");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(raw.len(), 8 * 4);
    }
}
