// Package calibrate measures what probes cost on this machine, so that
// reports can remove that cost from instrumented times (probe
// calibration, t_exact = t_rough − t_I − m·t_O, per transition kind
// EE/EX/XE/XX; docs/architecture.md).
//
// Run builds a bundled target whose loops call functions in several
// shapes (empty, leaf-heavy, call-heavy, mixed, long), times the loops
// without probes and records them with probes, and fits the overhead of
// each transition kind so that the calibrated loops match the
// uninstrumented ones. The residual of each shape is stored with the
// calibration, and a calibration that fits badly is refused.
// docs/calibration.md explains the model.
//
//	c, err := calibrate.Run(ctx, calibrate.Options{Mechanism: "hook"})
//	err = calibrate.Save(c)
//	c, err = calibrate.Load("hook") // in later recordings
//
// LoadOrMeasure does both on first use, as record --stored-calibration
// does.
package calibrate

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"trueprof/internal/cachefile"
	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

//go:embed target/target.c
var targetSource string

// Options configure a calibration.
type Options struct {
	Mechanism string // "hook" or "uprobe"
	Rounds    int    // calls of cal_outer per batch; 0 chooses per mechanism
	Batches   int    // recordings whose intervals are pooled; 0 means DefaultBatches
	Log       io.Writer
}

// DefaultBatches is how many recordings a calibration pools unless told
// otherwise, and minBatches the fewest it makes.
const (
	DefaultBatches = 5
	minBatches     = 3
)

// withDefaults returns o with its zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.Rounds == 0 {
		o.Rounds = 200000
		if o.Mechanism == "uprobe" {
			o.Rounds = 5000 // each hit is a trap of about a microsecond
		}
	}
	if o.Batches == 0 {
		o.Batches = DefaultBatches
	}
	// At least three runs even for a quick calibration: the minimum of
	// a single run is that run's noise.
	o.Batches = max(o.Batches, minBatches)
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// shape is a validation loop of the calibration target: cal_outer called
// Rounds times, making Fanout calls that each reach cal_leaf through
// Depth cal_link calls; cal_leaf spins Work iterations (about 2 ns each).
type shape struct {
	Name                        string
	Rounds, Fanout, Depth, Work int
}

// arg is the shape as the target's command line wants it.
func (s shape) arg() string { return fmt.Sprintf("%d,%d,%d,%d", s.Rounds, s.Fanout, s.Depth, s.Work) }

// validationShapes are the loops the overheads are fitted to: leaf
// bodies of 0.1 to 10 µs, in trees that are mostly leaves (entry->exit and
// exit->entry intervals) or mostly calls (entry->entry and exit->exit), so
// that both pairs of transition overheads are pinned down. Rounds keep
// each loop at about a millisecond uninstrumented, short enough that
// some of its repetitions run undisturbed on a busy machine; uprobes,
// whose hits cost a microsecond or more, run a quarter of them.
func validationShapes(mech string) []shape {
	s := []shape{
		{"leaf-heavy", 150, 8, 0, 500},
		{"call-heavy", 6000, 1, 8, 50},
		{"mixed", 1000, 3, 2, 150},
		{"long", 50, 2, 0, 5000},
	}
	if mech == "uprobe" {
		for i := range s {
			s[i].Rounds = max(s[i].Rounds/4, 20)
		}
	}
	return s
}

// loopReps is how many times each validation shape's loop runs in a
// recording: each shape's time is the minimum of its loops.
const loopReps = 5

// ErrBadFit is returned by Run when no overheads reproduce the
// validation shapes: the calibration is not stored.
var ErrBadFit = calfit.ErrBadFit

