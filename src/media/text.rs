//! Token-billed endpoints: embeddings (spec 4.19), rerank (4.22) and moderation (4.20):
//! validation, the model, and the tokens an answer reports.

use crate::protocol::{Invalid, Usage};
use serde_json::Value;

/// The model moderation requests use when they name none (the API's own default).
pub const DEFAULT_MODERATION_MODEL: &str = "omni-moderation-latest";

use crate::protocol::invalid;

/// `model` as a non-empty string, when present.
fn model_field(obj: &serde_json::Map<String, Value>) -> Result<Option<String>, Invalid> {
    match obj.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(m)) if !m.is_empty() => Ok(Some(m.clone())),
        Some(_) => Err(invalid("model", "`model` must be a non-empty string.")),
    }
}

fn required_model(obj: &serde_json::Map<String, Value>) -> Result<String, Invalid> {
    model_field(obj)?.ok_or_else(|| invalid("model", "`model` is required."))
}

fn is_token_list(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_u64))
}

/// Spec 4.19: `input` is a string, a list of strings, a list of token ids, or a list of
/// such lists; `model` comes from the body or, on `/v1/engines/{model}/embeddings`,
/// from the path.
pub fn check_embeddings(body: &Value, path_model: Option<&str>) -> Result<String, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = match path_model {
        Some(m) => m.to_string(),
        None => required_model(obj)?,
    };
    let ok = match obj.get("input") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(items)) => {
            !items.is_empty()
                && (items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.is_empty()))
                    || items.iter().all(Value::is_u64)
                    || items.iter().all(is_token_list))
        }
        None => return Err(invalid("input", "`input` is required.")),
        _ => false,
    };
    if !ok {
        return Err(invalid(
            "input",
            "`input` must be a non-empty string, a list of strings, or a list of token ids.",
        ));
    }
    match obj.get("encoding_format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if f == "float" || f == "base64" => {}
        Some(_) => {
            return Err(invalid(
                "encoding_format",
                "`encoding_format` must be `float` or `base64`.",
            ))
        }
    }
    if let Some(d) = obj.get("dimensions").filter(|d| !d.is_null()) {
        if d.as_u64().is_none_or(|d| d == 0) {
            return Err(invalid(
                "dimensions",
                "`dimensions` must be a positive integer.",
            ));
        }
    }
    Ok(model)
}

/// Spec 4.22: `model`, `query` (string) and `documents` (strings or objects) required;
/// `top_n` a positive integer; `return_documents` a boolean.
pub fn check_rerank(body: &Value) -> Result<String, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = required_model(obj)?;
    match obj.get("query") {
        Some(Value::String(q)) if !q.is_empty() => {}
        None => return Err(invalid("query", "`query` is required.")),
        Some(_) => return Err(invalid("query", "`query` must be a non-empty string.")),
    }
    match obj.get("documents") {
        Some(Value::Array(docs)) if !docs.is_empty() => {
            if let Some(i) = docs.iter().position(|d| !(d.is_string() || d.is_object())) {
                return Err(invalid(
                    format!("documents[{i}]"),
                    "Each document must be a string or an object.",
                ));
            }
        }
        None => return Err(invalid("documents", "`documents` is required.")),
        Some(_) => {
            return Err(invalid(
                "documents",
                "`documents` must be a non-empty array.",
            ))
        }
    }
    if let Some(n) = obj.get("top_n").filter(|n| !n.is_null()) {
        if n.as_u64().is_none_or(|n| n == 0) {
            return Err(invalid("top_n", "`top_n` must be a positive integer."));
        }
    }
    if let Some(r) = obj.get("return_documents").filter(|r| !r.is_null()) {
        if !r.is_boolean() {
            return Err(invalid(
                "return_documents",
                "`return_documents` must be a boolean.",
            ));
        }
    }
    Ok(model)
}

/// Moderation: `input` (a string, a list of strings, or a list of text/image parts)
/// required; `model` defaults to the API's own default.
pub fn check_moderation(body: &Value) -> Result<String, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = model_field(obj)?.unwrap_or_else(|| DEFAULT_MODERATION_MODEL.to_string());
    let ok = match obj.get("input") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(items)) => {
            !items.is_empty()
                && (items.iter().all(Value::is_string) || items.iter().all(Value::is_object))
        }
        None => return Err(invalid("input", "`input` is required.")),
        _ => false,
    };
    if !ok {
        return Err(invalid(
            "input",
            "`input` must be a non-empty string, a list of strings, or a list of parts.",
        ));
    }
    Ok(model)
}

