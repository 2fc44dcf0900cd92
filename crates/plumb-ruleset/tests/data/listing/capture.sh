#!/bin/sh
# Regenerates the `iptables -nvL` listing fixtures of plumb's listing reader.
#
# Needs root and iptables >= 1.8 (1.8.9's nft and legacy backends print the same
# listing). Everything happens in a private network namespace (no links, no routes)
# that is deleted on exit, also on failure; the host's own firewall is never touched.
#
#   capture.sh KUBE-NODE.iptables-save
#
# KUBE-NODE.iptables-save is a kube-proxy dump: plumb generates it with
# `cargo run -p plumb-kubeproxy --example generate -- 12 3 all`. Deterministic fake counters are added to
# every rule so that the listings show K/M/G/T suffixes. Outputs (all ours to commit):
#   kube-node.save-c            iptables-save -c of what was loaded (the reference)
#   kube-node.nat.nvL           iptables -t nat -nvL
#   kube-node.filter.vnxL       iptables -vnxL
#   kube-node.filter.nvL-num    iptables -nvL --line-numbers
#   kube-node.mangle.nvL        iptables -t mangle -nvL
#   extras.save-c / extras.all.nvL    extras.rules, all tables with "# Table: X" separators
#   extras6.save-c / extras6.all.nvL  extras6.rules through ip6tables
set -eu
here=$(cd "$(dirname "$0")" && pwd)
input=${1:?usage: capture.sh KUBE-NODE.iptables-save}
ns=plumb-t-lst-$$
cleanup() {
	ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
ip netns add "$ns"
in_ns() { ip netns exec "$ns" "$@"; }

# Rule n gets 10^(n mod 11) + n packets of (60 + 37n mod 1400) bytes.
with_counters() {
	awk '/^-A /{ n++; p = 10 ^ (n % 11) + n; b = p * (60 + (37 * n) % 1400);
	             printf "[%.0f:%.0f] %s\n", p, b, $0; next } { print }' "$1"
}

with_counters "$input" | in_ns iptables-restore -c
in_ns iptables-save -c | grep -v '^#' >"$here/kube-node.save-c"
in_ns iptables -t nat -nvL >"$here/kube-node.nat.nvL"
in_ns iptables -vnxL >"$here/kube-node.filter.vnxL"
in_ns iptables -nvL --line-numbers >"$here/kube-node.filter.nvL-num"
in_ns iptables -t mangle -nvL >"$here/kube-node.mangle.nvL"

in_ns iptables-restore -c <"$here/extras.rules"
in_ns iptables-save -c | grep -v '^#' >"$here/extras.save-c"
for t in raw mangle nat filter; do
	echo "# Table: $t"
	in_ns iptables -t "$t" -nvL
done >"$here/extras.all.nvL"

in_ns ip6tables-restore -c <"$here/extras6.rules"
in_ns ip6tables-save -c | grep -v '^#' >"$here/extras6.save-c"
for t in filter nat; do
	echo "# Table: $t"
	in_ns ip6tables -t "$t" -nvL
done >"$here/extras6.all.nvL"
