// Package agent is the node agent's logic: it moves its node's kubelet between the host and a
// tenant, one recorded step at a time, so that a crash at any point resumes where it stopped.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/atomicfile"
)

// Steps of a switch, in order. Each is idempotent: redoing one after a crash is harmless.
const (
	StepStopKubelet  = "StopKubelet"
	StepWipe         = "Wipe"
	StepConfigure    = "Configure"
	StepStartKubelet = "StartKubelet"
)

// steps in the order a switch runs them.
var steps = []string{StepStopKubelet, StepWipe, StepConfigure, StepStartKubelet}

// Target is a cluster the kubelet may serve: the host, or a tenant; or none.
type Target struct {
	// Cluster is v1alpha1.ClusterHost or the tenant's <namespace>/<name>.
	Cluster string    `json:"cluster"`
	UID     types.UID `json:"uid,omitempty"`
}

// Host is the host cluster as a target.
var Host = Target{Cluster: v1alpha1.ClusterHost}

// None is no cluster: where a quarantined node's kubelet goes (it stays stopped).
var None = Target{Cluster: v1alpha1.ClusterNone}

// IsHost says whether t is the host.
func (t Target) IsHost() bool { return t.Cluster == v1alpha1.ClusterHost }

// IsNone says whether t is no cluster.
func (t Target) IsNone() bool { return t.Cluster == v1alpha1.ClusterNone }

// State is what the agent records on disk, before and after every step.
type State struct {
	// Current is where the kubelet served when the last switch completed.
	Current Target `json:"current"`
	// Switching is where a switch in progress goes; nil when none is.
	Switching *Target `json:"switching,omitempty"`
	// Done is the last step of that switch that completed.
	Done string `json:"done,omitempty"`
}

// Next is the step to run next in the switch in progress, "" when there is none.
func (s State) Next() string {
	if s.Switching == nil {
		return ""
	}
	for i, st := range steps {
		if st == s.Done {
			if i+1 < len(steps) {
				return steps[i+1]
			}
			return ""
		}
	}
	return steps[0]
}

// Plan decides, from the recorded state and where the kubelet should be, what to do next: the
// state to record before acting (a switch begun or redirected) and the step to run; an empty
// step means the kubelet is where it should be.
func Plan(s State, want Target) (State, string) {
	switch {
	case s.Switching == nil && s.Current == want:
		return s, ""
	case s.Switching == nil:
		s.Switching, s.Done = &want, ""
	case *s.Switching != want:
		// The target changed mid-switch: start over towards the new one. Stopping the kubelet
		// and wiping are safe to redo, and the kubelet must not start for the old target.
		s.Switching, s.Done = &want, ""
	}
	return s, s.Next()
}

// Completed is the state after step ran: at the last step, the switch is done.
func Completed(s State, step string) State {
	s.Done = step
	if step == steps[len(steps)-1] {
		s.Current, s.Switching, s.Done = *s.Switching, nil, ""
	}
	return s
}

// Load reads the state file; a missing one means the kubelet serves the host.
func Load(path string) (State, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return State{Current: Host}, nil
	}
	if err != nil {
		return State{}, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("state file %s: %w", path, err)
	}
	return s, nil
}

// Save writes the state file durably: a temporary file, synced, renamed over the old one.
func Save(path string, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
