//! Chain names kube-proxy derives from service and endpoint names.
//!
//! iptables mode (kubernetes `pkg/proxy/iptables/proxier.go`, `portProtoHash`,
//! `servicePortEndpointChainName`): the first 16 characters of
//! `base32(sha256(servicePortName + protocol))`, behind one of the prefixes `KUBE-SVC-`,
//! `KUBE-SVL-`, `KUBE-EXT-`, `KUBE-FW-`; endpoint chains `KUBE-SEP-` hash
//! `servicePortName + protocol + "ip:port"`. `servicePortName` is `ns/name:port`
//! (`ns/name` when the port is unnamed) and `protocol` is lower case (`tcp`, `udp`, `sctp`).
//!
//! nftables mode (kubernetes `pkg/proxy/nftables/proxier.go`, `hashAndTruncate`,
//! `servicePortChainNameBase`, `servicePortEndpointChainNameBase`): the base name is
//! `ns/name/proto/port` (endpoints: `ns/name/proto/port__ip/port`, IPv6 colons turned into
//! dots), prefixed by the first 8 characters of `base32(sha256(base))` and `-`, truncated to
//! 240 characters (ending in `...`), behind `service-`, `local-`, `external-`, `firewall-`,
//! `endpoint-` or `affinity-`.

use sha2::{Digest, Sha256};

/// Prefix of a per-service-port iptables chain (kubernetes `pkg/proxy/iptables/proxier.go`
/// constants `servicePortPolicyClusterChainNamePrefix` and friends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainPrefix {
    /// `KUBE-SVC-`: endpoints used with the `Cluster` traffic policy.
    Svc,
    /// `KUBE-SVL-`: node-local endpoints used with the `Local` traffic policy.
    Svl,
    /// `KUBE-EXT-`: external destinations (NodePort, LoadBalancer, external IPs).
    Ext,
    /// `KUBE-FW-`: `loadBalancerSourceRanges` filtering.
    Fw,
    /// `KUBE-SEP-`: one endpoint (its hash also covers the endpoint).
    Sep,
}

impl ChainPrefix {
    /// All prefixes, in the order kube-proxy's `isServiceChainName` lists them.
    pub const ALL: [ChainPrefix; 5] = [Self::Svc, Self::Svl, Self::Sep, Self::Fw, Self::Ext];

    /// The literal prefix, trailing dash included.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Svc => "KUBE-SVC-",
            Self::Svl => "KUBE-SVL-",
            Self::Ext => "KUBE-EXT-",
            Self::Fw => "KUBE-FW-",
            Self::Sep => "KUBE-SEP-",
        }
    }
}

/// Prefix of a per-service-port nftables chain or set (kubernetes
/// `pkg/proxy/nftables/proxier.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NftChainPrefix {
    /// `service-`
    Service,
    /// `local-`
    Local,
    /// `external-`
    External,
    /// `firewall-`
    Firewall,
    /// `endpoint-` (endpoint base name)
    Endpoint,
    /// `affinity-` (a set; endpoint base name)
    Affinity,
}

impl NftChainPrefix {
    /// The literal prefix, trailing dash included.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Service => "service-",
            Self::Local => "local-",
            Self::External => "external-",
            Self::Firewall => "firewall-",
            Self::Endpoint => "endpoint-",
            Self::Affinity => "affinity-",
        }
    }
}

