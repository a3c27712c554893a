package record

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/report"
	"trueprof/internal/testutil"
)

// pathTotals flattens r's trees: calls and cum wall time by thread name
// and call path (a tid differs from run to run).
func pathTotals(r *calltree.Result) map[string][2]float64 {
	out := map[string][2]float64{}
	var walk func(path string, n *calltree.Node)
	walk = func(path string, n *calltree.Node) {
		path += "/" + n.Name
		v := out[path]
		out[path] = [2]float64{v[0] + float64(n.Calls), v[1] + n.Cum.WallNS}
		for i := range n.Children {
			walk(path, &n.Children[i])
		}
	}
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			for i := range th.Root.Children {
				walk(pr.Name+":"+th.Name, &th.Root.Children[i])
			}
		}
	}
	return out
}

// TestAggregateMatchesEvents records the calls program with and without
// --aggregate: the aggregated trace holds no event but snapshots, and
// its trees have the calls of the trace of every event exactly, node by
// node, and wall times within the noise of two runs; the reports read it.
func TestAggregateMatchesEvents(t *testing.T) {
	const mids = 300_000
	bin := testutil.BuildC(t, t.TempDir(), "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	argv := []string{bin, strconv.Itoa(mids)}
	full, fp := recordCmd(t, Config{Command: argv, Mech: "hook", NoSampling: true})
	agg, ap := recordCmd(t, Config{Command: argv, Mech: "hook", NoSampling: true, Aggregate: true, Snapshot: 20 * time.Millisecond})
	if full.Events != 6*mids+2 || agg.Events != 6*mids+2 {
		t.Fatalf("events %d and %d, want %d", full.Events, agg.Events, 6*mids+2)
	}
	if len(ap.Events) != 0 || ap.Tree == nil || !ap.Aggregated() {
		t.Fatalf("aggregated trace: %d events, tree %v", len(ap.Events), ap.Tree)
	}
	want, err := calltree.Build(fp, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := calltree.Build(ap, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Calls != 3*mids+1 || got.Calls != want.Calls || got.Events != want.Events {
		t.Errorf("calls %d, events %d; the full trace's %d, %d", got.Calls, got.Events, want.Calls, want.Events)
	}
	g, w := pathTotals(got), pathTotals(want)
	if len(g) != len(w) {
		t.Errorf("%d call paths, the full trace's %d:\n%v\n%v", len(g), len(w), g, w)
	}
	for path, wv := range w {
		gv := g[path]
		if gv[0] != wv[0] {
			t.Errorf("%s: %v calls, the full trace's %v", path, gv[0], wv[0])
		}
		// Two runs of the same program: the same time but for the
		// machine's noise, which on a shared machine reaches a factor
		// of 3 for calibrated times of 20 ns calls; a unit or a
		// missing interval would be far more. TestLiveSameResult holds
		// the times of the same records to 1e-6.
		t.Logf("%s: %.0f calls, %.0f ns; the full trace's %.0f ns", path, gv[0], gv[1], wv[1])
		if gv[1] <= 0 || gv[1] < wv[1]/10 || gv[1] > wv[1]*10 {
			t.Errorf("%s: %.0f ns, the full trace's %.0f ns", path, gv[1], wv[1])
		}
	}
	t.Logf("aggregated: %d snapshots, %d bytes; every event: %d bytes", ap.Tree.Snapshots, agg.Bytes, full.Bytes)
	if ap.Tree.Snapshots < 2 {
		t.Errorf("%d snapshots in a recording of several 20 ms intervals", ap.Tree.Snapshots)
	}
	if agg.Bytes*10 > full.Bytes {
		t.Errorf("aggregated trace of %d bytes, every event's %d", agg.Bytes, full.Bytes)
	}
	// The reports read it as an instrumented recording and say how it
	// was made; callflow says it needs the events.
	var text strings.Builder
	if err := report.Write(&text, ap, report.Options{View: "tree", Format: "text"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "Aggregated: trees built while recording") || !strings.Contains(text.String(), "mid (calls)") {
		t.Errorf("tree report of the aggregated trace:\n%s", text.String())
	}
	if err := report.Write(&text, ap, report.Options{View: "callflow", Format: "text"}); !errors.Is(err, calltree.ErrAggregated) {
		t.Errorf("callflow of the aggregated trace: %v, want ErrAggregated", err)
	}
}

// TestAggregateConfig: what --aggregate cannot honour is refused before
// anything runs.
func TestAggregateConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Snapshot: time.Second},
		{TreeMemory: 1 << 20},
		{Aggregate: true},
		{Aggregate: true, Mech: "hook", Mode: "wrap"},
		{Aggregate: true, Mech: "hook", Snapshot: -time.Second},
		{Aggregate: true, Mech: "hook", Snapshot: time.Millisecond},
		{Aggregate: true, Mech: "hook", TreeMemory: -1},
	} {
		if err := checkAggregate(&cfg, cfg.Mech); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	cfg := Config{Aggregate: true, Mech: "hook"}
	if err := checkAggregate(&cfg, cfg.Mech); err != nil || cfg.Snapshot != DefaultSnapshot {
		t.Errorf("defaults: %v, snapshot %v", err, cfg.Snapshot)
	}
}

// TestAggregateTreeMemory records main calling 1,000 functions once each
// with the trees bounded to 16 KiB: most of main's children are folded
// into a (pruned) node, the trace says how many, and main still made
// exactly 1,000 calls.
func TestAggregateTreeMemory(t *testing.T) {
	const n = 1000
	bin := testutil.BuildC(t, t.TempDir(), "many", testutil.ManyFunctionsC(n), "-O1", "-fno-inline", "-finstrument-functions")
	_, p := recordCmd(t, Config{Command: []string{bin}, Mech: "hook", NoSampling: true, Aggregate: true, TreeMemory: 16 << 10})
	if p.Tree == nil || p.Tree.Pruned == 0 || p.Tree.Nodes*4 > n {
		t.Fatalf("tree of %d nodes, %d pruned (nil %v): want nodes pruned, under a quarter of %d left", p.Tree.Nodes, p.Tree.Pruned, p.Tree == nil, n)
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var main *calltree.Node
	var walk func(nd *calltree.Node)
	walk = func(nd *calltree.Node) {
		if nd.Name == "main" {
			main = nd
		}
		for i := range nd.Children {
			walk(&nd.Children[i])
		}
	}
	for _, pr := range r.Processes {
		for i := range pr.Threads {
			walk(&pr.Threads[i].Root)
		}
	}
	if main == nil || main.Calls != 1 || main.Callees != n {
		t.Fatalf("main %+v: want 1 call making %d", main, n)
	}
	pruned := main.Children[slices.IndexFunc(main.Children, func(c calltree.Node) bool { return c.Name == "(pruned)" })]
	t.Logf("%d nodes left, %d pruned holding %.0f ns; (pruned) under main: %d calls, %.0f ns", p.Tree.Nodes, p.Tree.Pruned, p.Tree.PrunedNS, pruned.Calls, pruned.Cum.WallNS)
	if pruned.Calls+uint64(len(main.Children)-1) != n {
		t.Errorf("(pruned) has %d calls beside %d children", pruned.Calls, len(main.Children)-1)
	}
}

// TestAggregateDenseLoad records the dense load at full size, 10,000,000
// mid calls (60,000,002 events), aggregated: the trees count every call
// exactly, the trace stays under 1 MB, and the recorder's heap under 150
// MB (bench/aggregate measures its whole resident set from outside).
func TestAggregateDenseLoad(t *testing.T) {
	const mids = 10_000_000
	bin := testutil.BuildC(t, t.TempDir(), "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	stop := make(chan struct{})
	peak := make(chan uint64)
	go func() { peak <- peakHeap(stop) }()
	res, p := recordCmd(t, Config{Command: []string{bin, strconv.Itoa(mids)}, Mech: "hook", NoSampling: true, Aggregate: true})
	close(stop)
	heap := <-peak
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	for _, f := range r.Functions {
		calls[f.Name] = f.Calls
	}
	t.Logf("%d events, calls %v, %d dropped, trace %d bytes, recorder heap at most %d MiB", r.Events, calls, r.Dropped, res.Bytes, heap>>20)
	if r.Events != 6*mids+2 || calls["main"] != 1 || calls["mid"] != mids || calls["leaf"] != 2*mids || r.Dropped != 0 {
		t.Errorf("events %d, calls %v, dropped %d: want %d, 1, %d, %d, 0", r.Events, calls, r.Dropped, 6*mids+2, mids, 2*mids)
	}
	if res.Bytes >= 1<<20 {
		t.Errorf("aggregated trace of %d bytes: want under 1 MiB", res.Bytes)
	}
	if heap > 150<<20 {
		t.Errorf("recorder heap reached %d MiB: want at most 150 MiB", heap>>20)
	}
}

// spinCalls returns the calls of main.spin in each tree of r, by
// goroutine id (0 for a thread's tree), and their sum.
func spinCalls(r *calltree.Result) (map[uint64]uint64, uint64) {
	calls, total := map[uint64]uint64{}, uint64(0)
	var walk func(g uint64, n *calltree.Node)
	walk = func(g uint64, n *calltree.Node) {
		if n.Name == "main.spin" {
			calls[g] += n.Calls
			total += n.Calls
		}
		for i := range n.Children {
			walk(g, &n.Children[i])
		}
	}
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			g := uint64(0)
			if th.Goroutine != nil {
				g = *th.Goroutine
			}
			walk(g, &th.Root)
		}
	}
	return calls, total
}

// TestAggregateGoroutines records the goroutine fixture with a probe on
// main.spin, aggregated and not: by goroutine, the aggregated trace
// gives each worker goroutine (the ids the program printed) its exact
// rounds of calls, as the trace of every event does, whichever threads
// ran it; by thread it still gives the same calls and events.
func TestAggregateGoroutines(t *testing.T) {
	bin := goFixture(t)
	cfg := Config{Command: []string{bin}, Trace: []string{"main.spin"}, NoSampling: true}
	full, _, fullWorkers := recordGoFixture(t, cfg)
	cfg.Aggregate, cfg.Snapshot = true, 20*time.Millisecond
	agg, _, workers := recordGoFixture(t, cfg)
	if len(agg.Events) != 0 || !agg.Aggregated() || len(agg.GoIDs) == 0 {
		t.Fatalf("aggregated trace: %d events, %d goroutine switches", len(agg.Events), len(agg.GoIDs))
	}
	build := func(p *model.Profile, o calltree.Options) *calltree.Result {
		r, err := calltree.Build(p, o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const want = testutil.GoroutineFixtureWorkers * testutil.GoroutineFixtureRounds
	for _, c := range []struct {
		name    string
		p       *model.Profile
		workers []uint64
	}{{"every event", full, fullWorkers}, {"aggregated", agg, workers}} {
		byG := build(c.p, calltree.Options{ByGoroutine: true})
		byT := build(c.p, calltree.Options{})
		calls, total := spinCalls(byG)
		t.Logf("%s: main.spin calls by goroutine %v; events %d by goroutine, %d by thread", c.name, calls, byG.Events, byT.Events)
		for _, g := range c.workers {
			if calls[g] != testutil.GoroutineFixtureRounds {
				t.Errorf("%s: goroutine %d made %d calls of main.spin, want %d", c.name, g, calls[g], testutil.GoroutineFixtureRounds)
			}
		}
		if _, tt := spinCalls(byT); total != want || tt != want {
			t.Errorf("%s: %d calls of main.spin by goroutine, %d by thread, want %d", c.name, total, tt, want)
		}
		if byG.Events != 2*want || byT.Events != 2*want || !byG.ByGoroutine {
			t.Errorf("%s: %d events by goroutine, %d by thread, want %d", c.name, byG.Events, byT.Events, 2*want)
		}
	}
	// A worker that ran on several threads (CheckGoroutineFixture saw
	// some) is one tree by goroutine, which says so.
	moved := 0
	for _, pr := range build(agg, calltree.Options{ByGoroutine: true}).Processes {
		for _, th := range pr.Threads {
			if th.Goroutine != nil && slices.Contains(workers, *th.Goroutine) && len(th.OSThreads) > 1 {
				moved++
			}
		}
	}
	if moved == 0 {
		t.Error("no worker's tree says it ran on more than one thread")
	}
	// The reports read them: trueprof report --by goroutine.
	for _, view := range []string{"tree", "threads", "flat"} {
		var text strings.Builder
		if err := report.Write(&text, agg, report.Options{View: view, Format: "text", By: "goroutine"}); err != nil {
			t.Fatalf("%s by goroutine: %v", view, err)
		}
		if g := fmt.Sprintf("goroutine %d", workers[0]); view != "flat" && !strings.Contains(text.String(), g) {
			t.Errorf("%s by goroutine does not show %s:\n%s", view, g, text.String())
		}
	}
}
