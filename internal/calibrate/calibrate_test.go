package calibrate

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"trueprof/internal/trace"
)

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
	if want := "trueprof: no hook calibration for this machine; measuring it now, quickly: 1 × 200000 calls instead of 5 × 200000 (trueprof calibrate replaces it with the full measurement)\n"; notice.String() != want {
		t.Errorf("notice %q, want %q", notice.String(), want)
	}
	if want := "calibrating hook: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
}
