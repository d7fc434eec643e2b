//! Durable state: API keys, quota, rate counters, usage records.
//!
//! One [`Store`] trait, two backends with the same semantics:
//! - [`embedded`]: single node, no external service, durable on local disk (the default);
//! - [`redis`]: shared by any number of gateway instances; every check-and-change is one
//!   Lua script, so concurrent requests on all instances can never spend past a key's cap.
//!
//! [`tasks`] adds asynchronous video tasks ([`TaskStore`], a supertrait of [`Store`]).
//!
//! This module depends on no other module of the crate: the rest of the gateway talks to
//! state only through these types.

pub mod bill;
pub mod embedded;
pub mod policy;
mod recent;
pub mod redis;
pub mod responses;
pub mod tasks;
pub mod usage_query;

pub use policy::{
    Ask, GroupAsk, GroupPatch, GroupRecord, Headroom, Left, Limit, LimitKind, PeriodKind, Periods,
    Policy, PolicyPatch, RateCount, Scope, Standing,
};
pub use tasks::{TaskError, TaskRecord, TaskRef, TaskResult, TaskStatus, TaskStore};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Money, as an integer count of micro-USD (1 USD = 1_000_000). Never a float.
pub type Micros = i64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStatus {
    Enabled,
    Disabled,
}

impl KeyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyStatus::Enabled => "enabled",
            KeyStatus::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<KeyStatus> {
        match s {
            "enabled" => Some(KeyStatus::Enabled),
            "disabled" => Some(KeyStatus::Disabled),
            _ => None,
        }
    }
}

/// A key as stored. The secret itself is never stored: only `hash` (hex SHA-256 of the
/// full key). `id` is public and derived from the hash (see `auth::key_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub id: String,
    /// Lowercase hex SHA-256 of the full `sk-...` key.
    pub hash: String,
    /// `sk-abc…wxyz`, fixed at creation.
    pub display: String,
    pub name: String,
    pub status: KeyStatus,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds; `None` = never expires.
    pub expires_at: Option<i64>,
    /// Model whitelist; empty = every model.
    pub models: Vec<String>,
    /// CIDRs or single addresses, already validated; empty = any address.
    pub allow_ips: Vec<String>,
    /// Requests per minute; `None` = unlimited.
    pub rpm: Option<u32>,
    /// Spend cap; `None` = unlimited.
    pub quota_limit: Option<Micros>,
    /// Settled spend. Reservations in flight are not included.
    pub quota_used: Micros,
    /// The group whose limits the key's requests must fit as well; `None` = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Period budgets, tpm, concurrency and the time zone of the periods.
    #[serde(default)]
    pub policy: Policy,
}

#[cfg(test)]
impl KeyRecord {
    /// An enabled key for unit tests: this id, hash and cap; no limits, group or policy.
    pub(crate) fn for_tests(id: &str, hash: String, quota_limit: Option<Micros>) -> KeyRecord {
        KeyRecord {
            id: id.into(),
            hash,
            display: "sk-a…b".into(),
            name: "t".into(),
            status: KeyStatus::Enabled,
            created_at: 0,
            expires_at: None,
            models: vec![],
            allow_ips: vec![],
            rpm: None,
            quota_limit,
            quota_used: 0,
            group: None,
            policy: Default::default(),
        }
    }
}

/// A partial update. `None` leaves a field as it is; `Some(None)` clears an optional field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPatch {
    pub name: Option<String>,
    pub status: Option<KeyStatus>,
    pub expires_at: Option<Option<i64>>,
    pub models: Option<Vec<String>>,
    pub allow_ips: Option<Vec<String>>,
    pub rpm: Option<Option<u32>>,
    pub quota_limit: Option<Option<Micros>>,
    pub group: Option<Option<String>>,
    pub policy: PolicyPatch,
}

impl KeyPatch {
    /// Applies the patch to a record (used by both backends so they agree exactly).
    pub fn apply(&self, rec: &mut KeyRecord) {
        if let Some(v) = &self.name {
            rec.name = v.clone();
        }
        if let Some(v) = self.status {
            rec.status = v;
        }
        if let Some(v) = self.expires_at {
            rec.expires_at = v;
        }
        if let Some(v) = &self.models {
            rec.models = v.clone();
        }
        if let Some(v) = &self.allow_ips {
            rec.allow_ips = v.clone();
        }
        if let Some(v) = self.rpm {
            rec.rpm = v;
        }
        if let Some(v) = self.quota_limit {
            rec.quota_limit = v;
        }
        if let Some(v) = &self.group {
            rec.group = v.clone();
        }
        self.policy.apply(&mut rec.policy);
    }
}

