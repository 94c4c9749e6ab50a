#!/usr/bin/env bash
# The measurement tool (bench/harness, `ruleop-bench`): builds it and the ruleop binary it
# measures in one cargo invocation (so both resolve the same features), then runs
# `ruleop-bench <measurement>`; `bench/tool.sh --build` only builds. `make bench` (through
# bench/run.sh), `make soak` and `make measure-*` call it; bench/README.md lists the measurements.
#
# Environment: BENCH_PROFILE (default release, the profile every figure in bench/results was
# measured with; `make soak` passes SOAK_PROFILE), CARGO_TARGET_DIR; each measurement's own
# settings (BENCH_N, SOAK_MINUTES, MEMORY_N, WRITES_N, CONSOLE_N, ...) pass through.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -eq 0 ]]; then
  echo "usage: bench/tool.sh --build | <measurement>: convergence, soak, memory, writes, unsharded, console" >&2
  exit 2
fi
profile="${BENCH_PROFILE:-release}"
cargo build --locked --quiet --profile "$profile" -p ruleop -p ruleop-bench --bins
# cargo's directory for the `dev` profile is `debug`; every other profile's is its name.
dir="${CARGO_TARGET_DIR:-target}/$([[ "$profile" == dev ]] && echo debug || echo "$profile")"
[[ "${1:-}" == --build ]] && exit 0
# The test-kit runs the ruleop beside the tool (target/<profile>/ruleop) unless RULEOP_BIN names one.
exec "$dir/ruleop-bench" "$@"
