//! Recovering kube-proxy's service map from a ruleset: the inverse of [`crate::sync`].
//!
//! Given a parsed [`Ruleset`] (a live dump, a bundle file, a restore payload), find every
//! service port kube-proxy programmed and say what it does: ClusterIP, NodePorts, external
//! and load-balancer IPs, endpoints with the probability each is picked, session affinity,
//! `Local` traffic policies and "has no endpoints" rejects. Two dataplanes:
//! - iptables mode ([`iptables`]): `KUBE-SERVICES` / `KUBE-SVC-*` / `KUBE-SEP-*` chains in the
//!   `nat` and `filter` tables of either iptables backend;
//! - nftables mode ([`nft`]): `table ip kube-proxy` / `table ip6 kube-proxy` with the
//!   `service-ips` and `service-nodeports` verdict maps and `numgen` endpoint choice;
//! - IPVS mode ([`ipvs`]): the IPVS virtual services (`ipvsadm -ln`), ClusterIPs told
//!   apart by the `KUBE-CLUSTER-IP` ipset when the input lists it.
//!
//! Names come from kube-proxy's rule comments (iptables) or chain names (nftables). When
//! comments are missing the service is identified by its chain and a note says so. Every
//! hashed chain name is re-computed from the recovered name and a mismatch is reported
//! ([`NameMismatch`]): it means the rules were not written by kube-proxy for that service
//! (hand edits, a restored snapshot of another cluster, a bug). Every recovered fact keeps
//! the rule it came from ([`Evidence`]).
//!
//! Pure: no IO. Never panics on any input (proptest in `tests/recover.rs`).

pub mod iptables;
pub mod ipvs;
pub mod nft;

use plumb_ruleset::nft::{NftSet, SetElement};
use plumb_ruleset::{Backend, Chain, Family, Location, Rule, Ruleset, Table};
use serde::Serialize;
use std::borrow::Cow;
use std::net::IpAddr;

/// Which kube-proxy dataplane a service map was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// `KUBE-*` chains in iptables (legacy or nft backend).
    Iptables,
    /// Native nftables `table ip|ip6 kube-proxy`.
    Nftables,
    /// IPVS virtual services (`ipvsadm -ln`), with ipsets naming the ClusterIPs.
    Ipvs,
}

/// A rule that supports a recovered fact: its table, its chain (or, for nft map
/// elements, the map), its 1-based line in the source text and its text as read. JSON
/// writes the four as `table`, `chain`, `line` and `text`.
///
/// Held as positions in the model rather than as copies of the four: a 10k-service map
/// holds about 110k of these, and 24 bytes each instead of 56 keep 3.4 MiB off the peak
/// of `plumb services` and `plumb check`.
#[derive(Clone, Copy)]
pub struct Evidence<'a>(Quote<'a>);

#[derive(Clone, Copy)]
enum Quote<'a> {
    /// `table.chains[chain].rules[rule]`.
    Rule {
        table: &'a Table,
        chain: u32,
        rule: u32,
    },
    /// The declaration of `table.chains[chain]` (a chain without rules).
    Chain { table: &'a Table, chain: u32 },
    /// `table.sets[set].elements[element]`, quoted by its key.
    Element {
        table: &'a Table,
        set: u32,
        element: u32,
    },
    /// An IPVS listing line (table `ipvs`, no chain).
    // A reference to the listing's `Box<str>` is one word; a `&str` would be two and
    // make every `Evidence` 32 bytes.
    #[allow(clippy::borrowed_box)]
    Ipvs { line: u32, text: &'a Box<str> },
    /// Only a chain's name (no table, line 0, no text).
    Named { chain: &'a str },
}

/// `v` in a block of its exact size. Vectors grown by pushing hold up to twice their
/// items, and `shrink_to_fit` gives nothing back under mimalloc when they fill half
/// the block or more: on a 10k-service map (iptables or nftables mode) the slack of the services' endpoints,
/// evidence and chains was 4 MiB.
pub(crate) fn exact<T>(v: Vec<T>) -> Vec<T> {
    if v.capacity() == v.len() {
        return v;
    }
    let mut e = Vec::with_capacity(v.len());
    e.extend(v);
    e
}

/// A service's list (its endpoints, rules, chains, addresses, notes) in a block of its
/// exact size, held as a boxed slice: 16 bytes where a vector takes 24 (a service
/// holds eight, a 10k-service map 10k services). Reads as a slice; [`Slim::push`]
/// grows the block by one place: a service's few rules and chains pushed into blocks
/// grown by doubling held 4 places for 1 or 2 (1 MiB of 10k services' evidence and
/// chains at the peak of recovery), and growing a small block by one is a
/// reallocation in place most of the time. Serializes as the sequence.
#[derive(Clone, PartialEq, Eq)]
pub struct Slim<T>(Box<[T]>);

impl<T> Slim<T> {
    /// No items (no allocation).
    pub fn new() -> Slim<T> {
        Slim(Box::default())
    }

    /// Adds `x` after the others, the block grown by one place.
    pub fn push(&mut self, x: T) {
        let mut v = std::mem::take(&mut self.0).into_vec();
        v.reserve_exact(1);
        v.push(x);
        self.0 = v.into_boxed_slice();
    }

    /// Adds `x` after the others unless it is one of them.
    pub fn push_unique(&mut self, x: T)
    where
        T: PartialEq,
    {
        if !self.0.contains(&x) {
            self.push(x);
        }
    }

    /// Keeps the items `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        if self.0.iter().all(&mut keep) {
            return;
        }
        let mut v = std::mem::take(&mut self.0).into_vec();
        v.retain(keep);
        *self = Slim::from(v);
    }

    /// The items as a vector (no copy).
    pub fn into_vec(self) -> Vec<T> {
        self.0.into_vec()
    }
}

