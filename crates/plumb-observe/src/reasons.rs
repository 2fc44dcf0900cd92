//! The names of the kernel's drop reasons, read from the running kernel — never a
//! table of numbers compiled into plumb, because the numbering of
//! `enum skb_drop_reason` changes between kernel versions.
//!
//! Two sources, both pure here (the caller reads the bytes):
//! - the kernel's BTF (`/sys/kernel/btf/vmlinux`): the enumerators of
//!   `enum skb_drop_reason` ([`DropReasons::from_btf`]);
//! - the tracepoint's format file (`events/skb/kfree_skb/format` under tracefs): its
//!   `print fmt` lists `{ value, "NAME" }` pairs ([`DropReasons::from_tracepoint_format`]).
//!
//! Names are given without the kernel's prefixes: `SKB_DROP_REASON_NETFILTER_DROP`
//! is `NETFILTER_DROP` (the tracepoint prints it so), `SKB_CONSUMED` is `CONSUMED`.
//! Decoding never panics on any bytes.

use std::collections::BTreeMap;

/// Where the running kernel's BTF is read from.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The drop reasons of one kernel: value to name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropReasons {
    names: BTreeMap<u32, String>,
}

/// Why the reasons could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReasonsError {
    /// The bytes are not BTF, or are cut short; the text says where.
    #[error("not a readable BTF blob: {0}")]
    Malformed(String),
    /// The kernel has no `enum skb_drop_reason` (Linux before 5.17): drops have no reasons.
    #[error("the kernel has no enum skb_drop_reason (drop reasons need Linux 5.17 or later)")]
    NoEnum,
}

impl DropReasons {
    /// The reasons from a BTF blob (the kernel's `/sys/kernel/btf/vmlinux`).
    pub fn from_btf(btf: &[u8]) -> Result<DropReasons, ReasonsError> {
        let values = btf_enum(btf, "skb_drop_reason")?.ok_or(ReasonsError::NoEnum)?;
        Ok(DropReasons {
            names: values
                .into_iter()
                .filter_map(|(n, v)| Some((u32::try_from(v).ok()?, short_name(&n).to_string())))
                .collect(),
        })
    }

    /// The reasons from the `print fmt` line of tracefs's `skb/kfree_skb/format`:
    /// `__print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, { 3, "NO_SOCKET" }, ...)`.
    /// Empty when the line holds no such list.
    pub fn from_tracepoint_format(format: &str) -> DropReasons {
        let mut names = BTreeMap::new();
        let Some(fmt) = format.lines().find(|l| l.starts_with("print fmt:")) else {
            return DropReasons { names };
        };
        let Some(start) = fmt.find("__print_symbolic(REC->reason") else {
            return DropReasons { names };
        };
        let mut rest = &fmt[start..];
        while let Some(open) = rest.find('{') {
            rest = &rest[open + 1..];
            let Some(close) = rest.find('}') else { break };
            let pair = &rest[..close];
            rest = &rest[close + 1..];
            let Some((v, n)) = pair.split_once(',') else {
                continue;
            };
            let v = v.trim();
            let v = match v.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16).ok(),
                None => v.parse().ok(),
            };
            let n = n.trim().trim_matches('"');
            if let Some(v) = v
                && !n.is_empty()
            {
                names.insert(v, short_name(n).to_string());
            }
        }
        DropReasons { names }
    }

    /// The name of reason `value`; `None` for a value this kernel does not name.
    pub fn name(&self, value: u32) -> Option<&str> {
        self.names.get(&value).map(String::as_str)
    }

    /// The value of the reason named `name` (`NETFILTER_DROP`, case-insensitive,
    /// with or without the kernel's `SKB_DROP_REASON_` prefix).
    pub fn value(&self, name: &str) -> Option<u32> {
        let name = short_name(name);
        self.names
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(name))
            .map(|(v, _)| *v)
    }

    /// Every reason, by value.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        self.names.iter().map(|(v, n)| (*v, n.as_str()))
    }

    /// No reasons were found.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The frees that are not drops: `NOT_DROPPED_YET`, `CONSUMED` and `NOT_SPECIFIED`
    /// (the reason of every `kfree_skb()` caller that gives none, mostly ordinary frees),
    /// by value, for the ones this kernel has.
    pub fn not_drops(&self) -> Vec<u32> {
        ["NOT_DROPPED_YET", "CONSUMED", "NOT_SPECIFIED"]
            .iter()
            .filter_map(|n| self.value(n))
            .collect()
    }
}

