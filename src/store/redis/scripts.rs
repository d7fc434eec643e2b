//! The Lua scripts: the store's API inside Redis. Each has a versioned name (in the
//! comment above it), takes time from Redis (`TIME`), and is idempotent by its id
//! (reservation id, batch number): a retry after a lost reply changes nothing.
//!
//! Amounts are integer micro-USD, exact in Lua's doubles up to 2^53.

use redis::Script;

// The scripts spell the tombstones' retention out; they must say what the trait says.
const _: () = assert!(crate::store::SETTLED_KEEP_SECS == 86_400);

/// Releases the key's holds that expired by `now` (requests and leases of instances that
/// died: nobody extended them): they go from `quota_reserved`, and a lease's slack (see
/// gw_lease_v1) from `lease_slack`.
macro_rules! purge_fn {
    () => {
        r"
local function purge(key, rsv, rsva, now)
  local expired = redis.call('ZRANGEBYSCORE', rsv, '-inf', now)
  if #expired == 0 then return end
  local sum, slack = 0, 0
  for _, id in ipairs(expired) do
    sum = sum + tonumber(redis.call('HGET', rsva, id) or '0')
    redis.call('HDEL', rsva, id)
    if string.sub(id, 1, 6) == 'lease:' then
      slack = slack + tonumber(redis.call('HGET', rsva, 'slack:' .. id) or '0')
      redis.call('HDEL', rsva, 'slack:' .. id)
    end
  end
  redis.call('ZREMRANGEBYSCORE', rsv, '-inf', now)
  if redis.call('EXISTS', key) == 1 then
    redis.call('HINCRBY', key, 'quota_reserved', -sum)
    if slack > 0 then redis.call('HINCRBY', key, 'lease_slack', -slack) end
  end
end
"
    };
}

/// The step every script that ends a request or a task runs, once per reservation id:
/// unless `rid` has a tombstone in `done`, releases reservation `rid` of the key (when it
/// has not expired), charges `actual` and writes the tombstone; returns whether it did.
/// A Lua function, so the scripts share one text of it. The retention (86400 s) is
/// `SETTLED_KEEP_SECS`; the set itself expires two retentions after its last write.
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

pub(super) use settle_fn;

// gw_create_v1: refuses an existing id.
pub const CREATE: &str = r"
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

// gw_reserve_v3: KEYS key, rsv, rsva, done; ARGV rid, min, max, ttl. Idempotent by rid:
// a held rid answers its grant again, a settled one is refused. When the money a request
// needs is free but for what leases hold beyond their instances' requests (their slack),
// it is refused as `leased` and the key is marked wanted for two seconds: every lease
// then shrinks to what its instance has in flight (see gw_lease_v1), and the caller asks
// again.
const RESERVE: &str = concat!(
    purge_fn!(),
    r"
local now = tonumber(redis.call('TIME')[1])
purge(KEYS[1], KEYS[2], KEYS[3], now)
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return {'denied', 'released'} end
local held = redis.call('HGET', KEYS[3], ARGV[1])
if held then return {'ok', held} end
local k = redis.call('HMGET', KEYS[1], 'status', 'expires_at', 'quota_limit', 'quota_used', 'quota_reserved', 'lease_slack')
if not k[1] then return {'denied', 'not_found'} end
if k[1] ~= 'enabled' then return {'denied', 'disabled'} end
if k[2] and now >= tonumber(k[2]) then return {'denied', 'expired'} end
local max = tonumber(ARGV[3])
local grant = max
if k[3] then
  local avail = tonumber(k[3]) - tonumber(k[4] or '0') - tonumber(k[5] or '0')
  if avail < tonumber(ARGV[2]) then
    if avail + tonumber(k[6] or '0') >= tonumber(ARGV[2]) then
      redis.call('HSET', KEYS[1], 'wanted_until', now + 2)
      return {'denied', 'leased'}
    end
    return {'denied', 'quota'}
  end
  if avail < max then grant = avail end
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], grant)
redis.call('HINCRBY', KEYS[1], 'quota_reserved', grant)
return {'ok', tostring(grant)}"
);

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

// gw_rate_block_v1: KEYS counter; ARGV rpm, want. Takes up to `want` of the minute's
// requests for one instance, never past `rpm`; returns how many (0: the limit is met).
const RATE_BLOCK: &str = r"
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local g = math.min(tonumber(ARGV[2]), tonumber(ARGV[1]) - n)
if g <= 0 then return 0 end
redis.call('INCRBY', KEYS[1], g)
if n == 0 then redis.call('EXPIRE', KEYS[1], 120) end
return g";

