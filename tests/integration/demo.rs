//! The `demo` channel: a model inside the gateway that answers every client protocol
//! without a provider key, is billed like any channel, and fails on request so fallbacks
//! and circuits can be tried.

use crate::gateway::{StoreKind, TestGateway};
use serde_json::{json, Value};

const DEMO: &str = "channels:
  - name: demo
    protocol: demo
    tokens_per_second: 2000
    models: [demo, demo-embed]
prices:
  demo: { input: 0.10, output: 0.40 }
  demo-embed: { input: 0.02 }
";

/// The data lines of an SSE body, parsed (`[DONE]` left out).
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// A messages request, with the version header that protocol requires.
async fn messages(gw: &TestGateway, key: &str, body: &Value) -> (u16, String) {
    let r = gw
        .http
        .post(gw.url("/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn every_client_protocol_gets_an_answer_whole_and_streamed_and_is_billed() {
    let gw = TestGateway::start(DEMO, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;
    let ask = |text: &str| vec![json!({"role": "user", "content": text})];

    // Chat, whole: text, usage, the cost header.
    let (s, h, body) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "demo", "messages": ask("hello there")}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("hello there"), "{text}");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 10);
    assert!(h.contains_key("x-gateway-cost-usd"));
    let after_one = gw.used_micros(&id).await;
    assert!(after_one > 0, "the demo model is billed like any channel");

    // Chat, streamed with usage.
    let (s, _, body) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "demo", "stream": true, "messages": ask("hi"),
                "stream_options": {"include_usage": true}}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let ev = events(&body);
    let streamed: String = ev
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(
        streamed.starts_with("Hello from the demo model"),
        "{streamed}"
    );
    assert!(
        ev.last().unwrap()["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            > 10
    );

    // Messages, whole and streamed.
    let msg = json!({"model": "demo", "max_tokens": 200, "messages": ask("hi")});
    let (s, body) = messages(&gw, &key, &msg).await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "message");
    assert!(v["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("demo model"));
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 10);
    let mut streamed = msg.clone();
    streamed["stream"] = json!(true);
    let (s, body) = messages(&gw, &key, &streamed).await;
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("event: message_stop"), "{body}");
    assert!(body.contains("text_delta"), "{body}");

    // Generate-content, whole and streamed.
    let gen = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let (s, _, body) = gw
        .post("/v1beta/models/demo:generateContent", &key, &gen)
        .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("demo model"));
    let (s, _, body) = gw
        .post(
            "/v1beta/models/demo:streamGenerateContent?alt=sse",
            &key,
            &gen,
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert!(events(&body).len() > 5, "{body}");

    // Responses, whole and streamed.
    let resp = json!({"model": "demo", "input": "hi"});
    let (s, _, body) = gw.post("/v1/responses", &key, &resp).await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "completed", "{body}");
    let mut streamed = resp.clone();
    streamed["stream"] = json!(true);
    let (s, _, body) = gw.post("/v1/responses", &key, &streamed).await;
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("response.completed"), "{body}");

    // Embeddings of the asked shape.
    let (s, _, body) = gw
        .post(
            "/v1/embeddings",
            &key,
            &json!({"model": "demo-embed", "input": ["a", "b"], "dimensions": 12}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"][1]["embedding"].as_array().unwrap().len(), 12);
    assert!(gw.used_micros(&id).await > after_one);
}

#[tokio::test]
async fn tools_offered_are_called_in_every_client_protocol() {
    let gw = TestGateway::start(DEMO, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"quota_usd": 1})).await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"]});
    let (s, _, body) = gw
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "demo", "messages": [{"role": "user", "content": "weather?"}],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "parameters": schema}}]}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["arguments"], r#"{"city":"demo"}"#);

    let (s, body) = messages(
        &gw,
        &key,
        &json!({"model": "demo", "max_tokens": 100, "stream": true,
            "messages": [{"role": "user", "content": "weather?"}],
            "tools": [{"name": "get_weather", "input_schema": schema}]}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert!(body.contains(r#""type":"tool_use""#), "{body}");
    assert!(body.contains(r#""stop_reason":"tool_use""#), "{body}");

    let (s, _, body) = gw
        .post(
            "/v1beta/models/demo:generateContent",
            &key,
            &json!({"contents": [{"role": "user", "parts": [{"text": "weather?"}]}],
                "tools": [{"functionDeclarations": [{"name": "get_weather",
                    "parameters": schema}]}]}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["functionCall"]["args"],
        json!({"city": "demo"})
    );
}

/// A model that fails trips its channel's circuit; the model's second channel answers
/// from then on. A model that never answers ends at the channel's read timeout.
#[tokio::test]
async fn failures_on_request_trip_the_circuit_and_fail_over() {
    let config = "channels:
  - name: demo-broken
    protocol: demo
    models: [demo]
    model_map: { demo: demo-error }
    circuit: { failures: 2, cooldown_secs: 600 }
  - name: demo-good
    protocol: demo
    tokens_per_second: 1000
    models: [demo]
    priority: 1
  - name: demo-silent
    protocol: demo
    models: [demo-timeout, demo-slow]
    read_timeout_secs: 1
prices:
  demo: { input: 0.10, output: 0.40 }
  demo-timeout: { input: 0.10, output: 0.40 }
  demo-slow: { input: 0.10, output: 0.40 }
";
    let gw = TestGateway::start(config, StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;
    let body = json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        let (s, _, text) = gw.post("/v1/chat/completions", &key, &body).await;
        assert_eq!(s, 500, "{text}");
    }
    let (_, channels) = gw.admin_get("/admin/channels").await;
    let broken = channels["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "demo-broken")
        .unwrap();
    assert_eq!(broken["state"], "open", "{channels}");
    let (s, _, text) = gw.post("/v1/chat/completions", &key, &body).await;
    assert_eq!(s, 200, "{text}");
    assert!(gw.used_micros(&id).await > 0);

    let silent = json!({"model": "demo-timeout", "messages": [{"role": "user", "content": "hi"}]});
    let (s, _, text) = gw.post("/v1/chat/completions", &key, &silent).await;
    assert_eq!(s, 500, "{text}");
    assert!(text.contains("did not respond in time"), "{text}");

    // A stream that stalls after its first events ends at the read timeout, with the
    // client protocol's error event.
    let stall = json!({"model": "demo-slow", "stream": true,
        "messages": [{"role": "user", "content": "[demo:stall]"}]});
    let (s, _, text) = gw.post("/v1/chat/completions", &key, &stall).await;
    assert_eq!(s, 200, "{text}");
    assert!(text.contains("\"error\""), "{text}");
}

/// The official SDKs, pointed at the gateway, talk to the demo model: streamed and not,
/// with a tool call.
#[tokio::test]
async fn the_official_sdks_answer_from_the_demo_model() {
    let gw = TestGateway::start(DEMO, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"quota_usd": 1})).await;
    let script = r#"
import os, sys
from openai import OpenAI
import anthropic
from google import genai
from google.genai import types
base, key = os.environ["GATEWAY_BASE_URL"], os.environ["GATEWAY_KEY"]
oa = OpenAI(base_url=base + "/v1", api_key=key)
r = oa.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Hello"}])
assert "demo model" in r.choices[0].message.content, r
text = "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(
    model="demo", stream=True, messages=[{"role": "user", "content": "Hello"}]) if c.choices)
assert text.startswith("Hello from the demo model"), text
tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
         "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
r = oa.chat.completions.create(model="demo", tools=tools,
    messages=[{"role": "user", "content": "1+2?"}])
assert r.choices[0].message.tool_calls[0].function.name == "add", r
e = oa.embeddings.create(model="demo-embed", input="hi")
assert len(e.data[0].embedding) == 1536
an = anthropic.Anthropic(base_url=base, api_key=key)
m = an.messages.create(model="demo", max_tokens=100, messages=[{"role": "user", "content": "Hi"}])
assert "demo model" in m.content[0].text, m
with an.messages.stream(model="demo", max_tokens=100,
                        messages=[{"role": "user", "content": "Hi"}]) as s:
    assert "demo model" in "".join(s.text_stream)
g = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base, api_version="v1beta"))
r = g.models.generate_content(model="demo", contents="Hi")
assert "demo model" in r.text, r
r = oa.responses.create(model="demo", input="Hi")
assert "demo model" in r.output_text, r
print("ok")
"#;
    let python = std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = tokio::process::Command::new(python)
        .args(["-c", script])
        .env("GATEWAY_BASE_URL", &gw.base)
        .env("GATEWAY_KEY", &key)
        .output()
        .await
        .expect("python runs (the test command installs the SDKs)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("ok"), "{text}");
}
