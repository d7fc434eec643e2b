//! Who is calling: credential extraction per protocol (spec 5), key format and hashing,
//! the in-process key cache, and the per-key rules.

mod cache;
pub mod credentials;
pub mod keys;
mod policy;

pub use cache::KeyCache;
pub use credentials::Accepts;
pub use policy::{client_ip, AuthKey};

use crate::errors::GatewayError;
use crate::ids;
use crate::store::Store;
use http::HeaderMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Authenticates a request and applies the rules every path shares: 401 for a missing,
/// malformed or unknown key; 403 for a disabled or expired key or a disallowed address;
/// 429 past the key's per-minute limit. Takes the key cache and the store it needs, not
/// the gateway that holds them (the gateway is built from this module's cache).
pub async fn authenticate(
    cache: &KeyCache,
    store: &dyn Store,
    headers: &HeaderMap,
    query: Option<&str>,
    accepts: Accepts,
    ip: Option<IpAddr>,
) -> Result<Arc<AuthKey>, GatewayError> {
    let secret = credentials::extract(headers, query, accepts).ok_or(GatewayError::MissingKey)?;
    if !keys::is_well_formed(&secret) {
        return Err(GatewayError::MalformedKey);
    }
    let hash = keys::hash(&secret);
    let key = cache.get(&keys::id_from_hash(&hash), &hash).await?;
    key.check_active(ids::now_secs())?;
    key.check_ip(ip)?;
    if let Some(rpm) = key.rec.rpm {
        let allowed = store.rate_hit(&key.rec.id, rpm, ids::now_ms()).await?;
        if !allowed {
            return Err(GatewayError::RateLimited);
        }
    }
    Ok(key)
}
