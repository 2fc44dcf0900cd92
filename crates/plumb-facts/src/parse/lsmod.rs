//! `lsmod` output and `/proc/modules`: the names of loaded kernel modules.
//!
//! `lsmod` prints a `Module Size Used by` header; `/proc/modules` has none. Either
//! way the first column is the module name. Built-in modules do not appear here: a
//! caller that finds a module missing should also look at `/sys/module/NAME` or
//! `modules.builtin` before calling it absent.

use std::collections::BTreeMap;

/// Loaded modules, each with the line it was listed on.
pub fn parse(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let name = l.split_whitespace().next()?;
            let valid = name != "Module"
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            valid.then(|| {
                (
                    name.replace('-', "_"),
                    u32::try_from(i + 1).unwrap_or(u32::MAX),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn lsmod_and_proc_modules() {
        let m = super::parse(
            "Module                  Size  Used by\nbr_netfilter           32768  0\nbridge                 311296  1 br_netfilter\n",
        );
        assert_eq!(m.get("br_netfilter"), Some(&2));
        assert!(m.contains_key("bridge"));
        assert!(!m.contains_key("Module"));
        let p =
            super::parse("nf_conntrack 172032 5 xt_conntrack,nf_nat, Live 0x0000000000000000\n");
        assert_eq!(p.get("nf_conntrack"), Some(&1));
    }
}
