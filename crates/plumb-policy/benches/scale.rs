//! Policy evaluation at scale: 5,000 policies (4,000 NetworkPolicies, 1,000
//! CiliumNetworkPolicies with deny and L7 rules) over 10,000 pods in 50 namespaces.
//! Measures the index build, one query after indexing, and a full namespace matrix
//! (200 pods x 200 pods x 10 ports) the way `plumb policy matrix` computes it.
//!
//! `cargo bench -j 1 -p plumb-policy --bench scale`; figures in docs/benchmarks.md.

use criterion::{Criterion, criterion_group, criterion_main};
use plumb_policy::eval::Index;
use plumb_policy::load::load_str;
use plumb_policy::model::Cluster;
use std::fmt::Write;

const NAMESPACES: usize = 50;
const PODS_PER_NS: usize = 200;
const KNP_PER_NS: usize = 80;
const CNP_PER_NS: usize = 20;
const PORTS: [(u16, &str); 10] = [
    (80, "TCP"),
    (443, "TCP"),
    (5432, "TCP"),
    (8080, "TCP"),
    (8443, "TCP"),
    (9090, "TCP"),
    (53, "UDP"),
    (53, "TCP"),
    (6379, "TCP"),
    (8000, "TCP"),
];

/// The manifests: namespaces, pods, policies (one multi-document YAML text).
pub fn manifests() -> String {
    let mut y = String::new();
    let tiers = ["web", "api", "db"];
    for n in 0..NAMESPACES {
        let env = if n % 2 == 0 { "prod" } else { "dev" };
        writeln!(
            y,
            "kind: Namespace\nmetadata: {{name: ns-{n:02}, labels: {{team: t{}, env: {env}}}}}\n---",
            n % 5
        )
        .unwrap();
        for j in 0..PODS_PER_NS {
            let tier = tiers[j % 3];
            writeln!(
                y,
                "kind: Pod\nmetadata: {{name: pod-{j:03}, namespace: ns-{n:02}, labels: {{app: app-{}, tier: {tier}, version: v{}}}}}\n\
                 spec: {{containers: [{{name: c, ports: [{{containerPort: 80, name: http}}, {{containerPort: 8443, name: https}}, {{containerPort: 5432, name: db}}]}}]}}\n\
                 status: {{podIP: 10.{n}.{}.{}}}\n---",
                j % 20,
                j % 4,
                j / 250,
                j % 250 + 1
            )
            .unwrap();
        }
        for k in 0..KNP_PER_NS {
            let subject = if k == 0 {
                "{}".to_string()
            } else {
                format!("{{matchLabels: {{app: app-{}}}}}", k % 20)
            };
            let types = match k % 4 {
                0 => "[Ingress, Egress]",
                _ => "[Ingress]",
            };
            writeln!(
                y,
                "kind: NetworkPolicy\nmetadata: {{name: knp-{k:03}, namespace: ns-{n:02}}}\nspec:\n  podSelector: {subject}\n  policyTypes: {types}\n  ingress:\n  \
                 - from: [{{podSelector: {{matchLabels: {{tier: {}}}}}}}]\n    ports: [{{port: http}}, {{port: 8000, endPort: 8100}}]\n  \
                 - from: [{{namespaceSelector: {{matchLabels: {{team: t{}}}}}, podSelector: {{matchExpressions: [{{key: version, operator: In, values: [v1, v2]}}]}}}}]\n    ports: [{{port: {}, protocol: TCP}}]\n  \
                 - from: [{{ipBlock: {{cidr: 10.{}.0.0/16, except: [10.{}.0.0/24]}}}}]\n  egress:\n  \
                 - to: [{{namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: kube-system}}}}}}]\n    ports: [{{port: 53, protocol: UDP}}, {{port: 53, protocol: TCP}}]\n  \
                 - to: [{{podSelector: {{matchLabels: {{tier: db}}}}}}]\n    ports: [{{port: 5432}}]\n---",
                tiers[k % 3],
                k % 5,
                [443, 9090, 6379][k % 3],
                (n + k) % NAMESPACES,
                (n + k) % NAMESPACES,
            )
            .unwrap();
        }
        for k in 0..CNP_PER_NS {
            writeln!(
                y,
                "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: cnp-{k:03}, namespace: ns-{n:02}}}\nspec:\n  endpointSelector: {{matchLabels: {{app: app-{k}}}}}\n  ingress:\n  \
                 - fromEndpoints: [{{matchLabels: {{tier: web}}}}]\n    toPorts: [{{ports: [{{port: \"80\", protocol: TCP}}], rules: {{http: [{{method: GET, path: /api/.*}}]}}}}]\n  \
                 - fromEntities: [cluster]\n    toPorts: [{{ports: [{{port: \"9090\", protocol: TCP}}]}}]\n  ingressDeny:\n  \
                 - fromEndpoints: [{{matchLabels: {{k8s:io.kubernetes.pod.namespace: ns-{:02}}}}}]\n---",
                (n + 1) % NAMESPACES
            )
            .unwrap();
        }
    }
    y
}

fn cluster() -> Cluster {
    let mut c = Cluster::default();
    let problems = load_str(&mut c, &manifests(), "generated");
    assert!(
        problems.is_empty(),
        "{:?}",
        &problems[..problems.len().min(3)]
    );
    assert_eq!(c.pods.len(), NAMESPACES * PODS_PER_NS);
    assert_eq!(
        c.policies.len() + c.cilium.len(),
        NAMESPACES * (KNP_PER_NS + CNP_PER_NS)
    );
    c
}

/// Every cell of namespace `ns-00`'s matrix, as `plumb policy matrix` computes it
/// (`ns-00`'s pods are the first 200).
fn matrix(index: &Index<'_>) -> usize {
    let mut allowed = 0;
    for &(port, proto) in &PORTS {
        for from in 0..PODS_PER_NS {
            for to in 0..PODS_PER_NS {
                let (egress, ingress) = index.allows_pods(from, to, port, proto);
                allowed += usize::from(egress && ingress);
            }
        }
    }
    allowed
}

fn bench(c: &mut Criterion) {
    let cluster = cluster();
    let mut g = c.benchmark_group("policy");
    g.sample_size(10);
    g.bench_function("index_build_5k_policies_10k_pods", |b| {
        b.iter(|| Index::new(&cluster))
    });
    g.bench_function("lint_5k_policies_10k_pods", |b| {
        b.iter(|| plumb_policy::lint::lint(&cluster).len())
    });
    let index = Index::new(&cluster);
    let (a, z) = (
        index.pod("ns-00/pod-000").unwrap(),
        index.pod("ns-00/pod-001").unwrap(),
    );
    g.bench_function("one_query", |b| {
        b.iter(|| index.check_pods(a, z, 80, "TCP"))
    });
    g.bench_function("namespace_matrix_200_pods_10_ports", |b| {
        b.iter(|| matrix(&index))
    });
    // The same cells with the policies and rules behind each (what `check` prints).
    g.bench_function("namespace_matrix_with_reasons", |b| {
        b.iter(|| {
            let mut allowed = 0;
            for &(port, proto) in &PORTS {
                for from in 0..PODS_PER_NS {
                    for to in 0..PODS_PER_NS {
                        allowed += usize::from(index.check_pods(from, to, port, proto).allowed);
                    }
                }
            }
            allowed
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
