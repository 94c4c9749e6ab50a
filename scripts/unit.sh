#!/usr/bin/env bash
# `make unit`: the tests that need no control plane, for the inner loop: the library's own
# tests, the `offline::` area of the integration binary (fixtures and snapshots, the CLI,
# RuleTest, the injection guard, fuzz regressions, import layers, docs links and the freshness of
# every generated file, which runs `make generate`'s script and so the pinned Helm, built from the
# Go module proxy on first use) and `ruleop test tests/ruletests`. `make test` runs these and
# everything else.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo test --locked --lib
cargo test --locked --test it offline::
cargo run --quiet --locked -- test tests/ruletests
