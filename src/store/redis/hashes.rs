//! Records (keys, groups) as Redis hashes: created once, read, listed from their set,
//! and changed field by field, each in one step.

use super::conn::map_err;
use super::RedisStore;
use crate::store::{StoreError, StoreResult};
use std::collections::HashMap;

/// Reads a record from its hash's fields.
pub(super) type Parse<T> = fn(&HashMap<String, String>) -> StoreResult<T>;

impl RedisStore {
    /// Writes a new record's hash (refusing an existing one) and lists its id in `set`.
    pub(super) async fn create_record(
        &self,
        hash: String,
        fields: Vec<(&'static str, String)>,
        set: &str,
        what: &str,
        id: &str,
    ) -> StoreResult<()> {
        let mut inv = self.scripts.create.key(hash);
        for (f, v) in fields {
            if !v.is_empty() {
                inv.arg(f).arg(v);
            }
        }
        let created: i64 = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        if created == 0 {
            return Err(StoreError::conflict(format!("{what} {id} exists")));
        }
        self.query::<()>(redis::cmd("SADD").arg(set).arg(id)).await
    }

    /// A record's hash, read by `parse`; `None` if there is none.
    pub(super) async fn read_record<T>(
        &self,
        hash: String,
        parse: Parse<T>,
    ) -> StoreResult<Option<T>> {
        let h: HashMap<String, String> = self.query(redis::cmd("HGETALL").arg(hash)).await?;
        if h.is_empty() {
            return Ok(None);
        }
        parse(&h).map(Some)
    }

    /// Every record listed in `set`, read by `read`, sorted by creation then id.
    pub(super) async fn read_all<T, F, Fut>(
        &self,
        set: &str,
        read: F,
        order: fn(&T) -> (i64, &str),
    ) -> StoreResult<Vec<T>>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = StoreResult<Option<T>>>,
    {
        let ids: Vec<String> = self.query(redis::cmd("SMEMBERS").arg(set)).await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(r) = read(id).await? {
                out.push(r);
            }
        }
        out.sort_by(|a, b| order(a).cmp(&order(b)));
        Ok(out)
    }

    /// Sets a record's patched fields (gw_update_v1) and reads it back; `None` if there
    /// is no such record.
    pub(super) async fn update_record<T>(
        &self,
        hash: String,
        fields: Vec<(&'static str, String)>,
        parse: Parse<T>,
    ) -> StoreResult<Option<T>> {
        let mut inv = self.scripts.update.key(hash);
        for (f, v) in fields {
            inv.arg(f).arg(v);
        }
        let v: Option<HashMap<String, String>> = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(map_err)?;
        match v {
            Some(h) if !h.is_empty() => parse(&h).map(Some),
            _ => Ok(None),
        }
    }
}
