package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as the real binaries register them
	_ "k8s.io/component-base/metrics/prometheus/version"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// components are the node's Kubernetes programs, linked into this binary so
// they share the apiserver's module graph and build cache (one link instead
// of three). `apiserver <name> FLAGS...` runs the real command of that name,
// exactly as its own main package would (see k8s.io/kubernetes/cmd/<name>).
var components = map[string]func() *cobra.Command{
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-proxy":              proxy.NewProxyCommand,
}

// runComponent runs the component named by os.Args[1] and exits, or returns
// when os.Args[1] names none (then this is the control plane).
func runComponent() {
	if len(os.Args) < 2 {
		return
	}
	newCommand, ok := components[os.Args[1]]
	if !ok {
		return
	}
	command := newCommand()
	command.SetArgs(os.Args[2:])
	os.Exit(cli.Run(command))
}
