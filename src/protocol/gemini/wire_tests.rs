use super::*;
use crate::protocol::limit::testing::{relayed, same_except, same_text_except};

/// parse → set_output_limit → serialize, with the typed view and the body reader agreeing.
fn capped(body: &Value, cap: u64) -> Value {
    let text = body.to_string();
    let mut r: Request = serde_json::from_str(&text).unwrap();
    assert_eq!(r.output_limit(), output_limit(body), "{body}");
    assert_eq!(r.choices(), choices(body), "{body}");
    r.set_output_limit(cap);
    let typed = serde_json::to_value(&r).unwrap();
    // The relay's path: the same view over a parsed body, members kept in order.
    let mut v = body.clone();
    crate::protocol::set_output_limit(crate::protocol::Protocol::Gemini, &mut v, cap, "").unwrap();
    assert_eq!(v, typed);
    v
}

#[test]
fn limit_in_either_spelling() {
    let g = capped(&json!({"contents": []}), 9);
    assert_eq!(
        g,
        json!({"contents": [], "generationConfig": {"maxOutputTokens": 9}})
    );
    assert_eq!(output_limit(&g), Some(9));
    let g = json!({"generation_config": {"max_output_tokens": 50}});
    assert_eq!(output_limit(&g), Some(50));
    assert_eq!(
        capped(&g, 9),
        json!({"generation_config": {"max_output_tokens": 9}})
    );
    // The relay adds the limit in the spelling of the object the client sent.
    let g = json!({"generation_config": {"temperature": 1}});
    assert_eq!(
        capped(&g, 9),
        json!({"generation_config": {"temperature": 1, "max_output_tokens": 9}})
    );
    let g = json!({"generationConfig": {"maxOutputTokens": 5}});
    assert_eq!(capped(&g, 9), g, "never raised");
    let mixed = json!({"generationConfig": {"max_output_tokens": 50}});
    assert_eq!(output_limit(&mixed), Some(50));
    assert_eq!(
        capped(&mixed, 9),
        json!({"generationConfig": {"max_output_tokens": 9}})
    );
    let both = json!({"generation_config": {"max_output_tokens": 9000},
        "generationConfig": {"maxOutputTokens": 500}});
    assert_eq!(output_limit(&both), Some(500), "the JSON name first");
    assert_eq!(
        capped(&both, 100),
        json!({"generation_config": {"max_output_tokens": 100},
            "generationConfig": {"maxOutputTokens": 100}})
    );
    let null = json!({"generationConfig": null, "generation_config": {"topK": 3}});
    assert_eq!(
        capped(&null, 7),
        json!({"generationConfig": null, "generation_config": {"topK": 3, "max_output_tokens": 7}})
    );
}

#[test]
fn candidates() {
    assert_eq!(
        choices(&json!({"generationConfig": {"candidateCount": 3}})),
        3
    );
    assert_eq!(
        choices(&json!({"generation_config": {"candidate_count": 2}})),
        2
    );
    assert_eq!(
        choices(&json!({"generationConfig": {"candidateCount": 0}})),
        1
    );
    assert_eq!(choices(&json!({})), 1);
    capped(&json!({"generationConfig": {"candidate_count": 4}}), 1);
}

#[test]
fn round_trip_changes_only_the_limit() {
    let body = json!({
        "contents": [{"role": "user", "parts": [{"text": "hi \u{e9}"},
            {"inline_data": {"mime_type": "image/png", "data": "iVBO"}}]}],
        "generationConfig": {
            "maxOutputTokens": 4000, "candidateCount": 2, "temperature": 0.25,
            "thinkingConfig": {"thinkingBudget": -1}, "aFutureSetting": [1, 2.5, null]
        },
        "generation_config": {"top_k": 3, "candidate_count": 1},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "aFutureField": {"nested": {"deep": [{"k": null}, 1e3]}}
    });
    let out = capped(&body, 100);
    same_except(&body, &out, &[CONFIG], "body");
    same_except(
        &body[CONFIG],
        &out[CONFIG],
        &[MAX_OUTPUT_TOKENS],
        "generationConfig",
    );
    assert_eq!(out[CONFIG][MAX_OUTPUT_TOKENS], 100);
    same_except(&body, &capped(&body, 5000), &[], "body");
}

/// A request naming every member the gateway acts on (the output limit and the number
/// of candidates in `generationConfig`, tools and the tool config; the model is in the
/// path): through the typed view, every member but the config keeps its text byte for
/// byte, and in the config every setting but the limit; on the relay's path the whole
/// body is the client's text with only the limit lowered.
#[test]
fn every_member_the_gateway_acts_on_round_trips_as_written() {
    let text = r#"{"contents":[{"role":"user","parts":[{"text":"hi é"}]}],"systemInstruction":{"parts":[{"text":"be brief"}]},"generationConfig":{"temperature":0.5,"maxOutputTokens":4000,"candidateCount":2,"thinkingConfig":{"thinkingBudget":1024}},"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT"}}]},{"googleSearch":{}}],"toolConfig":{"functionCallingConfig":{"mode":"ANY"}},"safetySettings":[]}"#;
    let mut r: Request = serde_json::from_str(text).unwrap();
    assert_eq!((r.output_limit(), r.choices()), (Some(4000), 2));
    r.set_output_limit(100);
    let out = serde_json::to_string(&r).unwrap();
    same_text_except(text, &out, &[CONFIG]);
    let config = |t: &str| {
        let v: Value = serde_json::from_str(t).unwrap();
        v[CONFIG].to_string()
    };
    same_text_except(&config(text), &config(&out), &[MAX_OUTPUT_TOKENS]);
    let p = crate::protocol::Protocol::Gemini;
    assert_eq!(
        relayed(p, text, 100, ""),
        text.replace(r#""maxOutputTokens":4000"#, r#""maxOutputTokens":100"#)
    );
    assert_eq!(relayed(p, text, 5000, ""), text);
}
