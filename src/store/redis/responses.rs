//! Stored responses on Redis. Layout, everything under the owner's hash tag (one slot):
//! - `gw:resp:{KEYID}:<id>` string: the [`StoredResponse`] as JSON, with Redis's own
//!   expiry (`PX`), so it goes away by itself;
//! - the key's index, what its stored bytes and its deletion are read from:
//!   `gw:respx:{KEYID}` zset (`<id>` scored by when it expires, unix ms),
//!   `gw:resps:{KEYID}` hash (`<id>` → its bytes) and `gw:respb:{KEYID}` (their sum).
//!   Entries past their time leave the index whenever a response is stored or the bytes
//!   are read (each step costs what it removes, never a scan of what is live); the index
//!   itself expires with the newest response in it.
//!
//! Time is Redis's own (`TIME`), the same for every instance.

use super::conn::map_err;
use super::RedisStore;
use crate::store::responses::{ResponseStore, StoredResponse};
use crate::store::{StoreError, StoreResult};
use async_trait::async_trait;
use redis::Script;
use std::sync::LazyLock;

/// The longest expiry kept (a century): beyond it the index's times would not stay
/// whole numbers in Lua.
const MAX_TTL_SECS: u64 = 100 * 365 * 86_400;

/// `prune(z, h, b, now)` drops the index's entries past `now` (ms, from `TIME`).
macro_rules! prune_fn {
    () => {
        r"
local function prune(z, h, b, now)
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  for _, id in ipairs(gone) do
    local n = redis.call('HGET', h, id)
    if n then redis.call('DECRBY', b, n) end
    redis.call('HDEL', h, id)
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', z, '-inf', now) end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"
    };
}

// gw_put_response_v1: KEYS record, zset, hash, bytes; ARGV id, json, bytes, ttl_ms.
const PUT_LUA: &str = concat!(
    prune_fn!(),
    r"
prune(KEYS[2], KEYS[3], KEYS[4], now)
local ttl = tonumber(ARGV[4])
local old = redis.call('HGET', KEYS[3], ARGV[1])
if old then redis.call('DECRBY', KEYS[4], old) end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('INCRBY', KEYS[4], ARGV[3])
for i = 2, 4 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1"
);

// gw_response_bytes_v1: KEYS zset, hash, bytes.
const BYTES_LUA: &str = concat!(
    prune_fn!(),
    r"
prune(KEYS[1], KEYS[2], KEYS[3], now)
return tonumber(redis.call('GET', KEYS[3]) or '0')"
);

// gw_delete_response_v1: KEYS record, zset, hash, bytes; ARGV id.
const DELETE_LUA: &str = r"
local n = redis.call('HGET', KEYS[3], ARGV[1])
if n then redis.call('DECRBY', KEYS[4], n) end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])";

static PUT: LazyLock<Script> = LazyLock::new(|| Script::new(PUT_LUA));
static BYTES: LazyLock<Script> = LazyLock::new(|| Script::new(BYTES_LUA));
static DELETE: LazyLock<Script> = LazyLock::new(|| Script::new(DELETE_LUA));

/// The index of a key's responses: (zset, hash, bytes).
fn index(key_id: &str) -> [String; 3] {
    [
        format!("gw:respx:{{{key_id}}}"),
        format!("gw:resps:{{{key_id}}}"),
        format!("gw:respb:{{{key_id}}}"),
    ]
}

fn record_key(key_id: &str, id: &str) -> String {
    format!("gw:resp:{{{key_id}}}:{id}")
}

fn internal(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::internal_error(e)
}

#[async_trait]
impl ResponseStore for RedisStore {
    async fn put_response(&self, r: &StoredResponse, bytes: u64, ttl_secs: u64) -> StoreResult<()> {
        let text = serde_json::to_string(r).map_err(internal)?;
        let ttl_ms = ttl_secs.clamp(1, MAX_TTL_SECS) * 1000;
        let [z, h, b] = index(&r.key_id);
        PUT.key(record_key(&r.key_id, &r.id))
            .key(z)
            .key(h)
            .key(b)
            .arg(&r.id)
            .arg(text)
            .arg(bytes)
            .arg(ttl_ms)
            .invoke_async::<i64>(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn get_responses(
        &self,
        key_id: &str,
        ids: &[String],
    ) -> StoreResult<Vec<StoredResponse>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        for id in ids {
            cmd.arg(record_key(key_id, id));
        }
        let texts: Vec<Option<String>> = self.query(&cmd).await?;
        let mut out = Vec::with_capacity(texts.len());
        for text in texts.into_iter().flatten() {
            let r: StoredResponse = serde_json::from_str(&text).map_err(internal)?;
            if r.key_id == key_id {
                out.push(r);
            }
        }
        Ok(out)
    }

    async fn delete_response(&self, key_id: &str, id: &str) -> StoreResult<bool> {
        let [z, h, b] = index(key_id);
        let n: i64 = DELETE
            .key(record_key(key_id, id))
            .key(z)
            .key(h)
            .key(b)
            .arg(id)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(n > 0)
    }

    async fn delete_key_responses(&self, key_id: &str) -> StoreResult<u64> {
        let [z, h, b] = index(key_id);
        let ids: Vec<String> = self.query(redis::cmd("HKEYS").arg(&h)).await?;
        let mut deleted = 0;
        // In batches: one command's keys, all in the owner's slot.
        for batch in ids.chunks(256) {
            let mut del = redis::cmd("DEL");
            for id in batch {
                del.arg(record_key(key_id, id));
            }
            deleted += self.query::<u64>(&del).await?;
        }
        self.query::<u64>(redis::cmd("DEL").arg(&z).arg(&h).arg(&b))
            .await?;
        Ok(deleted)
    }

    async fn stored_bytes(&self, key_id: &str) -> StoreResult<u64> {
        let [z, h, b] = index(key_id);
        let n: i64 = BYTES
            .key(z)
            .key(h)
            .key(b)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(n.max(0) as u64)
    }
}
