//! Identifiers: request ids (unique, time-sortable), and cheap randomness for choices
//! that need no secrecy. Secrets (API keys, task ids) use the OS CSPRNG in `auth::keys`.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut b = [0u8; 8];
    // A failed read leaves zeros; the clock and thread id still make seeds distinct.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    let t = now_nanos() as u64;
    u64::from_le_bytes(b) ^ t ^ 0x9E37_79B9_7F4A_7C15
}

/// FNV-1a: tiny, stable across builds and platforms (unlike the std hasher), and usable
/// at compile time; for fingerprints and deterministic ids, never for secrets.
pub const fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

/// wyrand: fast, statistically good, not for secrets.
pub fn fast_random() -> u64 {
    RNG.with(|s| {
        let v = s.get().wrapping_add(0xA076_1D64_78BD_642F);
        s.set(v);
        let t = (v as u128).wrapping_mul((v ^ 0xE703_7ED1_A0B4_28DB) as u128);
        ((t >> 64) ^ t) as u64
    })
}

/// Uniform in [0, 1).
pub fn unit_random() -> f64 {
    (fast_random() >> 11) as f64 / (1u64 << 53) as f64
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

pub fn now_ms() -> i64 {
    (now_nanos() / 1_000_000) as i64
}

pub fn now_secs() -> i64 {
    (now_nanos() / 1_000_000_000) as i64
}

/// Hashing for maps and sets keyed by a `u64` id that is numbered in order or already a
/// hash (a registration, a hashed request id): one multiply spreads it over the table's
/// hash bits, where SipHash would cost more than the whole look-up. Not for keys a
/// client chooses.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(self.0 ^ u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Builds [`IdHasher`]s: `HashMap<u64, V, IdHash>`.
pub type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// A request id: 12 hex digits of Unix milliseconds, then 16 random hex digits. Sorting
/// ids as strings sorts them by arrival time.
pub fn request_id() -> String {
    let mut id = [0u8; 28];
    put_hex(&mut id[..12], now_ms() as u64 & 0xFFFF_FFFF_FFFF);
    put_hex(&mut id[12..], fast_random());
    String::from_utf8_lossy(&id).into_owned()
}

/// Writes the low `out.len()` hex digits of `v` into `out`, zero-padded, lower case.
fn put_hex(out: &mut [u8], mut v: u64) {
    for b in out.iter_mut().rev() {
        *b = b"0123456789abcdef"[(v & 0xF) as usize];
        v >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_unique_and_sortable() {
        let a = request_id();
        let b = request_id();
        assert_eq!(a.len(), 28);
        assert_ne!(a, b);
        assert!(a[..12] <= b[..12]);
    }

    #[test]
    fn ids_numbered_in_order_spread_over_the_top_bits() {
        use std::hash::BuildHasher;
        // hashbrown tells entries apart by a hash's top 7 bits.
        let tags: std::collections::HashSet<u64> = (0..128u64)
            .map(|i| IdHash::default().hash_one(i) >> 57)
            .collect();
        assert!(tags.len() > 64, "{} tags of 128", tags.len());
    }

    #[test]
    fn request_ids_are_the_time_then_random_in_lower_hex() {
        let before = now_ms() as u64 & 0xFFFF_FFFF_FFFF;
        let id = request_id();
        let after = now_ms() as u64 & 0xFFFF_FFFF_FFFF;
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        let t = u64::from_str_radix(&id[..12], 16).unwrap();
        assert!((before..=after).contains(&t), "{id}");
        let mut out = [0u8; 6];
        put_hex(&mut out, 0xab);
        assert_eq!(&out, b"0000ab");
    }

    #[test]
    fn unit_random_in_range() {
        for _ in 0..1000 {
            let u = unit_random();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
