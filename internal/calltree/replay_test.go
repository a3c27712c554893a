package calltree_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// build runs Build and fails the test on error.
func build(t *testing.T, p *model.Profile, o calltree.Options) *calltree.Result {
	t.Helper()
	r, err := calltree.Build(p, o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return r
}

// thread returns the tree of thread tid.
func thread(t *testing.T, r *calltree.Result, tid uint32) *calltree.Thread {
	t.Helper()
	for i := range r.Processes {
		for j := range r.Processes[i].Threads {
			if th := &r.Processes[i].Threads[j]; th.TID == tid {
				return th
			}
		}
	}
	t.Fatalf("no thread %d", tid)
	return nil
}

// node returns the node at path ("main;f;g", names only) below root.
func node(t *testing.T, root *calltree.Node, path string) *calltree.Node {
	t.Helper()
	n := root
next:
	for _, name := range strings.Split(path, ";") {
		for i := range n.Children {
			if n.Children[i].Name == name {
				n = &n.Children[i]
				continue next
			}
		}
		t.Fatalf("no node %q below %q (children %v)", path, root.Name, names(n.Children))
	}
	return n
}

func names(ns []calltree.Node) []string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	return s
}

// function returns the accumulator of function name.
func function(t *testing.T, r *calltree.Result, name string) *calltree.Function {
	t.Helper()
	for i := range r.Functions {
		if r.Functions[i].Name == name {
			return &r.Functions[i]
		}
	}
	t.Fatalf("no function %q", name)
	return nil
}