/// Money held for one request between `reserve` and `settle`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// Unique per reservation (the request id is a good choice).
    pub id: String,
    pub key_id: String,
    /// What was granted; may be less than the `max` asked for.
    pub amount: Micros,
}

/// Why a reservation was not granted. Checked atomically with the grant itself, so a
/// key disabled or expired a moment ago cannot reserve on any instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveDenied {
    NotFound,
    Disabled,
    Expired,
    /// `quota_limit - quota_used - reserved < min`.
    QuotaExhausted,
    /// This reservation id was already settled or released: an id holds money once. A
    /// `reserve` retried after its first attempt was given up (and released) lands here.
    Released,
    /// A limit of the key's policy or of its group (see [`policy::Limit::param`]).
    Limit(Limit),
    /// The key's group is not the one the [`Ask`] names: read the key again and ask anew.
    Stale,
}

/// How long a settled reservation id is remembered (its tombstone): far longer than any
/// retry of its settle or of its reserve runs, then pruned.
pub const SETTLED_KEEP_SECS: i64 = 86_400;

/// One record per request (spec 7.1: served by `GET /api/log/token`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub request_id: String,
    /// Unix milliseconds when the request arrived.
    pub time_ms: i64,
    pub key_id: String,
    /// The client-facing path, e.g. `/v1/chat/completions`.
    pub endpoint: String,
    /// The model name the caller used.
    pub model: String,
    /// The channel's configured name (never its host or key).
    pub channel: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost: Micros,
    /// The cost was counted by the gateway because the upstream reported no usage.
    #[serde(default)]
    pub estimated: bool,
    /// Cost the upstream reported beyond the grant: recorded, never charged.
    #[serde(default)]
    pub overrun: Micros,
    /// What the provider bills for the request at the channel's prices, before the key's
    /// multiplier (`cost` is what the key was charged). `None` in records older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_cost: Option<Micros>,
    /// The provider cost line by line: units and rate of each kind of usage.
    #[serde(default, skip_serializing_if = "bill::Bill::is_empty")]
    pub bill: bill::Bill,
    /// The key's (or its group's) price multiplier, in parts per million; `None` = 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier_ppm: Option<u64>,
    /// HTTP status returned to the client.
    pub status: u16,
    pub latency_ms: u64,
    pub stream: bool,
    /// The group the request counted against, if its key is in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// A store failure: what failed (its `Display`), and the error beneath it (its
