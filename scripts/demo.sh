#!/usr/bin/env bash
# The demo: start the local control plane, install ruleop, create the example Database, show its
# children and status, change replicas, delete it and show the cascade. Everything it starts is
# stopped on exit. Two modes (RULEOP_DEMO=node|light; default node when this machine can run the
# test node: root, cgroup v1, no other node running):
#
#   node   the control plane with a node (tests/node): `make image`, ruleop installed with
#          `kubectl apply -k` of deploy/ (the test overlay) and running as a Pod, the Database's
#          StatefulSet running real Postgres pods until the Database is Ready
#   light  the control plane only: ruleop runs here as a process with rules/; the StatefulSet is
#          stored but no pod runs, so the Database stays Ready=False
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RULEOP_APISERVER_STATE="${RULEOP_APISERVER_STATE:-$PWD/target/control-plane-demo}"
ctl=tests/apiserver/ctl.sh
log="$PWD/target/demo-ruleop.log"

mode="${RULEOP_DEMO:-}"
if [[ -z "$mode" ]]; then
  mode=light
  if [[ "$(id -u)" == 0 && -d /sys/fs/cgroup/pids ]] && ! ip link show ruleop0 >/dev/null 2>&1; then
    mode=node
  fi
fi
[[ "$mode" == node || "$mode" == light ]] || { echo "RULEOP_DEMO must be node or light" >&2; exit 1; }

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "timed out waiting for $what" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
}

say "building ruleop and the control plane ($mode mode)"
cargo build --locked --quiet
"$ctl" build
if [[ "$mode" == node ]]; then
  scripts/image.sh
  tests/node/node.sh setup
fi

say "starting the control plane"
"$ctl" stop >/dev/null 2>&1 || true
ruleop_pid=""
cleanup() {
  [[ -n "$ruleop_pid" ]] && kill -TERM "$ruleop_pid" 2>/dev/null && wait "$ruleop_pid" 2>/dev/null || true
  "$ctl" stop
}
trap cleanup EXIT
if [[ "$mode" == node ]]; then
  started=$SECONDS
  eval "$("$ctl" start --node)"
  echo "control plane and node up in $((SECONDS - started)) s"
else
  eval "$("$ctl" start)"
fi
export KUBECONFIG

say "checking the rules"
show target/debug/ruleop check --rules rules --templates templates

if [[ "$mode" == node ]]; then
  say "installing ruleop as docs/operations/deploy.md says: kubectl apply -k (deploy/ through tests/node/overlay)"
  tests/node/overlay.sh target/demo-deploy
  show kubectl apply -k target/demo-deploy
  show kubectl -n ruleop-system rollout status deployment/ruleop --timeout=180s
  show kubectl -n ruleop-system get pods -o wide
  show kubectl -n ruleop-system get configmap ruleop-status -o jsonpath='{.data}{"\n"}'
else
  say "installing the CRDs"
  show kubectl apply -f deploy/crds/
  kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null

  say "starting ruleop (log: $log)"
  RUST_LOG=info NO_COLOR=1 target/debug/ruleop run --rules rules --templates templates --admin-addr 127.0.0.1:0 >"$log" 2>&1 &
  ruleop_pid=$!
fi

say "creating the example Database"
show cat examples/database.yaml
if [[ "$mode" == node ]]; then
  show kubectl create secret generic orders-credentials --from-literal=password=demo
fi
created=$SECONDS
show kubectl apply -f examples/database.yaml
wait_for 60 "observedGeneration" sh -c '[ "$(kubectl get database orders -o jsonpath={.status.observedGeneration})" = 1 ]'
if [[ "$mode" == node ]]; then
  say "waiting for the Postgres pods to become ready and the Database Ready"
  show kubectl wait database/orders --for=condition=Ready --timeout=300s
  echo "Database Ready $((SECONDS - created)) s after it was created"
  show kubectl get pods -l app=orders -o wide
  show kubectl exec orders-0 -- psql -U postgres -Atc 'select version()'
fi

say "children and status"
show kubectl get services,statefulsets,jobs -l ruleop.io/rule=database -o wide
show kubectl get statefulset orders -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} owns it{"\n"}'
show kubectl get database orders
show kubectl get database orders -o jsonpath='{.status}{"\n"}'

say "scaling to 3 replicas"
show kubectl patch database orders --type=merge -p '{"spec":{"replicas":3}}'
wait_for 30 "the StatefulSet update" sh -c '[ "$(kubectl get statefulset orders -o jsonpath={.spec.replicas})" = 3 ]'
if [[ "$mode" == node ]]; then
  show kubectl wait database/orders --for=jsonpath='{.status.readyReplicas}'=3 --timeout=300s
  show kubectl get database orders
fi
show kubectl get statefulset orders -o jsonpath='replicas={.spec.replicas}{"\n"}'
show kubectl get database orders -o jsonpath='observedGeneration={.status.observedGeneration} generation={.metadata.generation}{"\n"}'
show kubectl get jobs -l ruleop.io/action=backup

if [[ "$mode" == light ]]; then
  say "light mode runs no Jobs: backups off first, or the final backup would hold the deletion for its 10m timeout"
  show kubectl patch database orders --type=merge -p '{"spec":{"backup":{"enabled":false}}}'
fi

say "deleting the Database: the garbage collector removes its children"
show kubectl delete database orders
# The final backup (an `on: delete` action) runs first and is waited for; its Job belongs to no
# one, so it stays.
wait_for 120 "the cascade" sh -c '[ -z "$(kubectl get services,statefulsets,jobs -l ruleop.io/rule=database,ruleop.io/action!=final-backup -o name)" ]'
show kubectl get services,statefulsets,jobs -l ruleop.io/rule=database

if [[ "$mode" == node ]]; then
  say "ruleop's own log (the Pod's)"
  kubectl -n ruleop-system logs deployment/ruleop --tail=5
fi

say "events ruleop recorded"
show kubectl get events --field-selector involvedObject.kind=Database -o custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message
say "demo done"
