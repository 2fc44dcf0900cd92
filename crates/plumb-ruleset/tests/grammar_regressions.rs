//! Damaged input is diagnosed as iptables-restore and nft would: each case here is a
//! rule or file the kernel tools refuse (or accept) that plumb once judged otherwise.
//! The differential suite that found them is plumb-collect's `grammar_differential`.

mod common;

use plumb_ruleset::iptables::save::{IptablesInput, RestoreMode, parse};
use plumb_ruleset::model::xt::dialect::IptablesVersion;
use plumb_ruleset::{Completeness, Ruleset, Severity};

fn table(rule: &str) -> Ruleset {
    parse(
        &format!(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SEP-X - [0:0]\n-A INPUT {rule}\nCOMMIT\n"
        ),
        &IptablesInput::default(),
    )
}

fn errors(rs: &Ruleset) -> Vec<String> {
    rs.errors().map(|d| d.message.clone()).collect()
}

/// (rule, iptables-restore accepts it): verdicts taken from `iptables-restore --test`
/// 1.8.9 (legacy and nft backends agree on each, except where said).
const VERDICTS: &[(&str, bool)] = &[
    // A glued word: `0.5-j` is no probability, and the target name is left over.
    (
        "-m statistic --mode random --probability 0.5-j KUBE-SEP-X",
        false,
    ),
    // A trailing word no option takes.
    ("-p tcp -m tcp --dport 80 -j KUBE-SEP-X x", false),
    ("-j DNAT --to-destination 10.0.0.1:80 --bogus", false),
    ("-m comment --comment \"a\" -j ACCEPT ACCEPT", false),
    // A dropped word: `--dport` takes the next word whatever it is.
    ("-p tcp -m tcp --dport -j ACCEPT", false),
    // A jump to a chain the table does not declare (the nft backend's `--test` does
    // not look chains up; the kernel refuses the jump on commit).
    ("-j KUBE-SEP-", false),
    // A split option name that is no option.
    ("-m conntrack --ctst ate NEW -j ACCEPT", false),
    // Required options.
    ("-m comment -j ACCEPT", false),
    ("-j MARK", false),
    // The tokenizer: a closing quote ends the word; an open quote runs to the end.
    ("-m comment --comment \"a\"-j ACCEPT", true),
    ("-m comment --comment \"open -j ACCEPT", true),
    // getopt: a short option's value may be glued to it.
    ("-mcomment --comment x -j ACCEPT", true),
    ("-p udp -mudp --dport 53 -j ACCEPT", true),
    // inet_aton forms, unique prefixes of long options.
    ("-s 10.80 -j ACCEPT", true),
    ("-p tcp -m tcp --dpo 80 -j ACCEPT", true),
    // A short option's value glued to it is getopt's argument (as current iptables
    // reads it; 1.8.9 refused it for -s, -d, -p, -i, -o and -j).
    ("-ptcp -s1.2.3.4 -d5.6.7.8/32 -ieth0 -jACCEPT", true),
    ("-c1,2 -j ACCEPT", true),
    ("-c 2,3 -j ACCEPT", true),
    ("-c 2 ,3 -j ACCEPT", false),
    // The negation's old place, as iptables-save 1.4 wrote it, is read.
    ("-d ! 192.168.122.0/24 -j ACCEPT", true),
    // Conntrack states are matched over the length given.
    ("-m conntrack --ctstate REL -j ACCEPT", true),
    ("-m conntrack --ctstate RELATED, -j ACCEPT", false),
    // `--` ends the options; a word after it is refused, required options still are.
    ("-j ACCEPT --", true),
    ("-j ACCEPT -- x", false),
    ("-m comment --", false),
    // Every extension's options are known: unknown, ambiguous or argument-less ones
    // are refused, as are missing required options.
    ("-m ttl --ttl-eq 5 --bogus -j ACCEPT", false),
    (
        "-m connbytes --connbytes0:1000 --connbytes-mode packets --connbytes-dir reply",
        false,
    ),
    (
        "-m connbytes --connbytes 0:1000 --connbytes-mode packets --connbytes-dir reply",
        true,
    ),
    ("-m hashlimit --hashlimit-upto 10/sec", false),
    ("-m string --algo bm", false),
    ("-m string --string x -j DROP", true),
    ("-j IDLETIMER --ti", false),
    ("-j AUDIT --type ac", false),
    ("-m addrtype -j ACCEPT", false),
    ("-m addrtype --dst-type LOCAL -j ACCEPT", true),
    // SCTP chunk names (strcasecmp, optional flags).
    ("-p sctp -m sctp --chunk-types all SHUTDO -j ACCEPT", false),
    (
        "-p sctp -m sctp --chunk-types any shutdown,DATA:Be -j ACCEPT",
        true,
    ),
    // srh's SIDs are addresses (XTTYPE_HOSTMASK).
    ("-m srh --srh-psid a::/64! -j ACCEPT", false),
    // The protocol's aliases load its extension (`mobility-header` is mh): an option
    // neither it nor the explicit match has is unknown.
    (
        "-p mobility-header -m mh --mh-type 1 --bogus -j ACCEPT",
        false,
    ),
    // DCCP packet types are whole names.
    (
        "-p dccp -m dccp ! --dccp-types REQUEST,RESPONSE,DATA,ACK,DATAA",
        false,
    ),
    ("-p dccp -m dccp ! --dccp-types request,DATAACK", true),
    // HMARK's and RATEEST's options (libxt_HMARK.c, libxt_RATEEST.c).
    ("-j HMARK --hma", false),
    ("-j HMARK --hmark-tuple ct --hmark-mod 42 --bogus", false),
    ("-j HMARK --hmark-offset 1", false),
    (
        "-j HMARK --hmark-tuple ct --hmark-mod 42 --hmark-offset 1",
        true,
    ),
    ("-j RATEEST --rateest-name", false),
    (
        "-j RATEEST --rateest-name RE1 --rateest-interval 250.0ms",
        false,
    ),
    (
        "-j RATEEST --rateest-name RE1 --rateest-interval 250ms --rateest-ewmalog 500ms",
        true,
    ),
    // Values: a NAT address, a log prefix whose quote runs to the line's end.
    ("-p tcp -j DNAT --to-destination 172", false),
    ("-p tcp -j DNAT --to-destination 10.0.0.1:80", true),
    ("-j LOG --log-prefix \"open", false),
    // multiport needs its protocol.
    ("-m multiport --dports 80,443 -j ACCEPT", false),
    ("-p tcp -m multiport --dports 80,443 -j ACCEPT", true),
    // policy repeats its options after --next.
    (
        "-m policy --dir in --pol ipsec --strict --reqid 1 --spi 0x1 --proto esp --mode tunnel --tunnel-dst 10.0.0.0/8 --tunnel-src 10.0.0.0/8 --next --reqid 2",
        true,
    ),
];

