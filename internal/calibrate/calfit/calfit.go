// Package calfit fits per-transition probe overheads to validation
// shapes (loops recorded with probes and timed without them) and judges
// the fit: each shape's residual, the resolution, refusal of a bad fit.
// Both the stored calibration (package calibrate, a separate target) and
// the in-run calibration (Collector, bursts the hook library runs in the
// recorded process itself) use it. docs/calibration.md explains the model.
//
//	c := calfit.NewCollector()
//	f := calfit.NewFunction(name)         // once per trueprof_cal_* function
//	c.Event(pid, tid, time, entry, f)     // for each of its events
//	cal := c.Calibration("hook")          // nil without bursts; Refused set on a bad fit
package calfit

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"trueprof/internal/trace"
)

// ErrBadFit is returned when no overheads reproduce the validation
// shapes.
var ErrBadFit = errors.New("the probe overheads do not fit the validation runs")

// Fit quality a calibration must reach: a shape is fitted badly when its
// calibrated time misses the uninstrumented one by more than
// maxShapeError of it and by more than maxUnexplained of the probe cost
// the fit removed (so that shapes dominated by probe cost, as short
// bodies under uprobes are, are judged by how much of that cost the fit
// explains).
const (
	maxShapeError  = 0.05
	maxUnexplained = 0.25
)

// Run is one recorded run of a validation shape's loop.
type Run struct {
	Raw    float64                   // ns from the loop's entry to its exit, less the profiler's pauses
	Count  [trace.Transitions]uint64 // intervals of each transition kind in it
	Calls  uint64                    // instrumented calls in the loop
	Leaves uint64                    // calls of the leaf, whose body is the shape's work
}

// Overhead returns the probe cost in the run under per-kind overheads oh.
func (r Run) Overhead(oh [trace.Transitions]float64) float64 {
	sum := 0.0
	for k, n := range r.Count {
		sum += float64(n) * oh[k]
	}
	return sum
}

// Shape is a validation shape's recorded run and its uninstrumented
// time, each as FastShape (or the stored calibration) chose it.
type Shape struct {
	Name           string
	Run            Run
	Uninstrumented float64 // ns
}

// Fit returns the per-transition overheads that best reproduce the
// uninstrumented times of the shapes: the least-squares solution of
// raw − Σ count·overhead = uninstrumented, each shape weighted by
// 1/uninstrumented so that short loops count as much as long ones. In a
// complete call tree every entry->entry interval has an exit->exit
// partner and every entry->exit an exit->entry one, so the runs pin down
// only the two sums EE+XX and EX+XE; each sum is split as median (the
// empty intervals' medians) splits it. A fit with a negative or zero
// overhead is an ErrBadFit.
func Fit(median [trace.Transitions]float64, shapes []Shape) ([trace.Transitions]float64, error) {
	var oh [trace.Transitions]float64
	share := func(a, b int) float64 {
		if median[a]+median[b] <= 0 {
			return 0.5
		}
		return median[a] / (median[a] + median[b])
	}
	sEE, sEX := share(trace.EntryEntry, trace.ExitExit), share(trace.EntryExit, trace.ExitEntry)
	// Normal equations of the weighted least squares in P = EE+XX and
	// Q = EX+XE.
	var aa, ab, bb, ay, by float64
	for _, s := range shapes {
		r := s.Run
		a := sEE*float64(r.Count[trace.EntryEntry]) + (1-sEE)*float64(r.Count[trace.ExitExit])
		b := sEX*float64(r.Count[trace.EntryExit]) + (1-sEX)*float64(r.Count[trace.ExitEntry])
		y := r.Raw - s.Uninstrumented
		w := 1 / (s.Uninstrumented * s.Uninstrumented)
		aa, ab, bb, ay, by = aa+w*a*a, ab+w*a*b, bb+w*b*b, ay+w*a*y, by+w*b*y
	}
	det := aa*bb - ab*ab
	if det <= 1e-12*aa*bb || aa == 0 || bb == 0 {
		return oh, fmt.Errorf("%w: the validation shapes do not separate the transition kinds", ErrBadFit)
	}
	pSum, qSum := (ay*bb-by*ab)/det, (aa*by-ab*ay)/det
	oh[trace.EntryEntry], oh[trace.ExitExit] = sEE*pSum, (1-sEE)*pSum
	oh[trace.EntryExit], oh[trace.ExitEntry] = sEX*qSum, (1-sEX)*qSum
	if pSum <= 0 || qSum <= 0 {
		return oh, fmt.Errorf("%w: fitted entry->entry + exit->exit %.1f ns, entry->exit + exit->entry %.1f ns (a probe cannot cost nothing)",
			ErrBadFit, pSum, qSum)
	}
	return oh, nil
}

