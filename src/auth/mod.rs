//! Who is calling: credential extraction per protocol (spec 5), key format and hashing,
//! the in-process key cache, and the per-key rules.

mod cache;
pub mod credentials;
pub mod keys;
mod policy;
pub mod room;

pub use cache::KeyCache;
pub use credentials::Accepts;
pub use policy::{client_ip, AuthKey};
pub use room::Room;

use crate::errors::GatewayError;
use crate::ids;
use crate::store::Store;
use http::HeaderMap;
use std::net::IpAddr;
use std::sync::Arc;

/// What a request presents: its credentials, its address, and when it arrived on the
/// gateway's limits clock (the minute `rpm` counts in).
pub struct Caller<'a> {
    pub headers: &'a HeaderMap,
    pub query: Option<&'a str>,
    pub accepts: Accepts,
    pub ip: Option<IpAddr>,
    pub now_ms: i64,
}

/// Authenticates a request and applies the rules every path shares: 401 for a missing,
/// malformed or unknown key; 403 for a disabled or expired key or a disallowed address;
/// 429 past the key's per-minute limit. Takes the key cache and the store it needs, not
/// the gateway that holds them (the gateway is built from this module's cache). `room`
/// gets what the count against `rpm` left (on a 429 too: it says when to come back).
pub async fn authenticate(
    cache: &KeyCache,
    store: &dyn Store,
    caller: Caller<'_>,
    room: &mut Room,
) -> Result<Arc<AuthKey>, GatewayError> {
    let Caller {
        headers,
        query,
        accepts,
        ip,
        now_ms,
    } = caller;
    let secret = credentials::extract(headers, query, accepts).ok_or(GatewayError::MissingKey)?;
    if !keys::is_well_formed(&secret) {
        return Err(GatewayError::MalformedKey);
    }
    let hash = keys::hash(&secret);
    let key = cache.get(&keys::id_from_hash(&hash), &hash).await?;
    key.check_active(ids::now_secs())?;
    key.check_ip(ip)?;
    if let Some(rpm) = key.rec.rpm {
        let count = store.rate_take(&key.rec.id, rpm, now_ms).await?;
        room.count_requests(rpm, &count, now_ms);
        if !count.admitted {
            return Err(GatewayError::RateLimited);
        }
    }
    Ok(key)
}
