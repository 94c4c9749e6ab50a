// Command coredns is the test node's cluster DNS (tests/node/node.sh): CoreDNS
// (github.com/coredns/coredns, pinned in go.mod) built with only the plugins
// the node's Corefile uses. It answers for cluster.local from the API server
// (the kubernetes plugin, which watches Services and EndpointSlices through
// the admin kubeconfig) and for nothing else: there is no forward plugin, so
// a name outside the cluster is refused here and never sent off the machine.
//
// It runs on the host, bound to the node's bridge address (the kubelet's
// clusterDNS), not as a pod: it needs no image, no Service of its own, and no
// route from the host into pods, and it is up before the first pod starts.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, registered by import; the order of execution is the one of
	// Directives below (CoreDNS's plugin.cfg order, restricted to these).
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "errors", "log", "loadbalance", "cache", "kubernetes"}
}

func main() {
	coremain.Run()
}
