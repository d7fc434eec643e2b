//! Endpoints the gateway answers itself, and the admin API.

pub mod admin;
pub mod keys;
pub mod local;
pub mod ops;

use crate::errors::GatewayError;
use crate::store::StoreError;

/// A store failure as the client sees it: 503 while the store is unreachable (it
/// reconnects by itself), 500 otherwise. The details go to the log only.
pub fn store_error(e: &StoreError) -> GatewayError {
    match e {
        StoreError::Unavailable(m) => {
            tracing::warn!(error = %m, "store unavailable");
            GatewayError::StoreUnavailable
        }
        StoreError::Conflict(m) | StoreError::Internal(m) => {
            tracing::error!(error = %m, "store error");
            GatewayError::Internal
        }
    }
}