// Run measures the probe cost of o.Mechanism on this machine: each of
// o.Batches rounds runs the uninstrumented target and records the
// instrumented one (alternately, so that load from other processes, which
// only ever adds time, falls on both), and the minimum of each shape's
// times is kept. The per-transition overheads are fitted to the
// validation shapes; the empty shape's intervals say how each fitted pair
// splits between its two transition kinds.
func Run(ctx context.Context, o Options) (*trace.Calibration, error) {
	if o.Mechanism != "hook" && o.Mechanism != "uprobe" {
		return nil, fmt.Errorf("mechanism %q: want hook or uprobe", o.Mechanism)
	}
	o = o.withDefaults()
	dir, err := os.MkdirTemp("", "trueprof-calibrate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin, err := build(ctx, dir, o.Mechanism)
	if err != nil {
		return nil, err
	}
	plain := bin
	if o.Mechanism == "hook" {
		if plain, err = build(ctx, dir, "plain"); err != nil {
			return nil, err
		}
	}
	// The empty shape, then the validation shapes interleaved
	// loopReps times: each shape's time is the minimum of its loops,
	// since load from other processes only ever adds time.
	shapes := append([]shape{{"empty", o.Rounds, 2, 0, 0}}, validationShapes(o.Mechanism)...)
	args := []string{shapes[0].arg()}
	for range loopReps {
		for _, s := range shapes[1:] {
			args = append(args, s.arg())
		}
	}
	var pooled [trace.Transitions][]uint64
	real := make([]float64, len(shapes))
	recorded := make([]calfit.Run, len(shapes))
	for i := range shapes {
		real[i] = math.Inf(1)
		recorded[i].Raw = math.Inf(1)
	}
	for range o.Batches {
		ns, err := uninstrumented(ctx, plain, args)
		if err != nil {
			return nil, err
		}
		p, err := recordTarget(ctx, dir, bin, o, args)
		if err != nil {
			return nil, err
		}
		iv := Intervals(p)
		for k := range pooled {
			pooled[k] = append(pooled[k], iv[k]...)
		}
		got, err := shapeRuns(p, len(args))
		if err != nil {
			return nil, err
		}
		for j := range args {
			i := 0 // args[0] is the empty shape, then the others in turn
			if j > 0 {
				i = 1 + (j-1)%(len(shapes)-1)
			}
			real[i] = min(real[i], ns[j])
			if got[j].Raw < recorded[i].Raw {
				recorded[i] = got[j]
			}
		}
	}
	n := len(pooled[0])
	var median [trace.Transitions]float64
	for k := range pooled {
		if len(pooled[k]) == 0 {
			return nil, fmt.Errorf("calibration target produced no %s intervals: the probes did not fire", calltree.TransitionName(k))
		}
		n = min(n, len(pooled[k]))
		median[k] = float64(calfit.Median(pooled[k]))
	}
	fmt.Fprintf(o.Log, "calibrate: %s: empty intervals' medians %v ns (%d each or more)\n", o.Mechanism, round(median), n)
	var fs []calfit.Shape
	for i, s := range shapes[1:] {
		fs = append(fs, calfit.Shape{Name: s.Name, Run: recorded[i+1], Uninstrumented: real[i+1]})
	}
	c, err := calfit.Judge(o.Mechanism, median, n, fs)
	c.Time = time.Now().UTC()
	c.Host, c.Kernel = machine()
	for _, f := range c.Fit {
		fmt.Fprintf(o.Log, "calibrate: %s %-10s body %7.0f ns: calibrated %10.0f ns (raw %10.0f) vs uninstrumented %10.0f ns (%+.1f%%)\n",
			o.Mechanism, f.Name, f.BodyNS, f.Calibrated, f.Raw, f.Uninstrumented, 100*f.Error())
	}
	if err != nil {
		// The refused calibration goes back with the error: its
		// residuals say what went wrong; it must not be stored.
		return c, fmt.Errorf("%w (the machine may be too busy; run trueprof calibrate again)", err)
	}
	fmt.Fprintf(o.Log, "calibrate: %s overheads %v ns, per call %.1f ns, resolution %.0f ns per call\n",
		o.Mechanism, round(c.Overhead), c.PerCall, c.Resolution)
	if o.Mechanism == "uprobe" {
		// The target's sites are emulated entries with return probes;
		// what other classes cost more is applied per site.
		sc, err := uprobe.SiteCosts()
		if err != nil {
			return nil, fmt.Errorf("measuring the uprobe site classes: %w", err)
		}
		c.Sites = &sc
		fmt.Fprintf(o.Log, "calibrate: uprobe per hit: entry %.0f ns emulated, %.0f ns single-stepped; exit %.0f ns return probe, %.0f ns RET probe, %.0f ns where a call returns\n",
			sc.EntryEmulated, sc.EntryStepped, sc.ExitReturn, sc.ExitRetInsn, sc.ExitCallSite)
	}
	return c, nil
}

// shapeRuns returns the recorded runs of the target's shapes, in order:
// the calls of cal_shape.
func shapeRuns(p *model.Profile, shapes int) ([]calfit.Run, error) {
	var out []calfit.Run
	forEachThread(p, func(evs []model.Event) {
		var cur *calfit.Run
		var start uint64
		for i, e := range evs {
			if cur != nil && i > 0 {
				cur.Count[calltree.Transition(evs[i-1].Entry, e.Entry)]++
			}
			name := functionName(p, e.Function)
			if cur != nil && e.Entry {
				cur.Calls++
				if name == "cal_leaf" {
					cur.Leaves++
				}
			}
			if name != "cal_shape" {
				continue
			}
			if e.Entry {
				out = append(out, calfit.Run{})
				cur, start = &out[len(out)-1], e.Time
				continue
			}
			if cur != nil {
				cur.Raw = float64(e.Time-start) - paused(p, e.PID, e.TID, start, e.Time)
				cur = nil
			}
		}
	})
	if len(out) != shapes {
		return nil, fmt.Errorf("calibration target recorded %d of its %d loops: the probes did not fire", len(out), shapes)
	}
	return out, nil
}

// paused returns the time the profiler stopped thread pid/tid between
// from and to (its Adjust records).
func paused(p *model.Profile, pid, tid uint32, from, to uint64) float64 {
	sum := 0.0
	for _, a := range p.Adjusts {
		if a.PID == pid && a.TID == tid && a.Time > from && a.Time <= to {
			sum += float64(min(a.Duration, a.Time-from))
		}
	}
	return sum
}

func round(v [trace.Transitions]float64) [trace.Transitions]float64 {
	for i := range v {
		v[i] = math.Round(v[i]*10) / 10
	}
	return v
}

// targetFlags are the C compiler's flags for the calibration target.
// Functions and loops are aligned to 64 bytes so that the copies of a
// function (target.c's cal_, ref_, ...) run at the same speed.
var targetFlags = []string{"-O1", "-fno-omit-frame-pointer", "-falign-functions=64", "-falign-loops=64"}

// build compiles the calibration target for the mechanism.
func build(ctx context.Context, dir, mech string) (string, error) {
	src := filepath.Join(dir, "target.c")
	if err := os.WriteFile(src, []byte(targetSource), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "target-"+mech)
	args := append(slices.Clone(targetFlags), "-o", bin, src)
	if mech == "hook" {
		args = append(args, "-finstrument-functions")
	}
	if out, err := exec.CommandContext(ctx, "cc", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the calibration target (a C compiler is required): %w\n%s", err, out)
	}
	return bin, nil
}

// recordTarget records one run of the target under the mechanism.
func recordTarget(ctx context.Context, dir, bin string, o Options, shapes []string) (*model.Profile, error) {
	ev, err := perf.ParseEvent("dummy")
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "calibrate.trace")
	cfg := record.Config{
		Output: out, Event: ev, Mode: trace.ModeContinuous, NoSampling: true, Mech: record.Mech(o.Mechanism),
		Command: append([]string{bin}, shapes...),
		Log:     o.Log, Stdout: io.Discard,
	}
	if o.Mechanism == "uprobe" {
		cfg.Trace = []string{"cal_*"}
	}
	if _, err := record.Run(ctx, cfg); err != nil {
		return nil, err
	}
	p, err := model.Open(out)
	if err != nil {
		return nil, err
	}
	if p.Err != nil {
		return nil, p.Err
	}
	return p, nil
}