/// The prompt tokens an answer reports, in any of the shapes upstreams use: OpenAI's
/// `usage.prompt_tokens`/`total_tokens`, `usage.input_tokens`, or Cohere's
/// `meta.billed_units.input_tokens`. `None` when it reports none.
pub fn reported_tokens(answer: &Value) -> Option<Usage> {
    let u = &answer["usage"];
    let tokens = u["prompt_tokens"]
        .as_u64()
        .or_else(|| u["input_tokens"].as_u64())
        .or_else(|| u["total_tokens"].as_u64())
        .or_else(|| answer["meta"]["billed_units"]["input_tokens"].as_u64())?;
    Some(Usage {
        input_tokens: tokens,
        output_tokens: u["completion_tokens"]
            .as_u64()
            .or_else(|| u["output_tokens"].as_u64())
            .unwrap_or(0),
        ..Usage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param(r: Result<String, Invalid>) -> Option<String> {
        r.unwrap_err().param
    }

    #[test]
    fn embeddings() {
        let ok = json!({"model": "e", "input": ["a", "b"]});
        assert_eq!(check_embeddings(&ok, None).unwrap(), "e");
        assert_eq!(
            check_embeddings(&json!({"input": [[1, 2], [3]]}), Some("p")).unwrap(),
            "p"
        );
        assert_eq!(
            param(check_embeddings(&json!({"input": "x"}), None)),
            Some("model".into())
        );
        assert_eq!(
            param(check_embeddings(&json!({"model": "e"}), None)),
            Some("input".into())
        );
        assert_eq!(
            param(check_embeddings(
                &json!({"model": "e", "input": [1, "a"]}),
                None
            )),
            Some("input".into())
        );
        assert_eq!(
            param(check_embeddings(
                &json!({"model": "e", "input": "a", "dimensions": 0}),
                None
            )),
            Some("dimensions".into())
        );
        assert_eq!(
            param(check_embeddings(
                &json!({"model": "e", "input": "a", "encoding_format": "int8"}),
                None
            )),
            Some("encoding_format".into())
        );
    }

    #[test]
    fn rerank() {
        let ok = json!({"model": "r", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1, "return_documents": true});
        assert_eq!(check_rerank(&ok).unwrap(), "r");
        for (body, p) in [
            (json!({"query": "q", "documents": ["a"]}), "model"),
            (json!({"model": "r", "documents": ["a"]}), "query"),
            (json!({"model": "r", "query": "q"}), "documents"),
            (
                json!({"model": "r", "query": "q", "documents": []}),
                "documents",
            ),
            (
                json!({"model": "r", "query": "q", "documents": [1]}),
                "documents[0]",
            ),
            (
                json!({"model": "r", "query": "q", "documents": ["a"], "top_n": 0}),
                "top_n",
            ),
            (
                json!({"model": "r", "query": "q", "documents": ["a"], "return_documents": "y"}),
                "return_documents",
            ),
        ] {
            assert_eq!(param(check_rerank(&body)), Some(p.into()), "{body}");
        }
    }

    #[test]
    fn moderation_defaults_the_model() {
        assert_eq!(
            check_moderation(&json!({"input": "x"})).unwrap(),
            DEFAULT_MODERATION_MODEL
        );
        assert_eq!(
            param(check_moderation(&json!({"input": 3}))),
            Some("input".into())
        );
    }

    #[test]
    fn tokens_in_every_shape() {
        let t = |v: Value| reported_tokens(&v).map(|u| u.input_tokens);
        assert_eq!(
            t(json!({"usage": {"prompt_tokens": 5, "total_tokens": 5}})),
            Some(5)
        );
        assert_eq!(t(json!({"usage": {"total_tokens": 7}})), Some(7));
        assert_eq!(
            t(json!({"meta": {"billed_units": {"input_tokens": 9}}})),
            Some(9)
        );
        assert_eq!(t(json!({"results": []})), None);
    }
}