#[test]
fn an_interface_the_chain_never_sees_is_refused() {
    let rs = parse(
        "*filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:X - [0:0]\n-A INPUT -o eth0 -j ACCEPT\n-A OUTPUT -i eth0 -j ACCEPT\n-A X -o eth0 -j ACCEPT\nCOMMIT\n",
        &IptablesInput::default(),
    );
    let errs: Vec<_> = rs.errors().map(|d| d.line).collect();
    assert_eq!(errs, [5, 6], "{:#?}", errors(&rs));
}

#[test]
fn nft_statements_after_a_terminal_one_and_glued_tokens_are_judged_as_nft_judges_them() {
    // (rule, nft -c accepts it), from nft 1.0.6.
    const NFT: &[(&str, bool)] = &[
        ("accept accept", false),
        ("tcp dport 22 accept counter", false),
        ("masquerade masquerade", false),
        ("ip saddr 10.0.0.1 dnat to 10.0.0.2 accept", false),
        ("accept comment \"x\"", true),
        ("counter continue accept", true),
        // nft's scanner splits these words.
        ("counter packets 0bytes 0 accept", true),
        ("tcp dport 22counter accept", true),
        ("iifname\"lo\" accept", true),
        ("accept comment\"x\"", true),
        ("ip saddr@s accept", true),
        ("iifname!= \"eth0\" accept", true),
        // iif/oif need an interface that exists, and none can have a blank in its name;
        // iifname/oifname compare names and take any.
        ("oif \"lo \" accept", false),
        ("iif \"l o\" accept", false),
        ("meta oif \"a/b\" accept", false),
        ("iif \"lo\" accept", true),
        ("iifname \"lo \" accept", true),
        // meta nftrace can be set, not matched (the kernel refuses the rule).
        ("meta nftrace 1 accept", false),
        ("meta nftrace set 1 accept", true),
    ];
    for &(rule, accepted) in NFT {
        let text = format!(
            "table ip t {{\n\tset s {{\n\t\ttype ipv4_addr\n\t}}\n\tchain c {{\n\t\t{rule}\n\t}}\n}}\n"
        );
        let errs = errors(&plumb_ruleset::nft::parse_text(&text));
        assert_eq!(errs.is_empty(), accepted, "{rule}: {errs:?}");
    }
}

