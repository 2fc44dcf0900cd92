//! What a correct tool says about each real-world ruleset in the shared corpus
//! (`real-world/README.md` there is the source of every line below: the true problems, the
//! false positives to avoid, the service maps the authors' data shows).

/// How an input file is to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// A genuine, complete dump: read with no parse diagnostics, completeness `full`.
    Genuine,
    /// A genuine capture of part of the rules (grep-filtered, single chains, `-A` lines
    /// only): read with no parse errors, never judged as `full`.
    Fragment,
    /// Damaged by its author (wrapped lines, removed COMMIT lines): must be flagged
    /// (parse errors, or a completeness other than `full`).
    Damaged,
    /// Either read cleanly or refused/flagged with a clear reason: the README accepts both
    /// (author's HTML tags, a non-ruleset table such as `ipvsadm -ln`).
    Either,
}

/// The service map a correct tool recovers.
#[derive(Clone, Copy, Debug)]
pub enum Services {
    /// Not judged for this file (filter-only listings, IPVS, damaged input).
    NotJudged,
    /// Exactly these service ports (with a cluster IP), no more.
    Exact(&'static [&'static str]),
    /// At least these (the capture shows only some services' chains).
    AtLeast(&'static [&'static str]),
}

/// One corpus file and what must be said about it.
pub struct Expect {
    /// Path under `real-world/`.
    pub file: &'static str,
    pub input: Input,
    /// Finding ids that are true problems on this node: each must be reported as a problem.
    pub problems: &'static [&'static str],
    /// Ids the README leaves open (a correct tool may or may not report them): neither
    /// counted as true nor as false.
    pub tolerated: &'static [&'static str],
    /// Service ports as `"NAME IP:PORT/PROTO ENDPOINTS"`; PORT `*` when the capture does
    /// not show it (listings that cut the `dpt:` column), ENDPOINTS `?` when it does not
    /// show the service chain.
    pub services: Services,
}

const K3S_SERVICES: &[&str] = &[
    "default/kubernetes:https 10.43.0.1:443/tcp 1",
    "default/redis 10.43.111.105:6379/tcp 1",
    "default/registry 10.43.188.231:5000/tcp 1",
    "default/sumnivore 10.43.11.157:80/tcp 1",
    "default/sumnivore-bun 10.43.112.136:80/tcp 1",
    "default/tuby-dlna:dlna-udp 10.43.181.51:1900/udp 1",
    "default/tuby:http 10.43.158.42:80/tcp 1",
    "default/ytdl 10.43.63.99:80/tcp 1",
    "kube-system/kube-dns:dns 10.43.0.10:53/udp 1",
    "kube-system/kube-dns:dns-tcp 10.43.0.10:53/tcp 1",
    "kube-system/kube-dns:metrics 10.43.0.10:9153/tcp 1",
    "kube-system/metrics-server:https 10.43.151.224:443/tcp 1",
    "kube-system/traefik:web 10.43.85.149:80/tcp 1",
    "kube-system/traefik:websecure 10.43.85.149:443/tcp 1",
];

const GKE_BEFORE: &[&str] = &[
    "default/kubernetes:https 10.83.240.1:443/tcp 1",
    "kube-system/default-http-backend:http 10.83.242.211:80/tcp 1",
    "kube-system/heapster: 10.83.247.155:80/tcp 1",
    "kube-system/kube-dns:dns 10.83.240.10:53/udp 1",
    "kube-system/kube-dns:dns-tcp 10.83.240.10:53/tcp 1",
    "kube-system/kubernetes-dashboard: 10.83.254.147:80/tcp 1",
];

const GKE_AFTER: &[&str] = &[
    "default/apache: 10.83.252.143:80/tcp 1",
    "default/nginx: 10.83.252.224:80/tcp 1",
    "default/kubernetes:https 10.83.240.1:443/tcp 1",
    "kube-system/default-http-backend:http 10.83.242.211:80/tcp 1",
    "kube-system/heapster: 10.83.247.155:80/tcp 1",
    "kube-system/kube-dns:dns 10.83.240.10:53/udp 1",
    "kube-system/kube-dns:dns-tcp 10.83.240.10:53/tcp 1",
    "kube-system/kubernetes-dashboard: 10.83.254.147:80/tcp 1",
];

