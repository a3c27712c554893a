package calltree_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// TestProperties checks the invariants of Build on random recordings:
// well-nested ones, and broken ones with events removed at random (lost
// exits and entries, which the shadow stack must repair).
func TestProperties(t *testing.T) {
	for seed := range 600 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		p := modeltest.RandomHooks(r, seed%2 == 0)
		broken := seed%3 == 0
		if broken {
			p.Events = slices.DeleteFunc(p.Events, func(model.Event) bool { return r.IntN(6) == 0 })
		}
		if len(p.Events) == 0 {
			continue
		}
		name := fmt.Sprintf("seed %d", seed)
		for _, o := range []calltree.Options{{}, {Raw: true}, {ByGoroutine: true}, {ByGoroutine: true, Raw: true}, {ExcludeInterrupts: true}} {
			if o.ByGoroutine && len(p.GoIDs) == 0 {
				continue
			}
			res, err := calltree.Build(p, o)
			if err != nil {
				t.Fatalf("%s: %+v: %v", name, o, err)
			}
			checkTree(t, name, p, res, o)
			checkFunctions(t, name, res)
			checkCallflow(t, name, p, res, o)
		}
		res, _ := calltree.Build(p, calltree.Options{})
		checkFilter(t, name, p, res)
		checkLifetimes(t, name, p)
		checkInterrupts(t, name, p)
		if !broken {
			checkPaths(t, name, p, res)
			checkRoots(t, name, p, res)
		}
	}
}

// sameMetrics compares metrics, the float ones up to rounding.
func sameMetrics(a, b calltree.Metrics) bool {
	return near(a.WallNS, b.WallNS) && a.WallNSRaw == b.WallNSRaw && near(a.DeltaNS, b.DeltaNS) &&
		near(a.CPUNS, b.CPUNS) && a.Dispatches == b.Dispatches && a.Voluntary == b.Voluntary && a.Involuntary == b.Involuntary &&
		a.Interrupts == b.Interrupts && a.InterruptNS == b.InterruptNS && a.Samples == b.Samples
}

