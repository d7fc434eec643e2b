//! Key management, shared by the admin HTTP API and the CLI: JSON in, JSON out, with the
//! field names of the admin API. Money crosses this boundary as decimal USD and is
//! stored as integer micro-USD.

use super::fields::{
    bad, micros_to_usd, name_and_status, nullable, parse_object, rfc3339, usd_field,
};
use super::policy::{PolicyInput, POLICY_FIELDS};
use crate::auth::keys;
use crate::config::parse_net;
use crate::errors::GatewayError;
use crate::ids;
use crate::store::{KeyPatch, KeyRecord, KeyStatus, Store};
use chrono::DateTime;
use serde::Deserialize;
use serde_json::{json, Value};

/// Create and update input. On update, an absent field is left alone and `null` clears
/// an optional one (`quota_usd: null` = unlimited).
#[derive(Debug, Default, Deserialize)]
pub struct KeyInput {
    pub name: Option<String>,
    pub status: Option<String>,
    pub models: Option<Vec<String>>,
    #[serde(default, deserialize_with = "nullable")]
    pub quota_usd: Option<Option<f64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub expires_at: Option<Option<String>>,
    pub allow_ips: Option<Vec<String>>,
    #[serde(default, deserialize_with = "nullable")]
    pub rpm: Option<Option<u32>>,
    /// The group the key's requests must fit as well; `null`: none.
    #[serde(default, deserialize_with = "nullable")]
    pub group: Option<Option<String>>,
    #[serde(flatten)]
    pub policy: PolicyInput,
}

/// The fields a key takes besides [`POLICY_FIELDS`].
const KEY_FIELDS: &[&str] = &[
    "name",
    "status",
    "models",
    "quota_usd",
    "expires_at",
    "allow_ips",
    "rpm",
    "group",
];

impl KeyInput {
    pub fn from_json(body: &[u8]) -> Result<KeyInput, GatewayError> {
        let allowed: Vec<&str> = KEY_FIELDS.iter().chain(POLICY_FIELDS).copied().collect();
        parse_object(body, "key", &allowed)
    }

    /// Validates every field into a patch.
    pub fn to_patch(&self) -> Result<KeyPatch, GatewayError> {
        let mut p = KeyPatch::default();
        (p.name, p.status) = name_and_status(&self.name, &self.status)?;
        if let Some(models) = &self.models {
            for (i, m) in models.iter().enumerate() {
                if m.trim().is_empty() {
                    return Err(bad(
                        &format!("models[{i}]"),
                        "model names must not be empty",
                    ));
                }
            }
            p.models = Some(models.clone());
        }
        p.quota_limit = usd_field("quota_usd", self.quota_usd)?;
        if let Some(e) = &self.expires_at {
            p.expires_at = Some(match e {
                None => None,
                Some(s) => Some(
                    DateTime::parse_from_rfc3339(s)
                        .map_err(|e| {
                            bad(
                                "expires_at",
                                format!("`expires_at` must be an RFC 3339 time: {e}"),
                            )
                        })?
                        .timestamp(),
                ),
            });
        }
        if let Some(ips) = &self.allow_ips {
            let mut norm = Vec::with_capacity(ips.len());
            for (i, s) in ips.iter().enumerate() {
                let net = parse_net(s).ok_or_else(|| {
                    bad(
                        &format!("allow_ips[{i}]"),
                        format!("`{s}` is not an IP address or CIDR"),
                    )
                })?;
                norm.push(net.to_string());
            }
            p.allow_ips = Some(norm);
        }
        if let Some(r) = self.rpm {
            if r == Some(0) {
                return Err(bad("rpm", "`rpm` must be at least 1, or null for no limit"));
            }
            p.rpm = Some(r);
        }
        if let Some(g) = &self.group {
            if let Some(id) = g {
                super::policy::group_id("group", id)?;
            }
            p.group = Some(g.clone());
        }
        p.policy = self.policy.to_patch()?;
        Ok(p)
    }
}

/// The public view of a key: never the secret or its hash.
pub fn view(r: &KeyRecord) -> Value {
    let mut v = json!({
        "id": r.id,
        "object": "api_key",
        "name": r.name,
        "key_display": r.display,
        "status": r.status.as_str(),
        "models": r.models,
        "quota_usd": r.quota_limit.map(micros_to_usd),
        "used_usd": micros_to_usd(r.quota_used),
        "expires_at": r.expires_at.map(rfc3339),
        "allow_ips": r.allow_ips,
        "rpm": r.rpm,
        "group": r.group,
        "created_at": rfc3339(r.created_at),
    });
    if let Some(obj) = v.as_object_mut() {
        super::policy::view_into(obj, &r.policy);
    }
    v
}

