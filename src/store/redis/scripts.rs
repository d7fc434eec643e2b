//! The Lua scripts: the store's API inside Redis. Each has a versioned name (in the
//! comment above it), takes time from Redis (`TIME`), and is idempotent by its id
//! (reservation id, batch number): a retry after a lost reply changes nothing.
//!
//! Amounts are integer micro-USD, exact in Lua's doubles up to 2^53.

use redis::Script;

// The scripts spell the tombstones' retention out; they must say what the trait says.
const _: () = assert!(crate::store::SETTLED_KEEP_SECS == 86_400);

/// The helpers of the policy counters (see `scopes`): a hold's details live in
/// `gw:hold:{TAG}` (hold id → JSON), next to its `gw:rsv:{TAG}`; details of holds that
/// expired unsettled are kept (`gw:kept:{TAG}`, id → when) so a late settle still charges
/// the counters they were on. `bump` moves a counter that still lives (each carries the
/// second it expires at, a while after its period).
macro_rules! counters_fn {
    () => {
        r"
local function tagged(rsv, prefix)
  return prefix .. string.sub(rsv, 8)
end
local function bump(c, delta, at, now)
  if delta ~= 0 and at > now then
    redis.call('INCRBY', c, string.format('%d', delta))
    redis.call('EXPIREAT', c, at)
  end
end
"
    };
}

/// Releases the key's holds that expired by `now` (requests and leases of instances that
/// died: nobody extended them): they go from `quota_reserved`, and a lease's slack (see
/// gw_lease_v3) from `lease_slack`. A hold with details (a request counted on policy
/// counters) leaves its money counters and the in-flight count; its tokens stay counted,
/// and its details are kept for a late settle (pruned after 86400 s).
macro_rules! purge_fn {
    () => {
        concat!(
            counters_fn!(),
            r"
local function purge(key, rsv, rsva, now)
  local expired = redis.call('ZRANGEBYSCORE', rsv, '-inf', now)
  if #expired == 0 then return end
  local live = redis.call('EXISTS', key) == 1
  local hold, kept = tagged(rsv, 'gw:hold:'), tagged(rsv, 'gw:kept:')
  local old = redis.call('ZRANGEBYSCORE', kept, '-inf', now - 86400)
  for _, id in ipairs(old) do redis.call('HDEL', hold, id) end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', kept, '-inf', now - 86400) end
  local sum, slack, flying = 0, 0, 0
  for _, id in ipairs(expired) do
    sum = sum + tonumber(redis.call('HGET', rsva, id) or '0')
    redis.call('HDEL', rsva, id)
    if string.sub(id, 1, 6) == 'lease:' then
      slack = slack + tonumber(redis.call('HGET', rsva, 'slack:' .. id) or '0')
      redis.call('HDEL', rsva, 'slack:' .. id)
    end
    local d = redis.call('HGET', hold, id)
    if d then
      d = cjson.decode(d)
      if d.x == 0 then
        for _, c in ipairs(d.c) do bump(c[1], -tonumber(d.g), c[2], now) end
        if d.f ~= 0 then flying = flying + 1 end
        d.x = 1
        redis.call('HSET', hold, id, cjson.encode(d))
        redis.call('ZADD', kept, now, id)
      end
    end
  end
  redis.call('ZREMRANGEBYSCORE', rsv, '-inf', now)
  if live then
    redis.call('HINCRBY', key, 'quota_reserved', -sum)
    if slack > 0 then redis.call('HINCRBY', key, 'lease_slack', -slack) end
    if flying > 0 then redis.call('HINCRBY', key, 'in_flight', -flying) end
  end
end
"
        )
    };
}

