//! A mock Azure OpenAI resource and Microsoft Entra ID token endpoint, written from
//! Microsoft's documents (learn.microsoft.com):
//! - "Azure OpenAI in Azure AI Foundry Models REST API reference" (data plane inference):
//!   `POST /openai/deployments/{deployment-id}/{operation}?api-version=...`, the `api-key`
//!   header or `Authorization: Bearer` with an Entra ID token; the chat completion
//!   (`prompt_filter_results`, `choices[].content_filter_results`, `usage` with
//!   `prompt_tokens_details.cached_tokens`), streamed as `data:` events, the first with
//!   empty `choices` and the prompt's filter results, the usage chunk (empty `choices`)
//!   when `stream_options.include_usage` is set; embeddings, image generation, speech
//!   and transcription answers.
//! - "Azure OpenAI v1 API": `/openai/v1/{operation}`, the deployment in the body's `model`.
//! - "Azure OpenAI content filtering": a filtered prompt is HTTP 400 with `error.code`
//!   `content_filter`, `param` `prompt` and `innererror` (`ResponsibleAIPolicyViolation`,
//!   `content_filter_result`); a filtered completion ends with `finish_reason`
//!   `content_filter`.
//! - Azure's errors: 401 for a bad key or token, 404 `DeploymentNotFound`, 404 "Resource
//!   not found" without `api-version`, 400 for an unsupported one, 429 when throttled.
//! - "Microsoft identity platform and the OAuth 2.0 client credentials flow": the token
//!   request form and its answer (`token_type`, `expires_in`, `access_token`), and the
//!   error answer (`error`, `error_description`).
//! - "Use vision-enabled chat models" (Azure OpenAI how-to): images as `image_url`
//!   content parts, a URL or a `data:image/...;base64,` URL; the Responses API's
//!   `input_image` parts.
//! - "Azure OpenAI reasoning models": o-series deployments take `reasoning_effort`
//!   (`low`, `medium`, `high`) and `max_completion_tokens`, refuse `max_tokens` with 400
//!   `unsupported_parameter`, count the hidden reasoning in
//!   `completion_tokens_details.reasoning_tokens` (part of `completion_tokens`), and in
//!   the Responses API answer a `reasoning` item with its `summary` when
//!   `reasoning.summary` asks for one.
//! - OpenAI's streaming reference (which Azure follows): a stream that fails after it
//!   started sends one more `data:` event holding an `error` object and stops without
//!   `[DONE]`; the Responses API's stream sends an `error` event (`type`, `code`,
//!   `message`, `param`, `sequence_number`).
//!
//! Markers in the prompt choose the answer: `FILTER_PROMPT` (the 400 refusal),
//! `FILTER_OUTPUT` (a completion cut by the filter), `THROTTLE` (429), `VENDOR_ERROR`
//! (400 `invalid_request_error`), `STREAM_ERROR` (a stream that fails after its first
//! text); a request with `tools` is answered with a tool call, one with images says
//! what it saw (`I see image/png:8.`: each image's type and decoded size). Deployments
//! named `o4-mini*` are the mock's reasoning model.
#![allow(dead_code)]

use crate::mock_upstream::{End, MockUpstream, Recorded, Reply};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The API versions the mock serves.
pub const VERSIONS: &[&str] = &["2024-06-01", "2024-10-21", "2025-04-01-preview"];
pub const TENANT: &str = "tenant-1";
pub const CLIENT_ID: &str = "client-1";
pub const CLIENT_SECRET: &str = "entra-client-secret-value";
pub const SCOPE: &str = "https://cognitiveservices.azure.com/.default";

/// Usage the mock reports for every chat answer.
pub const PROMPT_TOKENS: u64 = 1200;
pub const CACHED_TOKENS: u64 = 1000;
pub const COMPLETION_TOKENS: u64 = 50;
/// Reasoning tokens a reasoning deployment adds to its completion tokens.
pub const REASONING_TOKENS: u64 = 64;
/// The summary of a reasoning deployment's reasoning (Responses API).
pub const REASONING_SUMMARY: &str = "Weighing the greeting.";

pub struct Options {
    /// Resource keys accepted in `api-key`.
    pub keys: Vec<String>,
    /// Deployment names.
    pub deployments: Vec<String>,
    /// Lifetime of the tokens the Entra endpoint issues.
    pub token_lifetime: Duration,
}

