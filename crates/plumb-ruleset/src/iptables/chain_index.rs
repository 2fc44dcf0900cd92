//! The iptables reader's chain-by-name index: chain name -> index in the table's
//! chains, in 4-byte slots, 8 slots for every 7 chains (4.6 bytes a chain).
//!
//! The index is alive while the last rules of a table are read, which is when reading
//! a dump peaks: its size adds to the peak. A general hash table (hashbrown) takes 5
//! bytes a slot and a power of two of slots, up to 11.2 bytes a chain: 0.63 MiB for
//! the 58k nat chains of a 10k-service dump, where this takes 0.25 MiB.
//!
//! How: open addressing with linear probing over a table of `u32` slots sized to the
//! chains it holds (not a power of two). A slot holds the chain's index plus one (0 is
//! empty) in its low bits and a tag of the name's hash in the bits the indexes leave
//! free (16 of them up to 65k slots), so that a probe compares a name only when the
//! tags agree. Names are not stored: they are the chains' own, looked up by index.

use crate::model::Chain;

/// Chain name -> index in the table's chains (see the module documentation).
#[derive(Default)]
pub(crate) struct ChainIndex {
    /// 0: empty; else `tag << index_bits | (index + 1)`.
    slots: Vec<u32>,
    /// Chains held.
    len: usize,
    /// Bits of a slot that hold `index + 1`: every index + 1 is below `slots.len()`.
    index_bits: u32,
}

