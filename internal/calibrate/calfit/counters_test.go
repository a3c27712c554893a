package calfit

import (
	"errors"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/trace"
)

// reads returns the counter reads of a thread running script, a list of
// (entry?, instructions of the program since the previous event), when
// each probe retires probe[kind] instructions of its own in the interval
// after the previous event.
func reads(start uint64, probe [trace.Transitions]uint64, script []struct {
	entry bool
	work  uint64
}) []CounterRead {
	out := []CounterRead{{Value: start, Entry: true}}
	v, prev := start, true
	for _, s := range script {
		k := calltree.Transition(prev, s.entry)
		v += probe[k] + s.work
		out = append(out, CounterRead{Value: v, Entry: s.entry})
		prev = s.entry
	}
	return out
}

type step = struct {
	entry bool
	work  uint64
}

// TestCounterCalibration: the probe's instructions per transition come
// out exactly from a calibration loop of empty calls (with an interrupt's
// extra instructions in some intervals), and subtracting them from a
// recorded node's intervals leaves the program's own instructions.
func TestCounterCalibration(t *testing.T) {
	probe := [trace.Transitions]uint64{41, 37, 45, 39}
	// The empty loop: outer calling two empty leaves, three rounds;
	// the second round's leaf was interrupted (+900 instructions).
	var cal []step
	for r := range 3 {
		extra := uint64(0)
		if r == 1 {
			extra = 900
		}
		cal = append(cal, step{true, 2}, step{false, extra}, step{true, 0}, step{false, 0}, step{false, 1}, step{true, 3})
	}
	oh, err := CounterOverheads(reads(1000, probe, cal))
	if err != nil {
		t.Fatal(err)
	}
	for k := range probe {
		// Each kind's smallest interval holds the probe and the least
		// work the loop did in such an interval.
		if oh[k] < float64(probe[k]) || oh[k] > float64(probe[k])+3 {
			t.Errorf("%d: overhead %v instructions, want %d to %d", k, oh[k], probe[k], probe[k]+3)
		}
	}
	exact := [trace.Transitions]float64{41, 37, 45, 39}
	// main -> f (1200 instructions) -> g (300), back in f (50), out.
	rec := reads(5000, probe, []step{{true, 10}, {true, 1200}, {false, 300}, {false, 50}})
	got, err := CalibratedCounts(rec, exact)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{10, 1200, 300, 50}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("calibrated counts %v, want %v", got, want)
			break
		}
	}
	// Never below zero: an interval shorter than the overhead.
	if got, _ := CalibratedCounts([]CounterRead{{100, true}, {120, false}}, exact); got[0] != 0 {
		t.Errorf("20 instructions less a 37-instruction probe: %v, want 0", got[0])
	}
	// Counters only count up; a kind never seen cannot be calibrated.
	if _, err := CounterOverheads([]CounterRead{{100, true}, {90, false}}); !errors.Is(err, ErrCounterOrder) {
		t.Errorf("backwards reads: %v, want ErrCounterOrder", err)
	}
	if _, err := CounterOverheads([]CounterRead{{100, true}, {190, false}}); err == nil {
		t.Error("overheads from a single entry->exit interval")
	}
}
