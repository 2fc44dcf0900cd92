//! Sets and maps of a native table: the declaration `nft list table` prints for a
//! named one (`type`, `size`, `flags`, `timeout`, `comment`, `elements = { }` with
//! nft's line wrapping), and the elements of an anonymous one inline in a rule
//! (`{ 0 : goto a, 1 : goto b }`, `{ 10.0.0.0/8, 1.2.3.4 }`). Elements are printed in
//! nft's order ([`datatype::key_order`]); interval sets' boundaries are paired into
//! prefixes and ranges. Elements of sets with timeouts print their own `timeout`
//! (when the kernel keeps one other than the set's) and `expires` (the time left when
//! the dump was read), as nft 1.0.6 prints them ([`duration_text`]). A set with anything
//! else (typeof, objects, expressions) is not decoded.

use super::datatype::{self, Datatype};
use super::{by_kind, udata_comment};
use plumb_os::netlink::Attr;
use std::fmt::Write as _;

/// NFT_SET_* flags.
const ANONYMOUS: u32 = 0x1;
const CONSTANT: u32 = 0x2;
const INTERVAL: u32 = 0x4;
const MAP: u32 = 0x8;
const TIMEOUT: u32 = 0x10;
const EVAL: u32 = 0x20;

/// One set as dumped: its declaration and its elements' raw messages' contents.
#[derive(Debug, Default, Clone)]
pub struct SetAcc {
    pub name: String,
    pub flags: u32,
    pub key_type: u32,
    pub key_len: u32,
    pub data_type: Option<u32>,
    pub size: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub comment: Option<String>,
    /// `auto-merge` of a named interval set (user data).
    pub auto_merge: bool,
    /// Why the set is not decoded (the first reason found).
    pub unsupported: Option<String>,
    /// (key, data, flags, comment) of each element.
    pub elements: Vec<Element>,
}

/// One element.
#[derive(Debug, Clone)]
pub struct Element {
    key: Vec<u8>,
    data: Option<String>,
    end: bool,
    comment: Option<String>,
    /// `NFTA_SET_ELEM_TIMEOUT` in ms: the kernel dumps it only for an element whose
    /// timeout is not the set's.
    timeout_ms: Option<u64>,
    /// `NFTA_SET_ELEM_EXPIRATION` in ms: the time left when the dump was read.
    expires_ms: Option<u64>,
}

impl Element {
    /// What nft 1.0.6's `set_elem_expr_print` writes after the key: ` timeout T`
    /// and ` expires E` when not zero, then the comment.
    fn suffix(&self) -> String {
        let mut s = String::new();
        for (word, ms) in [("timeout", self.timeout_ms), ("expires", self.expires_ms)] {
            if let Some(text) = ms.and_then(duration_text) {
                let _ = write!(s, " {word} {text}");
            }
        }
        if let Some(c) = &self.comment {
            let _ = write!(s, " comment \"{c}\"");
        }
        s
    }
}

