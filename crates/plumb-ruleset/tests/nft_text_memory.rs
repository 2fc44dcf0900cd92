//! Peak heap of reading an `nft list ruleset` of iptables-nft tables (kube-proxy's
//! iptables mode on an iptables-nft node, as nft prints it), counted by a wrapping
//! global allocator. The whole-way read held every rule as nft statements (~900 bytes
//! a rule) and all the text's tokens until the tables were translated: 14x the input.
//! A streaming read that held the listing until the model was built peaked at 4.7x
//! the input, the input included.
//! Its own binary: the counting allocator is process-wide.

use plumb_ruleset::Backend;
use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;
use std::fmt::Write;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

/// A kube-proxy nat table of `services` services with 5 endpoints each, as
/// `nft list ruleset` prints iptables-nft's rules.
fn kube_proxy_nft_listing(services: usize) -> String {
    let name = |kind: &str, i: usize, j: usize| format!("KUBE-{kind}-{i:08X}{j:08}");
    let mut t = String::from(
        "table ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\t counter packets 0 bytes 0 jump KUBE-SERVICES\n\t}\n\n\tchain KUBE-MARK-MASQ {\n\t\tcounter packets 0 bytes 0 meta mark set mark or 0x4000\n\t}\n\n\tchain KUBE-SERVICES {\n",
    );
    for i in 0..services {
        let _ = writeln!(
            t,
            "\t\tmeta l4proto tcp ip daddr 10.43.{}.{}  tcp dport 80 counter packets 0 bytes 0 jump {}",
            i / 250,
            i % 250,
            name("SVC", i, 0)
        );
    }
    t.push_str("\t}\n");
    for i in 0..services {
        let _ = write!(
            t,
            "\n\tchain {} {{\n\t\tmeta l4proto tcp ip saddr != 10.42.0.0/16 ip daddr 10.43.{}.{}  tcp dport 80 counter packets 0 bytes 0 jump KUBE-MARK-MASQ\n",
            name("SVC", i, 0),
            i / 250,
            i % 250
        );
        for (j, p) in [429496730, 536870912, 715827883, 1073741824]
            .iter()
            .enumerate()
        {
            let _ = writeln!(
                t,
                "\t\tmeta random & 2147483647 < {p} counter packets 0 bytes 0 jump {}",
                name("SEP", i, j)
            );
        }
        let _ = writeln!(
            t,
            "\t\tcounter packets 0 bytes 0 jump {}\n\t}}",
            name("SEP", i, 4)
        );
        for j in 0..5 {
            let ip = format!("10.42.{}.{}", (i * 5 + j) / 250 % 250, (i * 5 + j) % 250);
            let _ = write!(
                t,
                "\n\tchain {} {{\n\t\tip saddr {ip} counter packets 0 bytes 0 jump KUBE-MARK-MASQ\n\t\tmeta l4proto tcp  counter packets 0 bytes 0 dnat to {ip}:8080\n\t}}\n",
                name("SEP", i, j)
            );
        }
    }
    t.push_str("}\n");
    t
}

/// The read peaks at under 5x the input besides the input (it took 14x), the model translated.
#[test]
fn reading_an_iptables_nft_listing_peaks_under_5x_the_input() {
    let _one = heap::measuring();
    let text = kube_proxy_nft_listing(2000);
    let input = text.len();
    let before = heap::reset_peak();
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let peak = heap::peak() - before;
    let rs = &parsed.ruleset;
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    assert_eq!(rs.tables[0].backend, Backend::IptablesNft);
    assert_eq!(rs.rule_count(), 2 + 2000 * (1 + 6 + 10));
    let ratio = peak as f64 / input as f64;
    eprintln!("input {input} bytes, peak heap {peak} bytes: {ratio:.2}x");
    assert!(ratio < 5.0, "peak heap {ratio:.2}x the input");
}

/// Handed the text (`parse_owned`, what the CLI does), the read never holds the nft
/// listing and the translated table's iptables model at once: it frees the listing
/// once read, before the iptables text is joined and parsed. The peak, the input
/// included, stays under 3.5x the input (it is 3.2x; the read that held the listing
/// until the model was built, the `-A` lines with their chain names, a 48-byte record
/// a rule in a vector grown by doubling and each chain's name as a string of its own
/// peaked at 4.7x).
#[test]
fn reading_an_owned_iptables_nft_listing_frees_it_before_the_model_is_built() {
    let _one = heap::measuring();
    let text = kube_proxy_nft_listing(2000);
    let input = text.len();
    let before = heap::reset_peak() - input;
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let peak = heap::peak() - before;
    let held = heap::live() - before;
    let rs = &parsed.ruleset;
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    assert_eq!(rs.tables[0].backend, Backend::IptablesNft);
    assert_eq!(rs.rule_count(), 2 + 2000 * (1 + 6 + 10));
    let ratio = peak as f64 / input as f64;
    eprintln!(
        "input {input} bytes, peak heap {peak} bytes ({ratio:.2}x, the input included), model {held} bytes ({:.2}x)",
        held as f64 / input as f64
    );
    assert!(
        ratio < 3.5,
        "peak heap {ratio:.2}x the input, the input included"
    );
}
