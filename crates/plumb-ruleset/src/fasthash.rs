//! A fast hasher for the parsers' name indexes (chain and table names).
//!
//! The algorithm is FxHash's (rotate, xor, multiply), as used inside rustc: a 10k-service
//! dump looks up ~60k chain names and SipHash was 5% of parsing. It is not
//! collision-resistant; inputs are the node's own rulesets, and a crafted one could at
//! worst slow plumb down, not change its answers.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// `HashMap` with [`FxHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// FxHash's hasher (rustc's): fast on short keys such as chain names, not collision-resistant. Use
/// it through [`FastMap`].
#[derive(Clone, Copy, Debug, Default)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_equal_and_distinct_names_differ() {
        let mut m: FastMap<&str, usize> = FastMap::default();
        for (i, n) in ["KUBE-SVC-A", "KUBE-SVC-B", "KUBE-SEP-AAAAAAAAAAAAAAAA", ""]
            .iter()
            .enumerate()
        {
            m.insert(n, i);
        }
        assert_eq!(m.get("KUBE-SVC-B"), Some(&1));
        assert_eq!(m.get("KUBE-SEP-AAAAAAAAAAAAAAAA"), Some(&2));
        assert_eq!(m.get(""), Some(&3));
        assert_eq!(m.get("KUBE-SVC-C"), None);
    }
}
