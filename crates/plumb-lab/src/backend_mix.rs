//! The `backend-mix` scenario's stale state: kube-proxy's chains left in iptables-legacy
//! (as after a node switched from legacy to nft), while the live rules are in iptables-nft.
//!
//! The stale copy is kube-proxy's full ruleset for the same Services with an older
//! `kubernetes` endpoint, without the hook rules from the built-in chains: it is visible to
//! `iptables-legacy-save` (and to plumb) but no packet reaches it, so the live path is
//! unchanged. Legacy tables exist only inside the node namespace.

use std::net::{Ipv4Addr, SocketAddrV4};

use plumb_kubeproxy::{IptablesSaveOptions, KubeProxyRules, ProxierOptions};

use crate::error::LabError;
use crate::iptables::Tools;
use crate::state::NODE_NETNS;

/// The stale ruleset as `iptables-legacy-restore` input.
pub fn stale_payload(services: usize, api: SocketAddrV4) -> String {
    let old_api = SocketAddrV4::new(Ipv4Addr::new(192, 168, 100, 99), api.port());
    let cluster = crate::actors::kube_proxy::lab_cluster(
        services,
        "plumb-node",
        crate::topology::NODE_IP,
        old_api,
    );
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let saved = rules.to_iptables_save(&IptablesSaveOptions::default());
    let builtin = ["INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING"];
    saved
        .lines()
        .filter(|l| {
            !l.strip_prefix("-A ")
                .and_then(|r| r.split(' ').next())
                .is_some_and(|c| builtin.contains(&c))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Writes the stale rules with `iptables` (`iptables-legacy` normally) inside the node
/// namespace.
pub fn write_stale(iptables: &str, services: usize, api: SocketAddrV4) -> Result<(), LabError> {
    let iptables = iptables.to_string();
    let payload = stale_payload(services, api);
    let out = plumb_os::netns::on_thread(Some(NODE_NETNS), move || {
        Ok(Tools::new(&iptables).restore(&["-w", "5"], &payload))
    })
    .map_err(|e| LabError::io("entering the node namespace", e))?
    .map_err(|e| LabError::io("running iptables-legacy-restore", e))?;
    if out.ok() {
        Ok(())
    } else {
        Err(LabError::Command {
            command: "iptables-restore of the stale kube-proxy rules".into(),
            status: format!("exit status {}", out.code),
            stderr: out.combined,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_rules_have_no_hooks() {
        let p = stale_payload(3, "192.168.100.11:6443".parse().unwrap());
        assert!(p.contains(":KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]"));
        assert!(p.contains("192.168.100.99:6443"));
        assert!(!p.contains("-A PREROUTING") && !p.contains("-A INPUT"));
    }
}