impl<T> Default for Slim<T> {
    fn default() -> Self {
        Slim::new()
    }
}

impl<T> Extend<T> for Slim<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        let mut v = std::mem::take(&mut self.0).into_vec();
        v.extend(items);
        *self = Slim::from(v);
    }
}

impl<T> From<Vec<T>> for Slim<T> {
    /// `v` in a block of its size (copied when it has room to spare: see [`exact`]).
    fn from(v: Vec<T>) -> Slim<T> {
        Slim(exact(v).into_boxed_slice())
    }
}

impl<T> std::ops::Deref for Slim<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Slim<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<'s, T> IntoIterator for &'s Slim<T> {
    type Item = &'s T;
    type IntoIter = std::slice::Iter<'s, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'s, T> IntoIterator for &'s mut Slim<T> {
    type Item = &'s mut T;
    type IntoIter = std::slice::IterMut<'s, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl<T: PartialEq<U>, U> PartialEq<Vec<U>> for Slim<T> {
    fn eq(&self, other: &Vec<U>) -> bool {
        self.0[..] == other[..]
    }
}

impl<T: PartialEq<U>, U, const N: usize> PartialEq<[U; N]> for Slim<T> {
    fn eq(&self, other: &[U; N]) -> bool {
        self.0[..] == other[..]
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Slim<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for Slim<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Sorts `v` stably by `cmp` without a scratch copy of its items: the standard stable
/// sort takes a scratch block as large as `v` (2.7 MiB for a 10k-service map, the peak
/// of recovery); this sorts 4-byte indices and then moves the items along the cycles
/// of the order found, swapping in place.
pub(crate) fn sort_in_place_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> std::cmp::Ordering) {
    let Ok(n) = u32::try_from(v.len()) else {
        v.sort_by(cmp);
        return;
    };
    // `order[k]` is the index of the item that belongs at `k`.
    let mut order: Vec<u32> = (0..n).collect();
    order.sort_by(|&a, &b| cmp(&v[a as usize], &v[b as usize]));
    for start in 0..v.len() {
        if order[start] as usize == start {
            continue;
        }
        // Position `cur` takes the item at `src`; the item that was at `start` moves
        // along to the free place until its own place is reached.
        let mut cur = start;
        loop {
            let src = order[cur] as usize;
            order[cur] = cur as u32;
            if src == start {
                break;
            }
            v.swap(cur, src);
            cur = src;
        }
    }
}

/// The index of `x` in `slice`, when `x` is one of its items.
fn index_in<T>(slice: &[T], x: &T) -> Option<u32> {
    let size = std::mem::size_of::<T>().max(1);
    let offset = (x as *const T as usize).checked_sub(slice.as_ptr() as usize)?;
    let i = offset / size;
    (offset % size == 0 && slice.get(i).is_some_and(|y| std::ptr::eq(x, y)))
        .then(|| u32::try_from(i).ok())
        .flatten()
}

impl<'a> Evidence<'a> {
    /// `rule` of `chain`, both items of `table`.
    pub(crate) fn rule(table: &'a Table, chain: &'a Chain, rule: &'a Rule) -> Evidence<'a> {
        match (index_in(&table.chains, chain), index_in(&chain.rules, rule)) {
            (Some(chain), Some(rule)) => Evidence(Quote::Rule { table, chain, rule }),
            // Recovery only quotes rules of the tables it reads: never reached.
            _ => Evidence::named(&chain.name),
        }
    }

    /// The declaration of `chain`, an item of `table`.
    pub(crate) fn declaration(table: &'a Table, chain: &'a Chain) -> Evidence<'a> {
        match index_in(&table.chains, chain) {
            Some(chain) => Evidence(Quote::Chain { table, chain }),
            None => Evidence::named(&chain.name),
        }
    }

    /// `element` of the map `set`, both items of `table`.
    pub(crate) fn element(
        table: &'a Table,
        set: &'a NftSet,
        element: &'a SetElement,
    ) -> Evidence<'a> {
        match (index_in(&table.sets, set), index_in(&set.elements, element)) {
            (Some(set), Some(element)) => Evidence(Quote::Element {
                table,
                set,
                element,
            }),
            _ => Evidence::named(&set.name),
        }
    }