#[derive(Default)]
pub struct State {
    /// Tokens issued, with when each lapses.
    issued: Mutex<Vec<(String, Instant)>>,
    pub grants: AtomicU32,
    /// Requests refused because their token had lapsed.
    pub expired: AtomicU32,
    /// Requests refused for a missing or wrong key or token.
    pub unauthorized: AtomicU32,
}

impl State {
    /// Revokes every token issued so far (they are refused from now on).
    pub fn revoke(&self) {
        self.issued.lock().unwrap().clear();
    }
}

pub struct AzureMock {
    pub up: MockUpstream,
    pub state: Arc<State>,
}

impl AzureMock {
    pub fn base_url(&self) -> String {
        self.up.base_url()
    }

    /// The Entra ID token endpoint of the tenant.
    pub fn token_url(&self) -> String {
        format!("{}/{TENANT}/oauth2/v2.0/token", self.up.base_url())
    }
}

pub async fn start(o: Options) -> AzureMock {
    let state = Arc::new(State::default());
    let s = state.clone();
    let o = Arc::new(o);
    let up = MockUpstream::start(move |r| reply(&o, &s, r)).await;
    AzureMock { up, state }
}

fn error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(status, json!({"error": {"code": code, "message": message}}))
}

fn reply(o: &Options, s: &State, r: &Recorded) -> Reply {
    let (path, query) = r.path.split_once('?').unwrap_or((&r.path, ""));
    if path == format!("/{TENANT}/oauth2/v2.0/token") {
        return grant(o, s, r);
    }
    if let Some(refused) = authorized(o, s, r) {
        return refused;
    }
    let version = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("api-version="));
    let (deployment, op) = if let Some(rest) = path.strip_prefix("/openai/deployments/") {
        let Some((d, op)) = rest.split_once('/') else {
            return error(404, "404", "Resource not found");
        };
        match version {
            None => return error(404, "404", "Resource not found"),
            Some(v) if !VERSIONS.contains(&v) => {
                return error(400, "BadRequest", "API version not supported")
            }
            Some(_) => {}
        }
        (d.to_string(), op.to_string())
    } else if let Some(op) = path.strip_prefix("/openai/v1/") {
        (model_of(r), op.to_string())
    } else if path == "/openai/responses" {
        if !version.is_some_and(|v| VERSIONS.contains(&v)) {
            return error(404, "404", "Resource not found");
        }
        (model_of(r), "responses".to_string())
    } else {
        return error(404, "404", "Resource not found");
    };
    if !o.deployments.contains(&deployment) {
        return error(
            404,
            "DeploymentNotFound",
            "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.",
        );
    }
    match op.as_str() {
        "chat/completions" => chat(&deployment, &r.json()),
        "responses" => responses(&deployment, &r.json()),
        "embeddings" => Reply::json(
            200,
            json!({"object": "list", "model": deployment,
                   "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 0.125]}],
                   "usage": {"prompt_tokens": 8, "total_tokens": 8}}),
        ),
        "images/generations" => Reply::json(
            200,
            json!({"created": 1_700_000_000, "data": [{"url": "https://dalle.example/img.png",
                   "revised_prompt": "a cat", "content_filter_results": {}}]}),
        ),
        "audio/speech" => Reply::Full {
            status: 200,
            content_type: "audio/mpeg".into(),
            body: vec![0x49, 0x44, 0x33, 4, 0, 0, 0, 0, 0, 0],
        },
        "audio/transcriptions" | "audio/translations" => {
            Reply::json(200, json!({"text": "hello from the recording"}))
        }
        _ => error(404, "404", "Resource not found"),
    }
}

/// The deployment named by a v1 request: the JSON body's `model`, or the multipart
/// form's `model` field.
fn model_of(r: &Recorded) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(&r.body) {
        return v["model"].as_str().unwrap_or("").to_string();
    }
    let text = String::from_utf8_lossy(&r.body);
    text.split("name=\"model\"\r\n\r\n")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .unwrap_or("")
        .to_string()
}

/// `None` when the request carries an accepted key or a live token.
fn authorized(o: &Options, s: &State, r: &Recorded) -> Option<Reply> {
    if let Some(key) = r.header("api-key") {
        if o.keys.iter().any(|k| k == key) {
            return None;
        }
    } else if let Some(token) = r
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        let issued = s.issued.lock().unwrap();
        match issued.iter().find(|(t, _)| t == token) {
            Some((_, until)) if Instant::now() < *until => return None,
            Some(_) => {
                s.expired.fetch_add(1, Ordering::SeqCst);
                return Some(error(
                    401,
                    "401",
                    "Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired.",
                ));
            }
            None => {}
        }
    }
    s.unauthorized.fetch_add(1, Ordering::SeqCst);
    Some(error(
        401,
        "401",
        "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
    ))
}