#[test]
fn glued_split_and_trailing_words_are_judged_as_iptables_restore_judges_them() {
    for &(rule, accepted) in VERDICTS {
        let errs = errors(&table(rule));
        assert_eq!(errs.is_empty(), accepted, "{rule}: {errs:?}");
    }
}

#[test]
fn backslash_wrapped_rules_are_reported_and_their_fragments_are_not_rules() {
    let Some(dir) = common::corpus_dir() else {
        return;
    };
    let text = common::read(&dir.join(
        "real-world/iptables-save/vagrant-k8s-1.2_flannel-old_worker_AUTHOR-EDITED-backslash-wrapped.iptables-save",
    ));
    let rs = parse(&text, &IptablesInput::default());
    let wrapped = text
        .lines()
        .filter(|l| l.starts_with("-A ") && l.ends_with(" \\"))
        .count();
    let errs = errors(&rs);
    assert!(wrapped > 0);
    assert_eq!(errs.len(), wrapped, "{errs:#?}");
    assert!(
        errs.iter().all(|e| e.contains("trailing '\\'")),
        "{errs:#?}"
    );
    assert_eq!(rs.completeness, Completeness::Full); // settled to Damaged by format
    // No rule of the model is a fragment (the pieces ended with `\` or began indented).
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                assert!(
                    !r.text.as_str().trim_end().ends_with('\\'),
                    "{}",
                    r.text.as_str()
                );
                assert!(r.text.as_str().starts_with('-'), "{}", r.text.as_str());
            }
        }
    }
}

#[test]
fn tables_without_commit_are_damaged_with_the_restore_message_and_comments_are_legal() {
    let Some(dir) = common::corpus_dir() else {
        return;
    };
    let text = common::read(&dir.join(
        "real-world/iptables-save/cce-cilium-kernel-4.19_kube-proxy-ipvs_iptables-save_AUTHOR-ANNOTATED-zh-comments_no-COMMIT.iptables-save",
    ));
    let mut rs = parse(&text, &IptablesInput::default());
    let errs: Vec<_> = rs.errors().cloned().collect();
    // Three tables start without the previous one committed, and the last one ends
    // without COMMIT; the `#` lines say nothing.
    assert_eq!(errs.len(), 4, "{errs:#?}");
    assert_eq!(errs[0].line, 30);
    assert!(errs[0].message.contains("Bad argument `*raw'"), "{errs:#?}");
    assert!(
        errs.iter().all(|e| e.message.contains("COMMIT")),
        "{errs:#?}"
    );
    rs.settle_completeness();
    assert_ne!(rs.completeness, Completeness::Full);
}

#[test]
fn an_undefined_nft_set_or_map_is_an_error_in_a_whole_ruleset_only() {
    let full = "table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t}\n\tchain c {\n\t\tip saddr @s accept\n\t\tip daddr @nope drop\n\t\tmeta mark vmap @nomap\n\t\t@nh,16,32 0x1 accept\n\t}\n}\n";
    let rs = plumb_ruleset::nft::parse_text(full);
    let errs = errors(&rs);
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(
        errs[0].contains("'@nope'") && errs[1].contains("'@nomap'"),
        "{errs:#?}"
    );
    // A jump to an undefined chain likewise; `nft list chain` output (one chain, no
    // sets) shows neither the chains nor the sets it names.
    let jump = "table ip t {\n\tchain a {\n\t}\n\tchain c {\n\t\tjump nope\n\t}\n}\n";
    assert_eq!(errors(&plumb_ruleset::nft::parse_text(jump)).len(), 1);
    let listed = "table ip nat {\n\tchain PREROUTING {\n\t\tjump OVN-KUBE-ETP\n\t\tip daddr @s accept\n\t}\n}\n";
    assert!(errors(&plumb_ruleset::nft::parse_text(listed)).is_empty());
    // A script adding to a table in the kernel may name sets the kernel holds.
    let script = "add rule ip t c ip daddr @nope drop\n";
    assert!(errors(&plumb_ruleset::nft::parse_text(script)).is_empty());
}

