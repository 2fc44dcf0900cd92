//! Unit tests of the decoder from built messages: the translation of each native
//! expression iptables-nft writes, the fallback of what is not decoded, and
//! malformed input (never a panic).

use super::*;
use plumb_os::netlink::build::*;

fn nfmsg(kind: u16, family: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut payload = vec![family, 0, 0, 0];
    payload.extend(attrs.concat());
    message((SUBSYS_NFTABLES << 8) | kind, 0, &payload)
}

/// An `nft_data` value attribute of type `kind`.
fn data(kind: u16, v: &[u8]) -> Vec<u8> {
    nested(kind, &[attr(1, v)])
}

fn expr(name: &str, attrs: &[Vec<u8>]) -> Vec<u8> {
    nested(1, &[str_attr(1, name), nested(2, attrs)])
}

fn be(v: u32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// A filter table with INPUT (policy DROP, counters) and a user chain, and `rules`
/// (expression lists) in INPUT.
fn dump(rules: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = nfmsg(msg::NEWTABLE, 2, &[str_attr(1, "filter")]);
    out.extend(nfmsg(
        msg::NEWCHAIN,
        2,
        &[
            str_attr(1, "filter"),
            str_attr(3, "INPUT"),
            nested(4, &[attr(1, &be(1)), attr(2, &be(0))]),
            attr(5, &be(0)),
            str_attr(7, "filter"),
            nested(
                8,
                &[attr(1, &7u64.to_be_bytes()), attr(2, &3u64.to_be_bytes())],
            ),
        ],
    ));
    out.extend(nfmsg(
        msg::NEWCHAIN,
        2,
        &[str_attr(1, "filter"), str_attr(3, "KUBE-X")],
    ));
    for r in rules {
        out.extend(nfmsg(
            msg::NEWRULE,
            2,
            &[str_attr(1, "filter"), str_attr(2, "INPUT"), nested(4, r)],
        ));
    }
    out
}

fn read(bytes: &[u8]) -> Vec<DecodedTable> {
    let mut d = Decoder::new();
    d.push_bytes(bytes);
    d.finish()
}

fn jump(chain: &str) -> Vec<u8> {
    expr(
        "immediate",
        &[
            attr(1, &be(0)),
            nested(
                2,
                &[nested(2, &[attr(1, &be(-3i32 as u32)), str_attr(2, chain)])],
            ),
        ],
    )
}

#[test]
fn native_expressions_become_iptables_save_words() {
    let rule = vec![
        // -s 10.0.0.0/8 as a one-byte load, ! -i eth0, -p tcp, --dport 80.
        expr(
            "payload",
            &[
                attr(1, &be(1)),
                attr(2, &be(1)),
                attr(3, &be(12)),
                attr(4, &be(1)),
            ],
        ),
        expr("cmp", &[attr(1, &be(1)), attr(2, &be(0)), data(3, &[10])]),
        expr("meta", &[attr(1, &be(1)), attr(2, &be(6))]),
        expr(
            "cmp",
            &[attr(1, &be(1)), attr(2, &be(1)), data(3, b"eth0\0")],
        ),
        expr("meta", &[attr(1, &be(1)), attr(2, &be(16))]),
        expr("cmp", &[attr(1, &be(1)), attr(2, &be(0)), data(3, &[6])]),
        expr(
            "payload",
            &[
                attr(1, &be(1)),
                attr(2, &be(2)),
                attr(3, &be(2)),
                attr(4, &be(2)),
            ],
        ),
        expr(
            "cmp",
            &[
                attr(1, &be(1)),
                attr(2, &be(0)),
                data(3, &80u16.to_be_bytes()),
            ],
        ),
        expr("counter", &[]),
        jump("KUBE-X"),
    ];
    let tables = read(&dump(&[rule]));
    assert_eq!(tables.len(), 1);
    assert_eq!(
        tables[0].read,
        TableRead::Save(
            "*filter\n:INPUT DROP [3:7]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-X - [0:0]\n\
             -A INPUT -s 10.0.0.0/8 ! -i eth0 -p tcp -m tcp --dport 80 -j KUBE-X\nCOMMIT\n"
                .into()
        )
    );
}

/// A table with a set and a rule that looks it up reads as nft's with the rule's
/// expression named, whether the set or the rule is met first, in one decoder or in
/// workers merged in either order (the split dump's workers meet them in no fixed
/// order); a set alone gives the general reason.
#[test]
fn a_rule_names_why_a_table_is_foreign_whatever_the_order() {
    let set = nfmsg(
        msg::NEWSET,
        2,
        &[str_attr(1, "filter"), str_attr(2, "__set0")],
    );
    let rules = dump(&[vec![expr("lookup", &[]), jump("KUBE-X")]]);
    let named = TableRead::Foreign(
        "chain INPUT: expression lookup, which iptables-nft does not write".into(),
    );
    for (first, second) in [(&set, &rules), (&rules, &set)] {
        let mut both = first.clone();
        both.extend_from_slice(second);
        assert_eq!(read(&both)[0].read, named);
        let mut d = Decoder::new();
        d.push_bytes(first);
        let mut other = Decoder::new();
        other.push_bytes(second);
        d.merge(other);
        assert_eq!(d.finish()[0].read, named);
    }
    let mut alone = dump(&[]);
    alone.extend(set);
    assert_eq!(
        read(&alone)[0].read,
        TableRead::Foreign("it holds sets, objects or flowtables".into())
    );
}

#[test]
fn what_is_not_decoded_makes_the_table_fall_back_with_the_reason() {
    let rule = vec![expr("lookup", &[]), jump("KUBE-X")];
    let tables = read(&dump(&[rule]));
    // A set lookup: iptables-nft never writes one, so the table is nft's to list.
    assert_eq!(
        tables[0].read,
        TableRead::Foreign(
            "chain INPUT: expression lookup, which iptables-nft does not write".into()
        )
    );
    // An xt match of an unknown revision.
    let rule = vec![expr(
        "match",
        &[str_attr(1, "comment"), attr(2, &be(7)), attr(3, &[0; 8])],
    )];
    let TableRead::Fallback(why) = &read(&dump(&[rule]))[0].read else {
        panic!("translated an unknown revision");
    };
    assert!(why.contains("match comment revision 7"), "{why}");
}

#[test]
fn a_comment_match_is_quoted_as_iptables_save_quotes_it() {
    let mut info = b"kube-system/kube-dns:dns \"cluster\"".to_vec();
    info.resize(256, 0);
    let rule = vec![expr(
        "match",
        &[str_attr(1, "comment"), attr(2, &be(0)), attr(3, &info)],
    )];
    let TableRead::Save(text) = &read(&dump(&[rule]))[0].read else {
        panic!("not translated");
    };
    assert!(
        text.contains(
            "-A INPUT -m comment --comment \"kube-system/kube-dns:dns \\\"cluster\\\"\"\n"
        ),
        "{text}"
    );
    // A comment filling its field without a NUL is not a C string: not guessed.
    let rule = vec![expr(
        "match",
        &[
            str_attr(1, "comment"),
            attr(2, &be(0)),
            attr(3, &[b'a'; 256]),
        ],
    )];
    assert!(matches!(
        read(&dump(&[rule]))[0].read,
        TableRead::Fallback(_)
    ));
}

#[test]
fn an_empty_native_table_is_listed_as_nft_lists_it() {
    let bytes = nfmsg(msg::NEWTABLE, 1, &[str_attr(1, "kube-proxy")]);
    assert_eq!(
        read(&bytes)[0].read,
        TableRead::Listing("table inet kube-proxy {\n}\n".into())
    );
}

#[test]
fn garbage_never_panics() {
    let mut d = Decoder::new();
    d.push_bytes(&[0xff; 64]);
    assert!(d.finish().is_empty());
}

proptest::proptest! {
    /// Any byte of a real dump changed, any cut: the decoder answers (a table read or
    /// fallen back), never panics.
    #[test]
    fn mutated_dumps_never_panic(
        edits in proptest::collection::vec((0usize..2000, proptest::num::u8::ANY), 0..8),
        cut in 0usize..2000,
    ) {
        let rule = vec![
            expr("meta", &[attr(1, &be(1)), attr(2, &be(3))]),
            expr("bitwise", &[attr(1, &be(1)), attr(2, &be(1)), attr(3, &be(4)),
                 data(4, &0x4000u32.to_ne_bytes()), data(5, &[0; 4])]),
            expr("cmp", &[attr(1, &be(1)), attr(2, &be(0)), data(3, &0x4000u32.to_ne_bytes())]),
            expr("match", &[str_attr(1, "multiport"), attr(2, &be(1)), attr(3, &[1, 2, 80, 0, 187, 1])]),
            jump("KUBE-X"),
        ];
        let mut bytes = dump(&[rule]);
        for (at, b) in edits {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        bytes.truncate(cut.max(1));
        let _ = read(&bytes);
    }
}