    /// A line of an IPVS listing.
    #[allow(clippy::borrowed_box)] // kept thin: see `Quote::Ipvs`
    pub(crate) fn ipvs(location: Location, text: &'a Box<str>) -> Evidence<'a> {
        Evidence(Quote::Ipvs {
            line: location.line,
            text,
        })
    }

    /// Only a chain's name: no table, line 0, no text.
    pub(crate) fn named(chain: &'a str) -> Evidence<'a> {
        Evidence(Quote::Named { chain })
    }

    /// Table, chain, line and text, read from the model with one lookup of the rule
    /// (writing 110k of them as JSON, four lookups each were 20% of `plumb services
    /// --json`). A packed rule's text is read back for the caller, not kept.
    pub fn parts(&self) -> (&'a str, &'a str, u32, Cow<'a, str>) {
        match self.0 {
            Quote::Rule { table, chain, rule } => {
                let c = &table.chains[chain as usize];
                let (text, line) = c.rules[rule as usize].text.read_with_line();
                (&table.name, &c.name, line, text)
            }
            _ => (self.table(), self.chain(), self.line(), self.text()),
        }
    }

    /// Table name (`nat`, `filter`, `kube-proxy`, `ipvs`).
    pub fn table(&self) -> &'a str {
        match self.0 {
            Quote::Rule { table, .. }
            | Quote::Chain { table, .. }
            | Quote::Element { table, .. } => &table.name,
            Quote::Ipvs { .. } => "ipvs",
            Quote::Named { .. } => "",
        }
    }

    /// Chain (or, for nft map elements, the map) the rule lives in.
    pub fn chain(&self) -> &'a str {
        match self.0 {
            Quote::Rule { table, chain, .. } | Quote::Chain { table, chain } => {
                &table.chains[chain as usize].name
            }
            Quote::Element { table, set, .. } => &table.sets[set as usize].name,
            Quote::Ipvs { .. } => "",
            Quote::Named { chain } => chain,
        }
    }

    /// 1-based line in the source text (0 when unknown).
    pub fn line(&self) -> u32 {
        match self.0 {
            Quote::Rule { table, chain, rule } => {
                table.chains[chain as usize].rules[rule as usize].line()
            }
            Quote::Chain { table, chain } => table.chains[chain as usize].location.line,
            Quote::Element { table, set, .. } => table.sets[set as usize].location.line,
            Quote::Ipvs { line, .. } => line,
            Quote::Named { .. } => 0,
        }
    }

    /// The rule as read (a packed rule's text read back for the caller, not kept).
    pub fn text(&self) -> Cow<'a, str> {
        let text: &'a str = match self.0 {
            Quote::Rule { table, chain, rule } => {
                return table.chains[chain as usize].rules[rule as usize]
                    .text
                    .read();
            }
            Quote::Chain { table, chain } => &table.chains[chain as usize].name,
            Quote::Element {
                table,
                set,
                element,
            } => &table.sets[set as usize].elements[element as usize].key_text,
            Quote::Ipvs { text, .. } => text,
            Quote::Named { .. } => "",
        };
        Cow::Borrowed(text)
    }
}

impl PartialEq for Evidence<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Evidence<'_> {}

impl std::fmt::Debug for Evidence<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (table, chain, line, text) = self.parts();
        f.debug_struct("Evidence")
            .field("table", &table)
            .field("chain", &chain)
            .field("line", &line)
            .field("text", &text)
            .finish()
    }
}

impl Serialize for Evidence<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (table, chain, line, text) = self.parts();
        let mut st = s.serialize_struct("Evidence", 4)?;
        st.serialize_field("table", table)?;
        st.serialize_field("chain", chain)?;
        st.serialize_field("line", &line)?;
        st.serialize_field("text", &text)?;
        st.end()
    }
}

/// The rules that show an endpoint. Endpoints have one or two (the rule that picks
/// the endpoint and its DNAT rule, or the map element that picks it and the endpoint
/// chain's rule), both of one table: those are held in place as the table and two
/// positions in it (24 bytes), others in a boxed slice. Two [`Evidence`]s in place
/// took 48 bytes an endpoint, a vector 72 (its 24 and a 48-byte block), and the two
/// positions as enums of two `u32`s 32 bytes (a 10k-service map holds 47.5k).
#[derive(Clone)]
pub struct Quotes<'a>(QuotesRepr<'a>);