/// Reads `-A INPUT {rule}` in a whole filter table, as iptables `version` would
/// (`None`: unknown), after an optional header line.
fn as_version(header: &str, rule: &str, version: Option<&str>) -> Ruleset {
    parse(
        &format!(
            "{header}*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT {rule}\nCOMMIT\n"
        ),
        &IptablesInput {
            version: version.map(|v| IptablesVersion::parse(v).unwrap()),
            ..IptablesInput::default()
        },
    )
}

fn notes(rs: &Ruleset) -> Vec<String> {
    rs.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Note)
        .map(|d| d.message.clone())
        .collect()
}

#[test]
fn a_value_glued_to_its_short_option_is_judged_as_the_iptables_version_reads_it() {
    // (rule, column of the option, refused by 1.8.8 and 1.8.9): those versions take
    // the whole word as the value; 1.8.7 and 1.8.10 read getopt's argument.
    const GLUED: &[(&str, u32, bool)] = &[
        ("-s10.0.0.1 -j ACCEPT", 10, true),
        ("-p tcp -d10.0.0.0/8 -j ACCEPT", 17, true),
        ("-ptcp -j ACCEPT", 10, true),
        ("-p tcp -jACCEPT", 17, true),
        ("! -s10.0.0.1 -j ACCEPT", 12, true),
        // An interface named `-ieth0` is an interface name all the same.
        ("-ieth0 -j ACCEPT", 10, false),
        ("-iabcdefghijklmn -j ACCEPT", 10, true),
        // -g, -m and -c read getopt's argument in every version.
        ("-p udp -mudp --dport 53 -j ACCEPT", 0, false),
    ];
    for &(rule, column, refused) in GLUED {
        let rs = as_version("", rule, Some("1.8.9"));
        let errs: Vec<_> = rs.errors().collect();
        assert_eq!(errs.len(), usize::from(refused), "{rule}: {errs:#?}");
        if refused {
            assert_eq!((errs[0].line, errs[0].column), (5, column), "{rule}");
            assert!(
                errs[0].message.starts_with("value glued to -")
                    && errs[0]
                        .message
                        .contains("iptables 1.8.9 takes the whole word"),
                "{rule}: {}",
                errs[0].message
            );
        }
        assert!(errors(&as_version("", rule, Some("1.8.8"))).len() == usize::from(refused));
        for v in ["1.4.21", "1.8.7", "1.8.10", "1.8.11"] {
            let rs = as_version("", rule, Some(v));
            assert!(
                rs.diagnostics.is_empty(),
                "{v} {rule}: {:?}",
                rs.diagnostics
            );
        }
        // Unknown version: read as most versions do, with a note naming the others.
        let rs = as_version("", rule, None);
        assert!(errors(&rs).is_empty(), "{rule}: {:?}", errors(&rs));
        if column > 0 {
            let n = notes(&rs);
            assert_eq!(n.len(), 1, "{rule}: {n:?}");
            assert!(n[0].contains("1.8.8 and 1.8.9"), "{}", n[0]);
        }
    }
    // The dump's header names the iptables-save that wrote it, not the iptables-restore
    // that will read it: a reading its version would refuse is noted, never refused.
    let header = "# Generated by iptables-save v1.8.9 (nf_tables) on Tue Dec  1 00:00:00 2026\n";
    let rs = as_version(header, "-s10.0.0.1 -j ACCEPT", None);
    assert!(errors(&rs).is_empty(), "{:?}", rs.diagnostics);
    assert_eq!(notes(&rs).len(), 1, "{:?}", rs.diagnostics);
    let header = "# Generated by iptables-save v1.8.10 (nf_tables) on Tue Dec  1 00:00:00 2026\n";
    assert!(
        as_version(header, "-s10.0.0.1 -j ACCEPT", None)
            .diagnostics
            .is_empty()
    );
}