func arc(t *testing.T, arcs []calltree.Arc, name string) *calltree.Arc {
	t.Helper()
	for i := range arcs {
		if arcs[i].Name == name {
			return &arcs[i]
		}
	}
	t.Fatalf("no arc %q in %v", name, arcs)
	return nil
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// want is the expected shape of a node: calls, callees, level,
// recursion, base and cum raw wall time, base calibrated wall time.
type want struct {
	calls, callees    uint64
	level, rl         int
	baseRaw, cumRaw   uint64
	baseWall, cumWall float64
}

func check(t *testing.T, n *calltree.Node, w want) {
	t.Helper()
	got := want{n.Calls, n.Callees, n.Level, n.Recursion, n.Base.WallNSRaw, n.Cum.WallNSRaw, n.Base.WallNS, n.Cum.WallNS}
	if got.calls != w.calls || got.callees != w.callees || got.level != w.level || got.rl != w.rl ||
		got.baseRaw != w.baseRaw || got.cumRaw != w.cumRaw || !near(got.baseWall, w.baseWall) || !near(got.cumWall, w.cumWall) {
		t.Errorf("%s: got %+v, want %+v", n.Name, got, w)
	}
}

func TestNested(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 10 +f 30 +g 35 -g 50 -f 60 -main").Profile()
	r := build(t, p, calltree.Options{})
	th := thread(t, r, 1)
	if th.Root.Name != "app_1" || th.FirstNS != 0 || th.LastNS != 60 || th.Events != 6 {
		t.Errorf("thread: %+v", th)
	}
	check(t, &th.Root, want{0, 1, 0, 0, 0, 60, 0, 60})
	check(t, node(t, &th.Root, "main"), want{1, 1, 1, 0, 20, 60, 20, 60})
	check(t, node(t, &th.Root, "main;f"), want{1, 1, 2, 0, 35, 40, 35, 40})
	check(t, node(t, &th.Root, "main;f;g"), want{1, 0, 3, 0, 5, 5, 5, 5})
	if r.Total.WallNSRaw != 60 || r.Calls != 3 || r.Events != 6 {
		t.Errorf("totals: %+v calls %d events %d", r.Total, r.Calls, r.Events)
	}
	f := function(t, r, "f")
	if f.Calls != 1 || f.Self.WallNSRaw != 35 || f.Total.WallNSRaw != 40 || f.MinSelfNS != 35 || f.MaxSelfNS != 35 {
		t.Errorf("function f: %+v", f)
	}
	if c := arc(t, f.Callers, "main"); c.Calls != 1 || c.Cum.WallNSRaw != 40 || c.Base.WallNSRaw != 35 {
		t.Errorf("f's caller main: %+v", c)
	}
	if c := arc(t, f.Callees, "g"); c.Calls != 1 || c.Cum.WallNSRaw != 5 {
		t.Errorf("f's callee g: %+v", c)
	}
	if c := arc(t, function(t, r, "main").Callers, "<root>"); c.Calls != 1 || c.Cum.WallNSRaw != 60 {
		t.Errorf("main's caller: %+v", c)
	}
	// No switches, no calibration: both are said.
	if r.CPUMeasured || r.Total.CPUNS != 0 || len(r.Warnings) != 2 {
		t.Errorf("cpu measured %v, cpu %v, warnings %q", r.CPUMeasured, r.Total.CPUNS, r.Warnings)
	}
}

func TestRecursion(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +f 10 +f 20 +f 25 -f 30 -f 40 -f").Profile()
	r := build(t, p, calltree.Options{})
	root := &thread(t, r, 1).Root
	check(t, node(t, root, "f"), want{1, 1, 1, 0, 20, 40, 20, 40})
	check(t, node(t, root, "f;f"), want{1, 1, 2, 1, 15, 20, 15, 20})
	check(t, node(t, root, "f;f;f"), want{1, 0, 3, 2, 5, 5, 5, 5})
	f := function(t, r, "f")
	// Total counts the recursion once: the outermost call's cum.
	if f.Calls != 3 || f.Self.WallNSRaw != 40 || f.Total.WallNSRaw != 40 || f.MinSelfNS != 5 || f.MaxSelfNS != 20 {
		t.Errorf("function f: %+v", f)
	}
	if c := arc(t, f.Callers, "<root>"); c.Calls != 1 || c.Base.WallNSRaw != 20 || c.Cum.WallNSRaw != 40 {
		t.Errorf("caller <root>: %+v", c)
	}
	if c := arc(t, f.Callers, "f"); c.Calls != 2 || c.Base.WallNSRaw != 20 || c.Cum.WallNSRaw != 0 {
		t.Errorf("caller f: %+v", c)
	}
	// The inner calls' time is all f's self: no callee's, so the
	// callees' cum adds up to total minus self.
	if c := arc(t, f.Callees, "f"); c.Calls != 2 || c.Base.WallNSRaw != 0 || c.Cum.WallNSRaw != 0 {
		t.Errorf("callee f: %+v", c)
	}
}

// TestMutualRecursion: a calls b calls a calls b. The callees' cum adds
// up to total minus self for both (the lua field test's ccall was 0.83 ms
// off): a's callee b holds b's time under a's outermost call, without
// the inner a's self.
func TestMutualRecursion(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +a 10 +b 20 +a 30 +b 35 -b 40 -a 50 -b 60 -a").Profile()
	r := build(t, p, calltree.Options{})
	a, b := function(t, r, "a"), function(t, r, "b")
	if a.Self.WallNSRaw != 35 || a.Total.WallNSRaw != 60 || b.Self.WallNSRaw != 25 || b.Total.WallNSRaw != 40 {
		t.Fatalf("a self %d total %d, b self %d total %d", a.Self.WallNSRaw, a.Total.WallNSRaw, b.Self.WallNSRaw, b.Total.WallNSRaw)
	}
	for _, tt := range []struct {
		arcs             []calltree.Arc
		what, name       string
		calls, base, cum uint64
	}{
		{a.Callers, "a's caller", "<root>", 1, 20, 60},
		{a.Callers, "a's caller", "b", 1, 15, 0},
		{a.Callees, "a's callee", "b", 2, 20, 25}, // the inner b's 5 are under the inner a
		{b.Callers, "b's caller", "a", 2, 25, 40},
		{b.Callees, "b's callee", "a", 1, 15, 15},
	} {
		if c := arc(t, tt.arcs, tt.name); c.Calls != tt.calls || c.Base.WallNSRaw != tt.base || c.Cum.WallNSRaw != tt.cum {
			t.Errorf("%s %s: calls %d base %d cum %d, want %d %d %d", tt.what, tt.name, c.Calls, c.Base.WallNSRaw, c.Cum.WallNSRaw,
				tt.calls, tt.base, tt.cum)
		}
	}
}

func TestMissingExit(t *testing.T) {
	// g throws, f catches: g's exit never comes.
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 10 +f 20 +g 30 -f 40 -main 50 +main 55 -main").Profile()
	r := build(t, p, calltree.Options{})
	root := &thread(t, r, 1).Root
	check(t, node(t, root, "main"), want{2, 1, 1, 0, 25, 45, 25, 45})
	check(t, node(t, root, "main;f"), want{1, 1, 2, 0, 10, 20, 10, 20})
	check(t, node(t, root, "main;f;g"), want{1, 0, 3, 0, 10, 10, 10, 10})
	if r.Repairs != (calltree.Repairs{Popped: 1}) {
		t.Errorf("repairs %+v", r.Repairs)
	}
	if root.Base.WallNSRaw != 10 { // between the two calls of main
		t.Errorf("root base %d", root.Base.WallNSRaw)
	}
	fl, err := callflow(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range fl[0].Events {
		got = append(got, strings.Join([]string{string(e.Kind), e.Name, itoa(e.Level), itoa(int(e.Delta.WallNSRaw))}, " "))
	}
	wantFlow := "entry main 1 0|entry f 2 10|entry g 3 10|exit-missing g 3 0|exit f 2 10|exit main 1 10|entry main 1 10|exit main 1 5|end app_1 0 0"
	if strings.Join(got, "|") != wantFlow {
		t.Errorf("callflow\n got %s\nwant %s", strings.Join(got, "|"), wantFlow)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestUnmatchedExit(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(0, 2, 0, 3).
		Run(1, 1, "0 +main 10 -x 20 -main").Profile()
	r := build(t, p, calltree.Options{})
	main := node(t, &thread(t, r, 1).Root, "main")
	// The ignored exit still ends an interval: entry→exit, then exit→exit.
	check(t, main, want{1, 0, 1, 0, 20, 20, 20 - 2 - 3, 20 - 2 - 3})
	if r.Repairs != (calltree.Repairs{Unmatched: 1}) {
		t.Errorf("repairs %+v", r.Repairs)
	}
	if len(thread(t, r, 1).Root.Children) != 1 {
		t.Errorf("the unmatched exit made a node: %v", names(thread(t, r, 1).Root.Children))
	}
}

func TestUnclosed(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 10 +f 25 +g").Profile()
	r := build(t, p, calltree.Options{})
	root := &thread(t, r, 1).Root
	check(t, node(t, root, "main;f;g"), want{1, 0, 3, 0, 0, 0, 0, 0})
	check(t, node(t, root, "main"), want{1, 1, 1, 0, 10, 25, 10, 25})
	if r.Repairs != (calltree.Repairs{Unclosed: 3}) {
		t.Errorf("repairs %+v", r.Repairs)
	}
}

// TestDetached: calls still open when the probes came off end then, and
// the thread's time after is its own; a thread that exited before keeps
// its calls open until its exit, a repair.
func TestDetached(t *testing.T) {
	p := modeltest.NewHooks().ThreadAt(1, 1, "app", 0).ThreadAt(1, 2, "gone", 0).
		Run(1, 1, "0 +main 10 +f 20 -f 25 +f").
		Run(1, 2, "0 +g 5 exit").Profile()
	p.End.Time, p.End.Detached = 100, 30
	r := build(t, p, calltree.Options{})
	root := &thread(t, r, 1).Root
	check(t, node(t, root, "main;f"), want{2, 0, 2, 0, 15, 15, 15, 15})
	check(t, node(t, root, "main"), want{1, 2, 1, 0, 15, 30, 15, 30})
	if root.Base.WallNSRaw != 70 {
		t.Errorf("after the detach the thread's own: %d ns, want 70", root.Base.WallNSRaw)
	}
	if r.Repairs != (calltree.Repairs{Detached: 2, Unclosed: 1}) {
		t.Errorf("repairs %+v", r.Repairs)
	}
	fl, err := callflow(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []calltree.FlowKind
	for _, e := range fl[0].Events[4:] {
		kinds = append(kinds, e.Kind)
	}
	if want := []calltree.FlowKind{calltree.FlowDetach, calltree.FlowDetached, calltree.FlowDetached, calltree.FlowEnd}; !slices.Equal(kinds, want) {
		t.Errorf("callflow ends %v, want %v", kinds, want)
	}
}

// TestSampleLeftCall: a sample whose stack lacks the current call but
// holds its caller (taken in a uretprobe's trampoline, after the call's
// frame is gone and before its exit is written) goes below the caller,
// never below the call, where it would look recursive.
func TestSampleLeftCall(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 10 +f 20 s:_start;main;[uprobes] 25 s:_start;x 30 -f 40 -main").Profile()
	root := &thread(t, build(t, p, calltree.Options{}), 1).Root
	if n := node(t, root, "main;[uprobes]"); !n.Sampled || n.Recursion != 0 || n.Cum.Samples != 1 {
		t.Errorf("main;[uprobes]: %+v", n)
	}
	// Nothing of the stack is open: the leaf goes below the current call.
	if n := node(t, root, "main;f;x"); !n.Sampled || n.Cum.Samples != 1 {
		t.Errorf("main;f;x: %+v", n)
	}
}

func TestThreadsInterleaved(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Thread(1, 2, "worker").
		Run(1, 1, "0 +main 10 +f 30 -f 40 -main").
		Run(1, 2, "5 +main 15 +g 25 -g 50 -main").Profile()
	r := build(t, p, calltree.Options{})
	if len(r.Processes) != 1 || len(r.Processes[0].Threads) != 2 || r.Processes[0].Name != "app" {
		t.Fatalf("processes %+v", r.Processes)
	}
	check(t, node(t, &thread(t, r, 1).Root, "main"), want{1, 1, 1, 0, 20, 40, 20, 40})
	check(t, node(t, &thread(t, r, 2).Root, "main"), want{1, 1, 1, 0, 35, 45, 35, 45})
	check(t, node(t, &thread(t, r, 2).Root, "main;g"), want{1, 0, 2, 0, 10, 10, 10, 10})
	// Both threads live from the start of the recording to its end.
	check(t, &thread(t, r, 1).Root, want{0, 1, 0, 0, 10, 50, 10, 50})
	check(t, &thread(t, r, 2).Root, want{0, 1, 0, 0, 5, 50, 5, 50})
	if r.Total.WallNSRaw != 100 || r.Processes[0].Total.WallNSRaw != 100 {
		t.Errorf("totals %d %d", r.Total.WallNSRaw, r.Processes[0].Total.WallNSRaw)
	}
	m := function(t, r, "main")
	if m.Calls != 2 || m.Total.WallNSRaw != 85 || m.Self.WallNSRaw != 55 || m.MinSelfNS != 20 || m.MaxSelfNS != 35 {
		t.Errorf("main: %+v", m)
	}

	// The TID filter keeps one thread, unchanged.
	r2 := build(t, p, calltree.Options{Filter: modeltest.Matcher(t, model.Filter{TID: 2, HasTID: true})})
	if len(r2.Processes) != 1 || len(r2.Processes[0].Threads) != 1 || r2.Total != thread(t, r, 2).Root.Cum {
		t.Errorf("filtered: %+v", r2.Processes)
	}
}

func TestThreadIncarnations(t *testing.T) {
	p := modeltest.NewHooks().ThreadAt(1, 2, "old", 0).ThreadAt(1, 2, "new", 100).
		Run(1, 2, "0 +a 10 +b 150 +c 160 -c").Profile()
	r := build(t, p, calltree.Options{})
	th := r.Processes[0].Threads
	if len(th) != 2 || th[0].Name != "old" || th[1].Name != "new" || th[1].Start != 100 {
		t.Fatalf("threads %+v", th)
	}
	// The old thread's exit was lost: it ends when the new one starts,
	// its open calls with it. The new one is measured from its creation.
	if th[0].Repairs.Unclosed != 2 || th[0].Root.Cum.WallNSRaw != 100 || th[0].EndNS != 100 ||
		node(t, &th[0].Root, "a;b").Base.WallNSRaw != 90 {
		t.Errorf("old %+v", th[0])
	}
	if th[1].BeginNS != 100 || th[1].Root.Base.WallNSRaw != 50 || th[1].Root.Cum.WallNSRaw != 60 {
		t.Errorf("new %+v", th[1])
	}
}

func TestSwitches(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Thread(1, 2, "w").
		Run(1, 1, "0 +main 10 +f 20 out 50 in 60 -f 65 preempt 68 in 70 -main").
		Run(1, 2, "0 +main 10 preempt 15 in 20 out 30 in 40 -main").Profile()
	r := build(t, p, calltree.Options{})
	if !r.CPUMeasured {
		t.Fatal("cpu not measured")
	}
	f := node(t, &thread(t, r, 1).Root, "main;f")
	if f.Base.WallNSRaw != 50 || f.Base.CPUNS != 20 || f.Base.Dispatches != 1 || f.Base.Involuntary != 0 {
		t.Errorf("f: %+v", f.Base)
	}
	m := node(t, &thread(t, r, 1).Root, "main")
	if m.Base.WallNSRaw != 20 || m.Base.CPUNS != 17 || m.Base.Dispatches != 1 || m.Base.Involuntary != 1 {
		t.Errorf("main: %+v", m.Base)
	}
	if m.Cum.CPUNS != 37 || m.Cum.Dispatches != 2 {
		t.Errorf("main cum: %+v", m.Cum)
	}
	w := node(t, &thread(t, r, 2).Root, "main")
	if w.Base.WallNSRaw != 40 || w.Base.CPUNS != 25 || w.Base.Dispatches != 2 || w.Base.Involuntary != 1 {
		t.Errorf("w main: %+v", w.Base)
	}
}

func TestCalibration(t *testing.T) {
	// main calls the leaf f three times: 7 intervals (EE, EX, XE, EX, XE,
	// EX, XX), each longer than its overhead.
	const script = "0 +main 10 +f 15 -f 20 +f 26 -f 30 +f 37 -f 40 -main"
	ee, ex, xe, xx := 3.0, 2.5, 4.0, 1.0
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(ee, ex, xe, xx).Run(1, 1, script).Profile()
	r := build(t, p, calltree.Options{})
	root := &thread(t, r, 1).Root
	main, f := node(t, root, "main"), node(t, root, "main;f")
	check(t, main, want{1, 3, 1, 0, 22, 40, 22 - ee - 2*xe - xx, 40 - (ee + 3*ex + 2*xe + xx)})
	check(t, f, want{3, 0, 2, 0, 18, 18, 18 - 3*ex, 18 - 3*ex})
	if !near(main.Base.DeltaNS, ee+2*xe+xx) || !near(main.Cum.DeltaNS, ee+3*ex+2*xe+xx) {
		t.Errorf("delta: base %v cum %v", main.Base.DeltaNS, main.Cum.DeltaNS)
	}
	if ff := function(t, r, "f"); !near(ff.MinSelfNS, 5-ex) || !near(ff.MaxSelfNS, 7-ex) {
		t.Errorf("f min/max self %v %v", ff.MinSelfNS, ff.MaxSelfNS)
	}
	if r.Calibration == nil || len(r.Warnings) != 1 { // only: no switches
		t.Errorf("calibration %v, warnings %q", r.Calibration, r.Warnings)
	}

	// Raw reports the unadjusted times.
	raw := build(t, p, calltree.Options{Raw: true})
	check(t, node(t, &thread(t, raw, 1).Root, "main"), want{1, 3, 1, 0, 22, 40, 22, 40})
	if raw.Calibration != nil || !raw.Raw || raw.Total.DeltaNS != 0 {
		t.Errorf("raw: calibration %v, delta %v", raw.Calibration, raw.Total.DeltaNS)
	}

	// Leaves whose time is about their overhead keep the noise of each
	// call in their sum, where it averages out: f's calls take 2, 3 and
	// 4 ns against 2.5, 1.5 ns in all (clamping each call at zero made
	// it 2). A call's self time is never negative, nor is a node's.
	p = modeltest.NewHooks().Thread(1, 1, "app").Calibrate(ee, ex, xe, xx).
		Run(1, 1, "0 +main 10 +f 12 -f 20 +f 23 -f 30 +f 34 -f 40 -main").Profile()
	r = build(t, p, calltree.Options{})
	f = node(t, &thread(t, r, 1).Root, "main;f")
	if !near(f.Base.WallNS, 1.5) || !near(f.Base.DeltaNS, 7.5) || f.MinSelfNS != 0 || !near(f.MaxSelfNS, 1.5) {
		t.Errorf("unbiased f: %+v min %v max %v", f.Base, f.MinSelfNS, f.MaxSelfNS)
	}
	// f's calls take 2, 3 and 1 ns, -1.5 in all: f's total is zero, what
	// calibration removed its whole raw time, and no call is longer than
	// the total (the 3 ns call's 0.5 is noise the others cancel).
	p = modeltest.NewHooks().Thread(1, 1, "app").Calibrate(ee, ex, xe, xx).
		Run(1, 1, "0 +main 10 +f 12 -f 20 +f 23 -f 30 +f 31 -f 40 -main").Profile()
	r = build(t, p, calltree.Options{})
	f = node(t, &thread(t, r, 1).Root, "main;f")
	if f.Base.WallNS != 0 || f.Base.DeltaNS != 6 || f.MinSelfNS != 0 || f.MaxSelfNS != 0 {
		t.Errorf("clamped f: %+v min %v max %v", f.Base, f.MinSelfNS, f.MaxSelfNS)
	}
	if main := node(t, &thread(t, r, 1).Root, "main"); !near(main.Cum.WallNS, main.Base.WallNS+f.Cum.WallNS) {
		t.Errorf("main cum %v, base %v + f %v", main.Cum.WallNS, main.Base.WallNS, f.Cum.WallNS)
	}
}

// TestCalibrationFormula checks the per-transition calibration against
// probe calibration's formula (docs/architecture.md, glossary) when the overheads come from its model: entry code x1 before
// its timestamp and y1 after, exit code x2 and y2.
func TestCalibrationFormula(t *testing.T) {
	x1, y1, x2, y2 := 1.0, 2.0, 0.5, 1.5
	tI, tO := y1+x2, x1+y2
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(y1+x1, y1+x2, y2+x1, y2+x2).
		Run(1, 1, "0 +main 10 +f 15 -f 20 +f 26 -f 30 +f 37 -f 40 -main").Profile()
	r := build(t, p, calltree.Options{})
	main := node(t, &thread(t, r, 1).Root, "main")
	// t_exact = t_rough − t_I − m·t_O, with t_rough main's self.
	if m := 3.0; !near(main.Base.WallNS, float64(main.Base.WallNSRaw)-tI-m*tO) {
		t.Errorf("main self %v, want %v", main.Base.WallNS, float64(main.Base.WallNSRaw)-tI-m*tO)
	}
	f := node(t, &thread(t, r, 1).Root, "main;f")
	if !near(f.Base.WallNS, float64(f.Base.WallNSRaw)-3*tI) {
		t.Errorf("f self %v, want %v", f.Base.WallNS, float64(f.Base.WallNSRaw)-3*tI)
	}
}

func TestAdjust(t *testing.T) {
	// f's interval [10, 50] has a 20ns pause ending at 40.
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).
		Run(1, 1, "0 +main 10 +f 40 adj:20:3 50 -f 60 -main").Profile()
	r := build(t, p, calltree.Options{})
	f := node(t, &thread(t, r, 1).Root, "main;f")
	if f.Base.WallNSRaw != 40 || !near(f.Base.WallNS, 40-20-1) || !near(f.Base.DeltaNS, 21) {
		t.Errorf("f: %+v", f.Base)
	}
	if r.Dropped != 3 || !strings.Contains(strings.Join(r.Warnings, "\n"), "3 events were DROPPED") {
		t.Errorf("dropped %d, warnings %q", r.Dropped, r.Warnings)
	}
	if raw := build(t, p, calltree.Options{Raw: true}); node(t, &thread(t, raw, 1).Root, "main;f").Base.WallNS != 40 {
		t.Error("Raw subtracted the adjustment")
	}

	// A pause partly off CPU: window [15, 40], off [20, 30]. Only its
	// on-CPU part (15ns) leaves the CPU time; all of it leaves the wall.
	p = modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 10 +f 20 out 30 in 40 adj:25 50 -f 60 -main").Profile()
	r = build(t, p, calltree.Options{})
	f = node(t, &thread(t, r, 1).Root, "main;f")
	if f.Base.WallNSRaw != 40 || f.Base.WallNS != 15 || f.Base.CPUNS != 15 || f.Base.Dispatches != 1 {
		t.Errorf("f: %+v", f.Base)
	}

	// A pause longer than the interval is clipped to it; two pauses
	// never overlap.
	p = modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 10 +f 15 adj:100 20 adj:10 30 -f 40 -main").Profile()
	r = build(t, p, calltree.Options{})
	if f := node(t, &thread(t, r, 1).Root, "main;f"); f.Base.WallNSRaw != 20 || f.Base.WallNS != 10 {
		t.Errorf("clipped: %+v", f.Base)
	}
}

func TestRoot(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Thread(1, 2, "idle").
		Run(1, 1, "0 +main 10 +a 20 -a 25 s:main;a 30 +r 40 +a 45 s:main;r;a;u 50 -a 60 +r 65 -r 70 -r 80 +b 90 -b 100 -main").
		Run(1, 2, "0 +main 10 -main").Profile()
	r := build(t, p, calltree.Options{Root: "r"})
	if len(r.Processes[0].Threads) != 1 {
		t.Fatalf("threads outside the root are kept: %+v", r.Processes[0].Threads)
	}
	root := &thread(t, r, 1).Root
	if len(root.Children) != 1 || root.Base.WallNSRaw != 0 || root.Cum.WallNSRaw != 40 {
		t.Fatalf("root: %v base %d cum %d", names(root.Children), root.Base.WallNSRaw, root.Cum.WallNSRaw)
	}
	check(t, node(t, root, "r"), want{1, 2, 1, 0, 25, 40, 25, 40})
	check(t, node(t, root, "r;a"), want{1, 0, 2, 0, 10, 10, 10, 10})
	check(t, node(t, root, "r;r"), want{1, 0, 2, 1, 5, 5, 5, 5})
	if u := node(t, root, "r;a;u"); !u.Sampled || u.Base.Samples != 1 || r.Total.Samples != 1 {
		t.Errorf("samples: u %+v, total %d", u, r.Total.Samples)
	}
	if r.Calls != 3 || r.Events != 6 {
		t.Errorf("calls %d events %d", r.Calls, r.Events)
	}
	if _, err := calltree.Build(p, calltree.Options{Root: "nosuch"}); !errors.Is(err, calltree.ErrRootNotFound) {
		t.Errorf("unknown root: %v", err)
	}
}

func TestSamples(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 10 +f 20 s:_start;main;f;u1;u2 25 s:_start;main;f 30 s:_start;x;y 35 s:_start;main;f>inl 40 -f "+
			"45 s:_start;main;z 47 s: 50 -main 60 s:_start;main").Profile()
	r := build(t, p, calltree.Options{})
	root := &thread(t, r, 1).Root
	f := node(t, root, "main;f")
	if f.Sampled || f.Base.Samples != 1 || f.Cum.Samples != 4 {
		t.Errorf("f: sampled %v base %d cum %d", f.Sampled, f.Base.Samples, f.Cum.Samples)
	}
	for _, path := range []string{"main;f;u1", "main;f;u1;u2", "main;f;y", "main;f;inl", "main;z", "main;[unknown]", "_start;main"} {
		if n := node(t, root, path); !n.Sampled || n.Calls != 0 || n.Cum.Samples != 1 || n.Cum.WallNSRaw != 0 {
			t.Errorf("%s: %+v", path, n)
		}
	}
	if root.Cum.Samples != 7 || node(t, root, "main").Cum.Samples != 6 {
		t.Errorf("samples: root %d main %d", root.Cum.Samples, node(t, root, "main").Cum.Samples)
	}
	if u := function(t, r, "u2"); u.Calls != 0 || u.Self.Samples != 1 || u.MinSelfNS != 0 {
		t.Errorf("u2: %+v", u)
	}
}

func TestCallflow(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 2, 3, 4).
		Run(1, 1, "100 +main 110 +f 115 preempt 117 in 120 -f 130 -main 131 -main").Profile()
	fl, err := callflow(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fl) != 1 || fl[0].Name != "app" || len(fl[0].Events) != 6 {
		t.Fatalf("callflow %+v", fl)
	}
	ev := fl[0].Events
	wantKinds := []calltree.FlowKind{calltree.FlowEntry, calltree.FlowEntry, calltree.FlowExit, calltree.FlowExit, calltree.FlowUnmatched, calltree.FlowEnd}
	wantLevels := []int{1, 2, 2, 1, 1, 0}
	for i, e := range ev {
		if e.Kind != wantKinds[i] || e.Level != wantLevels[i] {
			t.Errorf("line %d: %+v", i, e)
		}
	}
	if d := ev[2].Delta; d.WallNSRaw != 10 || d.WallNS != 8 || d.CPUNS != 6 || d.Dispatches != 1 || d.Involuntary != 1 || d.Voluntary != 0 {
		t.Errorf("f's exit delta: %+v", d)
	}
	if d := ev[3].Delta; d.WallNSRaw != 10 || d.WallNS != 6 || d.CPUNS != 6 {
		t.Errorf("main's exit delta: %+v", d)
	}
	if ev[0].Delta != (calltree.Metrics{}) || ev[0].TimeNS != 100 {
		t.Errorf("first line: %+v", ev[0])
	}
}

func TestErrors(t *testing.T) {
	if r, err := calltree.Build(&model.Profile{}, calltree.Options{}); err != nil || len(r.Processes) != 0 {
		t.Errorf("empty profile: %v %+v", err, r)
	}
	p := modeltest.NewHooks().Thread(1, 1, "app").Run(1, 1, "0 s:main").Profile()
	if _, err := calltree.Build(p, calltree.Options{ByGoroutine: true}); !errors.Is(err, calltree.ErrNoGoroutines) {
		t.Errorf("goroutines of a C program: %v", err)
	}
	p = modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, -1, 0, 0).Run(1, 1, "0 +main 1 -main").Profile()
	if _, err := calltree.Build(p, calltree.Options{}); !errors.Is(err, calltree.ErrBadCalibration) {
		t.Errorf("negative overhead: %v", err)
	}
	if _, err := calltree.Build(p, calltree.Options{Raw: true}); err != nil {
		t.Errorf("Raw ignores the calibration: %v", err)
	}
}

func TestJSON(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).
		Run(1, 1, "0 +main 10 +f 20 s:main;f;u 30 -f 40 -main").Profile()
	r := build(t, p, calltree.Options{})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	total := m["total"].(map[string]any)
	for _, k := range []string{"wall_ns", "wall_ns_raw", "delta_ns", "cpu_ns", "dispatches", "dispatches_voluntary", "dispatches_involuntary", "interrupts", "interrupt_ns", "samples"} {
		if _, ok := total[k]; !ok {
			t.Errorf("total has no %q: %v", k, total)
		}
	}
	th := m["processes"].([]any)[0].(map[string]any)["threads"].([]any)[0].(map[string]any)
	mainNode := th["root"].(map[string]any)["children"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "module", "level", "recursion", "sampled", "calls", "callees", "base", "cum", "min_self_ns", "max_self_ns", "children"} {
		if _, ok := mainNode[k]; !ok {
			t.Errorf("node has no %q", k)
		}
	}
	if !strings.Contains(string(b), `"children":[]`) || strings.Contains(string(b), `"children":null`) {
		t.Errorf("leaf children are not []: %s", b)
	}
	if _, ok := total["period"]; ok || r.Total.Period != 1 {
		t.Errorf("period is %d and in the JSON (%v): the instrumented views count samples, never print periods", r.Total.Period, total)
	}
	var back calltree.Result
	want := r.Total
	want.Period = 0
	if err := json.Unmarshal(b, &back); err != nil || back.Total != want || len(back.Functions) != len(r.Functions) {
		t.Errorf("round trip: %v %+v", err, back.Total)
	}
}