/// The step every script that ends a request or a task runs, once per reservation id:
/// unless `rid` has a tombstone in `done`, releases reservation `rid` of the key (when it
/// has not expired), charges `actual` and writes the tombstone; returns whether it did.
/// A hold with details also settles its counters: the money counters get `actual` in
/// place of the hold (all of `actual` when the hold had expired), the minute's tokens
/// come down to `used` when that is given (>= 0) and less than held, and the request
/// leaves the in-flight count (unless its expiry did already).
/// A Lua function, so the scripts share one text of it. The retention (86400 s) is
/// `SETTLED_KEEP_SECS`; the set itself expires two retentions after its last write.
macro_rules! settle_fn {
    () => {
        concat!(
            counters_fn!(),
            r"
local function settle(key, rsv, rsva, done, rid, actual, used)
  if redis.call('ZSCORE', done, rid) then return false end
  local now = tonumber(redis.call('TIME')[1])
  local live = redis.call('EXISTS', key) == 1
  local amt = redis.call('HGET', rsva, rid)
  actual = tonumber(actual)
  if amt then
    redis.call('HDEL', rsva, rid)
    redis.call('ZREM', rsv, rid)
    if live then redis.call('HINCRBY', key, 'quota_reserved', -tonumber(amt)) end
  end
  if live then redis.call('HINCRBY', key, 'quota_used', string.format('%d', actual)) end
  local hold = tagged(rsv, 'gw:hold:')
  local d = redis.call('HGET', hold, rid)
  if d then
    d = cjson.decode(d)
    local delta = actual
    if d.x == 0 then delta = actual - tonumber(d.g) end
    for _, c in ipairs(d.c) do bump(c[1], delta, c[2], now) end
    local t, u = tonumber(d.t), tonumber(used or '-1')
    if u >= 0 and u < t then bump(d.k[1], u - t, d.k[2], now) end
    if d.x == 0 and d.f ~= 0 and live then redis.call('HINCRBY', key, 'in_flight', -1) end
    redis.call('HDEL', hold, rid)
    redis.call('ZREM', tagged(rsv, 'gw:kept:'), rid)
  end
  redis.call('ZADD', done, now, rid)
  redis.call('ZREMRANGEBYSCORE', done, '-inf', now - 86400)
  redis.call('EXPIRE', done, 172800)
  return true
end
"
        )
    };
}

pub(super) use {counters_fn, settle_fn};

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