#[test]
fn the_negation_after_the_option_is_read_only_by_iptables_before_1_4_12() {
    let rule = "-d ! 192.168.122.0/24 -p tcp --dport ! 22 -j ACCEPT";
    // A genuine old dump: its header says 1.4.7, and 1.4.7 reads it. No diagnostic.
    let header = "# Generated by iptables-save v1.4.7 on Mon Jan  1 00:00:00 2018\n";
    let rs = as_version(header, rule, None);
    assert!(rs.diagnostics.is_empty(), "{:?}", rs.diagnostics);
    // A 1.4.21 header over the old negation (such dumps exist): noted, not refused.
    let header = "# Generated by iptables-save v1.4.21 on Mon Jan  1 00:00:00 2018\n";
    let rs = as_version(header, rule, None);
    assert!(errors(&rs).is_empty(), "{:?}", rs.diagnostics);
    assert_eq!(notes(&rs).len(), 2, "{:?}", rs.diagnostics);
    for v in ["1.3.5", "1.4.11"] {
        assert!(as_version("", rule, Some(v)).diagnostics.is_empty(), "{v}");
    }
    // 1.4.12 and later take the "!" as the address and refuse the rule.
    for v in ["1.4.12", "1.6.1", "1.8.9", "1.8.11"] {
        let rs = as_version("", rule, Some(v));
        let errs: Vec<_> = rs.errors().collect();
        assert_eq!(errs.len(), 1, "{v}: {errs:#?}");
        assert_eq!(
            (errs[0].line, errs[0].column, errs[0].text.as_str()),
            (5, 13, "! 192.168.122.0/24 -p tcp --dport ! 22 -j ACCEPT")
        );
        assert!(
            errs[0].message.contains("negation's old place")
                && errs[0]
                    .message
                    .contains(&format!("iptables {}", IptablesVersion::parse(v).unwrap())),
            "{}",
            errs[0].message
        );
    }
    // Unknown version: read, with a note for each old-place "!".
    let rs = as_version("", rule, None);
    assert!(errors(&rs).is_empty());
    assert_eq!(notes(&rs).len(), 2, "{:?}", notes(&rs));
    assert!(notes(&rs)[0].contains("before 1.4.12"), "{:?}", notes(&rs));
}

#[test]
fn a_full_restore_refuses_a_jump_to_a_chain_the_payload_never_declares() {
    // A payload declaring no chain: with --noflush the chain may exist in the kernel;
    // restored whole (iptables-restore --test) the table holds only its built-ins.
    let text = "*nat\n-A PREROUTING -p tcp -j DN\n-A OUTPUT -j POSTROUTING\n-A OUTPUT -j DNAT --to-destination 10.0.0.1\nCOMMIT\n";
    let full = parse(
        text,
        &IptablesInput {
            restore: RestoreMode::Full,
            ..IptablesInput::default()
        },
    );
    let errs: Vec<_> = full.errors().collect();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!((errs[0].line, errs[0].text.as_str()), (2, "DN"));
    assert!(
        errs[0].message.contains("never declares"),
        "{}",
        errs[0].message
    );
    for restore in [RestoreMode::Unknown, RestoreMode::Noflush] {
        let rs = parse(
            text,
            &IptablesInput {
                restore,
                ..IptablesInput::default()
            },
        );
        assert!(errors(&rs).is_empty(), "{restore:?}: {:?}", errors(&rs));
    }
}

#[test]
fn an_iif_name_no_interface_can_have_is_refused_at_its_match() {
    let text = "table ip t {\n\tchain c {\n\t\tip saddr 10.0.0.1 oif \"lo \" accept\n\t}\n}\n";
    let rs = plumb_ruleset::nft::parse_text(text);
    let errs: Vec<_> = rs.errors().collect();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!((errs[0].line, errs[0].column), (3, 21), "{errs:#?}");
    assert!(
        errs[0]
            .message
            .starts_with("oif \"lo \": no interface can have this name"),
        "{}",
        errs[0].message
    );
}

