#!/usr/bin/env bash
# Installs Debian's chromium when it is missing (tests/it/ops/console.rs loads the console in it,
# headless), then prints its path. Needs root for apt-get, as on the project's machines.
set -euo pipefail
if ! command -v chromium >/dev/null; then
    echo "scripts/chromium.sh: installing Debian's chromium" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi
command -v chromium
