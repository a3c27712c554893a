package calltree_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
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

// TestLostSwitchOutStreamed writes a trace that lost kernel records:
// thread 7's switch-outs on CPU 0 were lost, and thread 8's switch-in
// there at 1500 bounds its time on that CPU. BuildStream, which holds no
// switches, must bound it as Build does, also when thread 8 is filtered
// out (before, it took thread 7 to run until its next switch-in).
func TestLostSwitchOutStreamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lossy.trace")
	w := modeltest.NewTraceFile(t, path, &trace.Header{Event: "dummy", Instrument: "hook"}, "main")
	w.Write(&trace.Comm{Time: 1000, PID: 7, TID: 7, Name: w.Intern("app"), Exec: true},
		&trace.Fork{Time: 1000, PID: 7, TID: 8, PPID: 7, PTID: 7},
		&trace.Switch{Time: 1100, PID: 7, TID: 7, CPU: 0},
		&trace.Switch{Time: 1100, PID: 7, TID: 8, CPU: 1},
		&trace.Event{Time: 1110, PID: 7, TID: 7, Kind: trace.EventEntry, Function: 1},
		&trace.Event{Time: 1110, PID: 7, TID: 8, Kind: trace.EventEntry, Function: 1},
		&trace.Lost{Time: 1200, Kind: trace.LostKernel, Count: 2},
		&trace.Switch{Time: 1300, PID: 7, TID: 8, CPU: 1, Out: true},
		&trace.Switch{Time: 1500, PID: 7, TID: 8, CPU: 0},
		&trace.Switch{Time: 2000, PID: 7, TID: 7, CPU: 1},
		&trace.Event{Time: 2100, PID: 7, TID: 7, Kind: trace.EventExit, Function: 1},
		&trace.Event{Time: 2100, PID: 7, TID: 8, Kind: trace.EventExit, Function: 1},
		&trace.Exit{Time: 2200, PID: 7, TID: 8, PPID: 7, PTID: 7},
		&trace.Exit{Time: 2200, PID: 7, TID: 7, PPID: 7, PTID: 7})
	w.Close(2200)
	p, s := modeltest.OpenBoth(t, path)
	for _, o := range []calltree.Options{{}, {Filter: modeltest.Matcher(t, model.Filter{TID: 7, HasTID: true})}} {
		want, err := calltree.Build(p, o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := calltree.BuildStream(s, o)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: BuildStream gives\n%+v\nBuild\n%+v", o, got, want)
		}
		// On CPU 0 from 1100 to 1500, then on CPU 1 from 2000 to its exit.
		if th := thread(t, got, 7); th.Root.Cum.CPUNS != 600 || th.Repairs.Switches != 1 {
			t.Errorf("%+v: thread 7 CPU %v, %d lost switches; want 600, 1", o, th.Root.Cum.CPUNS, th.Repairs.Switches)
		}
	}
}
