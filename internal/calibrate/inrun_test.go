package calibrate

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"

	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/calltree"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// TestPairedShape: each probed run is compared with the plain run beside
// it, so that a machine whose speed drifts between runs (here by 20%)
// still gives the probes' cost, which the fastest runs of each kind
// would not: the fastest plain run (80) and the fastest probed one (130)
// differ by 50, the probes cost 30.
func TestPairedShape(t *testing.T) {
	var pairs []pairedRun
	for _, plain := range []float64{100, 120, 80, 110, 120} {
		pairs = append(pairs, pairedRun{run: calfit.Run{Raw: plain + 30, Calls: 7}, plain: plain})
	}
	s, ok := pairedShape("mixed", pairs)
	if !ok {
		t.Fatal("no shape")
	}
	if s.Name != "mixed" || s.Uninstrumented != 110 || s.Run.Raw != 140 || s.Run.Calls != 7 {
		t.Errorf("shape %+v: want uninstrumented 110 (the median plain run), raw 140 (30 more)", s)
	}
	if _, ok := pairedShape("long", nil); ok {
		t.Error("a shape without runs")
	}
}

// TestUprobeInRunWithoutBurst: a calibration whose bursts all failed is
// refused, saying why, with nothing to subtract.
func TestUprobeInRunWithoutBurst(t *testing.T) {
	u := NewUprobeInRun()
	u.errs = append(u.errs, "building the calibration target (a C compiler is required): exec: \"cc\": not found")
	c := u.Calibration()
	if c.Source != "in-run" || c.Mechanism != "uprobe" || c.PerCall != 0 || c.Overhead != ([trace.Transitions]float64{}) {
		t.Errorf("calibration %+v: want an in-run uprobe calibration subtracting nothing", c)
	}
	if !strings.Contains(c.Refused, "no calibration burst completed") || !strings.Contains(c.Refused, "C compiler") {
		t.Errorf("refused %q: want the reason and the bursts' errors", c.Refused)
	}
}

