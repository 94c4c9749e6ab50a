#!/usr/bin/env bash
# The demo: start the local control plane, install the CRDs, run ruleop with rules/, create
# the example Database, show its children and status, change replicas, delete it and show
# the cascade. Everything it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RULEOP_APISERVER_STATE="${RULEOP_APISERVER_STATE:-$PWD/target/control-plane-demo}"
ctl=tests/apiserver/ctl.sh
log="$PWD/target/demo-ruleop.log"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "timed out waiting for $what" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
}

say "building ruleop and the control plane"
cargo build --locked --quiet
"$ctl" build

say "starting the control plane"
"$ctl" stop >/dev/null 2>&1 || true
ruleop_pid=""
cleanup() {
  [[ -n "$ruleop_pid" ]] && kill -TERM "$ruleop_pid" 2>/dev/null && wait "$ruleop_pid" 2>/dev/null || true
  "$ctl" stop
}
trap cleanup EXIT
eval "$("$ctl" start)"
export KUBECONFIG

say "installing the CRDs"
show kubectl apply -f deploy/crds/
kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null

say "checking the rules"
show target/debug/ruleop check --rules rules --templates templates

say "starting ruleop (log: $log)"
RUST_LOG=info NO_COLOR=1 target/debug/ruleop run --rules rules --templates templates --admin-addr 127.0.0.1:0 >"$log" 2>&1 &
ruleop_pid=$!

say "creating the example Database"
show cat examples/database.yaml
show kubectl apply -f examples/database.yaml
wait_for 30 "observedGeneration" sh -c '[ "$(kubectl get database orders -o jsonpath={.status.observedGeneration})" = 1 ]'

say "children and status"
show kubectl get services,statefulsets,jobs -l ruleop.io/rule=database -o wide
show kubectl get statefulset orders -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} owns it{"\n"}'
show kubectl get database orders
show kubectl get database orders -o jsonpath='{.status}{"\n"}'

say "scaling to 3 replicas"
show kubectl patch database orders --type=merge -p '{"spec":{"replicas":3}}'
wait_for 30 "the StatefulSet update" sh -c '[ "$(kubectl get statefulset orders -o jsonpath={.spec.replicas})" = 3 ]'
show kubectl get statefulset orders -o jsonpath='replicas={.spec.replicas}{"\n"}'
show kubectl get database orders -o jsonpath='observedGeneration={.status.observedGeneration} generation={.metadata.generation}{"\n"}'
show kubectl get jobs -l ruleop.io/action=backup

say "deleting the Database: the garbage collector removes its children"
show kubectl delete database orders
wait_for 30 "the cascade" sh -c '[ -z "$(kubectl get services,statefulsets,jobs -l ruleop.io/rule=database -o name)" ]'
show kubectl get services,statefulsets,jobs -l ruleop.io/rule=database

say "events ruleop recorded"
show kubectl get events --field-selector involvedObject.kind=Database -o custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message
say "demo done"
