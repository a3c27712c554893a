package instr_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/instr"
	"trueprof/internal/instr/instrtest"
	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// TestProperties checks the invariants of Build on random recordings:
// well-nested ones, and broken ones with events removed at random (lost
// exits and entries, which the shadow stack must repair).
func TestProperties(t *testing.T) {
	for seed := range 600 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		p := instrtest.Random(r, seed%2 == 0)
		broken := seed%3 == 0
		if broken {
			p.Events = slices.DeleteFunc(p.Events, func(model.Event) bool { return r.IntN(6) == 0 })
		}
		if len(p.Events) == 0 {
			continue
		}
		name := fmt.Sprintf("seed %d", seed)
		for _, raw := range []bool{false, true} {
			res, err := instr.Build(p, instr.Options{Raw: raw})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkTree(t, name, p, res, raw)
			checkFunctions(t, name, res)
			checkCallflow(t, name, p, res, instr.Options{Raw: raw})
		}
		res, _ := instr.Build(p, instr.Options{})
		checkFilter(t, name, p, res)
		if !broken {
			checkPaths(t, name, p, res)
			checkRoots(t, name, p, res)
		}
	}
}

// sameMetrics compares metrics, the float ones up to rounding.
func sameMetrics(a, b instr.Metrics) bool {
	return near(a.WallNS, b.WallNS) && a.WallNSRaw == b.WallNSRaw && near(a.DeltaNS, b.DeltaNS) &&
		near(a.CPUNS, b.CPUNS) && a.Dispatches == b.Dispatches && a.Involuntary == b.Involuntary && a.Samples == b.Samples
}

// walk calls fn for n and its descendants with their depth below n and
// the occurrences of their function among their ancestors (n excluded).
func walk(n *instr.Node, fn func(n *instr.Node, depth, rl int)) {
	on := map[instr.Func]int{}
	var rec func(c *instr.Node, depth int)
	rec = func(c *instr.Node, depth int) {
		f := c.Func()
		fn(c, depth, on[f])
		if depth > 0 {
			on[f]++
		}
		for i := range c.Children {
			rec(&c.Children[i], depth+1)
		}
		if depth > 0 {
			on[f]--
		}
	}
	rec(n, 0)
}

// checkTree: cum = base + Σ children cum for every metric, callees =
// Σ children calls, levels and recursion levels, calibrated values
// within [0, raw], tree totals = Σ thread totals, every event and sample
// accounted for.
func checkTree(t *testing.T, name string, p *model.Profile, r *instr.Result, raw bool) {
	t.Helper()
	var total instr.Metrics
	var events, samples uint64
	var repairs instr.Repairs
	for _, pr := range r.Processes {
		var ptotal instr.Metrics
		for ti := range pr.Threads {
			th := &pr.Threads[ti]
			walk(&th.Root, func(n *instr.Node, depth, rl int) {
				sum := n.Base
				var callees uint64
				for i := range n.Children {
					sum.Add(n.Children[i].Cum)
					callees += n.Children[i].Calls
				}
				if !sameMetrics(sum, n.Cum) || callees != n.Callees {
					t.Errorf("%s: node %s: base + children %+v != cum %+v (callees %d vs %d)", name, n.Name, sum, n.Cum, callees, n.Callees)
				}
				if n.Level != depth || (depth > 0 && n.Recursion != rl) {
					t.Errorf("%s: node %s: level %d recursion %d, want %d %d", name, n.Name, n.Level, n.Recursion, depth, rl)
				}
				if depth > 0 && n.Sampled != (n.Calls == 0) {
					t.Errorf("%s: node %s: sampled %v with %d calls", name, n.Name, n.Sampled, n.Calls)
				}
				for _, m := range []instr.Metrics{n.Base, n.Cum} {
					if m.WallNS < 0 || m.CPUNS < 0 || m.WallNS > float64(m.WallNSRaw)+1e-6 || m.CPUNS > m.WallNS+1e-6 ||
						!near(m.DeltaNS, float64(m.WallNSRaw)-m.WallNS) || m.Involuntary > m.Dispatches {
						t.Errorf("%s: node %s: metrics out of range %+v", name, n.Name, m)
					}
					if raw && m.WallNS != float64(m.WallNSRaw) {
						t.Errorf("%s: node %s: raw wall %v != %d", name, n.Name, m.WallNS, m.WallNSRaw)
					}
				}
				if n.MinSelfNS < 0 || n.MinSelfNS > n.MaxSelfNS || n.MaxSelfNS > n.Base.WallNS+1e-6 {
					t.Errorf("%s: node %s: self per call min %v max %v base %v", name, n.Name, n.MinSelfNS, n.MaxSelfNS, n.Base.WallNS)
				}
			})
			ptotal.Add(th.Root.Cum)
			events += th.Events
			samples += th.Root.Cum.Samples
			repairs.Popped += th.Repairs.Popped
			repairs.Unmatched += th.Repairs.Unmatched
			repairs.Unclosed += th.Repairs.Unclosed
		}
		if !sameMetrics(ptotal, pr.Total) {
			t.Errorf("%s: process %d total %+v, threads add to %+v", name, pr.PID, pr.Total, ptotal)
		}
		total.Add(pr.Total)
	}
	if !sameMetrics(total, r.Total) {
		t.Errorf("%s: total %+v, processes add to %+v", name, r.Total, total)
	}
	if events != uint64(len(p.Events)) || r.Events != events || samples != uint64(len(p.Samples)) || repairs != r.Repairs {
		t.Errorf("%s: events %d/%d/%d, samples %d/%d, repairs %+v/%+v", name, r.Events, events, len(p.Events), samples, len(p.Samples), r.Repairs, repairs)
	}
	// Every entry ends exactly once: by its exit, a repair or the end.
	var entries uint64
	for _, e := range p.Events {
		if e.Entry {
			entries++
		}
	}
	exits := uint64(len(p.Events)) - entries
	if entries != exits-r.Repairs.Unmatched+r.Repairs.Popped+r.Repairs.Unclosed || r.Calls != entries {
		t.Errorf("%s: %d entries, %d exits, calls %d, repairs %+v", name, entries, exits, r.Calls, r.Repairs)
	}
}