#[derive(Clone)]
enum QuotesRepr<'a> {
    /// Filled from the first place; an unused place is [`Place::ABSENT`].
    Table {
        table: &'a Table,
        places: [Place; 2],
    },
    /// No rules (no allocation), or rules that are not all places of one table. A
    /// boxed slice (16 bytes) leaves room beside the table's reference, which tells
    /// the two apart: `Quotes` takes 24 bytes.
    Heap(Box<[Evidence<'a>]>),
}

/// A position in a table, as [`Quote`] holds it (without the table), in 8 bytes: the
/// kind in the top two bits (0 unused, 1 a rule, 2 a chain's declaration, 3 a set's
/// element), the chain's (or set's) index in the next 31 and the rule's (element's)
/// in the low 31. A position past 2^31 is not held in place.
#[derive(Clone, Copy)]
struct Place(u64);

impl Place {
    const ABSENT: Place = Place(0);
    const RULE: u64 = 1;
    const CHAIN: u64 = 2;
    const ELEMENT: u64 = 3;
    const LOW: u64 = (1 << 31) - 1;

    fn new(kind: u64, a: u32, b: u32) -> Option<Place> {
        let (a, b) = (u64::from(a), u64::from(b));
        (a <= Self::LOW && b <= Self::LOW).then_some(Place(kind << 62 | a << 31 | b))
    }

    fn kind(self) -> u64 {
        self.0 >> 62
    }

    fn is_absent(self) -> bool {
        self.kind() == 0
    }

    /// The two indexes.
    fn at(self) -> (u32, u32) {
        (
            ((self.0 >> 31) & Self::LOW) as u32,
            (self.0 & Self::LOW) as u32,
        )
    }

    /// The table and position `e` quotes, when it is a position in a table that fits.
    fn of<'a>(e: &Evidence<'a>) -> Option<(&'a Table, Place)> {
        let (table, place) = match e.0 {
            Quote::Rule { table, chain, rule } => (table, Place::new(Self::RULE, chain, rule)),
            Quote::Chain { table, chain } => (table, Place::new(Self::CHAIN, chain, 0)),
            Quote::Element {
                table,
                set,
                element,
            } => (table, Place::new(Self::ELEMENT, set, element)),
            Quote::Ipvs { .. } | Quote::Named { .. } => return None,
        };
        Some((table, place?))
    }

    /// The evidence this position of `table` stands for (`None` when unused).
    fn evidence<'a>(self, table: &'a Table) -> Option<Evidence<'a>> {
        let (a, b) = self.at();
        Some(Evidence(match self.kind() {
            Self::RULE => Quote::Rule {
                table,
                chain: a,
                rule: b,
            },
            Self::CHAIN => Quote::Chain { table, chain: a },
            Self::ELEMENT => Quote::Element {
                table,
                set: a,
                element: b,
            },
            _ => return None,
        }))
    }
}

impl<'a> Quotes<'a> {
    /// No rules.
    pub fn new() -> Quotes<'a> {
        Quotes(QuotesRepr::Heap(Box::default()))
    }

    /// One rule.
    pub fn one(e: Evidence<'a>) -> Quotes<'a> {
        match Place::of(&e) {
            Some((table, place)) => Quotes(QuotesRepr::Table {
                table,
                places: [place, Place::ABSENT],
            }),
            None => Quotes(QuotesRepr::Heap(Box::new([e]))),
        }
    }

    /// Adds a rule after the others.
    pub fn push(&mut self, e: Evidence<'a>) {
        match &mut self.0 {
            QuotesRepr::Table { table, places } => {
                if let Some((t, place)) = Place::of(&e)
                    && places[1].is_absent()
                    && std::ptr::eq(t, *table)
                {
                    places[1] = place;
                    return;
                }
                let mut v: Vec<Evidence<'a>> = Vec::with_capacity(self.len() + 1);
                v.extend(self.iter());
                v.push(e);
                self.0 = QuotesRepr::Heap(v.into_boxed_slice());
            }
            QuotesRepr::Heap(v) if v.is_empty() => *self = Quotes::one(e),
            QuotesRepr::Heap(v) => {
                let mut all = std::mem::take(v).into_vec();
                all.push(e);
                *v = all.into_boxed_slice();
            }
        }
    }

    /// How many rules.
    pub fn len(&self) -> usize {
        match &self.0 {
            QuotesRepr::Table { places, .. } => 1 + usize::from(!places[1].is_absent()),
            QuotesRepr::Heap(v) => v.len(),
        }
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th rule.
    pub fn get(&self, i: usize) -> Option<Evidence<'a>> {
        match &self.0 {
            QuotesRepr::Table { table, places } => places.get(i)?.evidence(table),
            QuotesRepr::Heap(v) => v.get(i).copied(),
        }
    }

    /// The first rule (the one that picks the endpoint).
    pub fn first(&self) -> Option<Evidence<'a>> {
        self.get(0)
    }

    /// The rules in order.
    pub fn iter(&self) -> impl Iterator<Item = Evidence<'a>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl Default for Quotes<'_> {
    fn default() -> Self {
        Quotes::new()
    }
}

impl PartialEq for Quotes<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Quotes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Quotes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// How a service port got its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NameSource {
    /// From kube-proxy's `--comment` texts (iptables mode) or element comments (nft).
    Comment,
    /// From the chain name (nftables mode spells `ns/name/proto/port` in it).
    ChainName,
    /// No name found: the service is known only by its chain(s).
    Unnamed,
}