impl SetAcc {
    /// From a `NEWSET` message's attributes.
    pub fn from_attrs(body: &[u8]) -> Option<SetAcc> {
        // TABLE 1, NAME 2, FLAGS 3, KEY_TYPE 4, KEY_LEN 5, DATA_TYPE 6, DATA_LEN 7,
        // POLICY 8, DESC 9, ID 10, TIMEOUT 11, GC_INTERVAL 12, USERDATA 13, PAD 14,
        // OBJ_TYPE 15, HANDLE 16, EXPR 17, EXPRESSIONS 18.
        let a = by_kind::<19>(body);
        let mut s = SetAcc {
            name: a[2]?.string(),
            flags: a[3].and_then(|x| x.be_u32()).unwrap_or(0),
            key_type: a[4].and_then(|x| x.be_u32()).unwrap_or(0),
            key_len: a[5].and_then(|x| x.be_u32()).unwrap_or(0),
            data_type: a[6].and_then(|x| x.be_u32()),
            ..SetAcc::default()
        };
        let mut why = |r: &str| {
            s.unsupported.get_or_insert_with(|| r.to_string());
        };
        if a[8].and_then(|x| x.be_u32()).unwrap_or(0) != 0 {
            why("a set policy");
        }
        if a[12].is_some() {
            why("a gc-interval");
        }
        if a[15].is_some() || a[17].is_some() || a[18].is_some() {
            why("objects or expressions in a set");
        }
        if let Some(desc) = a[9] {
            let d = by_kind::<3>(desc.value);
            if d[2].is_some() {
                why("a concatenation description");
            }
            s.size = d[1].and_then(|x| x.be_u32());
        }
        s.timeout_ms = a[11].and_then(|x| x.be_u64());
        if let Some(u) = a[13] {
            // NFTNL_UDATA_SET_KEYBYTEORDER 0, DATABYTEORDER 1, MERGE_ELEMENTS 2,
            // KEY_TYPEOF 3, DATA_TYPEOF 4, EXPR 5, DATA_INTERVAL 6, COMMENT 7.
            for (kind, value) in udata(u.value) {
                match kind {
                    0 | 1 => {}
                    // nft 1.0.6 writes, for a `type a . b` key, a concatenation
                    // (expression 13) of no components: the key prints by its types.
                    // Any other `typeof` prints as `typeof`, not decoded here.
                    3 if value == [0, 4, 13, 0, 0, 0, 1, 0] && s.key_type >> 6 != 0 => {}
                    // Auto-merge of an anonymous set's intervals: not printed; of a
                    // named one, the `auto-merge` line (a u32 in host byte order).
                    2 if s.flags & ANONYMOUS != 0 => {}
                    2 => match <[u8; 4]>::try_from(value).map(u32::from_ne_bytes) {
                        Ok(0) => {}
                        Ok(1) => s.auto_merge = true,
                        _ => why("set auto-merge not decoded"),
                    },
                    // Data not an interval.
                    6 if value == [0, 0, 0, 0] => {}
                    7 => match udata_comment(value) {
                        Some(c) => s.comment = Some(c),
                        None => why("a comment not decoded"),
                    },
                    // The data of a verdict map: a verdict (expression 1).
                    4 if value == [0, 4, 1, 0, 0, 0, 1, 0] && s.flags & MAP != 0 => {}
                    // An anonymous set's `typeof` (its key's expression): its elements
                    // print by the key type, checked against the rule's expression.
                    3 if s.flags & ANONYMOUS != 0 => {}
                    k => why(&format!("set user data {k} (typeof, auto-merge, ...)")),
                }
            }
        }
        if s.flags & !(ANONYMOUS | CONSTANT | INTERVAL | MAP | TIMEOUT | EVAL) != 0 {
            let f = s.flags;
            why(&format!("set flags 0x{f:x}"));
        }
        Some(s)
    }

    /// Adds the elements of a `NEWSETELEM` message (attributes after the header).
    pub fn push_elements(&mut self, list: Attr<'_>) {
        for e in list.nested().filter(|e| e.kind == 1) {
            // KEY 1, DATA 2, FLAGS 3, TIMEOUT 4, EXPIRATION 5, USERDATA 6, EXPR 7,
            // OBJREF 8, KEY_END 9, EXPRESSIONS 10.
            let a = by_kind::<11>(e.value);
            if a[7].is_some() || a[8].is_some() || a[10].is_some() {
                self.unsupported
                    .get_or_insert_with(|| "elements with expressions or objects".into());
                continue;
            }
            let (timeout_ms, expires_ms) =
                (a[4].and_then(|x| x.be_u64()), a[5].and_then(|x| x.be_u64()));
            if (a[4].is_some() && timeout_ms.is_none()) || (a[5].is_some() && expires_ms.is_none())
            {
                self.unsupported
                    .get_or_insert_with(|| "an element timeout not decoded".into());
                continue;
            }
            if a[9].is_some() {
                self.unsupported
                    .get_or_insert_with(|| "elements with a range key".into());
                continue;
            }
            let Some(key) = a[1].and_then(|k| k.nested().find(|x| x.kind == 1)) else {
                self.unsupported
                    .get_or_insert_with(|| "an element without a key".into());
                continue;
            };
            let flags = a[3].and_then(|x| x.be_u32()).unwrap_or(0);
            if flags & !1 != 0 {
                self.unsupported
                    .get_or_insert_with(|| format!("element flags 0x{flags:x}"));
            }
            let data = match a[2] {
                None => None,
                Some(d) => match super::expr::verdict_text(d) {
                    Some(v) => Some(v),
                    None => {
                        self.unsupported
                            .get_or_insert_with(|| "map data other than verdicts".into());
                        continue;
                    }
                },
            };
            let mut comment = None;
            if let Some(u) = a[6] {
                for (kind, value) in udata(u.value) {
                    match (kind, udata_comment(value)) {
                        (0, Some(c)) => comment = Some(c),
                        _ => {
                            self.unsupported
                                .get_or_insert_with(|| "element user data not decoded".into());
                        }
                    }
                }
            }
            self.elements.push(Element {
                key: key.value.to_vec(),
                data,
                end: flags & 1 != 0,
                comment,
                timeout_ms,
                expires_ms,
            });
        }
    }

