package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	fakecri "k8s.io/cri-client/pkg/fake"
)

// The runtime refuses to remove a stopped pod's records (containerd 1.6 with a container whose
// start timed out): the node still moves on if nothing of the pod runs, and never while one of
// its containers may.
func TestRemovePodsStoppedButKept(t *testing.T) {
	refused := errors.New(`failed to remove container "c": cannot delete running task c: failed precondition`)
	sandbox := func(id string) *critesting.FakePodSandbox {
		return &critesting.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
			Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "ns", Name: id},
		}}
	}
	container := func(id, sandbox string, state runtimeapi.ContainerState) *critesting.FakeContainer {
		return &critesting.FakeContainer{SandboxID: sandbox, ContainerStatus: runtimeapi.ContainerStatus{
			Id: id, State: state, Metadata: &runtimeapi.ContainerMetadata{Name: id},
		}}
	}
	for _, tc := range []struct {
		name    string
		state   runtimeapi.ContainerState
		wantErr string
	}{
		{"exited container", runtimeapi.ContainerState_CONTAINER_EXITED, ""},
		{"never started", runtimeapi.ContainerState_CONTAINER_CREATED, ""},
		{"running container", runtimeapi.ContainerState_CONTAINER_RUNNING, "its container wedged is CONTAINER_RUNNING"},
		{"unknown state", runtimeapi.ContainerState_CONTAINER_UNKNOWN, "its container wedged is CONTAINER_UNKNOWN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := critesting.NewFakeRuntimeService()
			rt.SetFakeSandboxes([]*critesting.FakePodSandbox{sandbox("fine"), sandbox("stuck")})
			rt.SetFakeContainers([]*critesting.FakeContainer{container("wedged", "stuck", tc.state)})
			err := RemovePods(context.Background(), &refuseOne{FakeRuntimeService: rt, id: "stuck", err: refused})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("RemovePods: %v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "ns/stuck") {
				t.Fatalf("RemovePods: %v, want an error naming ns/stuck and %q", err, tc.wantErr)
			}
			if got := rt.Sandboxes["stuck"].State; got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Errorf("the stuck sandbox is %s, want it stopped", got)
			}
			if _, ok := rt.Sandboxes["fine"]; tc.wantErr == "" && ok {
				t.Error("the removable sandbox was not removed")
			}
		})
	}
}

// refuseOne is the fake runtime, refusing to remove one sandbox.
type refuseOne struct {
	*critesting.FakeRuntimeService
	id  string
	err error
}

func (r *refuseOne) RemovePodSandbox(ctx context.Context, id string) error {
	if id == r.id {
		return r.err
	}
	return r.FakeRuntimeService.RemovePodSandbox(ctx, id)
}

