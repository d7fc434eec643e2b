//! DashScope's image editing as Alibaba Cloud Model Studio documents it ("Qwen - image
//! editing API reference", alibabacloud.com/help/en/model-studio/qwen-image-edit,
//! updated 2026-03): `POST /api/v1/services/aigc/multimodal-generation/generation` with
//! `Authorization: Bearer <DashScope API key>` and `{model, input: {messages: [{role:
//! "user", content: [{image}..., {text}]}]}, parameters: {n, negative_prompt (at most
//! 500 characters), prompt_extend, watermark, size ("width*height"), seed}}`. The
//! answer: `{output: {choices: [{finish_reason, message: {role: "assistant", content:
//! [{image: URL}...]}}]}, usage: {width, height, image_count}, request_id}`; errors are
//! an HTTP status with `{request_id, code, message}` (`InvalidParameter`,
//! `InvalidApiKey`, ...).
#![allow(dead_code)]

use crate::mock_upstream::{MockUpstream, Recorded, Reply};
use serde_json::{json, Value};

pub const API_KEY: &str = "dashscope-test-key";
pub const PATH: &str = "/api/v1/services/aigc/multimodal-generation/generation";
/// The prompt that makes the model fail (a content inspection refusal).
pub const REFUSED: &str = "refuse this";

pub async fn start() -> MockUpstream {
    MockUpstream::start(reply).await
}

fn error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"request_id": "ds-req-err", "code": code, "message": message}),
    )
}

fn reply(r: &Recorded) -> Reply {
    if r.method != "POST" || r.path != PATH {
        return error(404, "NotFound", "no such path");
    }
    if r.header("authorization") != Some(&format!("Bearer {API_KEY}")) {
        return error(401, "InvalidApiKey", "Invalid API-key provided.");
    }
    let Ok(b) = serde_json::from_slice::<Value>(&r.body) else {
        return error(400, "InvalidParameter", "body is not JSON");
    };
    let Some(model) = b["model"].as_str() else {
        return error(400, "InvalidParameter", "model is required");
    };
    let Some(content) = b["input"]["messages"][0]["content"].as_array() else {
        return error(
            400,
            "InvalidParameter",
            "input.messages[0].content is required",
        );
    };
    let images = content.iter().filter(|c| c["image"].is_string()).count();
    let texts: Vec<&str> = content.iter().filter_map(|c| c["text"].as_str()).collect();
    if images == 0 || texts.len() != 1 {
        return error(
            400,
            "InvalidParameter",
            "content needs 1 to 3 images and exactly one text",
        );
    }
    let p = &b["parameters"];
    let n = p["n"].as_u64().unwrap_or(1);
    if !(1..=6).contains(&n) {
        return error(400, "InvalidParameter", "n must be from 1 to 6");
    }
    if let Some(size) = p.get("size").filter(|s| !s.is_null()) {
        let ok = size
            .as_str()
            .and_then(|s| s.split_once('*'))
            .is_some_and(|(w, h)| w.parse::<u32>().is_ok() && h.parse::<u32>().is_ok());
        if !ok {
            return error(400, "InvalidParameter", "size must be width*height");
        }
    }
    if p["negative_prompt"]
        .as_str()
        .is_some_and(|s| s.chars().count() > 500)
    {
        return error(400, "InvalidParameter", "negative_prompt is too long");
    }
    if texts[0] == REFUSED {
        return error(
            400,
            "DataInspectionFailed",
            "Input data may contain inappropriate content (checked on ds-node-3.internal).",
        );
    }
    let urls: Vec<Value> = (0..n)
        .map(|i| json!({"image": format!("https://dashscope-result.example/{model}/{i}.png?Expires=1")}))
        .collect();
    Reply::json(
        200,
        json!({"output": {"choices": [{"finish_reason": "stop",
                  "message": {"role": "assistant", "content": urls}}]},
               "usage": {"width": 1024, "height": 1024, "image_count": n},
               "request_id": "ds-req-1"}),
    )
}
