package clustertree

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCopyBudget(t *testing.T) {
	b := newCopyBudget(100)
	b.count(kindConfigMap, []metav1.Object{
		&metav1.ObjectMeta{Name: "counted", Annotations: map[string]string{annotationCopyBytes: "30"}},
		&metav1.ObjectMeta{Name: "earlier-release"}, // no annotation: counted when written again
		&metav1.ObjectMeta{Name: "garbled", Annotations: map[string]string{annotationCopyBytes: "-5"}},
	})
	if b.total != 30 {
		t.Fatalf("counted %d bytes, want 30", b.total)
	}
	if _, err := b.reserve(kindSecret, "a", 60); err != nil {
		t.Fatalf("60 more of 100, 30 held: %v", err)
	}
	_, err := b.reserve(kindSecret, "b", 20)
	var over *copyBudgetError
	if !errors.As(err, &over) || over.total != 110 || !strings.Contains(err.Error(), "--shared-node-copy-bytes") {
		t.Fatalf("20 more with 90 held: %v, want a budget error at 110 naming the flag", err)
	}
	if b.total != 90 {
		t.Errorf("a refused reservation counted: %d", b.total)
	}
	// A copy that shrinks or keeps its size always fits, even past the budget.
	if _, err := b.reserve(kindSecret, "a", 50); err != nil {
		t.Errorf("a copy shrinking: %v", err)
	}
	undo, err := b.reserve(kindSecret, "b", 20)
	if err != nil {
		t.Fatal(err)
	}
	undo() // its write failed
	if b.total != 80 {
		t.Errorf("after undo %d, want 80", b.total)
	}
	b.release(kindConfigMap, "counted")
	b.release(kindConfigMap, "never-counted")
	if b.total != 50 {
		t.Errorf("after release %d, want 50", b.total)
	}
	// A kind of its own: a Secret and a ConfigMap of one name are two copies.
	if _, err := b.reserve(kindConfigMap, "a", 50); err != nil || b.total != 100 {
		t.Errorf("ConfigMap a beside Secret a: %v, total %d", err, b.total)
	}
	if _, err := newCopyBudget(0).reserve(kindConfigMap, "huge", 1<<40); err != nil {
		t.Errorf("no budget: %v", err)
	}
}

func TestDataBytes(t *testing.T) {
	if n := dataBytes(map[string]string{"ab": "cde"}) + dataBytes(map[string][]byte{"f": []byte("gh")}); n != 8 {
		t.Errorf("dataBytes = %d, want 8", n)
	}
}
