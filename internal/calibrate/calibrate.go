// Package calibrate measures what probes cost on this machine, so that
// reports can remove that cost from instrumented times (probe
// calibration, t_exact = t_rough − t_I − m·t_O, per transition kind
// EE/EX/XE/XX; docs/architecture.md).
//
// Run builds a bundled target of empty functions calling each other,
// records it under a probe mechanism in batches, and takes a statistic of
// the intervals between consecutive events of each transition kind. A
// validation run, whose functions do real work, then shows which
// statistic (minimum, median or mean) makes the calibrated time closest
// to the uninstrumented time, and that one is kept. docs/calibration.md
// explains the model.
//
//	c, err := calibrate.Run(ctx, calibrate.Options{Mechanism: "hook"})
//	err = calibrate.Save(c)
//	c, err = calibrate.Load("hook") // in later recordings
//
// LoadOrMeasure does both on first use, as record does.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
	"trueprof/internal/trace"
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
// otherwise.
const DefaultBatches = 5

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
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// Run measures the probe cost of o.Mechanism on this machine.
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

	var pooled [trace.Transitions][]uint64
	for b := 0; b < o.Batches; b++ {
		p, err := recordTarget(ctx, dir, bin, o, 0)
		if err != nil {
			return nil, err
		}
		iv := Intervals(p)
		for k := range pooled {
			pooled[k] = append(pooled[k], iv[k]...)
		}
	}
	n := len(pooled[0])
	for k := range pooled {
		if len(pooled[k]) == 0 {
			return nil, fmt.Errorf("calibration target produced no %s intervals: the probes did not fire", kindName(k))
		}
		n = min(n, len(pooled[k]))
	}
	candidates := map[string][trace.Transitions]float64{}
	for name, stat := range statistics {
		var v [trace.Transitions]float64
		for k := range pooled {
			v[k] = stat(pooled[k])
		}
		candidates[name] = v
	}

	// Validation: real work in cal_leaf, timed by the program itself
	// without probes, then recorded with them. Plain and instrumented runs
	// alternate and the minimum of each is compared, so that load from
	// other processes, which only ever adds time, cancels out.
	// Validate at the granularity the mechanism is for: hooks on calls of
	// a microsecond, uprobes on coarse calls of about 50 µs.
	const reps = 5
	work, valRounds := 200, max(o.Rounds/20, 200)
	if o.Mechanism == "uprobe" {
		work, valRounds = 20000, 100
	}
	plain, err := build(ctx, dir, "plain")
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(candidates))
	for name := range candidates {
		names = append(names, name)
	}
	slices.Sort(names)
	real := math.Inf(1)
	got := map[string]float64{}
	for _, name := range names {
		got[name] = math.Inf(1)
	}
	for range reps {
		ns, err := uninstrumented(ctx, plain, valRounds, work)
		if err != nil {
			return nil, err
		}
		real = min(real, ns)
		p, err := recordTarget(ctx, dir, bin, Options{Mechanism: o.Mechanism, Rounds: valRounds, Log: o.Log}, work)
		if err != nil {
			return nil, err
		}
		if len(p.Events) == 0 {
			return nil, errors.New("the probes did not fire in the validation run")
		}
		for _, name := range names {
			got[name] = min(got[name], calibratedOuter(p, candidates[name]))
		}
	}
	best, bestErr := "", math.Inf(1)
	for _, name := range names {
		e := math.Abs(got[name]-real) / real
		fmt.Fprintf(o.Log, "calibrate: %-6s overheads %v ns: calibrated %.0f ns vs uninstrumented %.0f ns (%+.1f%%)\n",
			name, round(candidates[name]), got[name], real, 100*(got[name]-real)/real)
		if e < bestErr {
			best, bestErr = name, e
		}
	}
	c := &trace.Calibration{
		Mechanism: o.Mechanism,
		Time:      time.Now().UTC(),
		Statistic: best,
		Overhead:  candidates[best],
		Samples:   n,
	}
	c.Host, c.Kernel = machine()
	// Each interval holds the end of one probe and the start of the next,
	// so the four kinds together hold every part of an entry probe and an
	// exit probe twice: a call costs half their sum (t_I + t_O).
	c.PerCall = (c.Overhead[trace.EntryEntry] + c.Overhead[trace.EntryExit] + c.Overhead[trace.ExitEntry] + c.Overhead[trace.ExitExit]) / 2
	return c, nil
}

func round(v [trace.Transitions]float64) [trace.Transitions]float64 {
	for i := range v {
		v[i] = math.Round(v[i]*10) / 10
	}
	return v
}

// statistics are the candidate estimators of a transition's overhead.
var statistics = map[string]func([]uint64) float64{
	"min": func(v []uint64) float64 { return float64(slices.Min(v)) },
	"median": func(v []uint64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return float64(s[len(s)/2])
	},
	// mean of the central 98%: robust to the rare interval that
	// includes an interrupt or a preemption.
	"mean": func(v []uint64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		cut := len(s) / 100
		s = s[cut : len(s)-cut]
		sum := 0.0
		for _, x := range s {
			sum += float64(x)
		}
		return sum / float64(len(s))
	},
}

