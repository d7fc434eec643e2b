//! Reading usage records back for the console: filtered lists, lookup by request id, and
//! spend summed into time buckets. The store does the summing (the page only draws), so
//! a day of records crosses no wire.
//!
//! Each backend implements [`UsageQuery`] in its own file (`embedded_usage.rs`,
//! `redis_usage.rs`) and hands it out through [`super::Store::usage_query`]. A store that
//! does not (a test double) gets [`Scan`], which reads every key's latest records through
//! the ordinary trait methods: slower, same answers.

use super::{Micros, Store, StoreResult, UsageRecord};
use async_trait::async_trait;
use std::collections::BTreeMap;

/// Records a single query may read before it stops and says so (`truncated`). A console
/// query that would read more than this is asking the wrong question.
pub const MAX_SCAN: u64 = 2_000_000;

/// Which records a query wants. Every field narrows; none = every record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageFilter {
    pub key_id: Option<String>,
    /// The group the records counted against.
    pub group: Option<String>,
    pub model: Option<String>,
    /// Inclusive range of HTTP statuses (`4xx` = 400..=499).
    pub status: Option<(u16, u16)>,
    /// Arrival time, unix ms: `from_ms <= time_ms < to_ms`.
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

impl UsageFilter {
    pub fn matches(&self, r: &UsageRecord) -> bool {
        self.key_id.as_ref().is_none_or(|k| *k == r.key_id)
            && self
                .group
                .as_ref()
                .is_none_or(|g| r.group.as_ref() == Some(g))
            && self.model.as_ref().is_none_or(|m| *m == r.model)
            && self
                .status
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&r.status))
            && self.from_ms.is_none_or(|t| r.time_ms >= t)
            && self.to_ms.is_none_or(|t| r.time_ms < t)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Model,
    Channel,
    Key,
    /// The key's group (`""` for records of keys in none).
    Group,
}

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "model" => Some(GroupBy::Model),
            "channel" => Some(GroupBy::Channel),
            "key" => Some(GroupBy::Key),
            "group" => Some(GroupBy::Group),
            _ => None,
        }
    }

    fn of(self, r: &UsageRecord) -> &str {
        match self {
            GroupBy::Model => &r.model,
            GroupBy::Channel => &r.channel,
            GroupBy::Key => &r.key_id,
            GroupBy::Group => r.group.as_deref().unwrap_or(""),
        }
    }
}

/// Spend summed by time bucket and by one dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendQuery {
    pub filter: UsageFilter,
    /// Bucket width in ms (an hour, a day).
    pub bucket_ms: i64,
    /// The viewer's offset from UTC in ms, so day buckets start at the viewer's midnight.
    pub offset_ms: i64,
    pub group_by: GroupBy,
}

impl SpendQuery {
    /// The start (unix ms) of the bucket holding `t`.
    pub fn bucket_of(&self, t: i64) -> i64 {
        let w = self.bucket_ms.max(1);
        (t + self.offset_ms).div_euclid(w) * w - self.offset_ms
    }
}

/// What a set of records adds up to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub requests: u64,
    /// Records with a status of 400 or more.
    pub errors: u64,
    pub cost: Micros,
    /// Cost reported beyond the grant: recorded, never charged.
    pub overrun: Micros,
    /// Records whose cost the gateway estimated.
    pub estimated: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
}

impl Totals {
    pub fn add(&mut self, r: &UsageRecord) {
        self.requests += 1;
        self.errors += u64::from(r.status >= 400);
        self.cost = self.cost.saturating_add(r.cost);
        self.overrun = self.overrun.saturating_add(r.overrun);
        self.estimated += u64::from(r.estimated);
        self.prompt_tokens = self.prompt_tokens.saturating_add(r.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(r.completion_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(r.cached_tokens);
    }
}

/// The answer to a [`SpendQuery`]: bucket start (unix ms) → group → totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spend {
    pub buckets: BTreeMap<i64, BTreeMap<String, Totals>>,
    /// Records read (matching or not).
    pub scanned: u64,
    /// The query stopped at [`MAX_SCAN`] records: the sums are too low.
    pub truncated: bool,
}

impl Spend {
    /// Counts one record read; adds it when it matches. `false` once the scan must stop.
    pub fn feed(&mut self, q: &SpendQuery, r: &UsageRecord) -> bool {
        self.scanned += 1;
        if q.filter.matches(r) {
            self.buckets
                .entry(q.bucket_of(r.time_ms))
                .or_default()
                .entry(q.group_by.of(r).to_string())
                .or_default()
                .add(r);
        }
        if self.scanned >= MAX_SCAN {
            self.truncated = true;
            return false;
        }
        true
    }
}

/// The time a request id was minted (its first 12 hex digits are unix ms; see `ids`), so a
/// lookup can skip everything written before it.
pub fn request_id_time(id: &str) -> Option<i64> {
    let head = id.get(..12)?;
    i64::from_str_radix(head, 16).ok()
}

/// Clocks of gateway instances and of the store may disagree by this much; time bounds
/// taken from a record's `time_ms` are widened by it.
pub const CLOCK_SLACK_MS: i64 = 5 * 60 * 1000;

#[async_trait]
pub trait UsageQuery: Send + Sync {
    /// Records matching `filter`, the most recently written first, at most `limit`.
    async fn find_usage(&self, filter: &UsageFilter, limit: usize)
        -> StoreResult<Vec<UsageRecord>>;
    /// The record of this request, if one was written and is still kept.
    async fn usage_by_request(&self, request_id: &str) -> StoreResult<Option<UsageRecord>>;
    /// Spend of the records matching the query's filter, summed into buckets.
    async fn spend(&self, q: &SpendQuery) -> StoreResult<Spend>;
}

/// The usage queries of a store: its own, or a [`Scan`].
pub enum Reader<'a> {
    Native(&'a dyn UsageQuery),
    Scan(Scan<'a>),
}

impl<'a> Reader<'a> {
    pub fn of(store: &'a dyn Store) -> Reader<'a> {
        match store.usage_query() {
            Some(q) => Reader::Native(q),
            None => Reader::Scan(Scan(store)),
        }
    }

    pub fn get(&self) -> &dyn UsageQuery {
        match self {
            Reader::Native(q) => *q,
            Reader::Scan(s) => s,
        }
    }
}

/// Usage queries over any [`Store`]: every key's latest records (as many as the store
/// keeps, through `recent_usage`), filtered here. Records of deleted keys are not seen.
pub struct Scan<'a>(pub &'a dyn Store);

/// `recent_usage` reads at most this many records per key.
const SCAN_PER_KEY: usize = 10_000;

impl Scan<'_> {
    async fn records(&self, key_id: Option<&str>) -> StoreResult<Vec<UsageRecord>> {
        let ids = match key_id {
            Some(k) => vec![k.to_string()],
            None => self
                .0
                .list_keys()
                .await?
                .into_iter()
                .map(|k| k.id)
                .collect(),
        };
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.0.recent_usage(&id, SCAN_PER_KEY).await?);
        }
        // Newest first across keys: request ids sort by arrival.
        out.sort_by(|a, b| (b.time_ms, &b.request_id).cmp(&(a.time_ms, &a.request_id)));
        Ok(out)
    }
}

