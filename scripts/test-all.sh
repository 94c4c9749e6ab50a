#!/usr/bin/env bash
# Runs every check and test: format, lints, then unit, snapshot and integration tests against
# a real control plane (tests/apiserver: etcd + kube-apiserver + GC/namespace controllers),
# and end-to-end tests against a second one with a node (tests/node), both started here once
# and stopped on exit. Builds what it needs; reuses target/ and Go caches.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RULEOP_APISERVER_STATE="${RULEOP_APISERVER_STATE:-$PWD/target/control-plane}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
ctl=tests/apiserver/ctl.sh

step() { printf '\n== %s\n' "$*"; }

step "format and lints"
cargo fmt --check
# Every workspace member: ruleop, the test-kit (tests/kit) and the measurement tool (bench/harness).
cargo clippy --workspace --all-targets --locked -- -D warnings
# The library alone, as the release binary builds it (no dev-dependency turns `fuzzing` on).
cargo clippy --locked -- -D warnings

step "rule tests (ruleop test tests/ruletests)"
cargo run --quiet --locked -- test tests/ruletests

step "container image (make image)"
scripts/image.sh

step "helm (pinned, built from the Go module proxy: scripts/helm.sh)"
scripts/helm.sh --path

step "chromium (Debian's, for tests/it/ops/console.rs: scripts/chromium.sh)"
scripts/chromium.sh

step "control plane build"
"$ctl" build

step "control plane start"
"$ctl" stop >/dev/null 2>&1 || true
trap '"$ctl" stop' EXIT
eval "$("$ctl" start)"
export KUBECONFIG

# A second control plane with a node (tests/node) for the end-to-end tests (tests/it/node/e2e.rs):
# ruleop runs there as a Pod, which must not meet the other tests' operators and objects.
step "node (containerd, kubelet, scheduler, controllers; tests/node)"
tests/node/node.sh setup
node_state="$PWD/target/node-plane"
RULEOP_APISERVER_STATE="$node_state" "$ctl" stop >/dev/null 2>&1 || true
trap '"$ctl" stop; RULEOP_APISERVER_STATE="$node_state" "$ctl" stop' EXIT
RULEOP_NODE_KUBECONFIG="$(RULEOP_APISERVER_STATE="$node_state" "$ctl" start --node | sed -n 's/^export KUBECONFIG=//p')"
export RULEOP_NODE_KUBECONFIG

step "cargo test"
# Every area two at a time, then the ones that need the machine (or the API server's write
# counters) to themselves, one at a time: tests/it/exclusive.
cargo test --locked --lib --bins --tests -- --test-threads=2 --skip exclusive::
cargo test --locked --test it exclusive:: -- --test-threads=1
