package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
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