// checkFunctions: callers' calls add up to the function's calls, their
// base to its self and their cum to its total; the callees' cum to its
// total minus the base of its outermost nodes; the functions' self and
// the threads' root base add up to the total.
func checkFunctions(t *testing.T, name string, r *instr.Result) {
	t.Helper()
	type acc struct {
		calls, callees uint64
		self, total    instr.Metrics
		outerBase      instr.Metrics
	}
	want := map[instr.Func]*acc{}
	var sum instr.Metrics
	for _, pr := range r.Processes {
		for ti := range pr.Threads {
			root := &pr.Threads[ti].Root
			sum.Add(root.Base)
			walk(root, func(n *instr.Node, depth, _ int) {
				if depth == 0 {
					return
				}
				a := want[n.Func()]
				if a == nil {
					a = &acc{}
					want[n.Func()] = a
				}
				a.calls += n.Calls
				a.callees += n.Callees
				a.self.Add(n.Base)
				if n.Recursion == 0 {
					a.total.Add(n.Cum)
					a.outerBase.Add(n.Base)
				}
			})
		}
	}
	if len(want) != len(r.Functions) {
		t.Errorf("%s: %d functions, want %d", name, len(r.Functions), len(want))
	}
	for _, f := range r.Functions {
		w := want[instr.Func{Name: f.Name, Module: f.Module}]
		if w == nil {
			t.Errorf("%s: unexpected function %s", name, f.Name)
			continue
		}
		sum.Add(f.Self)
		if f.Calls != w.calls || !sameMetrics(f.Self, w.self) || !sameMetrics(f.Total, w.total) {
			t.Errorf("%s: %s: calls %d self %+v total %+v, want %d %+v %+v", name, f.Name, f.Calls, f.Self, f.Total, w.calls, w.self, w.total)
		}
		var calls, ceeCalls uint64
		var base, cum, ceeCum instr.Metrics
		for _, a := range f.Callers {
			calls += a.Calls
			base.Add(a.Base)
			cum.Add(a.Cum)
		}
		for _, a := range f.Callees {
			ceeCalls += a.Calls
			ceeCum.Add(a.Cum)
		}
		ceeCum.Add(w.outerBase)
		if calls != f.Calls || !sameMetrics(base, f.Self) || !sameMetrics(cum, f.Total) {
			t.Errorf("%s: %s: callers add to calls %d base %+v cum %+v; function %d %+v %+v", name, f.Name, calls, base, cum, f.Calls, f.Self, f.Total)
		}
		if ceeCalls != w.callees || !sameMetrics(ceeCum, f.Total) {
			t.Errorf("%s: %s: callees add to calls %d cum+outer base %+v; want %d %+v", name, f.Name, ceeCalls, ceeCum, w.callees, f.Total)
		}
		if f.Calls > 0 && (f.MinSelfNS > f.MaxSelfNS || f.MaxSelfNS > f.Self.WallNS+1e-6) {
			t.Errorf("%s: %s: min %v max %v self %v", name, f.Name, f.MinSelfNS, f.MaxSelfNS, f.Self.WallNS)
		}
	}
	if !sameMetrics(sum, r.Total) {
		t.Errorf("%s: functions' self + roots' base %+v != total %+v", name, sum, r.Total)
	}
}

// checkCallflow: each thread's callflow deltas add up to its root's cum
// (samples aside: those outside any interval are in no delta), and it
// has one entry line per call.
func checkCallflow(t *testing.T, name string, p *model.Profile, r *instr.Result, o instr.Options) {
	t.Helper()
	flows, err := instr.Callflow(p, o)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	i := 0
	for _, pr := range r.Processes {
		for ti := range pr.Threads {
			th := &pr.Threads[ti]
			if th.Events == 0 {
				continue
			}
			if i >= len(flows) || flows[i].TID != th.TID || flows[i].Start != th.Start {
				t.Fatalf("%s: callflow threads do not match the tree's", name)
			}
			var sum instr.Metrics
			var entries uint64
			for _, e := range flows[i].Events {
				sum.Add(e.Delta)
				if e.Kind == instr.FlowEntry {
					entries++
				}
			}
			sum.Samples = th.Root.Cum.Samples
			var calls uint64
			walk(&th.Root, func(n *instr.Node, _, _ int) { calls += n.Calls })
			if !sameMetrics(sum, th.Root.Cum) || entries != calls {
				t.Errorf("%s: tid %d: callflow adds to %+v (%d entries), tree %+v (%d calls)", name, th.TID, sum, entries, th.Root.Cum, calls)
			}
			i++
		}
	}
	if i != len(flows) {
		t.Errorf("%s: %d callflow threads, %d in the tree", name, len(flows), i)
	}
}

