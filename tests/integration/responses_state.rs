//! Conversation state (spec 4.4, 4.5): responses the gateway stores and
//! `previous_response_id` served from them on every upstream protocol, on both stores.
//!
//! The store itself on every backend (`ResponseStore`: owner-only reads, deletion, bytes,
//! expiry), then through the gateway: three-turn conversations with a tool call in turn
//! two against chat, messages, generate-content and a native Responses API channel,
//! streamed and not, each upstream checked to receive the whole history in its own shape;
//! ids another key made, deleted or expired answered like unknown ones; the chain's
//! depth and the key's stored bytes bounded; truncation; compaction; the capped key's
//! reservation of the stored chain; two instances on one Redis; the admin's deletion.

use crate::cap::{Setup, Store as CapStore};
use crate::contract::{backends, open, KEY, OTHER};
use crate::gateway::{error_of, StoreKind, TestGateway, ADMIN_TOKEN};
use crate::greedy_upstream::Behaviour;
use crate::mock_upstream::{openai, End, MockUpstream, Recorded, Reply};
use crate::providers::{self, ANSWER, CALL_ID, SIGNATURE, TOOLU_ID};
use crate::redis_server::RedisServer;
use model_gateway::config::StoreConfig;
use model_gateway::store::responses::StoredResponse;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

// ---- the store, on every backend ----

backends!(
    stored_responses_are_read_only_through_their_key,
    stored_responses_are_deleted_one_by_one_and_with_their_key,
    stored_responses_expire_by_themselves,
);

fn stored(key_id: &str, id: &str, text: &str) -> StoredResponse {
    StoredResponse {
        id: id.into(),
        key_id: key_id.into(),
        created_at: 1_700_000_000,
        chain: vec![],
        input: vec![json!({"role": "user", "content": text})],
        response: json!({"id": id, "object": "response", "output": []}),
        native: false,
        tokens: 15,
    }
}

async fn stored_responses_are_read_only_through_their_key(cfg: StoreConfig) {
    let store = open(&cfg).await;
    let rs = store.responses().expect("the backend stores responses");
    let a = stored(KEY, "resp_a", "one");
    let b = stored(KEY, "resp_b", "two");
    rs.put_response(&a, 100, 3600).await.unwrap();
    rs.put_response(&b, 50, 3600).await.unwrap();
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let got = rs
        .get_responses(KEY, &ids(&["resp_b", "nope", "resp_a"]))
        .await
        .unwrap();
    assert_eq!(got, vec![b.clone(), a.clone()], "in the order asked");
    assert!(rs
        .get_responses(OTHER, &ids(&["resp_a"]))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(rs.stored_bytes(KEY).await.unwrap(), 150);
    assert_eq!(rs.stored_bytes(OTHER).await.unwrap(), 0);
    assert!(!rs.delete_response(OTHER, "resp_a").await.unwrap());
    assert_eq!(
        rs.get_responses(KEY, &ids(&["resp_a"])).await.unwrap(),
        vec![a]
    );
}

async fn stored_responses_are_deleted_one_by_one_and_with_their_key(cfg: StoreConfig) {
    let store = open(&cfg).await;
    let rs = store.responses().unwrap();
    for n in 0..3 {
        rs.put_response(&stored(KEY, &format!("resp_{n}"), "x"), 10, 3600)
            .await
            .unwrap();
    }
    rs.put_response(&stored(OTHER, "resp_o", "x"), 10, 3600)
        .await
        .unwrap();
    assert!(rs.delete_response(KEY, "resp_0").await.unwrap());
    assert!(!rs.delete_response(KEY, "resp_0").await.unwrap(), "once");
    assert_eq!(rs.stored_bytes(KEY).await.unwrap(), 20);
    assert_eq!(rs.delete_key_responses(KEY).await.unwrap(), 2);
    assert_eq!(rs.stored_bytes(KEY).await.unwrap(), 0);
    let left = rs
        .get_responses(KEY, &["resp_1".into(), "resp_2".into()])
        .await
        .unwrap();
    assert!(left.is_empty());
    assert_eq!(
        rs.get_responses(OTHER, &["resp_o".into()])
            .await
            .unwrap()
            .len(),
        1,
        "another key's stay"
    );
}

async fn stored_responses_expire_by_themselves(cfg: StoreConfig) {
    let store = open(&cfg).await;
    let rs = store.responses().unwrap();
    rs.put_response(&stored(KEY, "resp_short", "x"), 10, 1)
        .await
        .unwrap();
    rs.put_response(&stored(KEY, "resp_long", "x"), 20, 3600)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = rs.get_responses(KEY, &["resp_short".into()]).await.unwrap();
        if got.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the response never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rs.stored_bytes(KEY).await.unwrap(),
        20,
        "expired bytes no longer count"
    );
    assert_eq!(
        rs.get_responses(KEY, &["resp_long".into()])
            .await
            .unwrap()
            .len(),
        1
    );
}

