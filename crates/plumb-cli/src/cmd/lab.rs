//! `plumb lab`: up, status, down, exec (and the hidden `actor`), over the plumb-lab crate.

use std::time::{Duration, Instant};

use anyhow::Context;
use plumb_lab::{Lab, LabOptions, Scenario};

use crate::Verdict;
use crate::flags::LabCommand;
use crate::output;

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
        LabCommand::Status { json } => status(json),
        LabCommand::Down { json } => {
            let report = plumb_lab::down();
            if json {
                output::json(&report)?;
            } else if report.was_clean() && report.errors.is_empty() {
                println!("no lab to remove");
            } else {
                println!(
                    "removed {} namespaces, {} processes{}",
                    report.namespaces.len(),
                    report.processes.len(),
                    report
                        .root_removed
                        .as_ref()
                        .map(|r| format!(", {}", r.display()))
                        .unwrap_or_default()
                );
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
    services: usize,
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
            services: Some(services),
            sync_period: sync_period.map(Duration::from_secs_f64),
            backend,
            exact_restore_payload,
            ..LabOptions::default()
        },
    )
    .with_context(|| format!("starting lab scenario {scenario}"))?;
    let state = lab.detach();
    println!(
        "lab {} ready in {:.2} s ({} service ports, iptables backend {})",
        state.scenario,
        start.elapsed().as_secs_f64(),
        state.services,
        state.backend
    );
    println!("  {}", scenario.summary());
    println!(
        "  node netns plumb-node ({}), API endpoint {}, kubernetes Service {}",
        state.node_ip, state.api_endpoint, state.cluster_ip
    );
    println!(
        "  lab root {} (RKE2 layout: etc/rancher/rke2, var/log/pods, etc/cni/net.d)",
        state.root.display()
    );
    println!(
        "try: plumb lab exec -- curl -sk --max-time 3 https://{}/version",
        state.cluster_ip
    );
    println!("     plumb lab exec -- iptables-save -t nat | head");
    println!("     plumb lab status;  plumb lab down");
    Ok(Verdict::Clean)
}

fn status(json: bool) -> anyhow::Result<Verdict> {
    let st = plumb_lab::status()?;
    let healthy = st.running && st.actors_alive.values().all(|a| *a);
    if json {
        output::json(&st)?;
    } else if let Some(s) = &st.state {
        println!(
            "lab: {} ({}), root {}",
            s.scenario,
            s.phase,
            s.root.display()
        );
        println!("namespaces: {}", s.namespaces.join(", "));
        println!(
            "node {}  API endpoint {}  kubernetes Service {}",
            s.node_ip, s.api_endpoint, s.cluster_ip
        );
        for (name, pid) in &s.actors {
            let alive = st.actors_alive.get(name).copied().unwrap_or(false);
            println!(
                "actor {name:<15} pid {pid:<8} {}",
                if alive { "running" } else { "gone" }
            );
        }
        for c in &st.containers {
            println!(
                "pod {:<40} {:<12} {:<10} {:<18} restarts {}",
                c.pod, c.container, c.state, c.reason, c.restarts
            );
        }
    } else if st.leftovers.is_empty() {
        println!("no lab running");
    } else {
        println!(
            "no lab recorded, but leftovers exist: {:?}; run `plumb lab down`",
            st.leftovers
        );
    }
    Ok(if healthy {
        Verdict::Clean
    } else {
        Verdict::Problems
    })
}
