//! Before installing Cilium with kube-proxy replacement: can this node's kernel run
//! it? A go/no-go over the kernel release, its configuration, BTF, the BPF program and
//! map types the running kernel accepts, and the bpffs / cgroup v2 mounts — each item a
//! [`Finding`] with its evidence and fix.
//!
//! Requirements per Cilium release come from Cilium's `system_requirements.rst` (see
//! shared/corpus/cilium/FACTS.md §2): base kernel 4.19.57 for 1.14-1.15, 5.4 for
//! 1.16-1.17, 5.10 from 1.18 (RHEL 8 kernels 4.18 are supported by backports and
//! cannot be judged by their release string alone). A requirement plumb could not read
//! is `unknown`, and an unknown never turns the verdict to `go` on its own.

use plumb_findings::{Evidence, Finding, Severity, Status};
use serde::Serialize;

/// Finding ids `plumb cilium preflight` reports (stable, for scripts).
pub mod ids {
    /// The kernel release is older than the Cilium release needs.
    pub const KERNEL_VERSION: &str = "cilium-kernel-version";
    /// Kernel configuration options Cilium needs are off.
    pub const KERNEL_CONFIG: &str = "cilium-kernel-config";
    /// No BTF for the running kernel.
    pub const BTF: &str = "cilium-kernel-btf";
    /// BPF program or map types Cilium loads are refused by the running kernel.
    pub const BPF_FEATURES: &str = "cilium-bpf-features";
    /// The BPF filesystem is not mounted at /sys/fs/bpf.
    pub const BPFFS: &str = "cilium-bpffs";
    /// No cgroup v2 hierarchy for the socket load balancer.
    pub const CGROUP2: &str = "cilium-cgroup2";
}

/// Every id [`preflight`] may report, with what a problem with it means.
pub const CATALOGUE: &[(&str, &str)] = &[
    (
        ids::KERNEL_VERSION,
        "the kernel is older than the Cilium release needs",
    ),
    (
        ids::KERNEL_CONFIG,
        "kernel configuration options Cilium needs are not enabled",
    ),
    (
        ids::BTF,
        "the running kernel has no BTF (/sys/kernel/btf/vmlinux)",
    ),
    (
        ids::BPF_FEATURES,
        "the running kernel refuses BPF program or map types Cilium loads",
    ),
    (
        ids::BPFFS,
        "the BPF filesystem is not mounted at /sys/fs/bpf",
    ),
    (
        ids::CGROUP2,
        "no cgroup v2 hierarchy is mounted for Cilium's socket load balancer",
    ),
];

/// Kernel configuration options without which Cilium's datapath cannot be loaded or
/// attached at all: BPF itself, tc's BPF classifier and ingress qdisc, cgroup BPF (the
/// socket load balancer), perf events (its event ring).
pub const REQUIRED_CONFIG: &[&str] = &[
    "CONFIG_BPF",
    "CONFIG_BPF_SYSCALL",
    "CONFIG_NET_CLS_BPF",
    "CONFIG_BPF_JIT",
    "CONFIG_NET_CLS_ACT",
    "CONFIG_NET_SCH_INGRESS",
    "CONFIG_CGROUPS",
    "CONFIG_CGROUP_BPF",
    "CONFIG_PERF_EVENTS",
];

/// Options Cilium's requirements also list whose absence plumb cannot tie to a
/// feature that fails (reported, not blocking).
pub const LISTED_CONFIG: &[&str] = &[
    "CONFIG_CRYPTO_SHA1",
    "CONFIG_CRYPTO_USER_API_HASH",
    "CONFIG_SCHEDSTATS",
];

/// Options the default tunnel routing needs (VXLAN, Geneve, policy routing).
pub const TUNNEL_CONFIG: &[&str] = &["CONFIG_VXLAN", "CONFIG_GENEVE", "CONFIG_FIB_RULES"];

/// A Cilium release line (`1.16`; JSON: `"1.16"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(into = "String")]
pub struct Release(pub u32, pub u32);

