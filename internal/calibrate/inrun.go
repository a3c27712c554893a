package calibrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"trueprof/internal/cachefile"
	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/calltree"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// UprobeInRun is the in-run calibration of a uprobe recording: the
// recorder calls Burst when its probes are in place and again when
// recording ends, and writes Calibration into the trace. Each burst runs
// the calibration target under uprobes placed by uprobe.Attach, the
// recorder's own BPF program and ring, on the same machine state as the
// recording (load, CPU frequency, the kernel's uprobe structures): a
// stored calibration measured at another time drifts with them
// (docs/calibration.md, "In-run calibration for uprobes"). The zero value
// is not usable; see NewUprobeInRun.
type UprobeInRun struct {
	bin string // the built target, "" until the first burst
	// pairs are, per validation shape (in inRunShapes' order), its
	// probed runs, each beside the plain run just before it.
	pairs [][]pairedRun
	// inside and caller are, per site class other than the fitted one
	// (copyStep, copyRins), how much longer each of its leaf-heavy runs'
	// leaf calls were from entry to exit (inside) and its intervals from
	// one leaf's exit to the next one's entry (caller) than the fitted
	// class's run's just before it, medians of the events' spans: the
	// class's extra cost per hit, in the callee's intervals and in its
	// caller's. Spans, not the loops' CPU times: a loop of single-steps
	// is preempted far more often, each preemption costs CPU time, and
	// that cost is removed where it happens (calltree's switch cost).
	inside, caller map[string][]float64
	intervals      [trace.Transitions][]uint64
	bursts         int
	errs           []string // why bursts failed
}

// pairedRun is a probed run of a shape and the plain run of the same
// shape just before it.
type pairedRun struct {
	run   calfit.Run
	plain float64
}

// NewUprobeInRun returns an in-run calibration with no burst yet.
func NewUprobeInRun() *UprobeInRun {
	return &UprobeInRun{pairs: make([][]pairedRun, len(inRunShapes())), inside: map[string][]float64{}, caller: map[string][]float64{}}
}

// The copies of the target's functions a burst runs (target.c, inrun):
// cal (emulated entries, return probes: the fitted class), ref (not
// probed: the uninstrumented loops), step (the leaf's entry single-stepped),
// rins (the leaf's exits RET-instruction probes) and csite (the leaf
// probed at its callers).
const (
	copyCal   = "cal"
	copyRef   = "ref"
	copyStep  = "step"
	copyRins  = "rins"
	copyCsite = "csite"
)

// inRunShapes are a burst's validation shapes: trueprof calibrate's for
// uprobes at a sixth of their rounds (loops of 20-100 µs uninstrumented),
// leaf-heavy first.
func inRunShapes() []shape {
	s := validationShapes("uprobe")
	for i := range s {
		s[i].Rounds = max(s[i].Rounds/6, 6)
	}
	return s
}

// Burst sizes: the empty shape's rounds (its intervals split the fitted
// sums) and how many times each validation shape runs, plain and probed
// alternately (pairedShape takes the medians).
const (
	inRunEmptyRounds = 1000
	inRunReps        = 10
)

// burstArgs are the target's arguments for one burst, and for each the
// copy it runs and the index of its shape in inRunShapes (-1: the empty
// shape); without callSites, no run of the csite copy.
func burstArgs(callSites bool) (args, copies []string, shapes []int) {
	add := func(c string, i int, s shape) {
		args = append(args, c+":"+s.arg())
		copies = append(copies, c)
		shapes = append(shapes, i)
	}
	add(copyCal, -1, shape{"empty", inRunEmptyRounds, 2, 0, 0})
	vs := inRunShapes()
	for range inRunReps {
		for i, s := range vs {
			// The long shape's loops are few calls and long bodies: its
			// differences vary most, and its loops cost little.
			for range 1 + 2*btoi(s.Name == "long") {
				add(copyRef, i, s)
				add(copyCal, i, s)
			}
		}
		// The other site classes on the leaf-heavy shape: the spans'
		// differences from the fitted class's loop are the class's
		// extra cost per hit.
		add(copyStep, 0, vs[0])
		add(copyRins, 0, vs[0])
		if callSites {
			add(copyCsite, 0, vs[0])
		}
	}
	return args, copies, shapes
}

// Burst runs one calibration burst: it starts the target, places its
// probes, lets it run its loops and keeps their times and transitions.
// A failed burst is remembered: Calibration names it when no burst
// succeeded.
func (u *UprobeInRun) Burst(ctx context.Context) error {
	err := u.burst(ctx)
	if err != nil {
		// A compiler's empty output leaves a newline; the same failure
		// twice is said once.
		if msg := strings.TrimSpace(err.Error()); !slices.Contains(u.errs, msg) {
			u.errs = append(u.errs, msg)
		}
	}
	return err
}

