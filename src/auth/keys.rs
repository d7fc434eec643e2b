//! Key format: `sk-` + 48 base62 characters from the OS CSPRNG (about 285 bits).
//! Only `sha256(key)` is stored; the public id is a prefix of that hash.

use ring::digest;
use ring::rand::{SecureRandom, SystemRandom};

const PREFIX: &str = "sk-";
const BODY_LEN: usize = 48;
const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A new key. Fails only if the OS random source fails.
pub fn generate() -> Result<String, ring::error::Unspecified> {
    random_base62(BODY_LEN).map(|body| format!("{PREFIX}{body}"))
}

/// `n` base62 characters, without modulo bias (bytes >= 248 are redrawn).
pub fn random_base62(n: usize) -> Result<String, ring::error::Unspecified> {
    let rng = SystemRandom::new();
    let mut out = String::with_capacity(n);
    let mut buf = [0u8; 64];
    while out.len() < n {
        rng.fill(&mut buf)?;
        for b in buf {
            if b < 248 && out.len() < n {
                out.push(ALPHABET[(b % 62) as usize] as char);
            }
        }
    }
    Ok(out)
}

pub fn is_well_formed(key: &str) -> bool {
    key.len() == PREFIX.len() + BODY_LEN
        && key.starts_with(PREFIX)
        && key.as_bytes()[PREFIX.len()..]
            .iter()
            .all(u8::is_ascii_alphanumeric)
}

/// Lowercase hex SHA-256 of the key.
pub fn hash(key: &str) -> String {
    let d = digest::digest(&digest::SHA256, key.as_bytes());
    // Into bytes, then one string: `hex::encode` pushes its 64 digits one `char` at a time.
    let mut out = [0u8; 64];
    match hex::encode_to_slice(d.as_ref(), &mut out) {
        Ok(()) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => hex::encode(d),
    }
}

/// The public id of a key: the first 96 bits of its hash. Derivable from the key without
/// a lookup, and useless for recovering it.
pub fn id_from_hash(hash: &str) -> String {
    format!("key_{}", &hash[..24.min(hash.len())])
}

/// `sk-abc…wxyz`: enough to recognise a key, not enough to use it.
pub fn display(key: &str) -> String {
    if key.len() < 10 {
        return "sk-…".into();
    }
    format!("{}…{}", &key[..6], &key[key.len() - 4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_well_formed_and_distinct() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert!(is_well_formed(&a), "{a}");
        assert_ne!(a, b);
        assert_eq!(a.len(), 51);
    }

    #[test]
    fn malformed_keys() {
        assert!(!is_well_formed("sk-short"));
        assert!(!is_well_formed(&format!("pk-{}", "a".repeat(48))));
        assert!(!is_well_formed(&format!("sk-{}!", "a".repeat(47))));
        assert!(is_well_formed(&format!("sk-{}", "a".repeat(48))));
    }

    #[test]
    fn id_and_display() {
        let k = format!("sk-abc{}wxyz", "0".repeat(41));
        let h = hash(&k);
        assert_eq!(h.len(), 64);
        assert_eq!(id_from_hash(&h).len(), 28);
        assert_eq!(display(&k), "sk-abc…wxyz");
    }

    #[test]
    fn a_keys_hash_is_its_sha256_in_lower_hex() {
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