/// Every ruleset file of `real-world/` (the logs are doctor's).
pub const ALL: &[Expect] = &[
    // --- host-firewall/
    Expect {
        file: "host-firewall/centos7-firewalld-iptables-backend_iptables-save-v1.4.21_no-k8s_REJECT-catch-alls.iptables-save",
        input: Input::Genuine,
        problems: &[],
        // Not a Kubernetes node: the README's findings are "if this were a k8s node".
        tolerated: &["forward-drop-blocks-pods", "input-drop-blocks-node"],
        services: Services::Exact(&[]),
    },
    Expect {
        file: "host-firewall/centos7-iptables-services_k8s-1.8-flannel0-udp_FORWARD-REJECT-icmp-host-prohibited_iptables-nL-v.txt",
        input: Input::Genuine,
        problems: &["forward-drop-blocks-pods"],
        // The second catch-all REJECT ends INPUT: kubelet's port is not among the ACCEPTs.
        tolerated: &["input-drop-blocks-node"],
        services: Services::NotJudged,
    },
    Expect {
        file: "host-firewall/docker-portainer+ufw_ubuntu_iptables-S_FORWARD-DROP_docker-bypasses-ufw.txt",
        input: Input::Genuine,
        problems: &["docker-bypasses-ufw"],
        tolerated: &[],
        services: Services::Exact(&[]),
    },
    // --- iptables-list/
    Expect {
        file: "iptables-list/aks-kubenet_kube-proxy-iptables_nat-L-n-column-t_REPOST-EDITED-comment-hash-mismatch.txt",
        input: Input::Fragment,
        problems: &["kube-proxy-chain-hash-mismatch"],
        tolerated: &[],
        services: Services::AtLeast(&["default/nginx: 10.0.237.3:80/tcp 1"]),
    },
    Expect {
        file: "iptables-list/aks_k8s-1.26plus_node_iptables-vnL_wireserver-168.63.129.16-DROP_empty-services+grep-nginx.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        // The grep'd KUBE-SERVICES rule has no --dport.
        services: Services::AtLeast(&["default/nginx 10.0.91.63:*/tcp 1"]),
    },
    Expect {
        file: "iptables-list/antrea_k8s-1.18.8_worker1_iptables-t-nat-L-n_with-HTML-b-tags.txt",
        input: Input::Either,
        problems: &[],
        tolerated: &[],
        services: Services::AtLeast(&[
            "default/backendsvc: 10.104.65.133:80/tcp 2",
            "default/kubernetes:https 10.96.0.1:443/tcp 1",
            "kube-system/antrea: 10.110.254.249:443/tcp 1",
            "kube-system/antrea-octant: 10.109.110.219:80/tcp 1",
            "kube-system/kube-dns:dns 10.96.0.10:53/udp 2",
            "kube-system/kube-dns:dns-tcp 10.96.0.10:53/tcp 2",
            "kube-system/kube-dns:metrics 10.96.0.10:9153/tcp 2",
        ]),
    },
    Expect {
        file: "iptables-list/azure-kubeadm_kube-proxy-IPVS_calico_ipvsadm-ln.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        // IPVS virtual services carry no names (`?`).
        services: Services::Exact(&[
            "? 10.96.0.1:443/tcp 1",
            "? 10.96.0.10:53/tcp 2",
            "? 10.96.0.10:53/udp 2",
            "? 10.106.42.178:44134/tcp 1",
        ]),
    },
    Expect {
        file: "iptables-list/calico-ipip-kans-2022_k8s-w0_iptables-t-filter-S-grep-cali_FILTERED.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-list/calico-kubeadm_worker1_iptables-t-nat-L-v-n--line-numbers.txt",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(&[
            "calico-apiserver/calico-api:apiserver 10.97.160.76:*/tcp 2",
            "calico-system/calico-typha:calico-typha 10.101.222.35:*/tcp 2",
            "default/backend-service 10.97.199.177:*/tcp 3",
            "default/kubernetes:https 10.96.0.1:*/tcp 1",
            "kube-system/kube-dns:dns 10.96.0.10:*/udp 2",
            "kube-system/kube-dns:dns-tcp 10.96.0.10:*/tcp 2",
            "kube-system/kube-dns:metrics 10.96.0.10:*/tcp 2",
        ]),
    },
    Expect {
        file: "iptables-list/calico-v2.x-2017_felix-to-endpoint-chain_iptables-L_pre-cali-prefix.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-list/eks-1.24_aws-vpc-cni-1.11.4_node_iptables-t-nat-S.txt",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(&[
            "default/kubernetes:https 10.100.0.1:443/tcp 2",
            "kube-system/kube-dns:dns 10.100.0.10:53/udp 2",
            "kube-system/kube-dns:dns-tcp 10.100.0.10:53/tcp 2",
        ]),
    },
    Expect {
        file: "iptables-list/kind-ipvs_k8s-guide-worker_iptables-nvL+ipset+ipvsadm_session.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        services: Services::AtLeast(&[
            "? 10.96.0.1:443/tcp 1",
            "? 10.96.0.10:53/tcp 2",
            "? 10.96.0.10:53/udp 2",
            "? 10.96.0.10:9153/tcp 2",
            "? 10.96.10.207:3030/tcp 1",
            "? 10.96.68.46:3030/tcp 1",
            "? 10.96.119.228:80/tcp 2",
            "? 10.96.148.225:80/tcp 2",
            "? 10.96.159.35:11211/tcp 1",
        ]),
    },
    Expect {
        file: "iptables-list/kubeadm-flannel_k8s-cp_iptables-L_filter_names-resolved.txt",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-list/kubeadm-flannel_k8s-cp_iptables-t-nat-L_names-resolved.txt",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(&[
            "default/kubernetes:https 10.96.0.1:*/tcp 1",
            "kube-system/kube-dns:dns 10.96.0.10:*/udp 2",
            "kube-system/kube-dns:dns-tcp 10.96.0.10:*/tcp 2",
            "kube-system/kube-dns:metrics 10.96.0.10:*/tcp 2",
        ]),
    },
    Expect {
        file: "iptables-list/nerdctl-cni-bridge-portmap_lima-vm_iptables-t-nat-S.txt",
        input: Input::Genuine,
        // CNI-DN-2d72aeb202429907277c5: declared, referenced, empty: a stale portmap chain.
        problems: &["stale-chain"],
        tolerated: &[],
        services: Services::Exact(&[]),
    },
    Expect {
        file: "iptables-list/openshift3-origin_master_iptables-nL_icmp-host-prohibited.txt",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-list/openshift3-origin_node_iptables-nL_icmp-host-prohibited.txt",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-list/podman-cni+docker+libvirt_host_iptables-t-nat-S_no-P-N-lines.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-list/weave+flannel-both-installed_k8s-1.28_iptables-list_argocd-no-endpoints.txt",
        input: Input::Genuine,
        problems: &["multiple-cnis", "service-no-endpoints"],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-list/weave-k8s-1.19_after-iptables-F_all-chains-0-references_iptables-L-n.txt",
        input: Input::Genuine,
        problems: &["table-flushed"],
        tolerated: &[],
        services: Services::NotJudged,
    },
    // --- iptables-save/
    Expect {
        file: "iptables-save/ack-cilium-1.18_kube-proxy-ipvs_iptables-save-grep-cilium_FILTERED.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-save/azure-kubeadm_kube-proxy-IPVS_calico_iptables-save-grep-KUBE_FILTERED.txt",
        input: Input::Fragment,
        problems: &[],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-save/cce-cilium-kernel-4.19_kube-proxy-ipvs_iptables-save_AUTHOR-ANNOTATED-zh-comments_no-COMMIT.iptables-save",
        input: Input::Damaged,
        // `-A POSTROUTING -m mark --mark 0x21 -j MASQUERADE` twice in nat: true, harmless.
        problems: &["duplicate-rule"],
        tolerated: &[],
        services: Services::NotJudged,
    },
    Expect {
        file: "iptables-save/gke-2016-k8s-1.2_kubenet-cbr0_after-pods.iptables-save",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(GKE_AFTER),
    },
    Expect {
        file: "iptables-save/gke-2016-k8s-1.2_kubenet-cbr0_before-pods.iptables-save",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(GKE_BEFORE),
    },
    Expect {
        file: "iptables-save/k3s-1.30-pi_kube-router-netpol_flannel_ip6tables-nft-1.8.10.ip6tables-save",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(&[]),
    },
    Expect {
        file: "iptables-save/k3s-1.30-pi_kube-router-netpol_flannel_iptables-nft-1.8.10.iptables-save",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(K3S_SERVICES),
    },
    Expect {
        file: "iptables-save/k8s-1.1-era_coreos_flannel-old-FLANNEL-chain_MARK-0x4d415351.iptables-save",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(&[
            "default/kubernetes: 11.1.2.1:443/tcp 1",
            "default/redis-master: 11.1.2.87:6379/tcp 1",
            "kube-system/kube-dns:dns 11.1.2.10:53/udp 1",
            "kube-system/kube-dns:dns-tcp 11.1.2.10:53/tcp 1",
        ]),
    },
    Expect {
        file: "iptables-save/vagrant-k8s-1.2_flannel-old_worker_AUTHOR-EDITED-backslash-wrapped.iptables-save",
        input: Input::Damaged,
        problems: &[],
        // The empty UDP DNS service chain: real, or the author's editing (not certain).
        tolerated: &["service-no-endpoints"],
        services: Services::NotJudged,
    },
    // --- nft/
    Expect {
        file: "nft/ack-cilium-1.18_kube-proxy-ipvs_iptables-nft_nft-list-ruleset_match-set-comments.nft",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(&[]),
    },
    Expect {
        file: "nft/k3s-1.30-pi_kube-router-netpol_flannel_nft-list-ruleset.nft",
        input: Input::Genuine,
        problems: &[],
        tolerated: &[],
        services: Services::Exact(K3S_SERVICES),
    },
    Expect {
        file: "nft/microshift-ovn-kubernetes_nft-a-list-chain-ip-nat-PREROUTING_user-rule-in-iptables-nft-table.nft",
        input: Input::Fragment,
        problems: &["nft-rule-in-iptables-table"],
        tolerated: &[],
        services: Services::NotJudged,
    },
];
