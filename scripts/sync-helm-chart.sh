#!/usr/bin/env bash
# `make deploy-config` (second half): generates the Helm chart's copies of what deploy/ and the
# rules already hold, into deploy/helm/ruleop (or the chart directory given). Nothing in crds/
# or files/ is edited by hand; tests/it/deploy/helm.rs fails when they are stale.
#
#   crds/                   deploy/crds/ (Helm installs crds/ before the templates, never upgrades them)
#   files/rules/            rules/: the default rule set (values rules.files replaces it)
#   files/templates/        templates/: the default templates (values rules.templates replaces them)
#   files/clusterrole.yaml  deploy/rbac/clusterrole.yaml, from `ruleop rbac` (values rbac.clusterRoleRules replaces it)
#   files/observability/    deploy/observability/'s PrometheusRule and Grafana dashboard
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
chart="${1:-deploy/helm/ruleop}"

rm -rf "$chart/crds" "$chart/files"
mkdir -p "$chart/crds" "$chart/files/observability"
cp deploy/crds/*.yaml "$chart/crds/"
cp -R rules "$chart/files/rules"
cp -R templates "$chart/files/templates"
cp deploy/rbac/clusterrole.yaml "$chart/files/clusterrole.yaml"
cp deploy/observability/prometheusrule.yaml deploy/observability/grafana-dashboard.json \
    "$chart/files/observability/"
