#!/usr/bin/env bash
# The demo: start the local control plane, install ruleop, create the example Database, show its
# children and status, then its data story: rows written, a backup that succeeded (its file and
# size), a restore, and deletion with a final backup. Everything it starts is stopped on exit.
# Two modes (RULEOP_DEMO=node|light; default node when this machine can run the test node: root,
# cgroup v1, no other node running):
#
#   node   the control plane with a node (tests/node): `make image`, ruleop installed with
#          `kubectl apply -k` of the repository (the test overlay) and running as a Pod, the Database's
#          StatefulSet running real Postgres pods until the Database is Ready, backup and restore
#          Jobs that really run pg_dump and pg_restore
#   light  the control plane only: ruleop runs here as a process with rules/; the StatefulSet and
#          the Jobs are stored but nothing runs them, so the Database stays Ready=False
#          (ReplicasNotReady), no row is written, and the backup and restore Jobs it creates
#          never finish (their result stays Running): light shows what ruleop decides and
#          writes, not Postgres
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
  say "installing ruleop as docs/operations/deploy.md says: kubectl apply -k (the repository through tests/node/overlay)"
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

say "creating the example Database and its credentials Secret"
show cat examples/database.yaml
created=$SECONDS
show kubectl create secret generic orders-credentials --from-literal=password=demo
show kubectl apply -f examples/database.yaml
if [[ "$mode" == node ]]; then
  say "waiting for the Postgres pods to become ready and the Database Ready"
  show kubectl wait database/orders --for=condition=Ready --timeout=300s
  echo "Database Ready $((SECONDS - created)) s after it was created"
  show kubectl get pods -l app=orders -o wide
  show kubectl exec orders-0 -- psql -U postgres -Atc 'select version()'
else
  wait_for 60 "Ready=False ReplicasNotReady" sh -c '[ "$(kubectl get database orders -o jsonpath="{.status.conditions[?(@.type==\"Ready\")].reason}")" = ReplicasNotReady ]'
fi

say "children and status"
show kubectl get services,statefulsets,persistentvolumeclaims,jobs -l ruleop.io/rule=database
show kubectl get statefulset orders -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} owns it{"\n"}'
show kubectl get database orders -o wide

if [[ "$mode" == node ]]; then
  say "writing 1,000 rows into the first pod (the one the Service and the backups reach)"
  show kubectl exec orders-0 -- psql -U postgres -v ON_ERROR_STOP=1 -qc "create table items (id int primary key, name text); insert into items select g, 'item ' || g from generate_series(1, 1000) g"
  show kubectl exec orders-0 -- psql -U postgres -Atc 'select count(*) from items'
fi

say "requesting a backup (annotation myorg.io/backup-request, once per value)"
show kubectl annotate database orders myorg.io/backup-request=demo-1
wait_for 60 "the backup Job" sh -c '[ -n "$(kubectl get jobs -l ruleop.io/action=backup-request -o name)" ]'
job=$(kubectl get jobs -l ruleop.io/action=backup-request -o jsonpath='{.items[0].metadata.name}')
if [[ "$mode" == node ]]; then
  wait_for 180 "the backup in status" sh -c "[ \"\$(kubectl get database orders -o jsonpath='{.status.lastBackupJob}/{.status.lastBackupResult}')\" = $job/Succeeded ]"
  show kubectl logs "job/$job"
fi
show kubectl get database orders -o jsonpath='lastBackupJob={.status.lastBackupJob} lastBackupResult={.status.lastBackupResult} lastBackupFile={.status.lastBackupFile} lastBackupTime={.status.lastBackupTime}{"\n"}'

if [[ "$mode" == node ]]; then
  say "dropping the table, then restoring it from that file (annotation myorg.io/restore-from)"
  show kubectl exec orders-0 -- psql -U postgres -qc 'drop table items'
  file=$(kubectl get database orders -o jsonpath='{.status.lastBackupFile}')
  show kubectl annotate database orders "myorg.io/restore-from=$file"
  show kubectl wait database/orders --for=condition=RestoreSucceeded --timeout=180s
  show kubectl logs "job/$(kubectl get database orders -o jsonpath='{.status.lastRestoreJob}')"
  show kubectl exec orders-0 -- psql -U postgres -Atc 'select count(*) from items'
else
  say "a restore request (annotation myorg.io/restore-from): its Job is created, nothing runs it here"
  show kubectl annotate database orders myorg.io/restore-from=orders-0123456789abcdef.pgc
  wait_for 60 "the restore Job" sh -c '[ -n "$(kubectl get jobs -l ruleop.io/action=restore -o name)" ]'
fi
show kubectl get database orders -o jsonpath='lastRestoreJob={.status.lastRestoreJob} lastRestoreFrom={.status.lastRestoreFrom} lastRestoreResult={.status.lastRestoreResult}{"\n"}'

if [[ "$mode" == light ]]; then
  say "light mode runs no Jobs: backups off first, or the final backup would hold the deletion for its 10m timeout"
  show kubectl patch database orders --type=merge -p '{"spec":{"backup":{"enabled":false}}}'
fi

say "deleting the Database: the final backup first, then the garbage collector removes its children"
deleted=$SECONDS
show kubectl delete database orders
echo "Database gone $((SECONDS - deleted)) s after the delete request"
# The final backup (an `on: delete` action) runs first and is waited for; its Job belongs to no
# one, so it stays, and so does the backups volume (deletionPolicy: Orphan) with every dump.
wait_for 120 "the cascade" sh -c '[ -z "$(kubectl get services,statefulsets,jobs -l ruleop.io/rule=database,ruleop.io/action!=final-backup -o name)" ]'
show kubectl get services,statefulsets,persistentvolumeclaims,jobs
if [[ "$mode" == node ]]; then
  show kubectl logs "job/$(kubectl get jobs -l ruleop.io/action=final-backup -o jsonpath='{.items[0].metadata.name}')"

  say "ruleop's own log (the Pod's)"
  kubectl -n ruleop-system logs deployment/ruleop --tail=5
fi

say "events ruleop recorded"
show kubectl get events --field-selector involvedObject.kind=Database -o custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message
say "demo done"
