package instr

import (
	"cmp"
	"fmt"
	"slices"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// Build analyses the instrumented recording p (which must not be nil) as
// o selects. See the package documentation and docs/calibration.md.
func Build(p *model.Profile, o Options) (*Result, error) {
	a, err := analyse(p, o, false)
	if err != nil {
		return nil, err
	}
	return a.result(), nil
}

// threadKey identifies a thread incarnation.
type threadKey struct {
	pid, tid uint32
	start    uint64
}

// node is a tree node while the tree is built; nodes live in their
// thread's slice and refer to each other by index.
type node struct {
	fn       Func
	level    int
	rl       int
	children map[Func]int32
	calls    uint64
	base     Metrics
	min, max float64 // self wall per call, valid when closed > 0
	closed   uint64
}

// frame is an open call on a shadow stack.
type frame struct {
	node int32
	loc  uint32  // the entry's location, which its exit must match
	self float64 // calibrated wall time charged to this call so far
}

// pending accumulates what happens inside the open interval of a thread,
// charged when the interval closes at the next event.
type pending struct {
	off               uint64   // closed off-CPU time
	segs              []uint64 // the closed off-CPU segments, as start, end pairs
	adjWall, adjCPU   uint64
	adjEnd            uint64 // end of the last pause
	dispatches, invol uint64
	samples           uint64
}

// thread is one thread incarnation's state during the analysis.
type thread struct {
	key   threadKey
	name  string
	nodes []node // nodes[0] is the thread's root
	stack []frame
	// onLoc and onFunc count the open calls per entry location and per
	// function, so that an exit finds its call, and a new node its
	// recursion level, without walking a deep stack.
	onLoc  map[uint32]int
	onFunc map[Func]int

	// open: an interval is being measured since the event at last (of
	// kind lastEntry). Between events of a thread it is always open,
	// except outside the Root subgraph.
	open      bool
	last      uint64
	lastEntry bool
	first     uint64
	events    uint64

	off      bool // switched out since offSince
	offSince uint64
	pend     pending

	repairs Repairs
	flow    []FlowEvent
}

// analysis is the state of one pass over a profile.
type analysis struct {
	p    *model.Profile
	o    Options
	flow bool
	ovh  [trace.Transitions]float64
	cal  *trace.Calibration
	cpu  bool // the recording has context switches

	funcs  []Func // by location id, filled on first use
	known  []bool
	stacks map[uint32][]Func // sample stack id -> functions, outermost first

	threads map[threadKey]*thread
	order   []*thread

	dropped     uint64
	rootEntered bool
}

func analyse(p *model.Profile, o Options, flow bool) (*analysis, error) {
	if len(p.Events) == 0 {
		return nil, ErrNoEvents
	}
	a := &analysis{
		p:       p,
		o:       o,
		flow:    flow,
		cpu:     len(p.Switches) > 0,
		funcs:   make([]Func, len(p.Locations)),
		known:   make([]bool, len(p.Locations)),
		stacks:  map[uint32][]Func{},
		threads: map[threadKey]*thread{},
	}
	if c := p.Header.Calibration; c != nil && !o.Raw && !a.mismatched() {
		if err := checkCalibration(c); err != nil {
			return nil, err
		}
		a.cal, a.ovh = c, c.Overhead
	}
	if o.Root != "" {
		found := false
		for i := range p.Events {
			if a.fn(p.Events[i].Function).Name == o.Root {
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: %q", ErrRootNotFound, o.Root)
		}
	}
	a.run()
	for _, th := range a.order {
		a.finish(th)
	}
	return a, nil
}

// run merges the time-sorted events, switches, adjustments and samples
// and hands each to its thread. At equal times an adjustment comes
// first, then a switch, an event and a sample: the profiler's pause and a
// switch-in precede the event that follows them.
func (a *analysis) run() {
	p := a.p
	var ie, is, ia, ix int
	for {
		var t uint64
		which := -1
		if ia < len(p.Adjusts) {
			t, which = p.Adjusts[ia].Time, 0
		}
		if is < len(p.Switches) && (which < 0 || p.Switches[is].Time < t) {
			t, which = p.Switches[is].Time, 1
		}
		if ie < len(p.Events) && (which < 0 || p.Events[ie].Time < t) {
			t, which = p.Events[ie].Time, 2
		}
		if ix < len(p.Samples) && (which < 0 || p.Samples[ix].Time < t) {
			which = 3
		}
		switch which {
		case -1:
			return
		case 0:
			r := &p.Adjusts[ia]
			ia++
			if th := a.thread(r.PID, r.TID, r.Time, false); th != nil {
				a.adjust(th, r)
			}
		case 1:
			r := &p.Switches[is]
			is++
			if th := a.thread(r.PID, r.TID, r.Time, false); th != nil {
				a.switched(th, r)
			}
		case 2:
			r := &p.Events[ie]
			ie++
			if th := a.thread(r.PID, r.TID, r.Time, true); th != nil {
				a.event(th, r)
			}
		case 3:
			r := &p.Samples[ix]
			ix++
			if th := a.thread(r.PID, r.TID, r.Time, true); th != nil {
				a.sample(th, r)
			}
		}
	}
}

// thread returns the state of the incarnation of pid/tid alive at time t,
// creating it if create is set, or nil if it is filtered out (or does not
// exist and create is false).
func (a *analysis) thread(pid, tid uint32, t uint64, create bool) *thread {
	if !a.o.match(pid, tid) {
		return nil
	}
	k := threadKey{pid: pid, tid: tid}
	mt := a.p.ThreadAt(pid, tid, t)
	if mt != nil {
		k.start = mt.Start
	}
	th := a.threads[k]
	if th == nil && create {
		name := "[unknown]"
		if mt != nil && mt.Name != "" {
			name = mt.Name
		}
		th = &thread{key: k, name: name, onLoc: map[uint32]int{}, onFunc: map[Func]int{}}
		th.nodes = append(th.nodes, node{fn: Func{Name: fmt.Sprintf("%s_%d", name, tid)}})
		a.threads[k] = th
		a.order = append(a.order, th)
	}
	return th
}

// fn returns the function of location id: its physical function, the
// last frame.
func (a *analysis) fn(id uint32) Func {
	if int(id) >= len(a.funcs) || id == 0 {
		return Unknown
	}
	if !a.known[id] {
		l := &a.p.Locations[id]
		f := Func{Name: fmt.Sprintf("%s+%#x", l.Module, l.Offset), Module: l.Module}
		if n := len(l.Frames); n > 0 {
			f.Name = l.Frames[n-1].Function
		}
		a.funcs[id], a.known[id] = f, true
	}
	return a.funcs[id]
}

// sampleFuncs returns the function-level stack of sample stack id,
// outermost first, inlined functions after the function they were
// inlined into; [Unknown] for a sample without a stack.
func (a *analysis) sampleFuncs(id uint32) []Func {
	if fs, ok := a.stacks[id]; ok {
		return fs
	}
	var fs []Func
	locs := a.p.Stack(id, nil)
	for i := len(locs) - 1; i >= 0; i-- {
		id := locs[i]
		if int(id) >= len(a.p.Locations) || id == 0 {
			fs = append(fs, Unknown)
			continue
		}
		l := &a.p.Locations[id]
		if len(l.Frames) == 0 {
			fs = append(fs, a.fn(id))
			continue
		}
		for k := len(l.Frames) - 1; k >= 0; k-- {
			fs = append(fs, Func{Name: l.Frames[k].Function, Module: l.Module})
		}
	}
	if len(fs) == 0 {
		fs = []Func{Unknown}
	}
	a.stacks[id] = fs
	return fs
}

// current returns the index of the thread's current node: the top of its
// shadow stack, or its root.
func (th *thread) current() int32 {
	if n := len(th.stack); n > 0 {
		return th.stack[n-1].node
	}
	return 0
}

// child returns the child of node parent for f, creating it with
// recursion level rl (the occurrences of f from the root to parent).
func (th *thread) child(parent int32, f Func, rl int) int32 {
	if c, ok := th.nodes[parent].children[f]; ok {
		return c
	}
	c := int32(len(th.nodes))
	th.nodes = append(th.nodes, node{fn: f, level: th.nodes[parent].level + 1, rl: rl})
	if th.nodes[parent].children == nil {
		th.nodes[parent].children = map[Func]int32{}
	}
	th.nodes[parent].children[f] = c
	return c
}

// inside reports whether th's records count: always without Root, and
// while an activation of Root is on the shadow stack with it.
func (a *analysis) inside(th *thread) bool {
	return a.o.Root == "" || len(th.stack) > 0
}

// offSegment returns the current off-CPU segment of th clipped to the
// open interval, as start, end; end < start when th is on a CPU.
func (th *thread) offSegment(t uint64) (uint64, uint64) {
	if !th.off {
		return 1, 0
	}
	return max(th.offSince, th.last), t
}

// switched handles a context switch of th.
func (a *analysis) switched(th *thread, s *model.Switch) {
	if s.Out {
		if th.off {
			return // a switch-in was lost; the first switch-out stands
		}
		th.off, th.offSince = true, s.Time
		if th.open && a.inside(th) {
			th.pend.dispatches++
			if s.Preempt {
				th.pend.invol++
			}
		}
		return
	}
	if !th.off {
		return
	}
	if th.open {
		if b, e := th.offSegment(s.Time); e > b {
			th.pend.off += e - b
			th.pend.segs = append(th.pend.segs, b, e)
		}
	}
	th.off = false
}

// adjust handles time th lost in the profiler: the pause ended at r.Time
// and lasted r.Duration. The part of it inside the open interval is
// removed from that interval's wall time, and its on-CPU part from the
// CPU time.
func (a *analysis) adjust(th *thread, r *model.Adjust) {
	a.dropped += r.Dropped
	if !th.open || r.Duration == 0 {
		return
	}
	// The window is clipped to the interval and to the end of the
	// previous pause in it: pauses of one thread cannot overlap.
	ws, we := max(th.last, th.pend.adjEnd), r.Time
	if we <= ws {
		return // out of order, or inside the previous pause
	}
	if we-ws > r.Duration {
		ws = we - r.Duration
	}
	th.pend.adjEnd = we
	off := uint64(0)
	overlap := func(b, e uint64) {
		if b, e = max(b, ws), min(e, we); e > b {
			off += e - b
		}
	}
	for i := 0; i < len(th.pend.segs); i += 2 {
		overlap(th.pend.segs[i], th.pend.segs[i+1])
	}
	if b, e := th.offSegment(we); e > b {
		overlap(b, e)
	}
	th.pend.adjWall += we - ws
	th.pend.adjCPU += we - ws - off
}

// closeInterval ends th's open interval at time t, at an event (an entry
// when entry), and charges it to the current node. It returns the
// interval's metrics, samples included.
func (a *analysis) closeInterval(th *thread, t uint64, entry bool) Metrics {
	t = max(t, th.last) // records out of order (the model sorts them) count as simultaneous
	raw := t - th.last
	off := th.pend.off
	if b, e := th.offSegment(t); e > b {
		off += e - b
	}
	off = min(off, raw)
	cpuRaw := raw - off
	var wall, cpu float64
	if a.o.Raw {
		wall, cpu = float64(raw), float64(cpuRaw)
	} else {
		ovh := a.ovh[Transition(th.lastEntry, entry)]
		wall = max(0, float64(raw-min(th.pend.adjWall, raw))-ovh)
		cpu = max(0, float64(cpuRaw-min(th.pend.adjCPU, cpuRaw))-ovh)
	}
	if !a.cpu {
		cpu = 0
	}
	m := Metrics{
		WallNS:      wall,
		WallNSRaw:   raw,
		DeltaNS:     float64(raw) - wall,
		CPUNS:       cpu,
		Dispatches:  th.pend.dispatches,
		Involuntary: th.pend.invol,
	}
	if !a.cpu {
		m.Dispatches, m.Involuntary = 0, 0
	}
	th.nodes[th.current()].base.Add(m)
	if n := len(th.stack); n > 0 {
		th.stack[n-1].self += wall
	}
	m.Samples = th.pend.samples
	th.pend = pending{segs: th.pend.segs[:0]}
	return m
}

// event handles a function entry or exit of th.
func (a *analysis) event(th *thread, e *model.Event) {
	f := a.fn(e.Function)
	if !a.inside(th) {
		if !e.Entry || f.Name != a.o.Root {
			return // outside the Root subgraph
		}
		a.rootEntered = true
	}
	var d Metrics
	if th.open {
		d = a.closeInterval(th, e.Time, e.Entry)
	} else {
		th.pend = pending{segs: th.pend.segs[:0]}
	}
	if th.events == 0 {
		th.first = e.Time
	}
	th.events++
	th.open, th.last, th.lastEntry = true, max(e.Time, th.last), e.Entry
	th.off = false // the thread runs the probe

	if e.Entry {
		n := th.child(th.current(), f, th.onFunc[f])
		th.nodes[n].calls++
		th.stack = append(th.stack, frame{node: n, loc: e.Function})
		th.onLoc[e.Function]++
		th.onFunc[f]++
		a.line(th, e.Time, FlowEntry, n, d)
	} else {
		i := th.match(e.Function, f)
		if i < 0 {
			th.repairs.Unmatched++
			if a.flow {
				th.flow = append(th.flow, FlowEvent{TimeNS: e.Time, Kind: FlowUnmatched,
					Level: len(th.stack) + 1, Name: f.Name, Module: f.Module, Delta: d})
			}
		} else {
			for len(th.stack)-1 > i {
				th.repairs.Popped++
				a.pop(th, e.Time, FlowPopped, Metrics{})
			}
			a.pop(th, e.Time, FlowExit, d)
		}
	}
	if !a.inside(th) {
		th.open = false // left the Root subgraph
	}
}

// match returns the index of the innermost open call of th entered at
// location loc or, failing that, of function f; -1 if there is none.
func (th *thread) match(loc uint32, f Func) int {
	if th.onLoc[loc] > 0 {
		for i := len(th.stack) - 1; i >= 0; i-- {
			if th.stack[i].loc == loc {
				return i
			}
		}
	}
	if th.onFunc[f] > 0 {
		for i := len(th.stack) - 1; i >= 0; i-- {
			if th.nodes[th.stack[i].node].fn == f {
				return i
			}
		}
	}
	return -1
}

// pop closes the call on top of th's shadow stack at time t.
func (a *analysis) pop(th *thread, t uint64, kind FlowKind, d Metrics) {
	fr := th.stack[len(th.stack)-1]
	th.stack = th.stack[:len(th.stack)-1]
	n := &th.nodes[fr.node]
	if th.onLoc[fr.loc]--; th.onLoc[fr.loc] == 0 {
		delete(th.onLoc, fr.loc)
	}
	if th.onFunc[n.fn]--; th.onFunc[n.fn] == 0 {
		delete(th.onFunc, n.fn)
	}
	if n.closed == 0 || fr.self < n.min {
		n.min = fr.self
	}
	if n.closed == 0 || fr.self > n.max {
		n.max = fr.self
	}
	n.closed++
	a.line(th, t, kind, fr.node, d)
}

// line appends a callflow line for node n when a callflow is wanted.
func (a *analysis) line(th *thread, t uint64, kind FlowKind, n int32, d Metrics) {
	if !a.flow {
		return
	}
	nd := &th.nodes[n]
	th.flow = append(th.flow, FlowEvent{TimeNS: t, Kind: kind, Level: nd.level,
		Name: nd.fn.Name, Module: nd.fn.Module, Delta: d})
}

// sample merges a sample of th into its tree (seed 000): below the
// current traced call, the sample's frames deeper than that call's
// function; outside any call, its whole stack below the thread's root.
func (a *analysis) sample(th *thread, s *model.Sample) {
	if !a.inside(th) {
		return
	}
	fs := a.sampleFuncs(s.Stack)
	n := th.current()
	chain := fs
	if n != 0 {
		cur := th.nodes[n].fn
		i := len(fs) - 1
		for i >= 0 && fs[i] != cur {
			i--
		}
		if i >= 0 {
			chain = fs[i+1:]
		} else {
			chain = fs[len(fs)-1:] // not in the stack: attach the leaf
		}
	}
	for i, f := range chain {
		if c, ok := th.nodes[n].children[f]; ok {
			n = c
			continue
		}
		rl := th.onFunc[f]
		for _, g := range chain[:i] {
			if g == f {
				rl++
			}
		}
		n = th.child(n, f, rl)
	}
	th.nodes[n].base.Samples++
	if th.open {
		th.pend.samples++
	}
}

// finish closes the calls still open at the end of th's events: they end
// at its last event.
func (a *analysis) finish(th *thread) {
	for len(th.stack) > 0 {
		th.repairs.Unclosed++
		a.pop(th, th.last, FlowUnclosed, Metrics{})
	}
	th.open = false
}

// result turns the analysis into a Result.
func (a *analysis) result() *Result {
	r := &Result{
		Calibration: a.cal,
		Raw:         a.o.Raw,
		Root:        a.o.Root,
		CPUMeasured: a.cpu,
		Dropped:     a.dropped,
		Processes:   []Process{},
		Warnings:    []string{},
	}
	threads := slices.Clone(a.order)
	slices.SortFunc(threads, func(x, y *thread) int {
		return cmp.Or(cmp.Compare(x.key.pid, y.key.pid), cmp.Compare(x.key.tid, y.key.tid), cmp.Compare(x.key.start, y.key.start))
	})
	for _, th := range threads {
		if th.events == 0 && len(th.nodes) == 1 {
			continue // nothing of it was analysed (outside Root)
		}
		if len(r.Processes) == 0 || r.Processes[len(r.Processes)-1].PID != th.key.pid {
			name := "[unknown]"
			if pr := a.p.Process(th.key.pid); pr != nil && pr.Name != "" {
				name = pr.Name
			}
			r.Processes = append(r.Processes, Process{PID: th.key.pid, Name: name, Threads: []Thread{}})
		}
		pr := &r.Processes[len(r.Processes)-1]
		t := Thread{
			PID:     th.key.pid,
			TID:     th.key.tid,
			Start:   th.key.start,
			Name:    th.name,
			Events:  th.events,
			Repairs: th.repairs,
			Root:    th.tree(0),
		}
		if th.events > 0 {
			t.FirstNS, t.LastNS = th.first, th.last
		}
		pr.Threads = append(pr.Threads, t)
		pr.Total.Add(t.Root.Cum)
		r.Total.Add(t.Root.Cum)
		r.Events += th.events
		r.Repairs.add(th.repairs)
	}
	r.Functions = functions(r.Processes)
	for _, f := range r.Functions {
		r.Calls += f.Calls
	}
	r.Warnings = a.warnings(r)
	return r
}

// tree converts node i of th and its descendants to a Node.
func (th *thread) tree(i int32) Node {
	nd := &th.nodes[i]
	n := Node{
		Name:      nd.fn.Name,
		Module:    nd.fn.Module,
		Level:     nd.level,
		Recursion: nd.rl,
		Sampled:   i != 0 && nd.calls == 0,
		Calls:     nd.calls,
		Base:      nd.base,
		Cum:       nd.base,
		Children:  make([]Node, 0, len(nd.children)),
	}
	if nd.closed > 0 {
		n.MinSelfNS, n.MaxSelfNS = nd.min, nd.max
	}
	for _, c := range nd.children {
		n.Children = append(n.Children, th.tree(c))
	}
	slices.SortFunc(n.Children, func(x, y Node) int {
		return cmp.Or(cmp.Compare(y.Cum.WallNS, x.Cum.WallNS), cmp.Compare(y.Cum.Samples, x.Cum.Samples),
			cmp.Compare(x.Name, y.Name), cmp.Compare(x.Module, y.Module))
	})
	// Sum after sorting so that the cum is the same whatever the map
	// order: base first, then the children in their printed order.
	for k := range n.Children {
		n.Cum.Add(n.Children[k].Cum)
		n.Callees += n.Children[k].Calls
	}
	return n
}

// mismatched reports whether the header's calibration was measured for
// another probe mechanism than the recording's.
func (a *analysis) mismatched() bool {
	c, h := a.p.Header.Calibration, &a.p.Header
	return c != nil && c.Mechanism != "" && h.Instrument != "" && c.Mechanism != h.Instrument
}

// warnings returns the sentences about what is missing or repaired.
func (a *analysis) warnings(r *Result) []string {
	w := []string{}
	if c := a.p.Header.Calibration; c == nil && !a.o.Raw {
		w = append(w, "the trace has no calibration: times include the probes' own cost (run `trueprof calibrate` before recording)")
	} else if !a.o.Raw && a.mismatched() {
		w = append(w, fmt.Sprintf("the calibration was measured for mechanism %q but the recording used %q: it is not applied, times include the probes' own cost",
			c.Mechanism, a.p.Header.Instrument))
	}
	if !a.cpu {
		w = append(w, "the trace has no context switches: cpu_ns and dispatches are not measured")
	}
	if r.Dropped > 0 {
		w = append(w, fmt.Sprintf("%d events were DROPPED by the recorder: calls and times around them are wrong", r.Dropped))
	}
	if n := r.Repairs.Popped; n > 0 {
		w = append(w, fmt.Sprintf("%d calls had no exit (exceptions, longjmp, panics or tail calls): they end at a caller's exit", n))
	}
	if n := r.Repairs.Unmatched; n > 0 {
		w = append(w, fmt.Sprintf("%d exits matched no open call and were ignored", n))
	}
	if n := r.Repairs.Unclosed; n > 0 {
		w = append(w, fmt.Sprintf("%d calls were still open at the end and end at their thread's last event", n))
	}
	if a.o.Root != "" && !a.rootEntered {
		w = append(w, fmt.Sprintf("the root function %q was never entered by a selected thread", a.o.Root))
	}
	return w
}
