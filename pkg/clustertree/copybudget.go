package clustertree

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A tenant's pods on the shared node refer to its ConfigMaps and Secrets, which are copied
// into the host's etcd: without a bound, a tenant whose pods each mount hundreds of 1 MB
// objects would fill the host's etcd (its quota reached, every write of the host refused).
// So the bytes of a tenant's copies are bounded (Config.CopyBytes), as a kubelet's disk bounds
// what its pods' volumes hold: a pod whose copies would take the tenant past it fails with
// reason ReasonCopyBudget, and a change that would grow a copy past it is not copied (the
// host keeps the copy as it was, as a kubelet that cannot write a volume keeps its files).
// The copies of its Services and EndpointSlices (services.go) count against the same budget,
// by their encoded size: a Service of thousands of ports or slices of thousands of endpoints
// would fill the host's etcd as well. One that does not fit is not copied, and the tenant
// Service gets a ReasonCopyBudget event.

// ReasonCopyBudget: the ConfigMaps and Secrets a pod refers to would take the tenant's host
// copies past Config.CopyBytes.
const ReasonCopyBudget = "OutOfCopyBudget"

// annotationCopyBytes on a host copy records the bytes of its data, counted at start.
const annotationCopyBytes = "kubenest.io/copy-bytes"

// copyBudget counts the bytes of a tenant's host copies, by kind and host name.
type copyBudget struct {
	max   int64 // 0: no limit
	mu    sync.Mutex
	total int64
	sizes map[string]int64
}

func newCopyBudget(max int64) *copyBudget {
	return &copyBudget{max: max, sizes: map[string]int64{}}
}

// copyBudgetError says a copy does not fit.
type copyBudgetError struct {
	kind, name  string // the host copy's, or the tenant object's once known (reserveCopy)
	size, total int64
	max         int64
}

func (e *copyBudgetError) Error() string {
	return fmt.Sprintf("%s %s (%s) would take what the tenant has copied into the host (its ConfigMaps, Secrets, Services and EndpointSlices) to %s, past the platform's %s (--shared-node-copy-bytes)",
		e.kind, e.name, humanBytes(e.size), humanBytes(e.total), humanBytes(e.max))
}

// humanBytes says n in the largest binary unit it holds one of, with a decimal.
func humanBytes(n int64) string {
	f, units := float64(n), []string{"B", "KiB", "MiB", "GiB"}
	i := 0
	for ; f >= 1024 && i < len(units)-1; i++ {
		f /= 1024
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// reserveCopy is reserve for the host copy meta describes, and names the tenant object when it
// does not fit.
func (b *copyBudget) reserveCopy(kind string, meta *metav1.ObjectMeta, size int64) (undo func(), err error) {
	undo, err = b.reserve(kind, meta.Name, size)
	var over *copyBudgetError
	if errors.As(err, &over) {
		over.name = meta.Annotations[AnnotationTenantNamespace] + "/" + meta.Annotations[AnnotationTenantName]
	}
	return undo, err
}

// reserve counts size bytes for the copy kind/name in place of what it held, or says it does
// not fit; undo gives back what it counted.
func (b *copyBudget) reserve(kind, name string, size int64) (undo func(), err error) {
	key := kind + "/" + name
	b.mu.Lock()
	defer b.mu.Unlock()
	was, had := b.sizes[key]
	total := b.total - was + size
	if b.max > 0 && size > was && total > b.max {
		return nil, &copyBudgetError{kind: kind, name: name, size: size, total: total, max: b.max}
	}
	b.sizes[key], b.total = size, total
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.sizes[key] != size {
			return // counted again since
		}
		if had {
			b.sizes[key] = was
		} else {
			delete(b.sizes, key)
		}
		b.total += was - size
	}, nil
}

// release stops counting the copy kind/name (deleted).
func (b *copyBudget) release(kind, name string) {
	key := kind + "/" + name
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= b.sizes[key]
	delete(b.sizes, key)
}

// count counts the host copies as they are, from their annotation (a copy an earlier release
// made has none, and is counted once it is written again), past the limit or not.
func (b *copyBudget) count(kind string, copies []metav1.Object) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range copies {
		if n, err := strconv.ParseInt(o.GetAnnotations()[annotationCopyBytes], 10, 64); err == nil && n > 0 {
			key := kind + "/" + o.GetName()
			b.total += n - b.sizes[key]
			b.sizes[key] = n
		}
	}
}

// hold counts size bytes for the copy kind/name as it is in the host, past the limit or not
// (copies made before the virtual node started, or before the limit was lowered).
func (b *copyBudget) hold(kind, name string, size int64) {
	key := kind + "/" + name
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += size - b.sizes[key]
	b.sizes[key] = size
}

// dataBytes is the size of a copy's data: its keys and values.
func dataBytes[V ~string | ~[]byte](maps ...map[string]V) int64 {
	var n int64
	for _, m := range maps {
		for k, v := range m {
			n += int64(len(k) + len(v))
		}
	}
	return n
}
