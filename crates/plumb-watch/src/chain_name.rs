//! A chain name kept inline when short, as a hash-map key of watch's state.
//!
//! Applying a notification is one hash lookup by chain name; with `String` keys the
//! comparison that confirms a hit reads the name from another heap block, and that
//! cache miss was a sixth of the listener's time on a 10k-service sync. Names of
//! up to [`INLINE`] bytes (every iptables name: the kernel limit is 28; kube-proxy's
//! `KUBE-SEP-…` names are 25) sit in the map's own slot; longer ones (native nft
//! allows 255) go to the heap.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};

/// Longest name stored inline.
pub const INLINE: usize = 30;

/// The representation is private: only [`ChainName::new`] builds one, which is what
/// makes `as_str` sound.
#[derive(Clone)]
pub struct ChainName(Repr);

#[derive(Clone)]
enum Repr {
    /// Invariant: `bytes[..len]` is a whole `&str` (built only from one, never changed).
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    Heap(Box<str>),
}

impl ChainName {
    /// Copies `s`: inline when it is at most [`INLINE`] bytes, else on the heap.
    pub fn new(s: &str) -> ChainName {
        ChainName(if s.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Repr::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            Repr::Heap(s.into())
        })
    }

    /// Whether the name is stored inline.
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }

    /// The name as it was given to [`ChainName::new`].
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => {
                let b = &bytes[..usize::from(*len).min(INLINE)];
                // SAFETY: `bytes[..len]` was copied from a `&str` in `new` and never
                // changed (the representation is private): valid UTF-8, and `len`
                // ends it on a character boundary.
                unsafe { std::str::from_utf8_unchecked(b) }
            }
            Repr::Heap(s) => s,
        }
    }
}

impl Borrow<str> for ChainName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

// Hash and Eq as the `str` they hold, as `Borrow<str>` requires.
impl Hash for ChainName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq for ChainName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ChainName {}

impl PartialOrd for ChainName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ChainName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for ChainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_ruleset::fasthash::FastMap;

    #[test]
    fn short_names_are_inline_long_ones_on_the_heap_and_both_look_up_by_str() {
        let names = [
            "",
            "INPUT",
            "KUBE-SEP-AAAAAAAAAAAAAAAA",
            "é-unicode-chain-with-30-bytes",
            &"x".repeat(INLINE),
            &"y".repeat(INLINE + 1),
            &"z".repeat(255),
        ];
        let mut m: FastMap<ChainName, usize> = FastMap::default();
        for (i, n) in names.iter().enumerate() {
            let c = ChainName::new(n);
            assert_eq!(c.as_str(), *n);
            assert_eq!(c.is_inline(), n.len() <= INLINE);
            m.insert(c, i);
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(m.get(*n), Some(&i), "{n}");
        }
        assert_eq!(m.get("INPUT2"), None);
        assert!(ChainName::new("KUBE-SEP-A") < ChainName::new("KUBE-SVC-A"));
        assert_eq!(std::mem::size_of::<ChainName>(), 32);
    }
}