const BASE32_ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// Fills `out` (at most 51 bytes) with the first characters of Go's
/// `base32.StdEncoding` of `sha256(input)`, without allocating.
fn sha256_base32_into(input: &[&str], out: &mut [u8]) {
    let mut hasher = Sha256::new();
    for part in input {
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut n = 0;
    let (mut acc, mut bits) = (0u32, 0u32);
    for &byte in digest.iter() {
        acc = (acc << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            if n == out.len() {
                return;
            }
            out[n] = BASE32_ALPHABET[((acc >> bits) & 31) as usize];
            n += 1;
        }
        acc &= (1 << bits) - 1;
    }
}

/// The first `n` characters (n <= 51) of Go's `base32.StdEncoding` of `sha256(input)`.
fn sha256_base32_prefix(input: &[&str], n: usize) -> String {
    let mut out = [0u8; 51];
    let n = n.min(out.len());
    sha256_base32_into(input, &mut out[..n]);
    out[..n].iter().map(|&b| char::from(b)).collect()
}

/// The 16 characters of a kube-proxy hash (base32: ASCII), on the stack.
fn hash16(input: &[&str]) -> [u8; 16] {
    let mut out = [0u8; 16];
    sha256_base32_into(input, &mut out);
    out
}

/// kube-proxy's 16-character `portProtoHash(servicePortName, protocol)`.
pub fn port_proto_hash(service_port_name: &str, protocol: &str) -> String {
    sha256_base32_prefix(&[service_port_name, protocol], 16)
}

/// [`port_proto_hash`] as ASCII bytes, without allocating (verifying 10k services'
/// chain names should not cost 10k strings).
pub fn port_proto_hash_bytes(service_port_name: &str, protocol: &str) -> [u8; 16] {
    hash16(&[service_port_name, protocol])
}

/// `KUBE-SVC-…`, `KUBE-SVL-…`, `KUBE-EXT-…` or `KUBE-FW-…` for a service port.
///
/// `service_port_name` is `ns/name:port`, `protocol` lower case. With [`ChainPrefix::Sep`]
/// this hashes without an endpoint, which kube-proxy never does: use
/// [`endpoint_chain_name`] for endpoint chains.
pub fn service_port_chain_name(
    prefix: ChainPrefix,
    service_port_name: &str,
    protocol: &str,
) -> String {
    format!(
        "{}{}",
        prefix.as_str(),
        port_proto_hash(service_port_name, protocol)
    )
}

/// `KUBE-SEP-…` for one endpoint (`"10.42.0.5:8443"`, IPv6 as `"[fd00::5]:8443"`).
pub fn endpoint_chain_name(service_port_name: &str, protocol: &str, endpoint: &str) -> String {
    format!(
        "{}{}",
        ChainPrefix::Sep.as_str(),
        sha256_base32_prefix(&[service_port_name, protocol, endpoint], 16)
    )
}

/// Splits a kube-proxy per-service chain name into its prefix and 16-character hash.
pub fn parse_chain_name(chain: &str) -> Option<(ChainPrefix, &str)> {
    // Hot in service-map recovery and checks (every chain and jump of a 100k-rule dump):
    // reject by length and the shared "KUBE-" prefix first, then test the alphabet by range.
    if !(24..=25).contains(&chain.len()) || !chain.starts_with("KUBE-") {
        return None;
    }
    ChainPrefix::ALL.into_iter().find_map(|prefix| {
        let hash = chain.strip_prefix(prefix.as_str())?;
        let valid = hash.len() == 16
            && hash
                .bytes()
                .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b));
        valid.then_some((prefix, hash))
    })
}

/// Whether `chain` (KUBE-SVC/SVL/EXT/FW) is the chain kube-proxy would name for this
/// service port. Endpoint chains never match: use [`chain_matches_endpoint`].
pub fn chain_matches_service_port(chain: &str, service_port_name: &str, protocol: &str) -> bool {
    match parse_chain_name(chain) {
        Some((ChainPrefix::Sep, _)) | None => false,
        Some((_, hash)) => hash.as_bytes() == port_proto_hash_bytes(service_port_name, protocol),
    }
}

/// Whether `chain` is the `KUBE-SEP-…` chain of this endpoint of this service port.
pub fn chain_matches_endpoint(
    chain: &str,
    service_port_name: &str,
    protocol: &str,
    endpoint: &str,
) -> bool {
    // Allocation-free: service-map recovery checks every endpoint chain of a dump.
    chain
        .strip_prefix(ChainPrefix::Sep.as_str())
        .is_some_and(|hash| hash.as_bytes() == hash16(&[service_port_name, protocol, endpoint]))
}

/// Maximum nftables object name length used by kube-proxy (knftables `NameLengthMax`, 256)
/// minus the longest prefix (16): kubernetes `pkg/proxy/nftables/proxier.go`
/// `chainNameBaseLengthMax`.
pub const NFT_CHAIN_NAME_BASE_MAX: usize = 240;

