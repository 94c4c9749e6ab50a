#!/usr/bin/env bash
# Runs every check and test: format, lints, then unit, snapshot and integration tests against
# a real control plane (tests/apiserver: etcd + kube-apiserver + GC/namespace controllers),
# started here once and stopped on exit. Builds what it needs; reuses target/ and Go caches.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RULEOP_APISERVER_STATE="${RULEOP_APISERVER_STATE:-$PWD/target/control-plane}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
ctl=tests/apiserver/ctl.sh

step() { printf '\n== %s\n' "$*"; }

step "format and lints"
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings

step "rule tests (ruleop test tests/ruletests)"
cargo run --quiet --locked -- test tests/ruletests

step "container image (make image)"
scripts/image.sh

step "control plane build"
"$ctl" build

step "control plane start"
"$ctl" stop >/dev/null 2>&1 || true
trap '"$ctl" stop' EXIT
eval "$("$ctl" start)"
export KUBECONFIG

step "cargo test"
cargo test --locked --lib --bins --tests -- --test-threads=2
