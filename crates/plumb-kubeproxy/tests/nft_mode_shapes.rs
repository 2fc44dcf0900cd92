//! kube-proxy's nftables mode in the shapes its versions write, recovered to the same
//! service map: kube-proxy's own expected transaction (the upstream proxier test's
//! `TestOverallNFTablesRules`, in the shared corpus), the same services in the newer
//! shape that DNATs in the service chain (`dnat ip addr . port to numgen random mod N
//! map { i : IP . PORT }`, one endpoint `dnat to IP:PORT`), `nft list ruleset` of both
//! loaded into a private namespace, and a listing truncated before its endpoint chains.

use plumb_kubeproxy::recover::recover;
use plumb_ruleset::Ruleset;
use plumb_ruleset::format::{ParseOptions, parse_bytes};

fn parse(text: &str) -> Ruleset {
    parse_bytes(text.as_bytes(), &ParseOptions::default())
        .expect("readable")
        .ruleset
}

/// Every service as `name proto clusterIP:port nodeports ext lb none endpoints`.
fn services(rs: &Ruleset) -> Vec<String> {
    let mut out: Vec<String> = recover(rs)
        .iter()
        .flat_map(|m| {
            m.services.iter().map(|s| {
                let mut eps: Vec<String> = s
                    .endpoints
                    .iter()
                    .map(|e| {
                        format!(
                            "{}@{:.3}",
                            e.address().unwrap_or("?"),
                            e.probability().unwrap_or(0.0)
                        )
                    })
                    .collect();
                eps.sort();
                let mut ext = s.external_ips.clone();
                ext.sort();
                format!(
                    "{} {:?} {:?}:{:?} np={:?} ext={:?} lb={:?} aff={:?} none={:?} eps={eps:?}",
                    s.display_name(),
                    s.protocol,
                    s.cluster_ip,
                    s.port,
                    s.node_ports,
                    ext,
                    s.load_balancer_ips,
                    s.session_affinity_seconds,
                    s.no_endpoints
                )
            })
        })
        .collect();
    out.sort();
    out
}

