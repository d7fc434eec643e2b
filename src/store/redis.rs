//! The Redis backend: several gateway instances share one Redis (or Redis Cluster).
//!
//! Every check-and-change is one Lua script: one round trip, atomic, so concurrent
//! requests on any number of instances can never spend past a key's cap. Everything one
//! script touches carries the key's id as a hash tag (`{ID}`), so it lives in one
//! Cluster slot. Layout:
//! - `gw:key:{ID}`  hash: the record, plus `quota_used` and `quota_reserved`
//! - `gw:rsv:{ID}`  zset: reservation id → expiry (unix seconds)
//! - `gw:rsva:{ID}` hash: reservation id → amount
//! - `gw:done:{ID}` zset: settled (or released) reservation id → when (unix seconds): the
//!   tombstones that make settling exactly once; pruned after [`SETTLED_KEEP_SECS`], and
//!   the whole set expires with the key's last settle
//! - `gw:rl:{ID}:<minute>` counter with a TTL
//! - `gw:log:{ID}`  stream of usage records, capped
//! - `gw:keys`      set of all ids (for listing; maintained after the per-key script)
//! - video tasks: `gw:task:{ID}:<task_id>` and `gw:tasks:due` (see `redis_tasks.rs`)
//!
//! Time is Redis's own (`TIME` inside the scripts): instances whose clocks disagree still
//! agree on when a reservation expires. (Redis 5 or later: scripts replicate their
//! effects, so `TIME` before a write is allowed.)

use super::{
    KeyPatch, KeyRecord, KeyStatus, Micros, Reservation, ReserveDenied, Store, StoreError,
    StoreResult, UsageRecord, SETTLED_KEEP_SECS,
};
use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, Script, Value};
use std::collections::HashMap;
use std::time::Duration;

/// The step every script that ends a request or a task runs, once per reservation id:
/// unless `rid` has a tombstone in `done`, releases reservation `rid` of the key (when it
/// has not expired), charges `actual` and writes the tombstone; returns whether it did.
/// A Lua function, so the scripts share one text of it. The retention (86400 s) is
/// [`SETTLED_KEEP_SECS`]; the set itself expires two retentions after its last write.
macro_rules! settle_fn {
    () => {
        r"
local function settle(key, rsv, rsva, done, rid, actual)
  if redis.call('ZSCORE', done, rid) then return false end
  local now = tonumber(redis.call('TIME')[1])
  local live = redis.call('EXISTS', key) == 1
  local amt = redis.call('HGET', rsva, rid)
  if amt then
    redis.call('HDEL', rsva, rid)
    redis.call('ZREM', rsv, rid)
    if live then redis.call('HINCRBY', key, 'quota_reserved', -tonumber(amt)) end
  end
  if live then redis.call('HINCRBY', key, 'quota_used', actual) end
  redis.call('ZADD', done, now, rid)
  redis.call('ZREMRANGEBYSCORE', done, '-inf', now - 86400)
  redis.call('EXPIRE', done, 172800)
  return true
end
"
    };
}

#[path = "redis_tasks.rs"]
mod tasks;
#[path = "redis_usage.rs"]
mod usage;

// The scripts spell the tombstones' retention out; they must say what the trait says.
const _: () = assert!(SETTLED_KEEP_SECS == 86_400);

const TIMEOUT: Duration = Duration::from_secs(2);
const LOG_MAX: usize = 10_000;
const KEYS_SET: &str = "gw:keys";

// gw_create_v1: refuses an existing id.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1";

// gw_update_v1: sets only the patched fields, never a read-modify-write across trips.
const UPDATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[1], ARGV[i])
  else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return redis.call('HGETALL', KEYS[1])";

// gw_reserve_v2: KEYS key, rsv, rsva, done; ARGV rid, min, max, ttl. Idempotent by rid:
// a held rid answers its grant again, a settled one is refused.
const RESERVE: &str = r"
local now = tonumber(redis.call('TIME')[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #expired > 0 then
  local sum = 0
  for _, id in ipairs(expired) do
    sum = sum + tonumber(redis.call('HGET', KEYS[3], id) or '0')
    redis.call('HDEL', KEYS[3], id)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[1], 'quota_reserved', -sum) end
end
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return {'denied', 'released'} end
local held = redis.call('HGET', KEYS[3], ARGV[1])
if held then return {'ok', held} end
local k = redis.call('HMGET', KEYS[1], 'status', 'expires_at', 'quota_limit', 'quota_used', 'quota_reserved')
if not k[1] then return {'denied', 'not_found'} end
if k[1] ~= 'enabled' then return {'denied', 'disabled'} end
if k[2] and now >= tonumber(k[2]) then return {'denied', 'expired'} end
local max = tonumber(ARGV[3])
local grant = max
if k[3] then
  local avail = tonumber(k[3]) - tonumber(k[4] or '0') - tonumber(k[5] or '0')
  if avail < tonumber(ARGV[2]) then return {'denied', 'quota'} end
  if avail < max then grant = avail end
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], grant)
redis.call('HINCRBY', KEYS[1], 'quota_reserved', grant)
return {'ok', tostring(grant)}";

