package calltree

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// Stack is the samples of one thread incarnation (or goroutine) that
// share a call stack.
type Stack struct {
	PID, TID uint32
	// Thread is the incarnation of the thread the samples are of (nil
	// when the trace does not know it, and for a goroutine): a tid the
	// kernel reused is another thread, which no view mixes with the first.
	Thread *model.Thread
	// Goroutine is the goroutine the samples ran (grouping by goroutine);
	// nil when grouping by thread, and for samples of a thread before it
	// ran any. TID is then 0.
	Goroutine *uint64
	// Labels are the runtime/pprof labels the goroutine carried during
	// the recording (model.LabelString), "" for none or a thread.
	Labels string
	// LabelsAt are the labels the goroutine carried when these samples
	// were taken (grouping by goroutine splits a goroutine's samples by
	// them): what pprof tags a sample with.
	LabelsAt []model.LabelPair
	// StackID is the trace's stack node of the samples (0: no stack).
	StackID uint32
	// Funcs is the function-level call stack, outermost first: each
	// location's frames with inlined functions after the function they
	// were inlined into. Never empty: a sample without a stack has
	// []Func{Unknown}.
	Funcs []Func
	// Symbol is the physical function that was executing: the last frame
	// of the leaf location (Funcs' last element may be inlined into it).
	Symbol Func
	Count
	Truncated uint64 // how many of the samples had a truncated call chain
}

// owner says whose samples a Stack holds: a thread incarnation, or a
// goroutine.
type owner struct {
	pid, tid  uint32
	start     uint64
	goroutine bool
	goid      uint64
}

// compare orders owners by pid, goroutines (tid 0) by id before threads
// by tid and start.
func (o owner) compare(p owner) int {
	return cmp.Or(cmp.Compare(o.pid, p.pid), cmp.Compare(o.tid, p.tid), cmp.Compare(o.start, p.start), cmp.Compare(o.goid, p.goid))
}

// Samples is the samples of a profile that pass a filter, grouped by
// owner (thread incarnation or goroutine) and stack and expanded to
// functions once per stack, with the totals every sampling view and
// export starts from.
type Samples struct {
	// Profile is the profile the samples are of, restricted to the
	// goroutines carrying the filter's labels (model.FilterLabels).
	Profile     *model.Profile
	Filter      model.Filter
	ByGoroutine bool
	// Stacks are sorted by PID, TID, the incarnation's start (goroutines
	// by id) and stack id, whatever the order of the trace. Inlined
	// functions are functions of their own; samples without a stack
	// have the stack [Unknown]. Stacks running the same code share
	// their Funcs slice: do not modify it.
	Stacks []Stack

	Total     Count
	Truncated uint64 // samples whose call chain was cut short
	// TruncatedBy splits Truncated by the reason the unwinder gave.
	TruncatedBy [trace.NumUnwindReasons]uint64
	First, Last uint64 // time of the first and last sample; 0 if none
}

// Count is what a set of samples weighs.
type Count struct {
	Samples uint64 `json:"samples"` // number of samples
	Period  uint64 `json:"period"`  // sum of the samples' Period (ns for cpu-clock)
}

// Add adds n to c.
func (c *Count) Add(n Count) {
	c.Samples += n.Samples
	c.Period += n.Period
}

// GroupSamples groups the samples of p that pass f by thread
// incarnation or, byGoroutine, by the goroutine their thread last
// switched to (the thread's own samples before it ran any). A filter
// whose patterns Compile refuses keeps nothing: check it first. A
// caller with the filter compiled calls GroupMatched.
func GroupSamples(p *model.Profile, f model.Filter, byGoroutine bool) *Samples {
	m, err := f.Compile()
	if err != nil {
		return &Samples{Profile: p, Filter: f, ByGoroutine: byGoroutine}
	}
	return GroupMatched(p, m, byGoroutine)
}

// GroupMatched is GroupSamples with the filter compiled: the samples
// that pass m (nil: all).
func GroupMatched(p *model.Profile, m *model.Matcher, byGoroutine bool) *Samples {
	p = model.FilterLabels(p, m.LabelMatcher())
	g := newGrouper(p, m, byGoroutine)
	var k int // the next goroutine switch
	for i := range p.Samples {
		s := &p.Samples[i]
		for ; byGoroutine && k < len(p.GoIDs) && p.GoIDs[k].Time <= s.Time; k++ {
			g.goSwitch(&p.GoIDs[k])
		}
		g.sample(s)
	}
	return g.finish()
}

// groupKey is what the samples of one Stack share. It holds no string,
// so that the map of groups hashes and compares it as words: with the
// labels' string in it, finding a sample's group cost ten times the
// rest of grouping it.
type groupKey struct {
	owner
	stack  uint32
	labels uint32 // the goroutine's labels then: an index in grouper.labelSets
}

// grouper groups samples one at a time, in time order, with the
// goroutine switches before them (goSwitch): GroupSamples over a
// profile's samples, and BuildStream over a trace's, which it never
// holds.
type grouper struct {
	d           *Samples
	m           *model.Matcher
	byGoroutine bool
	labels      model.GoLabels
	index       map[groupKey]int
	keys        []groupKey
	// labelSets are the model.LabelString of the label sets seen, ""
	// first; labelIDs their indices.
	labelSets []string
	labelIDs  map[string]uint32
	groups    []Stack
	running   map[*model.Thread]uint64 // the goroutine each thread runs
	threadAt  func(pid, tid uint32, t uint64) *model.Thread
}

