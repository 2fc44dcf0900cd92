//! The service map recovered from captures that are not iptables-save dumps, on real
//! nodes' files (`../shared/corpus/real-world/`, README per file): `iptables -t nat -S`
//! read without `--table`, `-L` listings (with `--line-numbers`, HTML debris, names
//! resolved, `column -t`) and pasted sessions. A missing corpus skips with a reason.

use plumb_kubeproxy::recover::{RecoveredService, recover};
use plumb_ruleset::{ParseOptions, Ruleset, parse_bytes};

fn load(rel: &str) -> Option<Ruleset> {
    let p = plumb_testkit::corpus_dir()?.join("real-world").join(rel);
    if !p.is_file() {
        plumb_testkit::skip(&format!("{} not in the corpus", p.display()));
        return None;
    }
    let bytes = std::fs::read(&p).unwrap();
    Some(
        parse_bytes(&bytes, &ParseOptions::default())
            .unwrap()
            .ruleset,
    )
}

/// (name, cluster IP, endpoint addresses sorted) per service port, sorted.
fn rows(rs: &Ruleset) -> Vec<(String, String, Vec<String>)> {
    let mut out: Vec<_> = recover(rs)
        .iter()
        .flat_map(|m| m.services.iter())
        .map(|s: &RecoveredService| {
            let mut eps: Vec<String> = s
                .endpoints
                .iter()
                .filter_map(|e| e.address().map(str::to_string))
                .collect();
            eps.sort();
            (
                s.name.clone().unwrap_or_default(),
                s.cluster_ip.map(|i| i.to_string()).unwrap_or_default(),
                eps,
            )
        })
        .collect();
    out.sort();
    out
}

fn row(name: &str, ip: &str, eps: &[&str]) -> (String, String, Vec<String>) {
    (
        name.into(),
        ip.into(),
        eps.iter().map(|e| e.to_string()).collect(),
    )
}

#[test]
fn eks_nat_list_rules_gives_cluster_ips_and_endpoints() {
    let Some(rs) = load("iptables-list/eks-1.24_aws-vpc-cni-1.11.4_node_iptables-t-nat-S.txt")
    else {
        return;
    };
    assert_eq!(
        rows(&rs),
        vec![
            row(
                "default/kubernetes:https",
                "10.100.0.1",
                &["192.168.1.84:443", "192.168.2.41:443"]
            ),
            row(
                "kube-system/kube-dns:dns",
                "10.100.0.10",
                &["192.168.2.110:53", "192.168.2.202:53"]
            ),
            row(
                "kube-system/kube-dns:dns-tcp",
                "10.100.0.10",
                &["192.168.2.110:53", "192.168.2.202:53"]
            ),
        ]
    );
}

#[test]
fn antrea_listing_with_html_tags_gives_named_services_with_endpoints() {
    let Some(rs) =
        load("iptables-list/antrea_k8s-1.18.8_worker1_iptables-t-nat-L-n_with-HTML-b-tags.txt")
    else {
        return;
    };
    let r = rows(&rs);
    assert!(
        r.contains(&row(
            "default/backendsvc:",
            "10.104.65.133",
            &["10.222.1.47:80", "10.222.2.34:80"]
        )),
        "{r:?}"
    );
    assert!(
        r.contains(&row(
            "default/kubernetes:https",
            "10.96.0.1",
            &["10.79.1.200:6443"]
        )),
        "{r:?}"
    );
    assert!(
        r.contains(&row(
            "kube-system/kube-dns:dns",
            "10.96.0.10",
            &["10.222.1.2:53", "10.222.2.2:53"]
        )),
        "{r:?}"
    );
    let octant = recover(&rs)
        .into_iter()
        .flat_map(|m| m.services)
        .find(|s| s.name.as_deref() == Some("kube-system/antrea-octant:"))
        .unwrap();
    assert_eq!(*octant.node_ports, [31067]);
}

#[test]
fn calico_listing_with_line_numbers_and_redactions_gives_every_service() {
    let Some(rs) =
        load("iptables-list/calico-kubeadm_worker1_iptables-t-nat-L-v-n--line-numbers.txt")
    else {
        return;
    };
    let r = rows(&rs);
    assert_eq!(r.len(), 7, "{r:?}");
    assert_eq!(
        r.iter()
            .find(|x| x.0 == "default/backend-service")
            .unwrap()
            .2
            .len(),
        3
    );
    // Redacted endpoint addresses cannot be hashed: no name mismatch is claimed.
    let mismatches: usize = recover(&rs).iter().map(|m| m.name_mismatches.len()).sum();
    assert_eq!(mismatches, 0);
}

