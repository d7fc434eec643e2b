//! Every client protocol against every upstream protocol, streaming and not, through a
//! real gateway and the scripted providers (issue: three client protocols).

use crate::gateway::{StoreKind, TestGateway};
use crate::mock_upstream::{End, MockUpstream, Reply};
use crate::providers;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Client {
    Chat,
    Messages,
    Gemini,
    Responses,
}

pub const CLIENTS: [Client; 4] = [
    Client::Chat,
    Client::Messages,
    Client::Gemini,
    Client::Responses,
];

/// (model, what the scripted provider says for it)
const UPSTREAMS: [(&str, &str); 3] = [
    ("m-openai", "Hello from chat."),
    ("m-anthropic", "Hello from messages."),
    ("m-gemini", "Hello from gemini."),
];

pub fn config(base: &str) -> String {
    let price = "{ input: 1.0, output: 2.0, cached_input: 0.5 }";
    format!(
        "channels:\n\
         \x20 - {{ name: oa, protocol: openai, base_url: \"{base}\", models: [m-openai] }}\n\
         \x20 - {{ name: an, protocol: anthropic, base_url: \"{base}\", models: [m-anthropic] }}\n\
         \x20 - {{ name: gm, protocol: gemini, base_url: \"{base}\", models: [m-gemini] }}\n\
         \x20 - {{ name: rs, protocol: openai, responses_api: true, base_url: \"{base}\", models: [m-responses] }}\n\
         prices:\n  m-openai: {price}\n  m-anthropic: {price}\n  m-gemini: {price}\n  m-responses: {price}\n"
    )
}

/// 8 plain prompt tokens at 1, 2 cached at 0.5, 5 output at 2 micro-USD each.
const COST: i64 = 8 + 1 + 10;

pub fn request(
    gw: &TestGateway,
    client: Client,
    model: &str,
    stream: bool,
    key: &str,
) -> reqwest::RequestBuilder {
    let (path, body) = match client {
        Client::Chat => (
            "/v1/chat/completions".to_string(),
            json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        Client::Messages => (
            "/v1/messages".to_string(),
            json!({"model": model, "stream": stream, "max_tokens": 200, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        Client::Gemini => (
            if stream {
                format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
            } else {
                format!("/v1beta/models/{model}:generateContent")
            },
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        ),
        Client::Responses => (
            "/v1/responses".to_string(),
            json!({"model": model, "stream": stream, "input": "hi"}),
        ),
    };
    let r = gw.http.post(gw.url(&path)).json(&body);
    match client {
        Client::Messages => r
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01"),
        Client::Gemini => r.header("x-goog-api-key", key),
        _ => r.bearer_auth(key),
    }
}

/// The answer's text in a non-streaming response of the client's protocol.
fn text_of(client: Client, v: &Value) -> String {
    let texts: Vec<&Value> = match client {
        Client::Chat => vec![&v["choices"][0]["message"]["content"]],
        Client::Messages => v["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| &b["text"])
            .collect(),
        Client::Gemini => v["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p["text"])
            .collect(),
        Client::Responses => v["output"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|i| i["content"].as_array().into_iter().flatten())
            .map(|c| &c["text"])
            .collect(),
    };
    texts.iter().filter_map(|t| t.as_str()).collect()
}

/// SSE events (name, data) of a whole streamed response.
pub async fn events(resp: reqwest::Response) -> Vec<(String, String)> {
    let mut body = String::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let body = body.replace("\r\n", "\n");
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Vec::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = n.trim().to_string();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.trim_start());
                }
            }
            (name, data.join("\n"))
        })
        .collect()
}

pub fn stream_text(client: Client, evs: &[(String, String)]) -> String {
    let mut out = String::new();
    for (name, data) in evs {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let piece = match client {
            Client::Chat => v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string),
            Client::Messages if name == "content_block_delta" => {
                v["delta"]["text"].as_str().map(str::to_string)
            }
            Client::Gemini => v["candidates"][0]["content"]["parts"]
                .as_array()
                .map(|ps| ps.iter().filter_map(|p| p["text"].as_str()).collect()),
            Client::Responses if name == "response.output_text.delta" => {
                v["delta"].as_str().map(str::to_string)
            }
            _ => None,
        };
        out.push_str(&piece.unwrap_or_default());
    }
    out
}

/// Whether the stream ended the way the client's SDK expects a complete stream to end.
pub fn ended_cleanly(client: Client, evs: &[(String, String)]) -> bool {
    let Some((name, data)) = evs.last() else {
        return false;
    };
    match client {
        Client::Chat => data == "[DONE]",
        Client::Messages => name == "message_stop",
        Client::Gemini => serde_json::from_str::<Value>(data)
            .is_ok_and(|v| v["candidates"][0]["finishReason"].is_string()),
        Client::Responses => name == "response.completed",
    }
}

