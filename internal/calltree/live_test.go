package calltree

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// liveTrace replays p's records through a Live analysis, as the recorder
// does with --aggregate, writing a snapshot every `every` records (and
// at random when every is 0), and returns what a reader of that trace
// gets: p's tables with the trees the snapshots hold (model.Load of the
// tree records), the trace, and its size after each snapshot but the
// last (the trace flushed there).
func liveTrace(t testing.TB, p *model.Profile, every int, r *rand.Rand) (*model.Profile, []byte, []int) {
	return liveTraceBound(t, p, every, r, 0)
}

// liveTraceRoot is liveTrace of a --root recording of function root.
func liveTraceRoot(t *testing.T, p *model.Profile, root string, r *rand.Rand) *model.Profile {
	rp := *p
	rp.Header.Root = root
	q, _, _ := liveTraceBound(t, &rp, 0, r, 0)
	return q
}

// liveTraceBound is liveTrace with the trees bounded to bound bytes (0: none),
// pruned as the recorder prunes them: after any record.
func liveTraceBound(t testing.TB, p *model.Profile, every int, r *rand.Rand, bound int64) (*model.Profile, []byte, []int) {
	t.Helper()
	tables := *p
	tables.Samples, tables.Events, tables.Switches, tables.Adjusts, tables.IRQs, tables.GoIDs = nil, nil, nil, nil, nil, nil
	var buf bytes.Buffer
	h := p.Header
	h.Aggregate = &trace.Aggregate{SnapshotNS: 1}
	w, err := trace.NewWriter(&buf, &h, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The locations the tree nodes name, so that the reader accepts
	// them; their names are p's.
	for id := 1; id < len(p.Locations); id++ {
		if err := w.Write(&trace.Location{ID: uint32(id)}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := NewLive(&tables, Options{Root: p.Header.Root}, len(p.Switches) > 0)
	if err != nil {
		t.Fatal(err)
	}
	l.Bound(bound)
	if len(p.GoIDs) > 0 {
		if err := l.FollowGoroutines(); err != nil {
			t.Fatal(err)
		}
	}
	var cuts []int
	for i, rec := range records(p) {
		l.Record(&rec)
		if err := l.Prune(rec.Time(), w); err != nil {
			t.Fatal(err)
		}
		if (every > 0 && i%every == every-1) || (every == 0 && r.IntN(5) == 0) {
			if err := l.Snapshot(rec.Time(), w); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			cuts = append(cuts, buf.Len())
		}
	}
	var end, detached uint64
	if p.End != nil {
		end, detached = p.End.Time, p.End.Detached
	}
	if err := l.Finish(end, detached, w); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&trace.End{Time: end, Detached: detached}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	loaded, err := model.Load(bytes.NewReader(buf.Bytes()))
	if err != nil || loaded.Err != nil {
		t.Fatalf("loading the aggregated trace: %v, %v", err, loaded.Err)
	}
	q := tables
	q.Header.Aggregate, q.Tree = h.Aggregate, loaded.Tree
	return &q, buf.Bytes(), cuts
}

// near reports whether two calibrated times agree but for the rounding
// of summed deltas.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b))+1e-6 }

// sameMetrics compares metrics: counts exactly, times within rounding.
func sameMetrics(a, b Metrics) bool {
	fa, fb := a, b
	fa.WallNS, fa.DeltaNS, fa.CPUNS, fb.WallNS, fb.DeltaNS, fb.CPUNS = 0, 0, 0, 0, 0, 0
	return fa == fb && near(a.WallNS, b.WallNS) && near(a.DeltaNS, b.DeltaNS) && near(a.CPUNS, b.CPUNS)
}

// clampedSum reports whether a and b are the same metrics but for
// calibrated time that b clamped at zero in more places than a (a node's
// total is clamped, not its intervals, so a tree whose nodes merge b's,
// or a callflow's intervals, clamp less): b may have more of it, never
// less.
func clampedSum(a, b Metrics) bool {
	wall, cpu := a.WallNS, a.CPUNS
	a.WallNS, a.CPUNS = b.WallNS, b.CPUNS
	a.DeltaNS = float64(a.WallNSRaw) - a.WallNS
	return wall <= b.WallNS+1e-6 && cpu <= b.CPUNS+1e-6 && sameMetrics(a, b)
}

// diffNodes returns where two trees differ, "" if nowhere.
func diffNodes(path string, a, b *Node) string {
	path += "/" + a.Name
	if a.Name != b.Name || a.Module != b.Module || a.Level != b.Level || a.Recursion != b.Recursion || a.Sampled != b.Sampled ||
		a.Calls != b.Calls || a.Callees != b.Callees || !sameMetrics(a.Base, b.Base) || !sameMetrics(a.Cum, b.Cum) ||
		!near(a.MinSelfNS, b.MinSelfNS) || !near(a.MaxSelfNS, b.MaxSelfNS) ||
		!near(a.MinSelfCPUNS, b.MinSelfCPUNS) || !near(a.MaxSelfCPUNS, b.MaxSelfCPUNS) || len(a.Children) != len(b.Children) {
		return fmt.Sprintf("%s: %+v\nwant %+v", path, *a, *b)
	}
	for i := range a.Children {
		if d := diffNodes(path, &a.Children[i], &b.Children[i]); d != "" {
			return d
		}
	}
	return ""
}

// diffResults returns where two Results differ, "" if nowhere: counts
// exact, calibrated times within rounding.
func diffResults(got, want *Result) string {
	if got.Calls != want.Calls || got.Events != want.Events || got.Dropped != want.Dropped || got.Repairs != want.Repairs ||
		got.CPUMeasured != want.CPUMeasured || got.InterruptsMeasured != want.InterruptsMeasured || !sameMetrics(got.Total, want.Total) ||
		len(got.Processes) != len(want.Processes) || len(got.Functions) != len(want.Functions) || fmt.Sprint(got.Warnings) != fmt.Sprint(want.Warnings) {
		return fmt.Sprintf("totals: calls %d/%d events %d/%d dropped %d/%d repairs %+v/%+v cpu %v/%v irq %v/%v total %+v/%+v processes %d/%d functions %d/%d warnings %q/%q",
			got.Calls, want.Calls, got.Events, want.Events, got.Dropped, want.Dropped, got.Repairs, want.Repairs,
			got.CPUMeasured, want.CPUMeasured, got.InterruptsMeasured, want.InterruptsMeasured, got.Total, want.Total,
			len(got.Processes), len(want.Processes), len(got.Functions), len(want.Functions), got.Warnings, want.Warnings)
	}
	for i := range got.Processes {
		gp, wp := &got.Processes[i], &want.Processes[i]
		if gp.PID != wp.PID || gp.Name != wp.Name || len(gp.Threads) != len(wp.Threads) {
			return fmt.Sprintf("process %d: %+v, want %+v", i, gp, wp)
		}
		for k := range gp.Threads {
			g, w := gp.Threads[k], wp.Threads[k]
			if d := diffNodes("", &g.Root, &w.Root); d != "" {
				return fmt.Sprintf("thread %d/%d: %s", g.PID, g.TID, d)
			}
			g.Root, w.Root = Node{}, Node{}
			if (g.Goroutine == nil) != (w.Goroutine == nil) || g.Goroutine != nil && *g.Goroutine != *w.Goroutine {
				return fmt.Sprintf("thread %+v is goroutine %v, want %v", g, g.Goroutine, w.Goroutine)
			}
			g.Goroutine, w.Goroutine = nil, nil
			if fmt.Sprint(g) != fmt.Sprint(w) {
				return fmt.Sprintf("thread %+v\nwant %+v", g, w)
			}
		}
	}
	for i := range got.Functions {
		g, w := &got.Functions[i], &want.Functions[i]
		if g.Name != w.Name || g.Calls != w.Calls || !sameMetrics(g.Self, w.Self) || !sameMetrics(g.Total, w.Total) {
			return fmt.Sprintf("function %d: %+v\nwant %+v", i, g, w)
		}
	}
	return ""
}

// TestLiveSameResult: the trees a Live analysis writes as snapshots,
// read back, give Build's Result on every event: calls exact, times but
// for rounding, over random hook recordings (threads created, exiting
// and reused, switches, pauses, interrupts, goroutine switches, samples)
// and the fixtures, with snapshots after every record, at random and
// only at the end; by thread and, for recordings with goroutine
// switches, by goroutine.
func TestLiveSameResult(t *testing.T) {
	type input struct {
		name string
		p    *model.Profile
	}
	inputs := []input{{"InstrFixture", modeltest.InstrFixture()}, {"Fixture", modeltest.Fixture()}}
	for seed := range uint64(150) {
		inputs = append(inputs, input{fmt.Sprintf("RandomHooks %d", seed), modeltest.RandomHooks(rand.New(rand.NewPCG(seed, 5)), seed%2 == 0)})
	}
	r := rand.New(rand.NewPCG(1, 2))
	byG := 0 // inputs compared by goroutine
	defer func() {
		if byG < 50 {
			t.Errorf("only %d comparisons by goroutine", byG)
		}
	}()
	for _, in := range inputs {
		want, err := Build(in.p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, every := range []int{1, 0, math.MaxInt} {
			q, _, cuts := liveTrace(t, in.p, every, r)
			got, err := Build(q, Options{})
			if err != nil {
				t.Fatalf("%s: %v", in.name, err)
			}
			if d := diffResults(got, want); d != "" {
				t.Fatalf("%s, %d snapshots: %s", in.name, len(cuts)+1, d)
			}
			if len(in.p.GoIDs) == 0 {
				continue
			}
			byG++
			wantG, err := Build(in.p, Options{ByGoroutine: true})
			if err != nil {
				t.Fatal(err)
			}
			gotG, err := Build(q, Options{ByGoroutine: true})
			if err != nil {
				t.Fatalf("%s by goroutine: %v", in.name, err)
			}
			if d := diffResults(gotG, wantG); d != "" {
				t.Fatalf("%s by goroutine, %d snapshots: %s", in.name, len(cuts)+1, d)
			}
		}
		// A --root recording: the trees of the root's subgraph.
		wantRoot, err := Build(in.p, Options{Root: "b"})
		if err != nil {
			continue // b never ran
		}
		got, err := Build(liveTraceRoot(t, in.p, "b", r), Options{Root: "b"})
		if err != nil {
			t.Fatalf("%s root b: %v", in.name, err)
		}
		if d := diffResults(got, wantRoot); d != "" {
			t.Fatalf("%s, root b: %s", in.name, d)
		}
	}
}

// TestLiveSnapshotsGrow: a trace cut after any snapshot (a recorder
// killed later) loads, and its trees hold, node by node, at most the
// calls and wall time of the complete trace's.
func TestLiveSnapshotsGrow(t *testing.T) {
	for seed := range uint64(20) {
		p := modeltest.RandomHooks(rand.New(rand.NewPCG(seed, 5)), false)
		q, data, cuts := liveTrace(t, p, 0, rand.New(rand.NewPCG(seed, 4)))
		final := q.Tree
		for _, n := range cuts {
			cut, err := model.Load(bytes.NewReader(data[:n]))
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(cut.Err, model.ErrNoEnd) || cut.Tree == nil {
				t.Fatalf("seed %d, cut at %d: %v, tree %v", seed, n, cut.Err, cut.Tree)
			}
			for i, th := range cut.Tree.Threads {
				ft := final.Threads[i]
				for k, nd := range th.Nodes {
					f := ft.Nodes[k]
					if nd.Calls > f.Calls || nd.Base.WallNS > f.Base.WallNS+1e-6 || nd.Base.Samples > f.Base.Samples || nd.Location != f.Location {
						t.Fatalf("seed %d, cut at %d: thread %d node %d %+v, final %+v", seed, n, i, k, nd, f)
					}
				}
			}
		}
	}
}

// TestAggregatedRefuses: what needs every event says the recording was
// aggregated.
func TestAggregatedRefuses(t *testing.T) {
	q, _, _ := liveTrace(t, modeltest.InstrFixture(), 3, nil)
	labels, err := model.Filter{Labels: []string{"k=v"}}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	thread, err := model.Filter{Thread: "worker*"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	g, _, _ := liveTrace(t, modeltest.RandomHooks(rand.New(rand.NewPCG(0, 5)), true), 3, nil)
	for _, c := range []struct {
		q *model.Profile
		o Options
	}{{q, Options{Flow: true}}, {q, Options{Raw: true}}, {q, Options{Root: "b"}}, {q, Options{ExcludeInterrupts: true}},
		{q, Options{Filter: labels}}, {g, Options{ByGoroutine: true, Filter: thread}}} {
		if _, err := Build(c.q, c.o); !errors.Is(err, ErrAggregated) {
			t.Errorf("%+v: %v, want ErrAggregated", c.o, err)
		}
	}
	// By goroutine, a recording of a program without goroutines says so
	// as a trace of every event does.
	if _, err := Build(q, Options{ByGoroutine: true}); !errors.Is(err, ErrNoGoroutines) {
		t.Errorf("by goroutine without goroutines: %v, want ErrNoGoroutines", err)
	}
}

// TestLivePrune bounds the trees of random hook recordings to a few
// nodes: the smallest subtrees are folded into (pruned) nodes, the trace
// says how many, and every total stays exact: each thread's time, and
// the calls its root made (a (pruned) node has the calls of the roots of
// the subtrees folded into it, not of the calls inside them).
func TestLivePrune(t *testing.T) {
	pruned := 0
	for seed := range uint64(100) {
		p := modeltest.RandomHooks(rand.New(rand.NewPCG(seed, 5)), seed%2 == 0)
		const maxNodes = 12
		q, _, _ := liveTraceBound(t, p, 0, rand.New(rand.NewPCG(seed, 9)), maxNodes*nodeBytes)
		for _, o := range []Options{{}, {ByGoroutine: true}} {
			if o.ByGoroutine && len(p.GoIDs) == 0 {
				continue
			}
			checkPruned(t, fmt.Sprintf("seed %d %+v", seed, o), p, q, o)
		}
		if q.Tree.Pruned > 0 {
			pruned++
		}
	}
	if pruned < 20 {
		t.Errorf("only %d recordings pruned", pruned)
	}
}

// checkPruned compares the trees o selects of q, an aggregated trace of
// p with pruned trees, with Build's of p: every total exact.
func checkPruned(t *testing.T, name string, p, q *model.Profile, o Options) {
	t.Helper()
	want, err := Build(p, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Build(q, o)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// Folded nodes clamp their calibrated sums at zero once, not each
	// (clampedSum).
	if got.Calls > want.Calls || got.Events != want.Events || !clampedSum(got.Total, want.Total) || len(got.Processes) != len(want.Processes) {
		t.Fatalf("%s: calls %d, events %d, total %+v; every event's %d, %d, %+v",
			name, got.Calls, got.Events, got.Total, want.Calls, want.Events, want.Total)
	}
	for i := range got.Processes {
		for k := range got.Processes[i].Threads {
			g, w := &got.Processes[i].Threads[k], &want.Processes[i].Threads[k]
			if !clampedSum(g.Root.Cum, w.Root.Cum) || g.Root.Callees != w.Root.Callees || g.Events != w.Events {
				t.Fatalf("%s thread %d: root %+v\nwant %+v", name, g.TID, g.Root.Cum, w.Root.Cum)
			}
		}
	}
	if q.Tree.Pruned > 0 && !o.ByGoroutine && !hasPruned(got) {
		t.Errorf("%s: %d nodes pruned, no (pruned) node in the trees", name, q.Tree.Pruned)
	}
}

// hasPruned reports whether a tree of r has a (pruned) node.
func hasPruned(r *Result) bool {
	var walk func(n *Node) bool
	walk = func(n *Node) bool {
		if n.Name == prunedFunc.Name {
			return true
		}
		for i := range n.Children {
			if walk(&n.Children[i]) {
				return true
			}
		}
		return false
	}
	for _, pr := range r.Processes {
		for i := range pr.Threads {
			if walk(&pr.Threads[i].Root) {
				return true
			}
		}
	}
	return false
}

// BenchmarkLive feeds a hook trace of 1.2M events (modeltest.WriteCalls)
// through model.Tables and a Live analysis record by record, as the
// recorder does with --aggregate, with a snapshot every 100,000 records:
// the recorder's cost per event of aggregating (events/s); by thread,
// and by goroutine too as for a Go target (FollowGoroutines: a second
// replay of every record).
func BenchmarkLive(b *testing.B) {
	var buf bytes.Buffer
	if err := modeltest.WriteCalls(&buf, 200_000); err != nil {
		b.Fatal(err)
	}
	tr, err := trace.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		b.Fatal(err)
	}
	var recs []trace.Record
	for {
		r, err := tr.Next()
		if err != nil {
			break
		}
		recs = append(recs, r)
	}
	for _, goroutines := range []bool{false, true} {
		name := "thread"
		if goroutines {
			name = "thread+goroutine"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var l *Live
				tables := model.NewTables(tr.Header(), func(r *model.Record) { l.Record(r) })
				l, err = NewLive(tables.Profile(), Options{}, true)
				if err != nil {
					b.Fatal(err)
				}
				if goroutines {
					if err := l.FollowGoroutines(); err != nil {
						b.Fatal(err)
					}
				}
				w, err := trace.NewWriter(io.Discard, &trace.Header{}, trace.Options{})
				if err != nil {
					b.Fatal(err)
				}
				for i, r := range recs {
					if changed, err := tables.Add(r); err != nil {
						b.Fatal(err)
					} else if changed {
						l.ThreadsChanged()
					}
					if i%100_000 == 0 {
						if err := l.Snapshot(0, w); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := l.Finish(0, 0, w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// FuzzBuildAggregated reads arbitrary bytes as a trace and renders its
// trees, seeded with aggregated traces of the fixtures (pruned and not):
// a damaged tree record is an error or a smaller tree, never a panic,
// and every node's cum holds its base.
func FuzzBuildAggregated(f *testing.F) {
	for i, p := range []*model.Profile{modeltest.InstrFixture(), modeltest.RandomHooks(rand.New(rand.NewPCG(3, 5)), true)} {
		_, data, _ := liveTraceBound(f, p, 2, nil, int64(i)*8*nodeBytes)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := model.Load(bytes.NewReader(data))
		if err != nil || !p.Aggregated() {
			return
		}
		r, err := Build(p, Options{})
		if err != nil {
			return
		}
		var walk func(n *Node)
		walk = func(n *Node) {
			if n.Cum.WallNSRaw < n.Base.WallNSRaw || n.Cum.Samples < n.Base.Samples {
				t.Fatalf("node %s: cum %+v below base %+v", n.Name, n.Cum, n.Base)
			}
			for i := range n.Children {
				walk(&n.Children[i])
			}
		}
		for _, pr := range r.Processes {
			for i := range pr.Threads {
				walk(&pr.Threads[i].Root)
			}
		}
	})
}
