#!/usr/bin/env bash
# Runs the pinned Helm, installing it first when it is missing: built from the Go module proxy
# (`go install`, no download of a prebuilt binary) into target/tools/ (gitignored), so a fresh
# machine that has Go gets the same Helm as everyone else.
#
#   scripts/helm.sh ARGS...     run helm ARGS...
#   scripts/helm.sh --path      install if needed and print the binary's path
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=v3.21.4
dir="$PWD/target/tools/helm-$version"
bin="$dir/helm"
if [ ! -x "$bin" ]; then
    command -v go >/dev/null || { echo "scripts/helm.sh: go is not installed" >&2; exit 1; }
    echo "scripts/helm.sh: building helm $version from the Go module proxy into $dir" >&2
    mkdir -p "$dir"
    GOBIN="$dir" GOFLAGS=-buildvcs=false go install "helm.sh/helm/v3/cmd/helm@$version"
fi
if [ "${1:-}" = --path ]; then
    echo "$bin"
else
    exec "$bin" "$@"
fi
