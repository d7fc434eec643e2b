//! Responses the gateway stores for `previous_response_id` (spec 4.4): what a response
//! took in and gave back, owned by one key and found only through it.
//!
//! `get_responses(owner, ids)` leaves out another key's response exactly like an unknown
//! or expired one. Each response expires on its own (`ttl_secs` after it was stored, by
//! the store's clock): Redis drops it by itself, the embedded store drops expired rows as
//! new ones are stored and never returns one past its time. Nothing outside the gateway
//! has to run for either.

use super::StoreResult;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One stored response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResponse {
    /// The gateway's own id (`resp_...`).
    pub id: String,
    pub key_id: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The responses before it, oldest first (empty for the first turn).
    #[serde(default)]
    pub chain: Vec<String>,
    /// This turn's own input items (not the earlier turns').
    pub input: Vec<Value>,
    /// The response object as the client received it (its `output`, `usage`, `model`).
    pub response: Value,
    /// A native Responses API upstream wrote the output: its items (and their ids) are
    /// the upstream's own.
    #[serde(default)]
    pub native: bool,
    /// Tokens of the whole conversation through this turn, as settled: the input the
    /// upstream read (the earlier turns included) plus the output it wrote.
    pub tokens: u64,
}

impl StoredResponse {
    /// Its output items.
    pub fn output(&self) -> &[Value] {
        self.response
            .get("output")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

#[async_trait]
pub trait ResponseStore: Send + Sync {
    /// Stores `r` (replacing one with its id) for `ttl_secs`; `bytes` is what it counts
    /// against its key's stored bytes.
    async fn put_response(&self, r: &StoredResponse, bytes: u64, ttl_secs: u64) -> StoreResult<()>;

    /// The live responses of `key_id` among `ids`, in the order asked; an unknown,
    /// expired or deleted id, or another key's, is left out.
    async fn get_responses(&self, key_id: &str, ids: &[String])
        -> StoreResult<Vec<StoredResponse>>;

    /// Deletes one of `key_id`'s responses; `false` when it had none by that id.
    async fn delete_response(&self, key_id: &str, id: &str) -> StoreResult<bool>;

    /// Deletes every response of `key_id`; how many there were.
    async fn delete_key_responses(&self, key_id: &str) -> StoreResult<u64>;

    /// Bytes of `key_id`'s live responses.
    async fn stored_bytes(&self, key_id: &str) -> StoreResult<u64>;
}
