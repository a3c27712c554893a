package calltree

import (
	"cmp"
	"slices"
)

// fnAcc accumulates one function over the trees.
type fnAcc struct {
	calls            uint64
	self, total      Metrics
	min, max         float64 // self wall per call
	minCPU, maxCPU   float64 // self CPU per call
	timed            bool    // min and max are set
	callers, callees map[Func]*Arc
}

func (f *fnAcc) arc(m map[Func]*Arc, g Func) *Arc {
	a := m[g]
	if a == nil {
		a = &Arc{Name: g.Name, Module: g.Module}
		m[g] = a
	}
	return a
}

// functions aggregates the trees of every thread per function (the function
// accumulator, with exact arcs):
// self is the sum of the function's nodes' base, total the sum of the cum
// of its outermost nodes (recursion 0), whose subtrees do not overlap.
// The arcs follow the arcflow rule of samples, applied to every slice of
// time: a slice whose stack is f1..fk, with F outermost at position i,
// counts in the cum of F's caller f(i-1), in the base of the leaf's caller
// f(k-1) when fk = F, and otherwise in the cum of F's callee f(i+1). So
// the callers' calls, base and cum add up to F's calls, self and total,
// and the callees' cum to total minus self, recursion (direct or through
// other functions) included.
func functions(procs []Process) []Function {
	accs := map[Func]*fnAcc{}
	get := func(f Func) *fnAcc {
		a := accs[f]
		if a == nil {
			a = &fnAcc{callers: map[Func]*Arc{}, callees: map[Func]*Arc{}}
			accs[f] = a
		}
		return a
	}
	// path holds the functions from a thread's root to the node at hand;
	// outer, for each function on it, the index of its outermost
	// activation there.
	var path []Func
	outer := map[Func]int{}
	var walk func(n *Node, caller Func, callerAcc *fnAcc, callerOutermost bool)
	walk = func(n *Node, caller Func, callerAcc *fnAcc, callerOutermost bool) {
		f := n.Func()
		a := get(f)
		a.calls += n.Calls
		a.self.Add(n.Base)
		if n.Calls > 0 {
			if !a.timed {
				a.min, a.max, a.minCPU, a.maxCPU = n.MinSelfNS, n.MaxSelfNS, n.MinSelfCPUNS, n.MaxSelfCPUNS
			}
			a.min, a.max = min(a.min, n.MinSelfNS), max(a.max, n.MaxSelfNS)
			a.minCPU, a.maxCPU = min(a.minCPU, n.MinSelfCPUNS), max(a.maxCPU, n.MaxSelfCPUNS)
			a.timed = true
		}
		cr := a.arc(a.callers, caller)
		cr.Calls += n.Calls
		cr.Base.Add(n.Base)
		if n.Recursion == 0 {
			a.total.Add(n.Cum)
			cr.Cum.Add(n.Cum)
		}
		if callerAcc != nil {
			ce := callerAcc.arc(callerAcc.callees, f)
			ce.Calls += n.Calls
			if callerOutermost {
				ce.Cum.Add(n.Cum)
				if f != caller {
					ce.Base.Add(n.Base)
				}
			}
		}
		if n.Recursion == 0 {
			outer[f] = len(path)
		}
		path = append(path, f)
		if i, ok := outer[f]; ok && n.Recursion > 0 {
			// An inner activation: its self time is f's Self, not time
			// spent in the callee of f's outermost activation that led
			// here (n itself, or an ancestor), so the callees' Cum adds
			// up to Total minus Self, recursion included.
			ce := a.arc(a.callees, path[i+1])
			ce.Cum.sub(n.Base)
		}
		for i := range n.Children {
			walk(&n.Children[i], f, a, n.Recursion == 0)
		}
		path = path[:len(path)-1]
		if n.Recursion == 0 {
			delete(outer, f)
		}
	}
	for i := range procs {
		for j := range procs[i].Threads {
			root := &procs[i].Threads[j].Root
			for k := range root.Children {
				walk(&root.Children[k], Root, nil, false)
			}
		}
	}

	out := make([]Function, 0, len(accs))
	for f, a := range accs {
		fn := Function{
			Name:    f.Name,
			Module:  f.Module,
			Calls:   a.calls,
			Self:    a.self,
			Total:   a.total,
			Callers: sortedArcs(a.callers),
			Callees: sortedArcs(a.callees),
		}
		if a.timed {
			fn.MinSelfNS, fn.MaxSelfNS = a.min, a.max
			fn.MinSelfCPUNS, fn.MaxSelfCPUNS = a.minCPU, a.maxCPU
		}
		out = append(out, fn)
	}
	slices.SortFunc(out, func(x, y Function) int {
		return cmp.Or(
			cmp.Compare(y.Self.WallNS, x.Self.WallNS),
			cmp.Compare(y.Total.WallNS, x.Total.WallNS),
			cmp.Compare(y.Self.Samples, x.Self.Samples),
			cmp.Compare(x.Name, y.Name),
			cmp.Compare(x.Module, y.Module))
	})
	return out
}

func sortedArcs(m map[Func]*Arc) []Arc {
	rows := make([]Arc, 0, len(m))
	for _, a := range m {
		rows = append(rows, *a)
	}
	slices.SortFunc(rows, func(x, y Arc) int {
		return cmp.Or(
			cmp.Compare(y.Cum.WallNS, x.Cum.WallNS),
			cmp.Compare(y.Calls, x.Calls),
			cmp.Compare(y.Cum.Samples, x.Cum.Samples),
			cmp.Compare(x.Name, y.Name),
			cmp.Compare(x.Module, y.Module))
	})
	return rows
}
