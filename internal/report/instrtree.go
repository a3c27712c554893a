package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"trueprof/internal/calltree"
)

// InstrTreeNode is a node of a thread's call-stack tree in an
// instrumented recording (the log-rt report): calltree.Node with its share
// of the total.
type InstrTreeNode struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	Level  int    `json:"level"` // depth from the thread's root, which is 0
	// Recursion is how many times this node's function occurs among its
	// ancestors.
	Recursion int `json:"recursion"`
	// Sampled marks a function known only from samples (not traced): it
	// has no calls and no time, only samples.
	Sampled bool `json:"sampled"`
	// Calls counts the entries into this node, Callees the calls it made
	// to its children; both exact.
	Calls   uint64 `json:"calls"`
	Callees uint64 `json:"callees"`
	// Base is measured while this node was the current call (its self),
	// Cum adds its descendants.
	Base calltree.Metrics `json:"base"`
	Cum  calltree.Metrics `json:"cum"`
	// CumPercent is Cum's share of the total, in the header's metric.
	CumPercent float64 `json:"cum_percent"`
	// MinSelfNS and MaxSelfNS are the smallest and largest self wall
	// time of one call; zero when Calls is zero.
	MinSelfNS float64 `json:"min_self_ns"`
	MaxSelfNS float64 `json:"max_self_ns"`
	// MinSelfCPUNS and MaxSelfCPUNS are the same for the self CPU time.
	MinSelfCPUNS float64 `json:"min_self_cpu_ns"`
	MaxSelfCPUNS float64 `json:"max_self_cpu_ns"`
	// BelowResolution marks a node whose calibrated base time per call
	// is shorter than the calibration's resolution: its calls are exact,
	// its times estimates. SampledBaseNS is then its base time by
	// sampling, when sampling ran with a time-based event (-F).
	BelowResolution bool    `json:"below_resolution,omitempty"`
	SampledBaseNS   float64 `json:"sampled_base_ns,omitempty"`
	// Children are sorted by cum of the header's metric, largest first,
	// then by cum wall time, cum samples, name and module. Never null.
	Children []InstrTreeNode `json:"children"`
}

// InstrTreeThread is the call-stack tree of one thread incarnation or,
// by goroutine, goroutine.
type InstrTreeThread struct {
	TID   uint32 `json:"tid"`      // 0 for a goroutine
	Start uint64 `json:"start_ns"` // creation time; 0 if before recording
	Name  string `json:"name"`     // "name_tid", or "goroutine N"
	// Goroutine is the goroutine's id and OSThreads the tids of the
	// threads it ran on; absent for a thread.
	Goroutine *uint64  `json:"goroutine,omitempty"`
	OSThreads []uint32 `json:"os_threads,omitempty"`
	// BeginNS and EndNS bound the time the tree covers: the thread's
	// life in the recording (calltree.Thread).
	BeginNS uint64           `json:"begin_ns"`
	EndNS   uint64           `json:"end_ns"`
	FirstNS uint64           `json:"first_ns"` // first analysed event
	LastNS  uint64           `json:"last_ns"`  // last analysed event
	Events  uint64           `json:"events"`
	Repairs calltree.Repairs `json:"repairs"`
	// Root is the thread itself (level 0): its base is the time outside
	// its outermost calls, its cum the thread's total.
	Root InstrTreeNode `json:"root"`
}

// InstrTreeProcess groups the trees of a process's threads.
type InstrTreeProcess struct {
	PID     uint32            `json:"pid"`
	Name    string            `json:"name"` // "name_pid"
	Total   calltree.Metrics  `json:"total"`
	Percent float64           `json:"percent"` // of the total, in the header's metric
	Threads []InstrTreeThread `json:"threads"` // by cum, largest first, then tid and start
}

// InstrTreeReport is the JSON form of the tree view of an instrumented
// recording.
type InstrTreeReport struct {
	InstrHeader
	Processes []InstrTreeProcess `json:"processes"` // by total, largest first, then pid
}

func buildInstrTree(in *instrData) InstrTreeReport {
	rep := InstrTreeReport{InstrHeader: in.header, Processes: []InstrTreeProcess{}}
	mt, o, total := in.mt, in.o, in.total
	for i := range in.r.Processes {
		pr := &in.r.Processes[i]
		if hiddenF(mt.of(&pr.Total), total, o) {
			continue
		}
		tp := InstrTreeProcess{PID: pr.PID, Name: instrProcessName(pr), Total: pr.Total,
			Percent: percentF(mt.of(&pr.Total), total), Threads: []InstrTreeThread{}}
		for j := range pr.Threads {
			th := &pr.Threads[j]
			root, ok := instrTreeNode(&th.Root, in)
			if !ok {
				continue
			}
			tp.Threads = append(tp.Threads, InstrTreeThread{TID: th.TID, Start: th.Start, Name: th.Root.Name,
				Goroutine: th.Goroutine, OSThreads: th.OSThreads, BeginNS: th.BeginNS, EndNS: th.EndNS,
				FirstNS: th.FirstNS, LastNS: th.LastNS, Events: th.Events, Repairs: th.Repairs, Root: root})
		}
		// calltree sorts by goroutine, tid and start: a stable sort by the
		// metric keeps that order among equals.
		slices.SortStableFunc(tp.Threads, func(a, b InstrTreeThread) int {
			return cmp.Compare(mt.of(&b.Root.Cum), mt.of(&a.Root.Cum))
		})
		rep.Processes = append(rep.Processes, tp)
	}
	slices.SortStableFunc(rep.Processes, func(a, b InstrTreeProcess) int {
		return cmp.Or(cmp.Compare(mt.of(&b.Total), mt.of(&a.Total)), cmp.Compare(a.PID, b.PID))
	})
	return rep
}

