package calibrate

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"trueprof/internal/record"
	"trueprof/internal/testutil"

	"trueprof/internal/trace"
)

// TestMain lets the test binary act as record's wrapper, which record
// starts by re-executing itself.
func TestMain(m *testing.M) {
	record.RunWrapper()
	os.Exit(m.Run())
}

// TestLoadOrMeasureUsesTheStoredCalibration stores a calibration for this
// host and kernel: LoadOrMeasure must return it without measuring (which
// would need a compiler and perf events) and without a notice.
func TestLoadOrMeasureUsesTheStoredCalibration(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	host, kernel := machine()
	stored := &trace.Calibration{Mechanism: "hook", Host: host, Kernel: kernel, Statistic: "min",
		Overhead: [trace.Transitions]float64{1, 2, 3, 4}, PerCall: 5, Samples: 7}
	if err := Save(stored); err != nil {
		t.Fatal(err)
	}
	var notice bytes.Buffer
	// A cancelled context makes any measurement fail at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := LoadOrMeasure(ctx, Options{Mechanism: "hook", Batches: 1}, &notice)
	if err != nil {
		t.Fatal(err)
	}
	if got.Overhead != stored.Overhead || got.Samples != stored.Samples {
		t.Errorf("got %+v, want the stored %+v", got, stored)
	}
	if notice.Len() != 0 {
		t.Errorf("notice %q for a stored calibration", notice.String())
	}
}

// TestLoadOrMeasureSaysWhenItMeasures: without a stored calibration it
// announces the measurement, with the batches a quick one leaves out,
// and a failed measurement is an error naming the mechanism.
func TestLoadOrMeasureSaysWhenItMeasures(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var notice bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := LoadOrMeasure(ctx, Options{Mechanism: "hook", Batches: 1}, &notice)
	if err == nil {
		t.Fatal("measuring under a cancelled context succeeded")
	}
	if want := "trueprof: no hook calibration for this machine; measuring it now, quickly: 3 × 200000 calls instead of 5 × 200000 (trueprof calibrate replaces it with the full measurement)\n"; notice.String() != want {
		t.Errorf("notice %q, want %q", notice.String(), want)
	}
	if want := "calibrating hook: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
}

// TestFit recovers known overheads from synthetic runs of the shapes'
// transition counts, and refuses shapes that cannot separate the kinds
// and a fit whose overheads come out negative.
func TestFit(t *testing.T) {
	want := [trace.Transitions]float64{10, 30, 20, 5}
	median := [trace.Transitions]float64{2, 6, 4, 1} // the same splits: EE/(EE+XX) = 2/3, EX/(EX+XE) = 3/5
	var runs []shapeRun
	var real []float64
	for _, s := range validationShapes("hook") {
		var r shapeRun
		// Per round: cal_outer's tree, and main's exit->entry between rounds.
		nEE := uint64(s.Rounds * (1 + s.Fanout*s.Depth))
		nEX := uint64(s.Rounds * s.Fanout)
		r.count = [trace.Transitions]uint64{nEE, nEX, nEX, nEE}
		body := float64(s.Rounds*s.Fanout) * float64(s.Work) * 2
		r.raw = body + r.overhead(want)
		runs, real = append(runs, r), append(real, body)
	}
	got, err := fit(median, runs, real)
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
	same := []shapeRun{runs[1], runs[1]}
	if _, err := fit(median, same, real[1:3]); !errors.Is(err, ErrBadFit) {
		t.Errorf("fit of identical shapes: err %v, want ErrBadFit", err)
	}
	// Raw times below the uninstrumented ones: overheads would be negative.
	for i := range runs {
		runs[i].raw = real[i] * 0.9
	}
	if oh, err := fit(median, runs, real); !errors.Is(err, ErrBadFit) {
		t.Errorf("fit of faster-than-real runs: overheads %v, err %v, want ErrBadFit", oh, err)
	}
}

// TestFirstCalibrationIsNotZero measures a quick hook calibration, as a
// fresh machine's first record does, into an empty cache directory: it is
// a fit with every overhead positive, its residuals are stored per shape,
// and what was stored is what Load returns.
func TestFirstCalibrationIsNotZero(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireCommand(t, "cc")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var notice bytes.Buffer
	c, err := LoadOrMeasure(context.Background(), Options{Mechanism: "hook", Batches: 1, Rounds: 20000}, &notice)
	if errors.Is(err, ErrBadFit) {
		// A refused calibration is not stored: the next use measures again.
		if _, lerr := Load("hook"); !errors.Is(lerr, ErrNotCalibrated) {
			t.Errorf("after a refused fit, Load: %v, want ErrNotCalibrated", lerr)
		}
		t.Skipf("the machine was too busy for a good fit: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.Statistic != "fit" || c.PerCall <= 0 {
		t.Errorf("statistic %q, per call %.1f ns: want a fit with a positive cost", c.Statistic, c.PerCall)
	}
	for k, o := range c.Overhead {
		if o <= 0 {
			t.Errorf("%s overhead %.2f ns: a probe cannot cost nothing", kindName(k), o)
		}
	}
	if len(c.Fit) != len(validationShapes("hook")) {
		t.Fatalf("%d shapes stored, want %d", len(c.Fit), len(validationShapes("hook")))
	}
	for _, f := range c.Fit {
		if f.Uninstrumented <= 0 || f.Raw <= f.Calibrated || f.Calls == 0 {
			t.Errorf("shape %+v: want positive times, raw above calibrated", f)
		}
	}
	if c.Resolution <= 0 {
		t.Errorf("resolution %.1f ns, want positive", c.Resolution)
	}
	stored, err := Load("hook")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Overhead != c.Overhead || len(stored.Fit) != len(c.Fit) {
		t.Errorf("stored %+v, measured %+v", stored, c)
	}
}
