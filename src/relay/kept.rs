//! What a stored response carries from its request to the end of its answer
//! ([`Keep`]), and the record made of the answer ([`Kept`]), which the meters hand to
//! [`super::stored::keep`] once settled.

use crate::protocol::Usage;
use crate::store::responses::StoredResponse;
use serde_json::Value;

/// What a request that will be stored carries to the end of its answer.
pub struct Keep {
    pub(super) key_id: String,
    pub(super) chain: Vec<String>,
    pub(super) input: Vec<Value>,
    pub(super) previous: Option<String>,
    pub(super) ttl_secs: u64,
}

impl Keep {
    /// The record of the answer: `response` is the object the client received, `usage`
    /// what was settled, `native`: a Responses API upstream wrote it.
    pub fn record(self, mut response: Value, usage: &Usage, native: bool) -> Option<Kept> {
        let obj = response.as_object_mut()?;
        if obj.get("object").and_then(Value::as_str) != Some("response") {
            return None;
        }
        let id = obj.get("id").and_then(Value::as_str)?.to_string();
        if let Some(prev) = &self.previous {
            obj.insert("previous_response_id".into(), prev.clone().into());
        }
        obj.insert("store".into(), true.into());
        Some(Kept {
            response: StoredResponse {
                id,
                key_id: self.key_id,
                created_at: obj
                    .get("created_at")
                    .and_then(Value::as_i64)
                    .unwrap_or_else(crate::ids::now_secs),
                chain: self.chain,
                input: self.input,
                response,
                tokens: usage.input_tokens.saturating_add(usage.output_tokens),
                native,
            },
            ttl_secs: self.ttl_secs,
        })
    }
}

/// A response ready to be stored.
pub struct Kept {
    pub(super) response: StoredResponse,
    pub(super) ttl_secs: u64,
}
