//! Groups on Redis: a hash per group under its own hash tag (`gw:grp:{grp:ID}`, see
//! [`scopes`]), listed in `gw:groups`, and what a key's or a group's counters stand at.

use super::conn::{done, key, map_err, rsv, rsva};
use super::{records, scopes, RedisStore};
use crate::store::{GroupRecord, Periods, Scope, Standing, StoreResult};

const GROUPS_SET: &str = "gw:groups";

pub(super) async fn create(store: &RedisStore, rec: &GroupRecord) -> StoreResult<()> {
    let hash = scopes::group(&rec.id);
    let fields = records::group_fields(rec);
    store
        .create_record(hash, fields, GROUPS_SET, "group", &rec.id)
        .await
}

pub(super) async fn list(store: &RedisStore) -> StoreResult<Vec<GroupRecord>> {
    let read = |id: String| async move {
        store
            .read_record(scopes::group(&id), records::group_record)
            .await
    };
    store
        .read_all(GROUPS_SET, read, |g| (g.created_at, &g.id))
        .await
}

pub(super) async fn delete(store: &RedisStore, id: &str) -> StoreResult<bool> {
    let tag = scopes::group_tag(id);
    let n: i64 = store
        .query(
            redis::cmd("DEL")
                .arg(scopes::group(id))
                .arg(rsv(&tag))
                .arg(rsva(&tag))
                .arg(done(&tag))
                .arg(scopes::hold(&tag))
                .arg(scopes::kept(&tag)),
        )
        .await?;
    store
        .query::<()>(redis::cmd("SREM").arg(GROUPS_SET).arg(id))
        .await?;
    Ok(n > 0)
}

pub(super) async fn standing(
    store: &RedisStore,
    scope: Scope,
    id: &str,
    periods: &Periods,
    minute: i64,
) -> StoreResult<Standing> {
    let (hash, tag) = match scope {
        Scope::Key => (key(id), id.to_string()),
        Scope::Group => (scopes::group(id), scopes::group_tag(id)),
    };
    let v: Vec<i64> = store
        .scripts
        .standing
        .key(hash)
        .key(rsv(&tag))
        .key(rsva(&tag))
        .key(scopes::counter(&tag, &periods.day.label()))
        .key(scopes::counter(&tag, &periods.week.label()))
        .key(scopes::counter(&tag, &periods.month.label()))
        .key(scopes::tokens(&tag, minute))
        .invoke_async(&mut store.conn.clone())
        .await
        .map_err(map_err)?;
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Ok(Standing {
        day: at(0),
        week: at(1),
        month: at(2),
        minute_tokens: at(3).max(0) as u64,
        in_flight: at(4).clamp(0, u32::MAX as i64) as u32,
    })
}