// newGrouper returns a grouper of the samples of p (its tables) that
// pass m (nil: all).
func newGrouper(p *model.Profile, m *model.Matcher, byGoroutine bool) *grouper {
	g := &grouper{d: &Samples{Profile: p, Filter: m.Filter(), ByGoroutine: byGoroutine}, m: m, byGoroutine: byGoroutine,
		index: map[groupKey]int{}, running: map[*model.Thread]uint64{}, threadAt: p.NewThreadLookup().At,
		labelSets: []string{""}, labelIDs: map[string]uint32{"": 0}}
	if byGoroutine {
		g.labels = p.GoLabels()
	}
	return g
}

// goSwitch notes that a thread runs another goroutine from r.Time on.
func (g *grouper) goSwitch(r *model.GoID) {
	if g.byGoroutine {
		g.running[g.threadAt(r.PID, r.TID, r.Time)] = r.GoID
	}
}

// sample counts s in its group, if it passes the filter.
func (g *grouper) sample(s *model.Sample) {
	d := g.d
	th := g.threadAt(s.PID, s.TID, s.Time)
	if !g.m.Thread(s.PID, s.TID, th) {
		return
	}
	k := groupKey{owner: owner{pid: s.PID, tid: s.TID}, stack: s.Stack}
	if th != nil {
		k.start = th.Start
	}
	goid, ok := g.running[th]
	var now []model.LabelPair
	if ok && th != nil {
		k.owner = owner{pid: s.PID, goroutine: true, goid: goid}
		now = g.labels.At(s.PID, goid, s.Time)
		k.labels = g.labelID(model.LabelString(now))
	}
	j, ok := g.index[k]
	if !ok {
		j = len(g.groups)
		g.index[k] = j
		g.keys = append(g.keys, k)
		st := Stack{PID: s.PID, TID: k.tid, StackID: s.Stack}
		if k.goroutine {
			st.Goroutine = new(uint64)
			*st.Goroutine = goid
			st.Labels = model.LabelString(g.labels.Carried(s.PID, goid))
			st.LabelsAt = now
		} else {
			st.Thread = th
		}
		g.groups = append(g.groups, st)
	}
	gr := &g.groups[j]
	gr.Samples++
	gr.Period += s.Period
	if s.Truncated {
		gr.Truncated++
		d.Truncated++
		d.TruncatedBy[s.Unwind]++
	}
	d.Total.Samples++
	d.Total.Period += s.Period
	if d.Total.Samples == 1 || s.Time < d.First {
		d.First = s.Time
	}
	d.Last = max(d.Last, s.Time)
}

// labelID returns the index of label set s in g.labelSets, adding it.
func (g *grouper) labelID(s string) uint32 {
	id, ok := g.labelIDs[s]
	if !ok {
		id = uint32(len(g.labelSets))
		g.labelSets = append(g.labelSets, s)
		g.labelIDs[s] = id
	}
	return id
}

// finish expands the groups' stacks to functions and sorts them.
func (g *grouper) finish() *Samples {
	d, keys, groups := g.d, g.keys, g.groups
	// Expand each distinct stack once: threads running the same code share
	// the slice, which the views only read.
	table := NewTable(d.Profile)
	expanded := map[uint32][]Func{}
	symbols := map[uint32]Func{}
	var ids []FuncID
	for j := range groups {
		id := keys[j].stack
		funcs, ok := expanded[id]
		if !ok {
			var leaf FuncID
			ids, leaf = table.Stack(id, ids[:0])
			funcs = make([]Func, len(ids))
			for k, f := range ids {
				funcs[k] = table.Func(f)
			}
			expanded[id], symbols[id] = funcs, table.Func(leaf)
		}
		groups[j].Funcs = funcs
		groups[j].Symbol = symbols[id]
	}

	// Sort by owner and stack id so that every view walks the samples in
	// the same order whatever the order of the trace.
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ka, kb := keys[a], keys[b]
		return cmp.Or(ka.owner.compare(kb.owner), cmp.Compare(ka.stack, kb.stack), cmp.Compare(g.labelSets[ka.labels], g.labelSets[kb.labels]))
	})
	d.Stacks = make([]Stack, len(groups))
	for i, j := range order {
		d.Stacks[i] = groups[j]
	}
	return d
}

// Warnings are the sentences about what the samples lack: the
// profile's (model.Profile.Warnings) and their truncated call chains.
// Never nil.
func (d *Samples) Warnings() []string {
	w := append([]string{}, d.Profile.Warnings()...)
	if d.Truncated > 0 {
		w = append(w, fmt.Sprintf("%d samples (%.2f%%) have a TRUNCATED call chain: the tree is incomplete",
			d.Truncated, d.TruncatedPercent()))
	}
	return w
}

// TruncatedPercent is the share of the samples whose call chain was cut
// short, in percent rounded to two decimals; 0 without samples.
func (d *Samples) TruncatedPercent() float64 {
	if d.Total.Samples == 0 {
		return 0
	}
	return math.Round(float64(d.Truncated)*10000/float64(d.Total.Samples)) / 100
}