impl From<Release> for String {
    fn from(r: Release) -> String {
        r.to_string()
    }
}

impl Release {
    /// The release plumb checks against by default: the newest one in its facts.
    pub const LATEST: Release = Release(1, 19);

    /// Reads `1.16`, `v1.16.3` or `1.16.3`.
    pub fn parse(s: &str) -> Option<Release> {
        let mut it = s.trim_start_matches('v').split('.');
        Some(Release(it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }

    /// The oldest kernel this release supports (major, minor, patch).
    pub fn min_kernel(self) -> (u32, u32, u32) {
        match self {
            r if r >= Release(1, 18) => (5, 10, 0),
            r if r >= Release(1, 16) => (5, 4, 0),
            r if r >= Release(1, 14) => (4, 19, 57),
            _ => (4, 9, 17),
        }
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// What was read about the kernel; `None` (or `Err` with why) where it could not be
/// read.
#[derive(Debug)]
pub struct KernelView {
    /// `uname -r`.
    pub release: Option<String>,
    /// The kernel configuration, or why it could not be read.
    pub config: Result<KernelConfig, String>,
    /// Whether /sys/kernel/btf/vmlinux exists.
    pub btf: Option<bool>,
    /// Mounted filesystems as (type, mount point), from /proc/mounts.
    pub mounts: Option<Vec<(String, String)>>,
    /// BPF program and map types probed with the running kernel: (what, accepted or
    /// why the probe could not tell).
    pub bpf_probes: Vec<(String, Result<bool, String>)>,
}

impl Default for KernelView {
    /// Nothing read.
    fn default() -> KernelView {
        KernelView {
            release: None,
            config: Err("not read".into()),
            btf: None,
            mounts: None,
            bpf_probes: Vec::new(),
        }
    }
}

/// A kernel configuration: where it was read and its `CONFIG_X=value` lines.
#[derive(Debug, Clone, Default)]
pub struct KernelConfig {
    /// The file it was read from (`/proc/config.gz`, `/boot/config-RELEASE`).
    pub source: String,
    /// (option, value) pairs: `("CONFIG_BPF", "y")`.
    pub options: Vec<(String, String)>,
}

/// `go` or `no-go`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every requirement read is met, and none that blocks is unknown.
    Go,
    /// A requirement is not met, or one that blocks could not be checked.
    NoGo,
}

/// The verdict and the findings behind it.
#[derive(Debug, Serialize)]
pub struct Preflight {
    /// The Cilium release checked against.
    pub release: Release,
    /// `go` or `no-go`.
    pub verdict: Verdict,
    /// One finding per requirement.
    pub findings: Vec<Finding>,
}

/// Judges the kernel for `release` with kube-proxy replacement.
pub fn preflight(k: &KernelView, release: Release) -> Preflight {
    let mut findings = vec![
        kernel_version(k.release.as_deref(), release),
        kernel_config(&k.config),
        btf(k.btf),
        bpf_features(&k.bpf_probes),
    ];
    findings.extend(mounts(k.mounts.as_deref()));
    // Blocking: anything but ok on the kernel itself. The mounts are the agent's to
    // make (it mounts bpffs and a cgroup v2 hierarchy of its own when missing).
    let blocking = [
        ids::KERNEL_VERSION,
        ids::KERNEL_CONFIG,
        ids::BTF,
        ids::BPF_FEATURES,
    ];
    let go = findings.iter().all(|f| {
        !blocking.contains(&f.id.as_str())
            || f.status == Status::Ok
            || (f.status == Status::Problem && f.severity < Severity::High)
    });
    plumb_findings::sort(&mut findings);
    Preflight {
        release,
        verdict: if go { Verdict::Go } else { Verdict::NoGo },
        findings,
    }
}

/// `6.1.0-18-amd64` -> (6, 1, 0).
pub fn kernel_numbers(release: &str) -> Option<(u32, u32, u32)> {
    let head = release.split(['-', '+', '_']).next()?;
    let mut it = head.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let patch = it.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor, patch))
}

fn kernel_version(release: Option<&str>, cilium: Release) -> Finding {
    let id = ids::KERNEL_VERSION;
    let Some(r) = release else {
        return Finding::unknown(
            id,
            Severity::High,
            "the kernel release could not be read (uname -r)",
        );
    };
    let need = cilium.min_kernel();
    let need_text = format!("{}.{}.{}", need.0, need.1, need.2);
    let evidence = Evidence {
        source: "uname -r".into(),
        line: None,
        text: r.to_string(),
    };
    match kernel_numbers(r) {
        None => Finding::unknown(id, Severity::High, format!("kernel release `{r}` is not a version plumb can read"))
            .with_evidence([evidence]),
        Some(have) if have >= need => Finding::ok(
            id,
            format!("kernel {r} meets Cilium {cilium}'s minimum {need_text}"),
        ),
        Some((4, 18, _)) if r.contains(".el8") => Finding::unknown(
            id,
            Severity::High,
            format!("RHEL 8 kernel {r}: Cilium {cilium} supports RHEL 8 kernels from a minor release the release string does not show"),
        )
        .with_evidence([evidence])
        .explain("Red Hat backports the BPF features Cilium needs into 4.18: Cilium supports RHEL 8.6 (8.10 from Cilium 1.19) kernels although 4.18 is older than its minimum.")
        .fix("Check /etc/redhat-release against Cilium's system requirements for this release."),
        Some(_) => Finding::problem(
            id,
            Severity::High,
            format!("kernel {r} is older than {need_text}, the minimum of Cilium {cilium}"),
        )
        .with_evidence([evidence])
        .explain("Cilium's agent refuses to start on a kernel older than its minimum, or starts without the BPF features kube-proxy replacement is built on (socket load balancing).")
        .fix(format!("Upgrade the node's kernel to {need_text} or later, or choose an older Cilium release whose minimum this kernel meets.")),
    }
}

fn kernel_config(config: &Result<KernelConfig, String>) -> Finding {
    let id = ids::KERNEL_CONFIG;
    let (source, options) = match config {
        Ok(c) => (&c.source, &c.options),
        Err(why) => {
            return Finding::unknown(id, Severity::High, format!("the kernel configuration could not be read: {why}"))
                .fix("Cilium's requirements list the options; /proc/config.gz needs CONFIG_IKCONFIG_PROC, or the distribution ships /boot/config-$(uname -r).");
        }
    };
    let value = |name: &str| {
        options
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let missing: Vec<&str> = REQUIRED_CONFIG
        .iter()
        .chain(LISTED_CONFIG)
        .chain(TUNNEL_CONFIG)
        .copied()
        .filter(|o| !matches!(value(o), Some("y") | Some("m")))
        .collect();
    if missing.is_empty() {
        return Finding::ok(
            id,
            format!("every option Cilium needs is enabled ({source})"),
        );
    }
    let blocking = missing.iter().any(|m| REQUIRED_CONFIG.contains(m));
    Finding::problem(
        id,
        if blocking { Severity::High } else { Severity::Medium },
        format!("{} kernel option(s) Cilium needs are not enabled: {}", missing.len(), missing.join(", ")),
    )
    .with_evidence(missing.iter().map(|m| Evidence {
        source: source.clone(),
        line: None,
        text: match value(m) {
            Some(v) => format!("{m}={v}"),
            None => format!("# {m} is not set"),
        },
    }))
    .explain(if blocking {
        "Without BPF, tc's BPF classifier and ingress qdisc, or cgroup BPF, Cilium's datapath programs cannot be loaded or attached."
    } else {
        "Cilium's system requirements list these. VXLAN and Geneve serve the tunnel routing modes (native routing works without them); for the others plumb cannot name the feature that would fail, so they are reported without blocking."
    })
    .fix("Use a kernel built with these options (the distribution's standard kernel has them on most distributions).")
}

fn btf(present: Option<bool>) -> Finding {
    let id = ids::BTF;
    match present {
        Some(true) => Finding::ok(id, "the kernel has BTF (/sys/kernel/btf/vmlinux)"),
        Some(false) => Finding::problem(id, Severity::High, "the kernel has no BTF: /sys/kernel/btf/vmlinux is missing")
            .explain("Cilium's datapath and Hubble's and Tetragon's programs are compiled once (CO-RE) and need the kernel's BTF to adapt to it.")
            .fix("Use a kernel built with CONFIG_DEBUG_INFO_BTF=y."),
        None => Finding::unknown(id, Severity::High, "whether the kernel has BTF could not be read"),
    }
}

fn bpf_features(probes: &[(String, Result<bool, String>)]) -> Finding {
    let id = ids::BPF_FEATURES;
    if probes.is_empty() {
        return Finding::unknown(
            id,
            Severity::High,
            "the BPF program and map types were not probed",
        );
    }
    let refused: Vec<&str> = probes
        .iter()
        .filter(|(_, r)| matches!(r, Ok(false)))
        .map(|(n, _)| n.as_str())
        .collect();
    let unknown: Vec<String> = probes
        .iter()
        .filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
        .collect();
    if !refused.is_empty() {
        return Finding::problem(
            id,
            Severity::High,
            format!("the running kernel refuses {}", refused.join(", ")),
        )
        .with_evidence(refused.iter().map(|n| Evidence {
            source: "bpf(BPF_PROG_LOAD / BPF_MAP_CREATE)".into(),
            line: None,
            text: format!("{n}: refused"),
        }))
        .explain("Cilium attaches programs of these types (tc for the datapath, cgroup socket hooks for the kube-proxy replacement's socket load balancer) and keeps its state in maps of these types.")
        .fix("Upgrade the kernel, or check that BPF is not restricted (kernel lockdown, a seccomp profile).");
    }
    if !unknown.is_empty() {
        return Finding::unknown(
            id,
            Severity::High,
            format!("{} BPF probe(s) could not tell", unknown.len()),
        )
        .with_evidence(unknown.iter().map(|u| Evidence {
            source: "bpf()".into(),
            line: None,
            text: u.clone(),
        }));
    }
    Finding::ok(
        id,
        format!(
            "the kernel accepts every BPF program and map type probed ({})",
            probes.len()
        ),
    )
}

fn mounts(mounts: Option<&[(String, String)]>) -> Vec<Finding> {
    let Some(m) = mounts else {
        return vec![
            Finding::unknown(ids::BPFFS, Severity::Low, "/proc/mounts could not be read"),
            Finding::unknown(
                ids::CGROUP2,
                Severity::Low,
                "/proc/mounts could not be read",
            ),
        ];
    };
    let bpffs = m.iter().any(|(t, p)| t == "bpf" && p == "/sys/fs/bpf");
    let cgroup2 = m
        .iter()
        .find(|(t, _)| t == "cgroup2")
        .map(|(_, p)| p.clone());
    vec![
        if bpffs {
            Finding::ok(ids::BPFFS, "the BPF filesystem is mounted at /sys/fs/bpf")
        } else {
            Finding::problem(ids::BPFFS, Severity::Low, "the BPF filesystem is not mounted at /sys/fs/bpf")
                .explain("Cilium pins its maps there so they survive agent restarts. The agent mounts it itself when it can (or falls back to /run/cilium/bpffs, which does not survive the agent's pod); a mount that persists across reboots keeps Services working while the agent restarts.")
                .fix("Mount it persistently: add `bpffs /sys/fs/bpf bpf defaults 0 0` to /etc/fstab (or a systemd sys-fs-bpf.mount unit) and run `mount /sys/fs/bpf`.")
        },
        match cgroup2 {
            Some(p) => Finding::ok(ids::CGROUP2, format!("cgroup v2 is mounted at {p}")),
            None => Finding::problem(ids::CGROUP2, Severity::Low, "no cgroup v2 hierarchy is mounted")
                .explain("The socket load balancer attaches to a cgroup v2 hierarchy. Cilium mounts its own at /run/cilium/cgroupv2 (cgroup.autoMount) unless told the host's (cgroup.hostRoot)."),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> KernelView {
        KernelView {
            release: Some("6.1.0-18-amd64".into()),
            config: Ok(KernelConfig {
                source: "/boot/config-6.1.0-18-amd64".into(),
                options: REQUIRED_CONFIG
                    .iter()
                    .chain(LISTED_CONFIG)
                    .chain(TUNNEL_CONFIG)
                    .map(|o| (o.to_string(), "y".to_string()))
                    .collect(),
            }),
            btf: Some(true),
            mounts: Some(vec![
                ("bpf".into(), "/sys/fs/bpf".into()),
                ("cgroup2".into(), "/sys/fs/cgroup".into()),
            ]),
            bpf_probes: vec![("program type sched_cls".into(), Ok(true))],
        }
    }

    fn id<'a>(p: &'a Preflight, id: &str) -> &'a Finding {
        p.findings.iter().find(|f| f.id == id).unwrap()
    }

    #[test]
    fn a_healthy_kernel_is_go() {
        let p = preflight(&healthy(), Release::LATEST);
        assert_eq!(p.verdict, Verdict::Go, "{:#?}", p.findings);
        assert!(p.findings.iter().all(|f| f.status == Status::Ok));
    }

    #[test]
    fn the_minimum_kernel_depends_on_the_release() {
        let mut k = healthy();
        k.release = Some("5.4.0-150-generic".into());
        assert_eq!(preflight(&k, Release(1, 17)).verdict, Verdict::Go);
        let p = preflight(&k, Release(1, 18));
        assert_eq!(p.verdict, Verdict::NoGo);
        assert_eq!(id(&p, ids::KERNEL_VERSION).severity, Severity::High);
        k.release = Some("4.18.0-372.9.1.el8.x86_64".into());
        let p = preflight(&k, Release(1, 18));
        assert_eq!(id(&p, ids::KERNEL_VERSION).status, Status::Unknown);
        assert_eq!(p.verdict, Verdict::NoGo, "an unknown blocker is not a go");
    }

    #[test]
    fn a_missing_base_option_blocks_and_a_tunnel_option_does_not() {
        let mut k = healthy();
        if let Ok(KernelConfig { options: opts, .. }) = &mut k.config {
            opts.retain(|(o, _)| o != "CONFIG_GENEVE");
        }
        let p = preflight(&k, Release::LATEST);
        assert_eq!(id(&p, ids::KERNEL_CONFIG).severity, Severity::Medium);
        assert_eq!(p.verdict, Verdict::Go, "a tunnel option does not block");
        if let Ok(KernelConfig { options: opts, .. }) = &mut k.config {
            opts.retain(|(o, _)| o != "CONFIG_CGROUP_BPF");
        }
        let p = preflight(&k, Release::LATEST);
        let f = id(&p, ids::KERNEL_CONFIG);
        assert_eq!(f.severity, Severity::High);
        assert!(f.title.contains("CONFIG_CGROUP_BPF"));
    }

    #[test]
    fn missing_mounts_are_low_and_do_not_block() {
        let mut k = healthy();
        k.mounts = Some(vec![]);
        let p = preflight(&k, Release::LATEST);
        assert_eq!(p.verdict, Verdict::Go);
        assert!(id(&p, ids::BPFFS).is_problem());
    }

    #[test]
    fn kernel_releases_read_as_numbers() {
        assert_eq!(kernel_numbers("6.18.44-fc-v1045"), Some((6, 18, 44)));
        assert_eq!(kernel_numbers("5.10"), Some((5, 10, 0)));
        assert_eq!(kernel_numbers("4.19.57+"), Some((4, 19, 57)));
        assert_eq!(kernel_numbers("garbage"), None);
        assert_eq!(Release::parse("v1.16.3"), Some(Release(1, 16)));
    }
}
