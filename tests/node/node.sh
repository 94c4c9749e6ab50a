#!/usr/bin/env bash
# Starts and stops the test cluster's node beside a running control plane (tests/apiserver):
# containerd (+ runc, Debian's packages) with the CNI bridge plugin, a kubelet, kube-scheduler
# and kube-controller-manager's workload controllers (the last three are subcommands of the
# control plane's own binary, tests/apiserver/bin/apiserver). Called by tests/apiserver/ctl.sh
# (`ctl.sh start --node`, `ctl.sh stop`); not meant to be run alone.
#
#   node.sh setup           apt-get install containerd, runc and the CNI plugins when missing
#   node.sh start STATE     start the node under STATE/node, wait until it is Ready and its
#                           static test pod (pause image) runs; prints the time taken
#   node.sh stop STATE      stop everything start started, remove every pod, mount, network
#                           namespace, cgroup and the bridge, and STATE/node (its logs are
#                           kept in STATE/node-logs until the next start)
#
# One node per machine: its bridge (ruleop0, 10.244.0.1/24, the node's InternalIP) and its
# cgroup (/ruleop-node in every v1 hierarchy) are fixed names. Pods get addresses on the bridge
# and no default route, nothing is masqueraded, and the host's ip_forward is left alone: every
# packet stays on this machine. There is no kube-proxy and no cluster DNS: pods that need the
# API server use hostNetwork and 127.0.0.1 (tests/node/overlay).
#
# The kubelet syncs pods every 10 s (syncFrequency; the default is 1 min): a ConfigMap edit reaches
# the mounted files within about that. Images: tests/node/images.sh builds pause and postgres;
# target/ruleop-image.tar (`make image`) is imported too when it exists.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/tests/apiserver/bin/apiserver"
bridge=ruleop0
bridge_ip=10.244.0.1
pod_subnet=10.244.0.0/24
cgroup=ruleop-node
node_name=ruleop-node
ready_timeout="${RULEOP_NODE_READY_TIMEOUT:-180}"
cni_bin=/usr/lib/cni
controllers=(serviceaccount-controller root-ca-certificate-publisher-controller deployment-controller
  replicaset-controller statefulset-controller job-controller endpointslice-controller
  persistentvolume-binder-controller persistentvolumeclaim-protection-controller
  persistentvolume-protection-controller pod-garbage-collector-controller disruption-controller
  node-lifecycle-controller)

