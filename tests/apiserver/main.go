// Command apiserver owns the operator's test control plane: in one process it
// runs an embedded etcd, a real kube-apiserver (k8s.io/kubernetes v1.35.4)
// and the garbage-collector and namespace controllers of
// kube-controller-manager. Once everything is serving it writes an admin
// kubeconfig and prints exactly one line to stdout:
//
//	READY kubeconfig=<abs path>
//
// SIGTERM or SIGINT stops the controllers, the apiserver (ending open watches
// instead of waiting for them) and etcd, and removes the temporary directory.
// With --data-dir nothing is removed, and a restart with the same directory
// serves the same etcd data on the same port with the same CA, serving
// certificate, admin token and service-account key, so kubeconfigs and
// ServiceAccount tokens from before the restart keep working. Logs go to
// stderr only. Every write request is audited (user agent, verb, object,
// code) to audit-writes.log beside the kubeconfig.
//
// The same binary is also the node's kubelet, kube-scheduler and
// kube-controller-manager (`apiserver kubelet FLAGS...`, see components.go),
// which tests/node/node.sh starts for `ctl.sh start --node`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// shutdownTimeout bounds how long each component may take to stop. Open
// watches are ended at shutdown (see watchTerminationGrace), so a stop takes
// a few seconds; this only guards against a wedged component.
const shutdownTimeout = 15 * time.Second

type cliFlags struct {
	kubeconfigOut string
	dataDir       string
	verbosity     int
	gcSyncPeriod  time.Duration
	stdinWatch    bool
	node          bool
	serviceCIDR   string
}