// walk calls fn for n and its descendants with their depth below n and
// the occurrences of their function among their ancestors (n excluded).
func walk(n *calltree.Node, fn func(n *calltree.Node, depth, rl int)) {
	on := map[calltree.Func]int{}
	var rec func(c *calltree.Node, depth int)
	rec = func(c *calltree.Node, depth int) {
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
func checkTree(t *testing.T, name string, p *model.Profile, r *calltree.Result, o calltree.Options) {
	t.Helper()
	var total calltree.Metrics
	var events, samples uint64
	var repairs calltree.Repairs
	for _, pr := range r.Processes {
		var ptotal calltree.Metrics
		for ti := range pr.Threads {
			th := &pr.Threads[ti]
			walk(&th.Root, func(n *calltree.Node, depth, rl int) {
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
				for _, m := range []calltree.Metrics{n.Base, n.Cum} {
					if m.WallNS < 0 || m.CPUNS < 0 || m.WallNS > float64(m.WallNSRaw)+1e-6 || m.CPUNS > m.WallNS+1e-6 ||
						!near(m.DeltaNS, float64(m.WallNSRaw)-m.WallNS) || m.Voluntary+m.Involuntary != m.Dispatches ||
						m.InterruptNS > m.WallNSRaw || (m.InterruptNS > 0 && m.Interrupts == 0) {
						t.Errorf("%s: node %s: metrics out of range %+v", name, n.Name, m)
					}
					if o.Raw && !o.ExcludeInterrupts && m.WallNS != float64(m.WallNSRaw) {
						t.Errorf("%s: node %s: raw wall %v != %d", name, n.Name, m.WallNS, m.WallNSRaw)
					}
				}
				if n.MinSelfNS < 0 || n.MinSelfNS > n.MaxSelfNS || n.MaxSelfNS > n.Base.WallNS+1e-6 {
					t.Errorf("%s: node %s: self per call min %v max %v base %v", name, n.Name, n.MinSelfNS, n.MaxSelfNS, n.Base.WallNS)
				}
				if n.MinSelfCPUNS < 0 || n.MinSelfCPUNS > n.MaxSelfCPUNS || n.MaxSelfCPUNS > n.Base.CPUNS+1e-6 {
					t.Errorf("%s: node %s: self CPU per call min %v max %v base %v", name, n.Name, n.MinSelfCPUNS, n.MaxSelfCPUNS, n.Base.CPUNS)
				}
			})
			ptotal.Add(th.Root.Cum)
			events += th.Events
			samples += th.Root.Cum.Samples
			repairs.Popped += th.Repairs.Popped
			repairs.Unmatched += th.Repairs.Unmatched
			repairs.Unclosed += th.Repairs.Unclosed
			repairs.Switches += th.Repairs.Switches
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
// total minus its self, recursion included; the functions' self and
// the threads' root base add up to the total.
func checkFunctions(t *testing.T, name string, r *calltree.Result) {
	t.Helper()
	type acc struct {
		calls, callees uint64
		self, total    calltree.Metrics
	}
	want := map[calltree.Func]*acc{}
	var sum calltree.Metrics
	for _, pr := range r.Processes {
		for ti := range pr.Threads {
			root := &pr.Threads[ti].Root
			sum.Add(root.Base)
			walk(root, func(n *calltree.Node, depth, _ int) {
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
				}
			})
		}
	}
	if len(want) != len(r.Functions) {
		t.Errorf("%s: %d functions, want %d", name, len(r.Functions), len(want))
	}
	for _, f := range r.Functions {
		w := want[calltree.Func{Name: f.Name, Module: f.Module}]
		if w == nil {
			t.Errorf("%s: unexpected function %s", name, f.Name)
			continue
		}
		sum.Add(f.Self)
		if f.Calls != w.calls || !sameMetrics(f.Self, w.self) || !sameMetrics(f.Total, w.total) {
			t.Errorf("%s: %s: calls %d self %+v total %+v, want %d %+v %+v", name, f.Name, f.Calls, f.Self, f.Total, w.calls, w.self, w.total)
		}
		var calls, ceeCalls uint64
		var base, cum, ceeCum calltree.Metrics
		for _, a := range f.Callers {
			calls += a.Calls
			base.Add(a.Base)
			cum.Add(a.Cum)
		}
		for _, a := range f.Callees {
			ceeCalls += a.Calls
			ceeCum.Add(a.Cum)
		}
		ceeCum.Add(f.Self) // recursion included: inner activations' self is no callee's
		if calls != f.Calls || !sameMetrics(base, f.Self) || !sameMetrics(cum, f.Total) {
			t.Errorf("%s: %s: callers add to calls %d base %+v cum %+v; function %d %+v %+v", name, f.Name, calls, base, cum, f.Calls, f.Self, f.Total)
		}
		if ceeCalls != w.callees || !sameMetrics(ceeCum, f.Total) {
			t.Errorf("%s: %s: callees add to calls %d cum+self %+v; want %d %+v", name, f.Name, ceeCalls, ceeCum, w.callees, f.Total)
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
func checkCallflow(t *testing.T, name string, p *model.Profile, r *calltree.Result, o calltree.Options) {
	t.Helper()
	flows, err := callflow(p, o)
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
			if i >= len(flows) || flows[i].TID != th.TID || flows[i].Start != th.Start || !reflect.DeepEqual(flows[i].Goroutine, th.Goroutine) {
				t.Fatalf("%s: callflow threads do not match the tree's", name)
			}
			var sum calltree.Metrics
			var entries uint64
			for _, e := range flows[i].Events {
				sum.Add(e.Delta)
				if e.Kind == calltree.FlowEntry {
					entries++
				}
			}
			sum.Samples = th.Root.Cum.Samples
			var calls uint64
			walk(&th.Root, func(n *calltree.Node, _, _ int) { calls += n.Calls })
			// A callflow's intervals are calibrated one by one, the
			// tree's nodes clamp their sums at zero: the tree may have
			// more calibrated time, never less, and the same otherwise.
			same := sameMetrics(sum, th.Root.Cum)
			if !o.Raw {
				same = calltree.ClampedSum(sum, th.Root.Cum)
			}
			if !same || entries != calls {
				t.Errorf("%s: tid %d: callflow adds to %+v (%d entries), tree %+v (%d calls)", name, th.TID, sum, entries, th.Root.Cum, calls)
			}
			i++
		}
	}
	if i != len(flows) {
		t.Errorf("%s: %d callflow threads, %d in the tree", name, len(flows), i)
	}
}

// checkFilter: a thread analysed alone is the same as in the whole, and
// so is each incarnation of it when selected by name.
func checkFilter(t *testing.T, name string, p *model.Profile, r *calltree.Result) {
	t.Helper()
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			for _, f := range []model.Filter{
				{PID: th.PID, HasPID: true, TID: th.TID, HasTID: true},
				{Thread: fmt.Sprint(th.TID)},
				{Thread: th.Name},
			} {
				o := calltree.Options{Filter: modeltest.Matcher(t, f)}
				one, err := calltree.Build(p, o)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				found := false
				for _, op := range one.Processes {
					for _, oth := range op.Threads {
						if oth.TID == th.TID && oth.Start == th.Start {
							found = true
							if !reflect.DeepEqual(oth, th) {
								t.Errorf("%s: thread %d (start %d) alone (%+v) differs", name, th.TID, th.Start, f)
							}
						} else if f.Thread == th.Name && !slices.Contains(p.ThreadAt(oth.PID, oth.TID, oth.Start).Names, th.Name) {
							t.Errorf("%s: thread %s selects %s", name, th.Name, oth.Name)
						}
					}
				}
				if !found {
					t.Errorf("%s: thread %d (start %d) not selected by %+v", name, th.TID, th.Start, o)
				}
			}
		}
	}
}

// incarnation is what a test knows of a thread incarnation from the
// records alone.
type incarnation struct {
	mt         *model.Thread
	begin, end uint64
	first      uint64 // the first record's time
	seen       bool   // it has records
	firstIn    bool   // the first is a switch-in
}

// incarnations computes, independently of the analysis, each thread
// incarnation's span: from its creation, the start of recording or its
// first record, to its exit, the next incarnation's creation or the end
// of the recording (its last record).
func incarnations(p *model.Profile) map[*model.Thread]*incarnation {
	out := map[*model.Thread]*incarnation{}
	end := p.End.Time
	start, started := p.Header.StartNS, p.Header.StartNS > 0
	for _, mt := range p.Threads {
		out[mt] = &incarnation{mt: mt}
		end = max(end, mt.Start, mt.End)
	}
	see := func(pid, tid uint32, t uint64, in bool) {
		end = max(end, t)
		if !started || t < start {
			start, started = t, true
		}
		inc := out[p.ThreadAt(pid, tid, t)]
		if inc == nil {
			return // a thread the trace does not know
		}
		if !inc.seen || t < inc.first {
			inc.seen, inc.first, inc.firstIn = true, t, in
		}
	}
	for _, r := range p.Adjusts {
		see(r.PID, r.TID, r.Time, false)
	}
	for _, r := range p.Switches {
		see(r.PID, r.TID, r.Time, !r.Out)
	}
	for _, r := range p.IRQs {
		see(r.PID, r.TID, r.Time, false)
	}
	for _, r := range p.Events {
		see(r.PID, r.TID, r.Time, false)
	}
	for _, r := range p.Samples {
		see(r.PID, r.TID, r.Time, false)
	}
	for _, g := range p.GoIDs {
		end = max(end, g.Time)
		if !started || g.Time < start {
			start, started = g.Time, true
		}
	}
	if p.Header.StartNS > 0 {
		start = p.Header.StartNS
	}
	for i, mt := range p.Threads {
		inc := out[mt]
		inc.end = end
		if mt.End > 0 {
			inc.end = mt.End
		} else if i+1 < len(p.Threads) && p.Threads[i+1].TID == mt.TID {
			inc.end = p.Threads[i+1].Start
		}
		inc.begin = start
		if mt.Start > 0 {
			inc.begin = mt.Start
		}
		if inc.seen {
			inc.begin = min(inc.begin, inc.first)
		} else {
			inc.begin = min(inc.begin, inc.end)
		}
	}
	return out
}

// checkLifetimes: with Raw, every thread incarnation's tree measures its
// whole life, as the records alone tell it: wall time from its baseline
// to its end, the CPU time and dispatches of its switches, its
// interrupts, samples and events. Nothing pending is lost.
func checkLifetimes(t *testing.T, name string, p *model.Profile) {
	t.Helper()
	r, err := calltree.Build(p, calltree.Options{Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[*model.Thread]calltree.Metrics{}
	events := map[*model.Thread]uint64{}
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			mt := p.ThreadAt(th.PID, th.TID, th.Start)
			got[mt], events[mt] = th.Root.Cum, th.Events
		}
	}
	for mt, inc := range incarnations(p) {
		var want calltree.Metrics
		want.WallNSRaw = inc.end - inc.begin
		// On or off CPU: off before a first switch-in, or all along
		// without a record; a switch-out, a switch-in and a probe change
		// it.
		type change struct {
			t        uint64
			out, run bool
			preempt  bool
		}
		var changes []change
		var nEvents uint64
		for _, s := range p.Switches {
			if p.ThreadAt(s.PID, s.TID, s.Time) == mt {
				changes = append(changes, change{t: s.Time, out: s.Out, run: !s.Out, preempt: s.Preempt})
			}
		}
		for _, e := range p.Events {
			if p.ThreadAt(e.PID, e.TID, e.Time) == mt {
				changes = append(changes, change{t: e.Time, run: true})
				nEvents++
			}
		}
		slices.SortStableFunc(changes, func(a, b change) int { return cmp.Compare(a.t, b.t) })
		off, since := inc.firstIn || !inc.seen, inc.begin
		var offNS uint64
		for _, c := range changes {
			switch {
			case c.out && !off:
				off, since = true, c.t
				want.Dispatches++
				if c.preempt {
					want.Involuntary++
				} else {
					want.Voluntary++
				}
			case c.run && off:
				offNS += c.t - since
				off = false
			}
		}
		if off {
			offNS += inc.end - since
		}
		if len(p.Switches) > 0 {
			want.CPUNS = float64(want.WallNSRaw - offNS)
		} else {
			want.Dispatches, want.Voluntary, want.Involuntary = 0, 0, 0
		}
		want.WallNS = float64(want.WallNSRaw)
		for _, q := range p.IRQs {
			if p.ThreadAt(q.PID, q.TID, q.Time) == mt {
				want.Interrupts++
			}
		}
		for _, s := range p.Samples {
			if p.ThreadAt(s.PID, s.TID, s.Time) == mt {
				want.Samples++
			}
		}
		g := got[mt]
		want.InterruptNS = g.InterruptNS // checked by checkInterrupts
		if want.WallNSRaw == 0 && nEvents == 0 && want.Samples == 0 {
			continue // nothing measured: not in the result
		}
		if !sameMetrics(g, want) || events[mt] != nEvents {
			t.Errorf("%s: thread %d (start %d) measured %+v (%d events), its records say %+v (%d)", name, mt.TID, mt.Start, g, events[mt], want, nEvents)
		}
	}
}

// checkInterrupts: an interrupt's time counts in the interval it ended
// in, clipped to it, and ExcludeInterrupts removes exactly that from the
// wall time, also from the CPU time.
func checkInterrupts(t *testing.T, name string, p *model.Profile) {
	t.Helper()
	raw, err := calltree.Build(p, calltree.Options{Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	excl, err := calltree.Build(p, calltree.Options{Raw: true, ExcludeInterrupts: true})
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, q := range p.IRQs {
		sum += q.Duration
	}
	if raw.Total.InterruptNS > sum || raw.Total.Interrupts != uint64(len(p.IRQs)) {
		t.Errorf("%s: %d interrupts, %dns of %d and %dns", name, raw.Total.Interrupts, raw.Total.InterruptNS, len(p.IRQs), sum)
	}
	for i, pr := range raw.Processes {
		for j := range pr.Threads {
			a, b := &pr.Threads[j].Root, &excl.Processes[i].Threads[j].Root
			walk2(a, b, func(a, b *calltree.Node) {
				if b.Base.WallNS != float64(a.Base.WallNSRaw-a.Base.InterruptNS) || b.Base.CPUNS > a.Base.CPUNS ||
					b.Base.CPUNS < a.Base.CPUNS-float64(a.Base.InterruptNS) {
					t.Errorf("%s: %s: excluding interrupts %+v, with them %+v", name, a.Name, b.Base, a.Base)
				}
			})
		}
	}
}

// walk2 calls fn for the nodes of two trees of the same shape, whose
// children may be in another order.
func walk2(a, b *calltree.Node, fn func(a, b *calltree.Node)) {
	fn(a, b)
	for i := range a.Children {
		j := slices.IndexFunc(b.Children, func(c calltree.Node) bool { return c.Func() == a.Children[i].Func() })
		walk2(&a.Children[i], &b.Children[j], fn)
	}
}

// checkPaths recomputes, independently, each call path's calls and raw
// base time, and its calibrated base time without the adjustments: the
// time before a thread's first event and after its last counts (without
// probe cost) at its root and at the calls open at its end.
func checkPaths(t *testing.T, name string, p *model.Profile, r *calltree.Result) {
	t.Helper()
	noAdj := *p
	noAdj.Adjusts = nil
	r2, err := calltree.Build(&noAdj, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []*calltree.Result{r, r2} {
		q := p
		if res == r2 {
			q = &noAdj // whose threads' first records may be later
		}
		calls, rawBase, calBase := pathTimes(q)
		for _, pr := range res.Processes {
			for ti := range pr.Threads {
				th := &pr.Threads[ti]
				mt := p.ThreadAt(th.PID, th.TID, th.Start)
				var path []string
				var rec func(n *calltree.Node)
				rec = func(n *calltree.Node) {
					k := pathKey{mt, strings.Join(path, ";")}
					if !n.Sampled && (n.Calls != calls[k] || n.Base.WallNSRaw != rawBase[k]) {
						t.Errorf("%s: tid %d %q: calls %d raw base %d, want %d %d", name, th.TID, k.path, n.Calls, n.Base.WallNSRaw, calls[k], rawBase[k])
					}
					// Intervals are summed calibrated, the path's total
					// clamped at zero.
					if res == r2 && !n.Sampled && !near(n.Base.WallNS, max(0, calBase[k])) {
						t.Errorf("%s: tid %d %q: calibrated base %v, want %v", name, th.TID, k.path, n.Base.WallNS, calBase[k])
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

// pathKey is a call path of a thread incarnation.
type pathKey struct {
	thread *model.Thread
	path   string
}

// pathTimes computes each call path's calls, raw base time and
// calibrated base time without adjustments from the events of p alone.
func pathTimes(p *model.Profile) (calls, rawBase map[pathKey]uint64, calBase map[pathKey]float64) {
	calls, rawBase, calBase = map[pathKey]uint64{}, map[pathKey]uint64{}, map[pathKey]float64{}
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
	incs := incarnations(p)
	threads := map[*model.Thread]*state{}
	for _, mt := range p.Threads {
		threads[mt] = &state{last: incs[mt].begin}
	}
	for _, e := range p.Events {
		mt := p.ThreadAt(e.PID, e.TID, e.Time)
		s := threads[mt]
		k := pathKey{mt, strings.Join(s.path, ";")}
		d := e.Time - s.last
		rawBase[k] += d
		if s.started {
			calBase[k] += float64(d) - ovh[calltree.Transition(s.lastEntry, e.Entry)]
		} else {
			calBase[k] += float64(d)
		}
		f := p.Locations[e.Function].Frames[0].Function
		if e.Entry {
			s.path = append(s.path, f)
			calls[pathKey{mt, strings.Join(s.path, ";")}]++
		} else {
			s.path = s.path[:len(s.path)-1]
		}
		s.started, s.last, s.lastEntry = true, e.Time, e.Entry
	}
	for mt, s := range threads {
		k := pathKey{mt, strings.Join(s.path, ";")}
		rawBase[k] += incs[mt].end - s.last
		calBase[k] += float64(incs[mt].end - s.last)
	}
	return calls, rawBase, calBase
}

// checkRoots: the subgraph of f analysed alone (Scheme B) measures what
// f's total measures in the whole, and nothing else.
func checkRoots(t *testing.T, name string, p *model.Profile, r *calltree.Result) {
	t.Helper()
	for _, f := range r.Functions {
		if f.Calls == 0 {
			continue
		}
		rr, err := calltree.Build(p, calltree.Options{Root: f.Name})
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
		got.Samples, want.Samples, got.Period, want.Period = 0, 0, 0, 0
		// The subgraph merges the nodes of f's calls from different
		// callers, whose calibrated totals the whole clamps one by one.
		if !calltree.ClampedSum(got, want) {
			t.Errorf("%s: root %s: total %+v, function total %+v", name, f.Name, rr.Total, f.Total)
		}
		for _, pr := range rr.Processes {
			for _, th := range pr.Threads {
				for _, c := range th.Root.Children {
					if c.Name != f.Name || th.Root.Base != (calltree.Metrics{}) {
						t.Errorf("%s: root %s: thread %d has %s at its root, base %+v", name, f.Name, th.TID, c.Name, th.Root.Base)
					}
				}
			}
		}
	}
}