// Judge fits the overheads of mech to shapes and returns the
// calibration with each shape's residual and the resolution. On a bad
// fit it returns the calibration too, with Refused saying why and every
// overhead zero (nothing may be subtracted), and an ErrBadFit error.
// median are the empty intervals' medians and n the fewest of them per
// kind.
func Judge(mech string, median [trace.Transitions]float64, n int, shapes []Shape) (*trace.Calibration, error) {
	oh, err := Fit(median, shapes)
	c := &trace.Calibration{Mechanism: mech, Statistic: "fit", Overhead: oh, Samples: n}
	// Each interval holds the end of one probe and the start of the next,
	// so the four kinds together hold every part of an entry probe and an
	// exit probe twice: a call costs half their sum (t_I + t_O).
	c.PerCall = (oh[trace.EntryEntry] + oh[trace.EntryExit] + oh[trace.ExitEntry] + oh[trace.ExitExit]) / 2
	var bad []string
	for _, s := range shapes {
		r := s.Run
		f := trace.FitShape{Name: s.Name, Calls: r.Calls, Uninstrumented: s.Uninstrumented, Raw: r.Raw,
			Calibrated: r.Raw - r.Overhead(oh)}
		if r.Leaves > 0 {
			f.BodyNS = s.Uninstrumented / float64(r.Leaves)
		}
		c.Fit = append(c.Fit, f)
		miss := math.Abs(f.Calibrated - f.Uninstrumented)
		if miss > maxShapeError*f.Uninstrumented && miss > maxUnexplained*(f.Raw-f.Calibrated) {
			bad = append(bad, fmt.Sprintf("shape %s residual %+.1f%%", s.Name, 100*f.Error()))
		}
	}
	c.Resolution = resolution(c.Fit)
	switch {
	case err != nil && len(bad) > 0:
		// The shapes first: they are what a reader can check.
		err = fmt.Errorf("%w: %s; %s", ErrBadFit, strings.Join(bad, ", "), strings.TrimPrefix(err.Error(), ErrBadFit.Error()+": "))
	case len(bad) > 0:
		err = fmt.Errorf("%w: %s", ErrBadFit, strings.Join(bad, ", "))
	}
	if err != nil {
		c.Refused = strings.TrimPrefix(err.Error(), ErrBadFit.Error()+": ")
		c.Overhead, c.PerCall, c.Resolution = [trace.Transitions]float64{}, 0, 0
		return c, err
	}
	return c, nil
}

// resolution returns the shortest leaf body from which up every shape of
// fit is reproduced to within 10%: shorter calls were not shown to be
// measurable. A fit can hold with shapes further off (each miss a small
// part of the probe cost removed, as under uprobes on bodies shorter than
// a probe), and a shape off by more than 10% makes calls as short as its
// body estimates, even where a shorter shape happened to come closer
// (python3's zlib under uprobes: call-heavy's 39 ns body -4.0%,
// leaf-heavy's longer one -72%). When the longest shape is off too, no
// call as short as it was shown measurable, and the resolution is that
// body. 0 without bodies.
func resolution(fit []trace.FitShape) float64 {
	var shapes []trace.FitShape
	for _, f := range fit {
		if f.BodyNS > 0 {
			shapes = append(shapes, f)
		}
	}
	slices.SortFunc(shapes, func(a, b trace.FitShape) int { return cmp.Compare(b.BodyNS, a.BodyNS) }) // longest first
	if len(shapes) == 0 {
		return 0
	}
	res := shapes[0].BodyNS // the longest, even if it misses
	for _, f := range shapes {
		if math.Abs(f.Error()) > 0.1 {
			break
		}
		res = f.BodyNS
	}
	return res
}

// fastBand is how much slower than the fastest run of its kind a run
// of a validation shape may be and still count as run at the machine's
// full speed (FastShape).
const fastBand = 0.05

// FastShape returns shape name's run for the fit from its plain loop
// times (ns) and recorded runs (the same transitions in each): of each
// kind, the median of the runs within fastBand of the kind's fastest.
// On this project's shared VM a burst's loops run at two speeds 38%
// apart, phases of a few loops each (another guest, or the recorder,
// on the core's other hyperthread), and a preempted or interrupted loop
// is slower by the time it lost: the fastest runs of each kind are the
// loops that ran alone, and their median rather than their minimum keeps
// one lucky run from deciding. A shape whose recorded loop is slower or
// faster than the fitted overheads say stays so at full speed: its
// residual remains. False without runs of either kind or with a plain
// time of zero.
func FastShape(name string, plain []float64, runs []Run) (Shape, bool) {
	if len(plain) == 0 || len(runs) == 0 {
		return Shape{}, false
	}
	raw := make([]float64, len(runs))
	for i, r := range runs {
		raw[i] = r.Raw
	}
	s := Shape{Name: name, Run: runs[0], Uninstrumented: fastMedian(plain)}
	s.Run.Raw = fastMedian(raw)
	return s, s.Uninstrumented > 0
}

// fastMedian returns the median of the times v (not empty) within
// fastBand of their minimum.
func fastMedian(v []float64) float64 {
	limit := slices.Min(v) * (1 + fastBand)
	var fast []float64
	for _, x := range v {
		if x <= limit {
			fast = append(fast, x)
		}
	}
	return Median(fast)
}

// Number is what Median takes the median of: durations, counts, times.
type Number interface {
	~int | ~int32 | ~int64 | ~uint | ~uint32 | ~uint64 | ~float32 | ~float64
}

// Median returns the median of v, the one median of the calibration and
// of the bench programs: its middle value, or the mean of its two middle
// ones for an even count (rounded down for integers); 0 when v is empty.
// v is left as it was.
func Median[T Number](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