// checkFilter: a thread analysed alone is the same as in the whole.
func checkFilter(t *testing.T, name string, p *model.Profile, r *instr.Result) {
	t.Helper()
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			one, err := instr.Build(p, instr.Options{PID: th.PID, HasPID: true, TID: th.TID, HasTID: true})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(one.Processes) != 1 || len(one.Processes[0].Threads) != 1 || !reflect.DeepEqual(one.Processes[0].Threads[0], th) {
				t.Errorf("%s: thread %d alone differs", name, th.TID)
			}
		}
	}
}

// checkPaths recomputes, independently, each call path's calls and raw
// base time, and its calibrated base time without the adjustments.
func checkPaths(t *testing.T, name string, p *model.Profile, r *instr.Result) {
	t.Helper()
	type key struct {
		tid  uint32
		path string
	}
	calls := map[key]uint64{}
	rawBase := map[key]uint64{}
	calBase := map[key]float64{}
	var ovh [trace.Transitions]float64
	if c := p.Header.Calibration; c != nil {
		ovh = c.Overhead
	}
	type state struct {
		path      []string
		last      uint64
		lastEntry bool
		started   bool
	}
	threads := map[uint32]*state{}
	for _, e := range p.Events {
		s := threads[e.TID]
		if s == nil {
			s = &state{}
			threads[e.TID] = s
		}
		k := key{e.TID, strings.Join(s.path, ";")}
		if s.started {
			d := e.Time - s.last
			rawBase[k] += d
			calBase[k] += max(0, float64(d)-ovh[instr.Transition(s.lastEntry, e.Entry)])
		}
		f := p.Locations[e.Function].Frames[0].Function
		if e.Entry {
			s.path = append(s.path, f)
			calls[key{e.TID, strings.Join(s.path, ";")}]++
		} else {
			s.path = s.path[:len(s.path)-1]
		}
		s.started, s.last, s.lastEntry = true, e.Time, e.Entry
	}

	noAdj := *p
	noAdj.Adjusts = nil
	r2, err := instr.Build(&noAdj, instr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []*instr.Result{r, r2} {
		for _, pr := range res.Processes {
			for ti := range pr.Threads {
				th := &pr.Threads[ti]
				var path []string
				var rec func(n *instr.Node)
				rec = func(n *instr.Node) {
					k := key{th.TID, strings.Join(path, ";")}
					if !n.Sampled && (n.Calls != calls[k] || n.Base.WallNSRaw != rawBase[k]) {
						t.Errorf("%s: %v: calls %d raw base %d, want %d %d", name, k, n.Calls, n.Base.WallNSRaw, calls[k], rawBase[k])
					}
					if res == r2 && !n.Sampled && !near(n.Base.WallNS, calBase[k]) {
						t.Errorf("%s: %v: calibrated base %v, want %v", name, k, n.Base.WallNS, calBase[k])
					}
					for i := range n.Children {
						path = append(path, n.Children[i].Name)
						rec(&n.Children[i])
						path = path[:len(path)-1]
					}
				}
				rec(&th.Root)
			}
		}
	}
}

// checkRoots: the subgraph of f analysed alone (Scheme B) measures what
// f's total measures in the whole, and nothing else.
func checkRoots(t *testing.T, name string, p *model.Profile, r *instr.Result) {
	t.Helper()
	for _, f := range r.Functions {
		if f.Calls == 0 {
			continue
		}
		rr, err := instr.Build(p, instr.Options{Root: f.Name})
		if err != nil {
			t.Fatalf("%s: root %s: %v", name, f.Name, err)
		}
		// Samples aside: a sample outside every traced call whose stack
		// holds f (taken at the instant f exited) is f's in the whole
		// but outside the subgraph.
		got, want := rr.Total, f.Total
		if got.Samples > want.Samples {
			t.Errorf("%s: root %s: %d samples, more than the function's %d", name, f.Name, got.Samples, want.Samples)
		}
		got.Samples, want.Samples = 0, 0
		if !sameMetrics(got, want) {
			t.Errorf("%s: root %s: total %+v, function total %+v", name, f.Name, rr.Total, f.Total)
		}
		for _, pr := range rr.Processes {
			for _, th := range pr.Threads {
				for _, c := range th.Root.Children {
					if c.Name != f.Name || th.Root.Base != (instr.Metrics{}) {
						t.Errorf("%s: root %s: thread %d has %s at its root, base %+v", name, f.Name, th.TID, c.Name, th.Root.Base)
					}
				}
			}
		}
	}
}
