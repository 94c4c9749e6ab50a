package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

const (
	// defaultServiceCIDR is the Service ClusterIP range; tests/node/node.sh
	// routes and blackholes exactly this range, so a plane with a node keeps it.
	defaultServiceCIDR    = "10.0.0.0/16"
	serviceAccountIssuer  = "https://kubernetes.default.svc.cluster.local"
	apiserverReadyTimeout = 90 * time.Second
	// listenRetry is how long a restart waits for its old port to be free
	// (the previous process may still be closing it).
	listenRetry = 10 * time.Second
	// watchTerminationGrace makes shutdown end open watches instead of
	// waiting for them: without it the HTTP server waits for every watch
	// until --request-timeout (60 s), and a client that watches keeps the
	// process alive that long.
	watchTerminationGrace = "1s"
)

// auditPolicy records who wrote what (user agent, verb, object, response
// code), never bodies, and only for writes: tests count the write requests of
// one client (ruleop's user agent) without the cluster's own controllers'.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// apiServer is a kube-apiserver running in this process.
type apiServer struct {
	url  string
	port int
	done chan error // receives Run's result, then is closed
}

// startAPIServer runs kube-apiserver the way its cobra command does (see
// k8s.io/kubernetes/cmd/kube-apiserver/app.NewAPIServerCommand and
// app/testing.StartTestServer) and waits until /readyz is ok. It stops when
// ctx is cancelled. port 0 picks a free port; another port is bound again
// (a restart with the same data dir). node admits Pods as a cluster with
// nodes does (see apiserverArgs); flags.serviceCIDR is the Service ClusterIP
// range. Every write request is audited to auditLog (see auditPolicy).
func startAPIServer(ctx context.Context, creds *credentials, etcdURL string, port int, flags cliFlags, auditLog string) (*apiServer, error) {
	policyFile := filepath.Join(creds.dir, "audit-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	listener, err := listenLoopback(port)
	if err != nil {
		return nil, err
	}
	port = listener.Addr().(*net.TCPAddr).Port

	args := apiserverArgs(creds, etcdURL, port, flags)
	args = append(args, "--audit-policy-file="+policyFile, "--audit-log-path="+auditLog,
		"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=200", "--audit-log-maxbackup=1")
	opts, err := apiserverOptions(args)
	if err != nil {
		listener.Close()
		return nil, err
	}
	opts.SecureServing.Listener = listener

	server, err := buildServerChain(ctx, opts)
	if err != nil {
		listener.Close()
		return nil, err
	}

	s := &apiServer{url: fmt.Sprintf("https://127.0.0.1:%d", port), port: port, done: make(chan error, 1)}
	go func() {
		defer close(s.done)
		s.done <- server(ctx)
	}()
	if err := s.waitReady(ctx, adminRESTConfig(s.url, creds)); err != nil {
		return s, err
	}
	return s, nil
}

// listenLoopback listens on 127.0.0.1:port, retrying a busy fixed port for
// listenRetry.
func listenLoopback(port int) (net.Listener, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(listenRetry)
	for {
		listener, err := net.Listen("tcp", addr)
		if err == nil || port == 0 || time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("port %d of the previous run: %w", port, err)
			}
			return listener, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apiserverArgs are the kube-apiserver command-line flags of the test plane.
// Without a node the ServiceAccount admission plugin is off: no controller
// creates the default ServiceAccounts it requires of every Pod. With a node
// (--node) it is on, so Pods get their projected service-account token and
// in-cluster config works.
func apiserverArgs(creds *credentials, etcdURL string, port int, flags cliFlags) []string {
	disabledAdmission := "ServiceAccount"
	if flags.node {
		disabledAdmission = ""
	}
	return []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + creds.servingCert,
		"--tls-private-key-file=" + creds.servingKey,
		"--cert-dir=" + creds.dir,
		"--etcd-servers=" + etcdURL,
		"--token-auth-file=" + creds.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + creds.serviceAccount,
		"--service-account-signing-key-file=" + creds.serviceAccount,
		"--disable-admission-plugins=" + disabledAdmission,
		"--service-cluster-ip-range=" + flags.serviceCIDR,
		"--endpoint-reconciler-type=none",
		"--shutdown-watch-termination-grace-period=" + watchTerminationGrace,
		// The node's name resolves nowhere: reach its kubelet (logs, exec)
		// at its address on this machine, never through DNS.
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// apiserverOptions parses args (apiserverArgs) into kube-apiserver's own
// options, as the real binary would.
func apiserverOptions(args []string) (*options.ServerRunOptions, error) {
	opts := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, set := range opts.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := opts.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	return opts, nil
}

// buildServerChain completes and validates the options and builds the
// aggregator -> kube-apiserver -> apiextensions chain. The returned function
// serves until ctx is cancelled.
func buildServerChain(ctx context.Context, opts *options.ServerRunOptions) (func(context.Context) error, error) {
	completedOptions, err := opts.Complete(ctx)
	if err != nil {
		return nil, err
	}
	if errs := completedOptions.Validate(); len(errs) != 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	config, err := app.NewConfig(completedOptions)
	if err != nil {
		return nil, err
	}
	completed, err := config.Complete()
	if err != nil {
		return nil, err
	}
	chain, err := app.CreateServerChain(completed)
	if err != nil {
		return nil, err
	}
	prepared, err := chain.PrepareRun()
	if err != nil {
		return nil, err
	}
	return prepared.Run, nil
}

// waitReady polls /readyz, then waits for the default namespace, like
// StartTestServer does.
func (s *apiServer) waitReady(ctx context.Context, cfg *rest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, apiserverReadyTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-s.done:
			return false, fmt.Errorf("stopped while starting: %v", err)
		default:
		}
		status := 0
		client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status != http.StatusOK {
			return false, nil
		}
		_, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// wait blocks until the apiserver has stopped or timeout passes.
func (s *apiServer) wait(timeout time.Duration) {
	select {
	case err := <-s.done:
		if err != nil {
			klog.ErrorS(err, "kube-apiserver stopped with an error")
		}
	case <-time.After(timeout):
		klog.Errorf("kube-apiserver did not stop within %s", timeout)
	}
}