// TestUprobeInRun runs two bursts, as a recording does at its start and
// end, into an empty cache directory (the target is built there): the fit
// has every overhead positive and each shape's residual, and the site
// classes cost what their mechanisms must: a single-stepped entry or a
// RET-instruction exit several times an emulated entry or a return
// probe.
func TestUprobeInRun(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireCommand(t, "cc")
	if err := features.HaveBPFLinkUprobeMulti(); err != nil {
		testutil.Missing(t, "BPF uprobe_multi: "+err.Error())
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	// A busy machine may refuse a fit, as it may a stored calibration's;
	// the next recording calibrates again. Three refusals fail.
	var c *trace.Calibration
	for try := 1; ; try++ {
		u := NewUprobeInRun()
		for range 2 {
			start := time.Now()
			if err := u.Burst(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Logf("burst: %v", time.Since(start).Round(time.Millisecond))
		}
		c = u.Calibration()
		if c.Refused == "" {
			break
		}
		if c.PerCall != 0 || c.Sites != nil || !strings.Contains(c.Refused, "shape") {
			t.Errorf("refused calibration %+v: want no cost and the shapes named", c)
		}
		t.Logf("try %d refused: %s", try, c.Refused)
		if try == 3 {
			t.Fatalf("three calibrations in a row refused, the last: %s", c.Refused)
		}
	}
	if c.Source != "in-run" || c.Bursts != 2 || c.Mechanism != "uprobe" || c.Statistic != "fit" {
		t.Errorf("calibration %+v: want an in-run uprobe fit of 2 bursts", c)
	}
	for k, o := range c.Overhead {
		if o <= 0 {
			t.Errorf("%s overhead %.2f ns: a probe cannot cost nothing", calltree.TransitionName(k), o)
		}
	}
	if len(c.Fit) != len(inRunShapes()) || c.Resolution <= 0 {
		t.Errorf("%d shapes, resolution %.0f ns: want %d shapes and a resolution", len(c.Fit), c.Resolution, len(inRunShapes()))
	}
	sc := c.Sites
	if sc == nil {
		t.Fatal("no site costs")
	}
	t.Logf("overheads %.0f ns; per hit: entry %.0f ns emulated, %.0f ns stepped (%.0f ns of it in the caller); exit %.0f ns return probe, %.0f ns RET probe",
		c.Overhead, sc.EntryEmulated, sc.EntryStepped, sc.EntrySteppedCaller, sc.ExitReturn, sc.ExitRetInsn)
	// The callee's interval holds the single-step, most of the extra
	// cost: what lies in the caller's is a fraction of it.
	if extra := sc.EntryStepped - sc.EntryEmulated; sc.EntrySteppedCaller < 0 || sc.EntrySteppedCaller > extra/4 {
		t.Errorf("site costs %+v: the caller's part of a stepped entry's extra %.0f ns is outside 0..%.0f", sc, extra, extra/4)
	}
	if sc.EntryEmulated != c.Overhead[trace.EntryEntry] || sc.ExitReturn != c.Overhead[trace.ExitExit] {
		t.Errorf("site costs %+v: the fitted class's entry and exit are its entry->entry and exit->exit overheads %v", sc, c.Overhead)
	}
	// Measured here: about 0.5 µs emulated and 0.2 µs for the return
	// trampoline, 13-17 µs single-stepped.
	if sc.EntryStepped < 3*sc.EntryEmulated || sc.ExitRetInsn < 3*sc.ExitReturn {
		t.Errorf("site costs %+v: single-stepped sites must cost several times the others", sc)
	}
}

// TestUprobeInRunWithoutCallSites: a target whose csite_leaf cannot be
// probed at its callers (its address in data here; another compiler's
// code after its calls in the field) still calibrates the other classes:
// the call sites' costs are left out, not the burst.
func TestUprobeInRunWithoutCallSites(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireCommand(t, "cc")
	if err := features.HaveBPFLinkUprobeMulti(); err != nil {
		testutil.Missing(t, "BPF uprobe_multi: "+err.Error())
	}
	src := strings.Replace(targetSource, "SHAPE(csite)", "SHAPE(csite)\nvoid (*volatile csite_named)(void) = csite_leaf;", 1)
	if src == targetSource {
		t.Fatal("target.c has no SHAPE(csite)")
	}
	u := NewUprobeInRun()
	u.bin = testutil.BuildC(t, t.TempDir(), "target", src, slices.Clone(targetFlags)...)
	if err := u.Burst(context.Background()); err != nil {
		t.Fatalf("burst without call sites: %v", err)
	}
	c := u.Calibration()
	if c.Refused != "" {
		t.Logf("one burst's fit refused (a busy machine): %s; the burst itself ran", c.Refused)
		return
	}
	if c.Sites == nil || c.Sites.ExitCallSite != 0 || c.Sites.EntryStepped <= c.Sites.EntryEmulated {
		t.Errorf("site costs %+v: want the stepped class measured and no call-site cost", c.Sites)
	}
}

// TestBurstRuns reads a burst's loops from its events: the empty loop (a
// cal_outer calling cal_leaf twice) gives the intervals inside its calls,
// one of each transition kind, and each loop its transitions and calls
// between its *_shape's entry and exit.
func TestBurstRuns(t *testing.T) {
	sites := []uprobe.Site{{Function: "cal_shape"}, {Function: "cal_outer"}, {Function: "cal_leaf"}, {Function: "step_shape"}, {Function: "step_leaf"}}
	var evs []uprobe.Event
	at := uint64(0)
	ev := func(site int, entry bool, dt uint64) {
		at += dt
		evs = append(evs, uprobe.Event{Time: at, Entry: entry, Site: site})
	}
	// The empty loop: shape { outer { leaf leaf } }.
	ev(0, true, 0)
	ev(1, true, 100)  // shape's own interval: not probe cost alone
	ev(2, true, 10)   // entry->entry
	ev(2, false, 20)  // entry->exit
	ev(2, true, 30)   // exit->entry
	ev(2, false, 20)  // entry->exit
	ev(1, false, 40)  // exit->exit
	ev(0, false, 100) // shape's
	// A step loop: shape { leaf }.
	ev(3, true, 1000)
	ev(4, true, 5)
	ev(4, false, 500)
	ev(3, false, 5)
	runs, spans, empty, err := burstRuns(evs, sites)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	if r := runs[0]; r.Raw != 320 || r.Calls != 3 || r.Leaves != 2 || r.Count != [trace.Transitions]uint64{2, 2, 1, 2} {
		t.Errorf("empty loop %+v: want 320 ns, 3 calls, 2 leaves, EE/EX/XE/XX 2/2/1/2", r)
	}
	if r := runs[1]; r.Raw != 510 || r.Calls != 1 || r.Leaves != 1 {
		t.Errorf("step loop %+v: want 510 ns, 1 call, 1 leaf", r)
	}
	want := [trace.Transitions][]uint64{{10}, {20, 20}, {30}, {40}}
	for k := range empty {
		if !slices.Equal(empty[k], want[k]) {
			t.Errorf("%s intervals %v, want %v", calltree.TransitionName(k), empty[k], want[k])
		}
	}
	if len(spans) != 2 || !slices.Equal(spans[0].leaf, []uint64{20, 20}) || !slices.Equal(spans[0].between, []uint64{30}) ||
		!slices.Equal(spans[1].leaf, []uint64{500}) || len(spans[1].between) != 0 {
		t.Errorf("spans %+v: want leaves 20, 20 and 30 between them, then a leaf of 500", spans)
	}
	if _, _, _, err := burstRuns([]uprobe.Event{{Site: 9}}, sites); err == nil {
		t.Error("an event of an unknown site: no error")
	}
}