/// What kube-proxy does with traffic to a service port that has no usable endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoEndpoints {
    /// "has no endpoints": REJECT (ICMP port unreachable) — no endpoint at all.
    Reject,
    /// "has no local endpoints": DROP — `Local` policy and none on this node.
    DropNoLocal,
}

/// One endpoint of a service port.
///
/// 64 bytes (a 10k-service map holds 47.5k; 80 before, in blocks of 448 bytes for a
/// service's 5 endpoints where 320 now do): the address is held as a slice of the
/// rule that DNATs to it, the endpoint chain is read from the second rule quoted (the
/// endpoint chain's DNAT rule) rather than held, and what neither covers (an address
/// spelt differently from the rule, a chain not quoted) is boxed apart ([`Rare`]).
/// JSON writes `address`, `probability`, `local`, `chain` and `evidence`.
#[derive(Clone)]
pub struct RecoveredEndpoint<'a> {
    /// The address as spelt in the rule that DNATs to it.
    addr: Option<&'a str>,
    /// Probability that a new connection picks this endpoint, read with
    /// [`RecoveredEndpoint::probability`]: 8 bytes where `Option<f64>` takes 16.
    pub(crate) prob: MaybeF64,
    /// The rules that show the endpoint: the rule that picks it (its `statistic` match or
    /// `numgen` map element) first, then the endpoint chain's DNAT rule when present.
    quotes: Quotes<'a>,
    /// An owned address, or a chain other than the second quoted rule's.
    rare: Option<Box<Rare<'a>>>,
    /// `Some(true)` when the endpoint appears in the service's local-policy chain
    /// (`KUBE-SVL-*` / `local-*`); `None` when the rules do not say.
    pub local: Option<bool>,
}

/// What an endpoint holds apart (see [`RecoveredEndpoint`]).
#[derive(Clone)]
struct Rare<'a> {
    /// The address, when it is not a slice of a rule.
    address: Option<Box<str>>,
    /// The endpoint chain, when it is not the chain of the second quoted rule.
    chain: Option<&'a str>,
}

impl<'a> RecoveredEndpoint<'a> {
    /// An endpoint at `address` (`ip:port`, `[ip6]:port`; `None` when the endpoint chain
    /// is not in the input and no comment names it) through `chain` (`KUBE-SEP-*`,
    /// `endpoint-*`), picked with `probability`, shown by `evidence`.
    pub(crate) fn new(
        address: Option<Cow<'a, str>>,
        probability: Option<f64>,
        local: Option<bool>,
        chain: Option<&'a str>,
        evidence: Quotes<'a>,
    ) -> RecoveredEndpoint<'a> {
        let mut e = RecoveredEndpoint {
            addr: None,
            prob: MaybeF64::new(probability),
            quotes: evidence,
            rare: None,
            local,
        };
        let owned = match address {
            Some(Cow::Borrowed(a)) => {
                e.addr = Some(a);
                None
            }
            Some(Cow::Owned(a)) => Some(a.into_boxed_str()),
            None => None,
        };
        let quoted = e.quoted_chain();
        if owned.is_some() || chain != quoted {
            e.rare = Some(Box::new(Rare {
                address: owned,
                chain,
            }));
        }
        e
    }

    /// The chain of the second quoted rule (the endpoint chain's DNAT rule).
    fn quoted_chain(&self) -> Option<&'a str> {
        self.quotes.get(1).map(|q| q.chain())
    }

    /// `ip:port` kube-proxy DNATs to (`[ip6]:port` for IPv6); `None` when the endpoint
    /// chain is not in the input (a partial payload) and no comment names it.
    pub fn address(&self) -> Option<&str> {
        self.addr
            .or_else(|| self.rare.as_ref().and_then(|r| r.address.as_deref()))
    }

    /// The endpoint chain (`KUBE-SEP-*`, `endpoint-*`).
    pub fn chain(&self) -> Option<&'a str> {
        match &self.rare {
            Some(r) => r.chain,
            None => self.quoted_chain(),
        }
    }

    /// The rules that show the endpoint: the rule that picks it (its `statistic` match
    /// or `numgen` map element) first, then the endpoint chain's DNAT rule when present.
    pub fn evidence(&self) -> &Quotes<'a> {
        &self.quotes
    }

    /// Probability that a new connection picks this endpoint (the `statistic` cascade or
    /// `numgen` map, folded into one number per endpoint). `None` when it cannot be read.
    pub fn probability(&self) -> Option<f64> {
        self.prob.get()
    }

    /// Sets the probability (`None`: it cannot be read).
    pub fn set_probability(&mut self, p: Option<f64>) {
        self.prob = MaybeF64::new(p);
    }
}

impl PartialEq for RecoveredEndpoint<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.address() == other.address()
            && self.prob == other.prob
            && self.local == other.local
            && self.chain() == other.chain()
            && self.quotes == other.quotes
    }
}