/// The transaction in the newer shape: each `numgen random mod N vmap { i : goto
/// endpoint-…__IP/PORT }` becomes `meta l4proto PROTO dnat ip addr . port to numgen
/// random mod N map { i : IP . PORT }` (a single endpoint: `dnat to IP:PORT`), and the
/// endpoint chains' DNAT rules go (their hairpin and affinity rules stay).
fn newer_shape(transaction: &str) -> String {
    let mut out = String::new();
    for line in transaction.lines() {
        if line.contains(" numgen random mod ") && line.contains(" vmap { ") {
            let (head, rest) = line.split_once(" numgen random mod ").unwrap();
            let (n, entries) = rest.split_once(" vmap { ").unwrap();
            let entries = entries.trim_end_matches(" }");
            let proto = head.split('/').nth(2).unwrap_or("tcp");
            let targets: Vec<String> = entries
                .split(" , ")
                .map(|e| {
                    let (k, goto) = e.split_once(" : ").unwrap();
                    let (ip, port) = goto.rsplit_once("__").unwrap().1.rsplit_once('/').unwrap();
                    format!("{k} : {ip} . {port}")
                })
                .collect();
            if n == "1" {
                let (ip, port) = targets[0]
                    .split_once(" : ")
                    .unwrap()
                    .1
                    .split_once(" . ")
                    .unwrap();
                out.push_str(&format!(
                    "{head} meta l4proto {proto} dnat to {ip}:{port}\n"
                ));
            } else {
                out.push_str(&format!(
                    "{head} meta l4proto {proto} dnat ip addr . port to numgen random mod {n} map {{ {} }}\n",
                    targets.join(" , ")
                ));
            }
        } else if line.starts_with("add rule ip kube-proxy endpoint-") && line.contains(" dnat to ")
        {
            continue;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn transaction() -> Option<(String, String)> {
    plumb_testkit::kube_proxy_nft_transaction()
}

/// The six services of kube-proxy's own expectation, as plumb must read them.
const EXPECTED: &[&str] = &[
    "ns1/svc1:p80 Some(\"tcp\") Some(172.30.0.41):Some(80) np=[] ext=[] lb=[] aff=None none=None eps=[\"10.180.0.1:80@1.000\"]",
    "ns2/svc2:p80 Some(\"tcp\") Some(172.30.0.42):Some(80) np=[3001] ext=[1.2.3.4, 192.168.99.22] lb=[] aff=None none=Some(DropNoLocal) eps=[\"10.180.0.2:80@1.000\"]",
    "ns3/svc3:p80 Some(\"tcp\") Some(172.30.0.43):Some(80) np=[3003] ext=[] lb=[] aff=None none=None eps=[\"10.180.0.3:80@1.000\"]",
    "ns4/svc4:p80 Some(\"tcp\") Some(172.30.0.44):Some(80) np=[] ext=[192.168.99.33] lb=[] aff=None none=None eps=[\"10.180.0.4:80@0.500\", \"10.180.0.5:80@0.500\"]",
    "ns5/svc5:p80 Some(\"tcp\") Some(172.30.0.45):Some(80) np=[3002] ext=[] lb=[5.6.7.8] aff=Some(10800) none=None eps=[\"10.180.0.3:80@1.000\"]",
    "ns6/svc6:p80 Some(\"tcp\") Some(172.30.0.46):Some(80) np=[] ext=[] lb=[] aff=None none=Some(Reject) eps=[]",
];

#[test]
fn kube_proxy_expected_transaction_recovers_every_service() {
    let Some((text, _)) = transaction() else {
        return;
    };
    assert_eq!(services(&parse(&text)), EXPECTED);
}

/// Regression: endpoints came out `<none>` when kube-proxy DNATs in the service chain
/// through an inline numgen map (no endpoint chains) or with a single `dnat to`.
#[test]
fn newer_shape_dnat_numgen_map_in_the_service_chain_recovers_the_same_endpoints() {
    let Some((text, _)) = transaction() else {
        return;
    };
    let newer = newer_shape(&text);
    assert!(newer.contains("dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.4 . 80 , 1 : 10.180.0.5 . 80 }"));
    assert!(newer.contains("meta l4proto tcp dnat to 10.180.0.1:80"));
    assert_eq!(services(&parse(&newer)), EXPECTED);
}

/// Unequal draws: a range key counts as that many of the N draws.
#[test]
fn numgen_map_range_keys_weigh_endpoints() {
    let text = "table ip kube-proxy {\n\
        map service-ips {\n type ipv4_addr . inet_proto . inet_service : verdict\n elements = { 10.96.0.10 . tcp . 80 : goto service-AAAAAAAA-ns/web/tcp/http }\n }\n\
        chain services {\n ip daddr . meta l4proto . th dport vmap @service-ips\n }\n\
        chain service-AAAAAAAA-ns/web/tcp/http {\n meta l4proto tcp dnat ip to numgen random mod 4 map { 0-2 : 10.0.0.1 . 8080, 3 : 10.0.0.2 . 8080 }\n }\n}\n";
    let s = services(&parse(text));
    assert_eq!(s.len(), 1);
    assert!(
        s[0].ends_with("eps=[\"10.0.0.1:8080@0.750\", \"10.0.0.2:8080@0.250\"]"),
        "{s:?}"
    );
}

/// A listing cut before its endpoint chains still names each endpoint: the chain name
/// ends in `__IP/PORT` (kubeadm node, `nft -a list table`, truncated by its author).
#[test]
fn endpoint_addresses_come_from_chain_names_when_the_chains_are_cut_off() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let path = corpus.join(
        "kube-proxy-nftables/real-nodes/kubeadm-flannel_10.244-10.255_nft-a-list-table-kube-proxy_TRUNCATED-by-author.nft",
    );
    let rs = parse(&plumb_testkit::read(&path));
    let maps = recover(&rs);
    let svc = maps[0]
        .services
        .iter()
        .find(|s| s.display_name() == "home/http-server:mainhttp")
        .expect("home/http-server:mainhttp");
    let mut addrs: Vec<&str> = svc
        .endpoints
        .iter()
        .map(|e| e.address().unwrap_or("?"))
        .collect();
    addrs.sort();
    assert_eq!(
        addrs,
        [
            "10.244.1.71:8000",
            "10.244.1.72:8000",
            "10.244.1.73:8000",
            "10.244.1.76:8000"
        ]
    );
}

/// Privileged: both shapes loaded with `nft -f` into a private namespace
/// (`plumb-t-nftcompat-kp-<pid>-<n>`, deleted on drop) and listed back with `nft list
/// ruleset` give the same service map as the transaction.
#[test]
fn nft_listing_of_both_shapes_recovers_the_transactions_services() {
    if !plumb_testkit::privileged(&["ip", "nft"]) {
        return;
    }
    let Some((_, ordered)) = transaction() else {
        return;
    };
    for script in [ordered.clone(), newer_shape(&ordered)] {
        let ns = plumb_os::netns::Netns::create("plumb-t-nftcompat-kp")
            .expect("creating a test network namespace");
        let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(&script)).expect("nft -f");
        assert!(ok, "nft -f refused the transaction: {err}");
        let (ok, listed, err) = ns
            .exec("nft", &["list", "ruleset"], None)
            .expect("nft list");
        assert!(ok, "{err}");
        let rs = parse(&listed);
        assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
        assert_eq!(services(&rs), EXPECTED, "listing:\n{listed}");
    }
}
