package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

var (
	tenantA  = Target{Cluster: "team-a/dev", UID: "uid-a"}
	tenantB  = Target{Cluster: "team-b/prod", UID: "uid-b"}
	tenantA2 = Target{Cluster: "team-a/dev", UID: "uid-a2"} // a new VirtualCluster of the same name
	allSteps = []string{StepStopKubelet, StepWipe, StepConfigure, StepStartKubelet}
)

func ptr(t Target) *Target { return &t }

func TestHost(t *testing.T) {
	if !Host.IsHost() || Host.Cluster != v1alpha1.ClusterHost {
		t.Errorf("Host = %+v, want the host cluster", Host)
	}
	if tenantA.IsHost() {
		t.Errorf("%+v.IsHost() = true", tenantA)
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name      string
		state     State
		want      Target
		wantState State
		wantStep  string
	}{
		{
			name:      "at the host, nothing to do",
			state:     State{Current: Host},
			want:      Host,
			wantState: State{Current: Host},
		},
		{
			name:      "at the tenant, nothing to do",
			state:     State{Current: tenantA},
			want:      tenantA,
			wantState: State{Current: tenantA},
		},
		{
			name:      "host to tenant begins a switch",
			state:     State{Current: Host},
			want:      tenantA,
			wantState: State{Current: Host, Switching: ptr(tenantA)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "tenant to host begins a switch",
			state:     State{Current: tenantA},
			want:      Host,
			wantState: State{Current: tenantA, Switching: ptr(Host)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "tenant to another tenant begins a switch",
			state:     State{Current: tenantA},
			want:      tenantB,
			wantState: State{Current: tenantA, Switching: ptr(tenantB)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "same tenant name, new UID, begins a switch",
			state:     State{Current: tenantA},
			want:      tenantA2,
			wantState: State{Current: tenantA, Switching: ptr(tenantA2)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "begun, nothing done yet: stop the kubelet",
			state:     State{Current: Host, Switching: ptr(tenantA)},
			want:      tenantA,
			wantState: State{Current: Host, Switching: ptr(tenantA)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "resumes after StopKubelet with Wipe",
			state:     State{Current: Host, Switching: ptr(tenantA), Done: StepStopKubelet},
			want:      tenantA,
			wantState: State{Current: Host, Switching: ptr(tenantA), Done: StepStopKubelet},
			wantStep:  StepWipe,
		},
		{
			name:      "resumes after Wipe with Configure",
			state:     State{Current: Host, Switching: ptr(tenantA), Done: StepWipe},
			want:      tenantA,
			wantState: State{Current: Host, Switching: ptr(tenantA), Done: StepWipe},
			wantStep:  StepConfigure,
		},
		{
			name:      "resumes after Configure with StartKubelet",
			state:     State{Current: Host, Switching: ptr(tenantA), Done: StepConfigure},
			want:      tenantA,
			wantState: State{Current: Host, Switching: ptr(tenantA), Done: StepConfigure},
			wantStep:  StepStartKubelet,
		},
		{
			name:      "target changes mid-switch: start over towards the new tenant",
			state:     State{Current: Host, Switching: ptr(tenantA), Done: StepConfigure},
			want:      tenantB,
			wantState: State{Current: Host, Switching: ptr(tenantB)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "target changes back to where the kubelet was: start over, it was wiped",
			state:     State{Current: Host, Switching: ptr(tenantA), Done: StepWipe},
			want:      Host,
			wantState: State{Current: Host, Switching: ptr(Host)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "target changes to the same name with a new UID: start over",
			state:     State{Current: Host, Switching: ptr(tenantA), Done: StepStopKubelet},
			want:      tenantA2,
			wantState: State{Current: Host, Switching: ptr(tenantA2)},
			wantStep:  StepStopKubelet,
		},
		{
			name:      "an unknown recorded step starts the switch over",
			state:     State{Current: Host, Switching: ptr(tenantA), Done: "Bogus"},
			want:      tenantA,
			wantState: State{Current: Host, Switching: ptr(tenantA), Done: "Bogus"},
			wantStep:  StepStopKubelet,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.state
			var inSwitching *Target
			if in.Switching != nil {
				inSwitching = ptr(*in.Switching)
			}
			gotState, gotStep := Plan(tt.state, tt.want)
			if gotStep != tt.wantStep {
				t.Errorf("Plan() step = %q, want %q", gotStep, tt.wantStep)
			}
			if !reflect.DeepEqual(gotState, tt.wantState) {
				t.Errorf("Plan() state = %s, want %s", show(gotState), show(tt.wantState))
			}
			if gotStep != gotState.Next() {
				t.Errorf("Plan() step %q is not the state's Next() %q", gotStep, gotState.Next())
			}
			// The caller's state is not changed through the Switching pointer.
			if inSwitching != nil && *tt.state.Switching != *inSwitching {
				t.Errorf("Plan() changed the caller's Switching to %+v", *tt.state.Switching)
			}
		})
	}
}

func TestNext(t *testing.T) {
	tests := []struct {
		state State
		want  string
	}{
		{State{Current: Host}, ""},
		{State{Current: Host, Done: StepWipe}, ""}, // no switch: Done means nothing
		{State{Current: Host, Switching: ptr(tenantA)}, StepStopKubelet},
		{State{Current: Host, Switching: ptr(tenantA), Done: StepStopKubelet}, StepWipe},
		{State{Current: Host, Switching: ptr(tenantA), Done: StepWipe}, StepConfigure},
		{State{Current: Host, Switching: ptr(tenantA), Done: StepConfigure}, StepStartKubelet},
		{State{Current: Host, Switching: ptr(tenantA), Done: StepStartKubelet}, ""},
	}
	for _, tt := range tests {
		if got := tt.state.Next(); got != tt.want {
			t.Errorf("%s.Next() = %q, want %q", show(tt.state), got, tt.want)
		}
	}
}

func TestCompleted(t *testing.T) {
	begun := State{Current: Host, Switching: ptr(tenantA)}
	tests := []struct {
		name  string
		state State
		step  string
		want  State
	}{
		{"after StopKubelet", begun, StepStopKubelet, State{Current: Host, Switching: ptr(tenantA), Done: StepStopKubelet}},
		{"after Wipe", State{Current: Host, Switching: ptr(tenantA), Done: StepStopKubelet}, StepWipe, State{Current: Host, Switching: ptr(tenantA), Done: StepWipe}},
		{"after Configure", State{Current: Host, Switching: ptr(tenantA), Done: StepWipe}, StepConfigure, State{Current: Host, Switching: ptr(tenantA), Done: StepConfigure}},
		{"after StartKubelet: at the tenant, no switch", State{Current: Host, Switching: ptr(tenantA), Done: StepConfigure}, StepStartKubelet, State{Current: tenantA}},
		{"after StartKubelet back home: at the host, no switch", State{Current: tenantA, Switching: ptr(Host), Done: StepConfigure}, StepStartKubelet, State{Current: Host}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Completed(tt.state, tt.step); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Completed(%s, %s) = %s, want %s", show(tt.state), tt.step, show(got), show(tt.want))
			}
		})
	}
}

// walk runs a whole switch from s towards want with Plan and Completed, as the agent does,
// and returns the steps it ran and the final state.
func walk(t *testing.T, s State, want Target) (State, []string) {
	t.Helper()
	var ran []string
	for {
		next, step := Plan(s, want)
		if step == "" {
			return next, ran
		}
		if len(ran) > len(allSteps) {
			t.Fatalf("switch towards %+v does not end: ran %v", want, ran)
		}
		ran = append(ran, step)
		s = Completed(next, step)
	}
}

func TestWholeSwitchThereAndBack(t *testing.T) {
	s := State{Current: Host}

	s, ran := walk(t, s, tenantA)
	if !slices.Equal(ran, allSteps) {
		t.Errorf("host → tenant ran %v, want %v", ran, allSteps)
	}
	if want := (State{Current: tenantA}); !reflect.DeepEqual(s, want) {
		t.Errorf("after host → tenant: %s, want %s", show(s), show(want))
	}

	s, ran = walk(t, s, Host)
	if !slices.Equal(ran, allSteps) {
		t.Errorf("tenant → host ran %v, want %v", ran, allSteps)
	}
	if want := (State{Current: Host}); !reflect.DeepEqual(s, want) {
		t.Errorf("after tenant → host: %s, want %s", show(s), show(want))
	}

	// Nothing more to do once home.
	if _, step := Plan(s, Host); step != "" {
		t.Errorf("at the host, Plan() step = %q, want none", step)
	}
}

// A crash after any prefix of steps: the state recorded so far, saved and loaded again,
// resumes the switch at the step after the last one done.
func TestCrashResumes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to Target
	}{
		{"host to tenant", Host, tenantA},
		{"tenant to host", tenantA, Host},
		{"tenant to tenant", tenantA, tenantB},
	} {
		for done := 0; done <= len(allSteps); done++ {
			t.Run(tc.name+"/after "+strings.Join(append([]string{"begin"}, allSteps[:done]...), ","), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "state.json")
				if err := Save(path, State{Current: tc.from}); err != nil {
					t.Fatal(err)
				}

				// The agent records the begun switch, then each step as it completes; then
				// it crashes.
				s, step := Plan(State{Current: tc.from}, tc.to)
				if err := Save(path, s); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < done; i++ {
					if step != allSteps[i] {
						t.Fatalf("step %d = %q, want %q", i, step, allSteps[i])
					}
					s = Completed(s, step)
					if err := Save(path, s); err != nil {
						t.Fatal(err)
					}
					step = s.Next()
				}

				loaded, err := Load(path)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(loaded, s) {
					t.Fatalf("Load() = %s, saved %s", show(loaded), show(s))
				}
				resumed, next := Plan(loaded, tc.to)
				wantNext := ""
				if done < len(allSteps) {
					wantNext = allSteps[done]
				}
				if next != wantNext {
					t.Errorf("after a crash Plan() step = %q, want %q", next, wantNext)
				}
				if next != "" && (resumed.Switching == nil || *resumed.Switching != tc.to) {
					t.Errorf("after a crash Plan() state = %s, want a switch to %+v", show(resumed), tc.to)
				}

				// Finishing from there ends at the target having run exactly the rest.
				final, rest := walk(t, loaded, tc.to)
				if want := allSteps[done:]; !slices.Equal(rest, want) {
					t.Errorf("after a crash the switch ran %v, want %v", rest, want)
				}
				if want := (State{Current: tc.to}); !reflect.DeepEqual(final, want) {
					t.Errorf("after resuming: %s, want %s", show(final), show(want))
				}
				// A target change while the agent was down starts over towards the new one.
				if done < len(allSteps) {
					s2, step2 := Plan(loaded, tenantA2)
					if step2 != StepStopKubelet || s2.Switching == nil || *s2.Switching != tenantA2 || s2.Done != "" {
						t.Errorf("target changed after a crash: Plan() = %s, %q; want a switch to %+v from StopKubelet", show(s2), step2, tenantA2)
					}
				}
			})
		}
	}
}

