//! `firewalld` with the iptables backend (`FirewallBackend=iptables`, RHEL/CentOS 7's
//! only backend and an option since), the actor of the firewalld-reload scenario.
//!
//! Modelled on firewalld's `ipXtables.py`: a start or a reload first runs
//! `build_flush_rules()` — for every table (security, raw, mangle, nat, filter) `-F`, `-X`
//! and `-Z`, applied with `iptables-restore -w -n` — and the policy rules, then rebuilds its
//! own chains (`build_default_rules()`: `*_direct`, `*_ZONES`, `*_ZONES_SOURCE`, per-zone
//! `IN_`/`FWDI_`/`FWDO_`/`PRE_`/`POST_` chains, the trailing `REJECT --reject-with
//! icmp-host-prohibited` in INPUT and FORWARD), as a second restore. Everything else in
//! those tables — kube-proxy's chains and hook rules, kubelet's, the portmap plugin's
//! `CNI-HOSTPORT-*` hostPort DNAT — is gone. kube-proxy notices through its canary and
//! resyncs; nothing rewrites portmap's rules until the pod's sandbox is re-created.
//!
//! The zones are those of a node set up as RKE2's docs say when firewalld must stay: the
//! default zone `public` on the node's uplink, `cni0` in zone `trusted` (so pod traffic
//! is accepted before the REJECT), ssh open. Reloads (`firewall-cmd --reload`, as a
//! configuration-management run does) come every `--reload-interval` after
//! `--first-reload`. With `--debug=1` (the lab's `FIREWALLD_ARGS`) firewalld logs
//! `DEBUG1: Loading firewalld config file '/etc/firewalld/firewalld.conf'` at each start
//! and reload to `--log-file` (firewalld's own `YYYY-MM-DD HH:MM:SS LEVEL: msg` format).

use std::path::PathBuf;
use std::time::Duration;

use super::{Flags, nap, terminating};
use crate::clock::Utc;
use crate::iptables::Tools;
use crate::logfmt::LogFile;

/// `BUILT_IN_CHAINS` of ipXtables.py, in its order.
const TABLES: &[(&str, &[&str])] = &[
    ("security", &["INPUT", "OUTPUT", "FORWARD"]),
    ("raw", &["PREROUTING", "OUTPUT"]),
    (
        "mangle",
        &["PREROUTING", "POSTROUTING", "INPUT", "OUTPUT", "FORWARD"],
    ),
    ("nat", &["PREROUTING", "POSTROUTING", "OUTPUT"]),
    ("filter", &["INPUT", "OUTPUT", "FORWARD"]),
];