    /// The key's component types.
    pub fn key_types(&self) -> Result<Vec<Datatype>, String> {
        let types = datatype::components(self.key_type)
            .ok_or_else(|| format!("set {}: key type {} not decoded", self.name, self.key_type))?;
        // Each component padded to 4 bytes, the whole the key's length.
        let padded: Option<usize> = types
            .iter()
            .map(|t| t.len().map(|l| l.div_ceil(4) * 4))
            .sum();
        let fits = match (types.as_slice(), padded) {
            ([Datatype::Integer], _) => matches!(self.key_len, 1 | 4),
            ([t], _) => t.len() == Some(self.key_len as usize),
            (_, Some(p)) => p == self.key_len as usize,
            _ => false,
        };
        if !fits {
            return Err(format!(
                "set {}: key length {} not decoded",
                self.name, self.key_len
            ));
        }
        Ok(types)
    }

    /// The elements in nft's words, in nft's order (`a . b : goto c`, `10.0.0.0/8`).
    pub fn element_texts(&self) -> Result<Vec<String>, String> {
        if let Some(why) = &self.unsupported {
            return Err(format!("set {}: {why}", self.name));
        }
        let types = self.key_types()?;
        if self.flags & MAP != 0 && self.data_type != Some(0xffff_ff00) {
            return Err(format!("set {}: map data type not decoded", self.name));
        }
        let mut elements: Vec<&Element> = self.elements.iter().collect();
        elements.sort_by(|a, b| datatype::key_order(&types, &a.key, &b.key));
        let key_text = |k: &[u8]| -> Result<String, String> {
            let mut parts = Vec::with_capacity(types.len());
            let mut rest = k;
            for t in &types {
                let len = t.len().unwrap_or(k.len());
                let (v, r) = rest
                    .split_at_checked(len)
                    .ok_or_else(|| format!("set {}: key shorter than its type", self.name))?;
                let text = datatype::value_text(*t, v).ok_or_else(|| {
                    format!("set {}: value of {} not decoded", self.name, t.name())
                })?;
                // An element of several flags prints as `syn | ack`: not decoded.
                if t.bitmask() && text.contains(',') {
                    return Err(format!("set {}: an element of several flags", self.name));
                }
                parts.push(text);
                let pad = if types.len() > 1 {
                    len.div_ceil(4) * 4 - len
                } else {
                    0
                };
                rest = r.get(pad..).unwrap_or(&[]);
            }
            Ok(parts.join(" . "))
        };
        let with_data = |text: String, e: &Element| -> Result<String, String> {
            let mut s = text;
            s.push_str(&e.suffix());
            if let Some(d) = &e.data {
                let _ = write!(s, " : {d}");
            }
            Ok(s)
        };
        if self.flags & INTERVAL == 0 {
            let mut out = Vec::with_capacity(elements.len());
            for e in elements {
                if e.end {
                    return Err(format!("set {}: an interval end in a plain set", self.name));
                }
                out.push(with_data(key_text(&e.key)?, e)?);
            }
            return Ok(out);
        }
        // Intervals: a start, then its (exclusive) end; a start without an end runs to
        // the last value; an end at the very first value closes nothing.
        let [t] = types.as_slice() else {
            return Err(format!(
                "set {}: concatenated intervals not decoded",
                self.name
            ));
        };
        if self.flags & MAP != 0 {
            return Err(format!("set {}: interval maps not decoded", self.name));
        }
        let mut out = Vec::new();
        let mut i = 0;
        if elements
            .first()
            .is_some_and(|e| e.end && e.key.iter().all(|&b| b == 0))
        {
            i = 1;
        }
        while i < elements.len() {
            let start = elements[i];
            // nft prints an interval with its start's timeout, expiration and comment
            // (`interval_map_decompose` copies them from the start); comments on
            // intervals are not checked against nft here.
            if start.end || start.comment.is_some() {
                return Err(format!(
                    "set {}: interval boundaries not decoded",
                    self.name
                ));
            }
            let hi = match elements.get(i + 1) {
                Some(end) if end.end => {
                    i += 2;
                    decrement(&end.key)
                        .ok_or_else(|| format!("set {}: interval end not decoded", self.name))?
                }
                Some(_) => {
                    return Err(format!("set {}: adjacent intervals not decoded", self.name));
                }
                None => {
                    i += 1;
                    vec![0xff; start.key.len()]
                }
            };
            let mut text = datatype::interval_text(*t, &start.key, &hi)
                .ok_or_else(|| format!("set {}: interval not decoded", self.name))?;
            text.push_str(&start.suffix());
            out.push(text);
        }
        Ok(out)
    }