fn nft_hash_and_truncate(name: &str) -> String {
    let mut out = sha256_base32_prefix(&[name], 8);
    out.push('-');
    out.push_str(name);
    if out.len() > NFT_CHAIN_NAME_BASE_MAX {
        // Names are ASCII (DNS labels, digits, dots), so byte truncation is safe; guard anyway.
        let mut cut = NFT_CHAIN_NAME_BASE_MAX - 3;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// nftables-mode base name of a service port: `HASH-ns/name/proto/port`.
pub fn nft_service_port_base(
    namespace: &str,
    name: &str,
    protocol: &str,
    port_name: &str,
) -> String {
    nft_hash_and_truncate(&format!("{namespace}/{name}/{protocol}/{port_name}"))
}

/// nftables-mode base name of an endpoint: `HASH-ns/name/proto/port__ip/port`.
///
/// `endpoint` is `ip:port` or `[ipv6]:port`; IPv6 colons become dots.
pub fn nft_endpoint_base(
    namespace: &str,
    name: &str,
    protocol: &str,
    port_name: &str,
    endpoint: &str,
) -> String {
    let (ip, port) = match endpoint.rsplit_once(':') {
        Some((ip, port)) => (ip.trim_start_matches('[').trim_end_matches(']'), port),
        None => (endpoint, ""),
    };
    let ip = ip.replace(':', ".");
    nft_hash_and_truncate(&format!(
        "{namespace}/{name}/{protocol}/{port_name}__{ip}/{port}"
    ))
}

/// A full nftables-mode chain name for a service port, e.g.
/// `service-ULMVA6XW-ns1/svc1/tcp/p80`.
pub fn nft_service_chain_name(
    prefix: NftChainPrefix,
    namespace: &str,
    name: &str,
    protocol: &str,
    port_name: &str,
) -> String {
    format!(
        "{}{}",
        prefix.as_str(),
        nft_service_port_base(namespace, name, protocol, port_name)
    )
}

/// A full nftables-mode endpoint chain (or affinity set) name, e.g.
/// `endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80`.
pub fn nft_endpoint_chain_name(
    prefix: NftChainPrefix,
    namespace: &str,
    name: &str,
    protocol: &str,
    port_name: &str,
    endpoint: &str,
) -> String {
    format!(
        "{}{}",
        prefix.as_str(),
        nft_endpoint_base(namespace, name, protocol, port_name, endpoint)
    )
}

/// Whether an nftables-mode chain name carries the right hash for its own base name
/// (`prefix-HASH-rest`): the base name is spelled out in the chain, so the hash can be
/// checked without knowing the service. Truncated names (`...`) cannot be checked and
/// return `false`.
pub fn nft_chain_hash_is_consistent(chain: &str) -> bool {
    let Some((_, rest)) = chain.split_once('-') else {
        return false;
    };
    let Some((hash, base)) = rest.split_once('-') else {
        return false;
    };
    hash.len() == 8 && !base.ends_with("...") && sha256_base32_prefix(&[base], 8) == hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_https_service_chain() {
        assert_eq!(
            service_port_chain_name(ChainPrefix::Svc, "default/kubernetes:https", "tcp"),
            "KUBE-SVC-NPX46M4PTMTKRN6Y"
        );
    }

    /// Names from kubernetes `pkg/proxy/iptables/proxier_test.go` TestOverallIPTablesRules
    /// (corpus k8s-proxier-test/TestOverallIPTablesRules.expected.iptables-restore).
    #[test]
    fn names_from_kube_proxy_unit_test() {
        let svc = |spn| service_port_chain_name(ChainPrefix::Svc, spn, "tcp");
        assert_eq!(svc("ns1/svc1:p80"), "KUBE-SVC-XPGD46QRK7WJZT7O");
        assert_eq!(svc("ns2/svc2:p80"), "KUBE-SVC-GNZBNJ2PO5MGZ6GT");
        assert_eq!(svc("ns5/svc5:p80"), "KUBE-SVC-NUKIZ6OKUXPJNT4C");
        assert_eq!(
            service_port_chain_name(ChainPrefix::Fw, "ns5/svc5:p80", "tcp"),
            "KUBE-FW-NUKIZ6OKUXPJNT4C"
        );
        assert_eq!(
            endpoint_chain_name("ns1/svc1:p80", "tcp", "10.180.0.1:80"),
            "KUBE-SEP-SXIVWICOYRO3J4NJ"
        );
        assert_eq!(
            endpoint_chain_name("ns4/svc4:p80", "tcp", "10.180.0.5:80"),
            "KUBE-SEP-C6EBXVWJJZMIWKLZ"
        );
    }

    #[test]
    fn parse_and_match() {
        assert_eq!(
            parse_chain_name("KUBE-EXT-GNZBNJ2PO5MGZ6GT"),
            Some((ChainPrefix::Ext, "GNZBNJ2PO5MGZ6GT"))
        );
        assert_eq!(parse_chain_name("KUBE-SERVICES"), None);
        assert_eq!(parse_chain_name("KUBE-SVC-short"), None);
        assert!(chain_matches_service_port(
            "KUBE-EXT-GNZBNJ2PO5MGZ6GT",
            "ns2/svc2:p80",
            "tcp"
        ));
        assert!(!chain_matches_service_port(
            "KUBE-EXT-GNZBNJ2PO5MGZ6GT",
            "ns2/svc2:p80",
            "udp"
        ));
        assert!(!chain_matches_service_port(
            "KUBE-SEP-SXIVWICOYRO3J4NJ",
            "ns1/svc1:p80",
            "tcp"
        ));
        assert!(chain_matches_endpoint(
            "KUBE-SEP-SXIVWICOYRO3J4NJ",
            "ns1/svc1:p80",
            "tcp",
            "10.180.0.1:80"
        ));
    }

    /// Examples quoted in kubernetes `pkg/proxy/nftables/proxier.go` doc comments.
    #[test]
    fn nft_names_from_kube_proxy_comments() {
        assert_eq!(
            nft_service_port_base("ns1", "svc1", "tcp", "p80"),
            "ULMVA6XW-ns1/svc1/tcp/p80"
        );
        assert_eq!(
            nft_endpoint_base("ns1", "svc1", "tcp", "p80", "10.180.0.1:80"),
            "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
        );
        let chain = nft_service_chain_name(NftChainPrefix::Service, "ns1", "svc1", "tcp", "p80");
        assert_eq!(chain, "service-ULMVA6XW-ns1/svc1/tcp/p80");
        assert!(nft_chain_hash_is_consistent(&chain));
        assert!(!nft_chain_hash_is_consistent(
            "service-AAAAAAAA-ns1/svc1/tcp/p80"
        ));
    }

    #[test]
    fn nft_truncates_long_names() {
        let long = "a".repeat(63);
        let base = nft_endpoint_base(
            &long,
            &long,
            "tcp",
            &long,
            "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:65535",
        );
        assert_eq!(base.len(), NFT_CHAIN_NAME_BASE_MAX);
        assert!(base.ends_with("..."));
    }
}
