package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// Func identifies a function (calltree.Func).
type Func = calltree.Func

// Unknown is the pseudo function that samples without a stack are
// counted under (calltree.Unknown).
var Unknown = calltree.Unknown

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
	Metrics
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

// Stacks returns the samples of p that pass f grouped by thread
// incarnation and call stack, sorted by PID, TID, the incarnation's start
// and stack. Inlined functions are functions of their own; samples
// without a stack have the stack [Unknown]. Stacks running the same code
// share their Funcs slice: do not modify it.
func Stacks(p *model.Profile, f Filter) []Stack {
	return prepare(p, f, false).stacks
}

// GoroutineStacks is Stacks grouped by goroutine for a Go target (by
// the goroutine each sample's thread ran, and the labels it carried
// then); a thread's samples before it ran any goroutine stay its own.
func GoroutineStacks(p *model.Profile, f Filter) []Stack {
	return prepare(p, f, true).stacks
}

// data is a profile prepared for the views: the filtered samples grouped
// by owner and stack and expanded to functions, plus header totals.
type data struct {
	p           *model.Profile
	filter      Filter
	byGoroutine bool
	stacks      []Stack

	total       Metrics
	truncated   uint64
	first, last uint64 // time of the first and last sample; 0 if none
}

// prepare groups the samples of p that pass f by thread incarnation or,
// byGoroutine, by the goroutine their thread last switched to (the
// thread's own samples before it ran any).
func prepare(p *model.Profile, f Filter, byGoroutine bool) *data {
	m, err := f.Compile()
	if err != nil {
		// Write has checked the patterns: a bad one matches nothing.
		return &data{p: p, filter: f, byGoroutine: byGoroutine}
	}
	p = model.FilterLabels(p, m.LabelMatcher())
	d := &data{p: p, filter: f, byGoroutine: byGoroutine}
	var labels model.GoLabels
	if byGoroutine {
		labels = p.GoLabels()
	}
	type key struct {
		owner
		stack  uint32
		labels string // model.LabelString of the goroutine's labels then
	}
	index := map[key]int{}
	var keys []key
	var groups []Stack
	running := map[*model.Thread]uint64{} // the goroutine each thread runs
	var g int                             // the next goroutine switch
	threadAt := p.NewThreadLookup().At
	for i := range p.Samples {
		s := &p.Samples[i]
		th := threadAt(s.PID, s.TID, s.Time)
		if !m.Thread(s.PID, s.TID, th) {
			continue
		}
		for ; byGoroutine && g < len(p.GoIDs) && p.GoIDs[g].Time <= s.Time; g++ {
			r := &p.GoIDs[g]
			running[threadAt(r.PID, r.TID, r.Time)] = r.GoID
		}
		k := key{owner: owner{pid: s.PID, tid: s.TID}, stack: s.Stack}
		if th != nil {
			k.start = th.Start
		}
		goid, ok := running[th]
		var now []model.LabelPair
		if ok && th != nil {
			k.owner = owner{pid: s.PID, goroutine: true, goid: goid}
			now = labels.At(s.PID, goid, s.Time)
			k.labels = model.LabelString(now)
		}
		j, ok := index[k]
		if !ok {
			j = len(groups)
			index[k] = j
			keys = append(keys, k)
			st := Stack{PID: s.PID, TID: k.tid, StackID: s.Stack}
			if k.goroutine {
				st.Goroutine = new(uint64)
				*st.Goroutine = goid
				st.Labels = model.LabelString(labels.Carried(s.PID, goid))
				st.LabelsAt = now
			} else {
				st.Thread = th
			}
			groups = append(groups, st)
		}
		gr := &groups[j]
		gr.Samples++
		gr.Period += s.Period
		if s.Truncated {
			gr.Truncated++
			d.truncated++
		}
		d.total.Samples++
		d.total.Period += s.Period
		if d.total.Samples == 1 || s.Time < d.first {
			d.first = s.Time
		}
		d.last = max(d.last, s.Time)
	}

	// Expand each distinct stack once: threads running the same code share
	// the slice, which the views only read.
	table := calltree.NewTable(p)
	expanded := map[uint32][]Func{}
	symbols := map[uint32]Func{}
	var ids []calltree.FuncID
	for j := range groups {
		id := keys[j].stack
		funcs, ok := expanded[id]
		if !ok {
			var leaf calltree.FuncID
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
		return cmp.Or(ka.owner.compare(kb.owner), cmp.Compare(ka.stack, kb.stack), cmp.Compare(ka.labels, kb.labels))
	})
	d.stacks = make([]Stack, len(groups))
	for i, j := range order {
		d.stacks[i] = groups[j]
	}
	return d
}

// processName returns "name_pid" for a process, the tprof convention.
func (d *data) processName(pid uint32) string {
	name := "[unknown]"
	if pr := d.p.Process(pid); pr != nil && pr.Name != "" {
		name = pr.Name
	}
	return fmt.Sprintf("%s_%d", name, pid)
}

// ownerName names the owner of the samples of s as tprof does:
// "name_tid" for a thread, with the name of its incarnation, and
// "goroutine N" for a goroutine.
func ownerName(s *Stack) string {
	if s.Goroutine != nil {
		return strings.TrimSpace(fmt.Sprintf("goroutine %d %s", *s.Goroutine, s.Labels))
	}
	name := "[unknown]"
	if s.Thread != nil && s.Thread.Name != "" {
		name = s.Thread.Name
	}
	return fmt.Sprintf("%s_%d", name, s.TID)
}
