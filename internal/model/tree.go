package model

import (
	"fmt"
	"math"

	"trueprof/internal/trace"
)

// Tree is what an aggregated recording (trueprof record --aggregate)
// holds instead of its function entries and exits: each thread
// incarnation's call tree, the sum of the deltas of its snapshots
// (trace.TreeNode), as the last snapshot left it. calltree renders it
// as it renders the trees it builds from events.
type Tree struct {
	// Threads are the trees, in the order the trace first named them.
	Threads []TreeThread
	// Snapshots counts the complete snapshots (trace.TreeMark) and
	// LastNS is the time of the last one; Resets counts the times the
	// aggregates started over (trueprof ctl reset).
	Snapshots, Resets int
	LastNS            uint64
	// Dropped, Switches, Interrupts, Nodes, Pruned and PrunedNS are the
	// last mark's (trace.TreeMark).
	Dropped              uint64
	Switches, Interrupts bool
	Nodes, Pruned        uint64
	PrunedNS             float64

	slots map[uint32]int // tree thread number → index in Threads
}

// TreeThread is the tree of one thread incarnation (trace.TreeThread
// with its nodes) or, ByGoroutine, one of the trees of a report by
// goroutine: goroutine GoID's when Goroutine (which the threads Ran
// ran), else a thread's records before it ran any goroutine.
type TreeThread struct {
	PID, TID               uint32
	Start                  uint64
	Name                   string
	ByGoroutine, Goroutine bool
	GoID                   uint64
	Ran                    []uint32
	// Begin, End, First, Last, Events and the repairs are the latest
	// trace.TreeThread's.
	Begin, End, First, Last, Events       uint64
	Popped, Unmatched, Unclosed, Detached uint64
	// Nodes are indexed by node id; Nodes[0] is the thread's root.
	Nodes []TreeNode
}

// TreeNode is a node of a TreeThread with its deltas summed.
type TreeNode struct {
	Parent uint32
	// Location and Frame name the node's function (trace.TreeNode):
	// location 0 is the unknown function (a sample without a stack), and
	// Frame PrunedFrame marks a "(pruned)" node.
	Location, Frame uint32
	Recursion       uint32
	Calls, Closed   uint64
	Base            trace.TreeMetrics
	// MinSelfNS and MaxSelfNS are the extremes of one call's self wall
	// time, MinSelfCPUNS and MaxSelfCPUNS of its self CPU time.
	MinSelfNS, MaxSelfNS       float64
	MinSelfCPUNS, MaxSelfCPUNS float64
	// Gone marks a node that was pruned: its totals are its "(pruned)"
	// sibling's now.
	Gone bool
}

// PrunedFrame is the Frame of a "(pruned)" node: the subtrees the
// recorder folded to bound its memory. Its Location is 0.
const PrunedFrame = math.MaxUint32

// Aggregated reports whether p is an aggregated recording: its calls are
// in p.Tree, not in p.Events.
func (p *Profile) Aggregated() bool { return p.Header.Aggregate != nil || p.Tree != nil }