impl std::fmt::Debug for RecoveredEndpoint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveredEndpoint")
            .field("address", &self.address())
            .field("probability", &self.prob)
            .field("local", &self.local)
            .field("chain", &self.chain())
            .field("evidence", &self.quotes)
            .finish()
    }
}

impl Serialize for RecoveredEndpoint<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("RecoveredEndpoint", 5)?;
        st.serialize_field("address", &self.address())?;
        st.serialize_field("probability", &self.prob)?;
        st.serialize_field("local", &self.local)?;
        st.serialize_field("chain", &self.chain())?;
        st.serialize_field("evidence", &self.quotes)?;
        st.end()
    }
}

/// An `Option<f64>` in 8 bytes: `None` is one NaN bit pattern that arithmetic never
/// produces (a signalling NaN with a payload), so every `Some` value, NaN included,
/// reads back as given (a `Some` holding that very pattern reads back as the
/// canonical NaN, which prints and serializes the same). Compares, prints and
/// serializes as the `Option<f64>` it stands for.
#[derive(Clone, Copy)]
pub(crate) struct MaybeF64(f64);

impl MaybeF64 {
    /// The bits of `None`: exponent all ones, quiet bit clear, payload non-zero.
    const NONE_BITS: u64 = 0x7ff4_0000_0000_0b5e;

    pub(crate) fn new(v: Option<f64>) -> MaybeF64 {
        match v {
            None => MaybeF64(f64::from_bits(Self::NONE_BITS)),
            Some(x) if x.to_bits() == Self::NONE_BITS => MaybeF64(f64::NAN),
            Some(x) => MaybeF64(x),
        }
    }

    pub(crate) fn get(self) -> Option<f64> {
        (self.0.to_bits() != Self::NONE_BITS).then_some(self.0)
    }
}

impl PartialEq for MaybeF64 {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl std::fmt::Debug for MaybeF64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for MaybeF64 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

/// One service port as kube-proxy programmed it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecoveredService<'a> {
    /// `namespace/name:port` (`namespace/name` for an unnamed port), if known.
    pub name: Option<String>,
    /// Whether the name came from a comment, a chain name, or nowhere.
    pub name_source: NameSource,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: Option<String>,
    /// The ClusterIP; `None` when the rules show none (a partial payload, a capture
    /// filtered to the NodePort rules).
    pub cluster_ip: Option<IpAddr>,
    /// The service port (on the ClusterIP, external and load-balancer IPs).
    pub port: Option<u16>,
    /// The ports of the NodePort capture rules (`KUBE-NODEPORTS`, `service-nodeports`);
    /// empty when the service has none.
    pub node_ports: Slim<u16>,
    /// `spec.externalIPs`. In nftables mode, and in iptables mode for a service with no
    /// endpoints, load-balancer IPs look the same and are listed here (see `notes`).
    pub external_ips: Slim<IpAddr>,
    /// `status.loadBalancer.ingress` IPs (`KUBE-FW-*` / `firewall-*` rules and their captures).
    pub load_balancer_ips: Slim<IpAddr>,
    /// `loadBalancerSourceRanges` (from `KUBE-FW-*` / `firewall-*`).
    pub load_balancer_source_ranges: Slim<String>,
    /// `healthCheckNodePort` of an `externalTrafficPolicy: Local` load balancer (the
    /// `KUBE-NODEPORTS` rule commented as its health check); `None` when absent.
    pub health_check_node_port: Option<u16>,
    /// `ClientIP` affinity timeout in seconds (`-m recent --rcheck --seconds`).
    pub session_affinity_seconds: Option<u32>,
    /// `internalTrafficPolicy: Local` (ClusterIP goes to `KUBE-SVL-*` / `local-*`).
    pub internal_traffic_local: bool,
    /// `externalTrafficPolicy: Local`.
    pub external_traffic_local: bool,
    /// The endpoints, in rule order (the order the `statistic` cascade or `numgen` map
    /// tries them); empty when the service has none.
    pub endpoints: Slim<RecoveredEndpoint<'a>>,
    /// Set when kube-proxy rejects or drops traffic for lack of endpoints.
    pub no_endpoints: Option<NoEndpoints>,
    /// kube-proxy chains of this service (SVC, SVL, EXT, FW / service-, local-, ...).
    pub chains: Slim<&'a str>,
    /// The rules that define the service (capture rules, filter rejects, NodePorts).
    pub evidence: Slim<Evidence<'a>>,
    /// What could not be recovered exactly, in words. Fixed texts are borrowed (most
    /// services of a map without comments carry the same one), and the list is made
    /// at its size: a note cost a 96-byte vector block and an 80-byte string per
    /// service, 1.7 MiB at the peak of `plumb services` on 10k services.
    pub notes: Slim<Cow<'static, str>>,
}