func kindName(k int) string {
	return [...]string{"entry->entry", "entry->exit", "exit->entry", "exit->exit"}[k]
}

// build compiles the calibration target for the mechanism.
func build(ctx context.Context, dir, mech string) (string, error) {
	src := filepath.Join(dir, "target.c")
	if err := os.WriteFile(src, []byte(targetSource), 0o644); err != nil {
		return "", err
	}
	args := []string{"-O1", "-fno-omit-frame-pointer", "-o", filepath.Join(dir, "target-"+mech), src}
	if mech == "hook" {
		args = append(args, "-finstrument-functions")
	}
	if out, err := exec.CommandContext(ctx, "cc", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the calibration target (a C compiler is required): %w\n%s", err, out)
	}
	return args[3], nil
}

// recordTarget records one run of the target under the mechanism.
func recordTarget(ctx context.Context, dir, bin string, o Options, work int) (*model.Profile, error) {
	ev, err := perf.ParseEvent("dummy")
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "calibrate.trace")
	cfg := record.Config{
		Output: out, Event: ev, Mode: trace.ModeContinuous, NoSampling: true, Mech: record.Mech(o.Mechanism),
		Command: []string{bin, strconv.Itoa(o.Rounds), strconv.Itoa(work)},
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
// for its loop.
func uninstrumented(ctx context.Context, bin string, rounds, work int) (float64, error) {
	out, err := exec.CommandContext(ctx, bin, strconv.Itoa(rounds), strconv.Itoa(work)).Output()
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		return 0, fmt.Errorf("calibration target printed %q", out)
	}
	return ns, nil
}

// isCal reports whether fn is one of the calibration functions.
func isCal(fn string) bool { return fn == "cal_outer" || fn == "cal_leaf" }

// Intervals returns, per transition kind, the durations between
// consecutive events of a thread while a calibration function is the
// current one (the intervals of main's loop are left out: they hold real
// work).
func Intervals(p *model.Profile) [trace.Transitions][]uint64 {
	var out [trace.Transitions][]uint64
	forEachThread(p, func(evs []model.Event) {
		var stack []string
		for i, e := range evs {
			name := functionName(p, e.Function)
			if i > 0 {
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
			} else if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	})
	return out
}

// calibratedOuter is the total calibrated time of cal_outer's calls: raw
// time minus the overhead of the five intervals inside each call.
func calibratedOuter(p *model.Profile, oh [trace.Transitions]float64) float64 {
	inner := oh[trace.EntryEntry] + 2*oh[trace.EntryExit] + oh[trace.ExitEntry] + oh[trace.ExitExit]
	total := 0.0
	forEachThread(p, func(evs []model.Event) {
		var start uint64
		for _, e := range evs {
			if functionName(p, e.Function) != "cal_outer" {
				continue
			}
			if e.Entry {
				start = e.Time
			} else if start != 0 {
				total += max(float64(e.Time-start)-inner, 0)
				start = 0
			}
		}
	})
	return total
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
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		b := make([]byte, 0, len(u.Release))
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		kernel = string(b)
	}
	return host, kernel
}

// LoadOrMeasure returns this machine's stored calibration of
// o.Mechanism. When there is none it says so on notice, measures one with
// o, stores it and returns it: an instrumented profile is only as good as
// its calibration, so recording calibrates on first use.
func LoadOrMeasure(ctx context.Context, o Options, notice io.Writer) (*trace.Calibration, error) {
	c, err := Load(o.Mechanism)
	if errors.Is(err, ErrNotCalibrated) {
		how := " (see trueprof calibrate)"
		if d, full := o.withDefaults(), (Options{Mechanism: o.Mechanism}).withDefaults(); d.Batches*d.Rounds < full.Batches*full.Rounds {
			// A quick calibration is a real one with fewer intervals
			// (their count is in every report's header); say so and how
			// to replace it.
			how = fmt.Sprintf(", quickly: %d × %d calls instead of %d × %d (trueprof calibrate replaces it with the full measurement)",
				d.Batches, d.Rounds, full.Batches, full.Rounds)
		}
		fmt.Fprintf(notice, "trueprof: no %s calibration for this machine; measuring it now%s\n", o.Mechanism, how)
		if c, err = Run(ctx, o); err == nil {
			err = Save(c)
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

// Path is where calibrations are stored: one file per user, holding one
// entry per mechanism.
func Path() string {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "trueprof", "calibration-"+runtime.GOARCH+".json")
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
	if c == nil || c.Host != host || c.Kernel != kernel {
		return nil, ErrNotCalibrated
	}
	return c, nil
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
	path := Path()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadAll() (map[string]*trace.Calibration, error) {
	b, err := os.ReadFile(Path())
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*trace.Calibration{}, nil
	}
	if err != nil {
		return nil, err
	}
	all := map[string]*trace.Calibration{}
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("%s: %w", Path(), err)
	}
	return all, nil
}
