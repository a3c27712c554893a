package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// fakeUprobeCalibrator stands for calibrate.UprobeInRun: it notes when
// each burst ran and returns cal, or fails every burst with err.
type fakeUprobeCalibrator struct {
	bursts []uint64
	err    error
	cal    *trace.Calibration
}

func (f *fakeUprobeCalibrator) Burst(context.Context) error {
	f.bursts = append(f.bursts, perf.Now())
	return f.err
}

func (f *fakeUprobeCalibrator) Calibration() *trace.Calibration {
	if f.err != nil {
		return &trace.Calibration{Mechanism: "uprobe", Source: "in-run", Refused: "no calibration burst completed: " + f.err.Error()}
	}
	return f.cal
}

// TestUprobeCalibrationBursts: a uprobe recording calibrating in the run
// bursts once its probes are in place, before the target runs, and once
// after it ended; the fit is the trace's calibration (the stored one is
// not asked for), and its site costs are those of the cost warning. A
// failing burst is said, and the refused calibration is written, so that
// reports say why they show raw times.
func TestUprobeCalibrationBursts(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "counts", countsFixture)
	stored := func(Mech) (*trace.Calibration, error) {
		t.Error("the stored calibration was asked for")
		return nil, errors.New("not stored")
	}
	cal := &trace.Calibration{Mechanism: "uprobe", Statistic: "fit", Source: "in-run", Bursts: 2,
		Overhead: [trace.Transitions]float64{500, 300, 400, 200}, PerCall: 700,
		Sites: &trace.SiteCosts{EntryEmulated: 500, EntryStepped: 14000, ExitReturn: 200, ExitRetInsn: 14000}}
	for _, tc := range []struct {
		name string
		fake *fakeUprobeCalibrator
		log  string
	}{
		{"fitted", &fakeUprobeCalibrator{cal: cal}, "trueprof: probes on leaf: "},
		{"failed", &fakeUprobeCalibrator{err: errors.New("no compiler")}, "trueprof: uprobe calibration burst at the start failed: no compiler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			_, p := recordCmd(t, Config{Command: []string{bin, "200"}, Trace: []string{"leaf", "work"}, NoSampling: true,
				Mech: MechUprobe, CalibrateInRun: true, UprobeCalibration: tc.fake, Calibration: stored,
				Log: io.MultiWriter(&log, testWriter{t}), Stdout: io.Discard})
			if len(tc.fake.bursts) != 2 || len(p.Events) == 0 {
				t.Fatalf("%d bursts, %d events: want 2 bursts around the events", len(tc.fake.bursts), len(p.Events))
			}
			if first, last := p.Events[0].Time, p.Events[len(p.Events)-1].Time; tc.fake.bursts[0] > first || tc.fake.bursts[1] < last {
				t.Errorf("bursts at %d and %d, events from %d to %d: want one before the target ran and one after", tc.fake.bursts[0], tc.fake.bursts[1], first, last)
			}
			c := p.Header.Calibration
			if c == nil || c.Source != "in-run" {
				t.Fatalf("trace calibration %+v: want the in-run one", c)
			}
			if tc.fake.err == nil && (c.Overhead != cal.Overhead || *c.Sites != *cal.Sites) {
				t.Errorf("trace calibration %+v, want %+v", c, cal)
			}
			if tc.fake.err != nil && !strings.Contains(c.Refused, "no compiler") {
				t.Errorf("refused %q: want the burst's error", c.Refused)
			}
			if !strings.Contains(log.String(), tc.log) {
				t.Errorf("log %q: want %q", log.String(), tc.log)
			}
			if tc.fake.err == nil {
				// leaf is a frameless leaf: a single-stepped entry and a
				// return probe, priced as the calibration says.
				n := entries(p)["leaf"]
				cost := time.Duration(float64(n) * (cal.Sites.EntryStepped + cal.Sites.ExitReturn)).Round(time.Millisecond)
				if want := fmt.Sprintf("probes on leaf: %d hits cost about %v", 2*n, cost); !strings.Contains(log.String(), want) {
					t.Errorf("log %q: want %q", log.String(), want)
				}
			}
		})
	}
}
