//! Usage queries on the embedded store.
//!
//! They read on a connection of their own, opened read-only for each query on a blocking
//! thread: a console query may read every record, and on the store thread it would hold
//! up every request's commit behind it. SQLite in WAL mode lets readers run beside the
//! writer, and a reader sees every commit made before it started, so a record the
//! gateway already acknowledged is always found.
//!
//! Filters run in SQL on the record's JSON (`json_extract`), so records that do not match
//! are never parsed here; each row is checked again with [`UsageFilter::matches`].

use super::{internal, EmbeddedStore};
use crate::store::usage_query::{Spend, SpendQuery, UsageFilter, UsageQuery};
use crate::store::{StoreResult, UsageRecord};
use async_trait::async_trait;
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

fn open(dir: &Path) -> StoreResult<Connection> {
    let c = Connection::open_with_flags(
        dir.join("gateway.db"),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(internal)?;
    c.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(internal)?;
    Ok(c)
}

/// `SELECT record FROM usage WHERE …` for the filter, newest written first. A key's
/// records are read through the `usage_key` index.
fn select(f: &UsageFilter) -> (String, Vec<Sql>) {
    let mut conds = Vec::new();
    let mut args = Vec::new();
    if let Some(k) = &f.key_id {
        args.push(Sql::Text(k.clone()));
        conds.push(format!("key_id = ?{}", args.len()));
    }
    if let Some(g) = &f.group {
        args.push(Sql::Text(g.clone()));
        conds.push(format!("json_extract(record, '$.group') = ?{}", args.len()));
    }
    if let Some(m) = &f.model {
        args.push(Sql::Text(m.clone()));
        conds.push(format!("json_extract(record, '$.model') = ?{}", args.len()));
    }
    if let Some((lo, hi)) = f.status {
        args.push(Sql::Integer(lo.into()));
        args.push(Sql::Integer(hi.into()));
        conds.push(format!(
            "json_extract(record, '$.status') BETWEEN ?{} AND ?{}",
            args.len() - 1,
            args.len()
        ));
    }
    if let Some(t) = f.from_ms {
        args.push(Sql::Integer(t));
        conds.push(format!(
            "json_extract(record, '$.time_ms') >= ?{}",
            args.len()
        ));
    }
    if let Some(t) = f.to_ms {
        args.push(Sql::Integer(t));
        conds.push(format!(
            "json_extract(record, '$.time_ms') < ?{}",
            args.len()
        ));
    }
    let filter = if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    };
    let order = if f.key_id.is_some() {
        "key_id DESC, seq DESC"
    } else {
        "seq DESC"
    };
    (
        format!("SELECT record FROM usage{filter} ORDER BY {order}"),
        args,
    )
}

/// Runs `f` on a fresh read-only connection on a blocking thread.
async fn read<T: Send + 'static>(
    dir: PathBuf,
    f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(move || f(&open(&dir)?))
        .await
        .map_err(internal)?
}

/// Feeds each record the filter selects to `each` until it returns `false`.
fn each_record(
    c: &Connection,
    f: &UsageFilter,
    mut each: impl FnMut(UsageRecord) -> bool,
) -> StoreResult<()> {
    let (sql, args) = select(f);
    let mut st = c.prepare(&sql).map_err(internal)?;
    let mut rows = st
        .query(rusqlite::params_from_iter(args))
        .map_err(internal)?;
    while let Some(row) = rows.next().map_err(internal)? {
        let text: String = row.get(0).map_err(internal)?;
        let rec: UsageRecord = serde_json::from_str(&text).map_err(internal)?;
        if f.matches(&rec) && !each(rec) {
            break;
        }
    }
    Ok(())
}

#[async_trait]
impl UsageQuery for EmbeddedStore {
    async fn find_usage(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        self.sync().await?;
        let f = filter.clone();
        read(self.dir.clone(), move |c| {
            let mut out = Vec::new();
            if limit > 0 {
                each_record(c, &f, |r| {
                    out.push(r);
                    out.len() < limit
                })?;
            }
            Ok(out)
        })
        .await
    }

    async fn usage_by_request(&self, request_id: &str) -> StoreResult<Option<UsageRecord>> {
        self.sync().await?;
        let id = request_id.to_string();
        read(self.dir.clone(), move |c| {
            let mut st = c
                .prepare(
                    "SELECT record FROM usage WHERE json_extract(record, '$.request_id') = ?1
                     ORDER BY seq DESC LIMIT 1",
                )
                .map_err(internal)?;
            let mut rows = st.query([&id]).map_err(internal)?;
            match rows.next().map_err(internal)? {
                Some(row) => {
                    let text: String = row.get(0).map_err(internal)?;
                    serde_json::from_str(&text).map(Some).map_err(internal)
                }
                None => Ok(None),
            }
        })
        .await
    }