/// `SKB_DROP_REASON_NETFILTER_DROP` -> `NETFILTER_DROP`, `SKB_CONSUMED` -> `CONSUMED`.
fn short_name(n: &str) -> &str {
    let upper_prefix = |p: &str| n.len() >= p.len() && n[..p.len()].eq_ignore_ascii_case(p);
    if upper_prefix("SKB_DROP_REASON_") {
        &n["SKB_DROP_REASON_".len()..]
    } else if upper_prefix("SKB_") {
        &n["SKB_".len()..]
    } else {
        n
    }
}

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_ENUM: u32 = 6;
const KIND_ENUM64: u32 = 19;

/// The enumerators of the enum named `name` in a BTF blob, or None when it has none.
/// Walks the type section (each kind's trailing data has a fixed size per member, from
/// the kernel's `include/uapi/linux/btf.h`).
fn btf_enum(b: &[u8], name: &str) -> Result<Option<Vec<(String, i64)>>, ReasonsError> {
    let bad = |what: &str| ReasonsError::Malformed(what.to_string());
    let u16_at =
        |i: usize| -> Option<u16> { Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?)) };
    let magic = u16_at(0).ok_or_else(|| bad("shorter than its header"))?;
    let big = match magic {
        BTF_MAGIC => false,
        m if m == BTF_MAGIC.swap_bytes() => true,
        _ => return Err(bad("no BTF magic 0xeb9f")),
    };
    let u32_at = |i: usize| -> Option<u32> {
        let a: [u8; 4] = b.get(i..i.checked_add(4)?)?.try_into().ok()?;
        Some(if big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        })
    };
    let hdr_len = u32_at(4).ok_or_else(|| bad("header cut short"))? as usize;
    let type_off = u32_at(8).ok_or_else(|| bad("header cut short"))? as usize;
    let type_len = u32_at(12).ok_or_else(|| bad("header cut short"))? as usize;
    let str_off = u32_at(16).ok_or_else(|| bad("header cut short"))? as usize;
    let str_len = u32_at(20).ok_or_else(|| bad("header cut short"))? as usize;
    let types_start = hdr_len
        .checked_add(type_off)
        .ok_or_else(|| bad("type offset"))?;
    let types_end = types_start
        .checked_add(type_len)
        .ok_or_else(|| bad("type length"))?;
    let strs_start = hdr_len
        .checked_add(str_off)
        .ok_or_else(|| bad("string offset"))?;
    let strs_end = strs_start
        .checked_add(str_len)
        .ok_or_else(|| bad("string length"))?;
    if types_end > b.len() || strs_end > b.len() {
        return Err(bad("sections run past the end"));
    }
    let strings = &b[strs_start..strs_end];
    let string = |off: u32| -> Option<&str> {
        let s = strings.get(off as usize..)?;
        let end = s.iter().position(|&c| c == 0)?;
        std::str::from_utf8(&s[..end]).ok()
    };
    let mut i = types_start;
    while i < types_end {
        let (Some(name_off), Some(info)) = (u32_at(i), u32_at(i + 4)) else {
            return Err(bad(&format!("type at byte {i} cut short")));
        };
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let signed = info >> 31 == 1;
        let extra = match kind {
            1 | 14 | 17 => 4,          // INT, VAR, DECL_TAG
            3 => 12,                   // ARRAY
            4 | 5 | 15 => vlen * 12,   // STRUCT, UNION, DATASEC
            6 | 13 => vlen * 8,        // ENUM, FUNC_PROTO
            19 => vlen * 12,           // ENUM64
            2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF, modifiers, FUNC, FLOAT, TYPE_TAG
            k => return Err(bad(&format!("unknown BTF kind {k} at byte {i}"))),
        };
        let members = i + 12;
        if (kind == KIND_ENUM || kind == KIND_ENUM64) && string(name_off) == Some(name) {
            let mut out = Vec::with_capacity(vlen);
            for m in 0..vlen {
                let at = if kind == KIND_ENUM {
                    members + m * 8
                } else {
                    members + m * 12
                };
                let (Some(n), Some(lo)) = (u32_at(at), u32_at(at + 4)) else {
                    return Err(bad(&format!("enum {name} cut short")));
                };
                let value = if kind == KIND_ENUM {
                    if signed {
                        i64::from(lo as i32)
                    } else {
                        i64::from(lo)
                    }
                } else {
                    let hi = u32_at(at + 8).ok_or_else(|| bad("enum64 cut short"))?;
                    ((u64::from(hi) << 32) | u64::from(lo)) as i64
                };
                if let Some(n) = string(n) {
                    out.push((n.to_string(), value));
                }
            }
            return Ok(Some(out));
        }
        i = members + extra;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob with an INT, a STRUCT of one member and the enum.
    fn blob(enum_name: &str, values: &[(&str, u32)]) -> Vec<u8> {
        let mut strs = vec![0u8];
        let mut add = |s: &str| {
            let off = strs.len() as u32;
            strs.extend(s.as_bytes());
            strs.push(0);
            off
        };
        let int_name = add("int");
        let st_name = add("sk_buff");
        let m_name = add("len");
        let e_name = add(enum_name);
        let vals: Vec<(u32, u32)> = values.iter().map(|(n, v)| (add(n), *v)).collect();
        let mut types = Vec::new();
        let mut w = |v: u32| types.extend(v.to_le_bytes());
        w(int_name);
        w(1 << 24);
        w(4);
        w(0x20);
        w(st_name);
        w((4 << 24) | 1);
        w(4);
        w(m_name);
        w(1);
        w(0);
        w(e_name);
        w((6 << 24) | vals.len() as u32);
        w(4);
        for (n, v) in &vals {
            w(*n);
            w(*v);
        }
        let mut b = Vec::new();
        b.extend(BTF_MAGIC.to_le_bytes());
        b.extend([1, 0]);
        for v in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strs.len() as u32,
        ] {
            b.extend(v.to_le_bytes());
        }
        b.extend(types);
        b.extend(strs);
        b
    }

    #[test]
    fn reasons_come_from_the_kernels_enum_by_name() {
        let b = blob(
            "skb_drop_reason",
            &[
                ("SKB_NOT_DROPPED_YET", 0),
                ("SKB_CONSUMED", 1),
                ("SKB_DROP_REASON_NOT_SPECIFIED", 2),
                ("SKB_DROP_REASON_NETFILTER_DROP", 77),
            ],
        );
        let r = DropReasons::from_btf(&b).unwrap();
        assert_eq!(r.name(77), Some("NETFILTER_DROP"));
        assert_eq!(r.value("netfilter_drop"), Some(77));
        assert_eq!(r.value("SKB_DROP_REASON_NETFILTER_DROP"), Some(77));
        assert_eq!(r.not_drops(), vec![0, 1, 2]);
        assert_eq!(r.name(78), None);
    }

    #[test]
    fn a_kernel_without_the_enum_says_so() {
        let b = blob("something_else", &[("A", 1)]);
        assert_eq!(DropReasons::from_btf(&b), Err(ReasonsError::NoEnum));
    }

    #[test]
    fn broken_btf_is_an_error_never_a_panic() {
        let b = blob("skb_drop_reason", &[("SKB_CONSUMED", 1)]);
        for len in 0..b.len() {
            let _ = DropReasons::from_btf(&b[..len]);
        }
        let mut flipped = b.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xff;
            let _ = DropReasons::from_btf(&flipped);
            flipped[i] ^= 0xff;
        }
        assert!(matches!(
            DropReasons::from_btf(b"not btf at all, not at all"),
            Err(ReasonsError::Malformed(_))
        ));
    }

    #[test]
    fn the_tracepoint_format_file_names_reasons_too() {
        let f = "name: kfree_skb\nID: 1\nformat:\n\tfield:void * skbaddr;\n\nprint fmt: \"skbaddr=%p reason: %s\", REC->skbaddr, __print_symbolic(REC->reason, { 2, \"NOT_SPECIFIED\" }, { 0x4d, \"NETFILTER_DROP\" })\n";
        let r = DropReasons::from_tracepoint_format(f);
        assert_eq!(r.name(77), Some("NETFILTER_DROP"));
        assert_eq!(r.name(2), Some("NOT_SPECIFIED"));
        assert!(DropReasons::from_tracepoint_format("print fmt: \"x\"").is_empty());
    }

    #[test]
    fn this_kernels_btf_names_netfilter_drop() {
        let Ok(b) = std::fs::read(KERNEL_BTF) else {
            plumb_testkit::skip(&format!("no {KERNEL_BTF}"));
            return;
        };
        let r = DropReasons::from_btf(&b).expect("this kernel has drop reasons");
        assert!(r.value("NETFILTER_DROP").is_some());
        assert!(r.value("NOT_SPECIFIED").is_some());
    }
}
