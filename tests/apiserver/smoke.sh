#!/usr/bin/env bash
# Smoke-checks a running test control plane (ctl.sh start) with kubectl:
# readyz, a CRD with a status subresource, generation semantics, cascading
# deletion through the garbage collector, namespace deletion and /metrics.
#
#   KUBECONFIG=... tests/apiserver/smoke.sh
set -euo pipefail

: "${KUBECONFIG:?set KUBECONFIG (eval \"\$(tests/apiserver/ctl.sh start)\")}"
k() { kubectl --request-timeout=30s "$@"; }
ns="smoke-$RANDOM"
fail() { echo "FAIL: $*" >&2; exit 1; }
ms() { date +%s%3N; }

# wait_gone START_MS KIND NAME [NS]: polls until the object is gone, prints
# the ms since START_MS.
wait_gone() {
  local start=$1
  shift
  for _ in $(seq 1 600); do
    if ! k get "$1" "$2" ${3:+-n "$3"} >/dev/null 2>&1; then
      echo $(($(ms) - start))
      return 0
    fi
    sleep 0.05
  done
  return 1
}

echo "readyz: $(k get --raw /readyz)"
k get ns

k apply -f - <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: databases.myorg.io
spec:
  group: myorg.io
  scope: Namespaced
  names: {plural: databases, singular: database, kind: Database}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
EOF
k wait --for=condition=Established crd/databases.myorg.io --timeout=30s
k create ns "$ns"
k apply -n "$ns" -f - <<'EOF'
apiVersion: myorg.io/v1
kind: Database
metadata: {name: db1}
spec: {size: 1}
EOF
gen() { k get database db1 -n "$ns" -o jsonpath='{.metadata.generation}'; }
g0=$(gen)
k patch database db1 -n "$ns" --subresource=status --type=merge -p '{"status":{"phase":"Ready"}}' >/dev/null
g1=$(gen)
[[ "$(k get database db1 -n "$ns" -o jsonpath='{.status.phase}')" == Ready ]] || fail "status not stored"
k patch database db1 -n "$ns" --type=merge -p '{"spec":{"size":2}}' >/dev/null
g2=$(gen)
echo "generation: create=$g0 after-status-patch=$g1 after-spec-patch=$g2"
[[ "$g0" == "$g1" && "$g2" -gt "$g1" ]] || fail "generation semantics"

# Cascading deletion: a ConfigMap owned by the Database instance.
uid=$(k get database db1 -n "$ns" -o jsonpath='{.metadata.uid}')
k apply -n "$ns" -f - <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: child
  ownerReferences:
  - {apiVersion: myorg.io/v1, kind: Database, name: db1, uid: $uid, controller: true, blockOwnerDeletion: true}
data: {k: v}
EOF
start=$(ms)
k delete database db1 -n "$ns" --wait=false >/dev/null
echo "cascade (Database -> ConfigMap): child gone $(wait_gone "$start" configmap child "$ns" || fail "child survived") ms after the delete call"

# Foreground deletion between two ConfigMaps.
k create configmap owner -n "$ns" >/dev/null
ouid=$(k get configmap owner -n "$ns" -o jsonpath='{.metadata.uid}')
k apply -n "$ns" -f - <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: child2
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: $ouid, controller: true, blockOwnerDeletion: true}
EOF
start=$(ms)
k delete configmap owner -n "$ns" --cascade=foreground --wait=true >/dev/null
k get configmap child2 -n "$ns" >/dev/null 2>&1 && fail "child2 survived foreground deletion"
echo "cascade (foreground ConfigMap -> ConfigMap): owner deleted after $(($(ms) - start)) ms"

start=$(ms)
k delete ns "$ns" --wait=true >/dev/null
k get ns "$ns" >/dev/null 2>&1 && fail "namespace still there"
echo "namespace deletion: $(($(ms) - start)) ms (the controller waits a fixed 5 s grace period)"
k delete crd databases.myorg.io >/dev/null

metrics=$(k get --raw /metrics)
grep -q '^apiserver_request_total{' <<<"$metrics" || fail "no apiserver_request_total in /metrics"
echo "metrics: $(grep -c '^apiserver_request_total{' <<<"$metrics") apiserver_request_total series, e.g."
grep -m 3 '^apiserver_request_total{' <<<"$metrics"
echo "smoke: all checks passed"
