//! ipsets from `ipset save` text, for `-m set --match-set NAME src,dst`.
//!
//! Supported set types: `hash:*` and `bitmap:*` made of `ip`, `net`, `port` and
//! `iface` dimensions, and `list:set`. Other dimensions (`mark`, `mac`) make the
//! match indeterminate. Entries marked `nomatch` exclude the addresses they cover.

use crate::addr::{AddrRange, Cidr, PortRange};
use std::collections::HashMap;
use std::net::IpAddr;

/// One dimension of a set type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// `ip`: an address (entries may be written as a prefix or a range).
    Ip,
    /// `net`: a prefix.
    Net,
    /// `port`: a protocol and port (`tcp:80`; a bare port is TCP).
    Port,
    /// `iface`: an interface name.
    Iface,
    /// A dimension plumb cannot evaluate (`mark`, `mac`).
    Other,
}

/// One element of one dimension.
#[derive(Clone, Debug, PartialEq)]
pub enum Elem {
    /// An address or prefix (`10.0.0.1`, `10.244.0.0/16`).
    Net(Cidr),
    /// An address range (`10.0.0.1-10.0.0.9`).
    Range(AddrRange),
    /// Protocol number (`None`: any) and port range.
    Port(Option<u8>, PortRange),
    /// An interface name, as written.
    Iface(String),
    /// A value of a dimension plumb does not evaluate, as written.
    Other(String),
}

/// An entry: one element per dimension, and whether it is a `nomatch` exception.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// One element per dimension of the set type, in order.
    pub elems: Vec<Elem>,
    /// The entry is a `nomatch` exception: addresses it covers are not in the set.
    pub nomatch: bool,
}

/// A named set.
#[derive(Clone, Debug, PartialEq)]
pub struct IpSet {
    /// Set name (`KUBE-CLUSTER-IP`).
    pub name: String,
    /// Set type as written (`hash:ip,port`, `list:set`).
    pub set_type: String,
    /// The dimensions of the type, in order (`list:set` has one, [`Dim::Other`]: its
    /// members are looked up instead).
    pub dims: Vec<Dim>,
    /// The `add` entries (not for `list:set`).
    pub entries: Vec<Entry>,
    /// `list:set` members, in order.
    pub members: Vec<String>,
}

/// All sets read from `ipset save`.
#[derive(Clone, Debug, Default)]
pub struct IpSets {
    /// The sets by name.
    pub sets: HashMap<String, IpSet>,
}

/// A line of `ipset save` output plumb could not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}: {text:?}")]
pub struct IpSetError {
    /// 1-based line number in the `ipset save` text.
    pub line: usize,
    /// What is wrong (`unreadable element`, `element added to a set not created before`).
    pub message: String,
    /// The line as read.
    pub text: String,
}

impl IpSets {
    /// Reads `ipset save` (or `ipset list -o save`) text.
    pub fn parse(text: &str) -> Result<IpSets, IpSetError> {
        let mut sets: HashMap<String, IpSet> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let err = |message: &str| IpSetError {
                line: i + 1,
                message: message.into(),
                text: line.into(),
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [] => {}
                [c, ..] if c.starts_with('#') => {}
                ["create", name, set_type, ..] => {
                    let dims = set_type
                        .split_once(':')
                        .map(|(_, d)| d)
                        .unwrap_or("")
                        .split(',')
                        .map(|d| match d {
                            "ip" => Dim::Ip,
                            "net" => Dim::Net,
                            "port" => Dim::Port,
                            "iface" => Dim::Iface,
                            _ => Dim::Other,
                        })
                        .collect();
                    sets.insert(
                        name.to_string(),
                        IpSet {
                            name: name.to_string(),
                            set_type: set_type.to_string(),
                            dims,
                            entries: Vec::new(),
                            members: Vec::new(),
                        },
                    );
                }
                ["add", name, value, rest @ ..] => {
                    let set = sets
                        .get_mut(*name)
                        .ok_or_else(|| err("element added to a set not created before"))?;
                    if set.set_type.starts_with("list:") {
                        set.members.push(value.to_string());
                        continue;
                    }
                    let parts: Vec<&str> = value.split(',').collect();
                    if parts.len() != set.dims.len() {
                        return Err(err("element does not have one value per set dimension"));
                    }
                    let elems = parts
                        .iter()
                        .zip(&set.dims)
                        .map(|(p, d)| parse_elem(p, *d))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| err("unreadable element"))?;
                    set.entries.push(Entry {
                        elems,
                        nomatch: rest.contains(&"nomatch"),
                    });
                }
                _ => return Err(err("expected `create NAME TYPE ...` or `add NAME VALUE`")),
            }
        }
        Ok(IpSets { sets })
    }

    /// The set with this name; `None` when the input had none.
    pub fn get(&self, name: &str) -> Option<&IpSet> {
        self.sets.get(name)
    }
}

