//! Group management, shared by the admin HTTP API and the CLI (like [`super::keys`]): a
//! group's own lifetime cap and policy, which every request of its keys must fit too.

use super::fields::{
    bad, micros_to_usd, name_and_status, nullable, parse_object, rfc3339, usd_field,
};
use super::policy::{self, PolicyInput, POLICY_FIELDS};
use crate::billing::Calendar;
use crate::errors::GatewayError;
use crate::ids;
use crate::store::{GroupPatch, GroupRecord, KeyStatus, Scope, Store};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Default, Deserialize)]
pub struct GroupInput {
    /// On create only: the group's id, chosen by the operator.
    pub id: Option<String>,
    pub name: Option<String>,
    pub status: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub quota_usd: Option<Option<f64>>,
    #[serde(flatten)]
    pub policy: PolicyInput,
}

const GROUP_FIELDS: &[&str] = &["id", "name", "status", "quota_usd"];

impl GroupInput {
    pub fn from_json(body: &[u8]) -> Result<GroupInput, GatewayError> {
        let allowed: Vec<&str> = GROUP_FIELDS.iter().chain(POLICY_FIELDS).copied().collect();
        parse_object(body, "group", &allowed)
    }

    pub fn to_patch(&self) -> Result<GroupPatch, GatewayError> {
        let mut p = GroupPatch::default();
        (p.name, p.status) = name_and_status(&self.name, &self.status)?;
        p.quota_limit = usd_field("quota_usd", self.quota_usd)?;
        p.policy = self.policy.to_patch()?;
        Ok(p)
    }
}

pub fn view(g: &GroupRecord) -> Value {
    let mut v = json!({
        "id": g.id,
        "object": "key_group",
        "name": g.name,
        "status": g.status.as_str(),
        "quota_usd": g.quota_limit.map(micros_to_usd),
        "used_usd": micros_to_usd(g.quota_used),
        "created_at": rfc3339(g.created_at),
    });
    if let Some(obj) = v.as_object_mut() {
        policy::view_into(obj, &g.policy);
    }
    v
}

/// A group's view with every limit's standing now and the ids of its keys.
pub async fn detail(
    store: &dyn Store,
    calendar: &Calendar,
    g: &GroupRecord,
) -> Result<Value, GatewayError> {
    let at = calendar.clock.now();
    let periods = calendar.periods(g.policy.time_zone.as_deref(), at);
    let now = store
        .standing(Scope::Group, &g.id, &periods, at.div_euclid(60))
        .await?;
    let keys: Vec<String> = store
        .list_keys()
        .await?
        .into_iter()
        .filter(|k| k.group.as_deref() == Some(g.id.as_str()))
        .map(|k| k.id)
        .collect();
    let mut v = view(g);
    v["limits"] = json!(policy::limits(
        "group.",
        g.quota_limit.map(|l| (l, g.quota_used)),
        &g.policy,
        &periods,
        &now
    ));
    v["in_flight"] = json!(now.in_flight);
    v["keys"] = json!(keys);
    Ok(v)
}

pub async fn create(store: &dyn Store, input: &GroupInput) -> Result<GroupRecord, GatewayError> {
    let id = input
        .id
        .clone()
        .ok_or_else(|| bad("id", "`id` is required to create a group"))?;
    policy::group_id("id", &id)?;
    let patch = input.to_patch()?;
    let mut g = GroupRecord {
        name: id.clone(),
        id,
        status: KeyStatus::Enabled,
        created_at: ids::now_secs(),
        quota_limit: None,
        quota_used: 0,
        policy: Default::default(),
    };
    patch.apply(&mut g);
    match store.create_group(&g).await {
        Ok(()) => Ok(g),
        Err(crate::store::StoreError::Conflict(_)) => {
            Err(bad("id", format!("A group with the id `{}` exists.", g.id)))
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn list(store: &dyn Store) -> Result<Value, GatewayError> {
    let groups = store.list_groups().await?;
    Ok(json!({"object": "list", "data": groups.iter().map(view).collect::<Vec<_>>()}))
}

pub async fn show(store: &dyn Store, id: &str) -> Result<GroupRecord, GatewayError> {
    store.get_group(id).await?.ok_or(GatewayError::NotFound)
}

pub async fn update(
    store: &dyn Store,
    id: &str,
    input: &GroupInput,
) -> Result<GroupRecord, GatewayError> {
    if input.id.as_deref().is_some_and(|new| new != id) {
        return Err(bad("id", "a group's `id` cannot change"));
    }
    let patch = input.to_patch()?;
    store
        .update_group(id, &patch)
        .await?
        .ok_or(GatewayError::NotFound)
}

/// Deletes a group no key belongs to any more.
pub async fn delete(store: &dyn Store, id: &str) -> Result<(), GatewayError> {
    let members = store
        .list_keys()
        .await?
        .into_iter()
        .filter(|k| k.group.as_deref() == Some(id))
        .count();
    if members > 0 {
        return Err(bad(
            "id",
            format!("{members} key(s) still belong to group `{id}`: move or revoke them first."),
        ));
    }
    if store.delete_group(id).await? {
        Ok(())
    } else {
        Err(GatewayError::NotFound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_input_validates() {
        let g =
            GroupInput::from_json(br#"{"id": "team-a", "quota_usd": 10, "budget_month_usd": 2}"#)
                .unwrap();
        let p = g.to_patch().unwrap();
        assert_eq!(p.quota_limit, Some(Some(10_000_000)));
        assert_eq!(p.policy.budget_month, Some(Some(2_000_000)));
        let e = GroupInput::from_json(br#"{"rpm": 5}"#).unwrap_err();
        assert_eq!(e.param(), Some("rpm"), "groups have no rpm");
        let e = GroupInput::from_json(br#"{"status": "paused"}"#)
            .unwrap()
            .to_patch()
            .unwrap_err();
        assert_eq!(e.param(), Some("status"));
    }
}