// BenchmarkBuild analyses a million events: four threads whose main
// calls f, which calls g, with switches and samples.
func BenchmarkBuild(b *testing.B) {
	ib := modeltest.NewHooks().Calibrate(10, 12, 9, 11)
	for tid := uint32(1); tid <= 4; tid++ {
		ib.Thread(1, tid, "t")
		var sb strings.Builder
		now := 0
		step := func(tok string) {
			now += 37
			sb.WriteString(itoa(now) + " " + tok + " ")
		}
		step("+main")
		for i := range 250_000 / 4 {
			step("+f")
			step("+g")
			if i%16 == 0 {
				step("preempt")
				step("in")
				step("s:_start;main;f;g;u")
			}
			step("-g")
			step("-f")
		}
		step("-main")
		ib.Run(1, tid, sb.String())
	}
	p := ib.Profile()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := calltree.Build(p, calltree.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Events)), "events")
}

func TestCalibrationMechanismMismatch(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).
		Run(1, 1, "0 +main 10 -main").Profile()
	p.Header.Instrument = "uprobe" // the calibration is of hooks
	r := build(t, p, calltree.Options{})
	if r.Calibration != nil || r.Total.WallNS != 10 || !strings.Contains(strings.Join(r.Warnings, "\n"), "not applied") {
		t.Errorf("calibration %v, wall %v, warnings %q", r.Calibration, r.Total.WallNS, r.Warnings)
	}
}