fn parse_elem(s: &str, dim: Dim) -> Option<Elem> {
    Some(match dim {
        Dim::Ip | Dim::Net => {
            if s.contains('-') && !s.contains('/') {
                Elem::Range(AddrRange::parse(s)?)
            } else {
                Elem::Net(Cidr::parse(s)?)
            }
        }
        Dim::Port => match s.split_once(':') {
            Some((proto, port)) if proto.parse::<u16>().is_err() => {
                let p = crate::addr::protocol_number(proto)?;
                Elem::Port(Some(p), PortRange::parse(&port.replace('-', ":"))?)
            }
            _ => Elem::Port(Some(6), PortRange::parse(&s.replace('-', ":"))?),
        },
        Dim::Iface => Elem::Iface(s.to_string()),
        Dim::Other => Elem::Other(s.to_string()),
    })
}

/// The packet fields one dimension looks at, `None` when unknown.
#[derive(Clone, Debug)]
pub enum Key<'a> {
    /// The address compared (source or destination by the match's flags); `None` when unknown.
    Addr(Option<IpAddr>),
    /// The packet's protocol number and the port compared; `None` when unknown.
    Port(u8, Option<u16>),
    /// The interface compared; `None` when unknown.
    Iface(Option<&'a str>),
}

/// Whether `key` (one value per dimension) is in the set: `Some(bool)`, or `None`
/// when plumb cannot tell (unknown packet field or unsupported dimension).
pub fn contains<'k>(
    sets: &IpSets,
    name: &str,
    key: &dyn Fn(usize, Dim) -> Key<'k>,
    depth: usize,
) -> Option<bool> {
    let set = sets.get(name)?;
    if set.set_type.starts_with("list:") {
        if depth > 8 {
            return None;
        }
        let mut unknown = false;
        for m in &set.members {
            match contains(sets, m, key, depth + 1) {
                Some(true) => return Some(true),
                Some(false) => {}
                None => unknown = true,
            }
        }
        return if unknown { None } else { Some(false) };
    }
    let keys: Vec<Key<'k>> = set
        .dims
        .iter()
        .enumerate()
        .map(|(i, d)| key(i, *d))
        .collect();
    let mut hit = false;
    for e in &set.entries {
        let mut all = true;
        for (elem, k) in e.elems.iter().zip(keys.iter().cloned()) {
            let m = match (elem, k) {
                (Elem::Net(c), Key::Addr(Some(a))) => c.contains(a),
                (Elem::Range(r), Key::Addr(Some(a))) => r.contains(a),
                (Elem::Port(p, r), Key::Port(proto, Some(port))) => {
                    p.is_none_or(|p| p == proto) && r.contains(port)
                }
                (Elem::Iface(i), Key::Iface(Some(n))) => i == n,
                _ => return None,
            };
            if !m {
                all = false;
                break;
            }
        }
        if all {
            if e.nomatch {
                return Some(false);
            }
            hit = true;
        }
    }
    Some(hit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ipset_save() {
        let s = IpSets::parse(
            "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n\
             add KUBE-CLUSTER-IP 10.43.0.1,tcp:443\n\
             create nets hash:net family inet\nadd nets 10.0.0.0/8\nadd nets 10.1.0.0/16 nomatch\n",
        )
        .unwrap();
        let key = |_: usize, d: Dim| match d {
            Dim::Port => Key::Port(6, Some(443)),
            _ => Key::Addr(Some("10.43.0.1".parse().unwrap())),
        };
        assert_eq!(contains(&s, "KUBE-CLUSTER-IP", &key, 0), Some(true));
        let key = |_: usize, _: Dim| Key::Addr(Some("10.1.2.3".parse().unwrap()));
        assert_eq!(contains(&s, "nets", &key, 0), Some(false));
        assert!(IpSets::parse("add nope 1.2.3.4").is_err());
    }
}
