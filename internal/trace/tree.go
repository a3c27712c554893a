package trace

import "encoding/binary"

// The records of an aggregated recording (trueprof record --aggregate,
// docs/aggregate.md): instead of every function entry and exit, the
// recorder writes, every snapshot interval, the call-tree nodes that
// changed since the previous snapshot (the non-zero list) as deltas, the
// thread incarnations they belong to, and a mark that ends the snapshot.
// A reader sums the deltas of each node.

// TreeMetrics are a tree node's metrics measured while it was the
// current call (its base), as calltree.Metrics holds them: in a
// TreeNode, what was added since the node's previous record.
type TreeMetrics struct {
	WallNS      float64 // calibrated wall time
	WallNSRaw   uint64  // wall time as recorded
	DeltaNS     float64 // what calibration removed
	CPUNS       float64 // calibrated on-CPU time
	Dispatches  uint64
	Voluntary   uint64
	Involuntary uint64
	Interrupts  uint64
	InterruptNS uint64
	Samples     uint64
	Period      uint64
}

// TreeThread describes the tree Thread (a number from 1, unique in the
// trace) of a thread incarnation of an aggregated recording: its key
// (PID, TID, Start) and what the analysis knows of it so far. It is
// written before the first TreeNode of the tree and again whenever a
// field changed; the latest holds.
//
// A Go target's recording holds a second set of trees, marked
// ByGoroutine: those of a report by goroutine, one per goroutine
// (Goroutine, with GoID; TID and Start are 0) and one per thread for
// its records before it ran any goroutine.
type TreeThread struct {
	Time   uint64
	Thread uint32
	PID    uint32
	TID    uint32
	Start  uint64 // the incarnation's creation time; 0 if before recording
	Name   uint32 // string id of the thread's name
	// Begin and End bound the time the metrics cover; First and Last are
	// the times of the first and last events, Events their number.
	Begin, End, First, Last, Events uint64
	// The shadow stack's repairs (calltree.Repairs).
	Popped, Unmatched, Unclosed, Detached uint64
	// ByGoroutine says the tree is one of the trees by goroutine;
	// Goroutine that it is goroutine GoID's, which the threads Ran ran.
	ByGoroutine, Goroutine bool
	GoID                   uint64
	Ran                    []uint32
}

// TreeNode is a node of tree Thread that changed since its previous
// record: node ID (0 is the thread's root) is the child of node Parent
// for the function Frame of location Location (0: the outermost,
// physical function; k: the k-th function inlined into it), with
// Recursion occurrences of that function among its ancestors. Calls,
// Closed (calls that returned) and Base are the deltas since the node's
// previous record; MinSelfNS and MaxSelfNS the current smallest and
// largest self wall time of one call, MinSelfCPUNS and MaxSelfCPUNS its
// self CPU time's (valid when some call closed; the CPU pair is absent,
// zero, in traces written before it was added).
// A node's record comes after its parent's first one.
type TreeNode struct {
	Time                       uint64
	Thread                     uint32
	ID, Parent                 uint32
	Location, Frame            uint32
	Recursion                  uint32
	Calls, Closed              uint64
	Base                       TreeMetrics
	MinSelfNS, MaxSelfNS       float64
	MinSelfCPUNS, MaxSelfCPUNS float64
	// Pruned says the node was folded, with its subtree, into node
	// Parent (the "(pruned)" child of the subtree root's parent) to bound
	// the recorder's memory: a reader adds what it accumulated for the
	// node (its base metrics; its calls too when it is the subtree's
	// root, a child of Parent's parent) to Parent and forgets it. The
	// other fields are zero.
	Pruned bool
}

// TreeMarkKind is a TreeMark's minor code.
type TreeMarkKind uint8

// Tree mark kinds.
const (
	// TreeSnapshot ends a snapshot: every TreeThread and TreeNode
	// before it is written.
	TreeSnapshot TreeMarkKind = 1
	// TreeReset says the aggregates started over (trueprof ctl reset):
	// a reader zeroes every node's and thread's totals and keeps the
	// trees' shape.
	TreeReset TreeMarkKind = 2
)

// TreeMark ends a snapshot or resets the aggregates, with the
// recording's totals at that time.
type TreeMark struct {
	Time uint64
	Kind TreeMarkKind
	// Dropped counts the events the probes reported lost so far
	// (Adjust records' dropped).
	Dropped uint64
	// Switches and Interrupts say whether context switches and
	// interrupts were measured (calltree.Result's CPUMeasured and
	// InterruptsMeasured).
	Switches, Interrupts bool
	// Nodes is the number of nodes the recorder holds; Pruned the nodes
	// folded into "(pruned)" nodes so far and PrunedNS their cum wall
	// time (calibrated) when they were folded.
	Nodes, Pruned uint64
	PrunedNS      float64
}

// Major returns MajorTreeThread.
func (*TreeThread) Major() Major { return MajorTreeThread }

// Major returns MajorTreeNode.
func (*TreeNode) Major() Major { return MajorTreeNode }

// Major returns MajorTreeMark.
func (*TreeMark) Major() Major { return MajorTreeMark }

// TreeNode minor bits: treeNodePruned marks a pruned node, treeNodeCPU
// a record that ends with the CPU extremes (every record written since
// they were added; older readers ignore the bit and the bytes).
const (
	treeNodePruned = 1
	treeNodeCPU    = 2
)

