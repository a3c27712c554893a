package calltree_test

import (
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// TestProbeRemoved: f's probe comes off at 30 (ctl trace remove). On
// thread 1, f and the g it runs end then (repairs Detached), g's later
// exit matches nothing, and h, entered after, is main's callee, never
// f's. Thread 3's open f ends at 30 too, though its next record is its
// end; thread 2 of another process keeps its call of f.
func TestProbeRemoved(t *testing.T) {
	b := modeltest.NewHooks().ThreadAt(1, 1, "app", 0).ThreadAt(1, 3, "idle", 0).ThreadAt(2, 2, "other", 0).
		Run(1, 1, "0 +main 10 +f 15 +g 20 -g 25 +g 40 -g 45 +h 50 -h 60 -main").
		Run(1, 3, "0 +f").
		Run(2, 2, "0 +f 70 -f")
	f := b.Function("f")
	p := b.Profile()
	p.End.Time = 100
	p.Probes = append(p.Probes, model.Probe{Time: 30, PID: 1, Function: f, Mech: trace.ProbeRemoved})
	r := build(t, p, calltree.Options{})
	root := &thread(t, r, 1).Root
	for _, tc := range []struct {
		path  string
		calls uint64
		cum   uint64
	}{{"main", 1, 60}, {"main;f", 1, 20}, {"main;f;g", 2, 10}, {"main;h", 1, 5}} {
		if n := node(t, root, tc.path); n.Calls != tc.calls || n.Cum.WallNSRaw != tc.cum || n.Recursion != 0 {
			t.Errorf("%s: %d calls, cum %d ns, RL %d; want %d calls, %d ns", tc.path, n.Calls, n.Cum.WallNSRaw, n.Recursion, tc.calls, tc.cum)
		}
	}
	if n := node(t, &thread(t, r, 3).Root, "f"); n.Cum.WallNSRaw != 30 {
		t.Errorf("thread 3: f %d ns, want 30: ended at the removal", n.Cum.WallNSRaw)
	}
	if n := node(t, &thread(t, r, 2).Root, "f"); n.Cum.WallNSRaw != 70 {
		t.Errorf("process 2: f %d ns, want 70: another process's probe", n.Cum.WallNSRaw)
	}
	if r.Repairs != (calltree.Repairs{Detached: 3, Unmatched: 1}) {
		t.Errorf("repairs %+v, want f and g of thread 1 and f of thread 3 detached, g's exit unmatched", r.Repairs)
	}
}