func (u *UprobeInRun) burst(ctx context.Context) error {
	if u.bin == "" {
		bin, err := cachedTarget(ctx)
		if err != nil {
			return err
		}
		u.bin = bin
	}
	var sites []uprobe.Site
	callSites := true
	for _, c := range []string{copyCal, copyStep, copyRins, copyCsite} {
		var copySites []uprobe.Site
		for _, fn := range []string{"leaf", "link", "outer", "shape"} {
			var class uprobe.SiteClass
			if fn == "leaf" {
				class = uprobe.SiteClass{Stepped: c == copyStep, RetInsn: c == copyRins, CallSite: c == copyCsite}
			}
			s, err := uprobe.ClassSite(u.bin, c+"_"+fn, class)
			if err != nil && c == copyCsite {
				// Another compiler's code after csite_leaf's calls (an
				// instruction the kernel steps): the burst calibrates
				// the other classes, and call sites cost what an
				// emulated hit does (calltree's siteTails).
				callSites = false
				break
			}
			if err != nil {
				return fmt.Errorf("calibration target: %w", err)
			}
			copySites = append(copySites, s)
		}
		if c != copyCsite || callSites {
			sites = append(sites, copySites...)
		}
	}
	args, copies, shapeOf := burstArgs(callSites)
	cmd := exec.CommandContext(ctx, u.bin, append([]string{"-inrun"}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running the calibration target: %w", err)
	}
	set, err := uprobe.Attach(cmd.Process.Pid, u.bin, sites)
	if err != nil {
		stdin.Close()
		cmd.Wait()
		return err
	}
	// Removing the links waits for the kernel's RCU grace periods, about
	// 0.13 s here, which the recording need not wait for: the target has
	// exited by then, and the probes filter on its pid.
	defer func() { go set.Close() }()
	var events []uprobe.Event
	keep := func(e uprobe.Event) { events = append(events, e) }
	// The ring holds a quarter of a second of the fastest probes: read
	// it while the target runs.
	done := make(chan error, 1)
	stdin.Write([]byte{'g'})
	stdin.Close()
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-tick.C:
			set.Read(keep)
		}
	}
	set.Read(keep)
	if err != nil {
		return fmt.Errorf("running the calibration target: %w", err)
	}
	if n := set.Lost(); n > 0 {
		return fmt.Errorf("calibration burst lost %d probe events", n)
	}
	ns, err := parseTimes(out.String(), len(args))
	if err != nil {
		return err
	}
	runs, spans, empty, err := burstRuns(events, sites)
	if err != nil {
		return err
	}
	// Each probed run goes with the plain run just before it: on a
	// machine whose speed changes with other processes' load (by ±5% for
	// a 0.1 ms loop here), neighbours share the speed, and the median of
	// their differences is robust where the fastest runs of each kind
	// (the stored calibration's statistic) come from different moments.
	// Kept only once the whole burst is known to be good.
	pairs := make([][]pairedRun, len(u.pairs))
	inside, caller := map[string][]float64{}, map[string][]float64{}
	var plain, leafHeavy = make([]float64, len(inRunShapes())), calfit.Run{}
	var leafSpans runSpans // leafHeavy's
	var probed []calfit.Run
	for j, c := range copies {
		i := shapeOf[j]
		if c == copyRef {
			plain[i] = ns[j]
			continue
		}
		if len(probed) >= len(runs) {
			return fmt.Errorf("calibration target recorded %d of its probed loops: the probes did not fire", len(runs))
		}
		// The loop's CPU time as the target measured it: its probes'
		// cost on the CPU, without the time a busy machine took it off
		// (a loop of traps is preempted far more often than plain
		// code). The events give its transitions.
		r := runs[len(probed)]
		r.Raw = ns[j]
		probed = append(probed, r)
		switch {
		case i < 0: // the empty shape
		case c == copyCal:
			pairs[i] = append(pairs[i], pairedRun{r, plain[i]})
			if i == 0 {
				leafHeavy, leafSpans = r, spans[len(probed)-1]
			}
		case r.Leaves > 0 && leafHeavy.Leaves == r.Leaves:
			if s := spans[len(probed)-1]; len(s.leaf) > 0 && len(leafSpans.leaf) > 0 && len(s.between) > 0 && len(leafSpans.between) > 0 {
				inside[c] = append(inside[c], typicalMean(s.leaf)-typicalMean(leafSpans.leaf))
				caller[c] = append(caller[c], typicalMean(s.between)-typicalMean(leafSpans.between))
			}
		}
	}
	if len(probed) != len(runs) {
		return fmt.Errorf("calibration target recorded %d loops for %d probed ones", len(runs), len(probed))
	}
	for i := range pairs {
		u.pairs[i] = append(u.pairs[i], pairs[i]...)
	}
	for c, v := range inside {
		u.inside[c] = append(u.inside[c], v...)
		u.caller[c] = append(u.caller[c], caller[c]...)
	}
	for k := range empty {
		u.intervals[k] = append(u.intervals[k], empty[k]...)
	}
	u.bursts++
	return nil
}