/// A key may name only a group that exists.
async fn check_group(store: &dyn Store, patch: &KeyPatch) -> Result<(), GatewayError> {
    if let Some(Some(g)) = &patch.group {
        if store.get_group(g).await?.is_none() {
            return Err(GatewayError::bad_request(
                Some("group"),
                format!("There is no group `{g}`."),
            ));
        }
    }
    Ok(())
}

/// Creates a key; the secret is in the returned view's `key`, and nowhere else, ever.
pub async fn create(
    store: &dyn Store,
    input: &KeyInput,
) -> Result<(KeyRecord, Value), GatewayError> {
    let patch = input.to_patch()?;
    check_group(store, &patch).await?;
    // ring's error is a unit: it says only that the system's random source failed.
    let secret = keys::generate().map_err(|_| {
        GatewayError::internal("generating a key secret: the system random source failed")
    })?;
    let hash = keys::hash(&secret);
    let mut rec = KeyRecord {
        id: keys::id_from_hash(&hash),
        hash,
        display: keys::display(&secret),
        name: String::new(),
        status: KeyStatus::Enabled,
        created_at: ids::now_secs(),
        expires_at: None,
        models: Vec::new(),
        allow_ips: Vec::new(),
        rpm: None,
        quota_limit: None,
        quota_used: 0,
        group: None,
        policy: Default::default(),
    };
    patch.apply(&mut rec);
    store.create_key(&rec).await?;
    let mut v = view(&rec);
    v["key"] = Value::String(secret);
    Ok((rec, v))
}

pub async fn list(store: &dyn Store) -> Result<Value, GatewayError> {
    let keys = store.list_keys().await?;
    Ok(json!({"object": "list", "data": keys.iter().map(view).collect::<Vec<_>>()}))
}

pub async fn show(store: &dyn Store, id: &str) -> Result<KeyRecord, GatewayError> {
    store.get_key(id).await?.ok_or(GatewayError::KeyNotFound)
}

pub async fn update(
    store: &dyn Store,
    id: &str,
    input: &KeyInput,
) -> Result<KeyRecord, GatewayError> {
    let patch = input.to_patch()?;
    check_group(store, &patch).await?;
    store
        .update_key(id, &patch)
        .await?
        .ok_or(GatewayError::KeyNotFound)
}

/// Deletes a key and, with it, the responses it stored.
pub async fn revoke(store: &dyn Store, id: &str) -> Result<(), GatewayError> {
    if !store.delete_key(id).await? {
        return Err(GatewayError::KeyNotFound);
    }
    delete_responses(store, id).await?;
    Ok(())
}

/// Deletes the responses a key stored (`previous_response_id`'s conversations); how many.
pub async fn delete_responses(store: &dyn Store, id: &str) -> Result<u64, GatewayError> {
    match store.responses() {
        Some(rs) => Ok(rs.delete_key_responses(id).await?),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_versus_absent() {
        let i = KeyInput::from_json(br#"{"quota_usd": null, "rpm": 5}"#).unwrap();
        let p = i.to_patch().unwrap();
        assert_eq!(p.quota_limit, Some(None));
        assert_eq!(p.rpm, Some(Some(5)));
        assert_eq!(p.expires_at, None);
    }

    #[test]
    fn validation_names_the_field() {
        let e = KeyInput::from_json(br#"{"allow_ips": ["10.0.0.0/8", "nope"]}"#)
            .unwrap()
            .to_patch()
            .unwrap_err();
        assert_eq!(e.param(), Some("allow_ips[1]"));
        let e = KeyInput::from_json(br#"{"quota_usd": -1}"#)
            .unwrap()
            .to_patch()
            .unwrap_err();
        assert_eq!(e.param(), Some("quota_usd"));
        let e = KeyInput::from_json(br#"{"expires_at": "tomorrow"}"#)
            .unwrap()
            .to_patch()
            .unwrap_err();
        assert_eq!(e.param(), Some("expires_at"));
        assert!(KeyInput::from_json(br#"{"quota": 1}"#).is_err());
    }
}