// The logs of the pods the last cluster ran go with them, and nothing else does: another
// node's links beside them and files that are not a pod's log directory stay.
func TestRemovePodLogs(t *testing.T) {
	root := t.TempDir()
	podLogs, otherLogs, links := filepath.Join(root, "pods"), filepath.Join(root, "other-node"), filepath.Join(root, "containers")
	link := func(name, target string) {
		t.Helper()
		if err := os.MkdirAll(links, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
	}
	gone := []string{
		filepath.Join(podLogs, "default_web-0_6b1f7a52-0000-4000-8000-0000000000b1", "main", "0.log"),
		filepath.Join(podLogs, "kube-system_etcd-node.a_f0b5c1f2a3d4e5f60718293a4b5c6d7e", "etcd", "1.log"),
	}
	kept := []string{
		filepath.Join(podLogs, "README"),                        // not a pod's directory
		filepath.Join(podLogs, "not-a-pod", "x.log"),            // nor this
		filepath.Join(otherLogs, "default_db_0000-11", "c.log"), // another node's
	}
	for _, p := range append(append([]string{}, gone...), kept...) {
		writeFile(t, p)
	}
	link("web-0_default_main-abc.log", gone[0])
	link("etcd-node.a_kube-system_etcd-def.log", "../pods/kube-system_etcd-node.a_f0b5c1f2a3d4e5f60718293a4b5c6d7e/etcd/1.log")
	link("db_default_c-123.log", kept[2])
	link("dangling_default_c-456.log", filepath.Join(otherLogs, "gone"))

	if err := removePodLogs(context.Background(), podLogs, links); err != nil {
		t.Fatal(err)
	}
	for _, p := range gone {
		if _, err := os.Stat(filepath.Dir(filepath.Dir(p))); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v)", filepath.Dir(filepath.Dir(p)), err)
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if names, want := dirNames(t, links), []string{"dangling_default_c-456.log", "db_default_c-123.log"}; !slices.Equal(names, want) {
		t.Errorf("links left %v, want %v", names, want)
	}
	// Again, with nothing left to remove, and without either directory.
	if err := removePodLogs(context.Background(), podLogs, links); err != nil {
		t.Errorf("second wipe: %v", err)
	}
	if err := removePodLogs(context.Background(), filepath.Join(root, "none"), filepath.Join(root, "none2")); err != nil {
		t.Errorf("wipe of missing directories: %v", err)
	}
}

func TestPodLogsDir(t *testing.T) {
	for _, tc := range []struct{ config, want, wantErr string }{
		{"kind: KubeletConfiguration\n", "/var/log/pods", ""},
		{"podLogsDir: /var/lib/node-1/pod-logs\n", "/var/lib/node-1/pod-logs", ""},
		{"podLogsDir: /\n", "", `podLogsDir "/"`},
		{"podLogsDir: var/log/pods\n", "", `podLogsDir "var/log/pods"`},
		{"podLogsDir: /var/log/../pods\n", "", `podLogsDir "/var/log/../pods"`},
		{"podLogsDir: [\n", "", "reading the kubelet configuration"},
	} {
		got, err := PodLogsDir([]byte(tc.config))
		if tc.wantErr == "" && (err != nil || got != tc.want) {
			t.Errorf("%q: %q, %v; want %q", tc.config, got, err, tc.want)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%q: %q, %v; want an error with %q", tc.config, got, err, tc.wantErr)
		}
	}
}

// The whole wipe against a CRI server (cri-client's fake): the runtime's pods are removed, and
// of the kubelet's root directory only what does not remember them stays.
func TestWipe(t *testing.T) {
	dir := t.TempDir()
	endpoint := "unix://" + filepath.Join(dir, "cri.sock")
	rt := fakecri.NewFakeRemoteRuntime()
	if err := rt.Start(endpoint); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	rt.RuntimeService.SetFakeSandboxes([]*critesting.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY, Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "default", Name: "web-0"},
	}}})
	root, podLogs := filepath.Join(dir, "kubelet"), filepath.Join(dir, "pod-logs")
	files := map[string]bool{ // path under dir → kept
		"kubelet/cpu_manager_state":    false,
		"kubelet/allocated_pods_state": false,
		"kubelet/actuated_pods_state":  false,
		"kubelet/checkpoints/checkpoint-web-0_default-main-2026-11-29T02:00:00Z.tar": false,
		"kubelet/pods/6b1f7a52-0000-4000-8000-0000000000b1/etc-hosts":                false,
		"kubelet/image_manager/pulled/sha256-abc":                                    true,
		"kubelet/pki/kubelet.crt":                                                    true,
		"pod-logs/default_web-0_6b1f7a52-0000-4000-8000-0000000000b1/main/0.log":     false,
	}
	for p := range files {
		writeFile(t, filepath.Join(dir, p))
	}
	if err := Wipe(context.Background(), endpoint, root, podLogs); err != nil {
		t.Fatalf("Wipe: %v", err)
	}
	if n := len(rt.RuntimeService.Sandboxes); n != 0 {
		t.Errorf("%d pod sandboxes left in the runtime", n)
	}
	for p, kept := range files {
		_, err := os.Stat(filepath.Join(dir, p))
		if kept && err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
		if !kept && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v)", p, err)
		}
	}
}

// writeFile writes a file, and the directories it is in.
func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a secret the pod logged\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
