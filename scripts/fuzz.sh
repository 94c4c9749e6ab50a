#!/usr/bin/env bash
# `make fuzz`: runs every cargo-fuzz target in fuzz/ for FUZZ_SECONDS (default 60) each and prints
# executions, executions per second and findings per target. Not part of `make test`; findings
# land in fuzz/artifacts/<target>/ and, once fixed, belong in fuzz/regressions/<target>/ (replayed
# by `make test` through tests/it/offline/fuzz_regressions.rs).
#
# cargo-fuzz (pinned, installed into target/tools) needs nightly compiler flags: the nightly
# toolchain is used when rustup has one, otherwise stable with RUSTC_BOOTSTRAP=1. No sanitizer
# (`-s none`: ASan needs nightly's build-std), but debug assertions on (`-a`), so an arithmetic
# overflow is a finding.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
FUZZ_TARGETS="${FUZZ_TARGETS:-rule_loader duration render_hostile yaml_reader json_path parent_status}"
CARGO_FUZZ_VERSION=0.13.1
tools="$PWD/target/tools"
export PATH="$tools/bin:$PATH"
if ! cargo fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --root "$tools"
fi
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi
flags=(-s none -a --target-dir ../target/fuzz)

cd fuzz
cargo "${toolchain[@]}" fuzz build "${flags[@]}"
report=()
found=0
for target in $FUZZ_TARGETS; do
  corpus="../target/fuzz/corpus/$target"
  mkdir -p "$corpus" "artifacts/$target"
  before=$(find "artifacts/$target" -type f | wc -l)
  log="../target/fuzz/$target.log"
  printf '\n== fuzz %s for %ss\n' "$target" "$FUZZ_SECONDS"
  set +e
  cargo "${toolchain[@]}" fuzz run "${flags[@]}" "$target" "$corpus" "seeds/$target" -- \
    -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  tail -n 20 "$log"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  after=$(find "artifacts/$target" -type f | wc -l)
  new=$((after - before))
  if [ "$rc" -ne 0 ] && [ "$new" -eq 0 ]; then new="exit $rc"; fi
  [ "$new" = 0 ] || found=1
  report+=("$(printf '%-15s %12s %10s %s' "$target" "${runs:-?}" "${rate:-?}" "$new")")
done
printf '\n%-15s %12s %10s %s\n' target executions "exec/s" findings
printf '%s\n' "${report[@]}"
exit "$found"
