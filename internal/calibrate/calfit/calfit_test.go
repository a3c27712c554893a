package calfit

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/trace"
)

// shapeSpec is a validation loop: rounds of outer, fanout calls each,
// chains of depth links, leaves of body ns.
type shapeSpec struct {
	name                  string
	rounds, fanout, depth int
	body                  float64
}

// specs are internal/calibrate's validation shapes.
var specs = []shapeSpec{
	{"leaf-heavy", 150, 8, 0, 1000},
	{"call-heavy", 6000, 1, 8, 100},
	{"mixed", 1000, 3, 2, 300},
	{"long", 50, 2, 0, 10000},
}

// synthetic returns the shapes' runs under overheads oh: their
// transition counts and raw times.
func synthetic(oh [trace.Transitions]float64) []Shape {
	var out []Shape
	for _, s := range specs {
		var r Run
		nEE := uint64(s.rounds * (1 + s.fanout*s.depth))
		nEX := uint64(s.rounds * s.fanout)
		r.Count = [trace.Transitions]uint64{nEE, nEX, nEX, nEE}
		r.Leaves = nEX
		real := float64(s.rounds*s.fanout) * s.body
		r.Raw = real + r.Overhead(oh)
		out = append(out, Shape{Name: s.name, Run: r, Uninstrumented: real})
	}
	return out
}

// TestFit recovers known overheads from synthetic runs of the shapes'
// transition counts, and refuses shapes that cannot separate the kinds
// and a fit whose overheads come out negative.
func TestFit(t *testing.T) {
	want := [trace.Transitions]float64{10, 30, 20, 5}
	median := [trace.Transitions]float64{2, 6, 4, 1} // the same splits: EE/(EE+XX) = 2/3, EX/(EX+XE) = 3/5
	shapes := synthetic(want)
	got, err := Fit(median, shapes)
	if err != nil {
		t.Fatal(err)
	}
	for k := range got {
		if math.Abs(got[k]-want[k]) > 1e-6 {
			t.Errorf("overheads %v, want %v", got, want)
			break
		}
	}
	// Shapes all of one kind (chains only) cannot tell EE+XX from EX+XE.
	if _, err := Fit(median, []Shape{shapes[1], shapes[1]}); !errors.Is(err, ErrBadFit) {
		t.Errorf("fit of identical shapes: err %v, want ErrBadFit", err)
	}
	// Raw times below the uninstrumented ones: overheads would be negative.
	for i := range shapes {
		shapes[i].Run.Raw = shapes[i].Uninstrumented * 0.9
	}
	if oh, err := Fit(median, shapes); !errors.Is(err, ErrBadFit) {
		t.Errorf("fit of faster-than-real runs: overheads %v, err %v, want ErrBadFit", oh, err)
	}
}

// TestJudge: a consistent fit keeps its overheads, residuals and a
// resolution (the shortest body reproduced); a shape no overheads
// explain is refused by name, and the refused calibration subtracts
// nothing.
func TestJudge(t *testing.T) {
	oh := [trace.Transitions]float64{10, 30, 20, 5}
	median := [trace.Transitions]float64{2, 6, 4, 1}
	c, err := Judge("hook", median, 100, synthetic(oh))
	if err != nil {
		t.Fatal(err)
	}
	if c.Refused != "" || math.Abs(c.PerCall-32.5) > 1e-6 || len(c.Fit) != len(specs) {
		t.Fatalf("calibration %+v: want 32.5 ns per call, %d shapes, not refused", c, len(specs))
	}
	if c.Resolution != 100 {
		t.Errorf("resolution %v ns, want the call-heavy body, 100", c.Resolution)
	}
	shapes := synthetic(oh)
	shapes[2].Run.Raw *= 1.5 // mixed took half as long again: no overheads explain it
	c, err = Judge("hook", median, 100, shapes)
	if !errors.Is(err, ErrBadFit) {
		t.Fatalf("err %v, want ErrBadFit", err)
	}
	if !strings.HasPrefix(c.Refused, "shape ") || !strings.Contains(c.Refused, " residual ") || c.Overhead != [trace.Transitions]float64{} || c.PerCall != 0 {
		t.Errorf("refused calibration %+v: want a shape named and nothing subtracted", c)
	}
}