    async fn spend(&self, q: &SpendQuery) -> StoreResult<Spend> {
        self.sync().await?;
        let q = q.clone();
        read(self.dir.clone(), move |c| {
            let mut s = Spend::default();
            each_record(c, &q.filter, |r| s.feed(&q, &r))?;
            Ok(s)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn rec(id: &str, key: &str, model: &str, t: i64, status: u16) -> UsageRecord {
        UsageRecord {
            request_id: id.into(),
            time_ms: t,
            key_id: key.into(),
            endpoint: "/v1/chat/completions".into(),
            model: model.into(),
            channel: "c".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            cached_tokens: 0,
            cost: 7,
            estimated: false,
            overrun: 0,
            provider_cost: None,
            bill: Default::default(),
            multiplier_ppm: None,
            status,
            latency_ms: 1,
            stream: false,
            group: None,
        }
    }

    /// A store with keys k1 and k2 and three records: r1 (k1, m1, t 1 000, 200), r2 (k1,
    /// m2, t 2 000, 500), r3 (k2, m1, t 3 000, 200).
    async fn three_records() -> (tempfile::TempDir, EmbeddedStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = EmbeddedStore::open(dir.path()).unwrap();
        for id in ["k1", "k2"] {
            s.create_key(&crate::store::KeyRecord {
                id: id.into(),
                hash: format!("hash-{id}"),
                display: "sk-x…y".into(),
                name: id.into(),
                status: crate::store::KeyStatus::Enabled,
                created_at: 0,
                expires_at: None,
                models: vec![],
                allow_ips: vec![],
                rpm: None,
                quota_limit: None,
                quota_used: 0,
                group: None,
                policy: Default::default(),
            })
            .await
            .unwrap();
        }
        for r in [
            rec("r1", "k1", "m1", 1_000, 200),
            rec("r2", "k1", "m2", 2_000, 500),
            rec("r3", "k2", "m1", 3_000, 200),
        ] {
            s.append_usage(&r).await.unwrap();
        }
        (dir, s)
    }

    #[tokio::test]
    async fn filters_lookup_and_spend_read_what_was_written() {
        let (_dir, s) = three_records().await;
        let q = s.usage_query().unwrap();
        let all = q.find_usage(&UsageFilter::default(), 10).await.unwrap();
        let ids: Vec<_> = all.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["r3", "r2", "r1"], "newest written first");
        let f = UsageFilter {
            key_id: Some("k1".into()),
            status: Some((400, 599)),
            ..Default::default()
        };
        assert_eq!(q.find_usage(&f, 10).await.unwrap()[0].request_id, "r2");
        let f = UsageFilter {
            model: Some("m1".into()),
            from_ms: Some(2_000),
            ..Default::default()
        };
        assert_eq!(q.find_usage(&f, 10).await.unwrap()[0].request_id, "r3");
        assert_eq!(
            q.find_usage(&UsageFilter::default(), 1)
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(q.usage_by_request("r2").await.unwrap().unwrap().model, "m2");
        assert!(q.usage_by_request("nope").await.unwrap().is_none());
        let sp = q
            .spend(&SpendQuery {
                filter: UsageFilter::default(),
                bucket_ms: 2_000,
                offset_ms: 0,
                group_by: crate::store::usage_query::GroupBy::Key,
            })
            .await
            .unwrap();
        assert_eq!(sp.buckets[&0]["k1"].cost, 7);
        assert_eq!(sp.buckets[&2_000]["k1"].errors, 1);
        assert_eq!(sp.buckets[&2_000]["k2"].requests, 1);
        assert_eq!(sp.scanned, 3);

        // The fallback for stores without their own queries (over the keys that exist)
        // gives the same answers.
        let scan = crate::store::usage_query::Scan(&s);
        for f in [
            UsageFilter::default(),
            UsageFilter {
                status: Some((500, 500)),
                ..Default::default()
            },
            UsageFilter {
                key_id: Some("k2".into()),
                ..Default::default()
            },
        ] {
            assert_eq!(
                scan.find_usage(&f, 10).await.unwrap(),
                q.find_usage(&f, 10).await.unwrap(),
                "{f:?}"
            );
        }
        assert_eq!(
            scan.usage_by_request("r3").await.unwrap(),
            q.usage_by_request("r3").await.unwrap()
        );
    }
}
