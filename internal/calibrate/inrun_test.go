package calibrate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"

	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/calltree"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
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
	t.Logf("overheads %.0f ns; per hit: entry %.0f ns emulated, %.0f ns stepped; exit %.0f ns return probe, %.0f ns RET probe",
		c.Overhead, sc.EntryEmulated, sc.EntryStepped, sc.ExitReturn, sc.ExitRetInsn)
	if sc.EntryEmulated != c.Overhead[trace.EntryEntry] || sc.ExitReturn != c.Overhead[trace.ExitExit] {
		t.Errorf("site costs %+v: the fitted class's entry and exit are its entry->entry and exit->exit overheads %v", sc, c.Overhead)
	}
	// Measured here: about 0.5 µs emulated and 0.2 µs for the return
	// trampoline, 13-17 µs single-stepped.
	if sc.EntryStepped < 3*sc.EntryEmulated || sc.ExitRetInsn < 3*sc.ExitReturn {
		t.Errorf("site costs %+v: single-stepped sites must cost several times the others", sc)
	}
}
