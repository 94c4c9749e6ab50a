#!/usr/bin/env bash
# Builds, starts and stops the test control plane (etcd + kube-apiserver +
# garbage-collector and namespace controllers in one process, see main.go).
#
#   ctl.sh build            build bin/apiserver
#   ctl.sh start [ARGS...]  start it in the background, wait for READY and
#                           print `export KUBECONFIG=...`; ARGS go to the binary
#   ctl.sh stop             SIGTERM it and wait until it is gone
#   ctl.sh status           say whether it runs
#
# Environment: RULEOP_APISERVER_STATE (default /tmp/ruleop-apiserver) holds
# the pid, the kubeconfig and the log; RULEOP_APISERVER_READY_TIMEOUT
# (default 120) is how many seconds start waits for READY.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/bin/apiserver"
state="${RULEOP_APISERVER_STATE:-/tmp/ruleop-apiserver}"
ready_timeout="${RULEOP_APISERVER_READY_TIMEOUT:-120}"
pidfile="$state/pid"
logfile="$state/apiserver.log"
outfile="$state/stdout"
kubeconfig="$state/kubeconfig"

die() { echo "ctl.sh: $*" >&2; exit 1; }

running_pid() {
  [[ -f "$pidfile" ]] || return 1
  local pid
  pid="$(cat "$pidfile")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

cmd_build() {
  command -v go >/dev/null || die "go is not installed"
  local start=$SECONDS
  (cd "$here" && go build -o "$bin" .)
  echo "built $bin in $((SECONDS - start))s" >&2
}

cmd_start() {
  [[ -x "$bin" ]] || die "$bin missing: run '$0 build' first"
  if pid="$(running_pid)"; then
    die "already running (pid $pid); run '$0 stop' first"
  fi
  mkdir -p "$state"
  rm -f "$pidfile" "$outfile" "$kubeconfig"
  local start=$SECONDS
  setsid "$bin" --kubeconfig-out "$kubeconfig" "$@" >"$outfile" 2>"$logfile" </dev/null &
  local pid=$!
  echo "$pid" >"$pidfile"
  while ! grep -q '^READY ' "$outfile" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$logfile" >&2 || true
      die "apiserver exited before READY (log: $logfile)"
    fi
    if ((SECONDS - start >= ready_timeout)); then
      tail -n 20 "$logfile" >&2 || true
      cmd_stop >&2 || true
      die "no READY within ${ready_timeout}s (log: $logfile)"
    fi
    sleep 0.2
  done
  local path
  path="$(sed -n 's/^READY kubeconfig=//p' "$outfile")"
  echo "ready in $((SECONDS - start))s (pid $pid, log $logfile)" >&2
  echo "export KUBECONFIG=$path"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$pidfile"
    echo "not running" >&2
    return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "pid $pid ignored SIGTERM for 30s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  kill -0 "$pid" 2>/dev/null && die "pid $pid is still alive"
  rm -f "$pidfile" "$outfile" "$kubeconfig"
  echo "stopped pid $pid" >&2
}

cmd_status() {
  if pid="$(running_pid)"; then
    echo "running (pid $pid, kubeconfig $kubeconfig)"
  else
    echo "not running"
    return 1
  fi
}

case "${1:-}" in
  build) cmd_build ;;
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) die "usage: $0 build|start [ARGS...]|stop|status" ;;
esac