/// The flush and policy transaction of a start or reload (`-n`: only these tables'
/// contents change, through `-F`/`-X`/`-Z`).
pub fn flush_payload() -> String {
    let mut out = String::new();
    for (table, chains) in TABLES {
        out.push_str(&format!("*{table}\n-F\n-X\n-Z\n"));
        if *table != "nat" {
            for c in *chains {
                out.push_str(&format!("-P {c} ACCEPT\n"));
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// firewalld's default rules for zone `public` on `uplink` and zone `trusted` on
/// `trusted` (the shape of firewalld 0.6's iptables backend, as a CentOS 7 node's
/// iptables-save shows it).
pub fn default_rules(uplink: &str, trusted: &str) -> String {
    let mut out = String::new();
    let zones = [(trusted, "trusted"), (uplink, "public")];
    // raw and mangle: PREROUTING zone dispatch.
    for table in ["raw", "mangle"] {
        out.push_str(&format!("*{table}\n"));
        for (_, chains) in TABLES.iter().filter(|(t, _)| *t == table) {
            for c in *chains {
                out.push_str(&format!(":{c}_direct - [0:0]\n"));
            }
        }
        for z in ["PREROUTING_ZONES_SOURCE", "PREROUTING_ZONES"] {
            out.push_str(&format!(":{z} - [0:0]\n"));
        }
        for (_, zone) in zones {
            for s in ["", "_log", "_deny", "_allow"] {
                out.push_str(&format!(":PRE_{zone}{s} - [0:0]\n"));
            }
        }
        for (_, chains) in TABLES.iter().filter(|(t, _)| *t == table) {
            for c in *chains {
                out.push_str(&format!("-A {c} -j {c}_direct\n"));
            }
        }
        out.push_str(
            "-A PREROUTING -j PREROUTING_ZONES_SOURCE\n-A PREROUTING -j PREROUTING_ZONES\n",
        );
        for (dev, zone) in zones {
            out.push_str(&format!("-A PREROUTING_ZONES -i {dev} -g PRE_{zone}\n"));
        }
        out.push_str("-A PREROUTING_ZONES -g PRE_public\n");
        for (_, zone) in zones {
            for s in ["_log", "_deny", "_allow"] {
                out.push_str(&format!("-A PRE_{zone} -j PRE_{zone}{s}\n"));
            }
        }
        out.push_str("COMMIT\n");
    }
    // nat: PREROUTING and POSTROUTING zone dispatch.
    out.push_str("*nat\n");
    for c in ["PREROUTING_direct", "OUTPUT_direct", "POSTROUTING_direct"] {
        out.push_str(&format!(":{c} - [0:0]\n"));
    }
    for z in [
        "PREROUTING_ZONES_SOURCE",
        "PREROUTING_ZONES",
        "POSTROUTING_ZONES_SOURCE",
        "POSTROUTING_ZONES",
    ] {
        out.push_str(&format!(":{z} - [0:0]\n"));
    }
    for (_, zone) in zones {
        for p in ["PRE", "POST"] {
            for s in ["", "_log", "_deny", "_allow"] {
                out.push_str(&format!(":{p}_{zone}{s} - [0:0]\n"));
            }
        }
    }
    out.push_str(
        "-A PREROUTING -j PREROUTING_direct\n-A PREROUTING -j PREROUTING_ZONES_SOURCE\n-A PREROUTING -j PREROUTING_ZONES\n\
-A OUTPUT -j OUTPUT_direct\n\
-A POSTROUTING -j POSTROUTING_direct\n-A POSTROUTING -j POSTROUTING_ZONES_SOURCE\n-A POSTROUTING -j POSTROUTING_ZONES\n",
    );
    for (dev, zone) in zones {
        out.push_str(&format!("-A PREROUTING_ZONES -i {dev} -g PRE_{zone}\n"));
        out.push_str(&format!("-A POSTROUTING_ZONES -o {dev} -g POST_{zone}\n"));
    }
    out.push_str("-A PREROUTING_ZONES -g PRE_public\n-A POSTROUTING_ZONES -g POST_public\n");
    for (_, zone) in zones {
        for p in ["PRE", "POST"] {
            for s in ["_log", "_deny", "_allow"] {
                out.push_str(&format!("-A {p}_{zone} -j {p}_{zone}{s}\n"));
            }
        }
    }
    out.push_str("COMMIT\n");
    // security: the direct chains only.
    out.push_str("*security\n");
    for c in ["INPUT", "FORWARD", "OUTPUT"] {
        out.push_str(&format!(":{c}_direct - [0:0]\n"));
    }
    for c in ["INPUT", "FORWARD", "OUTPUT"] {
        out.push_str(&format!("-A {c} -j {c}_direct\n"));
    }
    out.push_str("COMMIT\n");
    // filter: conntrack, lo, direct, zones, INVALID drop, catch-all REJECT.
    out.push_str("*filter\n");
    for c in [
        "INPUT_direct",
        "INPUT_ZONES_SOURCE",
        "INPUT_ZONES",
        "FORWARD_direct",
        "FORWARD_IN_ZONES_SOURCE",
        "FORWARD_IN_ZONES",
        "FORWARD_OUT_ZONES_SOURCE",
        "FORWARD_OUT_ZONES",
        "OUTPUT_direct",
    ] {
        out.push_str(&format!(":{c} - [0:0]\n"));
    }
    for (_, zone) in zones {
        for p in ["IN", "FWDI", "FWDO"] {
            for s in ["", "_log", "_deny", "_allow"] {
                out.push_str(&format!(":{p}_{zone}{s} - [0:0]\n"));
            }
        }
    }
    out.push_str(
        "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A INPUT -i lo -j ACCEPT\n\
-A INPUT -j INPUT_direct\n-A INPUT -j INPUT_ZONES_SOURCE\n-A INPUT -j INPUT_ZONES\n\
-A INPUT -m conntrack --ctstate INVALID -j DROP\n-A INPUT -j REJECT --reject-with icmp-host-prohibited\n\
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A FORWARD -i lo -j ACCEPT\n\
-A FORWARD -j FORWARD_direct\n-A FORWARD -j FORWARD_IN_ZONES_SOURCE\n-A FORWARD -j FORWARD_IN_ZONES\n\
-A FORWARD -j FORWARD_OUT_ZONES_SOURCE\n-A FORWARD -j FORWARD_OUT_ZONES\n\
-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -j REJECT --reject-with icmp-host-prohibited\n\
-A OUTPUT -o lo -j ACCEPT\n-A OUTPUT -j OUTPUT_direct\n",
    );
    for (dev, zone) in zones {
        out.push_str(&format!("-A INPUT_ZONES -i {dev} -g IN_{zone}\n"));
        out.push_str(&format!("-A FORWARD_IN_ZONES -i {dev} -g FWDI_{zone}\n"));
        out.push_str(&format!("-A FORWARD_OUT_ZONES -o {dev} -g FWDO_{zone}\n"));
    }
    out.push_str("-A INPUT_ZONES -g IN_public\n-A FORWARD_IN_ZONES -g FWDI_public\n-A FORWARD_OUT_ZONES -g FWDO_public\n");
    for (_, zone) in zones {
        for p in ["IN", "FWDI", "FWDO"] {
            for s in ["_log", "_deny", "_allow"] {
                out.push_str(&format!("-A {p}_{zone} -j {p}_{zone}{s}\n"));
            }
            if zone == "trusted" {
                // Zone target ACCEPT.
                out.push_str(&format!("-A {p}_{zone} -j ACCEPT\n"));
            } else if p != "FWDO" {
                out.push_str(&format!("-A {p}_{zone} -p icmp -j ACCEPT\n"));
            }
        }
    }
    out.push_str("-A IN_public_allow -p tcp -m tcp --dport 22 -m conntrack --ctstate NEW,UNTRACKED -j ACCEPT\n");
    out.push_str("COMMIT\n");
    out
}

/// Runs firewalld until SIGTERM: start, then reloads.
pub fn main(f: &Flags) -> Result<i32, String> {
    let log_path = PathBuf::from(f.req("log-file")?);
    let first = f.duration_or("first-reload", Duration::from_secs(10))?;
    let interval = f.duration_or("reload-interval", Duration::from_secs(60))?;
    let uplink = f.get("uplink").unwrap_or("eth0").to_string();
    let trusted = f.get("trusted-interface").unwrap_or("cni0").to_string();
    let tools = Tools::new(f.get("iptables").unwrap_or("iptables"));
    let mut log = LogFile::open(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut load = |what: &str| {
        let _ = log.line(&format!(
            "{} DEBUG1: Loading firewalld config file '/etc/firewalld/firewalld.conf'",
            Utc::now().firewalld()
        ));
        for payload in [flush_payload(), default_rules(&uplink, &trusted)] {
            match tools.restore(&["-w", "-n"], &payload) {
                Ok(o) if o.ok() => {}
                Ok(o) => {
                    let _ = log.line(&format!(
                        "{} ERROR: COMMAND_FAILED: '{} -w -n' failed: {}",
                        Utc::now().firewalld(),
                        tools.restore_program(),
                        o.combined.trim()
                    ));
                }
                Err(e) => {
                    let _ = log.line(&format!(
                        "{} ERROR: COMMAND_FAILED: {what}: {e}",
                        Utc::now().firewalld()
                    ));
                }
            }
        }
    };
    load("start");
    if !nap(first) {
        return Ok(0);
    }
    while !terminating() {
        load("reload");
        if !nap(interval) {
            break;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_covers_every_table_and_rules_end_in_reject() {
        let f = flush_payload();
        for t in ["security", "raw", "mangle", "nat", "filter"] {
            assert!(f.contains(&format!("*{t}\n-F\n-X\n-Z\n")), "{t}");
        }
        assert!(!f.contains("*nat\n-F\n-X\n-Z\n-P"));
        let r = default_rules("eth0", "cni0");
        assert!(r.contains("-A FORWARD -j REJECT --reject-with icmp-host-prohibited\n"));
        assert!(r.contains("-A FORWARD_IN_ZONES -i cni0 -g FWDI_trusted\n-A FORWARD_OUT_ZONES -o cni0 -g FWDO_trusted\n"));
        assert!(r.contains("-A FWDI_trusted -j ACCEPT\n"));
    }
}
