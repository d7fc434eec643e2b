//! Token-billed endpoints: embeddings (spec 4.19), rerank (4.22) and moderation (4.20):
//! validation, the model, the units the request is counted in when its answer reports
//! none, and what an answer says it consumed.
//!
//! The estimate, one rule per endpoint (README, "Images, audio, embeddings, rerank,
//! moderation"): four bytes a token, rounded up, of the text members the endpoint bills
//! (embeddings and moderation `input`, rerank `query` and documents), never the JSON
//! around them; one token per token id sent as such; 3,000 tokens per image part where
//! the endpoint takes images (omni-moderation's `image_url` parts).

use crate::billing::{Price, IMAGE_TOKEN_ALLOWANCE};
use crate::protocol::{invalid, Invalid, Usage};
use serde_json::{Map, Value};

/// The model moderation requests use when they name none (the API's own default).
pub const DEFAULT_MODERATION_MODEL: &str = "omni-moderation-latest";

/// Bytes of text per estimated token.
const BYTES_PER_TOKEN: u64 = 4;
/// Cohere's search unit: "one query with up to 100 documents to be ranked" (pricing FAQ).
const DOCUMENTS_PER_SEARCH_UNIT: u64 = 100;
/// Cohere's v1 `max_chunks_per_doc` default: a long document is split into at most this
/// many chunks, each counted as a document.
const DEFAULT_CHUNKS_PER_DOC: u64 = 10;

/// What a request holds that its tokens are estimated from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Bytes of the text members the endpoint bills.
    pub text_bytes: u64,
    /// Token ids sent as such (embeddings): one token each.
    pub token_ids: u64,
    /// Image parts (omni-moderation).
    pub image_parts: u64,
}

impl Counted {
    /// The estimated prompt tokens.
    pub fn tokens(&self) -> u64 {
        self.text_bytes
            .div_ceil(BYTES_PER_TOKEN)
            .saturating_add(self.token_ids)
            .saturating_add(self.image_parts.saturating_mul(IMAGE_TOKEN_ALLOWANCE))
    }

    fn text(&mut self, s: &str) {
        self.text_bytes = self.text_bytes.saturating_add(s.len() as u64);
    }
}

/// A rerank request's size in Cohere's billing terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Documents {
    pub count: u64,
    /// Cohere v1's `max_chunks_per_doc`, or its default.
    pub max_chunks: u64,
}

impl Documents {
    /// The most search units the request can be billed: every document split into its
    /// most chunks (v1), each chunk a document.
    pub fn search_units_bound(&self) -> u64 {
        self.count
            .saturating_mul(self.max_chunks)
            .div_ceil(DOCUMENTS_PER_SEARCH_UNIT)
            .max(1)
    }

    /// The estimate when the answer reports none: one chunk a document.
    pub fn search_units_estimate(&self) -> u64 {
        self.count.div_ceil(DOCUMENTS_PER_SEARCH_UNIT).max(1)
    }
}

/// A valid token-billed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextJob {
    pub model: String,
    pub counted: Counted,
    /// Rerank's documents (`None` for embeddings and moderation).
    pub documents: Option<Documents>,
}

/// What a token-billed answer is charged for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Billed {
    Tokens(Usage),
    SearchUnits(u64),
}

/// `model` as a non-empty string, when present.
fn model_field(obj: &Map<String, Value>) -> Result<Option<String>, Invalid> {
    match obj.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(m)) if !m.is_empty() => Ok(Some(m.clone())),
        Some(_) => Err(invalid("model", "`model` must be a non-empty string.")),
    }
}

fn required_model(obj: &Map<String, Value>) -> Result<String, Invalid> {
    model_field(obj)?.ok_or_else(|| invalid("model", "`model` is required."))
}

fn token_list(v: &Value) -> Option<u64> {
    let a = v.as_array()?;
    (!a.is_empty() && a.iter().all(Value::is_u64)).then_some(a.len() as u64)
}

/// Spec 4.19: `input` is a string, a list of strings, a list of token ids, or a list of
/// such lists; `model` comes from the body or, on `/v1/engines/{model}/embeddings`,
/// from the path.
pub fn check_embeddings(body: &Value, path_model: Option<&str>) -> Result<TextJob, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = match path_model {
        Some(m) => m.to_string(),
        None => required_model(obj)?,
    };
    let mut counted = Counted::default();
    let ok = match obj.get("input") {
        Some(Value::String(s)) => {
            counted.text(s);
            !s.is_empty()
        }
        Some(Value::Array(items))
            if items
                .iter()
                .all(|i| i.as_str().is_some_and(|s| !s.is_empty())) =>
        {
            items
                .iter()
                .filter_map(Value::as_str)
                .for_each(|s| counted.text(s));
            !items.is_empty()
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_u64) => {
            counted.token_ids = items.len() as u64;
            !items.is_empty()
        }
        Some(Value::Array(items)) => {
            let lists: Option<Vec<u64>> = items.iter().map(token_list).collect();
            counted.token_ids = lists.iter().flatten().sum();
            !items.is_empty() && lists.is_some()
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
    Ok(TextJob {
        model,
        counted,
        documents: None,
    })
}

/// A positive integer member, when present.
fn positive(obj: &Map<String, Value>, name: &str) -> Result<Option<u64>, Invalid> {
    match obj.get(name).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(invalid(
                name,
                format!("`{name}` must be a positive integer."),
            )),
        },
    }
}

