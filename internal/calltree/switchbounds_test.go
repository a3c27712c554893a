package calltree_test

import (
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model/modeltest"
)

// TestLostSwitchOut: thread 1's switch-out on CPU 0 was lost (its ring
// overflowed); thread 2's switch-in on CPU 0 at 20 says it had left the
// CPU by then. Without the loss counted the records are taken as they
// are, and thread 1 runs to the end of the recording at 900.
func TestLostSwitchOut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lost     uint64
		cpu      float64
		switches uint64
	}{
		{"lossless", 0, 900, 0},
		{"lost", 3, 20, 1},
	} {
		p := modeltest.NewHooks().Thread(1, 1, "app").Thread(1, 2, "w").
			Run(1, 1, "0 +main 10 in").
			Run(1, 2, "0 +main 5 out 20 in 30 out 900 -main exit").Profile()
		p.Lost.Kernel = tc.lost
		r := build(t, p, calltree.Options{})
		th := thread(t, r, 1)
		if th.Root.Cum.CPUNS != tc.cpu || th.Repairs.Switches != tc.switches {
			t.Errorf("%s: thread 1 CPU %v, %d lost switches; want %v, %d", tc.name, th.Root.Cum.CPUNS, th.Repairs.Switches, tc.cpu, tc.switches)
		}
		if w := thread(t, r, 2); w.Root.Cum.CPUNS != 15 || w.Repairs.Switches != 0 {
			t.Errorf("%s: thread 2 CPU %v, %d lost switches; want 15, 0", tc.name, w.Root.Cum.CPUNS, w.Repairs.Switches)
		}
	}
}

// TestLostSwitchOutAtEnd: a thread whose last switch-out was lost stops
// running at the next switch-in of another thread on its CPU, not at the
// end of the recording; one still on with no exit recorded is flagged.
func TestLostSwitchOutAtEnd(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Thread(1, 2, "w").
		Run(1, 2, "0 +main 5 -main 10 in").
		Run(1, 1, "0 +main 5 out 50 in 60 -main 1000 +main -main").Profile()
	p.Lost.Kernel = 1
	r := build(t, p, calltree.Options{})
	if w := thread(t, r, 2); w.Root.Cum.CPUNS != 50 || w.Repairs.Switches != 1 {
		t.Errorf("thread 2 CPU %v, %d lost switches; want 50, 1", w.Root.Cum.CPUNS, w.Repairs.Switches)
	}
	// Thread 1 is on CPU 0 from 50 to the end with no exit recorded:
	// nothing bounds it, and it says so.
	if m := thread(t, r, 1); m.Root.Cum.CPUNS != 955 || m.Repairs.Switches != 1 {
		t.Errorf("thread 1 CPU %v, %d lost switches; want 955, 1", m.Root.Cum.CPUNS, m.Repairs.Switches)
	}
}