func main() {
	runComponent()
	flags := parseFlags()
	configureLogging(flags.verbosity)
	if err := run(flags); err != nil {
		fmt.Fprintf(os.Stderr, "apiserver: %v\n", err)
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func parseFlags() cliFlags {
	var f cliFlags
	flag.StringVar(&f.kubeconfigOut, "kubeconfig-out", "", "where to write the admin kubeconfig (default <data-dir>/kubeconfig)")
	flag.StringVar(&f.dataDir, "data-dir", "", "directory for etcd data, certificates and keys (default: a fresh temp dir, removed on exit)")
	flag.IntVar(&f.verbosity, "v", -1, "log verbosity: -1 logs errors only; 0 and up also logs klog info at that level")
	flag.DurationVar(&f.gcSyncPeriod, "gc-sync-period", 2*time.Second, "how often the garbage collector re-reads discovery (picks up new CRDs)")
	flag.BoolVar(&f.stdinWatch, "exit-with-stdin", false, "shut down when stdin reaches EOF (the parent that piped it has exited)")
	flag.BoolVar(&f.node, "node", false, "serve a node (tests/node): admit Pods with their service-account tokens")
	flag.StringVar(&f.serviceCIDR, "service-cidr", defaultServiceCIDR, "the Service ClusterIP range (at most a /12); with --node only the default, the range tests/node routes and blackholes")
	flag.Parse()
	return f
}

// configureLogging keeps klog quiet by default: only errors reach stderr and
// nothing is written to log files.
func configureLogging(verbosity int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	settings := map[string]string{"logtostderr": "true", "v": fmt.Sprint(verbosity)}
	if verbosity < 0 {
		settings = map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "ERROR", "v": "0"}
		klog.SetOutput(discard{})
	}
	for name, value := range settings {
		if err := fs.Set(name, value); err != nil {
			fmt.Fprintf(os.Stderr, "apiserver: klog flag %s: %v\n", name, err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func run(flags cliFlags) error {
	if flags.node && flags.serviceCIDR != defaultServiceCIDR {
		return fmt.Errorf("--service-cidr %s with --node: the node routes and blackholes only %s", flags.serviceCIDR, defaultServiceCIDR)
	}
	dir, cleanupDir, err := prepareDataDir(flags.dataDir)
	if err != nil {
		return err
	}
	defer cleanupDir()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if flags.stdinWatch {
		ctx = cancelOnStdinEOF(ctx)
	}

	plane, err := startControlPlane(ctx, dir, flags)
	if err != nil {
		return err
	}
	defer plane.shutdown()

	<-ctx.Done()
	stop() // a second signal now kills the process the default way
	klog.Info("Signal received, shutting down")
	return nil
}

// cancelOnStdinEOF returns a context cancelled once stdin is closed, so a test
// harness that dies without signalling us still gets a clean shutdown.
func cancelOnStdinEOF(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return ctx
}

// prepareDataDir returns the working directory and a function that removes it
// when it was created here.
func prepareDataDir(requested string) (string, func(), error) {
	if requested != "" {
		abs, err := filepath.Abs(requested)
		if err != nil {
			return "", nil, err
		}
		return abs, func() {}, os.MkdirAll(abs, 0o700)
	}
	dir, err := os.MkdirTemp("", "ruleop-apiserver-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// controlPlane holds the running components in start order.
type controlPlane struct {
	cancel      context.CancelFunc
	etcd        *etcdServer
	apiserver   *apiServer
	controllers *controllers
}

func startControlPlane(parent context.Context, dir string, flags cliFlags) (plane *controlPlane, err error) {
	ctx, cancel := context.WithCancel(parent)
	plane = &controlPlane{cancel: cancel}
	defer func() {
		if err != nil {
			plane.shutdown()
		}
	}()
	start := time.Now()

	endpointsFile := filepath.Join(dir, "endpoints.json")
	saved, err := loadEndpoints(endpointsFile)
	if err != nil {
		return plane, fmt.Errorf("%s: %w", endpointsFile, err)
	}
	if plane.etcd, err = startEtcd(filepath.Join(dir, "etcd"), saved.EtcdClientURL, saved.EtcdPeerURL); err != nil {
		return plane, fmt.Errorf("etcd: %w", err)
	}
	creds, reused, err := loadOrGenerateCredentials(filepath.Join(dir, "pki"))
	if err != nil {
		return plane, fmt.Errorf("credentials: %w", err)
	}
	out := flags.kubeconfigOut
	if out == "" {
		out = filepath.Join(dir, "kubeconfig")
	}
	// Beside the kubeconfig, where a test that knows only the kubeconfig finds it.
	auditLog := filepath.Join(filepath.Dir(out), "audit-writes.log")
	if plane.apiserver, err = startAPIServer(ctx, creds, plane.etcd.clientURL, saved.APIServerPort, flags, auditLog); err != nil {
		return plane, fmt.Errorf("kube-apiserver: %w", err)
	}
	current := endpoints{APIServerPort: plane.apiserver.port, EtcdClientURL: plane.etcd.clientURL, EtcdPeerURL: plane.etcd.peerURL}
	if err := current.save(endpointsFile); err != nil {
		return plane, fmt.Errorf("%s: %w", endpointsFile, err)
	}
	admin := adminRESTConfig(plane.apiserver.url, creds)
	if plane.controllers, err = startControllers(ctx, admin, flags.gcSyncPeriod); err != nil {
		return plane, fmt.Errorf("controllers: %w", err)
	}

	if out, err = writeKubeconfig(out, plane.apiserver.url, creds); err != nil {
		return plane, fmt.Errorf("kubeconfig: %w", err)
	}
	klog.InfoS("Control plane ready", "url", plane.apiserver.url, "reusedCredentials", reused, "elapsed", time.Since(start))
	// os.Stdout is unbuffered: the line is out once Fprintf returns.
	_, err = fmt.Fprintf(os.Stdout, "READY kubeconfig=%s\n", out)
	return plane, err
}

// shutdown stops the components in reverse start order.
func (p *controlPlane) shutdown() {
	p.cancel()
	if p.controllers != nil {
		p.controllers.wait(shutdownTimeout)
	}
	if p.apiserver != nil {
		p.apiserver.wait(shutdownTimeout)
	}
	if p.etcd != nil {
		p.etcd.close()
	}
}