// uninstrumented runs the plain target and returns the time it reports
// for each shape's loop.
func uninstrumented(ctx context.Context, bin string, shapes []string) ([]float64, error) {
	out, err := exec.CommandContext(ctx, bin, shapes...).Output()
	if err != nil {
		return nil, fmt.Errorf("running the calibration target: %w", err)
	}
	return parseTimes(string(out), len(shapes))
}

// isCal reports whether fn is one of the calibration functions.
func isCal(fn string) bool { return fn == "cal_outer" || fn == "cal_link" || fn == "cal_leaf" }

// Intervals returns, per transition kind, the durations between
// consecutive events of a thread while a calibration function is the
// current one, in the first loop of the target (the empty shape: the
// other loops' leaves do real work, and main's and cal_shape's intervals
// hold the loop's own).
func Intervals(p *model.Profile) [trace.Transitions][]uint64 {
	var out [trace.Transitions][]uint64
	forEachThread(p, func(evs []model.Event) {
		var stack []string
		loops := 0
		for i, e := range evs {
			name := functionName(p, e.Function)
			if i > 0 && loops == 1 {
				prev := evs[i-1]
				cur := ""
				if len(stack) > 0 {
					cur = stack[len(stack)-1]
				}
				if isCal(cur) && e.Time >= prev.Time {
					k := calltree.Transition(prev.Entry, e.Entry)
					out[k] = append(out[k], e.Time-prev.Time)
				}
			}
			if e.Entry {
				stack = append(stack, name)
				if name == "cal_shape" {
					loops++
				}
			} else if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	})
	return out
}

func forEachThread(p *model.Profile, fn func([]model.Event)) {
	by := map[[2]uint32][]model.Event{}
	for _, e := range p.Events {
		k := [2]uint32{e.PID, e.TID}
		by[k] = append(by[k], e)
	}
	for _, evs := range by {
		fn(evs)
	}
}

func functionName(p *model.Profile, loc uint32) string {
	f := p.Locations[loc].Frames
	return f[len(f)-1].Function
}

// machine names this machine for the stored calibration.
func machine() (host, kernel string) {
	host, _ = os.Hostname()
	return host, perf.KernelRelease()
}

// LoadOrMeasure returns this machine's stored calibration of
// o.Mechanism. When there is none it says so on notice, measures one with
// o, stores it and returns it: an instrumented profile is only as good as
// its calibration, so recording calibrates on first use. A measurement
// whose fit is refused (ErrBadFit) is returned with Refused set and not
// stored: reports then show raw times and say why.
func LoadOrMeasure(ctx context.Context, o Options, notice io.Writer) (*trace.Calibration, error) {
	c, err := Load(o.Mechanism)
	if errors.Is(err, ErrNotCalibrated) {
		fmt.Fprintf(notice, "trueprof: no %s calibration for this machine; measuring it now (see trueprof calibrate)\n", o.Mechanism)
		if c, err = Run(ctx, o); err == nil {
			err = Save(c)
		} else if errors.Is(err, ErrBadFit) && c != nil {
			// A busy machine must not fail the recording: it goes on
			// with the refused calibration, which reports name and
			// whose raw times they show; nothing is stored, so the
			// next recording measures again.
			fmt.Fprintf(notice, "trueprof: %s calibration refused: %s; this recording's reports show raw times\n", o.Mechanism, c.Refused)
			return c, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("calibrating %s: %w", o.Mechanism, err)
	}
	return c, nil
}

// ErrNotCalibrated is returned by Load when this machine has no stored
// calibration for the mechanism (or only one from another kernel).
var ErrNotCalibrated = errors.New("no calibration for this machine")

// Path is where calibrations are stored: one file per user, in
// trueprof's cache directory (cachefile.Dir), holding one entry per
// mechanism.
func Path() (string, error) {
	dir, err := cachefile.Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "calibration-"+runtime.GOARCH+".json"), nil
}

// Load returns the stored calibration of mech, if it was measured on this
// host and kernel.
func Load(mech string) (*trace.Calibration, error) {
	all, err := loadAll()
	if err != nil {
		return nil, err
	}
	c := all[mech]
	host, kernel := machine()
	if c == nil || c.Host != host || c.Kernel != kernel || outdated(c) {
		return nil, ErrNotCalibrated
	}
	return c, nil
}

// outdated reports whether a stored calibration was made by an older
// method, which is measured anew rather than used: a choice among
// statistics of empty intervals instead of a fit to validation shapes
// (it stored all zeros on some machines), or, for uprobes, no cost per
// probe-site class (a single-stepped site costs 20 times an emulated one,
// and one mean per call left most of it in the report).
func outdated(c *trace.Calibration) bool {
	return c.Statistic != "fit" || (c.Mechanism == "uprobe" && c.Sites == nil)
}

// Save stores c, replacing the previous calibration of its mechanism.
func Save(c *trace.Calibration) error {
	all, err := loadAll()
	if err != nil {
		all = map[string]*trace.Calibration{}
	}
	all[c.Mechanism] = c
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	path, err := Path()
	if err != nil {
		return err
	}
	return cachefile.Write(path, append(b, '\n'), 0o644)
}

func loadAll() (map[string]*trace.Calibration, error) {
	path, err := Path()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*trace.Calibration{}, nil
	}
	if err != nil {
		return nil, err
	}
	all := map[string]*trace.Calibration{}
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return all, nil
}
