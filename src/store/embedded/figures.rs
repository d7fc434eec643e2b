//! What the embedded store's ledger decides from, as committed (a key's and a group's
//! figures), and what a hold is on beyond its key's lifetime cap, as written with a
//! video task's reservation.

use crate::store::policy::{GroupRecord, Policy};
use crate::store::{KeyStatus, Micros};
use serde::{Deserialize, Serialize};

/// What a key's reservations are checked against, as committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub status: KeyStatus,
    pub expires_at: Option<i64>,
    pub limit: Option<Micros>,
    pub used: Micros,
    pub group: Option<String>,
    pub policy: Policy,
}

/// What a group's share of a reservation is checked against, as committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupFigures {
    pub status: KeyStatus,
    pub limit: Option<Micros>,
    pub used: Micros,
    pub policy: Policy,
}

/// The money counters a hold is on beyond its key's lifetime cap: the key's period
/// labels (each with the second its period ends), its group and the group's labels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct On {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<(String, i64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_periods: Vec<(String, i64)>,
}

/// What a task's reservation row keeps beyond its amount (`reservations.detail`, JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    #[serde(default)]
    pub tokens: u64,
    #[serde(default)]
    pub minute: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<On>,
}

/// A task's hold as read back from the `reservations` table.
#[derive(Debug, Clone)]
pub struct DurableHold {
    pub id: String,
    pub amount: Micros,
    pub expires: i64,
    pub detail: Detail,
}

impl GroupFigures {
    pub fn of(g: &GroupRecord) -> GroupFigures {
        GroupFigures {
            status: g.status,
            limit: g.quota_limit,
            used: g.quota_used,
            policy: g.policy.clone(),
        }
    }
}