// ---- through the gateway ----

/// One gateway-level check, given its gateways' store, on the embedded store and on a
/// private Redis.
macro_rules! on_both_stores {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$check(crate::gateway::StoreKind::Embedded).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                let redis = crate::redis_server::RedisServer::start().await;
                super::$check(crate::gateway::StoreKind::Redis(redis.url())).await;
            }
        }
    )*};
}

on_both_stores!(
    three_turns_with_a_tool_call_on_every_translated_protocol,
    another_keys_deleted_and_expired_ids_answer_like_unknown_ones,
    a_chain_past_its_depth_and_a_key_past_its_stored_bytes_are_refused,
    input_items_are_listed_in_pages,
    compaction_takes_a_previous_response_id,
    truncation_auto_drops_the_oldest_turns_and_disabled_refuses,
);

fn tools() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "Weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

/// The response object of a `/v1/responses` answer: the body, or a stream's
/// `response.completed` (or `response.incomplete`) event.
fn response_of(stream: bool, body: &str) -> Value {
    if !stream {
        return serde_json::from_str(body).unwrap_or_else(|_| panic!("JSON: {body}"));
    }
    let completed = body
        .split("\n\n")
        .filter_map(|ev| {
            ev.lines()
                .find_map(|l| l.strip_prefix("data: "))
                .and_then(|d| serde_json::from_str::<Value>(d).ok())
        })
        .find(|v| v["type"] == "response.completed" || v["type"] == "response.incomplete")
        .unwrap_or_else(|| panic!("no response.completed in {body}"));
    completed["response"].clone()
}

async fn create(gw: &TestGateway, key: &str, body: Value) -> Value {
    let stream = body["stream"] == true;
    let (s, _, text) = gw.post("/v1/responses", key, &body).await;
    assert_eq!(s, 200, "{text}");
    let r = response_of(stream, &text);
    assert!(r["id"].as_str().unwrap().starts_with("resp_"), "{r}");
    r
}