    /// The `set NAME { ... }` / `map NAME { ... }` block, tab-indented as in a table.
    pub fn declaration(&self) -> Result<String, String> {
        let elements = self.element_texts()?;
        let types = self.key_types()?;
        let map = self.flags & MAP != 0;
        let mut s = String::new();
        let _ = writeln!(s, "\t{} {} {{", if map { "map" } else { "set" }, self.name);
        let key: Vec<&str> = types.iter().map(|t| t.name()).collect();
        let _ = write!(s, "\t\ttype {}", key.join(" . "));
        if map {
            s.push_str(" : verdict");
        }
        s.push('\n');
        // nft 1.0.6 prints no size for a constant set.
        if let Some(size) = self.size.filter(|_| self.flags & CONSTANT == 0) {
            let _ = writeln!(s, "\t\tsize {size}");
        }
        let timeout = match self.timeout_ms {
            None => None,
            Some(ms) => Some(
                duration_text(ms)
                    .ok_or_else(|| format!("set {}: a timeout of 0 not decoded", self.name))?,
            ),
        };
        s.push_str(&flags_line(self.flags, timeout.is_some()));
        if self.auto_merge {
            s.push_str("\t\tauto-merge\n");
        }
        if let Some(t) = timeout {
            let _ = writeln!(s, "\t\ttimeout {t}");
        }
        if let Some(c) = &self.comment {
            let _ = writeln!(s, "\t\tcomment \"{c}\"");
        }
        if !elements.is_empty() {
            // One line holds `per_line` elements (1 for maps of concatenations).
            let per_line = if types.len() > 1 {
                1
            } else {
                types[0].per_line().ok_or_else(|| {
                    format!(
                        "set {}: elements of {} not decoded",
                        self.name,
                        types[0].name()
                    )
                })?
            };
            s.push_str("\t\telements = { ");
            for (i, e) in elements.iter().enumerate() {
                if i > 0 {
                    if i % per_line == 0 {
                        s.push_str(",\n\t\t\t     ");
                    } else {
                        s.push_str(", ");
                    }
                }
                s.push_str(e);
            }
            s.push_str(" }\n");
        }
        s.push_str("\t}\n");
        Ok(s)
    }

    /// Whether this is an anonymous set (printed inline in its rule).
    pub fn anonymous(&self) -> bool {
        self.flags & ANONYMOUS != 0
    }

    /// Whether this is a map (of verdicts).
    pub fn is_map(&self) -> bool {
        self.flags & MAP != 0
    }
}

/// `key - 1` as a big-endian number (`None` for 0).
fn decrement(key: &[u8]) -> Option<Vec<u8>> {
    let mut v = key.to_vec();
    for b in v.iter_mut().rev() {
        if *b == 0 {
            *b = 0xff;
        } else {
            *b -= 1;
            return Some(v);
        }
    }
    None
}

/// The `flags ...` line of a set declaration as nft 1.0.6 prints it: `constant`,
/// `dynamic`, `interval`, `timeout` in that order, and no line when the only flag is
/// `timeout` and the set has a default timeout (the `timeout` line says it).
fn flags_line(flags: u32, has_timeout: bool) -> String {
    let shown = if has_timeout { flags & !TIMEOUT } else { flags };
    if shown & (CONSTANT | EVAL | INTERVAL | TIMEOUT) == 0 {
        return String::new();
    }
    let names: Vec<&str> = [
        (CONSTANT, "constant"),
        (EVAL, "dynamic"),
        (INTERVAL, "interval"),
        (TIMEOUT, "timeout"),
    ]
    .iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|(_, name)| *name)
    .collect();
    format!("\t\tflags {}\n", names.join(","))
}

/// A time in milliseconds as nft 1.0.6's `time_print` writes it: days, hours,
/// minutes, seconds and milliseconds, each only when not zero (`3h`,
/// `2h59m58s500ms`, `1d1ms`). nft 1.0.6 prints nothing for 0 (later versions `0s`)
/// and never prints a zero timeout: `None`.
pub fn duration_text(ms: u64) -> Option<String> {
    let (d, rest) = (ms / 86_400_000, ms % 86_400_000);
    let (h, rest) = (rest / 3_600_000, rest % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (sec, ms) = (rest / 1000, rest % 1000);
    let mut s = String::new();
    for (v, unit) in [(d, "d"), (h, "h"), (m, "m"), (sec, "s"), (ms, "ms")] {
        if v > 0 {
            let _ = write!(s, "{v}{unit}");
        }
    }
    (!s.is_empty()).then_some(s)
}

/// libnftnl user data: (type, value) pairs of `u8 type, u8 len, value`.
pub fn udata(mut b: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&kind, rest) = b.split_first()?;
        let (&len, rest) = rest.split_first()?;
        let (value, rest) = rest.split_at_checked(len as usize)?;
        b = rest;
        Some((kind, value))
    })
}
