// Package idlegc keeps an idle Go process's heap closer to what it really holds, without
// slowing the process down when it is busy.
//
// Go collects when the heap has grown by GOGC percent over what the last collection left live.
// A tenant's control-plane components build a large heap at start and keep it (the apiserver's
// API installation and schemas, about 60 MB), then allocate little while the tenant is idle
// (the apiserver about 0.5 MB/s): at GOGC=50 its heap climbs by 30 MB between collections a
// minute apart, memory an idle tenant holds for nothing. A lower GOGC for good would save it
// but makes a busy apiserver collect more often (its LISTs were measurably slower at 25).
//
// A process is quiet when, for Window seconds, what it allocated over the last Quiet would not
// have reached a collection at its own GOGC (the ceiling). While it is quiet, Run sets GOGC
// once a second to the value at which, allocating as it did over the last Interval, the
// process collects about every Interval, bounded by Floor and the ceiling; it follows the
// highest value the last Window seconds asked for. The process gets its own GOGC back within a
// second or two of getting busy. Each collection of an idle apiserver marks about 60 MB
// (about 43 ms of CPU): paced for one every 15 s, with the release's once a minute, collecting
// was a quarter of its CPU (0.35 s in two minutes); paced for one a minute, 0.11 s; paced for
// one every two minutes, the release's alone (BENCHMARKS.md). What the lower goal saves is
// less than it suggests, as the heap's partly used spans stay resident.
//
// While the process stays quiet, Run also returns the heap's free pages to the operating
// system every Release (debug.FreeOSMemory: a collection, then every free page). Go's own
// scavenger keeps about a tenth above the heap goal and returns the rest slowly; an idle
// tenant's components held 6-8 MiB more without it.
//
// While the process stays quiet, Run also lets it run on IdleProcs threads (GOMAXPROCS), and
// gives it back the runtime's own number the second it gets busy. An idle component's work is
// timers and small requests: with a processor per host core, each wake-up also wakes a
// spinning thread that looks for more work on the other processors and finds none. On this
// project's 2-core host that was a quarter of an idle tenant's CPU (64-70 millicores instead of
// 47-52, BENCHMARKS.md). A GOMAXPROCS set in the environment is left alone.
package idlegc

import (
	"cmp"
	"context"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Settings are the pacing's bounds. Interval is the aimed time between collections while the
// process is quiet, Quiet the time over which its allocation tells whether it is (Interval
// when zero), Floor the lowest GOGC set, Window the seconds of low allocation after which
// GOGC falls. Release is how often free memory goes back to the operating system while the
// process is quiet; 0 never. IdleProcs is
// the GOMAXPROCS while quiet; 0 leaves GOMAXPROCS alone.
type Settings struct {
	Interval  time.Duration
	Quiet     time.Duration
	Floor     int
	Window    int
	Release   time.Duration
	IdleProcs int
}

// Default is what the tenant components run with: quiet while a collection at the process's
// own GOGC would come later than every 15 s; while quiet, free memory returned once a minute,
// which collects, and the pacing aimed at one collection every two minutes, so that the
// minute's release is the only collection while idle. Paced for one every 15 s, an idle
// apiserver collected four times a minute; for one a minute, about one and a half (the pacing's
// and the release's, a minute apart but not together); for two minutes, once. The heap is the
// same at its highest: a minute's allocation over what it holds.
var Default = Settings{Interval: 2 * time.Minute, Quiet: 15 * time.Second, Floor: 10, Window: 30, Release: time.Minute, IdleProcs: 1}

// Env, in a process's environment, is a comma-separated list: "off" turns all of this off
// (GOGC and GOMAXPROCS stay as set), "no-release" paces without returning memory, "no-procs"
// leaves GOMAXPROCS alone, "interval=<duration>" aims at that time between collections instead
// of Default's. Unset, or anything else, is Default.
const Env = "KUBENEST_IDLE_GC"

// Start runs Run with Default in the background, as Env says.
func Start(ctx context.Context) {
	s, on := fromEnv(os.Getenv(Env))
	if !on {
		return
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		s.IdleProcs = 0
	}
	go Run(ctx, s)
}

// fromEnv is Default as Env's value v changes it; on is false for "off".
func fromEnv(v string) (s Settings, on bool) {
	s = Default
	for _, v := range strings.Split(v, ",") {
		v = strings.TrimSpace(v)
		switch v {
		case "off":
			return s, false
		case "no-release":
			s.Release = 0
		case "no-procs":
			s.IdleProcs = 0
		default:
			if d, ok := strings.CutPrefix(v, "interval="); ok {
				if i, err := time.ParseDuration(d); err == nil && i >= time.Second {
					s.Interval = i
				} else {
					klog.InfoS("Ignoring an interval that is not a duration of a second or more", "env", Env, "interval", d)
				}
			}
		}
	}
	return s, true
}

const (
	metricAllocs = "/gc/heap/allocs:bytes"
	metricLive   = "/gc/heap/live:bytes"
	metricGOGC   = "/gc/gogc:percent"
)

// Run paces the collector, and GOMAXPROCS with it, until ctx ends, and leaves GOMAXPROCS as
// the runtime would have it. It does nothing when the process's GOGC is off or not above
// s.Floor.
func Run(ctx context.Context, s Settings) {
	samples := []metrics.Sample{{Name: metricAllocs}, {Name: metricLive}, {Name: metricGOGC}}
	metrics.Read(samples)
	ceiling := -1 // GOGC=off reads as the uint64 of -1
	if v := samples[2].Value; v.Kind() == metrics.KindUint64 && v.Uint64() <= math.MaxInt32 {
		ceiling = int(v.Uint64())
	}
	if ceiling <= s.Floor {
		klog.InfoS("Not pacing the garbage collector", "GOGC", ceiling, "floor", s.Floor)
		return
	}
	if s.IdleProcs >= runtime.GOMAXPROCS(0) {
		s.IdleProcs = 0
	}
	klog.InfoS("Pacing the garbage collector while idle", "GOGCCeiling", ceiling, "floor", s.Floor, "interval", s.Interval, "quiet", cmp.Or(s.Quiet, s.Interval), "window", s.Window, "release", s.Release, "idleProcs", s.IdleProcs)
	p := newPacer(s, ceiling)
	fewProcs := false // GOMAXPROCS is IdleProcs
	defer func() {
		if fewProcs {
			runtime.SetDefaultGOMAXPROCS()
		}
	}()
	prev := samples[0].Value.Uint64()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			metrics.Read(samples)
			allocs, live := samples[0].Value.Uint64(), samples[1].Value.Uint64()
			if gogc, changed := p.next(allocs-prev, live); changed {
				debug.SetGCPercent(gogc)
				klog.V(4).InfoS("GOGC changed", "GOGC", gogc, "allocatedLastSecond", allocs-prev, "liveHeapBytes", live)
			}
			if s.IdleProcs > 0 && p.quiet() != fewProcs {
				fewProcs = p.quiet()
				if fewProcs {
					runtime.GOMAXPROCS(s.IdleProcs)
				} else {
					runtime.SetDefaultGOMAXPROCS()
				}
				klog.V(4).InfoS("GOMAXPROCS changed", "GOMAXPROCS", runtime.GOMAXPROCS(0))
			}
			prev = allocs
			if p.release() {
				start := time.Now()
				debug.FreeOSMemory()
				klog.V(4).InfoS("Returned free memory to the operating system", "took", time.Since(start))
			}
		}
	}
}