// TestBaselineAndEnd: a thread's metrics count from its creation (its
// baseline) to its exit, even outside any event: before its first
// event at its root, after its last in the call then open.
func TestBaselineAndEnd(t *testing.T) {
	p := modeltest.NewHooks().ThreadAt(1, 2, "w", 100).
		Run(1, 2, "130 out 140 in 150 +main 170 +f 190 preempt 200 in 250 irq:10 260 exit").Profile()
	r := build(t, p, calltree.Options{})
	th := thread(t, r, 2)
	if th.BeginNS != 100 || th.EndNS != 260 || th.FirstNS != 150 || th.LastNS != 170 || th.Repairs.Unclosed != 2 {
		t.Errorf("thread: %+v", th)
	}
	root := &th.Root
	if root.Base.WallNSRaw != 50 || root.Base.CPUNS != 40 || root.Base.Dispatches != 1 || root.Base.Voluntary != 1 {
		t.Errorf("root base (before main): %+v", root.Base)
	}
	f := node(t, root, "main;f")
	if f.Base.WallNSRaw != 90 || f.Base.CPUNS != 80 || f.Base.Involuntary != 1 || f.Base.Interrupts != 1 || f.Base.InterruptNS != 10 {
		t.Errorf("f (open at the exit): %+v", f.Base)
	}
	if root.Cum.WallNSRaw != 160 {
		t.Errorf("root cum %d, want the thread's life, 160", root.Cum.WallNSRaw)
	}
	fl, err := callflow(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev := fl[0].Events
	if len(ev) != 5 || ev[0].Delta.WallNSRaw != 50 || ev[2].Kind != calltree.FlowEnd || ev[2].Delta.WallNSRaw != 90 || ev[2].Name != "f" ||
		ev[3].Kind != calltree.FlowUnclosed || ev[3].TimeNS != 260 {
		t.Errorf("callflow %+v", ev)
	}

	// Without a creation time, the start of recording; a first switch-in
	// says the thread was off CPU until then.
	p = modeltest.NewHooks().Thread(1, 1, "app").Run(1, 1, "80 in 90 +main 100 -main").Profile()
	p.Header.StartNS = 50
	th = thread(t, build(t, p, calltree.Options{}), 1)
	if th.BeginNS != 50 || th.Root.Base.WallNSRaw != 40 || th.Root.Base.CPUNS != 10 {
		t.Errorf("from the start: %+v", th)
	}

	// A thread with no record lived off CPU; the end of a recording cut
	// short is its last record.
	p = modeltest.NewHooks().Thread(1, 1, "app").Thread(1, 3, "idle").Run(1, 1, "0 +main 10 out 20 in 30 s:main").Profile()
	p.End = nil
	r = build(t, p, calltree.Options{})
	if idle := thread(t, r, 3); idle.Root.Cum.WallNSRaw != 30 || idle.Root.Cum.CPUNS != 0 || idle.EndNS != 30 {
		t.Errorf("idle: %+v", idle)
	}
	if m := node(t, &thread(t, r, 1).Root, "main"); m.Base.WallNSRaw != 30 || m.Base.CPUNS != 20 {
		t.Errorf("main, open when the trace ends: %+v", m.Base)
	}
}

// TestSampling: a recording without events still measures each thread.
func TestSampling(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Run(1, 1, "0 s:main;f 10 out 30 in 40 s:main;g 50 softirq:5").Profile()
	r := build(t, p, calltree.Options{})
	th := thread(t, r, 1)
	if th.Root.Cum.WallNSRaw != 50 || th.Root.Cum.CPUNS != 30 || th.Root.Cum.Samples != 2 || th.Root.Cum.Interrupts != 1 ||
		node(t, &th.Root, "main;f").Cum.Samples != 1 || len(r.Warnings) != 0 {
		t.Errorf("thread: %+v, warnings %q", th, r.Warnings)
	}
}

// TestInterrupts: the IN metric per node, the part of an interrupt
// inside the interval it ended in, and excluding them.
func TestInterrupts(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).
		Run(1, 1, "0 +main 10 +f 15 irq:20 20 softirq:3 30 -f 40 -main").Profile()
	r := build(t, p, calltree.Options{})
	if !r.InterruptsMeasured {
		t.Error("interrupts not measured")
	}
	f := node(t, &thread(t, r, 1).Root, "main;f")
	if f.Base.Interrupts != 2 || f.Base.InterruptNS != 8 || f.Base.WallNS != 19 {
		t.Errorf("f: %+v", f.Base)
	}
	x := build(t, p, calltree.Options{ExcludeInterrupts: true})
	f = node(t, &thread(t, x, 1).Root, "main;f")
	if f.Base.WallNS != 11 || f.Base.DeltaNS != 9 || f.Base.InterruptNS != 8 || !x.ExcludeInterrupts {
		t.Errorf("f without interrupts: %+v", f.Base)
	}
	x = build(t, p, calltree.Options{ExcludeInterrupts: true, Raw: true})
	if f = node(t, &thread(t, x, 1).Root, "main;f"); f.Base.WallNS != 12 {
		t.Errorf("f raw without interrupts: %+v", f.Base)
	}
	p = modeltest.NewHooks().Thread(1, 1, "app").Run(1, 1, "0 +main 10 -main").Profile()
	if w := build(t, p, calltree.Options{ExcludeInterrupts: true}).Warnings; !strings.Contains(strings.Join(w, "\n"), "no interrupt records") {
		t.Errorf("warnings %q", w)
	}
}

