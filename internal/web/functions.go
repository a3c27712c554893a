package web

import (
	"strconv"
	"strings"

	"trueprof/internal/calltree"
)

// FuncTable is the functions table of one thread selection, columnar,
// computed by the engine (calltree.FunctionsOf) over the selection's
// trees: row r is function Func[r] (an index in Data.Funcs) with its
// self and total per metric (Data.Metrics order), calls and per-call
// extremes (instrumented), and its callers and callees with their arcs.
// The page shows these numbers as they are; it sums nothing.
type FuncTable struct {
	Func  []int       `json:"func"`
	Self  [][]float64 `json:"self"`
	Total [][]float64 `json:"total"`
	// Calls, Min and Max are nil for a sampling profile.
	Calls []uint64  `json:"calls,omitempty"`
	Min   []float64 `json:"min,omitempty"`
	Max   []float64 `json:"max,omitempty"`
	// RootTotal is the selection's total per metric: the sum of its
	// threads' root cum.
	RootTotal []float64 `json:"root_total"`
	// Callers and Callees are calltree.Function's, as report's arcflow
	// shows them. An arc with neither calls nor any measured value
	// (a sampled call back into a recursion) is kept: the call graph
	// draws it in a node's all state; the detail leaves it out.
	Callers Arcs `json:"callers"`
	Callees Arcs `json:"callees"`
}

// Arcs are the arcs of every row of a FuncTable, columnar: row r's arcs
// are [Start[r], Start[r+1]). Func −1 is the root (a thread's outermost
// calls).
type Arcs struct {
	Start []int       `json:"start"`
	Func  []int       `json:"func"`
	Calls []uint64    `json:"calls,omitempty"` // nil for a sampling profile
	Base  [][]float64 `json:"base"`
	Cum   [][]float64 `json:"cum"`
}

// functionTables computes the tables of the selections the page offers:
// all threads ("all"), each process ("p:PID") and each thread ("t:INDEX").
// Selections of the same threads share one table (a process with one
// thread, a trace with one process).
func (b *builder) functionTables() {
	d := b.d
	d.Tables, d.Scopes = nil, map[string]int{}
	all := make([]int, len(d.Threads))
	byPID := map[uint32][]int{}
	for i, t := range d.Threads {
		all[i] = i
		byPID[t.PID] = append(byPID[t.PID], i)
	}
	d.scope("all", all)
	for _, pr := range d.Processes {
		if ts := byPID[pr.PID]; len(ts) > 0 {
			d.scope("p:"+strconv.FormatUint(uint64(pr.PID), 10), ts)
		}
	}
	for i := range d.Threads {
		d.scope("t:"+strconv.Itoa(i), []int{i})
	}
}

// scope names the table of the threads (indices in Data.Threads,
// ascending), computing it unless a scope of the same threads has.
func (d *Data) scope(name string, threads []int) {
	var key strings.Builder
	for _, i := range threads {
		key.WriteString(strconv.Itoa(i))
		key.WriteByte(',')
	}
	k, ok := d.tableOf[key.String()]
	if !ok {
		k = len(d.Tables)
		d.Tables = append(d.Tables, d.table(threads))
		d.tableOf[key.String()] = k
	}
	d.Scopes[name] = k
}

// table runs the engine's function accumulator over the threads' trees.
func (d *Data) table(threads []int) FuncTable {
	var procs []calltree.Process
	nm := len(d.Metrics)
	root := make([]float64, nm)
	for _, i := range threads {
		th := d.trees[i]
		if len(procs) == 0 || procs[len(procs)-1].PID != th.PID {
			procs = append(procs, calltree.Process{PID: th.PID})
		}
		pr := &procs[len(procs)-1]
		pr.Threads = append(pr.Threads, *th)
		for m, v := range d.metrics(&th.Root.Cum) {
			root[m] += v
		}
	}
	fns := calltree.FunctionsOf(procs)
	t := FuncTable{Func: make([]int, 0, len(fns)), Self: columns(nm, len(fns)), Total: columns(nm, len(fns)),
		RootTotal: root, Callers: newArcs(nm), Callees: newArcs(nm)}
	instrumented := d.Kind == "instrumented"
	for i := range fns {
		f := &fns[i]
		t.Func = append(t.Func, d.funcIndex[[2]string{f.Name, f.Module}])
		appendMetrics(t.Self, d.metrics(&f.Self))
		appendMetrics(t.Total, d.metrics(&f.Total))
		if instrumented {
			t.Calls = append(t.Calls, f.Calls)
			t.Min = append(t.Min, f.MinSelfNS)
			t.Max = append(t.Max, f.MaxSelfNS)
		}
		d.appendArcs(&t.Callers, f.Callers, instrumented)
		d.appendArcs(&t.Callees, f.Callees, instrumented)
	}
	return t
}

func newArcs(nm int) Arcs {
	return Arcs{Start: []int{0}, Func: []int{}, Base: columns(nm, 0), Cum: columns(nm, 0)}
}

// columns makes nm empty columns with room for n rows.
func columns(nm, n int) [][]float64 {
	c := make([][]float64, nm)
	for m := range c {
		c[m] = make([]float64, 0, n)
	}
	return c
}

func appendMetrics(cols [][]float64, v []float64) {
	for m := range cols {
		cols[m] = append(cols[m], v[m])
	}
}

// appendArcs adds one row's arcs to a; calls are kept for an
// instrumented profile only.
func (d *Data) appendArcs(a *Arcs, arcs []calltree.Arc, calls bool) {
	for i := range arcs {
		arc := &arcs[i]
		f := -1
		if arc.Name != calltree.Root.Name || arc.Module != calltree.Root.Module {
			f = d.funcIndex[[2]string{arc.Name, arc.Module}]
		}
		a.Func = append(a.Func, f)
		if calls {
			a.Calls = append(a.Calls, arc.Calls)
		}
		appendMetrics(a.Base, d.metrics(&arc.Base))
		appendMetrics(a.Cum, d.metrics(&arc.Cum))
	}
	a.Start = append(a.Start, len(a.Func))
}