// gw_extend_v1: KEYS rsv; ARGV rid, ttl. Pushes a live hold's expiry, never pulls it in.
const EXTEND: &str = r"
local now = tonumber(redis.call('TIME')[1])
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return 0 end
local e = now + tonumber(ARGV[2])
if e > tonumber(s) then redis.call('ZADD', KEYS[1], e, ARGV[1]) end
return 1";

// gw_settle_v2: KEYS key, rsv, rsva, done; ARGV rid, actual.
const SETTLE: &str = concat!(
    settle_fn!(),
    "settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])\nreturn 1"
);

// gw_settle_log_v2: KEYS key, rsv, rsva, done, log; ARGV rid, actual, usage record, log
// cap. The record is appended only by the settle that did the work.
const SETTLE_LOG: &str = concat!(
    settle_fn!(),
    "if settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2]) then\n",
    "  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[4], '*', 'r', ARGV[3])\n",
    "end\nreturn 1"
);

// gw_log_once_v1: KEYS done, log (of the record's key); ARGV marker, usage record, log cap.
// The record of a settle whose reservation is another key's: appended once per marker.
const LOG_ONCE: &str = r"
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local now = tonumber(redis.call('TIME')[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'r', ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('EXPIRE', KEYS[1], 172800)
return 1";

// gw_rate_v1: KEYS counter; ARGV rpm.
const RATE: &str = r"
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], 120) end
if n > tonumber(ARGV[1]) then return 0 end
return 1";

/// One node or a cluster, behind one connection type.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

pub struct RedisStore {
    conn: Conn,
    create: Script,
    update: Script,
    reserve: Script,
    extend: Script,
    settle: Script,
    settle_log: Script,
    log_once: Script,
    rate: Script,
}

fn map_err(e: RedisError) -> StoreError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Internal(e.to_string())
    }
}

fn key(id: &str) -> String {
    format!("gw:key:{{{id}}}")
}
fn rsv(id: &str) -> String {
    format!("gw:rsv:{{{id}}}")
}
fn rsva(id: &str) -> String {
    format!("gw:rsva:{{{id}}}")
}
fn log(id: &str) -> String {
    format!("gw:log:{{{id}}}")
}
fn done(id: &str) -> String {
    format!("gw:done:{{{id}}}")
}