// addTree adds a tree record to p.Tree.
func (l *loader) addTree(rec trace.Record) error {
	p := l.p
	if p.Tree == nil {
		p.Tree = &Tree{slots: map[uint32]int{}}
	}
	tr := p.Tree
	switch r := rec.(type) {
	case *trace.TreeThread:
		name, err := l.str(r.Name)
		if err != nil {
			return err
		}
		i, ok := tr.slots[r.Thread]
		if !ok {
			i = len(tr.Threads)
			tr.slots[r.Thread] = i
			tr.Threads = append(tr.Threads, TreeThread{Nodes: []TreeNode{{}}})
		}
		th := &tr.Threads[i]
		th.PID, th.TID, th.Start, th.Name = r.PID, r.TID, r.Start, name
		th.ByGoroutine, th.Goroutine, th.GoID, th.Ran = r.ByGoroutine, r.Goroutine, r.GoID, r.Ran
		th.Begin, th.End, th.First, th.Last, th.Events = r.Begin, r.End, r.First, r.Last, r.Events
		th.Popped, th.Unmatched, th.Unclosed, th.Detached = r.Popped, r.Unmatched, r.Unclosed, r.Detached
	case *trace.TreeNode:
		i, ok := tr.slots[r.Thread]
		if !ok {
			return fmt.Errorf("%w: tree node %d of undefined tree thread %d", errCorrupt, r.ID, r.Thread)
		}
		th := &tr.Threads[i]
		if r.Pruned {
			if int(r.ID) >= len(th.Nodes) || int(r.Parent) >= len(th.Nodes) || r.ID == 0 || r.ID == r.Parent || th.Nodes[r.ID].Gone {
				return fmt.Errorf("%w: pruned tree node %d into %d", errCorrupt, r.ID, r.Parent)
			}
			n, into := &th.Nodes[r.ID], &th.Nodes[r.Parent]
			if n.Parent == into.Parent {
				// A folded subtree's root: its calls are the (pruned)
				// node's, whose parent called it.
				into.Calls += n.Calls
			}
			addTreeMetrics(&into.Base, &n.Base)
			*n = TreeNode{Parent: n.Parent, Location: n.Location, Frame: n.Frame, Recursion: n.Recursion, Gone: true}
			return nil
		}
		switch {
		case r.ID == 0:
		case int(r.ID) == len(th.Nodes):
			if r.Parent >= r.ID || th.Nodes[r.Parent].Gone || int(r.Location) >= len(p.Locations) {
				return fmt.Errorf("%w: tree node %d (parent %d, location %d)", errCorrupt, r.ID, r.Parent, r.Location)
			}
			th.Nodes = append(th.Nodes, TreeNode{Parent: r.Parent, Location: r.Location, Frame: r.Frame, Recursion: r.Recursion})
		case int(r.ID) > len(th.Nodes) || th.Nodes[r.ID].Gone:
			return fmt.Errorf("%w: tree node %d out of sequence", errCorrupt, r.ID)
		}
		n := &th.Nodes[r.ID]
		n.Calls += r.Calls
		n.Closed += r.Closed
		addTreeMetrics(&n.Base, &r.Base)
		n.MinSelfNS, n.MaxSelfNS = r.MinSelfNS, r.MaxSelfNS
		n.MinSelfCPUNS, n.MaxSelfCPUNS = r.MinSelfCPUNS, r.MaxSelfCPUNS
	case *trace.TreeMark:
		tr.Dropped, tr.Switches, tr.Interrupts = r.Dropped, r.Switches, r.Interrupts
		tr.Nodes, tr.Pruned, tr.PrunedNS = r.Nodes, r.Pruned, r.PrunedNS
		switch r.Kind {
		case trace.TreeSnapshot:
			tr.Snapshots++
			tr.LastNS = r.Time
		case trace.TreeReset:
			tr.Resets++
			tr.reset()
		}
	}
	return nil
}

// reset zeroes every total of t, keeping the trees' shape: the
// aggregates start over.
func (t *Tree) reset() {
	for i := range t.Threads {
		th := &t.Threads[i]
		th.Events, th.Popped, th.Unmatched, th.Unclosed, th.Detached = 0, 0, 0, 0, 0
		for k := range th.Nodes {
			n := &th.Nodes[k]
			n.Calls, n.Closed, n.Base, n.MinSelfNS, n.MaxSelfNS = 0, 0, trace.TreeMetrics{}, 0, 0
			n.MinSelfCPUNS, n.MaxSelfCPUNS = 0, 0
		}
	}
}

// addTreeMetrics adds d to m, field by field.
func addTreeMetrics(m, d *trace.TreeMetrics) {
	m.WallNS += d.WallNS
	m.WallNSRaw += d.WallNSRaw
	m.DeltaNS += d.DeltaNS
	m.CPUNS += d.CPUNS
	m.Dispatches += d.Dispatches
	m.Voluntary += d.Voluntary
	m.Involuntary += d.Involuntary
	m.Interrupts += d.Interrupts
	m.InterruptNS += d.InterruptNS
	m.Samples += d.Samples
	m.Period += d.Period
}
