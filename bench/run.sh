#!/usr/bin/env bash
# `make bench`: builds what the convergence benchmark needs, runs the render benchmark
# (cargo bench --bench plan) and then the convergence benchmark (`ruleop-bench convergence`,
# bench/harness/src/convergence/, through bench/tool.sh), which starts its own control plane in
# target/control-plane-bench and writes bench/results/.
# Everything started here is stopped on exit, also on failure or Ctrl-C.
#
# Environment: BENCH_N (default "100,1000"; e.g. BENCH_N=20 for a smoke run, BENCH_N=10000 for the
# large run), BENCH_CONTENDERS (default "floor,ruleop,kopf,ruleop-children,kro"), BENCH_TIMEOUT_S
# (default 5400 s plus 0.5 s per parent and contender), BENCH_SKIP_PLAN=1 to skip the render
# benchmark; more in bench/harness/src/convergence/ and bench/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RULEOP_APISERVER_STATE="$PWD/target/control-plane-bench"
export BENCH_VENV="${BENCH_VENV:-$PWD/target/bench-venv}"
contenders="${BENCH_CONTENDERS:-floor,ruleop,kopf,ruleop-children,kro}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
ctl=tests/apiserver/ctl.sh
mkdir -p "$RULEOP_APISERVER_STATE"

# One benchmark at a time: a second one would share (and wipe) the control plane's state dir.
exec 9>"$PWD/target/bench.lock"
if ! flock -n 9; then
  echo "bench/run.sh: another benchmark run holds target/bench.lock" >&2
  exit 1
fi
export BENCH_LOCKED=1
rm -f "$RULEOP_APISERVER_STATE/bench-pids"

cleanup() {
  # Processes the harness started (recorded one pid a line), in case it died without cleaning up.
  if [[ -f "$RULEOP_APISERVER_STATE/bench-pids" ]]; then
    while read -r pid; do
      kill -TERM "$pid" 2>/dev/null || true
    done <"$RULEOP_APISERVER_STATE/bench-pids"
  fi
  "$ctl" stop >/dev/null 2>&1 9>&- || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The tool runs the ruleop binary bench/tool.sh builds beside it (release profile,
# target/release/ruleop). The tool's manifest switches on the features `cargo bench` adds
# (bench/harness/Cargo.toml), so the render benchmark's build shares most of its artifacts.
echo "== building ruleop, the measurement tool and the render benchmark (${BENCH_PROFILE:-release}) and the control plane" >&2
bench/tool.sh --build
[[ "${BENCH_SKIP_PLAN:-}" == 1 ]] || cargo bench --locked --quiet --no-run --bench plan

# The benchmark's plane serves Service ClusterIPs from a /12 (bench/harness/src/convergence/plane.rs): the
# default /16 holds 65,534 Services, too few for N=100,000.
[[ -x tests/apiserver/bin/apiserver ]] || "$ctl" build
export BENCH_CTL="${BENCH_CTL:-$PWD/$ctl}"
ctl="$BENCH_CTL"

if [[ ",$contenders," == *,kopf,* ]]; then
  echo "== kopf venv ($BENCH_VENV)" >&2
  stamp="$BENCH_VENV/.requirements"
  if ! cmp -s bench/kopf/requirements.txt "$stamp" 2>/dev/null; then
    python3 -m venv "$BENCH_VENV"
    "$BENCH_VENV/bin/pip" install --quiet -r bench/kopf/requirements.txt
    cp bench/kopf/requirements.txt "$stamp"
  fi
fi

# The kro peer: its controller `go install`ed at a pinned version (keep in step with KRO_VERSION in
# bench/harness/src/convergence/contenders/kro.rs) and its CRDs from the module's helm/crds.
kro_version=v0.9.4
kro_home="$PWD/target/kro-$kro_version"
if [[ ",$contenders," == *,kro,* ]] &&
  [[ ! -x "$kro_home/bin/controller" || ! -f "$kro_home/crds/kro.run_resourcegraphdefinitions.yaml" ]]; then
  echo "== kro $kro_version (go install into $kro_home)" >&2
  mkdir -p "$kro_home/bin" "$kro_home/crds"
  GOBIN="$kro_home/bin" go install "github.com/kubernetes-sigs/kro/cmd/controller@$kro_version"
  kro_src="$(cd "$kro_home" && go mod download -json "github.com/kubernetes-sigs/kro@$kro_version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$kro_src/helm/crds" ]] || { echo "bench/run.sh: no helm/crds in the kro module ($kro_src)" >&2; exit 1; }
  cp "$kro_src"/helm/crds/*.yaml "$kro_home/crds/"
fi

if [[ "${BENCH_SKIP_PLAN:-}" != 1 ]]; then
  echo "== render benchmark (cargo bench --bench plan)" >&2
  export BENCH_PLAN_LOG="$PWD/target/bench-plan.txt"
  timeout 900 cargo bench --locked --bench plan 2>&1 | tee "$BENCH_PLAN_LOG" >&2
fi

echo "== convergence benchmark (BENCH_N=${BENCH_N:-100,1000})" >&2
# (fd 9, the lock, is not passed on: a leftover process must not hold it)
# (a backstop only: the harness bounds itself by BENCH_TIMEOUT_S, whose default grows with N)
timeout --signal=TERM --kill-after=120 "$((${BENCH_TIMEOUT_S:-36000} + 300))" \
  bench/tool.sh convergence 9>&-
