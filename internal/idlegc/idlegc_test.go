package idlegc

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"
)

const mb = 1 << 20

func TestPacerFollowsTheAllocation(t *testing.T) {
	s := Settings{Interval: 3 * time.Second, Floor: 10, Window: 4}
	p := newPacer(s, 50)
	steps := func(what string, live uint64, allocated []uint64, want []int) {
		t.Helper()
		for i, a := range allocated {
			if got, _ := p.next(a, live); got != want[i] {
				t.Fatalf("%s, second %d: GOGC %d, want %d", what, i+1, got, want[i])
			}
		}
	}
	// An idle apiserver: 60 MB live, 1 MB a second: 3 MB in 3 s, 5 %, the floor; at its
	// own GOGC until a window of quiet.
	steps("idle", 60*mb, []uint64{mb, mb, mb, mb, mb, mb}, []int{50, 50, 50, 10, 10, 10})
	// A scrape allocating 6 MB at once: 8 MB over 3 s, 13.3 %, rounded up to 15, for the 3 s
	// it counts in the sum and the window after them; then down again.
	steps("burst", 60*mb, []uint64{6 * mb, mb, mb, mb, mb, mb, mb}, []int{15, 15, 15, 15, 15, 15, 10})
	// Busy: 20 MB a second: 22 MB over 3 s, 36.7 %, 40, then 41 MB, the ceiling; it falls as
	// the busy seconds leave the sum and the window (the last wanted 20 MB over 3 s: 35).
	steps("busy", 60*mb, []uint64{20 * mb, 20 * mb, 0, 0, 0, 0, 0, 0}, []int{40, 50, 50, 50, 50, 50, 35, 10})
	// No collection yet (live unknown): the ceiling, at once.
	steps("no live heap yet", 0, []uint64{0}, []int{50})
}

func TestRunSetsGOGCAndLeavesOffAlone(t *testing.T) {
	old := debug.SetGCPercent(50)
	defer debug.SetGCPercent(old)
	runtime.GC() // a live heap to pace against
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	Run(ctx, Settings{Interval: time.Second, Floor: 10, Window: 2}) // this test allocates next to nothing
	if got := debug.SetGCPercent(50); got >= 50 || got < 10 {
		t.Errorf("after 3 quiet seconds GOGC is %d, want it lowered, within [10, 50)", got)
	}

	debug.SetGCPercent(-1)
	ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	Run(ctx, Settings{Interval: time.Second, Floor: 10, Window: 1}) // returns at once
	if got := debug.SetGCPercent(50); got != -1 {
		t.Errorf("GOGC=off became %d", got)
	}
}

// With a Quiet span shorter than Interval, a process is quiet by what it allocated over Quiet
// and paced for Interval: collections further apart than its own GOGC allows leave it at its
// own GOGC, but quiet (one thread, memory released).
func TestPacerQuietSpan(t *testing.T) {
	p := newPacer(Settings{Interval: 4 * time.Second, Quiet: 2 * time.Second, Floor: 10, Window: 2}, 50)
	type state struct {
		gogc  int
		quiet bool
	}
	var got []state
	for _, a := range []uint64{mb, mb, mb, mb, 10 * mb, 10 * mb, 10 * mb, 10 * mb, 40 * mb, 0, 0} {
		gogc, _ := p.next(a, 60*mb)
		got = append(got, state{gogc, p.quiet()})
	}
	// 1 MB a second: quiet after the window, paced for 4 s (4 MB, 6.7 %: 10). 10 MB a second:
	// 20 MB over 2 s (33 %, under 50: still quiet), 40 MB over 4 s (67 %): its own 50. 40 MB at
	// once: busy until it has left the 2 s span and the 2 s window.
	want := []state{{50, false}, {10, true}, {10, true}, {10, true}, {25, true}, {40, true}, {50, true}, {50, true}, {50, false}, {50, false}, {50, false}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Free memory goes back once the process is quiet, then every Release while it stays quiet,
// and at once again when it has been busy in between.
func TestPacerReleasesWhileQuiet(t *testing.T) {
	p := newPacer(Settings{Interval: 2 * time.Second, Floor: 10, Window: 2, Release: 3 * time.Second}, 50)
	var got []bool
	second := func(allocated uint64) {
		p.next(allocated, 60*mb)
		got = append(got, p.release())
	}
	for range 6 { // quiet: GOGC falls after the window, in the 2nd second
		second(mb)
	}
	second(40 * mb) // busy: GOGC back to its own
	for range 5 {
		second(0)
	}
	// Quiet from the 2nd second: released then and 3 s later; busy in the 7th, its allocation
	// counted for 2 s and wanted for 2 more: quiet again in the 10th, released at once.
	want := []bool{false, true, false, false, true, false, false, false, false, true, false, false}
	if !slices.Equal(got, want) {
		t.Errorf("released %v, want %v", got, want)
	}
	p = newPacer(Settings{Interval: time.Second, Floor: 10, Window: 1}, 50)
	p.next(0, 60*mb)
	if p.release() {
		t.Error("released with Release 0")
	}
}

// A quiet process runs on IdleProcs threads, gets the runtime's own number back as soon as it
// allocates, and keeps it once Run ends.
func TestRunLowersGOMAXPROCSWhileQuiet(t *testing.T) {
	own := runtime.GOMAXPROCS(0)
	if own < 2 {
		t.Skipf("GOMAXPROCS is %d here: nothing to lower", own)
	}
	old := debug.SetGCPercent(50)
	defer debug.SetGCPercent(old)
	runtime.GC()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Settings{Interval: time.Second, Floor: 10, Window: 2, IdleProcs: 1})
	}()
	waitFor := func(what string, want int, work func()) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			work()
			if runtime.GOMAXPROCS(0) == want {
				return
			}
		}
		t.Fatalf("%s: GOMAXPROCS is %d, want %d", what, runtime.GOMAXPROCS(0), want)
	}
	waitFor("quiet", 1, func() {})
	var sink [][]byte
	waitFor("busy", own, func() {
		for range 64 {
			sink = append(sink, make([]byte, 1<<20)) // far more than the live heap, each second
		}
		sink = sink[len(sink)-64:]
	})
	waitFor("quiet again", 1, func() { sink = nil })
	cancel()
	<-done
	if got := runtime.GOMAXPROCS(0); got != own {
		t.Errorf("after Run ended GOMAXPROCS is %d, want the runtime's %d", got, own)
	}
}

func TestFromEnv(t *testing.T) {
	with := func(change func(*Settings)) Settings {
		s := Default
		change(&s)
		return s
	}
	for _, tc := range []struct {
		env  string
		want Settings
		on   bool
	}{
		{"", Default, true},
		{"off", Default, false},
		{"no-release, no-procs", with(func(s *Settings) { s.Release, s.IdleProcs = 0, 0 }), true},
		{"interval=45s", with(func(s *Settings) { s.Interval = 45 * time.Second }), true},
		{"interval=500ms", Default, true}, // under a second: ignored
		{"interval=soon", Default, true},
		{"something-else", Default, true},
	} {
		got, on := fromEnv(tc.env)
		if got != tc.want || on != tc.on {
			t.Errorf("%q: %+v, on %v; want %+v, on %v", tc.env, got, on, tc.want, tc.on)
		}
	}
}
