package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/klog/v2"
)

const (
	etcdStartAttempts = 3
	etcdReadyTimeout  = 60 * time.Second
	etcdQuotaBytes    = 8 << 30
)

// etcdServer is a single-member embedded etcd on loopback ports.
type etcdServer struct {
	etcd      *embed.Etcd
	clientURL string
	peerURL   string
	logLevel  zap.AtomicLevel
}

// startEtcd starts etcd with its data in dir. With clientURL and peerURL from
// a previous run of the same data dir it binds those again (a restarted
// member keeps its URLs; the old process may need a moment to release them).
// Otherwise free ports are picked just before etcd binds them, so a lost race
// is retried with new ports.
func startEtcd(dir, clientURL, peerURL string) (*etcdServer, error) {
	_, statErr := os.Stat(dir)
	fresh := os.IsNotExist(statErr)
	var lastErr error
	for attempt := 1; attempt <= etcdStartAttempts; attempt++ {
		client, peer, err := etcdURLs(clientURL, peerURL)
		if err != nil {
			return nil, err
		}
		server, err := startEtcdOnce(dir, client, peer)
		if err == nil {
			return server, nil
		}
		lastErr = err
		if fresh {
			// A half-initialised member would remember the old peer URL.
			os.RemoveAll(dir)
		}
		klog.InfoS("etcd start failed, retrying", "attempt", attempt, "err", err)
		if clientURL != "" {
			time.Sleep(time.Second)
		}
	}
	return nil, lastErr
}

// etcdURLs parses the saved URLs, or picks two free loopback ports.
func etcdURLs(clientURL, peerURL string) (*url.URL, *url.URL, error) {
	if clientURL != "" && peerURL != "" {
		client, err := url.Parse(clientURL)
		if err != nil {
			return nil, nil, err
		}
		peer, err := url.Parse(peerURL)
		return client, peer, err
	}
	client, err := freeLoopbackURL()
	if err != nil {
		return nil, nil, err
	}
	peer, err := freeLoopbackURL()
	return client, peer, err
}

func startEtcdOnce(dir string, clientURL, peerURL *url.URL) (*etcdServer, error) {

	cfg := embed.NewConfig()
	cfg.Name = "ruleop-test"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	// etcd refuses writes once its database reaches the quota (2 GiB by
	// default, "mvcc: database space exceeded"); the benchmark's N=100,000
	// round writes more than that between compactions.
	cfg.QuotaBackendBytes = etcdQuotaBytes
	logger, level, err := newEtcdLogger()
	if err != nil {
		return nil, err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return &etcdServer{etcd: e, clientURL: clientURL.String(), peerURL: peerURL.String(), logLevel: level}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(etcdReadyTimeout):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after %s", etcdReadyTimeout)
	}
}

// close stops etcd and waits for it to release its listeners and data.
// Closing makes etcd log every listener it shuts as an error, so errors are
// muted first.
func (s *etcdServer) close() {
	s.logLevel.SetLevel(zap.FatalLevel)
	s.etcd.Close()
}

// newEtcdLogger logs errors only, as JSON lines on stderr. The level can be
// raised later to mute shutdown noise.
func newEtcdLogger() (*zap.Logger, zap.AtomicLevel, error) {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	cfg.Sampling = nil
	logger, err := cfg.Build()
	return logger, cfg.Level, err
}

// freeLoopbackURL returns an http URL on 127.0.0.1 with a port that was free
// a moment ago.
func freeLoopbackURL() (*url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "http", Host: addr}, nil
}