#[async_trait]
impl UsageQuery for Scan<'_> {
    async fn find_usage(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let recs = self.records(filter.key_id.as_deref()).await?;
        Ok(recs
            .into_iter()
            .filter(|r| filter.matches(r))
            .take(limit)
            .collect())
    }

    async fn usage_by_request(&self, request_id: &str) -> StoreResult<Option<UsageRecord>> {
        let recs = self.records(None).await?;
        Ok(recs.into_iter().find(|r| r.request_id == request_id))
    }

    async fn spend(&self, q: &SpendQuery) -> StoreResult<Spend> {
        let mut s = Spend::default();
        for r in self.records(q.filter.key_id.as_deref()).await? {
            if !s.feed(q, &r) {
                break;
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn rec(id: &str, key: &str, model: &str, t: i64, status: u16) -> UsageRecord {
        UsageRecord {
            request_id: id.into(),
            time_ms: t,
            key_id: key.into(),
            endpoint: "/v1/chat/completions".into(),
            model: model.into(),
            channel: "c".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            cached_tokens: 1,
            cost: 100,
            estimated: status != 200,
            overrun: 0,
            provider_cost: None,
            bill: Default::default(),
            multiplier_ppm: None,
            status,
            latency_ms: 3,
            stream: false,
            group: None,
        }
    }

    #[test]
    fn filters_narrow_by_every_field() {
        let r = rec("r", "k", "m", 1_000, 429);
        assert!(UsageFilter::default().matches(&r));
        let f = |f: UsageFilter| f.matches(&r);
        assert!(f(UsageFilter {
            status: Some((400, 499)),
            ..Default::default()
        }));
        assert!(!f(UsageFilter {
            status: Some((200, 200)),
            ..Default::default()
        }));
        assert!(!f(UsageFilter {
            key_id: Some("other".into()),
            ..Default::default()
        }));
        assert!(!f(UsageFilter {
            model: Some("other".into()),
            ..Default::default()
        }));
        // The range is half open: from is in, to is out.
        assert!(f(UsageFilter {
            from_ms: Some(1_000),
            to_ms: Some(1_001),
            ..Default::default()
        }));
        assert!(!f(UsageFilter {
            to_ms: Some(1_000),
            ..Default::default()
        }));
    }

    #[test]
    fn buckets_start_at_the_viewers_midnight() {
        let day = 86_400_000;
        let q = SpendQuery {
            filter: UsageFilter::default(),
            bucket_ms: day,
            offset_ms: 2 * 3_600_000,
            group_by: GroupBy::Model,
        };
        // 23:00 UTC is 01:00 the next day at UTC+2.
        let t = 10 * day + 23 * 3_600_000;
        assert_eq!(q.bucket_of(t), 11 * day - 2 * 3_600_000);
        assert_eq!(q.bucket_of(t - 2 * 3_600_000), 10 * day - 2 * 3_600_000);
    }

    #[test]
    fn spend_sums_by_bucket_and_group() {
        let q = SpendQuery {
            filter: UsageFilter {
                key_id: Some("k".into()),
                ..Default::default()
            },
            bucket_ms: 1_000,
            offset_ms: 0,
            group_by: GroupBy::Model,
        };
        let mut s = Spend::default();
        for r in [
            rec("a", "k", "m1", 1_100, 200),
            rec("b", "k", "m1", 1_900, 500),
            rec("c", "k", "m2", 2_000, 200),
            rec("d", "other", "m1", 1_500, 200),
        ] {
            assert!(s.feed(&q, &r));
        }
        assert_eq!(s.scanned, 4);
        let m1 = &s.buckets[&1_000]["m1"];
        assert_eq!(
            (m1.requests, m1.errors, m1.cost, m1.estimated),
            (2, 1, 200, 1)
        );
        assert_eq!(m1.prompt_tokens, 20);
        assert_eq!(s.buckets[&2_000]["m2"].requests, 1);
        assert_eq!(s.buckets.len(), 2);
    }

    #[test]
    fn a_request_id_tells_when_it_was_minted() {
        assert_eq!(request_id_time("0000000003e8abcdef0123456789"), Some(1_000));
        assert_eq!(request_id_time("short"), None);
        assert_eq!(request_id_time("zzzzzzzzzzzz0000"), None);
    }
}
