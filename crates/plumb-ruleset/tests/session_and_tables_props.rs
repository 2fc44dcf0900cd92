//! Properties of the session splitter and the headerless table inference on arbitrary
//! text made of the lines they look at: no panic, sections in line order, every output
//! byte in at most one section, and the format reader never fails on the whole text.

use plumb_ruleset::iptables::tables::sections;
use plumb_ruleset::session::split;
use plumb_ruleset::{ParseOptions, parse_bytes};
use proptest::prelude::*;

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("$ iptables -t nat -L KUBE-SERVICES -n".to_string()),
        Just("host:/# iptables-save | grep nginx".to_string()),
        Just("kubectl get svc".to_string()),
        Just("Chain KUBE-SERVICES (2 references)".to_string()),
        Just("target     prot opt source               destination".to_string()),
        Just(
            "KUBE-SVC-X  tcp  --  0.0.0.0/0  10.0.0.1  /* a/b:c cluster IP */ tcp dpt:443"
                .to_string()
        ),
        Just(":KUBE-SEP-X - [0:0]".to_string()),
        Just("-A KUBE-SEP-X -p tcp -j DNAT --to-destination 10.0.0.2:80".to_string()),
        Just("-A INPUT -j REJECT".to_string()),
        Just("-P POSTROUTING ACCEPT".to_string()),
        "[ -~]{0,40}",
    ]
}

proptest! {
    #[test]
    fn splitter_and_inference_hold_their_shape(lines in prop::collection::vec(line(), 0..30)) {
        let text = lines.join("\n");
        let secs = split(&text);
        let mut last_end = 0usize;
        let mut last_line = 0u32;
        for s in &secs {
            let start = s.text.as_ptr() as usize - text.as_ptr() as usize;
            prop_assert!(start >= last_end);
            prop_assert!(s.first_line > last_line || s.text.is_empty());
            last_end = start + s.text.len();
            last_line = s.first_line;
        }
        prop_assert!(last_end <= text.len());
        let t = sections(&text);
        prop_assert!(!t.is_empty());
        prop_assert!(t.windows(2).all(|w| w[0].first_line < w[1].first_line));
        for format in ["session", "iptables-save", "iptables-list-rules", "iptables-listing"] {
            let opts = ParseOptions { format: Some(format.parse().unwrap()), ..Default::default() };
            let _ = parse_bytes(text.as_bytes(), &opts);
        }
    }
}