// TestGoroutines: with ByGoroutine a goroutine's calls match across the
// threads it ran on, and its parked time is off CPU.
func TestGoroutines(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").Thread(1, 2, "app").
		Run(1, 1, "0 +rt 5 -rt 10 go:7 20 +handle 30 +read 40 go:8 45 +other 50 -other 55 preempt").
		Run(1, 2, "60 go:7 70 -read 80 -handle 90 go:9").Profile()
	r := build(t, p, calltree.Options{ByGoroutine: true})
	// Thread 2 runs a goroutine from its first record; goroutine 9 runs
	// for no time.
	if !r.ByGoroutine || len(r.Processes) != 1 || len(r.Processes[0].Threads) != 3 {
		t.Fatalf("threads %+v", r.Processes)
	}
	ths := r.Processes[0].Threads // goroutines first
	if own := ths[2]; own.TID != 1 || own.Goroutine != nil || own.EndNS != 10 || own.Root.Cum.WallNSRaw != 10 || own.Events != 2 {
		t.Errorf("thread 1 before its goroutines: %+v", own)
	}
	g := ths[0]
	if g.Goroutine == nil || *g.Goroutine != 7 || g.Name != "goroutine 7" || g.Root.Name != "goroutine 7" ||
		!slices.Equal(g.OSThreads, []uint32{1, 2}) || g.BeginNS != 10 || g.EndNS != 90 || g.Repairs != (calltree.Repairs{}) {
		t.Fatalf("goroutine 7: %+v", g)
	}
	read := node(t, &g.Root, "handle;read")
	if read.Calls != 1 || read.Base.WallNSRaw != 40 || read.Base.CPUNS != 20 {
		t.Errorf("read, parked from 40 to 60: %+v", read.Base)
	}
	if g8 := ths[1]; *g8.Goroutine != 8 || g8.EndNS != 90 || g8.Root.Cum.Dispatches != 1 || g8.Root.Cum.Involuntary != 1 {
		t.Errorf("goroutine 8, preempted with its thread: %+v", g8)
	}
	// By thread, the same events are two threads' unmatched calls.
	if r := build(t, p, calltree.Options{}); r.Repairs.Unmatched != 2 {
		t.Errorf("by thread: %+v", r.Repairs)
	}
}

