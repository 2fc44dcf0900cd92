//! Tests of the traced host-firewall checks: the CentOS/RHEL catch-all REJECT, the same
//! REJECT after the CNI's accepts, UFW, listings that hide interfaces, Docker and UFW.

use super::*;

fn run(text: &str) -> Vec<Finding> {
    crate::checks::run_on_dump(check, text)
}

fn find<'a>(f: &'a [Finding], id: &str) -> &'a Finding {
    f.iter()
        .find(|x| x.id == id)
        .unwrap_or_else(|| panic!("no {id} in {f:#?}"))
}

/// A kube-proxy node (generated, exact kube-proxy output) with Flannel's chains and
/// extra filter rules appended at the end of INPUT and FORWARD.
fn node_with(input: &[&str], forward: &[&str]) -> String {
    let dump = crate::checks::kube_proxy_dump(5);
    let mut out = String::new();
    let mut in_filter = false;
    for line in dump.lines() {
        if line == "*filter" {
            in_filter = true;
        }
        if in_filter && line == "COMMIT" {
            out.push_str(":FLANNEL-FWD - [0:0]\n");
            out.push_str("-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD\n");
            for r in forward {
                out.push_str(&format!("-A FORWARD {r}\n"));
            }
            for r in input {
                out.push_str(&format!("-A INPUT {r}\n"));
            }
            in_filter = false;
        }
        if line == "*nat" {
            out.push_str("*nat\n:FLANNEL-POSTRTG - [0:0]\n");
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

const REJECT: &str = "-j REJECT --reject-with icmp-host-prohibited";

#[test]
fn centos_catch_all_reject_in_input_blocks_kubelet_and_vxlan() {
    // iptables-services' default ruleset on a Kubernetes node: policy ACCEPT, then a
    // catch-all REJECT at the end of INPUT that only ssh and icmp pass.
    let text = node_with(
        &[
            "-m state --state RELATED,ESTABLISHED -j ACCEPT",
            "-p icmp -j ACCEPT",
            "-i lo -j ACCEPT",
            "-p tcp -m state --state NEW -m tcp --dport 22 -j ACCEPT",
            REJECT,
        ],
        &[],
    );
    let f = run(&text);
    let inp = find(&f, ID_INPUT);
    assert!(inp.is_problem(), "{inp:#?}");
    assert!(inp.title.contains("10250/tcp"), "{}", inp.title);
    assert!(inp.title.contains("8472/udp"), "{}", inp.title);
    // The generated node uses k3s's networks: RKE2's supervisor port is named, only as
    // "may be" (the rules cannot tell an RKE2 server).
    assert!(!inp.title.contains("9345"), "{}", inp.title);
    assert!(
        inp.explanation
            .contains("9345/tcp from other nodes (RKE2 supervisor")
            && inp.explanation.contains("if this node is an RKE2 server"),
        "{}",
        inp.explanation
    );
    // The evidence is the REJECT rule itself, with its line.
    let ev = inp.evidence.last().unwrap();
    assert!(ev.text.contains("icmp-host-prohibited"), "{ev:?}");
    assert!(ev.line.is_some());
    assert_eq!(find(&f, ID_FORWARD).status, Status::Ok, "{f:#?}");
}

#[test]
fn centos_catch_all_reject_in_forward_blocks_pods_and_the_api() {
    let text = node_with(&[], &[REJECT]);
    let f = run(&text);
    let fwd = find(&f, ID_FORWARD);
    assert!(fwd.is_problem(), "{fwd:#?}");
    // Pods reach the API server through the kubernetes ClusterIP: proven blocked.
    assert_eq!(fwd.severity, Severity::Critical, "{}", fwd.title);
    assert!(fwd.title.contains("kubernetes API"), "{}", fwd.title);
    assert!(
        fwd.evidence
            .iter()
            .any(|e| e.text.contains("-A FORWARD -j REJECT")),
        "{:#?}",
        fwd.evidence
    );
}

#[test]
fn reject_after_the_cni_and_node_accepts_is_not_a_problem() {
    // The same catch-alls, placed after accepts for the pod network and the node's ports
    // (the benign OpenShift/RHEL layout): nothing the node needs reaches them.
    let text = node_with(
        &[
            "-p tcp -m tcp --dport 10250 -j ACCEPT",
            "-p udp -m udp --dport 8472 -j ACCEPT",
            "-p tcp -m tcp --dport 6443 -j ACCEPT",
            "-p tcp -m tcp --dport 9345 -j ACCEPT",
            REJECT,
        ],
        &[REJECT],
    )
    .replace(
        ":FLANNEL-FWD - [0:0]\n",
        ":FLANNEL-FWD - [0:0]\n-A FLANNEL-FWD -s 10.42.0.0/16 -j ACCEPT\n-A FLANNEL-FWD -d 10.42.0.0/16 -j ACCEPT\n",
    );
    let f = run(&text);
    assert_eq!(find(&f, ID_INPUT).status, Status::Ok, "{f:#?}");
    // kube-proxy's `! -s 10.42.0.0/16` rules name the pod network; the accepts cover it.
    assert_eq!(find(&f, ID_FORWARD).status, Status::Ok, "{f:#?}");
    // Without the accept for RKE2's supervisor port: whether the node needs it is not
    // in the rules (an RKE2 server does, k3s and agents do not), so not a problem.
    let f = run(&text.replace("-A INPUT -p tcp -m tcp --dport 9345 -j ACCEPT\n", ""));
    let inp = find(&f, ID_INPUT);
    assert_eq!(inp.status, Status::Unknown, "{inp:#?}");
    assert!(
        inp.title.contains("9345/tcp") && inp.title.contains("RKE2 server"),
        "{}",
        inp.title
    );
}

#[test]
fn an_accept_for_one_node_address_leaves_the_input_verdict_unknown() {
    // `-d 10.0.0.5` may be this node's address or not: the rules do not say.
    let text = node_with(
        &[
            "-d 10.0.0.5/32 -p tcp -m tcp --dport 10250 -j ACCEPT",
            REJECT,
        ],
        &[],
    );
    let f = run(&text);
    let inp = find(&f, ID_INPUT);
    // 8472 is still blocked outright; 10250 only maybe.
    assert!(inp.is_problem(), "{inp:#?}");
    assert!(inp.title.contains("8472/udp"), "{}", inp.title);
    assert!(!inp.title.contains("10250/tcp"), "{}", inp.title);
}

#[test]
fn a_drop_for_one_interface_is_not_a_catch_all() {
    let text = node_with(&[], &["-o eth9 -j DROP"]);
    let f = run(&text);
    let fwd = find(&f, ID_FORWARD);
    assert!(!fwd.is_problem(), "{fwd:#?}");
    // Pods may sit on docker0: traffic to them may meet this DROP, traffic between
    // nodes may not. Not decidable, never a problem.
    let text = node_with(&[], &["-o docker0 -j DROP"]);
    let f = run(&text);
    assert_eq!(find(&f, ID_FORWARD).status, Status::Unknown, "{f:#?}");
}

#[test]
fn listing_without_interfaces_is_never_a_problem() {
    // `iptables -L` hides -i/-o: this DROP may be `-o weave -j DROP`.
    let text = "Chain INPUT (policy ACCEPT)\ntarget     prot opt source               destination\n\nChain FORWARD (policy ACCEPT)\ntarget     prot opt source               destination\nKUBE-FORWARD  all  --  anywhere             anywhere             /* kubernetes forwarding rules */\nDROP       all  --  anywhere             anywhere\nACCEPT     all  --  anywhere             anywhere\n\nChain OUTPUT (policy ACCEPT)\ntarget     prot opt source               destination\n\nChain KUBE-FORWARD (1 references)\ntarget     prot opt source               destination\n";
    let rs = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default())
        .unwrap()
        .ruleset;
    let f = check(&CheckInput::new(
        &rs,
        crate::facts::Origin::File("l".into()),
        false,
    ));
    let fwd = find(&f, ID_FORWARD);
    assert_eq!(fwd.status, Status::Unknown, "{fwd:#?}");
    // The same listing with -v columns showing no interface: a catch-all, a problem.
    let v = "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)\n pkts bytes target     prot opt in     out     source               destination\n\nChain FORWARD (policy ACCEPT 0 packets, 0 bytes)\n pkts bytes target     prot opt in     out     source               destination\n    0     0 KUBE-FORWARD  all  --  *      *       0.0.0.0/0            0.0.0.0/0            /* kubernetes forwarding rules */\n    5   300 DROP       all  --  *      *       0.0.0.0/0            0.0.0.0/0\n\nChain OUTPUT (policy ACCEPT 0 packets, 0 bytes)\n pkts bytes target     prot opt in     out     source               destination\n\nChain KUBE-FORWARD (1 references)\n pkts bytes target     prot opt in     out     source               destination\n";
    let rs = plumb_ruleset::parse_bytes(v.as_bytes(), &Default::default())
        .unwrap()
        .ruleset;
    let f = check(&CheckInput::new(
        &rs,
        crate::facts::Origin::File("l".into()),
        false,
    ));
    let fwd = find(&f, ID_FORWARD);
    assert!(fwd.is_problem(), "{fwd:#?}");
    assert!(fwd.title.contains("stopped 5 packets"), "{}", fwd.title);
    // The rule is shown without its counter columns and padding.
    assert!(
        fwd.title
            .contains("(`DROP all -- * * 0.0.0.0/0 0.0.0.0/0`)"),
        "{}",
        fwd.title
    );
    // With `-o weave` shown, the DROP is not a catch-all.
    let weave = v.replace(
        "DROP       all  --  *      *  ",
        "DROP       all  --  *      weave",
    );
    let rs = plumb_ruleset::parse_bytes(weave.as_bytes(), &Default::default())
        .unwrap()
        .ruleset;
    let f = check(&CheckInput::new(
        &rs,
        crate::facts::Origin::File("l".into()),
        false,
    ));
    assert!(!find(&f, ID_FORWARD).is_problem(), "{f:#?}");
}

#[test]
fn ufw_on_a_kube_proxy_node_blocks_forwarding_and_kubelet() {
    // UFW's defaults (deny incoming, deny routed) on a kube-proxy node.
    let base = node_with(&[], &[]);
    let (head, filter) = base.split_at(base.find("*filter").unwrap());
    let filter = filter.replace(
        ":INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]",
        ":INPUT DROP [0:0]\n:FORWARD DROP [0:0]",
    );
    let text = format!("{head}{filter}")
        .replace(
            ":FLANNEL-FWD - [0:0]\n",
            ":FLANNEL-FWD - [0:0]\n:ufw-before-input - [0:0]\n:ufw-user-input - [0:0]\n-A INPUT -j ufw-before-input\n-A ufw-before-input -i lo -j ACCEPT\n-A ufw-before-input -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A ufw-before-input -j ufw-user-input\n-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT\n",
        );
    assert!(text.contains(":INPUT DROP"), "{text}");
    let f = run(&text);
    let inp = find(&f, ID_INPUT);
    assert!(inp.is_problem(), "{inp:#?}");
    assert!(
        inp.title.contains("policy DROP of filter INPUT"),
        "{}",
        inp.title
    );
    let fwd = find(&f, ID_FORWARD);
    assert!(fwd.is_problem(), "{fwd:#?}");
}

#[test]
fn kube_proxy_rejects_for_services_without_endpoints_are_not_host_firewall() {
    // kube-proxy's own REJECTs and the CNI's policy drops are intended.
    let text = node_with(&[], &[]).replace(
        ":FLANNEL-FWD - [0:0]\n",
        ":FLANNEL-FWD - [0:0]\n:KUBE-POD-FW-ABC - [0:0]\n-A FORWARD -j KUBE-POD-FW-ABC\n-A KUBE-POD-FW-ABC -j REJECT --reject-with icmp-port-unreachable\n",
    );
    let f = run(&text);
    assert_eq!(find(&f, ID_FORWARD).status, Status::Ok, "{f:#?}");
}

#[test]
fn healthy_kube_proxy_node_is_ok() {
    let f = run(&crate::checks::kube_proxy_dump(5));
    assert!(f.iter().all(|x| x.status == Status::Ok), "{f:#?}");
}

#[test]
fn docker_published_ports_before_ufw_bypass_it() {
    let text = "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER - [0:0]\n:DOCKER-USER - [0:0]\n:ufw-before-forward - [0:0]\n:ufw-before-input - [0:0]\n-A INPUT -j ufw-before-input\n-A FORWARD -j DOCKER-USER\n-A FORWARD -o docker0 -j DOCKER\n-A FORWARD -j ufw-before-forward\n-A DOCKER -d 172.17.0.2/32 ! -i docker0 -o docker0 -p tcp -m tcp --dport 9443 -j ACCEPT\n-A DOCKER-USER -j RETURN\n-A ufw-before-input -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n";
    let f = run(text);
    let d = find(&f, ID_DOCKER_UFW);
    assert!(d.is_problem(), "{d:#?}");
    assert!(d.title.contains("172.17.0.2:9443/tcp"), "{}", d.title);
    assert!(
        d.title.contains("UFW denies 9443/tcp on the host"),
        "{}",
        d.title
    );
    // UFW first: no bypass.
    let ufw_first = text.replace(
        "-A FORWARD -j DOCKER-USER\n-A FORWARD -o docker0 -j DOCKER\n-A FORWARD -j ufw-before-forward\n",
        "-A FORWARD -j ufw-before-forward\n-A FORWARD -j DOCKER-USER\n-A FORWARD -o docker0 -j DOCKER\n",
    );
    let f = run(&ufw_first);
    assert_eq!(find(&f, ID_DOCKER_UFW).status, Status::Ok, "{f:#?}");
    // No forward-drop/input-drop findings on a host without Kubernetes.
    assert!(!f.iter().any(|x| x.id == ID_FORWARD || x.id == ID_INPUT));
}

#[test]
fn forward_accepting_only_the_tunnel_blocks_pods_of_the_same_node() {
    // FORWARD passes what enters or leaves the VXLAN device, then rejects: pods of
    // different nodes may talk (through flannel.1), two pods of this node never do
    // (neither side of their path is a tunnel).
    let text = node_with(
        &[],
        &["-i flannel.1 -j ACCEPT", "-o flannel.1 -j ACCEPT", REJECT],
    );
    let f = run(&text);
    let fwd = find(&f, ID_FORWARD);
    assert!(fwd.is_problem(), "{fwd:#?}");
    assert!(
        fwd.title.contains("pod -> pod on this node"),
        "{}",
        fwd.title
    );
    assert!(
        fwd.evidence
            .iter()
            .any(|e| e.text.contains("icmp-host-prohibited")),
        "{:#?}",
        fwd.evidence
    );
}

#[test]
fn docker_published_ports_before_ufw_bypass_it_on_ipv6() {
    // ip6tables-save of a UFW host whose Docker publishes on IPv6: the same chains.
    let text = "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER - [0:0]\n:DOCKER-USER - [0:0]\n:ufw6-before-forward - [0:0]\n:ufw6-before-input - [0:0]\n-A INPUT -j ufw6-before-input\n-A FORWARD -j DOCKER-USER\n-A FORWARD -o docker0 -j DOCKER\n-A FORWARD -j ufw6-before-forward\n-A DOCKER -d fd00:dead:beef::2/128 ! -i docker0 -o docker0 -p tcp -m tcp --dport 9443 -j ACCEPT\n-A DOCKER-USER -j RETURN\n-A ufw6-before-input -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n";
    let rs = plumb_ruleset::iptables::save::parse(
        text,
        &plumb_ruleset::iptables::save::IptablesInput {
            family: Family::Ip6,
            ..Default::default()
        },
    );
    assert!(rs.tables.iter().all(|t| t.family == Family::Ip6));
    let f = check(&CheckInput::new(
        &rs,
        crate::facts::Origin::File("d".into()),
        false,
    ));
    let d: Vec<&Finding> = f.iter().filter(|x| x.id == ID_DOCKER_UFW).collect();
    assert_eq!(d.len(), 1, "{f:#?}");
    assert!(d[0].is_problem(), "{:#?}", d[0]);
    assert!(d[0].title.starts_with("IPv6: "), "{}", d[0].title);
    assert!(
        d[0].title.contains("fd00:dead:beef::2:9443/tcp"),
        "{}",
        d[0].title
    );
}
