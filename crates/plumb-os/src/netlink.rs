//! Netlink framing, decoded by hand and defensively: message headers (`nlmsghdr`) and
//! attributes (`nlattr`, nested or not). Pure: takes bytes, never panics, never trusts
//! a length field — a short or lying length ends the walk instead of indexing out of
//! bounds. The nftables and audit decoders build on these two iterators.

/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `NLMSG_OVERRUN`.
pub const NLMSG_OVERRUN: u16 = 4;
/// `NLM_F_APPEND` (in notifications: the rule was appended, not inserted).
pub const NLM_F_APPEND: u16 = 0x800;

const NLMSG_HDRLEN: usize = 16;
const NLA_HDRLEN: usize = 4;
/// Attribute type bits (without `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER`).
const NLA_TYPE_MASK: u16 = 0x3fff;

fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// One netlink message: header fields and its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// `nlmsg_type`: for nfnetlink, the subsystem in the high byte and the message
    /// in the low byte; below 16, a control message (`NLMSG_ERROR`, `NLMSG_DONE`, ...).
    pub kind: u16,
    /// `nlmsg_flags` (`NLM_F_*`).
    pub flags: u16,
    /// `nlmsg_seq`: the request's sequence number; in nftables notifications, the
    /// sequence number of the batch that caused them.
    pub seq: u32,
    /// `nlmsg_pid`: the sending socket's port id (0 from the kernel).
    pub pid: u32,
    /// What follows the 16-byte header, up to the message's length (or the end of
    /// the buffer for a cut message).
    pub payload: &'a [u8],
}

impl Message<'_> {
    /// The errno an `NLMSG_ERROR` (or a dump's closing `NLMSG_DONE`) carries: the first
    /// i32 of its payload, negative; 0 for an acknowledgement or a payload too short.
    pub fn errno(&self) -> i32 {
        self.payload
            .get(..4)
            .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Iterates the messages of one datagram. Stops at the first malformed header, and at
/// a message longer than what is left.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = Message<'_>> {
    messages_up_to_cut(buf)
        .take_while(|(_, cut)| !cut)
        .map(|(m, _)| m)
}

/// Like [`messages`] for a datagram of which only the first bytes were copied: a last
/// message longer than what is left comes with the part of its payload that is there,
/// marked cut (`true`), and ends the walk.
pub fn messages_up_to_cut(buf: &[u8]) -> impl Iterator<Item = (Message<'_>, bool)> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        if len < NLMSG_HDRLEN {
            rest = &[];
            return None;
        }
        let cut = len > rest.len();
        let msg = Message {
            kind: u16::from_ne_bytes(rest[4..6].try_into().ok()?),
            flags: u16::from_ne_bytes(rest[6..8].try_into().ok()?),
            seq: u32::from_ne_bytes(rest[8..12].try_into().ok()?),
            pid: u32::from_ne_bytes(rest[12..16].try_into().ok()?),
            payload: &rest[NLMSG_HDRLEN..len.min(rest.len())],
        };
        rest = if cut {
            &[]
        } else {
            rest.get(align4(len)..).unwrap_or(&[])
        };
        Some((msg, cut))
    })
}