/// The hash of a chain name: FxHash, then mixed (splitmix64's finaliser) so that both
/// its high bits (the home slot) and its low bits (the tag) depend on every byte.
fn hash(name: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    let h = BuildHasherDefault::<crate::fasthash::FxHasher>::default().hash_one(name);
    let h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Sizes of the objects mimalloc places in shared 4 MiB pages (its "large" objects).
const LARGE_OBJECTS: std::ops::Range<usize> = (64 << 10)..(512 << 10);

fn name_of(chains: &[Chain], i: usize) -> &str {
    chains.get(i).map_or("", |c| &c.name)
}

impl ChainIndex {
    fn index_mask(&self) -> u64 {
        (1u64 << self.index_bits) - 1
    }

    /// The slot a name with hash `h` starts probing at.
    fn home(&self, h: u64) -> usize {
        // Multiply-shift maps the hash's high 32 bits onto the slots (fewer than 2^32).
        (((h >> 32) * self.slots.len() as u64) >> 32) as usize
    }

    /// The tag of a name with hash `h`, placed above the index bits (0 when the
    /// indexes take all 32 bits).
    fn tag(&self, h: u64) -> u64 {
        (h << self.index_bits) & 0xffff_ffff & !self.index_mask()
    }

    fn next(&self, p: usize) -> usize {
        if p + 1 == self.slots.len() { 0 } else { p + 1 }
    }

    /// The slot holding `name` (whose hash is `h`), or the empty slot that ends its
    /// probe sequence.
    fn find_slot(&self, chains: &[Chain], name: &str, h: u64) -> Result<usize, usize> {
        if self.slots.is_empty() {
            return Err(0);
        }
        let tag = self.tag(h);
        let mut p = self.home(h);
        loop {
            let s = u64::from(self.slots[p]);
            if s == 0 {
                return Err(p);
            }
            if s & !self.index_mask() == tag
                && name_of(chains, (s & self.index_mask()) as usize - 1) == name
            {
                return Ok(p);
            }
            p = self.next(p);
        }
    }

    /// The index of the chain named `name`.
    pub(crate) fn get(&self, chains: &[Chain], name: &str) -> Option<usize> {
        let p = self.find_slot(chains, name, hash(name)).ok()?;
        Some((u64::from(self.slots[p]) & self.index_mask()) as usize - 1)
    }

    /// Records that the chain named `name` (not in the index) is about to be
    /// `chains[i]`; the chains before it are in `chains`, all of them in the index.
    pub(crate) fn insert(&mut self, chains: &[Chain], name: &str, i: usize) {
        self.reserve(chains, 1);
        let h = hash(name);
        if let Err(p) = self.find_slot(chains, name, h) {
            self.slots[p] = (self.tag(h) | (i as u64 + 1)) as u32;
            self.len += 1;
        }
    }

    /// Room for `n` more chains without growing.
    pub(crate) fn reserve(&mut self, chains: &[Chain], n: usize) {
        let need = self.len.saturating_add(n);
        // At most 7/8 full: linear probing stays short, and a probe skips a slot whose
        // tag differs without reading its chain.
        if need.saturating_mul(8) <= self.slots.len().saturating_mul(7) {
            return;
        }
        let grown = if self.len == 0 {
            need
        } else {
            need.max(self.len.saturating_mul(2))
        };
        // The least number of slots at most 7/8 full with `grown` chains.
        let want = (grown.saturating_mul(8) / 7)
            .saturating_add(1)
            .min(u32::MAX as usize);
        self.rebuild(chains, want);
    }

    /// A table of `slots` slots holding the `self.len` chains first in `chains`.
    fn rebuild(&mut self, chains: &[Chain], slots: usize) {
        let held = self.len.min(chains.len());
        // A table past mimalloc's large objects (64-512 KiB) gets pages of its own: the
        // part past `slots` is never touched (never resident), and freed, they go back
        // to the system. A large object shares a 4 MiB page with the other blocks of
        // its size (a long chain's rules, while they grow), which stays resident while
        // any of them lives: 0.3 MiB more at a 10k-service dump's peak.
        let room = if slots * 4 > LARGE_OBJECTS.start {
            slots.max(LARGE_OBJECTS.end / 4 + 1)
        } else {
            slots
        };
        self.slots = Vec::with_capacity(room);
        self.slots.resize(slots, 0);
        // Every index + 1 (at most `held`, below `slots`) fits in `index_bits`.
        self.index_bits = usize::BITS - slots.leading_zeros();
        self.len = 0;
        for (i, c) in chains.iter().enumerate().take(held) {
            let h = hash(&c.name);
            if let Err(p) = self.find_slot(chains, &c.name, h) {
                self.slots[p] = (self.tag(h) | (i as u64 + 1)) as u32;
                self.len += 1;
            }
        }
    }

    /// Removes the chain named `name` and renumbers the chains after it (the caller
    /// removes it from `chains` next).
    pub(crate) fn remove(&mut self, chains: &[Chain], name: &str) -> Option<usize> {
        let mut hole = self.find_slot(chains, name, hash(name)).ok()?;
        let mask = self.index_mask();
        let i = u64::from(self.slots[hole]) & mask;
        self.slots[hole] = 0;
        self.len -= 1;
        // Backward-shift deletion: a later slot of the same run whose home is not
        // between the hole and it (cyclically) moves into the hole, so that every
        // name's probe sequence still reaches it.
        let mut p = self.next(hole);
        while self.slots[p] != 0 {
            let s = u64::from(self.slots[p]);
            let home = self.home(hash(name_of(chains, (s & mask) as usize - 1)));
            let between = if hole <= p {
                hole < home && home <= p
            } else {
                hole < home || home <= p
            };
            if !between {
                self.slots[hole] = self.slots[p];
                self.slots[p] = 0;
                hole = p;
            }
            p = self.next(p);
        }
        for s in &mut self.slots {
            if u64::from(*s) & mask > i {
                *s -= 1;
            }
        }
        Some(i as usize - 1)
    }

    /// Bytes of slots (the room past them is never touched).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Location;

    fn chain(name: &str) -> Chain {
        Chain::new(name, None, Location { line: 1, column: 1 })
    }

    /// Mirrors the reader's use: insert before push, remove before remove.
    struct Table {
        chains: Vec<Chain>,
        index: ChainIndex,
    }

    impl Table {
        fn add(&mut self, name: &str) {
            assert_eq!(self.index.get(&self.chains, name), None, "{name}");
            let i = self.chains.len();
            self.index.insert(&self.chains, name, i);
            self.chains.push(chain(name));
        }
        fn remove(&mut self, name: &str) -> Option<usize> {
            let i = self.index.remove(&self.chains, name)?;
            self.chains.remove(i);
            Some(i)
        }
        fn check(&self) {
            assert_eq!(self.index.len, self.chains.len());
            for (i, c) in self.chains.iter().enumerate() {
                assert_eq!(self.index.get(&self.chains, &c.name), Some(i), "{}", c.name);
            }
        }
    }

    #[test]
    fn finds_every_chain_through_growth_and_removal() {
        let mut t = Table {
            chains: Vec::new(),
            index: ChainIndex::default(),
        };
        assert_eq!(t.index.get(&t.chains, "INPUT"), None);
        assert_eq!(t.remove("INPUT"), None);
        // Grown one chain at a time (no reservation): a restore payload's -N lines.
        for k in 0..3000 {
            t.add(&format!("KUBE-SEP-{k:016X}"));
        }
        t.check();
        assert_eq!(t.index.get(&t.chains, "KUBE-SEP-MISSING"), None);
        // Removing renumbers the chains after the removed one and keeps every probe
        // sequence whole (removals from runs of all lengths, wrapping included).
        for k in (0..3000).step_by(3) {
            let name = format!("KUBE-SEP-{k:016X}");
            let at = t.chains.iter().position(|c| *c.name == name);
            assert_eq!(t.remove(&name), at);
            assert_eq!(t.index.get(&t.chains, &name), None);
        }
        t.check();
        for k in 0..500 {
            t.add(&format!("KUBE-SVC-{k}"));
        }
        t.check();
    }

    /// The index takes under 5 bytes a chain when the table says how many it declares
    /// (hashbrown's took 11.2 for 58,409 chains, a 10k-service dump's nat table).
    #[test]
    fn a_reserved_index_takes_under_5_bytes_a_chain() {
        for n in [1usize, 7, 1000, 57_344, 58_409, 100_000] {
            let mut t = Table {
                chains: Vec::with_capacity(n),
                index: ChainIndex::default(),
            };
            t.index.reserve(&t.chains, n);
            let reserved = t.index.bytes();
            for k in 0..n {
                t.add(&format!("KUBE-SEP-{k:016X}"));
            }
            assert_eq!(t.index.bytes(), reserved, "{n} chains: grew");
            if n >= 1000 {
                let per_chain = reserved as f64 / n as f64;
                assert!(per_chain < 5.0, "{n} chains: {per_chain:.2} bytes a chain");
            }
            t.check();
        }
    }
}