func TestLoadMissing(t *testing.T) {
	for _, path := range []string{
		filepath.Join(t.TempDir(), "state.json"),
		filepath.Join(t.TempDir(), "no", "such", "dir", "state.json"),
	} {
		s, err := Load(path)
		if err != nil {
			t.Fatalf("Load(%s) error = %v", path, err)
		}
		if want := (State{Current: Host}); !reflect.DeepEqual(s, want) {
			t.Errorf("Load(%s) = %s, want %s", path, show(s), show(want))
		}
	}
}

func TestLoadGarbage(t *testing.T) {
	for _, data := range []string{"not json", "{", `{"current": 42}`, ""} {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil {
			t.Errorf("Load(%q) gave no error", data)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%q) error %q does not name the file %s", data, err, path)
		}
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	for _, s := range []State{
		{Current: Host},
		{Current: tenantA},
		{Current: Host, Switching: ptr(tenantA)},
		{Current: tenantA, Switching: ptr(Host), Done: StepConfigure},
		{Current: tenantA, Switching: ptr(tenantB), Done: StepWipe},
	} {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := Save(path, s); err != nil {
			t.Fatal(err)
		}
		got, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("Load(Save(%s)) = %s", show(s), show(got))
		}
	}
}

func TestSaveAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kubenest") // Save makes the directory
	path := filepath.Join(dir, "state.json")
	states := []State{
		{Current: Host},
		{Current: Host, Switching: ptr(tenantA)},
		{Current: Host, Switching: ptr(tenantA), Done: StepStopKubelet},
		{Current: tenantA},
	}
	for _, s := range states {
		if err := Save(path, s); err != nil {
			t.Fatalf("Save(%s) error = %v", show(s), err)
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{"state.json"}) {
			t.Errorf("after Save the directory holds %v, want only state.json", names)
		}
		got, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("Load() after Save = %s, want %s", show(got), show(s))
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("state file mode %v, want it private to its owner", perm)
	}
}

func TestSaveError(t *testing.T) {
	// A path whose directory is a file cannot be written; the error is returned.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Save(filepath.Join(file, "state.json"), State{Current: Host}); err == nil {
		t.Error("Save under a regular file gave no error")
	}

	// A state file that cannot be replaced (a directory is in its way): the error is
	// returned and no temporary file is left behind.
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Save(path, State{Current: Host}); err == nil {
		t.Error("Save over a directory gave no error")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "state.json" {
			t.Errorf("a failed Save left %s behind", e.Name())
		}
	}
}

func show(s State) string {
	sw := "nil"
	if s.Switching != nil {
		sw = s.Switching.Cluster + "(" + string(s.Switching.UID) + ")"
	}
	return "{Current:" + s.Current.Cluster + "(" + string(s.Current.UID) + ") Switching:" + sw + " Done:" + s.Done + "}"
}
