#!/usr/bin/env bash
# Builds, starts and stops the test control plane (etcd + kube-apiserver +
# garbage-collector and namespace controllers in one process, see main.go),
# and with --node a node beside it (tests/node/node.sh: containerd, kubelet,
# kube-scheduler, kube-controller-manager's workload controllers, kube-proxy,
# CoreDNS).
#
#   ctl.sh build             build bin/apiserver (also the node's components:
#                            kubelet, kube-proxy, scheduler, controller-manager)
#                            and bin/coredns (the node's cluster DNS, its own
#                            module: tests/node/coredns)
#   ctl.sh start [ARGS...]   start a fresh one in the background, wait for READY
#                            and print `export KUBECONFIG=...`; ARGS go to the binary
#   ctl.sh start --node [ARGS...]
#                            the same, then start the node and wait until it is
#                            Ready and runs a static pod (needs root, containerd,
#                            runc and the CNI plugins: `tests/node/node.sh setup`)
#   ctl.sh stop              stop the node (every pod, mount, cgroup, the bridge),
#                            SIGTERM the control plane, wait until it is gone,
#                            remove its data
#   ctl.sh restart [SECONDS] SIGTERM it, keep its data, wait SECONDS (default 0),
#                            start it again: same port, CA, tokens, etcd data, so
#                            clients and the KUBECONFIG from start keep working
#   ctl.sh status            say whether it runs
#
# Environment: RULEOP_APISERVER_STATE (default /tmp/ruleop-apiserver) holds
# the pid, the kubeconfig, the log and the data directory (etcd, pki, ports);
# RULEOP_APISERVER_READY_TIMEOUT (default 120) is how many seconds start waits
# for READY. start and stop print how long they took (in ms) on stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/bin/apiserver"
node="$here/../node/node.sh"
state="${RULEOP_APISERVER_STATE:-/tmp/ruleop-apiserver}"
ready_timeout="${RULEOP_APISERVER_READY_TIMEOUT:-120}"
pidfile="$state/pid"
logfile="$state/apiserver.log"
outfile="$state/stdout"
kubeconfig="$state/kubeconfig"
datadir="$state/data"
argsfile="$state/args"

die() { echo "ctl.sh: $*" >&2; exit 1; }

now_ms() { date +%s%3N; }

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
  # Stamp the Kubernetes version as its release builds do (a node reports it).
  local version
  version="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
  local minor="${version#v1.}"
  minor="${minor%%.*}"
  (cd "$here" && go build -o "$bin" -ldflags "-X k8s.io/component-base/version.gitVersion=$version \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
    -X k8s.io/component-base/version.gitTreeState=clean" .)
  echo "built $bin in $((SECONDS - start))s" >&2
  start=$SECONDS
  (cd "$here/../node/coredns" && go build -o "$here/bin/coredns" .)
  echo "built $here/bin/coredns in $((SECONDS - start))s" >&2
}

cmd_start() {
  [[ -x "$bin" ]] || die "$bin missing: run '$0 build' first"
  if pid="$(running_pid)"; then
    die "already running (pid $pid); run '$0 stop' first"
  fi
  mkdir -p "$state"
  rm -rf "$datadir"
  : >"$logfile"
  : >"$argsfile"
  if (($#)); then printf '%s\0' "$@" >"$argsfile"; fi
  launch "$@"
  local arg
  for arg in "$@"; do
    if [[ "$arg" == --node ]]; then
      "$node" start "$state" || { "$node" stop "$state" || true; terminate >&2 || true; die "the node did not start"; }
    fi
  done
}

# launch [ARGS...]: starts the binary on $datadir and waits for READY.
launch() {
  rm -f "$pidfile" "$outfile"
  local start
  start=$(now_ms)
  setsid "$bin" --data-dir "$datadir" --kubeconfig-out "$kubeconfig" "$@" >"$outfile" 2>>"$logfile" </dev/null &
  local pid=$!
  echo "$pid" >"$pidfile"
  while ! grep -q '^READY ' "$outfile" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$logfile" >&2 || true
      die "apiserver exited before READY (log: $logfile)"
    fi
    if (($(now_ms) - start >= ready_timeout * 1000)); then
      tail -n 20 "$logfile" >&2 || true
      terminate >&2 || true
      die "no READY within ${ready_timeout}s (log: $logfile)"
    fi
    sleep 0.1
  done
  local path
  path="$(sed -n 's/^READY kubeconfig=//p' "$outfile")"
  echo "ready in $(($(now_ms) - start)) ms (pid $pid, log $logfile)" >&2
  echo "export KUBECONFIG=$path"
}

# terminate: SIGTERMs the running binary and waits until it is gone (SIGKILL
# after 30 s); keeps its data directory.
terminate() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$pidfile"
    echo "not running" >&2
    return 0
  fi
  local start
  start=$(now_ms)
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
  rm -f "$pidfile" "$outfile"
  echo "stopped pid $pid in $(($(now_ms) - start)) ms" >&2
}

cmd_stop() {
  # A node that fails to stop cleanly still lets the control plane stop; stop then fails.
  local node_rc=0
  if [[ -d "$state/node" ]]; then
    "$node" stop "$state" || node_rc=$?
  fi
  terminate
  rm -rf "$datadir" "$kubeconfig" "$state/audit-writes.log"* "$argsfile"
  ((node_rc == 0)) || die "the node did not stop cleanly (node.sh stop exited $node_rc); run '$0 stop' again"
}

cmd_restart() {
  local down="${1:-0}"
  [[ -d "$datadir" ]] || die "nothing to restart: run '$0 start' first"
  terminate
  sleep "$down"
  local args=()
  if [[ -s "$argsfile" ]]; then
    mapfile -d '' args <"$argsfile"
  fi
  launch "${args[@]}"
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
  restart) shift; cmd_restart "$@" ;;
  status) cmd_status ;;
  *) die "usage: $0 build|start [ARGS...]|stop|restart [SECONDS]|status" ;;
esac