// gw_lease_v1: KEYS key, rsv, rsva, seqs, log; ARGV lease, seq, charge, records, target,
// floor, ttl, log cap, held. One instance's lease on the key's quota, and what it settled since
// its last call, in one step:
// 1. the batch numbered `seq` (0: none), once per lease: `charge` moves from the lease to
//    `quota_used` (all of it is charged even if the lease is gone: the money was spent),
//    the records (a JSON array, or '') are appended as one stream entry, and `seq` is
//    remembered, so a batch retried after a lost reply changes nothing;
// 2. the lease is resized to `target`, but never above a quarter of the money nobody
//    else holds (nothing while another instance wants it, see gw_reserve_v3) and never
//    below `floor`, the most the instance may have handed out of it meanwhile (unless
//    the money is gone); it expires `ttl` seconds on, unless this is called again. What
//    it holds beyond what the instance's requests hold (`held`) is its slack, summed
//    over leases in `lease_slack`: money a request elsewhere can have by asking.
// Returns {status ('' when the key is gone), lease, batch applied (0/1), seconds the key
// stays valid (-1: no expiry), limited (0/1), wanted (0/1)}.
const LEASE: &str = concat!(
    purge_fn!(),
    r"
local now = tonumber(redis.call('TIME')[1])
local lease = ARGV[1]
local live = redis.call('EXISTS', KEYS[1]) == 1
purge(KEYS[1], KEYS[2], KEYS[3], now)
local seq = tonumber(ARGV[2])
local applied = 0
if seq > 0 and seq > tonumber(redis.call('HGET', KEYS[4], lease) or '0') then
  local charge = tonumber(ARGV[3])
  local cur = tonumber(redis.call('HGET', KEYS[3], lease) or '0')
  local take = math.min(cur, charge)
  if take > 0 then
    redis.call('HSET', KEYS[3], lease, cur - take)
    if live then redis.call('HINCRBY', KEYS[1], 'quota_reserved', -take) end
  end
  if live and charge > 0 then redis.call('HINCRBY', KEYS[1], 'quota_used', charge) end
  if ARGV[4] ~= '' then redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[8], '*', 'b', ARGV[4]) end
  redis.call('HSET', KEYS[4], lease, seq)
  redis.call('EXPIRE', KEYS[4], 172800)
  applied = 1
end
local k = redis.call('HMGET', KEYS[1], 'status', 'expires_at', 'quota_limit', 'quota_used', 'quota_reserved', 'wanted_until')
local cur = tonumber(redis.call('HGET', KEYS[3], lease) or '0')
local floor = tonumber(ARGV[6])
local new, left, wanted = 0, -1, 0
if k[6] and tonumber(k[6]) > now then wanted = 1 end
if k[1] then
  if k[2] then left = math.max(0, tonumber(k[2]) - now) end
  if k[3] then
    local room = tonumber(k[3]) - tonumber(k[4] or '0') - tonumber(k[5] or '0') + cur
    local share = math.floor(room / 4)
    if wanted == 1 then share = 0 end
    new = math.min(tonumber(ARGV[5]), share)
    new = math.max(new, floor)
    new = math.max(math.min(new, room), 0)
  end
end
local slack = math.max(new - tonumber(ARGV[9]), 0)
local old = tonumber(redis.call('HGET', KEYS[3], 'slack:' .. lease) or '0')
if new > 0 then
  redis.call('HSET', KEYS[3], lease, new, 'slack:' .. lease, slack)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), lease)
else
  slack = 0
  redis.call('HDEL', KEYS[3], lease, 'slack:' .. lease)
  redis.call('ZREM', KEYS[2], lease)
end
if live then
  if new ~= cur then redis.call('HINCRBY', KEYS[1], 'quota_reserved', new - cur) end
  if slack ~= old then redis.call('HINCRBY', KEYS[1], 'lease_slack', slack - old) end
end
local limited = 0
if k[3] then limited = 1 end
return {k[1] or '', tostring(new), applied, left, limited, wanted}"
);

/// Every script, hashed once.
pub struct Scripts {
    pub create: Script,
    pub update: Script,
    pub reserve: Script,
    pub extend: Script,
    pub settle: Script,
    pub settle_log: Script,
    pub log_once: Script,
    pub rate_block: Script,
    pub lease: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            create: Script::new(CREATE),
            update: Script::new(UPDATE),
            reserve: Script::new(RESERVE),
            extend: Script::new(EXTEND),
            settle: Script::new(SETTLE),
            settle_log: Script::new(SETTLE_LOG),
            log_once: Script::new(LOG_ONCE),
            rate_block: Script::new(RATE_BLOCK),
            lease: Script::new(LEASE),
        }
    }
}
