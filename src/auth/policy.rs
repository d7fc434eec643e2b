//! Per-key rules (spec 2.1, 5.5): status, validity period, IP allowlist, model whitelist.

use super::room::Room;
use crate::config::parse_net;
use crate::errors::GatewayError;
use crate::store::{GroupRecord, KeyRecord, KeyStatus};
use http::HeaderMap;
use ipnet::IpNet;
use parking_lot::Mutex;
use std::net::IpAddr;

/// A key record with its allowlist parsed once, when it enters the cache.
#[derive(Debug)]
pub struct AuthKey {
    pub rec: KeyRecord,
    /// The key's group as read with it (for the time zone of the group's periods).
    pub group: Option<GroupRecord>,
    nets: Vec<IpNet>,
    /// The tokens and budget the key's last reserve on this instance counted: what an
    /// answer that reserves nothing tells of them.
    last: Mutex<Room>,
}

impl AuthKey {
    pub fn new(rec: KeyRecord) -> AuthKey {
        AuthKey::in_group(rec, None)
    }

    pub fn in_group(rec: KeyRecord, group: Option<GroupRecord>) -> AuthKey {
        let nets = rec.allow_ips.iter().filter_map(|s| parse_net(s)).collect();
        AuthKey {
            rec,
            group,
            nets,
            last: Mutex::new(Room::default()),
        }
    }

    /// Keeps what a reserve of this key counted, for the answers that count nothing.
    pub fn remember(&self, room: Room) {
        *self.last.lock() = Room {
            requests: None,
            ..room
        };
    }

    /// The tokens and budget the key's last reserve counted (nothing before any).
    pub fn last_room(&self) -> Room {
        *self.last.lock()
    }

    /// What this key's requests are charged per micro-USD of provider cost: its own
    /// multiplier, else its group's, else 1.
    pub fn price_multiplier(&self) -> crate::billing::Multiplier {
        self.rec
            .policy
            .price_multiplier_ppm
            .or_else(|| self.group.as_ref()?.policy.price_multiplier_ppm)
            .map_or(crate::billing::Multiplier::ONE, crate::billing::Multiplier)
    }

    /// Disabled and expired keys are rejected for every path, local ones included.
    pub fn check_active(&self, now_secs: i64) -> Result<(), GatewayError> {
        if self.rec.status != KeyStatus::Enabled {
            return Err(GatewayError::KeyDisabled);
        }
        match self.rec.expires_at {
            Some(t) if now_secs >= t => Err(GatewayError::KeyExpired),
            _ => Ok(()),
        }
    }

    pub fn check_ip(&self, ip: Option<IpAddr>) -> Result<(), GatewayError> {
        if self.nets.is_empty() {
            return Ok(());
        }
        let Some(ip) = ip.map(canonical) else {
            return Err(GatewayError::IpNotAllowed);
        };
        if self.nets.iter().any(|n| n.contains(&ip)) {
            Ok(())
        } else {
            Err(GatewayError::IpNotAllowed)
        }
    }

    pub fn allows_model(&self, model: &str) -> bool {
        self.rec.models.is_empty() || self.rec.models.iter().any(|m| m == model)
    }

    pub fn check_model(&self, model: &str) -> Result<(), GatewayError> {
        if self.allows_model(model) {
            Ok(())
        } else {
            Err(GatewayError::ModelNotAllowed(model.to_string()))
        }
    }
}