/// The client credentials grant.
fn grant(o: &Options, s: &State, r: &Recorded) -> Reply {
    let form: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(&r.body).into_owned().collect();
    let field = |k: &str| form.get(k).map(String::as_str).unwrap_or("");
    if r.header("content-type") != Some("application/x-www-form-urlencoded")
        || field("grant_type") != "client_credentials"
        || field("scope") != SCOPE
    {
        return Reply::json(
            400,
            json!({"error": "invalid_request", "error_description": "AADSTS900144: The request body must contain the following parameter."}),
        );
    }
    if field("client_id") != CLIENT_ID || field("client_secret") != CLIENT_SECRET {
        return Reply::json(
            401,
            json!({"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided.",
                   "error_codes": [7000215]}),
        );
    }
    let n = s.grants.fetch_add(1, Ordering::SeqCst) + 1;
    let token = format!("entra-token-{n}");
    s.issued
        .lock()
        .unwrap()
        .push((token.clone(), Instant::now() + o.token_lifetime));
    Reply::json(
        200,
        json!({"token_type": "Bearer", "expires_in": o.token_lifetime.as_secs(),
               "ext_expires_in": o.token_lifetime.as_secs(), "access_token": token}),
    )
}

fn filters() -> Value {
    let safe = json!({"filtered": false, "severity": "safe"});
    json!({"hate": safe, "self_harm": safe, "sexual": safe, "violence": safe})
}

fn usage(reasoning: u64) -> Value {
    let completion = COMPLETION_TOKENS + reasoning;
    json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": completion,
           "total_tokens": PROMPT_TOKENS + completion,
           "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
               "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})
}

/// A deployment of the mock's reasoning model.
fn reasons(deployment: &str) -> bool {
    deployment.starts_with("o4-mini")
}

/// What the request's images are (`image/png:8`), or the 400 Azure answers for one it
/// cannot read.
fn images(body: &Value) -> Result<Vec<String>, Reply> {
    use base64::Engine;
    let mut urls = Vec::new();
    let mut walk = vec![&body["messages"], &body["input"]];
    while let Some(v) = walk.pop() {
        match v {
            Value::Array(a) => walk.extend(a.iter().rev()),
            Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                Some("image_url") => urls.push(o["image_url"]["url"].as_str().unwrap_or("")),
                Some("input_image") => urls.push(o["image_url"].as_str().unwrap_or("")),
                _ => walk.extend(o.values()),
            },
            _ => {}
        }
    }
    let invalid = || {
        Reply::json(
            400,
            json!({"error": {"message": "Invalid image data.", "type": "invalid_request_error",
                   "param": null, "code": "invalid_image"}}),
        )
    };
    urls.into_iter()
        .map(|url| {
            let Some(data) = url.strip_prefix("data:") else {
                return if url.starts_with("https://") {
                    Ok("url".to_string())
                } else {
                    Err(invalid())
                };
            };
            let (mime, b64) = data.split_once(";base64,").ok_or_else(invalid)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| invalid())?;
            if !["image/png", "image/jpeg", "image/gif", "image/webp"].contains(&mime) {
                return Err(invalid());
            }
            Ok(format!("{mime}:{}", bytes.len()))
        })
        .collect()
}

/// The answer's text: the greeting, and what the images were.
fn answer_text(body: &Value) -> Result<String, Reply> {
    let seen = images(body)?;
    Ok(if seen.is_empty() {
        "Hello from Azure".to_string()
    } else {
        format!("Hello from Azure. I see {}.", seen.join(", "))
    })
}

/// The refusal a marker or a parameter asks for, or what the answer is made of: the
/// reasoning tokens (a reasoning deployment's) and the text.
fn answerable(deployment: &str, body: &Value) -> Result<(u64, String), Reply> {
    if let Some(r) = marked(body) {
        return Err(r);
    }
    let reasoning = if reasons(deployment) {
        if let Some(r) = unsupported(body) {
            return Err(r);
        }
        REASONING_TOKENS
    } else {
        0
    };
    Ok((reasoning, answer_text(body)?))
}

