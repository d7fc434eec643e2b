//! The native edit shape of spec 4.7 toward its vendor: DashScope's multimodal-generation
//! API (Alibaba Cloud Model Studio, "Qwen - image editing API reference", 2026-03:
//! `POST /api/v1/services/aigc/multimodal-generation/generation`, `Authorization: Bearer`).
//! The request is the 4.7 body itself, but the API writes sizes as `W*H` only. The answer
//! is `{output: {choices: [{message: {content: [{image: URL}, ...]}}]}, usage: {width,
//! height, image_count}, request_id}`, which becomes spec 4.7's `{created, data: [{url,
//! b64_json, revised_prompt}]}`: every member a string, empty when DashScope gave none (it
//! answers URLs; a choice's `text` parts, when it has any, are the prompt it drew from).

use bytes::Bytes;
use serde_json::{json, Value};

/// Where the native edits go on a `dashscope` channel.
pub const DASHSCOPE_EDIT_PATH: &str = "/api/v1/services/aigc/multimodal-generation/generation";

/// Writes `parameters.size` as the API spells it (`1024*768`); spec 4.7 also takes `x`.
pub fn to_dashscope(body: &mut Value) {
    if let Some(size) = body
        .get_mut("parameters")
        .and_then(|p| p.get_mut("size"))
        .filter(|s| s.is_string())
    {
        let text = size.as_str().unwrap_or_default().replace('x', "*");
        *size = Value::String(text);
    }
}

/// Spec 4.7's answer from DashScope's: one `data` item per image the choices hold, with
/// its choice's text as `revised_prompt`. Anything else (not JSON, not that shape) is
/// returned as it came.
pub fn from_dashscope(answer: Bytes) -> Bytes {
    let Ok(v) = serde_json::from_slice::<Value>(&answer) else {
        return answer;
    };
    let Some(choices) = v["output"]["choices"].as_array() else {
        return answer;
    };
    let mut data = Vec::new();
    for content in choices
        .iter()
        .filter_map(|c| c["message"]["content"].as_array())
    {
        let revised: Vec<&str> = content.iter().filter_map(|p| p["text"].as_str()).collect();
        let revised = revised.join("\n");
        data.extend(
            content
                .iter()
                .filter_map(|p| p["image"].as_str())
                .map(|url| json!({"url": url, "b64_json": "", "revised_prompt": revised})),
        );
    }
    let out = json!({"created": crate::ids::now_secs(), "data": data});
    Bytes::from(serde_json::to_vec(&out).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_written_with_a_star() {
        let mut b = json!({"model": "m", "parameters": {"size": "1024x1536", "n": 2}});
        to_dashscope(&mut b);
        assert_eq!(b["parameters"]["size"], "1024*1536");
        let mut b = json!({"model": "m"});
        to_dashscope(&mut b);
        assert_eq!(b, json!({"model": "m"}));
    }

    #[test]
    fn the_documented_answer_becomes_spec_4_7() {
        let answer = br#"{"output": {"choices": [{"finish_reason": "stop", "message": {"role": "assistant",
            "content": [{"image": "https://dashscope-result-sz.oss-cn-shenzhen.aliyuncs.com/a.png?Expires=1"},
                        {"image": "https://dashscope-result-sz.oss-cn-shenzhen.aliyuncs.com/b.png?Expires=1"}]}}]},
            "usage": {"width": 1536, "image_count": 2, "height": 1024}, "request_id": "bf37ca26"}"#;
        let v: Value = serde_json::from_slice(&from_dashscope(Bytes::from_static(answer))).unwrap();
        assert!(v["created"].is_i64());
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["data"][1]["url"],
            "https://dashscope-result-sz.oss-cn-shenzhen.aliyuncs.com/b.png?Expires=1"
        );
        assert_eq!(
            super::super::delivered(&serde_json::to_vec(&v).unwrap())
                .unwrap()
                .images,
            2
        );
        assert_eq!(v["data"][0]["b64_json"], "");
        assert_eq!(v["data"][0]["revised_prompt"], "");
        let other = Bytes::from_static(br#"{"created": 1, "data": []}"#);
        assert_eq!(from_dashscope(other.clone()), other);
    }

    #[test]
    fn a_choice_s_text_is_the_revised_prompt_of_its_images() {
        let answer = br#"{"output": {"choices": [
            {"message": {"content": [{"text": "A blue cat on a red sofa."}, {"image": "https://r/a.png"}]}},
            {"message": {"content": [{"image": "https://r/b.png"}]}}]}}"#;
        let v: Value = serde_json::from_slice(&from_dashscope(Bytes::from_static(answer))).unwrap();
        assert_eq!(
            v["data"],
            json!([
                {"url": "https://r/a.png", "b64_json": "", "revised_prompt": "A blue cat on a red sofa."},
                {"url": "https://r/b.png", "b64_json": "", "revised_prompt": ""},
            ])
        );
    }
}