// TestResolution: the shortest body from which up every shape is
// reproduced to within 10%, or the longest body when it is not.
func TestResolution(t *testing.T) {
	shape := func(body, miss float64) trace.FitShape {
		return trace.FitShape{BodyNS: body, Uninstrumented: 1000, Calibrated: 1000 * (1 + miss), Raw: 5000}
	}
	for _, tc := range []struct {
		fit  []trace.FitShape
		want float64
	}{
		{[]trace.FitShape{shape(500, 0.02), shape(50, -0.08), shape(150, 0.03), shape(5000, 0.01)}, 50},
		{[]trace.FitShape{shape(500, 0.02), shape(50, -0.2), shape(150, 0.03), shape(5000, 0.01)}, 150},
		// A shorter shape within 10% does not lower it past a longer one
		// off by more (python3's zlib under uprobes).
		{[]trace.FitShape{shape(500, -0.72), shape(50, -0.04), shape(150, 0.31), shape(5000, -0.07)}, 5000},
		{[]trace.FitShape{shape(500, 0.12), shape(50, -0.2), shape(150, 0.3), shape(5000, -0.15)}, 5000},
		{[]trace.FitShape{shape(0, 0)}, 0},
	} {
		if got := resolution(tc.fit); got != tc.want {
			t.Errorf("resolution of %+v: %v ns, want %v", tc.fit, got, tc.want)
		}
	}
}

// burst feeds c one burst of the hook library's calibration functions
// on thread 1/1, starting at *now: each shape's plain loop takes its
// uninstrumented time, and its recorded loop that plus the overheads
// oh at each transition (ns); lost, when not nil, gives the time each
// loop loses besides (a preemption, ns) by repetition, shape and kind.
// It returns the burst's span.
func burst(c *Collector, now *uint64, oh [trace.Transitions]float64, reps int, lost func(rep int, shape string, recorded bool) float64) (start, end uint64) {
	burstEvents(now, oh, reps, lost, func(time uint64, entry bool, name string) {
		if s, done := c.Event(1, 1, time, entry, NewFunction(name)); done {
			start, end = s, time
		}
	})
	return start, end
}

// burstEvents passes the events of burst's burst to emit: their time,
// whether an entry, and their function's name.
func burstEvents(now *uint64, oh [trace.Transitions]float64, reps int, lost func(rep int, shape string, recorded bool) float64, emit func(time uint64, entry bool, name string)) {
	off := func(rep int, shape string, recorded bool) uint64 {
		if lost == nil {
			return 0
		}
		return uint64(lost(rep, shape, recorded))
	}
	prevEntry := true
	ev := func(entry bool, name string, body float64) {
		k := calltree.Transition(prevEntry, entry)
		*now += uint64(oh[k] + body)
		prevEntry = entry
		emit(*now, entry, Prefix+name)
	}
	loop := func(s shapeSpec, withBody bool, rep int) {
		ev(true, "shape_"+strings.ReplaceAll(s.name, "-", "_"), 0)
		for range s.rounds {
			ev(true, "outer", 0)
			for range s.fanout {
				for range s.depth {
					ev(true, "link", 0)
				}
				ev(true, "leaf", 0)
				b := 0.0
				if withBody {
					b = s.body
				}
				ev(false, "leaf", b)
				for range s.depth {
					ev(false, "link", 0)
				}
			}
			ev(false, "outer", 0)
		}
		*now += off(rep, s.name, true)
		ev(false, "shape_"+strings.ReplaceAll(s.name, "-", "_"), 0)
	}
	ev(true, "burst", 0)
	loop(shapeSpec{"empty", 200, 2, 0, 0}, false, -1)
	for rep := range reps {
		for _, s := range specs {
			name := "ref_" + strings.ReplaceAll(s.name, "-", "_")
			ev(true, name, 0)
			// The plain loop: its time, with no events inside.
			*now += uint64(float64(s.rounds*s.fanout)*s.body) + off(rep, s.name, false)
			ev(false, name, 0)
			loop(s, true, rep)
		}
	}
	ev(false, "burst", 0)
}