// burstRuns returns the probed loops of a burst's events, in order: from
// each entry of a *_shape function to its exit, the intervals of each
// transition kind and the calls in it (Raw is the events' span, which
// Burst replaces by the loop's CPU time), and the spans of its leaf
// calls and of the intervals between two; and the durations of the empty
// loop's (the first) intervals inside its calls, which split the fitted
// sums.
func burstRuns(events []uprobe.Event, sites []uprobe.Site) ([]calfit.Run, []runSpans, [trace.Transitions][]uint64, error) {
	var out []calfit.Run
	var spans []runSpans
	var empty [trace.Transitions][]uint64
	var cur *calfit.Run
	var start uint64
	var stack []string
	for i, e := range events {
		if e.Site < 0 || e.Site >= len(sites) {
			return nil, nil, empty, fmt.Errorf("calibration burst: event of unknown site %d", e.Site)
		}
		_, fn, _ := strings.Cut(sites[e.Site].Function, "_")
		if cur != nil && i > 0 {
			prev := events[i-1]
			k := calltree.Transition(prev.Entry, e.Entry)
			cur.Count[k]++
			if len(out) == 1 && len(stack) > 0 && stack[len(stack)-1] != "shape" && e.Time >= prev.Time {
				empty[k] = append(empty[k], e.Time-prev.Time)
			}
			if _, pfn, _ := strings.Cut(sites[prev.Site].Function, "_"); fn == "leaf" && pfn == "leaf" && e.Time >= prev.Time {
				sp := &spans[len(out)-1]
				switch {
				case prev.Entry && !e.Entry:
					sp.leaf = append(sp.leaf, e.Time-prev.Time)
				case !prev.Entry && e.Entry:
					sp.between = append(sp.between, e.Time-prev.Time)
				}
			}
		}
		if e.Entry {
			stack = append(stack, fn)
		} else if len(stack) > 0 {
			stack = stack[:len(stack)-1]
		}
		switch {
		case fn != "shape" && e.Entry && cur != nil:
			cur.Calls++
			if fn == "leaf" {
				cur.Leaves++
			}
		case fn == "shape" && e.Entry:
			out = append(out, calfit.Run{})
			spans = append(spans, runSpans{})
			cur, start = &out[len(out)-1], e.Time
		case fn == "shape" && cur != nil:
			cur.Raw = float64(e.Time - start)
			cur = nil
		}
	}
	return out, spans, empty, nil
}

// spanOutlier is how far above the median a span is left out of
// typicalMean: a preemption's time off the CPU (a slice of another
// process, hundreds of µs or more on a busy machine) is no probe's cost,
// while the interrupts and other tails of tens of µs that a recording's
// intervals hold too are kept.
const spanOutlier = 50000

// typicalMean returns the mean of the spans v (not empty) but those more
// than spanOutlier above their median. The mean, not the median: a
// single-stepped hit's cost is skewed (13.3-14.3 µs between the 10th and
// 90th percentiles here, its mean 70-180 ns above its median), and a
// recording pays the mean.
func typicalMean(v []uint64) float64 {
	limit := float64(calfit.Median(v)) + spanOutlier
	sum, n := 0.0, 0
	for _, x := range v {
		if float64(x) <= limit {
			sum, n = sum+float64(x), n+1
		}
	}
	return sum / float64(n)
}

// runSpans are the spans of a probed loop's leaf calls, from entry to
// exit, and of the intervals from one leaf's exit to the next one's
// entry (ns, as the events' times).
type runSpans struct {
	leaf, between []uint64
}

