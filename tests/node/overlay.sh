#!/usr/bin/env bash
# Writes OUT/kustomization.yaml: the install (`kubectl apply -k .` of the repository) as the
# test cluster's node (tests/node) runs it: one replica on the host network, reaching the API
# server at 127.0.0.1 with its in-cluster config (its ServiceAccount's projected token). There is
# no kube-proxy and no cluster DNS here, so the Service address the kubelet would set is not
# used. The patches are the component tests/node/overlay/patches, which the Helm install on the
# node takes too; this script adds the image's exact tag (target/ruleop-image.tag, from `make
# image`) and KUBERNETES_SERVICE_PORT, the port of the API server in $KUBECONFIG (it changes
# with every control plane). What the install reads (the root kustomization.yaml, rules/,
# templates/, deploy/crds, deploy/base) is copied to OUT/repo with its repository paths, so the
# copies can be edited (a rule or template change) and applied again without touching the
# repository (the shipped rules and templates run unchanged). (A kustomization inside the
# repository cannot take the repository's root as a resource: kustomize calls that a cycle.)
#
#   tests/node/overlay.sh OUT && kubectl apply -k OUT
#   (edit OUT/repo/templates/... ) && kubectl apply -k OUT
#
# With --post-render it is a Helm post-renderer: the chart's rendered objects on stdin get the
# same patches, tag and port, and are written to stdout:
#
#   helm install ruleop deploy/helm/ruleop -n ruleop-system --create-namespace \
#     --post-renderer tests/node/overlay.sh --post-renderer-args --post-render
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
usage="usage: $0 OUT | $0 --post-render <rendered.yaml"
: "${KUBECONFIG:?set KUBECONFIG to the test control plane kubeconfig}"

server="$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
port="${server##*:}"
[[ "$port" =~ ^[0-9]+$ ]] || { echo "overlay.sh: no port in the server URL $server" >&2; exit 1; }
tag="$(cat "$root/target/ruleop-image.tag" 2>/dev/null)" || { echo "overlay.sh: no target/ruleop-image.tag: run make image" >&2; exit 1; }

if [ "${1:-}" = --post-render ]; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
    cat >"$out/rendered.yaml"
    resource=rendered.yaml
else
    out="${1:?$usage}"
    rm -rf "$out/repo" "$out/patches"
    mkdir -p "$out/repo/deploy"
    cp -a "$root/kustomization.yaml" "$root/rules" "$root/templates" "$out/repo/"
    cp -a "$root/deploy/crds" "$root/deploy/base" "$out/repo/deploy/"
    resource=repo
fi
cp -a "$here/overlay/patches" "$out/patches"
cat >"$out/kustomization.yaml" <<EOT
# Written by tests/node/overlay.sh for the control plane at $server.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $resource
images:
  - name: ruleop
    newTag: "$tag"
patches:
  - target: {kind: Deployment, name: ruleop}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: KUBERNETES_SERVICE_PORT, value: "$port"}
components:
  - patches
EOT
if [ "${1:-}" = --post-render ]; then
    kubectl kustomize "$out"
fi
