//! Usage queries on Redis: each key's records are its capped stream `gw:log:{ID}`, read in
//! pages of [`PAGE`] entries (`XREVRANGE`, or `XRANGE` for a lookup by request id), so no
//! single command is long and a query over every key is one key at a time.
//!
//! A stream entry's id is the Redis time it was written, never before its request
//! arrived, so a query from time `t` starts reading at `t` (less [`CLOCK_SLACK_MS`], for
//! instances whose clocks run ahead of Redis's) and skips everything older.
//!
//! "Every key" is the keys that exist (`gw:keys`): a deleted key's stream stays until it
//! is pruned, but is no longer listed.

use super::{log, RedisStore, KEYS_SET};
use crate::store::usage_query::{
    request_id_time, Spend, SpendQuery, UsageFilter, UsageQuery, CLOCK_SLACK_MS,
};
use crate::store::{StoreError, StoreResult, UsageRecord};
use async_trait::async_trait;

/// Entries per read.
const PAGE: usize = 500;

/// A stream entry id, `ms-seq`, as numbers (they order entries).
type EntryId = (u64, u64);

fn parse_id(id: &str) -> Option<EntryId> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// The greatest id below `id` (an inclusive end bound; Redis before 6.2 has no exclusive
/// ones). `None` below the first possible id.
fn before((ms, seq): EntryId) -> Option<String> {
    match (ms, seq) {
        (0, 0) => None,
        (ms, 0) => Some(format!("{}-{}", ms - 1, u64::MAX)),
        (ms, seq) => Some(format!("{ms}-{}", seq - 1)),
    }
}

fn after((ms, seq): EntryId) -> String {
    match seq.checked_add(1) {
        Some(s) => format!("{ms}-{s}"),
        None => format!("{}-0", ms + 1),
    }
}

/// The earliest stream id that can hold a record of a request that arrived at `t`.
fn start_for(t: Option<i64>) -> String {
    match t {
        Some(t) => (t - CLOCK_SLACK_MS).max(0).to_string(),
        None => "-".into(),
    }
}

type Entries = Vec<(String, Vec<(String, String)>)>;

fn records(entries: Entries) -> StoreResult<Vec<(EntryId, UsageRecord)>> {
    let mut out = Vec::with_capacity(entries.len());
    for (id, fields) in entries {
        let Some(eid) = parse_id(&id) else {
            return Err(StoreError::internal(format!("bad stream id {id}")));
        };
        if let Some((_, text)) = fields.into_iter().find(|(k, _)| k == "r") {
            let rec = serde_json::from_str(&text)
                .map_err(|e| StoreError::internal(format!("usage record {id}: {e}")))?;
            out.push((eid, rec));
        }
    }
    Ok(out)
}

impl RedisStore {
    async fn key_ids(&self, only: Option<&str>) -> StoreResult<Vec<String>> {
        match only {
            Some(k) => Ok(vec![k.to_string()]),
            None => self.query(redis::cmd("SMEMBERS").arg(KEYS_SET)).await,
        }
    }

    /// Reads one key's stream newest first, from its end down to the entry written at
    /// `start`, calling `each` on every entry until it returns `false`.
    async fn walk_back(
        &self,
        key_id: &str,
        start: &str,
        mut each: impl FnMut(EntryId, UsageRecord) -> bool + Send,
    ) -> StoreResult<()> {
        let mut end = "+".to_string();
        loop {
            let page: Entries = self
                .query(
                    redis::cmd("XREVRANGE")
                        .arg(log(key_id))
                        .arg(&end)
                        .arg(start)
                        .arg("COUNT")
                        .arg(PAGE),
                )
                .await?;
            let full = page.len() == PAGE;
            let mut last = None;
            for (id, rec) in records(page)? {
                last = Some(id);
                if !each(id, rec) {
                    return Ok(());
                }
            }
            match last.and_then(before) {
                Some(b) if full => end = b,
                _ => return Ok(()),
            }
        }
    }

    /// One key's stream oldest first from `start`, to the first record `want` accepts.
    async fn find_forward(
        &self,
        key_id: &str,
        start: &str,
        want: &(dyn Fn(&UsageRecord) -> bool + Sync),
    ) -> StoreResult<Option<UsageRecord>> {
        let mut from = start.to_string();
        loop {
            let page: Entries = self
                .query(
                    redis::cmd("XRANGE")
                        .arg(log(key_id))
                        .arg(&from)
                        .arg("+")
                        .arg("COUNT")
                        .arg(PAGE),
                )
                .await?;
            let full = page.len() == PAGE;
            let mut last = None;
            for (id, rec) in records(page)? {
                if want(&rec) {
                    return Ok(Some(rec));
                }
                last = Some(id);
            }
            match last {
                Some(id) if full => from = after(id),
                _ => return Ok(None),
            }
        }
    }
}

#[async_trait]
impl UsageQuery for RedisStore {
    async fn find_usage(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let start = start_for(filter.from_ms);
        let mut found: Vec<(EntryId, UsageRecord)> = Vec::new();
        if limit == 0 {
            return Ok(Vec::new());
        }
        for key_id in self.key_ids(filter.key_id.as_deref()).await? {
            let mut mine = 0;
            self.walk_back(&key_id, &start, |id, r| {
                if filter.matches(&r) {
                    found.push((id, r));
                    mine += 1;
                }
                mine < limit
            })
            .await?;
        }
        // Newest written first across keys: entry ids are Redis's clock.
        found.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        Ok(found.into_iter().take(limit).map(|(_, r)| r).collect())
    }

    async fn usage_by_request(&self, request_id: &str) -> StoreResult<Option<UsageRecord>> {
        let start = start_for(request_id_time(request_id));
        let want = |r: &UsageRecord| r.request_id == request_id;
        for key_id in self.key_ids(None).await? {
            if let Some(r) = self.find_forward(&key_id, &start, &want).await? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    async fn spend(&self, q: &SpendQuery) -> StoreResult<Spend> {
        let start = start_for(q.filter.from_ms);
        let mut s = Spend::default();
        for key_id in self.key_ids(q.filter.key_id.as_deref()).await? {
            self.walk_back(&key_id, &start, |_, r| s.feed(q, &r))
                .await?;
            if s.truncated {
                break;
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_step_to_their_neighbours() {
        assert_eq!(parse_id("12-3"), Some((12, 3)));
        assert_eq!(parse_id("12"), None);
        assert_eq!(before((12, 3)).as_deref(), Some("12-2"));
        assert_eq!(before((12, 0)).as_deref(), Some("11-18446744073709551615"));
        assert_eq!(before((0, 0)), None);
        assert_eq!(after((12, 3)), "12-4");
        assert_eq!(after((12, u64::MAX)), "13-0");
        assert_eq!(start_for(None), "-");
        assert_eq!(start_for(Some(1)), "0");
    }
}