die() { echo "node.sh: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }

cmd_setup() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [[ -x "$cni_bin/bridge" ]] || missing+=(containernetworking-plugins)
  if ((${#missing[@]})); then
    echo "node.sh: apt-get install ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 \
      || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
  fi
}

# paths STATE: sets the node's paths under STATE/node.
paths() {
  state="$(cd "$1" && pwd)"
  dir="$state/node"
  kubeconfig="$state/kubeconfig"
  sock="$dir/containerd/containerd.sock"
}

kubectl_() { kubectl --kubeconfig "$kubeconfig" "$@"; }

# cgroup_dirs [SUB]: the node's cgroup (or SUB below it) in every v1 hierarchy.
cgroup_dirs() {
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    [[ -f "$hierarchy/cgroup.procs" ]] || continue
    echo "${hierarchy%/}/$cgroup${1:+/$1}"
  done
}

# make_cgroups: /ruleop-node in every hierarchy (the kubelet's cgroupRoot; it makes
# /ruleop-node/kubepods itself) and /ruleop-node/runtime for containerd, its shims and the
# components, so that stop finds every process the node started.
make_cgroups() {
  local d
  for d in $(cgroup_dirs); do
    mkdir -p "$d"
    if [[ -f "$d/cpuset.cpus" ]]; then
      # A new v1 cpuset starts empty; nothing could join it.
      cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
  for d in $(cgroup_dirs runtime); do
    mkdir -p "$d"
    if [[ -f "$d/cpuset.cpus" ]]; then
      cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
}

# launch NAME COMMAND...: runs COMMAND in the runtime cgroup, in its own session, logging to
# $dir/NAME.log, and records its pid in $dir/NAME.pid.
launch() {
  local name="$1"
  shift
  (
    for d in $(cgroup_dirs runtime); do echo "$BASHPID" >"$d/cgroup.procs"; done
    exec setsid "$@" >"$dir/$name.log" 2>&1 </dev/null
  ) &
  echo "$!" >"$dir/$name.pid"
}

# wait_for SECONDS WHAT COMMAND...: polls COMMAND until it succeeds.
wait_for() {
  local seconds="$1" what="$2" start
  shift 2
  start=$(now_ms)
  until "$@" >/dev/null 2>&1; do
    if (($(now_ms) - start >= seconds * 1000)); then
      die "$what not within ${seconds}s (logs: $dir/*.log)"
    fi
    sleep 0.2
  done
}

write_configs() {
  mkdir -p "$dir"/{containerd,cni/net.d,cni/ipam,kubelet,manifests}
  cat >"$dir/containerd/config.toml" <<EOF
# containerd for the test node: its own root, state and socket; CRI with runc (cgroupfs, as the
# kubelet), the local pause image, the CNI bridge, network namespaces under the state directory.
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.1"
  netns_mounts_under_state_dir = true
  # Processes here lack CAP_SYS_RESOURCE (not in the bounding set), so none may lower its
  # oom_score_adj: runc failed every pod sandbox (the kubelet asks for -998) with "nsexec: failed
  # to update /proc/self/oom_score_adj: Permission denied". This clamps scores at containerd's own.
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
EOF
  # isGateway false: the bridge's address is set here, so the plugin neither turns on the host's
  # ip_forward nor gives pods a default route; pods reach the host and each other only.
  cat >"$dir/cni/net.d/10-ruleop.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ruleop",
  "plugins": [{
    "type": "bridge", "bridge": "$bridge", "isGateway": false, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet", "gateway": "$bridge_ip"}]],
             "dataDir": "$dir/cni/ipam"}
  }]
}
EOF
  cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $bridge_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup
failCgroupV1: false
staticPodPath: $dir/manifests
syncFrequency: 10s
# Images cannot be pulled again here: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
resolvConf: /etc/resolv.conf
EOF
  # The static test pod: the pause image only, no API object needed to start it.
  cat >"$dir/manifests/node-check.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: node-check, namespace: kube-system, labels: {app: node-check}}
spec:
  containers:
    - {name: pause, image: registry.k8s.io/pause:3.10.1, imagePullPolicy: Never}
EOF
}

import_images() {
  local images="$root/target/node-images" archive
  "$here/images.sh" "$images"
  for archive in "$images/pause.tar" "$images"/postgres-*.tar "$root/target/ruleop-image.tar"; do
    [[ -f "$archive" ]] || { echo "node.sh: no $archive (make image), skipped" >&2; continue; }
    ctr --address "$sock" -n k8s.io images import "$archive" >/dev/null \
      || die "ctr import $archive failed"
  done
}

cmd_start() {
  paths "$1"
  [[ "$(id -u)" == 0 ]] || die "the node needs root (containerd, runc, cgroups, the bridge)"
  [[ -d /sys/fs/cgroup/pids ]] || die "the node needs cgroup v1 hierarchies (/sys/fs/cgroup/pids)"
  [[ -x "$bin" ]] || die "$bin missing: run tests/apiserver/ctl.sh build"
  [[ -f "$kubeconfig" ]] || die "no control plane in $state (ctl.sh start --node)"
  command -v containerd >/dev/null && command -v runc >/dev/null && [[ -x "$cni_bin/bridge" ]] \
    || die "containerd, runc or the CNI plugins missing: run $0 setup"
  if [[ -d "/sys/fs/cgroup/pids/$cgroup" ]] || ip link show "$bridge" >/dev/null 2>&1; then
    die "a node already runs on this machine (bridge $bridge or cgroup /$cgroup exists); stop it with its ctl.sh stop"
  fi
  local start
  start=$(now_ms)
  rm -rf "$dir"
  write_configs
  ip link add "$bridge" type bridge
  ip addr add "$bridge_ip/24" dev "$bridge"
  ip link set "$bridge" up
  make_cgroups

  launch containerd containerd --config "$dir/containerd/config.toml"
  wait_for 30 "containerd" ctr --address "$sock" version
  import_images

  local pki="$state/data/pki"
  launch kube-controller-manager "$bin" kube-controller-manager --kubeconfig="$kubeconfig" \
    --leader-elect=false --secure-port=0 --controllers="$(IFS=,; echo "${controllers[*]}")" \
    --root-ca-file="$pki/ca.crt" --enable-hostpath-provisioner --pv-recycler-minimum-timeout-hostpath=10
  launch kube-scheduler "$bin" kube-scheduler --kubeconfig="$kubeconfig" --leader-elect=false --secure-port=0
  launch kubelet "$bin" kubelet --config="$dir/kubelet/config.yaml" --kubeconfig="$kubeconfig" \
    --root-dir="$dir/kubelet" --cert-dir="$dir/kubelet/pki" --hostname-override="$node_name" \
    --node-ip="$bridge_ip"

  # hostPath volumes for PersistentVolumeClaims (the Database's data), by kube-controller-manager's
  # hostPath provisioner (under /tmp/hostpath_pv, removed with their claims and by stop).
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
  wait_for "$ready_timeout" "node $node_name Ready" node_ready
  wait_for "$ready_timeout" "static pod node-check Running" static_pod_running
  echo "node $node_name ready in $(($(now_ms) - start)) ms (state $dir)" >&2
}

node_ready() {
  [[ "$(kubectl_ get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

static_pod_running() {
  [[ "$(kubectl_ -n kube-system get pod "node-check-$node_name" -o jsonpath='{.status.phase}')" == Running ]]
}

# stop_pids NAME...: SIGTERM to each, then SIGKILL to those alive after 15 s.
stop_pids() {
  local name pids=()
  for name in "$@"; do
    [[ -f "$dir/$name.pid" ]] || continue
    pids+=("$(cat "$dir/$name.pid")")
    rm -f "$dir/$name.pid"
  done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local pid alive
  for _ in $(seq 1 150); do
    alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

# kill_cgroup SUB: SIGKILLs every process in the node's cgroup SUB (recursively) until none is
# left.
kill_cgroup() {
  local top="/sys/fs/cgroup/pids/$cgroup${1:+/$1}" pids
  [[ -d "$top" ]] || return 0
  for _ in $(seq 1 50); do
    pids="$(find "$top" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)"
    [[ -n "$pids" ]] || return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  die "processes left in $top: $pids"
}

cmd_stop() {
  paths "$1"
  [[ -d "$dir" ]] || return 0
  local start
  start=$(now_ms)
  # Volumes the hostPath provisioner made for this cluster, while the API server still answers.
  local volumes=""
  if [[ -f "$kubeconfig" ]]; then
    volumes="$(kubectl_ get pv -o jsonpath='{range .items[*]}{.spec.hostPath.path}{"\n"}{end}' 2>/dev/null || true)"
  fi
  stop_pids kubelet kube-scheduler kube-controller-manager
  kill_cgroup kubepods
  stop_pids containerd
  kill_cgroup ""
  # Mounts under the node's directory (container root filesystems, volumes, network namespaces),
  # deepest first.
  local mount
  while IFS= read -r mount; do
    umount -l "$mount" 2>/dev/null || true
  done < <(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  local d
  for d in $(cgroup_dirs); do
    [[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  while IFS= read -r d; do
    [[ "$d" == /tmp/hostpath_pv/* ]] && rm -rf "$d"
  done <<<"$volumes"
  # The logs outlive the node (until the next start) for a failure's post-mortem.
  rm -rf "$state/node-logs"
  mkdir -p "$state/node-logs"
  cp "$dir"/*.log "$state/node-logs/" 2>/dev/null || true
  rm -rf "$dir"
  echo "node stopped in $(($(now_ms) - start)) ms" >&2
}

case "${1:-}" in
  setup) cmd_setup ;;
  start) cmd_start "${2:?usage: $0 start STATE}" ;;
  stop) cmd_stop "${2:?usage: $0 stop STATE}" ;;
  *) die "usage: $0 setup|start STATE|stop STATE" ;;
esac