// pacer turns allocation into GOGC: it holds what was allocated in each of the last Interval
// (or Quiet) seconds, the GOGC each of the last Window seconds wanted and whether each was busy.
// While no second of the window was busy, the GOGC in force is the highest wanted; otherwise
// the ceiling.
type pacer struct {
	s       Settings
	ceiling int
	allocs  []uint64 // ring: bytes allocated in each of the last max(Interval, Quiet) seconds
	wanted  []int    // ring: the GOGC wanted in each of the last Window seconds
	busy    []bool   // ring: whether each of the last Window seconds was busy
	pos     int      // seconds seen
	current int
	isQuiet bool
	// released is the second free memory was last returned, -1 if never since the process
	// was last busy.
	released int
}

func newPacer(s Settings, ceiling int) *pacer {
	if s.Quiet == 0 {
		s.Quiet = s.Interval
	}
	p := &pacer{
		s: s, ceiling: ceiling, current: ceiling, released: -1,
		allocs: make([]uint64, max(int(max(s.Interval, s.Quiet)/time.Second), 1)),
		wanted: make([]int, max(s.Window, 1)),
		busy:   make([]bool, max(s.Window, 1)),
	}
	for i := range p.wanted {
		p.wanted[i] = ceiling // start as the process was started: quiet only after a window
		p.busy[i] = true
	}
	return p
}

// next takes the bytes allocated in the last second and the live heap of the last collection,
// and returns the GOGC in force and whether it changed.
func (p *pacer) next(allocated, live uint64) (int, bool) {
	p.allocs[p.pos%len(p.allocs)] = allocated
	p.wanted[p.pos%len(p.wanted)] = p.want(p.s.Interval, live)
	p.busy[p.pos%len(p.busy)] = p.want(p.s.Quiet, live) == p.ceiling
	p.pos++
	p.isQuiet = !slices.Contains(p.busy, true)
	gogc := p.ceiling
	if p.isQuiet {
		gogc = slices.Max(p.wanted)
	}
	changed := gogc != p.current
	p.current = gogc
	return gogc, changed
}

// quiet says whether the process has allocated little for a window.
func (p *pacer) quiet() bool { return p.isQuiet }

// release says whether to return free memory now: the process is quiet, and it was not done
// in the last Release, or not since the process was last busy.
func (p *pacer) release() bool {
	if !p.quiet() {
		p.released = -1
		return false
	}
	if p.s.Release <= 0 || (p.released >= 0 && time.Duration(p.pos-p.released)*time.Second < p.s.Release) {
		return false
	}
	p.released = p.pos
	return true
}

// want is the GOGC at which the heap, growing as it did over the last span, reaches the next
// collection after span: that growth in percent of the live heap, rounded up to a multiple of
// 5 (fewer changes), within [Floor, ceiling]. Summed over the span, one burst (a scrape of the
// metrics, a LIST) does not count as a busy process; a busy second still raises it at once
// by what it allocated.
func (p *pacer) want(span time.Duration, live uint64) int {
	if live == 0 {
		return p.ceiling
	}
	var sum uint64
	for i := range min(max(int(span/time.Second), 1), len(p.allocs)) {
		sum += p.allocs[(p.pos-i+len(p.allocs))%len(p.allocs)] // p.pos is this second's
	}
	percent := 100 * float64(sum) / float64(live)
	if percent >= float64(p.ceiling) {
		return p.ceiling
	}
	rounded := int(math.Ceil(percent/5)) * 5
	return min(max(rounded, p.s.Floor), p.ceiling)
}