// BenchmarkCollectorEvent replays the events of a burst (8 repetitions
// of the shapes) into a collector as the recorder passes them, each
// function parsed once (the resolver does it per location).
func BenchmarkCollectorEvent(b *testing.B) {
	type event struct {
		time  uint64
		entry bool
		f     *Function
	}
	var events []event
	funcs := map[string]*Function{}
	now := uint64(1000)
	burstEvents(&now, [trace.Transitions]float64{9, 24, 26, 8}, 8, nil, func(time uint64, entry bool, name string) {
		if funcs[name] == nil {
			funcs[name] = NewFunction(name)
		}
		events = append(events, event{time, entry, funcs[name]})
	})
	for b.Loop() {
		c := NewCollector()
		for _, e := range events {
			c.Event(1, 1, e.time, e.entry, e.f)
		}
		if c.Bursts() != 1 {
			b.Fatalf("%d bursts, want 1", c.Bursts())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}

// TestCollectorFitsBursts: events of the calibration functions, as the
// hook library emits them, give back the overheads they were made with,
// each shape's uninstrumented time and the burst's span.
func TestCollectorFitsBursts(t *testing.T) {
	oh := [trace.Transitions]float64{9, 24, 26, 8}
	c := NewCollector()
	if c.Calibration("hook") != nil {
		t.Fatal("a calibration without bursts")
	}
	now := uint64(1000)
	first := now
	start, end := burst(c, &now, oh, 2, nil)
	if start <= first || end != now || c.Bursts() != 1 {
		t.Errorf("burst span [%d, %d] of [%d, %d], %d bursts", start, end, first, now, c.Bursts())
	}
	if c.Active(1, 1) {
		t.Error("thread still in a burst after its end")
	}
	cal := c.Calibration("hook")
	if cal == nil || cal.Refused != "" {
		t.Fatalf("calibration %+v", cal)
	}
	if cal.Source != "in-run" || cal.Bursts != 1 || len(cal.Fit) != len(specs) {
		t.Errorf("source %q, %d bursts, %d shapes", cal.Source, cal.Bursts, len(cal.Fit))
	}
	for k := range oh {
		// The empty loop's intervals split the sums exactly here;
		// integer nanoseconds leave a rounding error.
		if math.Abs(cal.Overhead[k]-oh[k]) > 0.6 {
			t.Errorf("overheads %v, want %v", cal.Overhead, oh)
			break
		}
	}
	for _, f := range cal.Fit {
		if math.Abs(f.Error()) > 0.01 || f.Calls == 0 || f.BodyNS <= 0 {
			t.Errorf("shape %+v: residual %.3f", f, f.Error())
		}
	}
	// A pause inside a loop is not its time; drops spoil the run.
	c.Event(2, 2, 10, true, NewFunction(Prefix+"burst"))
	c.Event(2, 2, 20, true, NewFunction(Prefix+"ref_mixed"))
	if !c.Active(2, 2) {
		t.Error("thread 2 not in its burst")
	}
	c.Adjust(2, 2, 5, 0)
	c.Event(2, 2, 30, false, NewFunction(Prefix+"ref_mixed"))
	if p := c.plain["mixed"]; p[len(p)-1] != 5 {
		t.Errorf("plain mixed loop %v ns, want 10 less the 5 ns pause", p[len(p)-1])
	}
}

// TestCollectorUnderLoad: loops that lost time, plain or recorded, in
// a third of the repetitions of every shape (a preemption) and in most
// of the others (a slow phase of the machine, 38% longer, alternating
// between the plain and the recorded loop as this project's VM does) do
// not spoil the fit, while a shape whose recorded loop is slower than
// the overheads explain in every repetition still has the fit refused.
func TestCollectorUnderLoad(t *testing.T) {
	oh := [trace.Transitions]float64{9, 24, 26, 8}
	time := map[string]float64{}
	for _, s := range specs {
		time[s.name] = float64(s.rounds*s.fanout) * s.body
	}
	disturbed := func(rep int, shape string, recorded bool) float64 {
		switch {
		case rep%3 == 0 && recorded == (rep%2 == 0):
			return 2e6 // a slice of another process
		case rep > 5 && recorded == (rep%2 == 1):
			return 0.38 * time[shape]
		}
		return 0
	}
	c := NewCollector()
	now := uint64(1000)
	burst(c, &now, oh, 8, disturbed)
	burst(c, &now, oh, 8, disturbed)
	cal := c.Calibration("hook")
	if cal.Refused != "" {
		t.Fatalf("refused under load: %s", cal.Refused)
	}
	for _, f := range cal.Fit {
		if math.Abs(f.Error()) > 0.01 {
			t.Errorf("shape %s: residual %.3f", f.Name, f.Error())
		}
	}
	c = NewCollector()
	slowMixed := func(rep int, shape string, recorded bool) float64 {
		if shape == "mixed" && recorded {
			return 0.3 * time[shape]
		}
		return disturbed(rep, shape, recorded)
	}
	burst(c, &now, oh, 8, slowMixed)
	cal = c.Calibration("hook")
	// The least squares spread mixed's excess over the shapes: the one
	// named may be another, but the fit is refused.
	if !strings.Contains(cal.Refused, " residual ") || cal.PerCall != 0 {
		t.Errorf("a shape the overheads do not explain: calibration %+v, want refused naming a shape", cal)
	}
}

// TestFastShape: of each kind, the median of the runs within 5% of the
// fastest; a shape needs runs of both kinds.
func TestFastShape(t *testing.T) {
	plain := []float64{100000, 138000, 100500, 99800, 3e6, 101000, 137000}
	var runs []Run
	for _, raw := range []float64{140000, 105000, 104900, 4e6, 105300, 145000, 105100} {
		runs = append(runs, Run{Raw: raw, Calls: 7})
	}
	s, ok := FastShape("mixed", plain, runs)
	// Fast plain runs 99800, 100000, 100500, 101000; recorded 104900,
	// 105000, 105100, 105300.
	if !ok || s.Name != "mixed" || s.Uninstrumented != 100250 || s.Run.Raw != 105050 || s.Run.Calls != 7 {
		t.Errorf("shape %+v: want plain 100250 and recorded 105050 ns (the fast runs' medians)", s)
	}
	if _, ok := FastShape("x", nil, runs); ok {
		t.Error("a shape without plain runs")
	}
	if _, ok := FastShape("x", plain, nil); ok {
		t.Error("a shape without recorded runs")
	}
}

// TestMedian takes the median of odd and even counts of floats,
// intervals and durations, leaving the values in their order, and of
// nothing.
func TestMedian(t *testing.T) {
	floats := []float64{3, 1, 2.5, 10}
	if got := Median(floats); got != 2.75 || floats[0] != 3 {
		t.Errorf("Median(3 1 2.5 10) = %v (values now %v), want 2.75", got, floats)
	}
	if got := Median([]uint64{7, 1, 100}); got != 7 {
		t.Errorf("Median(7 1 100) = %v, want 7", got)
	}
	if got := Median([]uint64{8, 1, 100, 3}); got != 5 {
		t.Errorf("Median(8 1 100 3) = %v, want 5 (of 3 and 8, rounded down)", got)
	}
	if got := Median([]time.Duration{time.Second, time.Millisecond}); got != 500500*time.Microsecond {
		t.Errorf("Median(1s 1ms) = %v, want 500.5ms", got)
	}
	if got := Median([]float64(nil)); got != 0 {
		t.Errorf("Median() = %v, want 0", got)
	}
}
