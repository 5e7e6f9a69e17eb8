package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Steps of a VirtualCluster's way to Ready, in the order they normally happen. Conditions are
// the VirtualCluster's own; the pod steps are those of its etcd pod and control-plane pod in the
// host, which say where the time between two conditions goes.
const (
	stepCertificates     = "CertificatesReady"
	stepEtcdScheduled    = "etcd pod scheduled"
	stepEtcdRunning      = "etcd container running"
	stepEtcdPodReady     = "etcd pod Ready"
	stepEtcdReady        = "EtcdReady"
	stepCPScheduled      = "control-plane pod scheduled"
	stepCPRunning        = "control-plane containers running"
	stepCPPodReady       = "control-plane pod Ready"
	stepAPIServerReady   = "APIServerReady"
	stepReady            = "Ready"
	stepFirstKubectlCall = "first kubectl call"
)

var steps = []string{
	stepCertificates, stepEtcdScheduled, stepEtcdRunning, stepEtcdPodReady, stepEtcdReady,
	stepCPScheduled, stepCPRunning, stepCPPodReady, stepAPIServerReady, stepReady, stepFirstKubectlCall,
}

// tracker watches the VirtualClusters of one host namespace and their pods (in the namespace's
// control-plane namespace, or in the namespace itself for a tenant an earlier release made),
// and records when each step was first seen, per VirtualCluster. A watch, not polling: it costs
// the host little, so many tenants can be followed at once without slowing what is measured.
type tracker struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time
	stop context.CancelFunc
}

func newTracker(ctx context.Context, e *env, ns string) (*tracker, error) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	// The control-plane namespace is watched before the operator makes it: a watch of a
	// namespace does not need it to exist.
	c, err := cache.New(e.cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}, naming.ControlPlaneNamespace(ns): {}}})
	if err != nil {
		return nil, err
	}
	t := &tracker{seen: map[string]map[string]time.Time{}}
	for _, obj := range []client.Object{&v1alpha1.VirtualCluster{}, &corev1.Pod{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    t.observe,
			UpdateFunc: func(_, o any) { t.observe(o) },
		}); err != nil {
			return nil, err
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	t.stop = cancel
	go func() { _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(cctx) {
		cancel()
		return nil, fmt.Errorf("watching %s did not start", ns)
	}
	return t, nil
}

func (t *tracker) observe(obj any) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch o := obj.(type) {
	case *v1alpha1.VirtualCluster:
		for _, c := range []string{stepCertificates, stepEtcdReady, stepAPIServerReady, stepReady} {
			if meta.IsStatusConditionTrue(o.Status.Conditions, c) {
				t.markLocked(o.Name, c, now)
			}
		}
	case *corev1.Pod:
		vc := o.Labels[naming.LabelVirtualCluster]
		var scheduled, running, ready string
		switch o.Labels[naming.LabelComponent] {
		case naming.ComponentEtcd:
			scheduled, running, ready = stepEtcdScheduled, stepEtcdRunning, stepEtcdPodReady
		case naming.ComponentControlPlane:
			scheduled, running, ready = stepCPScheduled, stepCPRunning, stepCPPodReady
		default:
			return
		}
		if vc == "" {
			return
		}
		if o.Spec.NodeName != "" {
			t.markLocked(vc, scheduled, now)
		}
		if allRunning(o) {
			t.markLocked(vc, running, now)
		}
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				t.markLocked(vc, ready, now)
			}
		}
	}
}

func allRunning(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running == nil {
			return false
		}
	}
	return true
}

func (t *tracker) mark(vc, step string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.markLocked(vc, step, at)
}

func (t *tracker) markLocked(vc, step string, at time.Time) {
	m := t.seen[vc]
	if m == nil {
		m = map[string]time.Time{}
		t.seen[vc] = m
	}
	if _, ok := m[step]; !ok {
		m[step] = at
	}
}

// since returns, for one VirtualCluster, each step's time from start.
func (t *tracker) since(vc string, start time.Time) map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Duration{}
	for s, at := range t.seen[vc] {
		out[s] = at.Sub(start)
	}
	return out
}

func (t *tracker) has(vc, step string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.seen[vc][step]
	return ok
}

// forget drops what was seen of a VirtualCluster, so its name can be used again.
func (t *tracker) forget(vc string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.seen, vc)
}

func (t *tracker) close() { t.stop() }
