package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A ginkgo JSON report, cut down to what summarize reads: a passed spec, a failed one, one
// the spec skipped itself, one the focus did not select, one that passed on its second run
// (--flake-attempts 2), and a suite node.
const report = `[{"SpecReports": [
 {"ContainerHierarchyTexts": ["[sig-a] A"], "LeafNodeType": "It", "LeafNodeText": "passes [Conformance]", "State": "passed", "RunTime": 1000000000},
 {"ContainerHierarchyTexts": ["[sig-a] A", "inner"], "LeafNodeType": "It", "LeafNodeText": "fails [Conformance]", "State": "failed", "RunTime": 61000000000,
  "Failure": {"Message": "timed out waiting\nmore detail", "Location": {"FileName": "/go/test/e2e/a.go", "LineNumber": 42}}},
 {"ContainerHierarchyTexts": ["[sig-a] A"], "LeafNodeType": "It", "LeafNodeText": "needs two nodes [Conformance]", "State": "skipped",
  "Failure": {"Message": "Requires at least 2 nodes (not 1)", "Location": {"FileName": "/go/test/e2e/b.go", "LineNumber": 7}}},
 {"ContainerHierarchyTexts": ["[sig-b] B"], "LeafNodeType": "It", "LeafNodeText": "not selected", "State": "skipped"},
 {"ContainerHierarchyTexts": ["[sig-c] C"], "LeafNodeType": "It", "LeafNodeText": "flakes [Conformance]", "State": "passed", "RunTime": 2000000000, "NumAttempts": 2,
  "AdditionalFailures": [{"State": "failed", "Failure": {"Message": "context deadline exceeded", "Location": {"FileName": "/go/test/e2e/c.go", "LineNumber": 76}}}]},
 {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"}
]}]`

func TestSummarize(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &options{namespace: "conformance", name: "conformance", focus: `\[Conformance\]`, lentNodes: 1, sharedNode: true, sharedPlacement: "Overflow", flakeAttempts: 2}
	got, failed := summarize(o, []part{{name: "parallel", dir: dir, exitCode: 1, duration: time.Minute},
		{name: "serial", dir: filepath.Join(dir, "missing")}}, 2*time.Minute)
	for _, want := range []string{
		"shared node (placement Overflow) + 1 lent node(s), privileged pods granted on lent nodes",
		"parallel part (1m0s): 2 of 3 passed, 1 failed, 1 skipped by the spec itself; ginkgo exit 1",
		"1 of the passed failed a run first (--flake-attempts 2)",
		"[flaky: passed on run 2 of 2] [sig-c] C flakes [Conformance]\n      first run: context deadline exceeded (c.go:76)",
		"[failed after 1m1s] [sig-a] A inner fails [Conformance]\n      timed out waiting (a.go:42)",
		"[skipped] [sig-a] A needs two nodes [Conformance]\n      Requires at least 2 nodes (not 1) (b.go:7)",
		"serial part: no report",
		"total duration (tenant creation included): 2m0s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "not selected") {
		t.Errorf("summary lists a spec the focus did not select:\n%s", got)
	}
	if failed != 2 {
		t.Errorf("failed = %d, want 2 (a spec, and a part without a report)", failed)
	}
}
