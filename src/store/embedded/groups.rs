//! Groups in the embedded store: their rows, written by the writer thread and applied to
//! the ledger once committed, and what a key's or a group's counters stand at.

use super::figures::GroupFigures;
use super::sql::{self, exec, internal};
use super::EmbeddedStore;
use crate::store::policy::{GroupPatch, GroupRecord, Periods, Scope, Standing};
use crate::store::{Store, StoreError, StoreResult};
use rusqlite::params;

impl EmbeddedStore {
    pub(super) async fn insert_group(&self, rec: &GroupRecord) -> StoreResult<()> {
        let g = rec.clone();
        let ledger = self.ledger.clone();
        self.write(
            false,
            move |c| {
                let n = exec(
                    c,
                    "INSERT OR IGNORE INTO groups (id, name, status, created_at, quota_limit, quota_used, policy)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        g.id, g.name, g.status.as_str(), g.created_at, g.quota_limit, g.quota_used,
                        sql::policy_json(&g.policy)
                    ],
                )
                .map_err(internal)?;
                if n == 0 {
                    return Err(StoreError::conflict(format!("group {} exists", g.id)));
                }
                Ok(g)
            },
            move |committed, g| {
                if committed {
                    ledger.group_changed(&g.id, GroupFigures::of(g));
                }
            },
        )
        .await
        .map(|_| ())
    }

    pub(super) async fn change_group(
        &self,
        id: &str,
        patch: &GroupPatch,
    ) -> StoreResult<Option<GroupRecord>> {
        let (id, patch) = (id.to_string(), patch.clone());
        let ledger = self.ledger.clone();
        self.write(
            false,
            move |c| {
                let Some(mut g) = sql::get_group(c, &id)? else {
                    return Ok(None);
                };
                patch.apply(&mut g);
                exec(
                    c,
                    "UPDATE groups SET name = ?2, status = ?3, quota_limit = ?4, policy = ?5 WHERE id = ?1",
                    params![
                        g.id, g.name, g.status.as_str(), g.quota_limit, sql::policy_json(&g.policy)
                    ],
                )
                .map_err(internal)?;
                Ok(Some(g))
            },
            move |committed, g| {
                if let (true, Some(g)) = (committed, g) {
                    ledger.group_changed(&g.id, GroupFigures::of(g));
                }
            },
        )
        .await
    }

    pub(super) async fn remove_group(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        let ledger = self.ledger.clone();
        self.write(
            false,
            move |c| {
                exec(
                    c,
                    "DELETE FROM period_spend WHERE scope = ?1",
                    [sql::group_scope(&id)],
                )
                .map_err(internal)?;
                let n = exec(c, "DELETE FROM groups WHERE id = ?1", [&id]).map_err(internal)?;
                Ok((id, n > 0))
            },
            move |committed, (id, _)| {
                if committed {
                    ledger.group_deleted(id);
                }
            },
        )
        .await
        .map(|(_, deleted)| deleted)
    }

    pub(super) async fn standing_of(
        &self,
        scope: Scope,
        id: &str,
        periods: &Periods,
        minute: i64,
    ) -> StoreResult<Standing> {
        let known = match scope {
            Scope::Key => {
                if let Some(s) = self.ledger.standing(id, periods, minute) {
                    return Ok(s);
                }
                self.load(id).await?
            }
            Scope::Group => {
                if let Some(s) = self.ledger.group_standing(id, periods, minute) {
                    return Ok(s);
                }
                // An unknown id is not remembered: only reserves load missing groups.
                if self.get_group(id).await?.is_none() {
                    return Ok(Standing::default());
                }
                self.load_group(id).await?;
                true
            }
        };
        let s = match (known, scope) {
            (false, _) => None,
            (true, Scope::Key) => self.ledger.standing(id, periods, minute),
            (true, Scope::Group) => self.ledger.group_standing(id, periods, minute),
        };
        Ok(s.unwrap_or_default())
    }
}