#[test]
fn flannel_listing_with_names_resolved_gives_kube_dns_endpoints() {
    let Some(rs) = load("iptables-list/kubeadm-flannel_k8s-cp_iptables-t-nat-L_names-resolved.txt")
    else {
        return;
    };
    let r = rows(&rs);
    assert!(
        r.contains(&row(
            "default/kubernetes:https",
            "10.96.0.1",
            &["192.168.11.170:6443"]
        )),
        "{r:?}"
    );
    assert!(
        r.contains(&row(
            "kube-system/kube-dns:dns",
            "10.96.0.10",
            &["10.244.0.4:53", "10.244.0.5:53"]
        )),
        "{r:?}"
    );
}

#[test]
fn aks_column_t_session_gives_nginx_with_node_port_and_the_renamed_chains() {
    let Some(rs) = load(
        "iptables-list/aks-kubenet_kube-proxy-iptables_nat-L-n-column-t_REPOST-EDITED-comment-hash-mismatch.txt",
    ) else {
        return;
    };
    let maps = recover(&rs);
    let services: Vec<_> = maps.iter().flat_map(|m| &m.services).collect();
    assert_eq!(services.len(), 8);
    let nginx = services
        .iter()
        .find(|s| s.name.as_deref() == Some("default/nginx:"))
        .unwrap();
    assert_eq!(nginx.cluster_ip.unwrap().to_string(), "10.0.237.3");
    assert_eq!(nginx.port, Some(80));
    assert_eq!(*nginx.node_ports, [30450]);
    assert_eq!(nginx.endpoints.len(), 1);
    assert_eq!(nginx.endpoints[0].address(), Some("10.244.0.11:80"));
    // The repost renamed the Service in the comments: both of its chains are flagged.
    let flagged: Vec<&str> = maps
        .iter()
        .flat_map(|m| &m.name_mismatches)
        .map(|m| m.chain)
        .collect();
    assert_eq!(flagged.len(), 2, "{flagged:?}");
    assert!(flagged.contains(&"KUBE-SVC-GHSLGKVXVBRM4GZX"));
    assert!(flagged.contains(&"KUBE-SEP-QXDNOBCCLOXLV7LV"));
}

#[test]
fn aks_session_grep_of_save_gives_nginx() {
    let Some(rs) = load(
        "iptables-list/aks_k8s-1.26plus_node_iptables-vnL_wireserver-168.63.129.16-DROP_empty-services+grep-nginx.txt",
    ) else {
        return;
    };
    assert_eq!(
        rows(&rs),
        vec![row("default/nginx", "10.0.91.63", &["10.244.0.13:80"])]
    );
}

/// (protocol, VIP:port or node port, endpoints, probability of each) per IPVS service.
fn ipvs_rows(rs: &Ruleset) -> Vec<String> {
    use plumb_kubeproxy::recover::ProxyMode;
    let maps = recover(rs);
    assert!(
        maps.iter().all(|m| m.mode == ProxyMode::Ipvs),
        "IPVS mode only: {:?}",
        maps.iter().map(|m| m.mode).collect::<Vec<_>>()
    );
    maps.iter()
        .flat_map(|m| m.services.iter())
        .map(|s| {
            assert_eq!(s.name, None, "IPVS has no names");
            let at = match (s.cluster_ip, s.port) {
                (Some(ip), Some(p)) => format!("{ip}:{p}"),
                _ => format!("nodeport {:?}", s.node_ports),
            };
            let eps: Vec<String> = s
                .endpoints
                .iter()
                .map(|e| format!("{}={:?}", e.address().unwrap(), e.probability()))
                .collect();
            format!("{} {at} {}", s.protocol.as_deref().unwrap(), eps.join(","))
        })
        .collect()
}

/// `ipvsadm -ln` alone: the 4 virtual services at their addresses, each noted as not
/// confirmed a ClusterIP (no KUBE-CLUSTER-IP listing in the input).
#[test]
fn azure_ipvsadm_gives_the_four_virtual_services() {
    let Some(rs) = load("iptables-list/azure-kubeadm_kube-proxy-IPVS_calico_ipvsadm-ln.txt") else {
        return;
    };
    assert_eq!(rs.completeness, plumb_ruleset::Completeness::Partial);
    assert!(rs.diagnostics.is_empty(), "{:?}", rs.diagnostics);
    assert_eq!(
        ipvs_rows(&rs),
        [
            "tcp 10.96.0.1:443 172.16.0.4:6443=Some(1.0)",
            "tcp 10.96.0.10:53 192.168.0.17:53=Some(0.5),192.168.0.18:53=Some(0.5)",
            "tcp 10.106.42.178:44134 192.168.1.5:44134=Some(1.0)",
            "udp 10.96.0.10:53 192.168.0.17:53=Some(0.5),192.168.0.18:53=Some(0.5)",
        ]
    );
    let s = &recover(&rs)[0].services[0];
    assert!(
        s.notes[0].contains("not confirmed as a ClusterIP"),
        "{:?}",
        s.notes
    );
    assert_eq!(s.evidence[0].line(), 4);
}