/// `source()`), each said once.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreError {
    /// The backing service cannot be reached right now (Redis down, connection lost).
    /// The request fails with 503; the store reconnects by itself.
    Unavailable(Cause),
    /// A record with the same id already exists.
    Conflict(Cause),
    /// Anything else: corrupt data, disk errors. The request fails with 500.
    Internal(Cause),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(c) => write!(f, "store unavailable: {c}"),
            StoreError::Conflict(c) => write!(f, "store conflict: {c}"),
            StoreError::Internal(c) => write!(f, "store error: {c}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let (StoreError::Unavailable(c) | StoreError::Conflict(c) | StoreError::Internal(c)) = self;
        c.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl StoreError {
    pub fn unavailable(what: impl Into<String>) -> StoreError {
        StoreError::Unavailable(Cause::new(what))
    }

    pub fn conflict(what: impl Into<String>) -> StoreError {
        StoreError::Conflict(Cause::new(what))
    }

    pub fn internal(what: impl Into<String>) -> StoreError {
        StoreError::Internal(Cause::new(what))
    }

    /// An internal failure that is `source` (a database or decoding error), kept as the
    /// error's cause.
    pub fn internal_error(source: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError::Internal(Cause::new(source.to_string()).because(source))
    }

    /// An internal failure caused by `source` (a database or decoding error), which the
    /// log prints as the error's cause.
    pub fn internal_from(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Internal(Cause::new(what).because(source))
    }
}

/// What failed (or what was being done when it failed), and the error beneath it when
/// there is one (kept as the error's `source()`, not flattened into text). The store's
/// errors and the gateway's `Internal` both carry one.
#[derive(Debug, Clone)]
pub struct Cause {
    what: String,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Cause {
    pub fn new(what: impl Into<String>) -> Cause {
        Cause {
            what: what.into(),
            source: None,
        }
    }

    pub fn because(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Cause {
        self.source = Some(std::sync::Arc::new(source));
        self
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

/// A cause is an error of its own: what failed, and beneath it the error that made it fail.
impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Equal when they say the same, cause included (tests compare errors).
impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.what == other.what
            && self.source.as_ref().map(|e| e.to_string())
                == other.source.as_ref().map(|e| e.to_string())
    }
}

impl Eq for Cause {}

/// An error and each of its causes, `: `-separated: what a log line of a failure shows
/// (a cause whose text the line already ends with, as a wrapper that prints its source
/// does, is not repeated).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The state the gateway needs. Every method is safe to call concurrently from any
/// number of tasks and, for shared backends, from any number of gateway instances.
/// Video tasks ([`TaskStore`]) are part of it: every backend keeps them.
#[async_trait]
pub trait Store: tasks::TaskStore + Send + Sync + 'static {
    /// Inserts a new key. `Conflict` if the id exists.
    async fn create_key(&self, rec: &KeyRecord) -> StoreResult<()>;
    /// The key with this id, with its current `quota_used`.
    async fn get_key(&self, id: &str) -> StoreResult<Option<KeyRecord>>;
    /// Every key, sorted by `created_at` then `id`.
    async fn list_keys(&self) -> StoreResult<Vec<KeyRecord>>;
    /// Applies the patch atomically; `None` if the id does not exist.
    async fn update_key(&self, id: &str, patch: &KeyPatch) -> StoreResult<Option<KeyRecord>>;
    /// Removes the key (its usage records may stay); `false` if it did not exist.
    async fn delete_key(&self, id: &str) -> StoreResult<bool>;

    /// Atomically checks the key (exists, enabled, not expired: the store's own clock, never
    /// the caller's) and holds money for one request against every limit at once, in one
    /// atomic step as seen by every other reserve: the key's lifetime cap, its period
    /// budgets (the counters of `ask.periods`), `tpm` (`ask.tokens` in `ask.minute()`, all
    /// or nothing) and `max_concurrent`, and the same limits of `ask.group`.
    ///
    /// The money granted is `min(max, least left under any money limit)` when that is
    /// `>= min` (`ask.min <= ask.max`, both >= 0), where the cap leaves
    /// `quota_limit - quota_used - reserved` (unlimited keys always get `max`). A refusal
    /// names the first limit that refused ([`ReserveDenied::Limit`]; the key's lifetime cap
    /// stays [`ReserveDenied::QuotaExhausted`]). The key's group must be `ask.group`'s, else
    /// [`ReserveDenied::Stale`] ([`Ask::money`] is an ask for a key in no group). A hold
    /// remembers the counters it holds on, so its settle and its expiry release those same
    /// counters even after a period boundary. A reservation not settled or extended within
    /// `ttl_secs` is released on its own (a crashed instance cannot hold quota forever).
    ///
    /// Idempotent by `reservation_id`: an id already held returns that same grant and holds
    /// nothing more (a retry after a lost reply); an id already settled or released is
    /// refused with [`ReserveDenied::Released`].
    ///
    /// Requests reserve through the billing module's `reserve`, which owns the id until
    /// the store answers and keeps the hold alive.
    async fn reserve_ask(
        &self,
        key_id: &str,
        reservation_id: &str,
        ask: &Ask,
        ttl_secs: u64,
    ) -> StoreResult<Result<Reservation, ReserveDenied>> {
        self.reserve_counted(key_id, reservation_id, ask, ttl_secs)
            .await
            .map(|(r, _)| r)
    }

    /// [`Store::reserve_ask`], with where the key's and its group's tightest token and
    /// money limits stand as that same step counted them ([`Headroom`]: after the hold
    /// when granted, as they were when refused). Both backends count it within the
    /// reserve itself (no second round trip).
    async fn reserve_counted(
        &self,
        key_id: &str,
        reservation_id: &str,
        ask: &Ask,
        ttl_secs: u64,
    ) -> StoreResult<(Result<Reservation, ReserveDenied>, Headroom)>;

    /// Pushes a held reservation's expiry to `ttl_secs` from now (never earlier than it
    /// was). Does nothing to a reservation that was settled, released or has expired.
    async fn extend(&self, reservation: &Reservation, ttl_secs: u64) -> StoreResult<()>;

    /// Releases the reservation and adds `actual` (>= 0) to `quota_used`, atomically.
    /// `actual` is charged even when the reservation already expired (the money was spent
    /// upstream). A refund is `settle(r, 0)`; settling an id that was never reserved
    /// releases it (a later `reserve` of it is refused). Durable when it returns.
    ///
    /// Exactly once: settling an id that was already settled changes nothing, so a call
    /// whose reply was lost can be retried with the same arguments.
    ///
    /// Every counter the hold was made on is settled with it: money counters get `actual`
    /// in place of the hold, the tpm counter keeps the tokens held (or, from
    /// `settle_logged`, the record's `prompt_tokens + completion_tokens`, never more than
    /// held), and the request leaves the in-flight counts.
    async fn settle(&self, reservation: &Reservation, actual: Micros) -> StoreResult<()>;

    /// `settle` and `append_usage` as one step: one commit, one script. The relay ends
    /// every request with it, so the store sees one operation where it would see two.
    /// Exactly once like `settle`: an id already settled changes nothing and appends no
    /// second record. (This default is two steps and not exactly once for the record; both
    /// backends override it.)
    async fn settle_logged(
        &self,
        reservation: &Reservation,
        actual: Micros,
        usage: &UsageRecord,
    ) -> StoreResult<()> {
        self.settle(reservation, actual).await?;
        self.append_usage(usage).await
    }

    /// Counts one request against the key's per-minute limit; `true` if it is allowed.
    /// The count is shared by every instance on the same store.
    async fn rate_hit(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<bool>;

    /// [`Store::rate_hit`], with what the count leaves: the requests the key may still
    /// make in the window and when the window ends, counted by the same step (no second
    /// round trip). This default knows only whether the request was admitted.
    async fn rate_take(&self, key_id: &str, rpm: u32, now_ms: i64) -> StoreResult<RateCount> {
        Ok(RateCount {
            admitted: self.rate_hit(key_id, rpm, now_ms).await?,
            remaining: None,
            resets_at_ms: RateCount::window_end_ms(now_ms),
        })
    }

    /// Appends a usage record. Durable when it returns.
    async fn append_usage(&self, rec: &UsageRecord) -> StoreResult<()>;
    /// The key's latest records, newest first, at most `limit`.
    async fn recent_usage(&self, key_id: &str, limit: usize) -> StoreResult<Vec<UsageRecord>>;

    /// Groups: the same contract as keys (`Conflict` on an existing id, `None`/`false` on
    /// a missing one). `quota_used` is the group's settled spend.
    async fn create_group(&self, rec: &GroupRecord) -> StoreResult<()>;
    async fn get_group(&self, id: &str) -> StoreResult<Option<GroupRecord>>;
    /// Every group, sorted by `created_at` then `id`.
    async fn list_groups(&self) -> StoreResult<Vec<GroupRecord>>;
    async fn update_group(&self, id: &str, patch: &GroupPatch) -> StoreResult<Option<GroupRecord>>;
    async fn delete_group(&self, id: &str) -> StoreResult<bool>;

    /// What a key's (`Scope::Key`) or group's counters stand at: spend settled plus held
    /// in each of `periods`, tokens counted in `minute` (unix minutes), requests in flight.
    async fn standing(
        &self,
        scope: Scope,
        id: &str,
        periods: &Periods,
        minute: i64,
    ) -> StoreResult<Standing>;

    /// Cheap health probe (a PING, or nothing for the embedded store).
    async fn ping(&self) -> StoreResult<()>;

    /// The backend's own usage queries (filters, lookup by request id, spend buckets), if
    /// it has them; [`usage_query::Reader`] falls back to a scan over the methods above.
    fn usage_query(&self) -> Option<&dyn usage_query::UsageQuery> {
        None
    }

    /// Where responses are stored for `previous_response_id`, if this backend keeps them.
    fn responses(&self) -> Option<&dyn responses::ResponseStore> {
        None
    }

    /// Hands back what this instance holds for later (Redis: its quota leases, and the
    /// charges it has settled but not yet sent), at the end of a graceful stop, once the
    /// requests in flight have settled. The store still works afterwards, without
    /// holding anything ahead.
    async fn close(&self) -> StoreResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    #[test]
    fn a_store_error_keeps_its_cause_for_the_log() {
        let bad_json = serde_json::from_str::<u32>("x").unwrap_err();
        let e = StoreError::internal_from("usage record r1", bad_json);
        let source = std::error::Error::source(&e);
        assert!(source.is_some(), "the JSON error is kept as the cause");
        assert_eq!(
            chain(&e),
            "store error: usage record r1: expected value at line 1 column 1"
        );
        let e = StoreError::internal_error(serde_json::from_str::<u32>("x").unwrap_err());
        assert_eq!(chain(&e), "store error: expected value at line 1 column 1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_records_written_before_the_estimate_and_overrun_fields_still_read() {
        let old = r#"{"request_id":"r","time_ms":1,"key_id":"k","endpoint":"/v1/chat/completions",
            "model":"m","channel":"c","prompt_tokens":1,"completion_tokens":2,"cached_tokens":0,
            "cost":3,"status":200,"latency_ms":4,"stream":false}"#;
        let u: UsageRecord = serde_json::from_str(old).unwrap();
        assert!(!u.estimated);
        assert_eq!(u.overrun, 0);
        assert_eq!(u.cost, 3);
    }
}