// instrTreeNode converts n and its descendants, pruning those below
// Options.Min, and reports whether n itself is kept.
func instrTreeNode(n *calltree.Node, in *instrData) (InstrTreeNode, bool) {
	mt := in.mt
	if hiddenF(mt.of(&n.Cum), in.total, in.o) {
		return InstrTreeNode{}, false
	}
	t := InstrTreeNode{
		Name: n.Name, Module: n.Module, Level: n.Level, Recursion: n.Recursion, Sampled: n.Sampled,
		Calls: n.Calls, Callees: n.Callees, Base: n.Base, Cum: n.Cum,
		CumPercent: percentF(mt.of(&n.Cum), in.total),
		MinSelfNS:  n.MinSelfNS, MaxSelfNS: n.MaxSelfNS,
		MinSelfCPUNS: n.MinSelfCPUNS, MaxSelfCPUNS: n.MaxSelfCPUNS,
		Children: make([]InstrTreeNode, 0, len(n.Children)),
	}
	if n.Level > 0 && belowResolution(in.header.Calibration, n.Calls, n.Base.WallNS) {
		t.BelowResolution, t.SampledBaseNS = true, sampledSelfNS(&in.header, &n.Base)
	}
	for i := range n.Children {
		if c, ok := instrTreeNode(&n.Children[i], in); ok {
			t.Children = append(t.Children, c)
		}
	}
	// calltree sorts by cum wall time, then samples, name and module: a
	// stable sort by the metric keeps that order among equals.
	slices.SortStableFunc(t.Children, func(a, b InstrTreeNode) int {
		return cmp.Compare(mt.of(&b.Cum), mt.of(&a.Cum))
	})
	return t, true
}

func instrTreeView(in *instrData) (func(io.Writer) error, any, error) {
	rep := buildInstrTree(in)
	text := func(w io.Writer) error {
		mt, h := in.mt, &rep.InstrHeader
		samples := h.Total.Samples > 0
		fmt.Fprintf(w, "BASE, CUM and CUM%% are %s; DELTA is the wall time calibration removed from BASE;\n", metricTitle(mt))
		fmt.Fprintln(w, "DS counts dispatches (switched out: blocked or preempted), IN interrupts.")
		if anyNode(rep.Processes, func(n *InstrTreeNode) bool { return n.Sampled }) {
			fmt.Fprintln(w, sampledLegend)
		}
		if anyNode(rep.Processes, func(n *InstrTreeNode) bool { return n.BelowResolution }) {
			fmt.Fprintln(w, resolutionLegend(rep.Calibration))
		}
		fmt.Fprintln(w)
		for _, pr := range rep.Processes {
			fmt.Fprintf(w, "Process %s: %s %s (%.2f%%)\n", pr.Name, mt.name, mt.format(mt.of(&pr.Total)), pr.Percent)
			for _, th := range pr.Threads {
				fmt.Fprintf(w, "\n%4s %4s %8s %8s %10s %10s %6s %6s", "LV", "RL", "CALLS", "CEE", "BASE", "DELTA", "DS", "IN")
				if samples {
					fmt.Fprintf(w, " %6s", "SMP")
				}
				fmt.Fprintf(w, " %10s %7s  %s\n", "CUM", "CUM%", "NAME")
				var print func(n *InstrTreeNode)
				print = func(n *InstrTreeNode) {
					calls, cee := fmt.Sprint(n.Calls), fmt.Sprint(n.Callees)
					if n.Sampled {
						calls, cee = "-", "-"
					} else if n.Level == 0 {
						calls = "-" // a thread is not called
					}
					ds, in := fmt.Sprint(n.Base.Dispatches), fmt.Sprint(n.Base.Interrupts)
					if !h.CPUMeasured {
						ds = "-"
					}
					if !h.InterruptsMeasured {
						in = "-"
					}
					fmt.Fprintf(w, "%4d %4d %8s %8s %10s %10s %6s %6s", n.Level, n.Recursion, calls, cee,
						approx(mt.format(mt.of(&n.Base)), n.BelowResolution), formatNS(n.Base.DeltaNS), ds, in)
					if samples {
						fmt.Fprintf(w, " %6d", n.Base.Samples)
					}
					fmt.Fprintf(w, " %10s %6.2f%%  %s%s%s\n", mt.format(mt.of(&n.Cum)), n.CumPercent,
						strings.Repeat("  ", n.Level), sampledLabel(calltree.Func{Name: n.Name, Module: n.Module}, n.Sampled), sampledNote(n.SampledBaseNS))
					for i := range n.Children {
						print(&n.Children[i])
					}
				}
				print(&th.Root)
			}
			fmt.Fprintln(w)
		}
		return nil
	}
	return text, rep, nil
}

// metricTitle describes a metric in the sentence above a view's columns.
func metricTitle(mt metric) string {
	switch mt.name {
	case "cpu":
		return "CPU time (cpu_ns)"
	case "dispatches":
		return "dispatches"
	}
	return "wall time (wall_ns)"
}

// anyNode reports whether a node of the trees of procs satisfies pred.
func anyNode(procs []InstrTreeProcess, pred func(n *InstrTreeNode) bool) bool {
	var walk func(n *InstrTreeNode) bool
	walk = func(n *InstrTreeNode) bool {
		if pred(n) {
			return true
		}
		return slices.ContainsFunc(n.Children, func(c InstrTreeNode) bool { return walk(&c) })
	}
	for _, pr := range procs {
		for i := range pr.Threads {
			if walk(&pr.Threads[i].Root) {
				return true
			}
		}
	}
	return false
}