fn opt_str<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn list_json(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

/// The record as hash fields; empty strings stand for "none" (and are deleted).
fn fields(r: &KeyRecord) -> Vec<(&'static str, String)> {
    vec![
        ("id", r.id.clone()),
        ("hash", r.hash.clone()),
        ("display", r.display.clone()),
        ("name", r.name.clone()),
        ("status", r.status.as_str().into()),
        ("created_at", r.created_at.to_string()),
        ("expires_at", opt_str(r.expires_at)),
        ("models", list_json(&r.models)),
        ("allow_ips", list_json(&r.allow_ips)),
        ("rpm", opt_str(r.rpm)),
        ("quota_limit", opt_str(r.quota_limit)),
        ("quota_used", r.quota_used.to_string()),
    ]
}

fn patch_fields(p: &KeyPatch) -> Vec<(&'static str, String)> {
    let mut f = Vec::new();
    if let Some(v) = &p.name {
        f.push(("name", v.clone()));
    }
    if let Some(v) = p.status {
        f.push(("status", v.as_str().into()));
    }
    if let Some(v) = p.expires_at {
        f.push(("expires_at", opt_str(v)));
    }
    if let Some(v) = &p.models {
        f.push(("models", list_json(v)));
    }
    if let Some(v) = &p.allow_ips {
        f.push(("allow_ips", list_json(v)));
    }
    if let Some(v) = p.rpm {
        f.push(("rpm", opt_str(v)));
    }
    if let Some(v) = p.quota_limit {
        f.push(("quota_limit", opt_str(v)));
    }
    f
}

fn record(h: &HashMap<String, String>) -> StoreResult<KeyRecord> {
    let get = |k: &str| h.get(k).filter(|v| !v.is_empty());
    let num = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
    let bad = || StoreError::Internal("malformed key record".into());
    Ok(KeyRecord {
        id: get("id").ok_or_else(bad)?.clone(),
        hash: get("hash").ok_or_else(bad)?.clone(),
        display: get("display").cloned().unwrap_or_default(),
        name: h.get("name").cloned().unwrap_or_default(),
        status: get("status")
            .and_then(|s| KeyStatus::parse(s))
            .unwrap_or(KeyStatus::Disabled),
        created_at: num("created_at").unwrap_or(0),
        expires_at: num("expires_at"),
        models: get("models")
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default(),
        allow_ips: get("allow_ips")
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default(),
        rpm: get("rpm").and_then(|v| v.parse().ok()),
        quota_limit: num("quota_limit"),
        quota_used: num("quota_used").unwrap_or(0),
    })
}

impl RedisStore {
    /// Connects; fails with `Unavailable` if Redis cannot be reached now. Afterwards a
    /// lost connection fails calls with `Unavailable` and is re-established by itself.
    pub async fn connect(urls: &[String], cluster: bool) -> StoreResult<RedisStore> {
        let conn = if cluster {
            let client = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
                .connection_timeout(TIMEOUT)
                .response_timeout(TIMEOUT)
                .build()
                .map_err(map_err)?;
            Conn::Cluster(client.get_async_connection().await.map_err(map_err)?)
        } else {
            let url = urls
                .first()
                .ok_or_else(|| StoreError::Internal("no Redis URL".into()))?;
            let client = redis::Client::open(url.as_str()).map_err(map_err)?;
            let cfg = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(TIMEOUT))
                .set_response_timeout(Some(TIMEOUT))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_secs(1));
            Conn::Single(
                ConnectionManager::new_with_config(client, cfg)
                    .await
                    .map_err(map_err)?,
            )
        };
        Ok(RedisStore {
            conn,
            create: Script::new(CREATE),
            update: Script::new(UPDATE),
            reserve: Script::new(RESERVE),
            extend: Script::new(EXTEND),
            settle: Script::new(SETTLE),
            settle_log: Script::new(SETTLE_LOG),
            log_once: Script::new(LOG_ONCE),
            rate: Script::new(RATE),
        })
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> StoreResult<T> {
        let mut c = self.conn.clone();
        cmd.query_async(&mut c).await.map_err(map_err)
    }

    async fn hgetall(&self, id: &str) -> StoreResult<Option<KeyRecord>> {
        let h: HashMap<String, String> = self.query(redis::cmd("HGETALL").arg(key(id))).await?;
        if h.is_empty() {
            return Ok(None);
        }
        record(&h).map(Some)
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn create_key(&self, rec: &KeyRecord) -> StoreResult<()> {
        let mut inv = self.create.key(key(&rec.id));
        for (f, v) in fields(rec) {
            if !v.is_empty() {
                inv.arg(f).arg(v);
            }
        }
        let created: i64 = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        if created == 0 {
            return Err(StoreError::Conflict(format!("key {} exists", rec.id)));
        }
        self.query::<()>(redis::cmd("SADD").arg(KEYS_SET).arg(&rec.id))
            .await
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<KeyRecord>> {
        self.hgetall(id).await
    }

    async fn list_keys(&self) -> StoreResult<Vec<KeyRecord>> {
        let ids: Vec<String> = self.query(redis::cmd("SMEMBERS").arg(KEYS_SET)).await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(r) = self.hgetall(&id).await? {
                out.push(r);
            }
        }
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    async fn update_key(&self, id: &str, patch: &KeyPatch) -> StoreResult<Option<KeyRecord>> {
        let mut inv = self.update.key(key(id));
        for (f, v) in patch_fields(patch) {
            inv.arg(f).arg(v);
        }
        let v: Option<HashMap<String, String>> = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        match v {
            Some(h) if !h.is_empty() => record(&h).map(Some),
            _ => Ok(None),
        }
    }

    async fn delete_key(&self, id: &str) -> StoreResult<bool> {
        let n: i64 = self
            .query(
                redis::cmd("DEL")
                    .arg(key(id))
                    .arg(rsv(id))
                    .arg(rsva(id))
                    .arg(done(id)),
            )
            .await?;
        self.query::<()>(redis::cmd("SREM").arg(KEYS_SET).arg(id))
            .await?;
        Ok(n > 0)
    }

    async fn reserve(
        &self,
        key_id: &str,
        reservation_id: &str,
        min: Micros,
        max: Micros,
        ttl_secs: u64,
    ) -> StoreResult<Result<Reservation, ReserveDenied>> {
        let (status, detail): (String, String) = self
            .reserve
            .key(key(key_id))
            .key(rsv(key_id))
            .key(rsva(key_id))
            .key(done(key_id))
            .arg(reservation_id)
            .arg(min)
            .arg(max)
            .arg(ttl_secs.min(i64::MAX as u64 / 2))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        if status == "ok" {
            let amount = detail
                .parse::<f64>()
                .map_err(|_| StoreError::Internal(format!("bad grant {detail}")))?
                as Micros;
            return Ok(Ok(Reservation {
                id: reservation_id.to_string(),
                key_id: key_id.to_string(),
                amount,
            }));
        }
        Ok(Err(match detail.as_str() {
            "not_found" => ReserveDenied::NotFound,
            "disabled" => ReserveDenied::Disabled,
            "expired" => ReserveDenied::Expired,
            "released" => ReserveDenied::Released,
            _ => ReserveDenied::QuotaExhausted,
        }))
    }

    async fn extend(&self, r: &Reservation, ttl_secs: u64) -> StoreResult<()> {
        let _: i64 = self
            .extend
            .key(rsv(&r.key_id))
            .arg(&r.id)
            .arg(ttl_secs.min(i64::MAX as u64 / 2))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn settle(&self, r: &Reservation, actual: Micros) -> StoreResult<()> {
        let _: i64 = self
            .settle
            .key(key(&r.key_id))
            .key(rsv(&r.key_id))
            .key(rsva(&r.key_id))
            .key(done(&r.key_id))
            .arg(&r.id)
            .arg(actual.max(0))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn settle_logged(
        &self,
        r: &Reservation,
        actual: Micros,
        usage: &UsageRecord,
    ) -> StoreResult<()> {
        let text = serde_json::to_string(usage).map_err(|e| StoreError::Internal(e.to_string()))?;
        if usage.key_id != r.key_id {
            // Another key's log lives in another slot: two steps, each once. The record's
            // tombstone lives with that key's, under a name no reservation id takes.
            self.settle(r, actual).await?;
            let _: i64 = self
                .log_once
                .key(done(&usage.key_id))
                .key(log(&usage.key_id))
                .arg(format!("\u{0}log {} {}", r.key_id, r.id))
                .arg(text)
                .arg(LOG_MAX)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(map_err)?;
            return Ok(());
        }
        let _: i64 = self
            .settle_log
            .key(key(&r.key_id))
            .key(rsv(&r.key_id))
            .key(rsva(&r.key_id))
            .key(done(&r.key_id))
            .key(log(&r.key_id))
            .arg(&r.id)
            .arg(actual.max(0))
            .arg(text)
            .arg(LOG_MAX)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn rate_hit(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<bool> {
        let counter = format!("gw:rl:{{{key_id}}}:{}", now_ms.div_euclid(60_000));
        let ok: i64 = self
            .rate
            .key(counter)
            .arg(rpm)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        Ok(ok == 1)
    }

    async fn append_usage(&self, rec: &UsageRecord) -> StoreResult<()> {
        let text = serde_json::to_string(rec).map_err(|e| StoreError::Internal(e.to_string()))?;
        self.query::<String>(
            redis::cmd("XADD")
                .arg(log(&rec.key_id))
                .arg("MAXLEN")
                .arg("~")
                .arg(LOG_MAX)
                .arg("*")
                .arg("r")
                .arg(text),
        )
        .await
        .map(|_| ())
    }

    async fn recent_usage(&self, key_id: &str, limit: usize) -> StoreResult<Vec<UsageRecord>> {
        let entries: Vec<(String, Vec<(String, String)>)> = self
            .query(
                redis::cmd("XREVRANGE")
                    .arg(log(key_id))
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(limit),
            )
            .await?;
        entries
            .into_iter()
            .filter_map(|(_, f)| f.into_iter().find(|(k, _)| k == "r").map(|(_, v)| v))
            .map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Internal(e.to_string())))
            .collect()
    }

    async fn ping(&self) -> StoreResult<()> {
        self.query::<String>(&redis::cmd("PING")).await.map(|_| ())
    }

    fn usage_query(&self) -> Option<&dyn super::usage_query::UsageQuery> {
        Some(self)
    }
}