// gw_reserve_scopes_v2: a hold on one or more scopes (a key, its group) at once.
// KEYS per scope (8): hash, rsv, rsva, done, day counter, week counter, month counter,
// minute's token counter. ARGV: rid, min, max, tokens, ttl, dry ('1': check, hold
// nothing), scope count, minute; then per scope (5): kind ('key' or 'group'), the group
// the caller expects the key in ('' none), the ends of the day, week and month; last,
// whether the hold is a request in flight ('0': more money for one that already counts:
// neither checked against max_concurrent nor counted, `f = 0` in its details).
// Idempotent by rid: a held rid answers its grant again, a settled one is refused.
// Checks, each over every scope in order (the key's before its group's): the state (key
// exists, enabled, not expired, in the expected group; the group exists and is enabled),
// money (lifetime, then day, week, month budgets against their counters: the grant is
// `min(max, least left)`, refused below `min`), tokens (the minute's plus `tokens` within
// tpm) and requests in flight (within max_concurrent). A key with no limit and no group
// counts nothing beyond its lifetime hold (as gw_reserve_v3 did); every other scope
// holds on its period counters, its minute's tokens and its in-flight count, and writes
// the hold's details (see purge) so its settle and expiry release exactly those.
// When the money a key's request needs is free but for what leases hold beyond their
// instances' requests (their slack), it is refused as `leased` and the key is marked
// wanted for two seconds: every lease then shrinks to what its instance has in flight
// (see gw_lease_v3), and the caller asks again.
// Returns {'ok', grant, counted ('1'/'0')} or {'denied', reason, ''}, then (v2; a retry
// answered from its hold, a refusal of the key's state and a dry run stop at the three)
// where the tightest limits stand over every scope, after the hold when granted: the tpm
// that leaves the fewest tokens in the minute (limit, left) and the money limit that
// leaves the least (its name as in refusals, `key:quota` for the key's lifetime cap,
// limit, left); '' for each the scopes do not have. Counted from the same reads as the
// checks, in the same step: what the answer's x-ratelimit-* headers say.
const RESERVE: &str = concat!(
    purge_fn!(),
    r"
local now = tonumber(redis.call('TIME')[1])
local rid = ARGV[1]
local min, max, tokens, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local dry = ARGV[6] == '1'
local n, minute = tonumber(ARGV[7]), tonumber(ARGV[8])
local S = {}
for s = 1, n do
  local kb, ab = (s - 1) * 8, 8 + (s - 1) * 5
  S[s] = {h = KEYS[kb + 1], rsv = KEYS[kb + 2], rsva = KEYS[kb + 3], done = KEYS[kb + 4],
    cnt = {KEYS[kb + 5], KEYS[kb + 6], KEYS[kb + 7]}, tpm = KEYS[kb + 8],
    kind = ARGV[ab + 1], expect = ARGV[ab + 2],
    ends = {tonumber(ARGV[ab + 3]), tonumber(ARGV[ab + 4]), tonumber(ARGV[ab + 5])}}
end
local inflight = ARGV[9 + n * 5] ~= '0'
for _, c in ipairs(S) do purge(c.h, c.rsv, c.rsva, now) end
for _, c in ipairs(S) do
  if redis.call('ZSCORE', c.done, rid) then return {'denied', 'released', ''} end
end
local held
for _, c in ipairs(S) do
  local a = redis.call('HGET', c.rsva, rid)
  if a and (not held or tonumber(a) < held) then held = tonumber(a) end
end
if held then return {'ok', string.format('%d', held), '1'} end
local names = {'day', 'week', 'month'}
local counted = '0'
for _, c in ipairs(S) do
  local v = redis.call('HMGET', c.h, 'status', 'expires_at', 'quota_limit', 'quota_used',
    'quota_reserved', 'lease_slack', 'group', 'budget_day', 'budget_week', 'budget_month',
    'tpm', 'max_concurrent', 'in_flight')
  c.v = v
  if c.kind == 'key' then
    if not v[1] then return {'denied', 'not_found', ''} end
    if v[1] ~= 'enabled' then return {'denied', 'disabled', ''} end
    if v[2] and now >= tonumber(v[2]) then return {'denied', 'expired', ''} end
    if (v[7] or '') ~= c.expect then return {'denied', 'stale', ''} end
    c.counts = (v[7] or v[8] or v[9] or v[10] or v[11] or v[12]) and true or false
  else
    if v[1] ~= 'enabled' then return {'denied', 'group:group', ''} end
    c.counts = true
  end
  if c.counts then counted = '1' end
end
-- What the answer tells the caller (its x-ratelimit-* headers): the money limit and the
-- tpm that leave the least over every scope, read once here and checked below.
local room = {}
local function tight(k, name, limit, left)
  if not room[k] or left < room[k][3] then room[k] = {name, limit, left} end
end
for _, c in ipairs(S) do
  local v = c.v
  if v[3] then
    c.avail = tonumber(v[3]) - tonumber(v[4] or '0') - tonumber(v[5] or '0')
    tight('m', c.kind .. ':quota', tonumber(v[3]), c.avail)
  end
  c.left = {}
  for i = 1, 3 do
    if v[7 + i] then
      c.left[i] = tonumber(v[7 + i]) - tonumber(redis.call('GET', c.cnt[i]) or '0')
      tight('m', c.kind .. ':' .. names[i], tonumber(v[7 + i]), c.left[i])
    end
  end
  if v[11] then
    c.tokens = tonumber(redis.call('GET', c.tpm) or '0')
    tight('t', c.kind, tonumber(v[11]), tonumber(v[11]) - c.tokens)
  end
end
-- The answer, with the room left once `money` and `toks` are held (0 when refused).
local function answer(status, detail, kept, money, toks)
  local m, t = room.m, room.t
  local function int(x) return string.format('%d', x) end
  return {status, detail, kept, t and int(t[2]) or '', t and int(t[3] - toks) or '',
    m and m[1] or '', m and int(m[2]) or '', m and int(m[3] - money) or ''}
end
local grant = max
for _, c in ipairs(S) do
  local v = c.v
  if v[3] then
    local avail = c.avail
    if avail < min then
      if c.kind ~= 'key' then return answer('denied', 'group:quota', '', 0, 0) end
      if not dry and avail + tonumber(v[6] or '0') >= min then
        redis.call('HSET', c.h, 'wanted_until', now + 2)
        return {'denied', 'leased', ''}
      end
      return answer('denied', 'quota', '', 0, 0)
    end
    if avail < grant then grant = avail end
  end
  for i = 1, 3 do
    if v[7 + i] then
      local left = c.left[i]
      if left < min then return answer('denied', c.kind .. ':' .. names[i], '', 0, 0) end
      if left < grant then grant = left end
    end
  end
end
for _, c in ipairs(S) do
  if c.v[11] and c.tokens + tokens > tonumber(c.v[11]) then
    return answer('denied', c.kind .. ':tpm', '', 0, 0)
  end
end
for _, c in ipairs(S) do
  if inflight and c.v[12] and tonumber(c.v[13] or '0') + 1 > tonumber(c.v[12]) then
    return answer('denied', c.kind .. ':concurrent', '', 0, 0)
  end
end
if dry then return {'ok', string.format('%d', grant), counted} end
for _, c in ipairs(S) do
  redis.call('ZADD', c.rsv, now + ttl, rid)
  redis.call('HSET', c.rsva, rid, string.format('%d', grant))
  redis.call('HINCRBY', c.h, 'quota_reserved', string.format('%d', grant))
  if c.counts then
    local d = {g = string.format('%d', grant), t = string.format('%d', tokens), x = 0, c = {},
      f = inflight and 1 or 0}
    for i = 1, 3 do
      local at = math.max(c.ends[i], now) + 172800
      redis.call('INCRBY', c.cnt[i], string.format('%d', grant))
      redis.call('EXPIREAT', c.cnt[i], at)
      d.c[i] = {c.cnt[i], at}
    end
    local at = math.max(minute * 60 + 180, now + 120)
    redis.call('INCRBY', c.tpm, string.format('%d', tokens))
    redis.call('EXPIREAT', c.tpm, at)
    d.k = {c.tpm, at}
    if inflight then redis.call('HINCRBY', c.h, 'in_flight', 1) end
    if c.kind == 'key' and c.expect ~= '' then d.grp = c.expect end
    redis.call('HSET', tagged(c.rsv, 'gw:hold:'), rid, cjson.encode(d))
  end
end
return answer('ok', string.format('%d', grant), counted, grant, tokens)"
);

