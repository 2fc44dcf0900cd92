//! `plumb lab`: up, status, down, exec (and the hidden `actor`), over the plumb-lab crate.

use std::time::{Duration, Instant};

use anyhow::Context;
use plumb_lab::{Lab, LabOptions, Scenario};

use crate::Verdict;
use crate::flags::LabCommand;
use crate::output;
use std::io::Write;

pub fn run(cmd: LabCommand) -> anyhow::Result<Verdict> {
    match cmd {
        LabCommand::Up {
            scenario,
            services,
            sync_period,
            backend,
            exact_restore_payload,
        } => up(
            &scenario,
            services,
            sync_period,
            &backend,
            exact_restore_payload,
        ),
        LabCommand::Status { output } => status(output.json()),
        LabCommand::Down { output } => {
            let json = output.json();
            let report = plumb_lab::down();
            if json {
                output::json(&report)?;
            } else if report.was_clean() && report.errors.is_empty() {
                writeln!(std::io::stdout().lock(), "no lab to remove")?;
            } else {
                writeln!(
                    std::io::stdout().lock(),
                    "removed {} namespaces, {} processes{}",
                    report.namespaces.len(),
                    report.processes.len(),
                    report
                        .root_removed
                        .as_ref()
                        .map(|r| format!(", {}", r.display()))
                        .unwrap_or_default()
                )?;
                for e in &report.errors {
                    eprintln!("plumb: warning: {e}");
                }
            }
            Ok(if report.errors.is_empty() {
                Verdict::Clean
            } else {
                Verdict::Problems
            })
        }
        LabCommand::Exec { command } => {
            let code = plumb_lab::exec(&command)?;
            std::process::exit(code);
        }
        LabCommand::Actor { name, args } => {
            let code = plumb_lab::actors::run(&name, args.into_iter().map(Into::into).collect());
            std::process::exit(code);
        }
    }
}

fn up(
    scenario: &str,
    services: Option<usize>,
    sync_period: Option<f64>,
    backend: &str,
    exact_restore_payload: bool,
) -> anyhow::Result<Verdict> {
    let scenario: Scenario = scenario.parse()?;
    let backend: plumb_lab::Backend = backend.parse()?;
    let start = Instant::now();
    let lab = Lab::up_with(
        scenario,
        LabOptions {
            services,
            sync_period: sync_period.map(Duration::from_secs_f64),
            backend,
            exact_restore_payload,
            ..LabOptions::default()
        },
    )
    .with_context(|| format!("starting lab scenario {scenario}"))?;
    let state = lab.detach();
    writeln!(
        std::io::stdout().lock(),
        "lab {} ready in {:.2} s ({} service ports, iptables backend {})",
        state.scenario,
        start.elapsed().as_secs_f64(),
        state.services,
        state.backend
    )?;
    writeln!(std::io::stdout().lock(), "  {}", scenario.summary())?;
    writeln!(
        std::io::stdout().lock(),
        "  node netns plumb-node ({}), API endpoint {}, kubernetes Service {}",
        state.node_ip,
        state.api_endpoint,
        state.cluster_ip
    )?;
    writeln!(
        std::io::stdout().lock(),
        "  lab root {} (RKE2 layout: etc/rancher/rke2, var/log/pods, etc/cni/net.d)",
        state.root.display()
    )?;
    writeln!(
        std::io::stdout().lock(),
        "try: plumb lab exec -- curl -sk --max-time 3 https://{}/version",
        state.cluster_ip
    )?;
    writeln!(
        std::io::stdout().lock(),
        "     plumb lab exec -- iptables-save -t nat | head"
    )?;
    writeln!(
        std::io::stdout().lock(),
        "     plumb lab status;  plumb lab down"
    )?;
    Ok(Verdict::Clean)
}

fn status(json: bool) -> anyhow::Result<Verdict> {
    let st = plumb_lab::status()?;
    let healthy = st.running && st.actors_alive.values().all(|a| *a);
    if json {
        output::json(&st)?;
    } else if let Some(s) = &st.state {
        writeln!(
            std::io::stdout().lock(),
            "lab: {} ({}), root {}",
            s.scenario,
            s.phase,
            s.root.display()
        )?;
        writeln!(
            std::io::stdout().lock(),
            "namespaces: {}",
            s.namespaces.join(", ")
        )?;
        writeln!(
            std::io::stdout().lock(),
            "node {}  API endpoint {}  kubernetes Service {}",
            s.node_ip,
            s.api_endpoint,
            s.cluster_ip
        )?;
        for (name, pid) in &s.actors {
            let alive = st.actors_alive.get(name).copied().unwrap_or(false);
            writeln!(
                std::io::stdout().lock(),
                "actor {name:<15} pid {pid:<8} {}",
                if alive { "running" } else { "gone" }
            )?;
        }
        for c in &st.containers {
            writeln!(
                std::io::stdout().lock(),
                "pod {:<40} {:<12} {:<10} {:<18} restarts {}",
                c.pod,
                c.container,
                c.state,
                c.reason,
                c.restarts
            )?;
        }
    } else if st.leftovers.is_empty() {
        writeln!(std::io::stdout().lock(), "no lab running")?;
    } else {
        writeln!(
            std::io::stdout().lock(),
            "no lab recorded, but leftovers exist: {:?}; run `plumb lab down`",
            st.leftovers
        )?;
    }
    Ok(if healthy {
        Verdict::Clean
    } else {
        Verdict::Problems
    })
}