// TreeThread minor bits.
const (
	treeThreadByGoroutine = 1
	treeThreadGoroutine   = 2
)

// tree mark flag bits.
const (
	treeMarkSwitches   = 1
	treeMarkInterrupts = 2
)

// appendTree appends the body of a tree record after its time and
// returns its minor code.
func appendTree(b []byte, r Record) ([]byte, uint8) {
	var minor uint8
	switch r := r.(type) {
	case *TreeThread:
		b = appendU32s(b, r.Thread, r.PID, r.TID)
		b = binary.AppendUvarint(b, r.Start)
		b = binary.AppendUvarint(b, u(r.Name))
		for _, v := range [...]uint64{r.Begin, r.End, r.First, r.Last, r.Events, r.Popped, r.Unmatched, r.Unclosed, r.Detached} {
			b = binary.AppendUvarint(b, v)
		}
		if r.ByGoroutine {
			minor |= treeThreadByGoroutine
		}
		if r.Goroutine {
			minor |= treeThreadGoroutine
			b = binary.AppendUvarint(b, r.GoID)
			b = binary.AppendUvarint(b, uint64(len(r.Ran)))
			for _, tid := range r.Ran {
				b = binary.AppendUvarint(b, u(tid))
			}
		}
	case *TreeNode:
		minor = treeNodeCPU
		if r.Pruned {
			minor |= treeNodePruned
		}
		b = appendU32s(b, r.Thread, r.ID, r.Parent, r.Location, r.Frame, r.Recursion)
		b = binary.AppendUvarint(b, r.Calls)
		b = binary.AppendUvarint(b, r.Closed)
		m := &r.Base
		b = appendF64(b, m.WallNS)
		b = binary.AppendUvarint(b, m.WallNSRaw)
		b = appendF64(b, m.DeltaNS)
		b = appendF64(b, m.CPUNS)
		for _, v := range [...]uint64{m.Dispatches, m.Voluntary, m.Involuntary, m.Interrupts, m.InterruptNS, m.Samples, m.Period} {
			b = binary.AppendUvarint(b, v)
		}
		b = appendF64(b, r.MinSelfNS)
		b = appendF64(b, r.MaxSelfNS)
		b = appendF64(b, r.MinSelfCPUNS)
		b = appendF64(b, r.MaxSelfCPUNS)
	case *TreeMark:
		minor = uint8(r.Kind)
		var flags uint64
		if r.Switches {
			flags |= treeMarkSwitches
		}
		if r.Interrupts {
			flags |= treeMarkInterrupts
		}
		b = binary.AppendUvarint(b, r.Dropped)
		b = binary.AppendUvarint(b, flags)
		b = binary.AppendUvarint(b, r.Nodes)
		b = binary.AppendUvarint(b, r.Pruned)
		b = appendF64(b, r.PrunedNS)
	}
	return b, minor
}

// decodeTree decodes the body of a tree record of major code m, at time t.
func decodeTree(m Major, minor uint8, t uint64, p *body) Record {
	switch m {
	case MajorTreeThread:
		r := &TreeThread{Time: t, Thread: p.u32(), PID: p.u32(), TID: p.u32(), Start: p.uvarint(), Name: p.u32()}
		for _, v := range [...]*uint64{&r.Begin, &r.End, &r.First, &r.Last, &r.Events, &r.Popped, &r.Unmatched, &r.Unclosed, &r.Detached} {
			*v = p.uvarint()
		}
		r.ByGoroutine, r.Goroutine = minor&treeThreadByGoroutine != 0, minor&treeThreadGoroutine != 0
		if r.Goroutine {
			r.GoID = p.uvarint()
			r.Ran = list(p, 1, p.u32)
		}
		return r
	case MajorTreeNode:
		r := &TreeNode{Time: t, Pruned: minor&treeNodePruned != 0}
		r.Thread, r.ID, r.Parent, r.Location, r.Frame, r.Recursion = p.u32(), p.u32(), p.u32(), p.u32(), p.u32(), p.u32()
		r.Calls, r.Closed = p.uvarint(), p.uvarint()
		m := &r.Base
		m.WallNS, m.WallNSRaw, m.DeltaNS, m.CPUNS = p.f64(), p.uvarint(), p.f64(), p.f64()
		for _, v := range [...]*uint64{&m.Dispatches, &m.Voluntary, &m.Involuntary, &m.Interrupts, &m.InterruptNS, &m.Samples, &m.Period} {
			*v = p.uvarint()
		}
		r.MinSelfNS, r.MaxSelfNS = p.f64(), p.f64()
		if minor&treeNodeCPU != 0 {
			r.MinSelfCPUNS, r.MaxSelfCPUNS = p.f64(), p.f64()
		}
		return r
	case MajorTreeMark:
		r := &TreeMark{Time: t, Kind: TreeMarkKind(minor), Dropped: p.uvarint()}
		flags := p.uvarint()
		r.Switches, r.Interrupts = flags&treeMarkSwitches != 0, flags&treeMarkInterrupts != 0
		r.Nodes, r.Pruned, r.PrunedNS = p.uvarint(), p.uvarint(), p.f64()
		return r
	}
	return nil
}
