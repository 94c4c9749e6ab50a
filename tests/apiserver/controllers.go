package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/volume/pvcprotection"
)

// Settings follow kube-controller-manager's defaults, except the discovery
// resync of the garbage collector, which is the gc-sync-period flag.
const (
	gcWorkers             = 20
	namespaceWorkers      = 10
	pvcProtectionWorkers  = 1
	namespaceSyncPeriod   = 5 * time.Minute
	controllerSyncWait    = 60 * time.Second
	controllerClientQPS   = 100
	controllerClientBurst = 200
)

// controllers runs the garbage-collector, namespace and PVC-protection
// controllers of kube-controller-manager, wired as cmd/kube-controller-manager/app
// does. PVC protection removes the kubernetes.io/pvc-protection finalizer the
// API server's admission adds to every claim once no pod uses it; without it a
// deleted claim (a Database's backups volume) would hold its namespace forever.
type controllers struct {
	running sync.WaitGroup
}

// startControllers starts both controllers against the apiserver behind
// admin and returns once their caches have synced. They stop when ctx is
// cancelled.
func startControllers(ctx context.Context, admin *rest.Config, gcSyncPeriod time.Duration) (*controllers, error) {
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst = controllerClientQPS, controllerClientBurst

	client, err := kubernetes.NewForConfig(withAgent(cfg, "shared-informers"))
	if err != nil {
		return nil, err
	}
	metadataClient, err := metadata.NewForConfig(withAgent(cfg, "metadata-informers"))
	if err != nil {
		return nil, err
	}
	sharedInformers := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimManagedFields))
	metadataInformers := metadatainformer.NewSharedInformerFactoryWithOptions(metadataClient, 0, metadatainformer.WithTransform(trimManagedFields))
	informersStarted := make(chan struct{})

	gc, gcDiscovery, err := newGarbageCollector(ctx, cfg, informerfactory.NewInformerFactory(sharedInformers, metadataInformers), informersStarted)
	if err != nil {
		return nil, fmt.Errorf("garbage collector: %w", err)
	}
	ns, err := newNamespaceController(ctx, cfg, sharedInformers)
	if err != nil {
		return nil, fmt.Errorf("namespace controller: %w", err)
	}

	pvcCfg := withAgent(cfg, "pvc-protection-controller")
	pvcClient, err := kubernetes.NewForConfig(pvcCfg)
	if err != nil {
		return nil, err
	}
	pvc, err := pvcprotection.NewPVCProtectionController(klog.FromContext(ctx),
		sharedInformers.Core().V1().PersistentVolumeClaims(), sharedInformers.Core().V1().Pods(), pvcClient)
	if err != nil {
		return nil, fmt.Errorf("pvc protection controller: %w", err)
	}

	sharedInformers.Start(ctx.Done())
	metadataInformers.Start(ctx.Done())
	close(informersStarted)

	c := &controllers{}
	c.running.Go(func() { gc.Run(ctx, gcWorkers, gcSyncPeriod) })
	c.running.Go(func() { gc.Sync(ctx, gcDiscovery, gcSyncPeriod) })
	c.running.Go(func() { ns.Run(ctx, namespaceWorkers) })
	c.running.Go(func() { pvc.Run(ctx, pvcProtectionWorkers) })
	c.running.Go(func() {
		<-ctx.Done()
		sharedInformers.Shutdown()
		metadataInformers.Shutdown()
	})

	if err := waitControllersSynced(ctx, gc, sharedInformers); err != nil {
		return c, err
	}
	return c, nil
}

// newGarbageCollector builds the collector over a deferred discovery
// RESTMapper, and returns a separate discovery client for gc.Sync (sharing
// one would make Sync reset the mapper's cache needlessly).
func newGarbageCollector(ctx context.Context, cfg *rest.Config, factory informerfactory.InformerFactory, informersStarted <-chan struct{}) (*garbagecollector.GarbageCollector, discovery.DiscoveryInterface, error) {
	gcCfg := withAgent(cfg, "generic-garbage-collector")
	gcCfg.QPS *= 2 // each deletion takes two calls, as in kube-controller-manager
	client, err := kubernetes.NewForConfig(gcCfg)
	if err != nil {
		return nil, nil, err
	}
	metadataClient, err := metadata.NewForConfig(gcCfg)
	if err != nil {
		return nil, nil, err
	}
	mapperDiscovery, err := discovery.NewDiscoveryClientForConfig(withAgent(cfg, "controller-discovery"))
	if err != nil {
		return nil, nil, err
	}
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(mapperDiscovery))
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, metadataClient, restMapper,
		garbagecollector.DefaultIgnoredResources(), factory, informersStarted)
	if err != nil {
		return nil, nil, err
	}
	return gc, client.Discovery(), nil
}

// newNamespaceController builds the controller that empties and finalizes
// namespaces being deleted. Like kube-controller-manager it gets a client
// with a much higher rate limit because it is very chatty.
func newNamespaceController(ctx context.Context, cfg *rest.Config, sharedInformers informers.SharedInformerFactory) (*namespacecontroller.NamespaceController, error) {
	nsCfg := withAgent(cfg, "namespace-controller")
	nsCfg.QPS *= 20
	nsCfg.Burst *= 100
	client, err := kubernetes.NewForConfig(nsCfg)
	if err != nil {
		return nil, err
	}
	metadataClient, err := metadata.NewForConfig(nsCfg)
	if err != nil {
		return nil, err
	}
	return namespacecontroller.NewNamespaceController(ctx, client, metadataClient,
		client.Discovery().ServerPreferredNamespacedResources,
		sharedInformers.Core().V1().Namespaces(), namespaceSyncPeriod, v1.FinalizerKubernetes), nil
}

// waitControllersSynced waits until the namespace informer has synced and
// the garbage collector monitors every resource discovery reported, so that
// tests see cascading deletion from the first object they create.
func waitControllersSynced(ctx context.Context, gc *garbagecollector.GarbageCollector, sharedInformers informers.SharedInformerFactory) error {
	logger := klog.FromContext(ctx)
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, controllerSyncWait, true, func(ctx context.Context) (bool, error) {
		for _, synced := range sharedInformers.WaitForCacheSync(ctx.Done()) {
			if !synced {
				return false, nil
			}
		}
		return gc.IsSynced(logger), nil
	})
}

// wait blocks until the controllers have returned or timeout passes.
func (c *controllers) wait(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		c.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		klog.Errorf("controllers did not stop within %s", timeout)
	}
}

// withAgent copies cfg with a user agent naming the controller, as the
// controller-manager's client builder does.
func withAgent(cfg *rest.Config, name string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.UserAgent = rest.DefaultKubernetesUserAgent() + "/" + name
	return c
}

// trimManagedFields drops managedFields from cached objects, like
// kube-controller-manager's informer transform.
func trimManagedFields(obj interface{}) (interface{}, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