/// `::ffff:1.2.3.4` (an IPv4 peer on a dual-stack socket) is matched as `1.2.3.4`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client's address: the TCP peer, unless the peer is a trusted proxy, in which case
/// the right-most `X-Forwarded-For` entry that is not itself a trusted proxy. Every
/// `X-Forwarded-For` line counts, joined in order (RFC 9110 5.3): a proxy appends its
/// own line after whatever the client sent, so reading only the first line would
/// believe the client.
pub fn client_ip(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let peer = peer.map(canonical)?;
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return Some(peer);
    }
    let lines: Vec<_> = headers.get_all("x-forwarded-for").iter().collect();
    let mut last = peer;
    for line in lines.into_iter().rev() {
        // A line that is not text is garbled: it ends the chain of trust.
        let Ok(line) = line.to_str() else {
            return Some(last);
        };
        for part in line.rsplit(',') {
            match part.trim().parse::<IpAddr>() {
                Ok(ip) => {
                    let ip = canonical(ip);
                    if !is_trusted(&ip) {
                        return Some(ip);
                    }
                    last = ip;
                }
                // A garbled entry ends the chain of trust.
                Err(_) => return Some(last),
            }
        }
    }
    Some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(allow: &[&str], models: &[&str]) -> AuthKey {
        AuthKey::new(KeyRecord {
            id: "key_x".into(),
            hash: "h".into(),
            display: "sk-…".into(),
            name: "t".into(),
            status: KeyStatus::Enabled,
            created_at: 0,
            expires_at: Some(100),
            models: models.iter().map(|s| s.to_string()).collect(),
            allow_ips: allow.iter().map(|s| s.to_string()).collect(),
            rpm: None,
            quota_limit: None,
            quota_used: 0,
            group: None,
            policy: Default::default(),
        })
    }

    #[test]
    fn ip_allowlist_v4_v6_and_mapped() {
        let k = key(&["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"], &[]);
        assert!(k.check_ip(Some("10.1.2.3".parse().unwrap())).is_ok());
        assert!(k.check_ip(Some("::ffff:10.1.2.3".parse().unwrap())).is_ok());
        assert!(k.check_ip(Some("2001:db8::1".parse().unwrap())).is_ok());
        assert!(k.check_ip(Some("192.0.2.7".parse().unwrap())).is_ok());
        assert_eq!(
            k.check_ip(Some("192.0.2.8".parse().unwrap())),
            Err(GatewayError::IpNotAllowed)
        );
        assert!(key(&[], &[]).check_ip(None).is_ok());
    }

    #[test]
    fn expiry_and_models() {
        let k = key(&[], &["a"]);
        assert!(k.check_active(99).is_ok());
        assert_eq!(k.check_active(100), Err(GatewayError::KeyExpired));
        assert!(k.check_model("a").is_ok());
        assert!(k.check_model("b").is_err());
    }

    fn xff(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("x-forwarded-for", l.parse().unwrap());
        }
        h
    }

    #[test]
    fn forwarded_for_only_from_trusted() {
        let trusted = vec!["127.0.0.1/32".parse().unwrap()];
        let peer = Some("127.0.0.1".parse().unwrap());
        let other = Some("203.0.113.9".parse().unwrap());
        let ip = |s: &str| Some(s.parse().unwrap());
        assert_eq!(client_ip(other, &xff(&["1.1.1.1"]), &trusted), other);
        assert_eq!(
            client_ip(peer, &xff(&["1.1.1.1, 2.2.2.2"]), &trusted),
            ip("2.2.2.2")
        );
        assert_eq!(
            client_ip(peer, &xff(&["2.2.2.2, 127.0.0.1"]), &trusted),
            ip("2.2.2.2")
        );
        assert_eq!(client_ip(peer, &xff(&[]), &trusted), peer);
    }

    /// Lines are joined in order and walked from the right.
    #[test]
    fn forwarded_for_reads_every_line() {
        let trusted = vec!["127.0.0.1/32".parse().unwrap()];
        let peer = Some("127.0.0.1".parse().unwrap());
        let ip = |s: &str| Some(s.parse().unwrap());
        let lines = xff(&["1.1.1.1", "2.2.2.2, 127.0.0.1", "127.0.0.1"]);
        assert_eq!(client_ip(peer, &lines, &trusted), ip("2.2.2.2"));
        let lines = xff(&["9.9.9.9", "garbled", "127.0.0.1"]);
        assert_eq!(client_ip(peer, &lines, &trusted), peer);
    }
}