impl RecoveredService<'_> {
    /// A service port of which nothing is known yet.
    pub(crate) fn empty() -> Self {
        RecoveredService {
            name: None,
            name_source: NameSource::Unnamed,
            protocol: None,
            cluster_ip: None,
            port: None,
            node_ports: Slim::new(),
            external_ips: Slim::new(),
            load_balancer_ips: Slim::new(),
            load_balancer_source_ranges: Slim::new(),
            health_check_node_port: None,
            session_affinity_seconds: None,
            internal_traffic_local: false,
            external_traffic_local: false,
            endpoints: Slim::new(),
            no_endpoints: None,
            chains: Slim::new(),
            evidence: Slim::new(),
            notes: Slim::new(),
        }
    }

    /// The name to show: `ns/name:port`, else the service chain.
    pub fn display_name(&self) -> String {
        match (&self.name, self.chains.first()) {
            (Some(n), _) => n.clone(),
            (None, Some(c)) => format!("<unnamed {c}>"),
            (None, None) => "<unnamed>".into(),
        }
    }
}

/// A kube-proxy chain whose hash does not match the service (or endpoint) it serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NameMismatch<'a> {
    /// The kube-proxy chain whose name does not match (`KUBE-SVC-…`, `KUBE-SEP-…`, `service-…`).
    pub chain: &'a str,
    /// `ns/name:port` (and endpoint) the chain belongs to according to the rules.
    pub service: String,
    /// The endpoint (`ip:port`) for an endpoint chain; `None` for a service chain.
    pub endpoint: Option<String>,
    /// The name kube-proxy would have used.
    pub expected: String,
    /// A rule of the service (for an endpoint chain, the rule that jumps to it), to quote.
    pub evidence: Evidence<'a>,
}

/// The service map of one kube-proxy dataplane (one family, one backend).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServiceMap<'a> {
    /// Which dataplane the map was read from.
    pub mode: ProxyMode,
    /// Address family of the tables read (`ip` or `ip6`).
    pub family: Family,
    /// Backend of the tables read (iptables-legacy, iptables-nft, nftables).
    pub backend: Backend,
    /// Every service port found, one entry per (service, port, protocol).
    pub services: Vec<RecoveredService<'a>>,
    /// Chains whose hashed name does not match the service or endpoint recovered for
    /// them; empty for rules kube-proxy wrote itself.
    pub name_mismatches: Vec<NameMismatch<'a>>,
}

impl ServiceMap<'_> {
    /// The table holding the map's rules: [`nft::TABLE`] in nftables mode, `nat`
    /// (KUBE-SERVICES and the service chains) otherwise.
    pub fn table_name(&self) -> &'static str {
        match self.mode {
            ProxyMode::Nftables => nft::TABLE,
            ProxyMode::Iptables | ProxyMode::Ipvs => "nat",
        }
    }
}

/// Recovers every kube-proxy service map in `ruleset`: one per (backend, family) holding
/// iptables-mode chains, one per nftables `kube-proxy` table. Empty when kube-proxy left
/// nothing (e.g. Cilium's kube-proxy replacement).
pub fn recover(ruleset: &Ruleset) -> Vec<ServiceMap<'_>> {
    let mut maps = iptables::recover(ruleset);
    let ipvs = ipvs::recover(ruleset);
    if !ipvs.is_empty() {
        // In IPVS mode KUBE-SERVICES only matches ipsets: an iptables-mode map without
        // services is IPVS mode's helper chains, not a second dataplane.
        maps.retain(|m| !m.services.is_empty());
    }
    maps.extend(ipvs);
    maps.extend(nft::recover(ruleset));
    maps
}

/// `ns/name:port` split into its parts (port empty when absent). `None` when the text is
/// not shaped like a service port name.
pub fn split_service_port_name(s: &str) -> Option<(&str, &str, &str)> {
    let (ns, rest) = s.split_once('/')?;
    let (name, port) = rest.split_once(':').unwrap_or((rest, ""));
    let ok = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    (ok(ns) && ok(name) && (port.is_empty() || ok(port))).then_some((ns, name, port))
}

/// `10.43.0.1`, `10.43.0.1/32`, `fd00::1/128` -> the address; other prefixes -> `None`.
pub(crate) fn host_addr(s: &str) -> Option<IpAddr> {
    match s.split_once('/') {
        None => s.parse().ok(),
        Some((a, "32")) | Some((a, "128")) => a.parse().ok(),
        Some(_) => None,
    }
}

