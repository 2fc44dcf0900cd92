//! The chains of one table, by name, for the listener's hot path: one lookup per
//! notification, usually without hashing.
//!
//! Entries live in a vector in the order they were first seen; a hash index of
//! positions finds a name. The kernel sends a transaction chain by chain, in the
//! order the writer wrote them, and a sync writes chains in the same order each
//! time: so the chain of a notification is nearly always the previous one's or the
//! next entry. A cursor remembers the last hit and those two are compared first (the
//! vector is read in sequence, which the CPU prefetches); the index is the fallback.
//! The prediction only saves work: every hit is a full name comparison.
//!
//! Measured on a replayed 10k-service load, sync, revert and repair (benches/apply.rs):
//! a `HashMap<ChainName, _>` spent most of its time waiting for the random slot of
//! each lookup.

use crate::chain_name::ChainName;
use plumb_ruleset::fasthash::FxHasher;
use std::hash::{BuildHasher, BuildHasherDefault};

/// A map from chain name to `V` that keeps entries in the order they were first
/// inserted and finds the next notification's chain by a name compare at the cursor
/// before it hashes (see the module doc).
#[derive(Clone, Debug)]
pub struct ChainTable<V> {
    entries: Vec<(ChainName, V)>,
    /// Positions in `entries`, hashed by name.
    index: hashbrown::HashTable<u32>,
    /// Position of the last name found.
    cursor: usize,
}

impl<V> Default for ChainTable<V> {
    fn default() -> Self {
        ChainTable {
            entries: Vec::new(),
            index: hashbrown::HashTable::new(),
            cursor: 0,
        }
    }
}

fn hash(name: &str) -> u64 {
    BuildHasherDefault::<FxHasher>::default().hash_one(name)
}

impl<V> ChainTable<V> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, name: &str) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash(name), |&i| entries[i as usize].0.as_str() == name)
            .map(|&i| i as usize)
    }

    /// Position of `name`, trying the cursor and the entry after it first.
    fn predicted_position(&mut self, name: &str) -> Option<usize> {
        for i in [self.cursor, self.cursor + 1] {
            if self.entries.get(i).is_some_and(|(n, _)| n.as_str() == name) {
                self.cursor = i;
                return Some(i);
            }
        }
        let i = self.position(name)?;
        self.cursor = i;
        Some(i)
    }

    /// The entry of `name` (by the index; the cursor does not move).
    pub fn get(&self, name: &str) -> Option<&V> {
        Some(&self.entries[self.position(name)?].1)
    }

    /// The entry of `name`, created with `V::default()` when absent.
    pub fn get_or_default(&mut self, name: &str) -> &mut V
    where
        V: Default,
    {
        let i = match self.predicted_position(name) {
            Some(i) => i,
            None => self.push(ChainName::new(name), V::default()),
        };
        &mut self.entries[i].1
    }

    /// Inserts or replaces the entry of `name`; returns the one it replaced.
    pub fn insert(&mut self, name: &str, value: V) -> Option<V> {
        match self.position(name) {
            Some(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            None => {
                self.push(ChainName::new(name), value);
                None
            }
        }
    }

    fn push(&mut self, name: ChainName, value: V) -> usize {
        let i = self.entries.len();
        self.entries.push((name, value));
        self.index_entry(i);
        self.cursor = i;
        i
    }

    /// Adds entry `i` to the index.
    fn index_entry(&mut self, i: usize) {
        let entries = &self.entries;
        self.index
            .insert_unique(hash(entries[i].0.as_str()), i as u32, |&j| {
                hash(entries[j as usize].0.as_str())
            });
    }

    /// Every entry with its name, in first-inserted order.
    pub fn iter(&self) -> impl Iterator<Item = (&ChainName, &V)> {
        self.entries.iter().map(|(n, v)| (n, v))
    }

    /// Every entry, mutably, in first-inserted order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    /// Keeps the entries `keep` accepts, in order, and rebuilds the index.
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.entries.retain(|(_, v)| keep(v));
        self.index.clear();
        for i in 0..self.entries.len() {
            self.index_entry(i);
        }
        self.cursor = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_in_order_out_of_order_and_after_retain() {
        let mut t: ChainTable<u32> = ChainTable::default();
        let names: Vec<String> = (0..1000).map(|i| format!("KUBE-SEP-{i:016}")).collect();
        for n in &names {
            *t.get_or_default(n) += 1;
        }
        assert_eq!(t.len(), 1000);
        // In order (the cursor), twice each (runs), then scattered (the index).
        for n in &names {
            *t.get_or_default(n) += 1;
            *t.get_or_default(n) += 1;
        }
        for n in names.iter().rev().step_by(7) {
            *t.get_or_default(n) += 10;
        }
        for (i, n) in names.iter().enumerate() {
            let want = 3 + if (999 - i) % 7 == 0 { 10 } else { 0 };
            assert_eq!(t.get(n), Some(&want), "{n}");
        }
        assert_eq!(t.get("KUBE-SEP-x"), None);
        assert_eq!(t.insert(&names[6], 100), Some(3));
        assert_eq!(t.insert("new", 1), None);
        t.retain(|v| *v != 3);
        assert_eq!(t.get(&names[0]), None);
        assert_eq!(t.get(&names[6]), Some(&100));
        assert_eq!(t.get("new"), Some(&1));
        assert_eq!(t.len(), t.iter().count());
        assert!(t.iter().all(|(_, v)| *v != 3));
        // Still insertable and findable after the rebuild.
        *t.get_or_default(&names[1]) += 1;
        assert_eq!(t.get(&names[1]), Some(&1));
        assert_eq!(t.values_mut().count(), t.len());
    }
}
