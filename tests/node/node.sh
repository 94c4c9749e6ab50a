#!/usr/bin/env bash
# Starts and stops the test cluster's node beside a running control plane (tests/apiserver):
# containerd (+ runc, Debian's packages) with the CNI bridge plugin, a kubelet, kube-scheduler,
# kube-controller-manager's workload controllers and kube-proxy (the last four are subcommands
# of the control plane's own binary, tests/apiserver/bin/apiserver), and CoreDNS as the cluster
# DNS (tests/apiserver/bin/coredns, built from tests/node/coredns). Called by
# tests/apiserver/ctl.sh (`ctl.sh start --node`, `ctl.sh stop`); not meant to be run alone.
#
#   node.sh setup           apt-get install containerd, runc, the CNI plugins and iptables when
#                           missing
#   node.sh start STATE     start the node under STATE/node, wait until it is Ready, its static
#                           test pod (pause image) runs, kube-proxy has synced its rules and
#                           CoreDNS serves cluster.local; prints the time taken
#   node.sh stop STATE      stop everything start started, remove every pod, mount, network
#                           namespace, cgroup, the bridge, kube-proxy's iptables rules, the
#                           refusal rules, the blackhole route, and STATE/node (its logs are
#                           kept in STATE/node-logs until the next start)
#
# One node per machine: its bridge (ruleop0, 10.244.0.1/24, the node's InternalIP), its cgroup
# (/ruleop-node in every v1 hierarchy), the host's iptables chains kube-proxy owns (KUBE-*), the
# RULEOP-NODE-REFUSE chains, the route for the Service CIDR and the ports of kube-proxy
# (127.0.0.1:10249, :10256), CoreDNS (10.244.0.1:53, 127.0.0.1:8181) and the kubelet are fixed.
#
# Every packet stays on this machine. Pods get addresses on the bridge and no default route, only
# a route for the Service CIDR (10.0.0.0/16) via the bridge address. kube-proxy (iptables mode,
# the host's `iptables`: Debian's nft backend) DNATs a ClusterIP to a pod in PREROUTING (br_netfilter
# on this bridge: its frames pass iptables, and replies are un-NATed by conntrack); the DNATed
# packet goes back out the bridge, which needs forwarding on for packets that come in on the
# bridge (net.ipv4.conf.ruleop0.forwarding=1; the host's ip_forward, 0 here, is left alone), and
# RULEOP-NODE-GUARD (mangle FORWARD) drops whatever would leave the bridge for another
# interface. A host route `blackhole 10.0.0.0/16`, added before kube-proxy starts, drops any
# ClusterIP packet no rule rewrote; for pods, RULEOP-NODE-REFUSE refuses such a packet at once
# instead (ICMP port unreachable from the ClusterIP, as kube-proxy's own "has no endpoints"
# REJECT, which sits in the FORWARD path that a blackholed packet never reaches, while the
# blackhole drops silently). CoreDNS answers cluster.local only (no forward plugin): other names
# are refused, never asked off the machine. The kubernetes Service's endpoint is 127.0.0.1,
# which pods cannot reach: pods that need the API server use hostNetwork and 127.0.0.1
# (tests/node/overlay).
#
# The kubelet syncs pods every 10 s (syncFrequency; the default is 1 min): a ConfigMap edit reaches
# the mounted files within about that. Images: tests/node/images.sh builds pause and postgres;
# target/ruleop-image.tar (`make image`) is imported too when it exists.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/tests/apiserver/bin/apiserver"
coredns="$root/tests/apiserver/bin/coredns"
bridge=ruleop0
bridge_ip=10.244.0.1
pod_subnet=10.244.0.0/24
# The API server's --service-cluster-ip-range (tests/apiserver/apiserver.go).
service_cidr=10.0.0.0/16
cluster_domain=cluster.local
refuse_chain=RULEOP-NODE-REFUSE
guard_chain=RULEOP-NODE-GUARD
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
  # kube-proxy's iptables mode runs iptables-restore; Debian's default backend is nft.
  command -v iptables-restore >/dev/null || missing+=(iptables)
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
  # ip_forward nor gives pods a default route; pods reach the host, each other, and the Service
  # CIDR through the bridge address (where kube-proxy's DNAT or the refusal below meets them).
  cat >"$dir/cni/net.d/10-ruleop.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ruleop",
  "plugins": [{
    "type": "bridge", "bridge": "$bridge", "isGateway": false, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet", "gateway": "$bridge_ip"}]],
             "routes": [{"dst": "$service_cidr", "gw": "$bridge_ip"}], "dataDir": "$dir/cni/ipam"}
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
# No iptables chains of the kubelet's own (KUBE-FIREWALL, canaries): kube-proxy makes what the
# node needs, and its --cleanup removes it.
makeIPTablesUtilChains: false
# CoreDNS on the host, bound to the bridge address (node.sh starts it).
clusterDNS: [$bridge_ip]
clusterDomain: $cluster_domain
EOF
  cat >"$dir/kube-proxy.yaml" <<EOF
# kube-proxy for the test node: iptables mode, bound to loopback and the bridge only, touching
# no host-wide sysctl (no conntrack sizing or timeouts, no route_localnet for localhost
# NodePorts).
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $kubeconfig}
hostnameOverride: $node_name
clusterCIDR: $pod_subnet
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$bridge_ip/32]
iptables: {localhostNodePorts: false, minSyncPeriod: 0s, syncPeriod: 30s}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  cat >"$dir/Corefile" <<EOF
# CoreDNS for the test node: cluster.local from the API server, nothing else (no forward).
.:53 {
  bind $bridge_ip
  ready 127.0.0.1:8181
  errors
  loadbalance
  cache 5
  kubernetes $cluster_domain in-addr.arpa ip6.arpa {
    kubeconfig $kubeconfig
    pods insecure
    ttl 5
  }
}
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
  [[ -x "$bin" && -x "$coredns" ]] || die "$bin or $coredns missing: run tests/apiserver/ctl.sh build"
  [[ -f "$kubeconfig" ]] || die "no control plane in $state (ctl.sh start --node)"
  command -v containerd >/dev/null && command -v runc >/dev/null && [[ -x "$cni_bin/bridge" ]] \
    && command -v iptables-restore >/dev/null \
    || die "containerd, runc, the CNI plugins or iptables missing: run $0 setup"
  if [[ -d "/sys/fs/cgroup/pids/$cgroup" ]] || ip link show "$bridge" >/dev/null 2>&1; then
    die "a node already runs on this machine (bridge $bridge or cgroup /$cgroup exists); stop it with its ctl.sh stop"
  fi
  local start
  start=$(now_ms)
  rm -rf "$dir"
  write_configs
  ip link add "$bridge" type bridge
  ip addr add "$bridge_ip/24" dev "$bridge"
  # br_netfilter for this bridge (also the host's default here): its frames pass iptables, so a
  # reply from a pod that kube-proxy DNATed to is un-NATed by conntrack on its way back.
  ip link set "$bridge" type bridge nf_call_iptables 1
  ip link set "$bridge" up
  # Before kube-proxy: a ClusterIP packet that no rule rewrote is dropped here, never routed off
  # the machine (the host's default route).
  ip route replace blackhole "$service_cidr"
  add_guard
  # A packet DNATed to a pod is routed back out the bridge: forwarding for what comes in on the
  # bridge only (the guard keeps it there), never the host's ip_forward.
  sysctl -qw "net.ipv4.conf.$bridge.forwarding=1"
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
  launch kube-proxy "$bin" kube-proxy --config="$dir/kube-proxy.yaml"
  launch coredns "$coredns" -conf "$dir/Corefile"
  add_refusal

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
  local pod_running=$(($(now_ms) - start))
  wait_for "$ready_timeout" "kube-proxy synced (127.0.0.1:10256/healthz)" \
    curl -fsS --max-time 2 http://127.0.0.1:10256/healthz
  wait_for "$ready_timeout" "CoreDNS ready (127.0.0.1:8181/ready)" curl -fsS --max-time 2 http://127.0.0.1:8181/ready
  echo "node $node_name ready in $(($(now_ms) - start)) ms (static pod running at $pod_running ms, then kube-proxy and CoreDNS; state $dir)" >&2
}

