//! Reservation ids settled recently by this process, kept in memory so a reserve served
//! from memory can refuse an id that was already settled ([`super::ReserveDenied::Released`])
//! without a store round trip.
//!
//! Ids are kept as 64-bit hashes in two generations that rotate every [`GENERATION`]: an
//! id is remembered for at least one generation and at most two. That outlasts every retry
//! the gateway makes of a settle or a release (`billing` retries for ten minutes), which is
//! what the set is for; 16 bytes an id keeps it small at any request rate. A hash
//! collision (about 1 in 10^10 over a generation of a million ids) refuses one reserve as
//! released: a failed request, never money held or charged twice. The stores' durable
//! records (the `settled` table, Redis tombstones) stay the authority for settling.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher};
use std::time::{Duration, Instant};

/// How long a generation lasts: ids are remembered for 15 to 30 minutes.
pub const GENERATION: Duration = Duration::from_secs(15 * 60);

/// The sets hold hashes already: hashing them again with SipHash would be wasted.
type Hashes = HashSet<u64, crate::ids::IdHash>;

pub struct RecentIds {
    current: Hashes,
    previous: Hashes,
    since: Instant,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for RecentIds {
    fn default() -> Self {
        RecentIds {
            current: Hashes::default(),
            previous: Hashes::default(),
            since: Instant::now(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl RecentIds {
    fn hash(&self, key_id: &str, id: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        key_id.hash(&mut h);
        id.hash(&mut h);
        h.finish()
    }

    fn rotate(&mut self, now: Instant) {
        if now.duration_since(self.since) >= GENERATION {
            self.previous = std::mem::take(&mut self.current);
            self.since = now;
        }
    }

    pub fn insert(&mut self, key_id: &str, id: &str) {
        self.rotate(Instant::now());
        let h = self.hash(key_id, id);
        self.current.insert(h);
    }

    /// Inserts an id not remembered yet; `false` (nothing changed) when it is. One hash
    /// for the look-up and the insert.
    pub fn insert_new(&mut self, key_id: &str, id: &str) -> bool {
        self.rotate(Instant::now());
        let h = self.hash(key_id, id);
        !self.previous.contains(&h) && self.current.insert(h)
    }

    /// Forgets an id (a settle that did not commit).
    pub fn remove(&mut self, key_id: &str, id: &str) {
        let h = self.hash(key_id, id);
        self.current.remove(&h);
        self.previous.remove(&h);
    }

    pub fn contains(&self, key_id: &str, id: &str) -> bool {
        let h = self.hash(key_id, id);
        self.current.contains(&h) || self.previous.contains(&h)
    }

    /// Moves time on by `by` (tests of rotation).
    #[cfg(test)]
    pub fn age(&mut self, by: Duration) {
        self.since = self.since.checked_sub(by).unwrap_or(self.since);
        self.rotate(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_remembered_for_one_to_two_generations_per_key() {
        let mut r = RecentIds::default();
        r.insert("k", "a");
        assert!(r.contains("k", "a"));
        assert!(!r.contains("other", "a"), "an id is remembered for its key");
        r.age(GENERATION);
        assert!(r.contains("k", "a"), "still there one generation on");
        r.insert("k", "b");
        assert!(!r.insert_new("k", "a"), "a remembered id is not new");
        assert!(r.insert_new("k", "c"));
        assert!(!r.insert_new("k", "c"));
        r.age(GENERATION);
        assert!(!r.contains("k", "a"), "gone after two generations");
        assert!(r.contains("k", "b"));
    }
}
