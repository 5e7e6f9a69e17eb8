package clustertree

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Manager runs the virtual nodes of every tenant that wants one, each in its own goroutine
// with its own queues and informers, so that a busy tenant does not hold up the others.
type Manager struct {
	base context.Context

	mu    sync.Mutex
	nodes map[string]*runningNode
}

type runningNode struct {
	fingerprint string
	renewAt     time.Time
	cancel      context.CancelFunc
	done        chan struct{}
	err         error
}

// NewManager returns a Manager whose virtual nodes run until ctx ends or they are stopped.
func NewManager(ctx context.Context) *Manager {
	return &Manager{base: ctx, nodes: map[string]*runningNode{}}
}

// Build makes a virtual node's configuration, issuing its certificates; renewAt is when they
// are due for renewal, after which the node is restarted with new ones.
type Build func() (cfg Config, renewAt time.Time, err error)

// Ensure runs the virtual node key with the configuration build makes. A node already running
// with the same fingerprint is left alone unless it stopped or its certificates are due; a
// different fingerprint restarts it.
func (m *Manager) Ensure(key, fingerprint string, build Build) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.nodes[key]; ok {
		if n.fingerprint == fingerprint && !exited(n) && time.Now().Before(n.renewAt) {
			return nil
		}
		m.stopLocked(key)
	}
	cfg, renewAt, err := build()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(m.base)
	n := &runningNode{fingerprint: fingerprint, renewAt: renewAt, cancel: cancel, done: make(chan struct{})}
	m.nodes[key] = n
	go func() {
		defer close(n.done)
		n.err = Run(ctx, cfg)
		if n.err != nil {
			klog.FromContext(ctx).Error(n.err, "virtual node stopped", "key", key)
		}
	}()
	return nil
}

// Stop stops the virtual node key, if it runs, and waits for it.
func (m *Manager) Stop(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked(key)
}

func (m *Manager) stopLocked(key string) {
	n, ok := m.nodes[key]
	if !ok {
		return
	}
	n.cancel()
	<-n.done
	delete(m.nodes, key)
}

// Status says whether the virtual node key runs, and why it stopped if it did.
func (m *Manager) Status(key string) (running bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.nodes[key]
	if !ok {
		return false, nil
	}
	if exited(n) {
		return false, n.err
	}
	return true, nil
}

func exited(n *runningNode) bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}