/// The kind session (`ipt`/`ips`/`ipv` aliases): ClusterIPs are the virtual services in
/// the KUBE-CLUSTER-IP ipset listed in the same session; the NodePort 31730 served on
/// three node addresses is one row, not joined to a service because two ClusterIPs
/// (web and another) have the same endpoints.
#[test]
fn kind_ipvs_session_gives_cluster_ips_from_the_ipset_and_the_node_port() {
    let Some(rs) =
        load("iptables-list/kind-ipvs_k8s-guide-worker_iptables-nvL+ipset+ipvsadm_session.txt")
    else {
        return;
    };
    let web = "10.244.1.6:80=Some(0.5),10.244.2.4:80=Some(0.5)";
    let dns = |p: u16| format!("10.244.0.3:{p}=Some(0.5),10.244.0.4:{p}=Some(0.5)");
    assert_eq!(
        ipvs_rows(&rs),
        [
            "tcp 10.96.0.1:443 192.168.224.3:6443=Some(1.0)".to_string(),
            format!("tcp 10.96.0.10:53 {}", dns(53)),
            format!("tcp 10.96.0.10:9153 {}", dns(9153)),
            "tcp 10.96.10.207:3030 10.244.1.4:3030=Some(1.0)".into(),
            "tcp 10.96.68.46:3030 10.244.2.2:3030=Some(1.0)".into(),
            format!("tcp 10.96.119.228:80 {web}"),
            format!("tcp 10.96.148.225:80 {web}"),
            "tcp 10.96.159.35:11211 10.244.1.3:11211=Some(1.0)".into(),
            format!("udp 10.96.0.10:53 {}", dns(53)),
            format!("tcp nodeport [31730] {web}"),
        ]
    );
    let maps = recover(&rs);
    let np = maps[0].services.last().unwrap();
    assert!(
        np.notes[0].contains("192.168.224.4, 10.244.2.1, 127.0.0.1")
            && np.notes[0].contains("2 ClusterIPs have the same endpoints"),
        "{:?}",
        np.notes
    );
    assert_eq!(np.evidence.len(), 3, "one virtual service per node address");
    // The confirmed ClusterIPs carry no "not confirmed" note.
    assert!(maps[0].services[0].notes.is_empty());
}

mod ipvs_robustness {
    use plumb_kubeproxy::recover::recover;
    use plumb_ruleset::{Format, ParseOptions, parse_bytes};
    use proptest::prelude::*;

    const WORDS: &[&str] = &[
        "IP Virtual Server version 1.2.1 (size=4096)\n",
        "TCP",
        "UDP",
        "SCTP",
        "FWM",
        "->",
        "Masq",
        "Route",
        "rr",
        "wrr",
        "sh",
        "persistent",
        "10800",
        "0",
        "1",
        "4294967296",
        "-1",
        "10.96.0.1:443",
        "[fd00::1]:53",
        "[fd00::1]",
        "10.244.1.6:80",
        "1.2.3.4:",
        ":80",
        "\n",
        "  ",
        "Name: KUBE-CLUSTER-IP\n",
        "Type: hash:ip,port\n",
        "Members:\n",
        "10.96.0.1,tcp:443",
        "10.96.0.1,",
        ",tcp:",
        "$ ipvsadm -ln\n",
        "$ ipset list\n",
    ];

    proptest! {
        /// The ipvsadm and ipset readers and the IPVS service map never panic on
        /// shuffled pieces of their own syntax (the fuzz target `ipvsadm` does the same
        /// on arbitrary bytes), whole or as a session's output.
        #[test]
        fn ipvs_readers_and_recovery_never_panic(
            picks in proptest::collection::vec(0..WORDS.len(), 0..80)
        ) {
            let text: String = picks.iter().map(|&i| WORDS[i]).collect::<Vec<_>>().join(" ");
            for format in [None, Some(Format::Ipvsadm), Some(Format::Session)] {
                let opts = ParseOptions { format, ..Default::default() };
                if let Ok(p) = parse_bytes(text.as_bytes(), &opts) {
                    for m in recover(&p.ruleset) {
                        for s in &m.services {
                            for e in &s.endpoints {
                                if let Some(p) = e.probability() {
                                    prop_assert!((0.0..=1.0).contains(&p));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