/// Spec 4.22: `model`, `query` (string) and `documents` (strings or objects) required;
/// `top_n` a positive integer; `return_documents` a boolean. Cohere's v1 options that
/// change what is billed are checked too: `rank_fields` (the object members ranked, and
/// counted; `text` by default) and `max_chunks_per_doc`.
pub fn check_rerank(body: &Value) -> Result<TextJob, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = required_model(obj)?;
    let mut counted = Counted::default();
    match obj.get("query") {
        Some(Value::String(q)) if !q.is_empty() => counted.text(q),
        None => return Err(invalid("query", "`query` is required.")),
        Some(_) => return Err(invalid("query", "`query` must be a non-empty string.")),
    }
    let fields: Vec<&str> = match obj.get("rank_fields").filter(|f| !f.is_null()) {
        None => vec!["text"],
        Some(Value::Array(f)) if !f.is_empty() && f.iter().all(Value::is_string) => {
            f.iter().filter_map(Value::as_str).collect()
        }
        Some(_) => {
            return Err(invalid(
                "rank_fields",
                "`rank_fields` must be a non-empty list of strings.",
            ))
        }
    };
    let docs = match obj.get("documents") {
        Some(Value::Array(docs)) if !docs.is_empty() => docs,
        None => return Err(invalid("documents", "`documents` is required.")),
        Some(_) => {
            return Err(invalid(
                "documents",
                "`documents` must be a non-empty array.",
            ))
        }
    };
    for (i, d) in docs.iter().enumerate() {
        match d {
            Value::String(s) => counted.text(s),
            Value::Object(o) => fields
                .iter()
                .filter_map(|f| o.get(*f).and_then(Value::as_str))
                .for_each(|s| counted.text(s)),
            _ => {
                return Err(invalid(
                    format!("documents[{i}]"),
                    "Each document must be a string or an object.",
                ))
            }
        }
    }
    positive(obj, "top_n")?;
    let max_chunks = positive(obj, "max_chunks_per_doc")?.unwrap_or(DEFAULT_CHUNKS_PER_DOC);
    if let Some(r) = obj.get("return_documents").filter(|r| !r.is_null()) {
        if !r.is_boolean() {
            return Err(invalid(
                "return_documents",
                "`return_documents` must be a boolean.",
            ));
        }
    }
    Ok(TextJob {
        model,
        counted,
        documents: Some(Documents {
            count: docs.len() as u64,
            max_chunks,
        }),
    })
}

/// One part of omni-moderation's list input: `{type: "text", text}` or `{type:
/// "image_url", image_url: {url}}` (OpenAI API reference, "Create moderation").
fn moderation_part(i: usize, part: &Value, counted: &mut Counted) -> Result<(), Invalid> {
    let at = |m: &str| format!("input[{i}].{m}");
    match part["type"].as_str() {
        Some("text") => match part["text"].as_str() {
            Some(t) => counted.text(t),
            None => return Err(invalid(at("text"), "A text part needs a string `text`.")),
        },
        Some("image_url") => match part["image_url"]["url"].as_str() {
            Some(_) => counted.image_parts += 1,
            None => {
                return Err(invalid(
                    at("image_url"),
                    "An image part needs `image_url` as an object with a string `url`.",
                ))
            }
        },
        _ => {
            return Err(invalid(
                at("type"),
                "A part's `type` must be `text` or `image_url`.",
            ))
        }
    }
    Ok(())
}

/// Moderation: `input` (a string, a list of strings, or a list of text/image parts)
/// required; `model` defaults to the API's own default.
pub fn check_moderation(body: &Value) -> Result<TextJob, Invalid> {
    let obj = crate::protocol::body_object(body)?;
    let model = model_field(obj)?.unwrap_or_else(|| DEFAULT_MODERATION_MODEL.to_string());
    let mut counted = Counted::default();
    let ok = match obj.get("input") {
        Some(Value::String(s)) => {
            counted.text(s);
            !s.is_empty()
        }
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => {
            items
                .iter()
                .filter_map(Value::as_str)
                .for_each(|s| counted.text(s));
            true
        }
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_object) => {
            for (i, part) in items.iter().enumerate() {
                moderation_part(i, part, &mut counted)?;
            }
            true
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
    Ok(TextJob {
        model,
        counted,
        documents: None,
    })
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

/// Cohere's `meta.billed_units.search_units` (its SDKs type it as a number: a fraction
/// is rounded up).
pub fn reported_search_units(answer: &Value) -> Option<u64> {
    let u = &answer["meta"]["billed_units"]["search_units"];
    u.as_u64()
        .or_else(|| u.as_f64().filter(|f| *f >= 0.0).map(|f| f.ceil() as u64))
}

/// What an answer is charged for at `price`, and whether the upstream reported it
/// (`true`) or the gateway counted it: search units at `per_search_unit` when the
/// answer reports them and the model has that price; else the tokens the answer
/// reports; else the request's estimate, in tokens when the model is priced by the
/// token, in search units (one per 100 documents) when only by the search unit.
pub fn billed(job: &TextJob, price: &Price, answer: &[u8]) -> (Billed, bool) {
    let v = serde_json::from_slice::<Value>(answer).unwrap_or(Value::Null);
    if price.per_search_unit_pico.is_some() {
        if let Some(units) = reported_search_units(&v) {
            return (Billed::SearchUnits(units), true);
        }
    }
    if price.input_priced {
        if let Some(u) = reported_tokens(&v) {
            return (Billed::Tokens(u), true);
        }
    }
    match job.documents {
        Some(d) if !price.input_priced && price.per_search_unit_pico.is_some() => {
            (Billed::SearchUnits(d.search_units_estimate()), false)
        }
        _ => (
            Billed::Tokens(Usage {
                input_tokens: job.counted.tokens(),
                ..Usage::default()
            }),
            false,
        ),
    }
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