/// The 400 a reasoning deployment answers for a parameter it does not take.
fn unsupported(body: &Value) -> Option<Reply> {
    let param = ["max_tokens", "temperature", "top_p"]
        .into_iter()
        .find(|p| body.get(*p).is_some_and(|v| !v.is_null()))?;
    Some(Reply::json(
        400,
        json!({"error": {"message": format!("Unsupported parameter: '{param}' is not supported with this model."),
               "type": "invalid_request_error", "param": param, "code": "unsupported_parameter"}}),
    ))
}

/// Every text of the request's messages.
fn prompt(body: &Value) -> String {
    let mut out = String::new();
    let mut walk = vec![&body["messages"], &body["input"]];
    while let Some(v) = walk.pop() {
        match v {
            Value::String(s) => out.push_str(s),
            Value::Array(a) => walk.extend(a.iter()),
            Value::Object(o) => walk.extend(o.values()),
            _ => {}
        }
    }
    out
}

/// A marker's refusal, if the prompt carries one.
fn marked(body: &Value) -> Option<Reply> {
    let p = prompt(body);
    if p.contains("FILTER_PROMPT") {
        let hit = json!({"filtered": true, "severity": "high"});
        let safe = json!({"filtered": false, "severity": "safe"});
        return Some(Reply::json(
            400,
            json!({"error": {
                "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.",
                "type": null, "param": "prompt", "code": "content_filter", "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation",
                    "content_filter_result": {"hate": safe, "jailbreak": {"filtered": false, "detected": false},
                        "self_harm": safe, "sexual": safe, "violence": hit}}}}),
        ));
    }
    if p.contains("THROTTLE") {
        return Some(error(
            429,
            "429",
            "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 1 second.",
        ));
    }
    if p.contains("VENDOR_ERROR") {
        return Some(Reply::json(
            400,
            json!({"error": {"message": "Invalid value for 'temperature' at internal-host-17.", "type": "invalid_request_error",
                   "param": "temperature", "code": "invalid_value"}}),
        ));
    }
    None
}

fn chat(deployment: &str, body: &Value) -> Reply {
    let (reasoning, greeting) = match answerable(deployment, body) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let cut = prompt(body).contains("FILTER_OUTPUT");
    let fail = prompt(body).contains("STREAM_ERROR");
    let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let call = json!({"id": "call_az1", "type": "function",
                      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}});
    let (text, finish) = match (cut, tools) {
        (true, _) => ("Here is how", "content_filter"),
        (false, true) => ("", "tool_calls"),
        (false, false) => (greeting.as_str(), "stop"),
    };
    let prompt_filters = json!([{"prompt_index": 0, "content_filter_results": filters()}]);
    let mut output_filters = filters();
    if cut {
        output_filters["violence"] = json!({"filtered": true, "severity": "medium"});
    }
    if body["stream"] != json!(true) {
        let mut message = json!({"role": "assistant", "content": text, "refusal": null});
        if tools && !cut {
            message["content"] = Value::Null;
            message["tool_calls"] = json!([call]);
        }
        return Reply::json(
            200,
            json!({"id": "chatcmpl-az1", "object": "chat.completion", "created": 1_700_000_000,
                   "model": "gpt-4o-2024-11-20", "system_fingerprint": "fp_az",
                   "prompt_filter_results": prompt_filters,
                   "choices": [{"index": 0, "message": message, "logprobs": null,
                                "finish_reason": finish, "content_filter_results": output_filters}],
                   "usage": usage(reasoning)}),
        );
    }
    let chunk = |choices: Value| {
        json!({"id": "chatcmpl-az1", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": "gpt-4o-2024-11-20", "system_fingerprint": "fp_az", "choices": choices})
    };
    let mut events = vec![
        json!({"id": "", "object": "", "created": 0, "model": "", "choices": [],
               "prompt_filter_results": prompt_filters}),
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": ""},
                      "finish_reason": null, "content_filter_results": {}}]),
        ),
    ];
    if tools && !cut {
        events.push(chunk(json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_az1",
            "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}, "finish_reason": null}])));
        events.push(chunk(
            json!([{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": "{\"city\":\"Paris\"}"}}]}, "finish_reason": null}]),
        ));
    } else {
        for piece in text.split_inclusive(' ') {
            events.push(chunk(json!([{"index": 0, "delta": {"content": piece},
                "finish_reason": null, "content_filter_results": filters()}])));
            if fail {
                events.push(json!({"error": {"message": "The server had an error processing your request. Sorry about that! You can retry your request, or contact us through an Azure support request at: https://go.microsoft.com/fwlink/?linkid=2213926 if you keep seeing this error.",
                    "type": "server_error", "param": null, "code": null}}));
                let events: Vec<String> = events.iter().map(Value::to_string).collect();
                return Reply::sse(&events, Duration::ZERO, End::Clean);
            }
        }
    }
    events.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish,
                              "content_filter_results": output_filters}]),
    ));
    if body["stream_options"]["include_usage"] == json!(true) {
        let mut u = chunk(json!([]));
        u["usage"] = usage(reasoning);
        events.push(u);
    }
    let mut events: Vec<String> = events.iter().map(Value::to_string).collect();
    events.push("[DONE]".into());
    Reply::sse(&events, Duration::ZERO, End::Clean)
}