# add_refusal: RULEOP-NODE-REFUSE in nat (PREROUTING, after kube-proxy's KUBE-SERVICES, which it
# keeps first) sends a pod's packet for the Service CIDR that no Service rule DNATed to the bridge
# address, and RULEOP-NODE-REFUSE in filter (INPUT, first) refuses it there before any socket
# sees it: ICMP port unreachable from the ClusterIP (conntrack un-NATs the reply).
add_refusal() {
  remove_refusal
  iptables -w -t nat -N "$refuse_chain"
  iptables -w -t nat -A "$refuse_chain" -i "$bridge" -d "$service_cidr" -j DNAT --to-destination "$bridge_ip"
  iptables -w -t nat -A PREROUTING -j "$refuse_chain"
  iptables -w -t filter -N "$refuse_chain"
  # Not a TCP reset: for a frame from a bridge port, REJECT sends the reset straight out of that
  # port, past conntrack, so it would come from the bridge address, not the ClusterIP, and the
  # pod would ignore it. The ICMP error goes through conntrack and reads as refused (ECONNREFUSED).
  iptables -w -t filter -A "$refuse_chain" -m conntrack --ctstate DNAT --ctorigdst "$service_cidr" \
    -j REJECT --reject-with icmp-port-unreachable
  iptables -w -t filter -I INPUT 1 -i "$bridge" -j "$refuse_chain"
}