// gw_release_v1: KEYS hash, rsv, rsva; ARGV rid. Takes a hold back as if it had never
// been made (its money, tokens and in-flight count), leaving no tombstone: the group's
// half of a reserve whose key refused (Redis Cluster). Does nothing to an id not held.
const RELEASE: &str = concat!(
    counters_fn!(),
    r"
local now = tonumber(redis.call('TIME')[1])
local rid = ARGV[1]
local amt = redis.call('HGET', KEYS[3], rid)
if not amt then return 0 end
local live = redis.call('EXISTS', KEYS[1]) == 1
redis.call('HDEL', KEYS[3], rid)
redis.call('ZREM', KEYS[2], rid)
if live then redis.call('HINCRBY', KEYS[1], 'quota_reserved', -tonumber(amt)) end
local hold = tagged(KEYS[2], 'gw:hold:')
local d = redis.call('HGET', hold, rid)
if d then
  d = cjson.decode(d)
  if d.x == 0 then
    for _, c in ipairs(d.c) do bump(c[1], -tonumber(d.g), c[2], now) end
    if live and d.f ~= 0 then redis.call('HINCRBY', KEYS[1], 'in_flight', -1) end
  end
  bump(d.k[1], -tonumber(d.t), d.k[2], now)
  redis.call('HDEL', hold, rid)
end
return 1"
);

// gw_extend_v2: KEYS rsv; ARGV rid, ttl. Pushes a live hold's expiry, never pulls it in.
// Returns the group the hold is on as well ('' none), whose hold the caller extends too.
const EXTEND: &str = concat!(
    counters_fn!(),
    r"
local now = tonumber(redis.call('TIME')[1])
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return '' end
local e = now + tonumber(ARGV[2])
if e > tonumber(s) then redis.call('ZADD', KEYS[1], e, ARGV[1]) end
local d = redis.call('HGET', tagged(KEYS[1], 'gw:hold:'), ARGV[1])
if d then return cjson.decode(d).grp or '' end
return ''"
);

// The gate of a key's settle: with `gate` '1', a hold that is also on a group is not
// settled here but answers the group's id; the caller settles the group's half first
// (exactly once, by its own tombstone), then the key's with `gate` '0'.
macro_rules! gate_fn {
    () => {
        r"
local function gated(rsv, done, rid, gate)
  if gate ~= '1' or redis.call('ZSCORE', done, rid) then return nil end
  local d = redis.call('HGET', tagged(rsv, 'gw:hold:'), rid)
  if d then return cjson.decode(d).grp end
  return nil
end
"
    };
}

// gw_settle_v3: KEYS hash, rsv, rsva, done; ARGV rid, actual, tokens used (-1: unknown),
// gate. Returns '' when done, or the group to settle first (see gate_fn).
const SETTLE: &str = concat!(
    settle_fn!(),
    gate_fn!(),
    r"
local g = gated(KEYS[2], KEYS[4], ARGV[1], ARGV[4])
if g then return g end
settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
return ''"
);

