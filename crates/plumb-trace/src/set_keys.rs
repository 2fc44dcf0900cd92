//! The exact keys of a compiled nft set ([`crate::ir::CompiledSet`]): every key encoded
//! (by [`crate::ir::encode_key`]) into one byte buffer and found through a hash table
//! of key numbers. Keys are bytes here; this module knows nothing of atoms.
//!
//! Why not a `HashMap<Vec<Atom>, usize>`: a kube-proxy `service-ips` element
//! (`address . protocol . port`) cost ~130 bytes that way (a 96-byte vector of three
//! 32-byte atoms, its table slot and the table's growth), ~10k of them on a
//! 10k-service node, and `plumb check` compiles that map and `cluster-ips` for its
//! forward-drop trace at its memory peak. Encoded, the same key is 10 bytes plus about
//! 14 of bookkeeping (its end, its element, its table slot).

use std::hash::{BuildHasher, BuildHasherDefault};

/// Key `k` of a buffer of keys (see [`ExactKeys`]).
fn key_in<'a>(bytes: &'a [u8], ends: &[u32], k: u32) -> &'a [u8] {
    let k = k as usize;
    let start = if k == 0 { 0 } else { ends[k - 1] as usize };
    &bytes[start..ends[k] as usize]
}

/// FxHash of the encoding, then mixed (splitmix64's finalizer): FxHash's low bits
/// depend only on the low bits of what it hashed last, and the table picks buckets
/// by the low bits. Unmixed, the keys of a kube-proxy map (`10.43.x.y . tcp . port`,
/// the address's varying bytes in the middle of the first word) crowded into a few
/// buckets and a lookup compared dozens of keys.
fn hash(bytes: &[u8]) -> u64 {
    let h = BuildHasherDefault::<plumb_ruleset::fasthash::FxHasher>::default().hash_one(bytes);
    let h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Exact keys to the element each one belongs to (the first element of a key wins).
#[derive(Clone, Debug, Default)]
pub(crate) struct ExactKeys {
    /// Every key's encoding, key after key.
    bytes: Vec<u8>,
    /// Where key `k` ends in `bytes`; it starts where key `k - 1` ends (or at 0).
    ends: Vec<u32>,
    /// The element of key `k`.
    elements: Vec<u32>,
    /// Key numbers, by the hash of their encoding.
    table: hashbrown::HashTable<u32>,
}

impl ExactKeys {
    /// Room for `keys` keys, so that a set of known size is built without regrowing.
    pub(crate) fn with_capacity(keys: usize) -> ExactKeys {
        ExactKeys {
            bytes: Vec::with_capacity(keys * 8),
            ends: Vec::with_capacity(keys),
            elements: Vec::with_capacity(keys),
            table: hashbrown::HashTable::with_capacity(keys),
        }
    }

    /// Adds the key that `encode` writes as a key of `element`, unless an earlier
    /// element has that key. False when the key could not be held (past 4 GiB of keys,
    /// not a set a node holds): the set must then answer a miss as "cannot tell".
    #[must_use]
    pub(crate) fn insert(&mut self, encode: impl FnOnce(&mut Vec<u8>), element: usize) -> bool {
        let start = self.bytes.len();
        encode(&mut self.bytes);
        let numbers = (
            u32::try_from(self.bytes.len()),
            u32::try_from(element),
            u32::try_from(self.ends.len()),
        );
        let h = hash(&self.bytes[start..]);
        let new = &self.bytes[start..];
        let seen = self
            .table
            .find(h, |&k| key_in(&self.bytes, &self.ends, k) == new)
            .is_some();
        let (Ok(end), Ok(element), Ok(k)) = numbers else {
            self.bytes.truncate(start);
            return false;
        };
        if seen {
            self.bytes.truncate(start);
            return true;
        }
        self.ends.push(end);
        self.elements.push(element);
        self.table
            .insert_unique(h, k, |&k| hash(key_in(&self.bytes, &self.ends, k)));
        true
    }

    /// The element whose key is the one `encode` writes, if any.
    pub(crate) fn get(&self, encode: impl FnOnce(&mut Vec<u8>)) -> Option<usize> {
        if self.ends.is_empty() {
            return None;
        }
        let mut wanted = Vec::with_capacity(32);
        encode(&mut wanted);
        let k = self.table.find(hash(&wanted), |&k| {
            key_in(&self.bytes, &self.ends, k) == wanted
        })?;
        Some(self.elements[*k as usize] as usize)
    }

    /// How many keys there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Atom, encode_key};
    use std::net::IpAddr;

    trait Keys {
        fn put(&mut self, atoms: &[Atom], element: usize) -> bool;
        fn find(&self, atoms: &[Atom]) -> Option<usize>;
    }

    impl Keys for ExactKeys {
        fn put(&mut self, atoms: &[Atom], element: usize) -> bool {
            self.insert(|out| encode_key(atoms, out), element)
        }
        fn find(&self, atoms: &[Atom]) -> Option<usize> {
            self.get(|out| encode_key(atoms, out))
        }
    }

    fn addr(s: &str) -> Atom {
        Atom::Addr(s.parse().unwrap())
    }

    #[test]
    fn keys_are_found_and_the_first_element_of_a_key_wins() {
        let mut keys = ExactKeys::default();
        let a = [addr("10.43.0.10"), Atom::Num(6), Atom::Num(53)];
        let b = [addr("10.43.0.10"), Atom::Num(17), Atom::Num(53)];
        assert!(keys.put(&a, 0));
        assert!(keys.put(&b, 1));
        assert!(keys.put(&a, 2));
        assert_eq!(keys.len(), 2);
        assert_eq!(keys.find(&a), Some(0));
        assert_eq!(keys.find(&b), Some(1));
        assert_eq!(keys.find(&[addr("10.43.0.10"), Atom::Num(6)]), None);
        assert_eq!(ExactKeys::default().find(&a), None);
    }

    #[test]
    fn encodings_of_different_keys_differ() {
        // Sequences that a careless encoding would confuse: a number's bytes against
        // an address's, names that run into each other, v4 against v4-mapped v6.
        let keys: Vec<Vec<Atom>> = vec![
            vec![Atom::Num(0x0a2b_000a)],
            vec![addr("10.43.0.10")],
            vec![addr("::ffff:10.43.0.10")],
            vec![Atom::Name("ab".into()), Atom::Name("c".into())],
            vec![Atom::Name("a".into()), Atom::Name("bc".into())],
            vec![Atom::Num(127)],
            vec![Atom::Num(128)],
            vec![Atom::Num(u64::MAX)],
            vec![Atom::Num(1), Atom::Num(2)],
            vec![Atom::Num(0x0102)],
            vec![],
        ];
        let mut set = ExactKeys::default();
        for (i, k) in keys.iter().enumerate() {
            assert!(set.put(k, i));
        }
        assert_eq!(set.len(), keys.len());
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(set.find(k), Some(i), "{k:?}");
        }
    }

    #[test]
    fn many_keys_grow_the_table_and_stay_found() {
        let mut set = ExactKeys::with_capacity(4);
        let key = |i: u32| {
            [
                Atom::Addr(IpAddr::from(i.to_be_bytes())),
                Atom::Num(i as u64),
            ]
        };
        for i in 0..5000u32 {
            assert!(set.put(&key(i), i as usize));
        }
        for i in (0..5000u32).step_by(7) {
            assert_eq!(set.find(&key(i)), Some(i as usize));
        }
        assert_eq!(set.find(&key(5000)), None);
    }
}