# add_guard: RULEOP-NODE-GUARD (mangle FORWARD, which runs before filter, where kube-proxy's
# ACCEPT rules are) drops every packet that came in on the bridge and would be routed out of
# another interface: with forwarding on for the bridge, a pod that gave itself a default route
# would otherwise reach the host's.
add_guard() {
  remove_guard
  iptables -w -t mangle -N "$guard_chain"
  iptables -w -t mangle -A "$guard_chain" -i "$bridge" ! -o "$bridge" -j DROP
  iptables -w -t mangle -I FORWARD 1 -j "$guard_chain"
}

remove_guard() {
  while iptables -w -t mangle -D FORWARD -j "$guard_chain" 2>/dev/null; do :; done
  iptables -w -t mangle -F "$guard_chain" 2>/dev/null || true
  iptables -w -t mangle -X "$guard_chain" 2>/dev/null || true
}

# remove_routing: kube-proxy's rules (its own --cleanup), RULEOP-NODE-REFUSE, the blackhole route
# and, last (the bridge, and with it its forwarding, is gone by now), RULEOP-NODE-GUARD.
remove_routing() {
  if command -v iptables >/dev/null; then
    if [[ -x "$bin" ]]; then
      "$bin" kube-proxy --cleanup >"$dir/kube-proxy-cleanup.log" 2>&1 \
        || echo "node.sh: kube-proxy --cleanup failed (log: $state/node-logs/kube-proxy-cleanup.log)" >&2
    fi
    remove_refusal
    remove_kubelet_chains
  fi
  ip route del blackhole "$service_cidr" 2>/dev/null || true
  if command -v iptables >/dev/null; then remove_guard; fi
}

# remove_kubelet_chains: what a kubelet that manages iptables leaves in both families (KUBE-FIREWALL,
# KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT); this one is told not to (makeIPTablesUtilChains), so
# this is for an earlier node's.
remove_kubelet_chains() {
  local cmd table hook
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for hook in INPUT OUTPUT; do
      while "$cmd" -w -D "$hook" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    "$cmd" -w -F KUBE-FIREWALL 2>/dev/null || true
    "$cmd" -w -X KUBE-FIREWALL 2>/dev/null || true
    for table in filter nat mangle; do
      "$cmd" -w -t "$table" -X KUBE-KUBELET-CANARY 2>/dev/null || true
    done
    "$cmd" -w -t mangle -X KUBE-IPTABLES-HINT 2>/dev/null || true
  done
}

remove_refusal() {
  while iptables -w -t nat -D PREROUTING -j "$refuse_chain" 2>/dev/null; do :; done
  while iptables -w -t filter -D INPUT -i "$bridge" -j "$refuse_chain" 2>/dev/null; do :; done
  local table
  for table in nat filter; do
    iptables -w -t "$table" -F "$refuse_chain" 2>/dev/null || true
    iptables -w -t "$table" -X "$refuse_chain" 2>/dev/null || true
  done
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
    # A pod's cgroup may vanish while find walks the tree (the kubelet removing a deleted pod's):
    # find then fails, and with pipefail and set -e that ended stop half-way, silently.
    pids="$({ find "$top" -name cgroup.procs -exec cat {} + 2>/dev/null || true; } | sort -u)"
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
  stop_pids kubelet kube-scheduler kube-controller-manager kube-proxy coredns
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
  remove_routing
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
