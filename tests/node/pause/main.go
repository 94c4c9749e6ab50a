// Command pause is the pod sandbox's process, built into the node's pause
// image (tests/node/images.sh): it holds the pod's namespaces, reaps the
// zombies a shared PID namespace leaves it, and exits 0 on SIGTERM or SIGINT,
// like registry.k8s.io/pause. Static (CGO_ENABLED=0): the image holds only
// this file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