fn output_text(r: &Value) -> String {
    r["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect()
}

/// The last request the upstream received on `path_part`.
fn last_on(up: &MockUpstream, path_part: &str) -> Recorded {
    up.requests()
        .into_iter()
        .rev()
        .find(|r| r.path.contains(path_part))
        .unwrap_or_else(|| panic!("no request on {path_part}"))
}

/// Turn one says hello, turn two asks for the weather with a tool (the model calls it),
/// turn three sends the tool's output; each chained by `previous_response_id` only.
/// Each turn goes to its own gateway of `gws`. Returns the three responses.
async fn three_turns(gws: [&TestGateway; 3], key: &str, model: &str, stream: bool) -> [Value; 3] {
    let r1 = create(
        gws[0],
        key,
        json!({"model": model, "input": "hi", "stream": stream}),
    )
    .await;
    let r2 = create(
        gws[1],
        key,
        json!({"model": model, "previous_response_id": r1["id"], "stream": stream,
               "input": "What is the weather in Paris?", "tools": tools()}),
    )
    .await;
    let call = r2["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap_or_else(|| panic!("turn two calls the tool: {r2}"))
        .clone();
    assert_eq!(call["name"], "get_weather");
    let r3 = create(
        gws[2],
        key,
        json!({"model": model, "previous_response_id": r2["id"], "stream": stream, "tools": tools(),
               "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]}),
    )
    .await;
    assert!(output_text(&r3).contains(ANSWER), "{model} {stream}: {r3}");
    [r1, r2, r3]
}

/// What the upstream saw on turn three, in its own protocol: the whole conversation.
fn check_history(up: &MockUpstream, model: &str) {
    match model {
        "m-openai" => {
            let b = last_on(up, "/chat/completions").json();
            let roles: Vec<&str> = b["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect();
            assert_eq!(
                roles,
                ["user", "assistant", "user", "assistant", "tool"],
                "{b}"
            );
            assert_eq!(b["messages"][0]["content"], "hi");
            assert_eq!(b["messages"][3]["tool_calls"][0]["id"], CALL_ID);
        }
        "m-anthropic" => {
            let b = last_on(up, "/messages").json();
            let m = b["messages"].as_array().unwrap();
            assert_eq!(m.len(), 5, "{b}");
            assert_eq!(m[1]["content"][0]["text"], "Hello from messages.");
            let tool_use = m[3]["content"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["type"] == "tool_use")
                .unwrap();
            assert_eq!(tool_use["id"], TOOLU_ID);
            assert_eq!(m[4]["content"][0]["tool_use_id"], TOOLU_ID);
        }
        "m-gemini" => {
            let b = last_on(up, "enerateContent").json();
            let c = b["contents"].as_array().unwrap();
            assert_eq!(c.len(), 5, "{b}");
            let sig = c[3]["parts"][0]["thoughtSignature"].as_str().unwrap_or("");
            assert_eq!(
                sig.trim_end_matches('='),
                SIGNATURE.trim_end_matches('='),
                "{b}"
            );
            assert!(c[4]["parts"][0].get("functionResponse").is_some());
        }
        _ => unreachable!(),
    }
}

async fn three_turns_with_a_tool_call_on_every_translated_protocol(store: StoreKind) {
    let up = providers::start().await;
    let gw = TestGateway::start(&crate::protocols::config(&up.base_url()), store).await;
    let (key, _) = gw.create_key(json!({})).await;
    for model in ["m-openai", "m-anthropic", "m-gemini"] {
        for stream in [false, true] {
            let [_, r2, r3] = three_turns([&gw; 3], &key, model, stream).await;
            check_history(&up, model);
            // The previous id went nowhere upstream: the gateway resolved it.
            assert!(
                !String::from_utf8_lossy(&up.requests().last().unwrap().body)
                    .contains("previous_response_id")
            );
            let (s, got) = gw
                .get(
                    &format!("/v1/responses/{}", r3["id"].as_str().unwrap()),
                    &key,
                )
                .await;
            assert_eq!(s, 200, "{got}");
            assert_eq!(got["output"], r3["output"]);
            assert_eq!(got["previous_response_id"], r2["id"]);
        }
    }
}

/// A native Responses API model, from OpenAI's API reference ("Create a model response",
/// the response object and its streaming events): turn two returns a reasoning item
/// with `encrypted_content` and a `function_call`; a request whose input ends with a
/// `function_call_output` is answered, and is refused (400) unless its input also holds
/// that reasoning item (id and encrypted content as issued) and the call itself.
async fn native_upstream() -> MockUpstream {
    MockUpstream::start(|r| {
        let b = r.json();
        let input = b["input"].as_array().cloned().unwrap_or_default();
        let usage = json!({"input_tokens": 10, "output_tokens": 5, "total_tokens": 15});
        let answered = input.last().is_some_and(|i| i["type"] == "function_call_output");
        let output = if answered {
            let reasoning = input
                .iter()
                .any(|i| i["type"] == "reasoning" && i["id"] == "rs_up" && i["encrypted_content"] == "enc-1");
            let call = input
                .iter()
                .any(|i| i["type"] == "function_call" && i["call_id"] == "fc_call_1");
            if !reasoning || !call || b.get("previous_response_id").is_some() {
                return Reply::json(400, json!({"error": {"message": "history lost", "type": "invalid_request_error"}}));
            }
            json!([{"type": "message", "id": "msg_up2", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]}])
        } else if b["tools"].as_array().is_some_and(|t| !t.is_empty()) {
            json!([{"type": "reasoning", "id": "rs_up", "summary": [], "encrypted_content": "enc-1"},
                   {"type": "function_call", "id": "fc_up", "call_id": "fc_call_1", "name": "get_weather",
                    "arguments": "{\"city\":\"Paris\"}", "status": "completed"}])
        } else {
            json!([{"type": "message", "id": "msg_up1", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]}])
        };
        let response = json!({"id": "resp_upstream", "object": "response", "created_at": 1_700_000_000,
            "status": "completed", "model": b["model"], "output": output, "usage": usage});
        if b["stream"] != true {
            return Reply::json(200, response);
        }
        let events = [
            json!({"type": "response.created", "sequence_number": 0,
                   "response": {"id": "resp_upstream", "object": "response", "status": "in_progress", "output": []}}),
            json!({"type": "response.completed", "sequence_number": 1, "response": response}),
        ];
        let events: Vec<String> = events.iter().map(Value::to_string).collect();
        Reply::sse(&events, Duration::from_millis(2), End::Clean)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_turns_with_a_tool_call_on_a_native_responses_channel() {
    let up = native_upstream().await;
    let cfg = format!(
        "channels:\n  - {{ name: rs, protocol: openai, responses_api: true, base_url: \"{}\", models: [m-native] }}\nprices:\n  m-native: {{ input: 1.0, output: 2.0 }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"quota_usd": 1})).await;
    for stream in [false, true] {
        let [r1, _, r3] = three_turns([&gw; 3], &key, "m-native", stream).await;
        assert_ne!(r1["id"], "resp_upstream", "the gateway's own id");
        let b = last_on(&up, "/responses").json();
        let kinds: Vec<&str> = b["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap_or("message"))
            .collect();
        assert_eq!(
            kinds,
            [
                "message",
                "message",
                "message",
                "reasoning",
                "function_call",
                "function_call_output"
            ],
            "{b}"
        );
        assert!(r3["usage"]["input_tokens"].as_u64().is_some());
    }
}

/// A bodiless request with `key`: the status and the body's text.
async fn call(gw: &TestGateway, method: reqwest::Method, path: &str, key: &str) -> (u16, String) {
    let r = gw
        .http
        .request(method, gw.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The same error body, but for the request id and the id it names.
fn same_error(a: &str, b: &str, id_a: &str, id_b: &str) {
    let strip = |body: &str, id: &str| {
        let mut e = error_of(body);
        let m = e["message"].as_str().unwrap().replace(id, "ID");
        let m = m.split(" (request id").next().unwrap().to_string();
        e["message"] = json!(m);
        e
    };
    assert_eq!(strip(a, id_a), strip(b, id_b));
}

async fn another_keys_deleted_and_expired_ids_answer_like_unknown_ones(store: StoreKind) {
    let up = providers::start().await;
    let cfg = crate::protocols::config(&up.base_url()) + "responses: { expire_after_secs: 2 }\n";
    let gw = TestGateway::start(&cfg, store).await;
    let (alice, _) = gw.create_key(json!({})).await;
    let (bob, _) = gw.create_key(json!({})).await;
    let never = "resp_never_made";
    let (s, unknown_get) = call(
        &gw,
        reqwest::Method::GET,
        &format!("/v1/responses/{never}"),
        &bob,
    )
    .await;
    assert_eq!(s, 404);
    let chain =
        |id: &str| json!({"model": "m-openai", "previous_response_id": id, "input": "again"});
    let (s, _, unknown_chain) = gw.post("/v1/responses", &bob, &chain(never)).await;
    assert_eq!(s, 400);
    assert_eq!(
        error_of(&unknown_chain)["code"],
        "previous_response_not_found"
    );
    assert_eq!(error_of(&unknown_chain)["param"], "previous_response_id");
    let check = |label: &'static str, id: String, key: String| {
        let (gw, unknown_get, unknown_chain) = (&gw, unknown_get.clone(), unknown_chain.clone());
        async move {
            let r = call(
                gw,
                reqwest::Method::GET,
                &format!("/v1/responses/{id}"),
                &key,
            )
            .await;
            assert_eq!(r.0, 404, "{label}");
            same_error(&r.1, &unknown_get, &id, never);
            let r = call(
                gw,
                reqwest::Method::GET,
                &format!("/v1/responses/{id}/input_items"),
                &key,
            )
            .await;
            assert_eq!(r.0, 404, "{label}");
            let (s, _, body) = gw.post("/v1/responses", &key, &chain(&id)).await;
            assert_eq!(s, 400, "{label}: {body}");
            same_error(&body, &unknown_chain, &id, never);
        }
    };
    // Another key's.
    let r = create(&gw, &alice, json!({"model": "m-openai", "input": "hi"})).await;
    let id = r["id"].as_str().unwrap().to_string();
    check("another key's", id.clone(), bob.clone()).await;
    // Deleted.
    let del = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/v1/responses/{id}"),
        &alice,
    )
    .await;
    assert_eq!(del.0, 200);
    let v: Value = serde_json::from_str(&del.1).unwrap();
    assert_eq!(v, json!({"id": id, "object": "response", "deleted": true}));
    check("deleted", id.clone(), alice.clone()).await;
    let del = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/v1/responses/{id}"),
        &alice,
    )
    .await;
    assert_eq!(del.0, 404, "deleted once");
    // Expired (stored for two seconds here).
    let r = create(&gw, &alice, json!({"model": "m-openai", "input": "hi"})).await;
    let id = r["id"].as_str().unwrap().to_string();
    assert_eq!(gw.get(&format!("/v1/responses/{id}"), &alice).await.0, 200);
    let deadline = Instant::now() + Duration::from_secs(15);
    while gw.get(&format!("/v1/responses/{id}"), &alice).await.0 != 404 {
        assert!(Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check("expired", id, alice.clone()).await;
}

async fn a_chain_past_its_depth_and_a_key_past_its_stored_bytes_are_refused(store: StoreKind) {
    let up = providers::start().await;
    let cfg = crate::protocols::config(&up.base_url())
        + "responses: { max_chain_depth: 3, max_stored_bytes_per_key: 6000 }\n";
    let gw = TestGateway::start(&cfg, store.clone()).await;
    let (key, _) = gw.create_key(json!({})).await;
    let mut prev = Value::Null;
    for _ in 0..3 {
        let r = create(
            &gw,
            &key,
            json!({"model": "m-openai", "input": "hi", "previous_response_id": prev}),
        )
        .await;
        prev = r["id"].clone();
    }
    let before = up.requests().len();
    let (s, _, body) = gw
        .post(
            "/v1/responses",
            &key,
            &json!({"model": "m-openai", "input": "hi", "previous_response_id": prev}),
        )
        .await;
    assert_eq!(s, 400, "{body}");
    assert_eq!(error_of(&body)["param"], "previous_response_id");
    assert_eq!(
        up.requests().len(),
        before,
        "refused before any upstream call"
    );
    // Stored bytes: a large response fills the key's allowance; the next one that would
    // be stored is refused, one with `store: false` is not.
    create(
        &gw,
        &key,
        json!({"model": "m-openai", "input": "x".repeat(6000)}),
    )
    .await;
    let (s, _, body) = gw
        .post(
            "/v1/responses",
            &key,
            &json!({"model": "m-openai", "input": "hi"}),
        )
        .await;
    assert_eq!(s, 400, "{body}");
    assert_eq!(error_of(&body)["param"], "store");
    let r = create(
        &gw,
        &key,
        json!({"model": "m-openai", "input": "hi", "store": false}),
    )
    .await;
    assert_eq!(
        gw.get(
            &format!("/v1/responses/{}", r["id"].as_str().unwrap()),
            &key
        )
        .await
        .0,
        404,
        "not stored"
    );
}

async fn input_items_are_listed_in_pages(store: StoreKind) {
    let up = providers::start().await;
    let gw = TestGateway::start(&crate::protocols::config(&up.base_url()), store.clone()).await;
    let (key, _) = gw.create_key(json!({})).await;
    let input: Vec<Value> = (0..5)
        .map(|i| json!({"role": "user", "content": format!("m{i}")}))
        .collect();
    let r = create(&gw, &key, json!({"model": "m-openai", "input": input})).await;
    let path = format!("/v1/responses/{}/input_items", r["id"].as_str().unwrap());
    let (s, all) = gw.get(&path, &key).await;
    assert_eq!(s, 200, "{all}");
    assert_eq!(all["object"], "list");
    let texts = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["content"][0]["text"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        texts(&all),
        ["m4", "m3", "m2", "m1", "m0"],
        "newest first by default"
    );
    let (_, p1) = gw.get(&format!("{path}?order=asc&limit=2"), &key).await;
    assert_eq!(texts(&p1), ["m0", "m1"]);
    assert_eq!(p1["has_more"], true);
    assert_eq!(p1["first_id"], p1["data"][0]["id"]);
    let after = p1["last_id"].as_str().unwrap();
    let (_, p2) = gw
        .get(&format!("{path}?order=asc&limit=2&after={after}"), &key)
        .await;
    assert_eq!(texts(&p2), ["m2", "m3"]);
    let (_, p3) = gw
        .get(
            &format!(
                "{path}?order=asc&limit=2&after={}",
                p2["last_id"].as_str().unwrap()
            ),
            &key,
        )
        .await;
    assert_eq!(texts(&p3), ["m4"]);
    assert_eq!(p3["has_more"], false);
    let (s, bad) = gw.get(&format!("{path}?limit=101"), &key).await;
    assert_eq!(s, 400, "{bad}");
    assert_eq!(bad["error"]["param"], "limit");
}

async fn compaction_takes_a_previous_response_id(store: StoreKind) {
    let up = providers::start().await;
    let gw = TestGateway::start(&crate::protocols::config(&up.base_url()), store.clone()).await;
    let (key, _) = gw.create_key(json!({})).await;
    let r = create(&gw, &key, json!({"model": "m-anthropic", "input": "hi"})).await;
    let (s, _, body) = gw
        .post(
            "/v1/responses/compact",
            &key,
            &json!({"model": "m-anthropic", "previous_response_id": r["id"]}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "response.compaction");
    let sent = last_on(&up, "/messages").json();
    let m = sent["messages"].as_array().unwrap();
    assert_eq!(m[0]["content"][0]["text"], "hi", "{sent}");
    assert_eq!(m[1]["content"][0]["text"], "Hello from messages.");
    assert_eq!(
        m.len(),
        3,
        "the conversation, then the request to summarise it"
    );
}

/// An OpenAI chat upstream that reports `prompt` prompt tokens for every request.
async fn counted_upstream(prompt: u64) -> MockUpstream {
    MockUpstream::start(move |r| {
        let model = r.json()["model"].as_str().unwrap_or("m").to_string();
        Reply::json(
            200,
            openai::completion(&model, "ok", openai::usage(prompt, 5, 0)),
        )
    })
    .await
}

/// One chat channel on `up` whose model has a context window of 1,000 tokens.
fn windowed(up: &MockUpstream) -> String {
    format!(
        "channels:\n  - {{ name: oa, protocol: openai, base_url: \"{}\", models: [m] }}\nprices:\n  m: {{ input: 1.0, output: 2.0, context_window: 1000 }}\n",
        up.base_url()
    )
}

async fn truncation_auto_drops_the_oldest_turns_and_disabled_refuses(store: StoreKind) {
    let up = counted_upstream(900).await;
    let gw = TestGateway::start(&windowed(&up), store.clone()).await;
    let (key, _) = gw.create_key(json!({})).await;
    let r1 = create(&gw, &key, json!({"model": "m", "input": "first turn"})).await;
    // 905 settled tokens before, and about 300 more: past the window of 1000.
    let next = "n".repeat(250);
    let before = up.requests().len();
    let (s, _, body) = gw
        .post(
            "/v1/responses",
            &key,
            &json!({"model": "m", "input": next, "previous_response_id": r1["id"]}),
        )
        .await;
    assert_eq!(s, 400, "{body}");
    assert_eq!(error_of(&body)["param"], "input");
    assert_eq!(
        up.requests().len(),
        before,
        "refused before any upstream call"
    );
    let r2 = create(
        &gw,
        &key,
        json!({"model": "m", "input": next, "previous_response_id": r1["id"], "truncation": "auto"}),
    )
    .await;
    let sent = up.last().json();
    let m = sent["messages"].as_array().unwrap();
    assert_eq!(m.len(), 1, "only the new turn fits: {sent}");
    assert_eq!(m[0]["content"], next);
    // A turn that fits goes whole.
    let small = counted_upstream(10).await;
    let gw = TestGateway::start(&windowed(&small), store.clone()).await;
    let (key, _) = gw.create_key(json!({})).await;
    let r1 = create(&gw, &key, json!({"model": "m", "input": "first turn"})).await;
    create(
        &gw,
        &key,
        json!({"model": "m", "input": "second", "previous_response_id": r1["id"]}),
    )
    .await;
    assert_eq!(small.last().json()["messages"].as_array().unwrap().len(), 3);
    drop(r2);
}

async fn capped_chain(store: CapStore) {
    // The greedy model writes 2,000 tokens whatever limit it is given.
    let b = Behaviour {
        ignore_limit: Some(2_000),
        ..Behaviour::default()
    };
    // $0.03: a first turn of 20 kB reserves about 20,000 µUSD, costs about 9,000.
    let setup = Setup::start(store, b, 2, 0.03).await;
    let (a, last) = (&setup.gws[0], &setup.gws[setup.gws.len() - 1]);
    let big = "w".repeat(20_000);
    let r1 = create(
        a,
        &setup.key,
        json!({"model": "m", "input": big, "max_output_tokens": 16}),
    )
    .await;
    let asked = setup.up.asked().len();
    // The chain's 20 kB cannot be reserved again on what is left: 403, nothing sent.
    let (s, _, body) = last
        .post(
            "/v1/responses",
            &setup.key,
            &json!({"model": "m", "input": "more", "previous_response_id": r1["id"]}),
        )
        .await;
    assert_eq!(s, 403, "{body}");
    assert_eq!(
        setup.up.asked().len(),
        asked,
        "refused before any upstream call"
    );
    // Two records: the answer, and the refusal (nothing charged).
    setup.check(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_key_reserves_the_stored_chain_embedded() {
    capped_chain(CapStore::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_key_reserves_the_stored_chain_on_two_redis_instances() {
    capped_chain(CapStore::Redis).await;
}

/// A greedy upstream answering chained turns on a capped key, streamed and not, until
/// the key is refused: the charge never passes the cap.
async fn greedy_chain(store: CapStore) {
    let b = Behaviour {
        ignore_limit: Some(3_000),
        ..Behaviour::default()
    };
    let setup = Setup::start(store, b, 2, 0.05).await;
    let mut prev = Value::Null;
    let (mut answered, mut records) = (0, 0);
    for turn in 0..40 {
        let gw = &setup.gws[turn % setup.gws.len()];
        let body = json!({"model": "m", "input": format!("turn {turn}"), "previous_response_id": prev,
                          "stream": turn % 2 == 1, "max_output_tokens": 100});
        let (s, _, text) = gw.post("/v1/responses", &setup.key, &body).await;
        records += 1;
        match s {
            200 => {
                answered += 1;
                prev = response_of(turn % 2 == 1, &text)["id"].clone();
            }
            403 => break,
            _ => panic!("{s}: {text}"),
        }
    }
    assert!(answered >= 2, "{answered}");
    setup.check(records).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_upstream_cannot_overspend_a_capped_chain_embedded() {
    greedy_chain(CapStore::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_upstream_cannot_overspend_a_capped_chain_on_two_redis_instances() {
    greedy_chain(CapStore::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_continue_each_others_conversations() {
    let redis = RedisServer::start().await;
    let up = providers::start().await;
    let cfg = crate::protocols::config(&up.base_url());
    let a = TestGateway::start(&cfg, StoreKind::Redis(redis.url())).await;
    let b = TestGateway::start(&cfg, StoreKind::Redis(redis.url())).await;
    let (key, _) = a.create_key(json!({"quota_usd": 1})).await;
    for stream in [false, true] {
        let [_, _, r3] = three_turns([&a, &b, &a], &key, "m-anthropic", stream).await;
        check_history(&up, "m-anthropic");
        let (s, got) = b
            .get(
                &format!("/v1/responses/{}", r3["id"].as_str().unwrap()),
                &key,
            )
            .await;
        assert_eq!(s, 200, "{got}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_deletes_a_keys_stored_responses_and_key_deletion_does_too() {
    let redis = RedisServer::start().await;
    let up = providers::start().await;
    let gw = TestGateway::start(
        &crate::protocols::config(&up.base_url()),
        StoreKind::Redis(redis.url()),
    )
    .await;
    let (key, id) = gw.create_key(json!({})).await;
    let r = create(&gw, &key, json!({"model": "m-openai", "input": "hi"})).await;
    create(
        &gw,
        &key,
        json!({"model": "m-openai", "input": "again", "previous_response_id": r["id"]}),
    )
    .await;
    let (s, v) = gw
        .admin_send(
            reqwest::Method::DELETE,
            &format!("/admin/keys/{id}/responses"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["deleted"], 2);
    assert_eq!(
        gw.get(
            &format!("/v1/responses/{}", r["id"].as_str().unwrap()),
            &key
        )
        .await
        .0,
        404
    );
    let (s, _) = gw
        .admin_send(reqwest::Method::DELETE, "/admin/keys/nope/responses", None)
        .await;
    assert_eq!(s, 404);
    // Deleting the key deletes what it stored: nothing of it is left in Redis.
    create(&gw, &key, json!({"model": "m-openai", "input": "hi"})).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let pattern = format!("gw:resp*{{{id}}}*");
    let before: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(!before.is_empty());
    let r = gw
        .http
        .delete(format!("{}/admin/keys/{id}", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let after: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(after.is_empty(), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_storage_off_the_id_is_refused_as_before() {
    let up = providers::start().await;
    let cfg = crate::protocols::config(&up.base_url()) + "responses: { store: false }\n";
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let r = create(&gw, &key, json!({"model": "m-openai", "input": "hi"})).await;
    assert_eq!(
        gw.get(
            &format!("/v1/responses/{}", r["id"].as_str().unwrap()),
            &key
        )
        .await
        .0,
        404
    );
    let (s, _, body) = gw
        .post(
            "/v1/responses",
            &key,
            &json!({"model": "m-openai", "input": "hi", "previous_response_id": r["id"]}),
        )
        .await;
    assert_eq!(s, 400, "{body}");
    assert!(
        error_of(&body)["message"]
            .as_str()
            .unwrap()
            .contains("storage is turned off"),
        "{body}"
    );
}