/// `ip:port` / `[ip6]:port` -> parts.
pub(crate) fn split_host_port(s: &str) -> Option<(IpAddr, u16)> {
    let (ip, port) = s.rsplit_once(':')?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    Some((ip.parse().ok()?, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place sort orders exactly as the standard stable sort, equal keys in
    /// their first order included, on every permutation shape (cycles of every length,
    /// runs of equal keys, sorted and reversed input).
    #[test]
    fn the_in_place_sort_is_the_stable_sort() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..200usize {
            for modulus in [1u64, 3, 17, 1000] {
                let items: Vec<(u64, usize)> = (0..len)
                    .map(|i| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed % modulus, i)
                    })
                    .collect();
                for input in [items.clone(), {
                    let mut r = items.clone();
                    r.reverse();
                    r
                }] {
                    let mut expected = input.clone();
                    expected.sort_by_key(|a| a.0);
                    let mut got = input;
                    sort_in_place_by(&mut got, |a, b| a.0.cmp(&b.0));
                    assert_eq!(got, expected, "len {len} modulus {modulus}");
                }
            }
        }
    }

    /// Quotes keeps every rule in the order pushed: two places of one table in place,
    /// anything else (a third rule, a second table, an IPVS line) in a vector.
    #[test]
    fn quotes_keep_rules_in_order() {
        let loc = Location { line: 1, column: 1 };
        let mut nat = Table::new(Family::Ip, Backend::IptablesLegacy, "nat", loc);
        let mut filter = Table::new(Family::Ip, Backend::IptablesLegacy, "filter", loc);
        for (i, name) in ["A", "B", "C"].iter().enumerate() {
            let at = Location {
                line: i as u32 + 2,
                column: 1,
            };
            nat.chains.push(Chain::new(name, None, at));
            filter.chains.push(Chain::new(name, None, at));
        }
        let n = |i: usize| Evidence::declaration(&nat, &nat.chains[i]);
        let f = |i: usize| Evidence::declaration(&filter, &filter.chains[i]);
        let parts = |q: &Quotes| -> Vec<(String, String)> {
            q.iter()
                .map(|e| (e.table().to_string(), e.chain().to_string()))
                .collect()
        };
        let in_place = |q: &Quotes| matches!(q.0, QuotesRepr::Table { .. });

        let mut q = Quotes::new();
        assert!(q.is_empty() && q.first().is_none());
        q.push(n(0));
        q.push(n(2));
        assert!(in_place(&q));
        assert_eq!(q.len(), 2);
        assert_eq!(q.first(), Some(n(0)));
        assert_eq!(q.get(1), Some(n(2)));
        assert_eq!(q.get(2), None);
        q.push(n(1));
        assert!(!in_place(&q));
        assert_eq!(
            parts(&q),
            [("nat", "A"), ("nat", "C"), ("nat", "B")].map(|(a, b)| (a.to_string(), b.to_string()))
        );

        let mut q = Quotes::one(n(1));
        q.push(f(0));
        assert!(!in_place(&q));
        assert_eq!(
            parts(&q),
            [("nat", "B"), ("filter", "A")].map(|(a, b)| (a.to_string(), b.to_string()))
        );

        let text: Box<str> = "TCP  10.43.0.1:443 rr".into();
        let mut q = Quotes::one(Evidence::ipvs(loc, &text));
        q.push(n(0));
        assert_eq!(q.len(), 2);
        assert_eq!(
            q.first().map(|e| e.text()).as_deref(),
            Some("TCP  10.43.0.1:443 rr")
        );
        assert_eq!(q.get(1), Some(n(0)));
        assert_eq!(Quotes::one(n(0)), {
            let mut v = Quotes::new();
            v.push(n(0));
            v
        });
    }

    /// Every `Option<f64>` reads back as given: `None`, NaN, infinities, signed zeros
    /// and the bit pattern that stands for `None` itself (as a NaN).
    #[test]
    fn maybe_f64_round_trips() {
        for v in [
            None,
            Some(0.0),
            Some(-0.0),
            Some(1.0),
            Some(1.0 / 3.0),
            Some(f64::NAN),
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
        ] {
            let got = MaybeF64::new(v).get();
            assert_eq!(got.map(f64::to_bits), v.map(f64::to_bits), "{v:?}");
        }
        let none_pattern = f64::from_bits(MaybeF64::NONE_BITS);
        assert!(
            MaybeF64::new(Some(none_pattern))
                .get()
                .is_some_and(f64::is_nan)
        );
        assert_eq!(
            serde_json::to_string(&MaybeF64::new(None)).unwrap(),
            serde_json::to_string(&None::<f64>).unwrap()
        );
        assert_eq!(
            serde_json::to_string(&MaybeF64::new(Some(0.25))).unwrap(),
            "0.25"
        );
    }

    #[test]
    fn service_port_names() {
        assert_eq!(
            split_service_port_name("default/kubernetes:https"),
            Some(("default", "kubernetes", "https"))
        );
        assert_eq!(
            split_service_port_name("riset/hellopod"),
            Some(("riset", "hellopod", ""))
        );
        assert_eq!(split_service_port_name("kubernetes service portals"), None);
        assert_eq!(split_service_port_name("a/b c:d"), None);
    }

    #[test]
    fn addresses() {
        assert_eq!(host_addr("10.43.0.1/32"), "10.43.0.1".parse().ok());
        assert_eq!(host_addr("10.42.0.0/16"), None);
        assert_eq!(
            split_host_port("[fd00::5]:8443"),
            Some(("fd00::5".parse().unwrap(), 8443))
        );
    }
}