#[test]
fn version_and_family_decide_string_algo_and_ipv4_addresses_in_ip6tables() {
    // `--algo` is mandatory from iptables 1.3.4; a dump of unknown version may predate it.
    let rule = "-m string --hex-string |0a0a0a0a| -j DROP";
    let rs = as_version("", rule, Some("1.8.9"));
    let errs: Vec<_> = rs.errors().collect();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!((errs[0].line, errs[0].text.as_str()), (5, "DROP"));
    assert!(
        errs[0].message.contains("string needs --algo"),
        "{}",
        errs[0].message
    );
    assert!(as_version("", rule, Some("1.3.3")).diagnostics.is_empty());
    assert!(as_version("", rule, None).diagnostics.is_empty());
    // ip6tables asks for an IPv6 address: `2` (inet_aton's 0.0.0.2) is refused.
    let text = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m conntrack --ctrepldst 2 -j ACCEPT\n-A INPUT -s ::1 -j ACCEPT\nCOMMIT\n";
    let v6 = parse(
        text,
        &IptablesInput {
            family: plumb_ruleset::Family::Ip6,
            ..IptablesInput::default()
        },
    );
    let errs: Vec<_> = v6.errors().collect();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!((errs[0].line, errs[0].text.as_str()), (3, "2 -j ACCEPT"));
    assert!(
        errs[0]
            .message
            .contains("IPv4 address in an ip6tables rule"),
        "{}",
        errs[0].message
    );
    assert!(errors(&parse(text, &IptablesInput::default())).is_empty());
    // The header says which tool wrote the text.
    let header = format!("# Generated by ip6tables-save v1.8.9 on x\n{text}");
    assert_eq!(errors(&parse(&header, &IptablesInput::default())).len(), 1);
}

#[test]
fn nat_to_an_address_in_an_inet_table_needs_its_family_or_an_ip_match_before_it() {
    // (rule, nft 1.0.6 `nft -c` accepts it in an inet nat chain).
    const INET: &[(&str, bool)] = &[
        ("dnat to 10.0.0.1", false),
        ("snat to 10.0.0.1", false),
        ("tcp dport 80 dnat to 10.0.0.1", false),
        ("dnat ip to 10.0.0.1", true),
        ("ip saddr 1.2.3.4 dnat to 10.0.0.1", true),
        ("meta nfproto ipv4 dnat to 10.0.0.1", true),
        ("icmp type echo-request dnat to 10.0.0.1", true),
    ];
    for &(rule, accepted) in INET {
        let text = format!(
            "table inet t {{\n\tchain c {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\t{rule}\n\t}}\n}}\n"
        );
        let rs = plumb_ruleset::nft::parse_text(&text);
        let errs: Vec<_> = rs.errors().collect();
        assert_eq!(errs.is_empty(), accepted, "{rule}: {errs:#?}");
        if !accepted {
            let at = rule.find("nat").unwrap() as u32 - 1;
            assert_eq!((errs[0].line, errs[0].column), (4, 3 + at), "{rule}");
            assert!(
                errs[0]
                    .message
                    .contains("in an inet table needs its family"),
                "{}",
                errs[0].message
            );
        }
        // The same rule in an ip table knows its family.
        let ip = text.replace("table inet", "table ip");
        assert!(
            errors(&plumb_ruleset::nft::parse_text(&ip)).is_empty(),
            "{rule}"
        );
    }
}

#[test]
fn a_ct_helper_the_table_does_not_define_is_refused() {
    let table = |rule: &str| {
        format!(
            "table inet t {{\n\tct helper tftp-69 {{\n\t\ttype \"tftp\" protocol udp\n\t\tl3proto inet\n\t}}\n\tchain c {{\n\t\ttype filter hook input priority 0; policy accept;\n\t\t{rule}\n\t}}\n}}\n"
        )
    };
    // (rule, nft 1.0.6 accepts it): the kernel refuses an undefined object on commit.
    const CT: &[(&str, bool)] = &[
        ("ct helper set \"tftp-69\"", true),
        ("ct helper set udp dport map { 69 : \"tftp-69\" }", true),
        ("ct helper set \"ftp\"", false),
        (
            "ct helper set udp dport map { 69 : \" tftp-69\", 70 : \"tftp-69\" }",
            false,
        ),
    ];
    for &(rule, accepted) in CT {
        let rs = plumb_ruleset::nft::parse_text(&table(rule));
        let errs: Vec<_> = rs.errors().collect();
        assert_eq!(errs.is_empty(), accepted, "{rule}: {errs:#?}");
        if !accepted {
            assert_eq!((errs[0].line, errs[0].column), (8, 3), "{rule}");
            assert!(
                errs[0].message.starts_with("rule sets ct helper '")
                    && errs[0]
                        .message
                        .contains("that table inet t does not define"),
                "{}",
                errs[0].message
            );
        }
    }
}
