package calltree_test

import (
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model/modeltest"
)

// TestSwitchCost: f's calls take 10 ns on CPU, 9 calibrated; those
// preempted hold 4 ns more of it beside the 100 ns switched out, which
// the recording itself measures as the switches' cost and removes from
// the CPU time (not the wall time) of f, the node they happened in.
// Seven switched calls measure nothing, and a raw analysis removes
// nothing: neither has a switch cost.
func TestSwitchCost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		preempted int
		opts      calltree.Options
		ns        float64
		fCPU      float64
	}{
		{"eight switched", 8, calltree.Options{}, 4, 24 * 9},
		{"seven switched", 7, calltree.Options{}, 0, 16*9 + 7*13},
		{"raw", 8, calltree.Options{Raw: true}, 0, 16*10 + 8*14},
	} {
		p := modeltest.Preempted(16, tc.preempted).Profile()
		r := build(t, p, tc.opts)
		f := node(t, &thread(t, r, 1).Root, "main;f")
		if !near(f.Base.CPUNS, tc.fCPU) {
			t.Errorf("%s: f's CPU %v, want %v", tc.name, f.Base.CPUNS, tc.fCPU)
		}
		wall := float64(16*10 + tc.preempted*114)
		if !tc.opts.Raw {
			wall -= float64(16 + tc.preempted)
		}
		if !near(f.Base.WallNS, wall) {
			t.Errorf("%s: f's wall %v, want %v", tc.name, f.Base.WallNS, wall)
		}
		sc := r.SwitchCost
		switch {
		case tc.ns <= 0:
			if sc != nil {
				t.Errorf("%s: switch cost %+v, want none", tc.name, sc)
			}
		case sc == nil || !near(sc.NS, tc.ns) || sc.Intervals != tc.preempted || !near(sc.Removed, float64(tc.preempted)*tc.ns):
			t.Errorf("%s: switch cost %+v, want %v ns over %d intervals", tc.name, sc, tc.ns, tc.preempted)
		}
	}
}