// gw_settle_log_v3: KEYS key, rsv, rsva, done, log; ARGV rid, actual, usage record, log
// cap, tokens used, gate. The record is appended only by the settle that did the work.
const SETTLE_LOG: &str = concat!(
    settle_fn!(),
    gate_fn!(),
    r"
local g = gated(KEYS[2], KEYS[4], ARGV[1], ARGV[6])
if g then return g end
if settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[5]) then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[4], '*', 'r', ARGV[3])
end
return ''"
);

// gw_standing_v1: KEYS hash, rsv, rsva, day, week, month counters, minute's tokens.
// What the counters stand at, once expired holds have left them: {day, week, month,
// tokens, in flight}, 0 for what does not exist.
const STANDING: &str = concat!(
    purge_fn!(),
    r"
local now = tonumber(redis.call('TIME')[1])
purge(KEYS[1], KEYS[2], KEYS[3], now)
local out = {}
for i = 4, 7 do out[#out + 1] = tonumber(redis.call('GET', KEYS[i]) or '0') end
out[#out + 1] = tonumber(redis.call('HGET', KEYS[1], 'in_flight') or '0')
return out"
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

// gw_rate_block_v2: KEYS counter; ARGV rpm, want. Takes up to `want` of the minute's
// requests for one instance, never past `rpm`; returns {how many (0: the limit is met),
// the minute's count after it} (v1 returned the first alone: the count is what lets an
// instance say how many requests the key has left).
const RATE_BLOCK: &str = r"
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local g = math.min(tonumber(ARGV[2]), tonumber(ARGV[1]) - n)
if g <= 0 then return {0, n} end
redis.call('INCRBY', KEYS[1], g)
if n == 0 then redis.call('EXPIRE', KEYS[1], 120) end
return {g, n + g}";

// gw_lease_v3: KEYS key, rsv, rsva, seqs, log; ARGV lease, seq, charge, records, target,
// floor, ttl, log cap, held. One instance's lease on the key's quota, and what it settled since
// its last call, in one step:
// 1. the batch numbered `seq` (0: none), once per lease: `charge` moves from the lease to
//    `quota_used` (all of it is charged even if the lease is gone: the money was spent),
//    the records (a JSON array, or '') are appended as one stream entry, and `seq` is
//    remembered, so a batch retried after a lost reply changes nothing;
// 2. the lease is resized to `target`, but never above a quarter of the money nobody
//    else holds (nothing while another instance wants it, see gw_reserve_scopes_v1) and never
//    below `floor`, the most the instance may have handed out of it meanwhile (unless
//    the money is gone); it expires `ttl` seconds on, unless this is called again. What
//    it holds beyond what the instance's requests hold (`held`) is its slack, summed
//    over leases in `lease_slack`: money a request elsewhere can have by asking.
// A key with a policy limit or a group is never leased (its requests reserve by script,
// against every counter): its lease shrinks to the floor and the status answers
// `policy`, so the instance drains it and gives it back.
// Returns {status ('' when the key is gone), lease, batch applied (0/1), seconds the key
// stays valid (-1: no expiry), limited (0/1), wanted (0/1), and (v3) the key's cap and the
// money nobody holds under it ('' for a key without a cap): what the answers served from
// the lease tell their callers of the key's budget}.
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
local k = redis.call('HMGET', KEYS[1], 'status', 'expires_at', 'quota_limit', 'quota_used', 'quota_reserved', 'wanted_until',
  'group', 'budget_day', 'budget_week', 'budget_month', 'tpm', 'max_concurrent')
local policy = (k[7] or k[8] or k[9] or k[10] or k[11] or k[12]) and true or false
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
    if policy then new = math.max(math.min(floor, room), 0) end
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
local limited, quota, free = 0, '', ''
if k[3] then
  limited = 1
  quota = k[3]
  free = string.format('%d', tonumber(k[3]) - tonumber(k[4] or '0') - tonumber(k[5] or '0') - (new - cur))
end
local status = k[1] or ''
if policy and k[1] then status = 'policy' end
return {status, tostring(new), applied, left, limited, wanted, quota, free}"
);

/// Every script, hashed once.
pub struct Scripts {
    pub create: Script,
    pub update: Script,
    pub reserve: Script,
    pub release: Script,
    pub standing: Script,
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
            release: Script::new(RELEASE),
            standing: Script::new(STANDING),
            extend: Script::new(EXTEND),
            settle: Script::new(SETTLE),
            settle_log: Script::new(SETTLE_LOG),
            log_once: Script::new(LOG_ONCE),
            rate_block: Script::new(RATE_BLOCK),
            lease: Script::new(LEASE),
        }
    }
}