/// The Responses API ("Azure OpenAI Responses API", and OpenAI's "Streaming events" reference
/// for the order of the events): the response object, or its events.
fn responses(deployment: &str, body: &Value) -> Reply {
    let (reasoning, text) = match answerable(deployment, body) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let output_tokens = COMPLETION_TOKENS + reasoning;
    let usage = json!({"input_tokens": PROMPT_TOKENS, "input_tokens_details": {"cached_tokens": CACHED_TOKENS},
                       "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning},
                       "total_tokens": PROMPT_TOKENS + output_tokens});
    // The reasoning item comes first, with a summary only when one is asked for; then
    // the message, or with `tools` a function call.
    let mut output = Vec::new();
    if reasoning > 0 {
        let summary = if body["reasoning"]["summary"].is_string() {
            json!([{"type": "summary_text", "text": REASONING_SUMMARY}])
        } else {
            json!([])
        };
        output.push(json!({"id": "rs_az1", "type": "reasoning", "encrypted_content": null, "summary": summary}));
    }
    let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    output.push(if tools {
        json!({"id": "fc_az1", "type": "function_call", "status": "completed", "call_id": "call_az1",
               "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
    } else {
        json!({"id": "msg_az1", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]})
    });
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "resp_az1", "object": "response", "created_at": 1_700_000_000,
               "status": status, "model": deployment, "output": output, "usage": usage,
               "error": null, "incomplete_details": null})
    };
    if body["stream"] != json!(true) {
        return Reply::json(200, response("completed", json!(output), usage));
    }
    // The Responses API's streaming events, in order; `sequence_number` counts them.
    let fail = prompt(body).contains("STREAM_ERROR");
    let mut events: Vec<(&str, Value)> = vec![(
        "response.created",
        json!({"response": response("in_progress", json!([]), Value::Null)}),
    )];
    for (at, item) in output.iter().enumerate() {
        let id = item["id"].clone();
        let mut opened = item.clone();
        match item["type"].as_str() {
            Some("message") => opened["content"] = json!([]),
            Some("function_call") => opened["arguments"] = json!(""),
            _ => opened["summary"] = json!([]),
        }
        opened["status"] = json!("in_progress");
        events.push((
            "response.output_item.added",
            json!({"output_index": at, "item": opened}),
        ));
        let at_part = |extra: Value| {
            let mut v = json!({"item_id": id, "output_index": at, "content_index": 0});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            v
        };
        match item["type"].as_str() {
            Some("message") => {
                let part =
                    |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
                events.push((
                    "response.content_part.added",
                    at_part(json!({"part": part("")})),
                ));
                events.push((
                    "response.output_text.delta",
                    at_part(json!({"delta": text})),
                ));
                if fail {
                    events.push((
                        "error",
                        json!({"code": "server_error", "param": null,
                               "message": "The server had an error while processing your request. Sorry about that!"}),
                    ));
                    break;
                }
                events.push(("response.output_text.done", at_part(json!({"text": text}))));
                events.push((
                    "response.content_part.done",
                    at_part(json!({"part": part(&text)})),
                ));
            }
            Some("function_call") => {
                let args = item["arguments"].clone();
                events.push((
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": at, "delta": args}),
                ));
                events.push((
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": at, "arguments": args}),
                ));
            }
            _ => {}
        }
        events.push((
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
        ));
    }
    if !fail {
        events.push((
            "response.completed",
            json!({"response": response("completed", json!(output), usage)}),
        ));
    }
    Reply::Chunked {
        status: 200,
        content_type: "text/event-stream".into(),
        pieces: events
            .into_iter()
            .enumerate()
            .map(|(n, (name, mut data))| {
                data["type"] = json!(name);
                data["sequence_number"] = json!(n);
                format!("event: {name}\ndata: {data}\n\n").into_bytes()
            })
            .collect(),
        interval: Duration::ZERO,
        end: End::Clean,
    }
}
