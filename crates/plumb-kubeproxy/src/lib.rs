//! kube-proxy's dataplane conventions, as pure functions and data.
//!
//! - [`chain_name`]: the hashed chain names of iptables mode (`KUBE-SVC-…`, `KUBE-SEP-…`) and
//!   nftables mode (`service-HASH-ns/name/proto/port`), and checks that a chain name belongs
//!   to a given service port or endpoint.
//! - [`model`]: the service model kube-proxy programs (service ports, virtual IPs, endpoints).
//! - [`mod@generate`]: a deterministic generator of such models from counts and fractions.
//! - [`recover`]: the inverse: the service map read back from a parsed ruleset (iptables
//!   and nftables mode), with evidence and chain-hash verification.
//! - [`rules`] and [`sync`]: the iptables rules kubelet and kube-proxy (1.28+) write for a
//!   model, printed as kube-proxy's own `iptables-restore` payload and as `iptables-save`
//!   prints them back from the kernel.
//! - [`nft_sync`]: the `nft -f` transaction kube-proxy's nftables mode writes for a model.
//!
//! This crate does no IO. `tests/kernel_roundtrip.rs` proves the saved form against a real
//! kernel inside a private network namespace.
//!
//! ```
//! use plumb_kubeproxy::{generate, GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions};
//!
//! let cluster = generate(&GeneratorConfig { services: 5, ..GeneratorConfig::default() }).unwrap();
//! let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
//! let saved = rules.to_iptables_save(&IptablesSaveOptions::default());
//! assert!(saved.contains(":KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]"));
//! assert!(rules.to_restore_payload().starts_with("*filter\n:KUBE-SERVICES - [0:0]\n"));
//! ```

#![deny(missing_docs)]

pub mod chain_name;
pub mod generate;
pub mod model;
pub mod nft_sync;
pub mod recover;
pub mod rules;
pub mod sync;

pub use chain_name::{
    ChainPrefix, NftChainPrefix, chain_matches_endpoint, chain_matches_service_port,
    endpoint_chain_name, parse_chain_name, service_port_chain_name,
};
pub use generate::{GenerateError, GeneratorConfig, generate};
pub use model::{Cluster, Endpoint, Ipv4Cidr, LocalNode, Protocol, ServicePort, ServicePortName};
pub use nft_sync::nft_transaction;
pub use sync::{
    IptablesSaveOptions, KubeProxyRules, ProxierOptions, TablePayload, is_top_level_chain,
};

/// The iptables-save text of a generated cluster: `services` service ports with
/// `endpoints` endpoints each, default generator and proxier options. The one input
/// definition the benchmarks, the `generate` example and the watch churn driver share.
pub fn generated_save_text(services: usize, endpoints: usize) -> Result<String, GenerateError> {
    let cluster = generated_cluster(services, endpoints)?;
    Ok(KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default()))
}

/// [`generated_save_text`]'s cluster as kube-proxy's nftables-mode transaction
/// ([`nft_transaction`]).
pub fn generated_nft_text(services: usize, endpoints: usize) -> Result<String, GenerateError> {
    let cluster = generated_cluster(services, endpoints)?;
    Ok(nft_transaction(&cluster, &ProxierOptions::default()))
}

/// The cluster both generated texts describe: default generator options.
fn generated_cluster(services: usize, endpoints: usize) -> Result<Cluster, GenerateError> {
    generate(&GeneratorConfig {
        services,
        endpoints_per_service: endpoints,
        ..GeneratorConfig::default()
    })
}