// Calibration fits the bursts' shapes (calfit.Judge) and returns the
// calibration, Source "in-run", with the cost per hit of each site class
// measured in the bursts (Sites): the fitted class's entry and exit are
// its entry->entry and exit->exit overheads (a whole entry probe, a whole
// exit probe), the stepped entry and the RET-instruction exit add what
// their leaf-heavy loops' leaf calls and the intervals between them took
// more (extraCost), the stepped entry's part in the caller's intervals
// said apart (EntrySteppedCaller). Without a completed burst, or
// on a bad fit, it returns a refused calibration saying why: reports then
// show raw times.
func (u *UprobeInRun) Calibration() *trace.Calibration {
	if u.bursts == 0 {
		why := "no calibration burst completed"
		if len(u.errs) > 0 {
			why += ": " + strings.Join(u.errs, "; ")
		}
		return &trace.Calibration{Mechanism: "uprobe", Statistic: "fit", Source: "in-run", Refused: why}
	}
	var shapes []calfit.Shape
	for i, sh := range inRunShapes() {
		if s, ok := pairedShape(sh.Name, u.pairs[i]); ok {
			shapes = append(shapes, s)
		}
	}
	var split [trace.Transitions]float64 // the empty intervals' medians
	n := len(u.intervals[0])
	for k := range u.intervals {
		split[k] = float64(calfit.Median(u.intervals[k]))
		n = min(n, len(u.intervals[k]))
	}
	c, err := calfit.Judge("uprobe", split, n, shapes)
	c.Source, c.Bursts = "in-run", u.bursts
	if err != nil {
		return c
	}
	oh := c.Overhead
	sc := trace.SiteCosts{EntryEmulated: oh[trace.EntryEntry], ExitReturn: oh[trace.ExitExit]}
	inside, caller := u.extraCost(copyStep)
	sc.EntryStepped, sc.EntrySteppedCaller = sc.EntryEmulated+inside+caller, caller
	// A RET probe's step follows its timestamp, in the caller's
	// interval after the exit; what the leaf's span takes more lies
	// before it (the trap's way in is longer than the trampoline's:
	// 150-200 ns here).
	inside, caller = u.extraCost(copyRins)
	sc.ExitRetInsn, sc.ExitRetInsnBefore = sc.ExitReturn+inside+caller, inside
	// A call site's entry is an emulated call, as dear as the fitted
	// class's emulated push: what its loop's spans take more or less is
	// its exit's, an emulated uprobe where the trampoline was, before its
	// timestamp in the leaf's span, after it in the caller's.
	if v := u.inside[copyCsite]; len(v) > 0 {
		before, after := calfit.Median(v), calfit.Median(u.caller[copyCsite])
		sc.ExitCallSite, sc.ExitCallSiteBefore = max(sc.ExitReturn+before+after, 1), before
	}
	c.Sites = &sc
	return c
}

// pairedShape returns the shape name's run for the fit from its paired
// runs: the median plain run, and a probed run that takes the median
// difference more. False without runs.
func pairedShape(name string, pairs []pairedRun) (calfit.Shape, bool) {
	if len(pairs) == 0 {
		return calfit.Shape{}, false
	}
	var plain, diff []float64
	for _, p := range pairs {
		plain = append(plain, p.plain)
		diff = append(diff, p.run.Raw-p.plain)
	}
	s := calfit.Shape{Name: name, Run: pairs[0].run, Uninstrumented: calfit.Median(plain)}
	s.Run.Raw = s.Uninstrumented + calfit.Median(diff)
	return s, s.Uninstrumented > 0
}

// extraCost returns what a hit of the site class of copy c costs more
// than one of the fitted class, in the callee's intervals and in the
// caller's: the medians over the leaf-heavy runs of their spans'
// differences (typicalMean's; never below zero).
func (u *UprobeInRun) extraCost(c string) (inside, caller float64) {
	if len(u.inside[c]) == 0 {
		return 0, 0
	}
	return max(calfit.Median(u.inside[c]), 0), max(calfit.Median(u.caller[c]), 0)
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseTimes parses the n loop times (ns) the target printed, one a line.
func parseTimes(out string, n int) ([]float64, error) {
	lines := strings.Fields(out)
	if len(lines) != n {
		return nil, fmt.Errorf("calibration target printed %d times for %d loops", len(lines), n)
	}
	ns := make([]float64, n)
	for i, l := range lines {
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			return nil, fmt.Errorf("calibration target printed %q", l)
		}
		ns[i] = v
	}
	return ns, nil
}

// cachedTarget returns the calibration target built for uprobes, from
// the calibration's cache directory (built there on first use, named by
// the hash of its source and flags, so that a change of either builds it
// anew).
func cachedTarget(ctx context.Context) (string, error) {
	sum := sha256.Sum256([]byte(strings.Join(targetFlags, " ") + "\n" + targetSource))
	dir, err := cachefile.Dir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "uprobe-target-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	built, err := build(ctx, tmp, "uprobe")
	if err != nil {
		return "", err
	}
	// Renamed into place whole: a concurrent recording sees the old
	// name missing or the complete file.
	if err := os.Rename(built, bin); err != nil {
		return "", err
	}
	return bin, nil
}