// TestThreadPattern: a thread is selected by any of its names or its tid.
func TestThreadPattern(t *testing.T) {
	b := modeltest.NewHooks().Thread(1, 1, "app").ThreadAt(1, 2, "pool-1", 0).ThreadAt(1, 2, "reader", 100)
	p := b.Run(1, 1, "0 +main 10 -main").Run(1, 2, "5 +work 15 -work 120 +read 130 -read").Profile()
	p.Threads[1].Names = []string{"app", "pool-1"} // renamed after creation
	for pattern, want := range map[string][]string{
		"pool-*": {"pool-1"}, "app": {"app", "pool-1"}, "2": {"pool-1", "reader"}, "r?ader": {"reader"}, "nosuch": nil,
	} {
		var got []string
		for _, pr := range build(t, p, calltree.Options{Filter: modeltest.Matcher(t, model.Filter{Thread: pattern})}).Processes {
			for _, th := range pr.Threads {
				got = append(got, th.Name)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q selects %q, want %q", pattern, got, want)
		}
	}
}

// flowThread is a FlowThread with its lines read back.
type flowThread struct {
	calltree.FlowThread
	Events []calltree.FlowEvent
}

// callflow is Build's Result.Flows with Options.Flow set, their lines
// read back.
func callflow(p *model.Profile, o calltree.Options) ([]flowThread, error) {
	o.Flow = true
	r, err := calltree.Build(p, o)
	if err != nil {
		return nil, err
	}
	var out []flowThread
	for _, ft := range r.Flows {
		th := flowThread{FlowThread: ft}
		err := ft.Each(func(e *calltree.FlowEvent) error {
			th.Events = append(th.Events, *e)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(th.Events) != ft.Lines || th.Events[0].TimeNS != ft.FirstNS {
			return nil, fmt.Errorf("thread %d: %d lines from %d, want %d from %d", ft.TID, len(th.Events), th.Events[0].TimeNS, ft.Lines, ft.FirstNS)
		}
		out = append(out, th)
	}
	return out, nil
}

// TestSiteCosts: a probed function whose entry instruction is
// single-stepped, or whose exits are RET probes, loses the extra cost of
// its sites (Calibration.Sites) from the interval after each such event,
// on top of the fitted overheads, but for the part of a stepped entry's
// measured in the caller, which the interval before it loses; a function
// on emulated sites loses only the overheads.
func TestSiteCosts(t *testing.T) {
	b := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).
		Run(1, 1, "0 +main 100 +f 200 -f 300 +g 400 -g 500 -main")
	p := b.Profile()
	p.Header.Calibration.Sites = &trace.SiteCosts{EntryEmulated: 500, EntryStepped: 520, ExitReturn: 300, ExitRetInsn: 307}
	p.Probes = []model.Probe{
		{Function: b.Function("f"), Mech: trace.ProbeEntry, Stepped: true},
		{Function: b.Function("g"), Mech: trace.ProbeRetInsn},
		{Function: b.Function("main"), Mech: trace.ProbeReturn},
	}
	r := build(t, p, calltree.Options{})
	// f's entry leaves 20 ns in f's own interval; g's RET probe 7 ns in
	// main's interval after it.
	if f := node(t, &thread(t, r, 1).Root, "main;f"); !near(f.Base.WallNS, 100-1-20) {
		t.Errorf("f self %v, want 100 − 1 − 20", f.Base.WallNS)
	}
	if g := node(t, &thread(t, r, 1).Root, "main;g"); !near(g.Base.WallNS, 100-1) {
		t.Errorf("g self %v, want 100 − 1", g.Base.WallNS)
	}
	if m := node(t, &thread(t, r, 1).Root, "main"); !near(m.Base.WallNS, 300-3-7) {
		t.Errorf("main self %v, want 300 − 3 overheads − 7 after g's RET probe", m.Base.WallNS)
	}

	// 6 of the stepped entry's 20 ns measured in the caller's intervals
	// come off main's interval before f's entry, the other 14 off f's.
	p.Header.Calibration.Sites.EntrySteppedCaller = 6
	r = build(t, p, calltree.Options{})
	if f := node(t, &thread(t, r, 1).Root, "main;f"); !near(f.Base.WallNS, 100-1-14) {
		t.Errorf("f self %v, want 100 − 1 − 14", f.Base.WallNS)
	}
	if m := node(t, &thread(t, r, 1).Root, "main"); !near(m.Base.WallNS, 300-3-7-6) {
		t.Errorf("main self %v, want 300 − 3 overheads − 7 after g's RET probe − 6 before f's entry", m.Base.WallNS)
	}

	// 4 of the RET probe's 7 ns come before its timestamp, off g's
	// interval; 3 off main's after it.
	p.Header.Calibration.Sites.ExitRetInsnBefore = 4
	r = build(t, p, calltree.Options{})
	if g := node(t, &thread(t, r, 1).Root, "main;g"); !near(g.Base.WallNS, 100-1-4) {
		t.Errorf("g self %v, want 100 − 1 − 4", g.Base.WallNS)
	}
	if m := node(t, &thread(t, r, 1).Root, "main"); !near(m.Base.WallNS, 300-3-3-6) {
		t.Errorf("main self %v, want 300 − 3 overheads − 3 after g's RET probe − 6 before f's entry", m.Base.WallNS)
	}
}

// TestSelfCPUPerCall: the per-call extremes are kept for CPU time too
// (the field test's MIN/CALL under --metric cpu was wall time): a call
// off its CPU half its time has 40 ns of wall, 20 of CPU.
func TestSelfCPUPerCall(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +f 10 out 30 in 40 -f 50 +f 55 -f").Profile()
	r := build(t, p, calltree.Options{})
	f := function(t, r, "f")
	if f.MinSelfNS != 5 || f.MaxSelfNS != 40 || f.MinSelfCPUNS != 5 || f.MaxSelfCPUNS != 20 {
		t.Errorf("f per call: wall %v..%v, cpu %v..%v; want 5..40, 5..20", f.MinSelfNS, f.MaxSelfNS, f.MinSelfCPUNS, f.MaxSelfCPUNS)
	}
}

// TestCallSiteProbes: f is probed at its callers (ProbeCallSite). Its
// first exit and its second entry are one probe hit on one instruction
// (the same time): no overhead is taken between them. Its third call
// returns into g's epilogue and ends with g's exit: no repair. Its
// exits cost 15 ns more than a return probe's before their timestamps,
// 5 after.
func TestCallSiteProbes(t *testing.T) {
	b := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).
		Run(1, 1, "0 +main 100 +f 200 -f 200 +f 300 -f 400 +g 500 +f 600 -g 700 -main")
	p := b.Profile()
	p.Header.Calibration.Sites = &trace.SiteCosts{EntryEmulated: 500, EntryStepped: 520, ExitReturn: 300, ExitRetInsn: 307,
		ExitCallSite: 320, ExitCallSiteBefore: 15}
	p.Probes = []model.Probe{
		{Function: b.Function("f"), Mech: trace.ProbeCallSite, CallSite: true},
		{Function: b.Function("g"), Mech: trace.ProbeReturn},
		{Function: b.Function("main"), Mech: trace.ProbeReturn},
	}
	r := build(t, p, calltree.Options{})
	if r.Repairs != (calltree.Repairs{}) {
		t.Errorf("repairs %+v, want none", r.Repairs)
	}
	root := &thread(t, r, 1).Root
	check(t, node(t, root, "main;g;f"), want{1, 0, 3, 0, 100, 100, 99, 99})
	if f := node(t, root, "main;f"); f.Calls != 2 || !near(f.Base.WallNS, 2*(100-1-15)) {
		t.Errorf("main;f: %d calls, self %v, want 2 and 2 × (100 − 1 − 15)", f.Calls, f.Base.WallNS)
	}
	// 99 before f, 0 between f's calls, 100 − 1 − 5 after f's exit,
	// 99 after g's.
	if m := node(t, root, "main"); !near(m.Base.WallNS, 99+0+94+99) {
		t.Errorf("main self %v, want 99 + 0 + 94 + 99", m.Base.WallNS)
	}

	// A calibration that did not measure call sites: their exits cost
	// an emulated hit (500), all after the timestamp.
	p.Header.Calibration.Sites.ExitCallSite, p.Header.Calibration.Sites.ExitCallSiteBefore = 0, 0
	r = build(t, p, calltree.Options{})
	if f := node(t, &thread(t, r, 1).Root, "main;f"); !near(f.Base.WallNS, 2*(100-1)) {
		t.Errorf("main;f self %v without measured call-site costs, want 2 × (100 − 1)", f.Base.WallNS)
	}
	if m := node(t, &thread(t, r, 1).Root, "main"); !near(m.Base.WallNS, 99+0+(100-1-200)+99) {
		t.Errorf("main self %v without measured call-site costs, want 99 + 0 + (100 − 1 − 200) + 99", m.Base.WallNS)
	}

	// Only the call directly under the exiting one ends with it: f's
	// call inside f (its caller never exited: left by a longjmp, say)
	// is a repair, g's call of f is not.
	b = modeltest.NewHooks().Thread(1, 1, "app").
		Run(1, 1, "0 +main 100 +g 200 +f 300 +f 400 -g 500 -main")
	p2 := b.Profile()
	p2.Probes = []model.Probe{{Function: b.Function("f"), Mech: trace.ProbeCallSite, CallSite: true}}
	if r := build(t, p2, calltree.Options{}); r.Repairs.Popped != 1 {
		t.Errorf("a call-site call above another: repairs %+v, want 1 popped", r.Repairs)
	}

	// Probed at its entry, f's call that g's exit ends is a repair.
	p.Probes[0].Mech, p.Probes[0].CallSite = trace.ProbeEntry, false
	if r := build(t, p, calltree.Options{}); r.Repairs.Popped != 1 {
		t.Errorf("f probed at its entry: repairs %+v, want 1 popped", r.Repairs)
	}
}

// TestLazyRetInsnProbes: a probe placed lazily under --root
// (ProbeDynamic) whose exits are RET-instruction probes (RetInsn) costs
// the RET probe's extra per exit, as a ProbeRetInsn does: before, the
// --root recording of the Rust corpus program's count_words kept 5.3 s
// of the RET probes' 13 µs a hit (5.568 s calibrated, 248 ms after).
func TestLazyRetInsnProbes(t *testing.T) {
	b := modeltest.NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).
		Run(1, 1, "0 +main 100 +f 200 -f 300 -main")
	p := b.Profile()
	// A RET probe costs 20 ns more than a return probe, 5 of them
	// before its timestamp (in f), 15 after (in main).
	p.Header.Calibration.Sites = &trace.SiteCosts{EntryEmulated: 500, EntryStepped: 520, ExitReturn: 30, ExitRetInsn: 50, ExitRetInsnBefore: 5}
	self := func(probe model.Probe) (f, main float64) {
		p.Probes = []model.Probe{probe}
		root := &thread(t, build(t, p, calltree.Options{}), 1).Root
		return node(t, root, "main;f").Base.WallNS, node(t, root, "main").Base.WallNS
	}
	fn := b.Function("f")
	f1, m1 := self(model.Probe{Function: fn, Mech: trace.ProbeRetInsn})
	f2, m2 := self(model.Probe{Function: fn, Mech: trace.ProbeDynamic, RetInsn: true})
	f3, m3 := self(model.Probe{Function: fn, Mech: trace.ProbeDynamic})
	if !near(f2, f1) || !near(m2, m1) || !near(f3-f2, 5) || !near(m3-m2, 15) {
		t.Errorf("self of f and main: lazy with RET probes %v, %v; RET probes %v, %v; lazy with a return probe %v, %v: want the first two alike, 5 and 15 ns below the third",
			f2, m2, f1, m1, f3, m3)
	}
}