/// Whether the stream ended with the client protocol's terminal error.
pub fn ended_with_error(client: Client, evs: &[(String, String)]) -> bool {
    let Some((name, data)) = evs.last() else {
        return false;
    };
    let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    let has_rid = data.contains("(request id: ");
    has_rid
        && match client {
            Client::Chat | Client::Gemini => v["error"]["message"].is_string(),
            Client::Messages => name == "error" && v["type"] == "error",
            Client::Responses => name == "error" && v["error"].is_object(),
        }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_protocol_reaches_every_upstream_protocol() {
    let up = providers::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({"quota_usd": 1})).await;
    let mut spent = 0;
    for client in CLIENTS {
        for (model, said) in UPSTREAMS {
            let what = format!("{client:?} -> {model}");
            let r = request(&gw, client, model, false, &key)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{what}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(text_of(client, &v), said, "{what}: {v}");
            let same = matches!(
                (client, model),
                (Client::Chat, "m-openai")
                    | (Client::Messages, "m-anthropic")
                    | (Client::Gemini, "m-gemini")
            );
            // Translated answers carry the gateway's ids; passthrough keeps the upstream's.
            assert!(same || !v.to_string().contains("_up"), "{what}: {v}");
            spent += COST;
            assert_eq!(
                gw.used_micros(&id).await,
                spent,
                "{what}: billed from real usage"
            );

            let r = request(&gw, client, model, true, &key)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{what} stream");
            let evs = events(r).await;
            assert_eq!(stream_text(client, &evs), said, "{what} stream: {evs:?}");
            assert!(ended_cleanly(client, &evs), "{what} stream end: {evs:?}");
            spent += COST;
            assert_eq!(gw.used_micros(&id).await, spent, "{what} stream: billed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_responses_channel_passes_through_untouched() {
    let up = providers::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let body =
        json!({"model": "m-responses", "input": "hi", "store": false, "custom_field": {"a": 1}});
    let (s, _, text) = gw.post("/v1/responses", &key, &body).await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["upstream_only"], "kept",
        "unknown response fields survive"
    );
    assert_eq!(v["model"], "m-responses");
    let seen = up.last();
    assert_eq!(seen.path, "/v1/responses");
    assert_eq!(
        seen.json()["custom_field"],
        json!({"a": 1}),
        "unknown request fields survive"
    );
    assert_eq!(gw.used_micros(&id).await, COST);

    let r = request(&gw, Client::Responses, "m-responses", true, &key)
        .send()
        .await
        .unwrap();
    let evs = events(r).await;
    assert_eq!(
        stream_text(Client::Responses, &evs),
        "Hello from responses."
    );
    assert!(ended_cleanly(Client::Responses, &evs), "{evs:?}");
    assert_eq!(gw.used_micros(&id).await, 2 * COST);
}

/// Upstream streams cut before their end marker, one per upstream protocol.
fn cut_stream(r: &crate::mock_upstream::Recorded) -> Reply {
    let path = r.path.clone();
    let pieces: Vec<Vec<u8>> = if path.ends_with("/chat/completions") {
        vec![b"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n".to_vec()]
    } else if path.ends_with("/messages") {
        vec![
            b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n".to_vec(),
            b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_vec(),
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n".to_vec(),
        ]
    } else {
        vec![b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]},\"index\":0}]}\n\n".to_vec()]
    };
    Reply::Chunked {
        status: 200,
        content_type: "text/event-stream".into(),
        pieces,
        interval: Duration::from_millis(2),
        end: End::Disconnect,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_upstream_stream_ends_every_client_stream_with_an_error_never_a_hang() {
    let up = MockUpstream::start(cut_stream).await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for client in CLIENTS {
        for (model, _) in UPSTREAMS {
            let what = format!("{client:?} -> {model}");
            let r = request(&gw, client, model, true, &key)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{what}");
            let evs = tokio::time::timeout(Duration::from_secs(20), events(r))
                .await
                .unwrap_or_else(|_| panic!("{what}: the client stream hung"));
            assert!(
                stream_text(client, &evs).starts_with("Hel"),
                "{what}: {evs:?}"
            );
            assert!(ended_with_error(client, &evs), "{what}: {evs:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_gemini_validation_answer_in_their_own_shape() {
    let up = providers::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let cases = [
        (
            json!({"model": "m-openai", "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        (
            json!({"model": "m-openai", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        (
            json!({"model": "m-openai", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"model": "m-openai", "max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]}),
            "temperature",
        ),
    ];
    for (body, param) in cases {
        let r = gw
            .http
            .post(gw.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(param) && msg.contains("(request id: "),
            "{param}: {v}"
        );
    }
    // msg-version is required on /v1/messages (spec 4.17), under either name.
    let ok_body = json!({"model": "m-openai", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
    let r = gw
        .http
        .post(gw.url("/v1/messages"))
        .header("x-api-key", &key)
        .json(&ok_body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = gw
        .http
        .post(gw.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("msg-version", "2023-06-01")
        .json(&ok_body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let r = gw
        .http
        .post(gw.url("/v1beta/models/m-gemini:generateContent"))
        .header("x-goog-api-key", &key)
        .json(&json!({"contents": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("contents"),
        "{v}"
    );
    // Nothing above reached the upstream or cost anything, except the one valid request.
    assert_eq!(up.requests().len(), 1);
    assert_eq!(gw.used_micros(&id).await, COST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_speech_requests_pass_through_to_gemini_channels_only() {
    let up = providers::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let speech = json!({
        "contents": [{"parts": [{"text": "Say cheerfully: Have a wonderful day!"}]}],
        "generationConfig": {"responseModalities": ["AUDIO"],
            "speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}}}
    });
    let post = |model: &str| {
        gw.http
            .post(gw.url(&format!("/v1beta/models/{model}:generateContent?key={key}")))
            .json(&speech)
            .send()
    };
    let r = post("m-gemini").await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let audio = &v["candidates"][0]["content"]["parts"][0]["inlineData"];
    assert_eq!(audio["mimeType"], "audio/L16;codec=pcm;rate=24000", "{v}");
    assert_eq!(audio["data"], "AAECAw==");
    let seen = up.last();
    assert_eq!(seen.path, "/v1beta/models/m-gemini:generateContent");
    assert_eq!(
        seen.json()["generationConfig"]["speechConfig"],
        speech["generationConfig"]["speechConfig"]
    );
    assert!(
        !seen.headers.iter().any(|(_, v)| v.contains(&key)),
        "the client key is never forwarded"
    );
    assert_eq!(gw.used_micros(&id).await, COST);
    // Audio output cannot be produced by a chat upstream: refused before any call.
    let r = post("m-openai").await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(up.requests().len(), 1);
}