/// One attribute: its type (flags masked off) and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr<'a> {
    /// `nla_type` without the nested and byte-order flags.
    pub kind: u16,
    /// The value, without the 4-byte header and the padding.
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    /// A NUL-terminated (or not) string value, lossily decoded.
    pub fn string(&self) -> String {
        self.text().into_owned()
    }
    /// The text of [`Attr::string`], borrowed from the buffer when it is UTF-8 (names
    /// always are in practice): no allocation per name on a dump's hot path.
    pub fn text(&self) -> std::borrow::Cow<'a, str> {
        let v = self.value;
        let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
        // `from_utf8` first: the lossy reader's chunking cost 4% of decoding a dump.
        match std::str::from_utf8(&v[..end]) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(&v[..end]),
        }
    }
    /// Whether the string value is `want`, compared as [`Attr::string`] reads it,
    /// without allocating.
    pub fn is_text(&self, want: &str) -> bool {
        self.text() == want
    }
    /// A NUL-terminated string value borrowed from the buffer ("" when not UTF-8).
    pub fn str(&self) -> &'a str {
        let v = self.value;
        // Names are ASCII: one pass finds the NUL and proves it (the listener's hot
        // path, two names per notification; `from_utf8` cost twice as much).
        match v.iter().position(|&b| b == 0 || !b.is_ascii()) {
            // SAFETY: every byte before `end` is ASCII, and ASCII is UTF-8.
            Some(end) if v[end] == 0 => unsafe { std::str::from_utf8_unchecked(&v[..end]) },
            // SAFETY: as above, all of `v`.
            None => unsafe { std::str::from_utf8_unchecked(v) },
            Some(_) => {
                let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
                std::str::from_utf8(&v[..end]).unwrap_or("")
            }
        }
    }
    /// A big-endian u32 (netfilter attributes are in network byte order).
    pub fn be_u32(&self) -> Option<u32> {
        Some(u32::from_be_bytes(self.value.get(..4)?.try_into().ok()?))
    }
    /// A big-endian u64.
    pub fn be_u64(&self) -> Option<u64> {
        Some(u64::from_be_bytes(self.value.get(..8)?.try_into().ok()?))
    }
    /// The attributes nested in this one.
    pub fn nested(&self) -> impl Iterator<Item = Attr<'a>> {
        attrs(self.value)
    }
}

/// Iterates the attributes in `buf`. Stops at the first malformed one.
pub fn attrs(buf: &[u8]) -> impl Iterator<Item = Attr<'_>> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.len() < NLA_HDRLEN {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > rest.len() {
            rest = &[];
            return None;
        }
        let attr = Attr {
            kind,
            value: &rest[NLA_HDRLEN..len],
        };
        rest = rest.get(align4(len)..).unwrap_or(&[]);
        Some(attr)
    })
}

/// Build netlink bytes: requests, and messages for tests and fuzzing.
pub mod build {
    /// Encodes one attribute (padded to 4 bytes).
    pub fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = (4 + value.len()) as u16;
        let mut v = Vec::with_capacity(4 + value.len() + 3);
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }
    /// A NUL-terminated string attribute.
    pub fn str_attr(kind: u16, s: &str) -> Vec<u8> {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        attr(kind, &b)
    }
    /// A nested attribute holding `inner` (already encoded attributes).
    pub fn nested(kind: u16, inner: &[Vec<u8>]) -> Vec<u8> {
        attr(kind | 0x8000, &inner.concat())
    }
    /// Encodes one message with `payload`.
    pub fn message(kind: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
        let len = (16 + payload.len()) as u32;
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_messages_and_attributes() {
        let payload = [
            build::str_attr(1, "nat"),
            build::attr(2, &7u32.to_be_bytes()),
        ]
        .concat();
        let buf = [
            build::message(0x0a00, 0, &payload),
            build::message(3, 0, &[]),
        ]
        .concat();
        let msgs: Vec<_> = messages(&buf).collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].kind, 0x0a00);
        let a: Vec<_> = attrs(msgs[0].payload).collect();
        assert_eq!(a[0].string(), "nat");
        assert_eq!(a[1].be_u32(), Some(7));
    }

    #[test]
    fn lying_lengths_end_the_walk() {
        let mut buf = build::message(0x0a00, 0, &[1, 2, 3, 4]);
        buf[0] = 200; // longer than the buffer
        assert_eq!(messages(&buf).count(), 0);
        let mut a = build::attr(1, b"abcd");
        a[0] = 2; // shorter than a header
        assert_eq!(attrs(&a).count(), 0);
        assert_eq!(messages(&[0u8; 15]).count(), 0);
    }

    proptest::proptest! {
        /// The ASCII fast path of `Attr::str` agrees with the plain definition: the
        /// value up to its first NUL if that is UTF-8, else "".
        #[test]
        fn str_is_the_utf8_up_to_the_first_nul(
            v in proptest::collection::vec(
                proptest::prop_oneof![0u8..4, 32u8..127, 128u8..=255],
                0..40,
            ),
            text in "[a-zA-Z0-9é€-]{0,12}",
        ) {
            let plain = |v: &[u8]| {
                let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
                std::str::from_utf8(&v[..end]).unwrap_or("").to_string()
            };
            for v in [v.clone(), [text.as_bytes(), &[0], &v].concat()] {
                let a = Attr { kind: 1, value: &v };
                proptest::prop_assert_eq!(a.str(), plain(&v));
            }
        }
    }
}
