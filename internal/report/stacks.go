package report

import (
	"cmp"
	"fmt"
	"slices"

	"trueprof/internal/model"
)

// Func identifies a function: the same name in two modules is two
// functions (two copies of a static helper, or a library and the program
// both defining it).
type Func struct {
	Name   string `json:"name"`
	Module string `json:"module"`
}

// Unknown is the pseudo function that samples without a stack are
// counted under.
var Unknown = Func{Name: "[unknown]"}

// Stack is the samples of one thread that share a call stack.
type Stack struct {
	PID, TID uint32
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

// Stacks returns the samples of p that pass f grouped by thread and call
// stack, sorted by PID, TID and stack. Inlined functions are functions of
// their own; samples without a stack have the stack [Unknown]. Stacks
// running the same code share their Funcs slice: do not modify it.
func Stacks(p *model.Profile, f Filter) []Stack {
	return prepare(p, f).stacks
}

// data is a profile prepared for the views: the filtered samples grouped
// by (pid, tid, stack) and expanded to functions, plus header totals.
type data struct {
	p      *model.Profile
	filter Filter
	stacks []Stack

	total       Metrics
	truncated   uint64
	first, last uint64 // time of the first and last sample; 0 if none

	threadNames map[[2]uint32]string // built on first use
}

func prepare(p *model.Profile, f Filter) *data {
	d := &data{p: p, filter: f}
	type key struct{ pid, tid, stack uint32 }
	index := map[key]int{}
	var keys []key
	var groups []Stack
	for i := range p.Samples {
		s := &p.Samples[i]
		if !f.Match(s.PID, s.TID) {
			continue
		}
		k := key{s.PID, s.TID, s.Stack}
		j, ok := index[k]
		if !ok {
			j = len(groups)
			index[k] = j
			keys = append(keys, k)
			groups = append(groups, Stack{PID: s.PID, TID: s.TID})
		}
		g := &groups[j]
		g.Samples++
		g.Period += s.Period
		if s.Truncated {
			g.Truncated++
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
	expanded := map[uint32][]Func{}
	symbols := map[uint32]Func{}
	var locs []uint32
	for j := range groups {
		id := keys[j].stack
		funcs, ok := expanded[id]
		if !ok {
			locs = p.Stack(id, locs[:0])
			funcs, symbols[id] = expand(p, locs)
			expanded[id] = funcs
		}
		groups[j].Funcs = funcs
		groups[j].Symbol = symbols[id]
	}

	// Sort by (pid, tid, stack id) so that every view walks the samples in
	// the same order whatever the order of the trace.
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ka, kb := keys[a], keys[b]
		return cmp.Or(cmp.Compare(ka.pid, kb.pid), cmp.Compare(ka.tid, kb.tid), cmp.Compare(ka.stack, kb.stack))
	})
	d.stacks = make([]Stack, len(groups))
	for i, j := range order {
		d.stacks[i] = groups[j]
	}
	return d
}

// expand turns location ids, leaf first, into the function-level stack
// (outermost first) and the leaf's physical function.
func expand(p *model.Profile, locs []uint32) (funcs []Func, symbol Func) {
	for i := len(locs) - 1; i >= 0; i-- {
		frames, module := LocationFrames(p, locs[i])
		// Frames are innermost first: walk them backwards to go outer→inner.
		for k := len(frames) - 1; k >= 0; k-- {
			funcs = append(funcs, Func{Name: frames[k].Function, Module: module})
		}
		if i == 0 {
			symbol = Func{Name: frames[len(frames)-1].Function, Module: module}
		}
	}
	if len(funcs) == 0 {
		return []Func{Unknown}, Unknown
	}
	return funcs, symbol
}

// LocationFrames returns the frames (innermost first) and module of
// location id of p. The list is never empty: a bad id becomes an Unknown
// frame, and a location without frames (which the model promises never to
// produce) a "module+0xoffset" frame, rather than a lost sample.
func LocationFrames(p *model.Profile, id uint32) ([]model.Frame, string) {
	if int(id) >= len(p.Locations) || id == 0 {
		return []model.Frame{{Function: Unknown.Name}}, ""
	}
	l := &p.Locations[id]
	if len(l.Frames) == 0 {
		return []model.Frame{{Function: fmt.Sprintf("%s+%#x", l.Module, l.Offset)}}, l.Module
	}
	return l.Frames, l.Module
}

// processName returns "name_pid" for a process, the tprof convention.
func (d *data) processName(pid uint32) string {
	name := "[unknown]"
	if pr := d.p.Process(pid); pr != nil && pr.Name != "" {
		name = pr.Name
	}
	return fmt.Sprintf("%s_%d", name, pid)
}

// threadName returns "name_tid" for a thread. When a tid was reused its
// latest name wins: samples carry only pid and tid, so the reports cannot
// tell the two lifetimes apart.
func (d *data) threadName(pid, tid uint32) string {
	if d.threadNames == nil {
		d.threadNames = map[[2]uint32]string{}
		// Threads is sorted by start time within a tid: the last one wins.
		for _, t := range d.p.Threads {
			if t.Name != "" {
				d.threadNames[[2]uint32{t.PID, t.TID}] = t.Name
			}
		}
	}
	name, ok := d.threadNames[[2]uint32{pid, tid}]
	if !ok {
		name = "[unknown]"
	}
	return fmt.Sprintf("%s_%d", name, tid)
}
