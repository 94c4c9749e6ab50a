#!/usr/bin/env bash
# Copies rules/ and templates/ into deploy/config/, where deploy/kustomization.yaml builds the
# ConfigMaps from (kustomize only reads files below the kustomization). A test fails when the
# copy is stale. Run after editing rules or templates, then `kubectl apply -k deploy/`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rm -rf deploy/config
mkdir -p deploy/config
cp -R rules deploy/config/rules
cp -R templates deploy/config/templates
