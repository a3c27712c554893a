package calibrate

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"trueprof/internal/calltree"
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
	stored := &trace.Calibration{Mechanism: "hook", Host: host, Kernel: kernel, Statistic: "fit",
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
// announces the measurement, and a failed measurement is an error naming
// the mechanism.
func TestLoadOrMeasureSaysWhenItMeasures(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var notice bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := LoadOrMeasure(ctx, Options{Mechanism: "hook"}, &notice)
	if err == nil {
		t.Fatal("measuring under a cancelled context succeeded")
	}
	if want := "trueprof: no hook calibration for this machine; measuring it now (see trueprof calibrate)\n"; notice.String() != want {
		t.Errorf("notice %q, want %q", notice.String(), want)
	}
	if want := "calibrating hook: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
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
	// A busy machine may refuse a fit; the next use measures again, as
	// a user's next recording would. Three refusals in a row fail.
	var c *trace.Calibration
	for try := 1; ; try++ {
		var notice bytes.Buffer
		var err error
		c, err = LoadOrMeasure(context.Background(), Options{Mechanism: "hook", Batches: 1, Rounds: 20000}, &notice)
		if err != nil {
			t.Fatal(err)
		}
		if c.Refused == "" {
			break
		}
		// A refused calibration is returned, zero and saying why, so
		// that recording goes on with raw times; it is not stored.
		if _, lerr := Load("hook"); !errors.Is(lerr, ErrNotCalibrated) {
			t.Errorf("after a refused fit, Load: %v, want ErrNotCalibrated", lerr)
		}
		if c.PerCall != 0 || !strings.Contains(notice.String(), "calibration refused: shape") {
			t.Errorf("refused calibration %+v, notice %q: want no cost and a notice naming the shape", c, notice.String())
		}
		t.Logf("try %d refused: %s", try, c.Refused)
		if try == 3 {
			t.Fatalf("three calibrations in a row refused, the last: %s", c.Refused)
		}
	}
	if c.Statistic != "fit" || c.PerCall <= 0 {
		t.Errorf("statistic %q, per call %.1f ns: want a fit with a positive cost", c.Statistic, c.PerCall)
	}
	for k, o := range c.Overhead {
		if o <= 0 {
			t.Errorf("%s overhead %.2f ns: a probe cannot cost nothing", calltree.TransitionName(k), o)
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

// TestCounterSupport: a machine with a PMU can count instructions; one
// without (this project's VMs) says so, naming the PMU.
func TestCounterSupport(t *testing.T) {
	testutil.RequirePerf(t)
	err := CounterSupport()
	if err == nil {
		t.Log("hardware counters available")
		return
	}
	t.Log(err)
	if !errors.Is(err, ErrNoCounters) || !strings.Contains(err.Error(), "PMU") {
		t.Errorf("%v: want ErrNoCounters naming the missing PMU", err)
	}
}

// TestLoadRefusesOutdatedCalibrations: a calibration stored by an older
// method (a statistic of empty intervals; for uprobes, no site costs) is
// not used, so the next recording measures anew.
func TestLoadRefusesOutdatedCalibrations(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	host, kernel := machine()
	for _, c := range []*trace.Calibration{
		{Mechanism: "hook", Host: host, Kernel: kernel, Statistic: "min", PerCall: 5},
		{Mechanism: "uprobe", Host: host, Kernel: kernel, Statistic: "fit", PerCall: 600},
	} {
		if err := Save(c); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(c.Mechanism); !errors.Is(err, ErrNotCalibrated) {
			t.Errorf("%s calibration by %q, sites %v: Load gave %v, want ErrNotCalibrated", c.Mechanism, c.Statistic, c.Sites, err)
		}
	}
	ok := &trace.Calibration{Mechanism: "uprobe", Host: host, Kernel: kernel, Statistic: "fit", PerCall: 600, Sites: &trace.SiteCosts{}}
	if err := Save(ok); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("uprobe"); err != nil {
		t.Errorf("a fitted uprobe calibration with site costs: %v", err)
	}
}
