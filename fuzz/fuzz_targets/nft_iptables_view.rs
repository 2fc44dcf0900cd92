//! Fuzz target: the nft view of an iptables-nft table read back into iptables rules
//! (`plumb_ruleset::nft::iptables_nft`). The input's lines become rules of an
//! iptables-nft `ip nat` table (so the translation runs on every input) and the whole
//! input is also read as an nft listing of its own. Never a panic; every rule the
//! translation made an xtables rule reads back without error; the printed form and the
//! diff against itself hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::{Format, ParseOptions, RuleBody, parse_bytes};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let wrapped = format!(
        "table ip nat {{\n\tchain PREROUTING {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n{text}\n\t}}\n\tchain KUBE-SERVICES {{\n\t}}\n}}\n"
    );
    let opts = ParseOptions {
        format: Some(Format::NftText),
        ..Default::default()
    };
    for input in [wrapped.as_str(), text] {
        let Ok(parsed) = parse_bytes(input.as_bytes(), &opts) else {
            continue;
        };
        let rs = &parsed.ruleset;
        for t in rs.tables.iter().filter(|t| t.nft_view) {
            for c in &t.chains {
                for r in &c.rules {
                    if let RuleBody::Xt(_) = r.body {
                        assert!(r.xt().is_some(), "translated rule without an index: {}", r.text);
                    }
                }
            }
        }
        let _ = plumb_ruleset::nft::iptables_nft::foreign_rules(rs).count();
        let _ = plumb_ruleset::iptables::canonical::save_text(rs, Default::default());
        assert!(
            plumb_ruleset::diff::diff(rs, rs).is_empty(),
            "a ruleset differs from itself"
        );
    }
});
