package calltree

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// ErrAggregated is returned for an analysis that an aggregated recording
// (trueprof record --aggregate) cannot give: it holds each thread's call
// tree (and a Go target's trees by goroutine), calibrated, not the events
// a callflow, a timeline, raw times, a --root other than the recording's,
// labels or interrupts excluded would be computed from. It is wrapped
// with what was asked.
var ErrAggregated = errors.New("the recording was aggregated (record --aggregate): it holds call trees, not every event")

// TreeWriter is where Live writes its snapshots: a *trace.Writer.
type TreeWriter interface {
	Write(trace.Record) error
	Intern(string) (uint32, error)
}

// Live is the analysis run while recording (record --aggregate): Build's
// replay, fed one record at a time as the recorder writes them, whose
// trees it writes as snapshots of the nodes changed since the previous
// one (the non-zero list) instead of the events. Its memory is the trees
// and the open shadow stacks, however many events pass.
//
//	tables := model.NewTables(hdr, func(r *model.Record) { live.Record(r) })
//	live, err := calltree.NewLive(tables.Profile(), calltree.Options{})
//	... tables.Add(rec) for every record written, live.ThreadsChanged() when it says so
//	live.Snapshot(now, w)          // every interval
//	live.Finish(end, detached, w)  // the last snapshot, every call closed
//
// Reading the trace back (model.Load, then Build) gives the Result a
// recording of every event would, calls exact, times within the rounding
// of the deltas.
type Live struct {
	a *replay
	// g, when not nil, is the replay by goroutine (Options.ByGoroutine)
	// run beside a, by thread (FollowGoroutines): it shares a's function
	// table.
	g *replay
	p *model.Profile
	// ids interns the functions of the locations the table learns as the
	// recording goes on; where names each function by a location and
	// frame that expand to it, as the trace's TreeNode records do.
	ids   map[Func]FuncID
	where []treeFunc
	// batch holds the records of the latest time, handed to the replay in
	// recordOrder when a later time comes, as replayRecords does.
	batch   []model.Record
	last    uint64 // the latest record's time
	started bool   // a record came

	trees map[*thread]*liveTree
	slots uint32
	// maxBytes bounds the trees (Bound); pruned is the "(pruned)"
	// function once a node was folded (-1 before), prunedNodes and
	// prunedNS count the nodes folded and the cum wall time they held.
	maxBytes    int64
	pruned      FuncID
	prunedNodes uint64
	prunedNS    float64
	switches    bool // a context switch was seen
	irqs        bool // an interrupt was seen
}

// treeFunc names a function as a trace's TreeNode does.
type treeFunc struct{ loc, frame uint32 }

// liveTree is what the snapshots wrote of a thread's tree. Node ids in
// the trace are the replay's indexes until a prune renumbers these:
// id maps them, and next is the id of the next node created.
type liveTree struct {
	slot uint32
	// byG says the tree is one of the replay by goroutine's.
	byG    bool
	info   trace.TreeThread // the last written
	prev   []nodeTotals     // by node, the totals last written
	parent []int32          // by node
	id     []uint32         // by node
	next   uint32
}

// nodeTotals are the fields of a node its records give deltas of.
type nodeTotals struct {
	calls, closed  uint64
	base           Metrics
	min, max       float64
	minCPU, maxCPU float64
}

func totalsOf(n *node) nodeTotals {
	return nodeTotals{calls: n.calls, closed: n.closed, base: n.base, min: n.min, max: n.max, minCPU: n.minCPU, maxCPU: n.maxCPU}
}

// NewLive returns a Live analysis of the recording whose tables p holds
// and fills as it goes (model.Tables). switches says the recording has
// context switches (CPU time is measured). o selects as for Build;
// ByGoroutine (see FollowGoroutines), Labels and Flow are refused
// (ErrAggregated).
func NewLive(p *model.Profile, o Options, switches bool) (*Live, error) {
	if o.ByGoroutine || len(o.Filter.LabelMatcher()) > 0 || o.Flow {
		return nil, fmt.Errorf("%w: label filters and callflows need the events (trees by goroutine: FollowGoroutines)", ErrAggregated)
	}
	var sum summary
	if switches {
		sum.counts[model.RecordSwitch] = 1
	}
	a, err := newReplay(p, sum, o, false)
	if err != nil {
		return nil, err
	}
	// Aggregated recordings get no preemption cost (docs/calibration.md):
	// gathering its intervals at every event would be work in the
	// recorder's hot path that nothing reads.
	a.switchCost = false
	l := &Live{a: a, p: p, ids: map[Func]FuncID{}, trees: map[*thread]*liveTree{}, pruned: -1}
	for id, f := range a.t.funcs {
		l.ids[f] = FuncID(id)
	}
	l.where = make([]treeFunc, len(a.t.funcs))
	for id := len(a.t.locFuncs) - 1; id > 0; id-- { // the lowest location naming a function
		fs := a.t.locFuncs[id]
		for k, f := range fs {
			l.where[f] = treeFunc{loc: uint32(id), frame: uint32(k)}
		}
	}
	l.grow()
	return l, nil
}

// FollowGoroutines makes l build, beside the trees per thread, the trees
// of a report by goroutine (Options.ByGoroutine) of a Go target whose
// goroutine switches (model.GoID) the records will hold: the same
// replay, run a second time on each record with goroutines as what gets
// a tree, so that a goroutine's calls stay one tree whichever threads
// ran it. It must come before the first record: a tree by goroutine
// starts with its thread's first record.
func (l *Live) FollowGoroutines() error {
	if l.g != nil {
		return nil
	}
	if l.started {
		return errors.New("calltree: goroutines followed after the first record")
	}
	sum := l.a.sum
	sum.counts[model.RecordGoID] = 1
	o := l.a.o
	o.ByGoroutine = true
	g, err := newReplay(l.p, sum, o, false)
	if err != nil {
		return err
	}
	g.switchCost = false // as in NewLive
	g.t, g.rootLocs = l.a.t, l.a.rootLocs
	l.g = g
	return nil
}

// replays returns l's replays: by thread, and by goroutine when it
// follows them.
func (l *Live) replays() []*replay {
	if l.g == nil {
		return []*replay{l.a}
	}
	return []*replay{l.a, l.g}
}

// grow expands the locations the profile gained since the last call.
func (l *Live) grow() {
	t, p := l.a.t, l.p
	for id := len(t.locFuncs); id < len(p.Locations); id++ {
		frames, module := Frames(p, uint32(id))
		fs := make([]FuncID, len(frames))
		for k := range frames {
			f := Func{Name: frames[k].Function, Module: module}
			fid, ok := l.ids[f]
			if !ok {
				fid = FuncID(len(t.funcs))
				l.ids[f] = fid
				t.funcs = append(t.funcs, f)
				l.where = append(l.where, treeFunc{loc: uint32(id), frame: uint32(len(frames) - 1 - k)})
				// LocFuncs has the outermost frame first: frames[k] is
				// its entry len(frames)-1-k.
			}
			fs[len(frames)-1-k] = fid
		}
		t.locFuncs = append(t.locFuncs, fs)
		if l.a.rootLocs != nil {
			l.a.rootLocs = append(l.a.rootLocs, p.Locations[id].Symbol() == l.a.o.Root)
		}
	}
	if l.g != nil {
		l.g.rootLocs = l.a.rootLocs
	}
}

// ThreadsChanged tells l that the profile's threads changed
// (model.Tables.Add said so): the incarnations it looked up are looked
// up again.
func (l *Live) ThreadsChanged() {
	for _, a := range l.replays() {
		clear(a.recent)
		a.last = nil
	}
}

// Record hands l the next record, in time order (records of equal times
// in any order). It does not keep r.
func (l *Live) Record(r *model.Record) {
	t := r.Time()
	if len(l.batch) > 0 && t != l.batch[0].Time() {
		l.flush()
	}
	if !l.started {
		// Without the header's start, the recording starts at its
		// first record, as for Build.
		l.started = true
		if l.p.Header.StartNS == 0 {
			for _, a := range l.replays() {
				a.start = t
			}
		}
	}
	l.last = max(l.last, t)
	switch r.Kind {
	case model.RecordSwitch:
		l.switches = true
	case model.RecordIRQ:
		l.irqs = true
	}
	l.batch = append(l.batch, *r)
}

// flush replays the held records, in recordOrder.
func (l *Live) flush() {
	if len(l.p.Locations) != len(l.a.t.locFuncs) {
		l.grow()
	}
	l.replay(l.a)
	if l.g != nil {
		l.replay(l.g)
	}
	l.batch = l.batch[:0]
}

// replay hands the held records to a, in recordOrder.
func (l *Live) replay(a *replay) {
	if len(l.batch) == 1 {
		a.onRecord(&l.batch[0])
		return
	}
	for _, k := range recordOrder {
		for i := range l.batch {
			if l.batch[i].Kind == k {
				a.onRecord(&l.batch[i])
			}
		}
	}
}

// Snapshot writes to w, at time now, the trees' changes since the
// previous snapshot: a TreeThread for each thread whose description
// changed, a TreeNode for each node created or changed (the non-zero
// list), and a TreeMark. Calls still open and intervals not yet closed
// are in a later snapshot.
func (l *Live) Snapshot(now uint64, w TreeWriter) error {
	nodes := uint64(0)
	for _, a := range l.replays() {
		for _, th := range a.order {
			if err := l.snapshotThread(now, th, a == l.g, w); err != nil {
				return err
			}
			nodes += uint64(len(th.nodes))
		}
	}
	return w.Write(&trace.TreeMark{Time: now, Kind: trace.TreeSnapshot, Dropped: l.a.dropped,
		Switches: l.switches, Interrupts: l.irqs, Nodes: nodes, Pruned: l.prunedNodes, PrunedNS: l.prunedNS})
}

// snapshotThread writes the changes of th's tree, one of the replay
// by goroutine's when byG.
func (l *Live) snapshotThread(now uint64, th *thread, byG bool, w TreeWriter) error {
	lt := l.trees[th]
	if lt == nil {
		l.slots++
		lt = &liveTree{slot: l.slots, byG: byG, parent: []int32{-1}, id: []uint32{0}, next: 1}
		l.trees[th] = lt
	}
	name := th.name
	if mt := th.os.mt; mt != nil && mt.Name != "" && !th.key.goroutine {
		name = mt.Name // the thread's latest name, as a loaded trace has it
	}
	nameID, err := w.Intern(name)
	if err != nil {
		return err
	}
	end := th.end
	if end == 0 {
		end = max(th.last, th.latest)
	}
	info := trace.TreeThread{Time: now, Thread: lt.slot, PID: th.key.pid, TID: th.key.tid, Start: th.key.start,
		Name: nameID, Begin: th.begin, End: end, Events: th.events,
		Popped: th.repairs.Popped, Unmatched: th.repairs.Unmatched, Unclosed: th.repairs.Unclosed, Detached: th.repairs.Detached,
		ByGoroutine: byG, Goroutine: th.key.goroutine, GoID: th.key.goid, Ran: th.ran}
	if th.events > 0 {
		info.First, info.Last = th.first, th.lastEvent
	}
	if !sameTreeThread(&info, &lt.info) || len(lt.prev) == 0 {
		if err := w.Write(&info); err != nil {
			return err
		}
		lt.info = info
	}
	// The parents of the nodes created since: a new child heads its
	// parent's list, so each list is read up to its first old child.
	old := len(lt.parent)
	for len(lt.parent) < len(th.nodes) {
		lt.parent = append(lt.parent, -1)
		lt.id = append(lt.id, lt.next)
		lt.next++
	}
	for i := range th.nodes {
		for c := th.nodes[i].firstChild; c >= int32(old); c = th.nodes[c].next {
			lt.parent[c] = int32(i)
		}
	}
	rec := trace.TreeNode{Time: now, Thread: lt.slot}
	for i := range th.nodes {
		n := &th.nodes[i]
		cur := totalsOf(n)
		var prev nodeTotals
		if i < len(lt.prev) {
			if prev = lt.prev[i]; prev == cur {
				continue
			}
		} else {
			lt.prev = append(lt.prev, nodeTotals{})
		}
		rec.ID, rec.Parent, rec.Recursion = lt.id[i], 0, uint32(n.rl)
		rec.Location, rec.Frame = 0, 0
		if i > 0 {
			rec.Parent = lt.id[lt.parent[i]]
			if f := n.fn; f >= 0 && int(f) < len(l.where) {
				rec.Location, rec.Frame = l.where[f].loc, l.where[f].frame
			}
		}
		rec.Calls, rec.Closed = cur.calls-prev.calls, cur.closed-prev.closed
		rec.Base = treeDelta(&cur.base, &prev.base)
		rec.MinSelfNS, rec.MaxSelfNS = cur.min, cur.max
		rec.MinSelfCPUNS, rec.MaxSelfCPUNS = cur.minCPU, cur.maxCPU
		if err := w.Write(&rec); err != nil {
			return err
		}
		lt.prev[i] = cur
	}
	return nil
}

// sameTreeThread reports whether two descriptions of a tree are the
// same but for their time. The threads that ran a goroutine only grow,
// and the description written keeps the slice it was given: their
// number tells.
func sameTreeThread(x, y *trace.TreeThread) bool {
	return x.Thread == y.Thread && x.PID == y.PID && x.TID == y.TID && x.Start == y.Start && x.Name == y.Name &&
		x.Begin == y.Begin && x.End == y.End && x.First == y.First && x.Last == y.Last && x.Events == y.Events &&
		x.Popped == y.Popped && x.Unmatched == y.Unmatched && x.Unclosed == y.Unclosed && x.Detached == y.Detached &&
		x.ByGoroutine == y.ByGoroutine && x.Goroutine == y.Goroutine && x.GoID == y.GoID && len(x.Ran) == len(y.Ran)
}

// treeDelta returns m − prev as a trace's TreeNode holds it.
func treeDelta(m, prev *Metrics) trace.TreeMetrics {
	return trace.TreeMetrics{
		WallNS:      m.WallNS - prev.WallNS,
		WallNSRaw:   m.WallNSRaw - prev.WallNSRaw,
		DeltaNS:     m.DeltaNS - prev.DeltaNS,
		CPUNS:       m.CPUNS - prev.CPUNS,
		Dispatches:  m.Dispatches - prev.Dispatches,
		Voluntary:   m.Voluntary - prev.Voluntary,
		Involuntary: m.Involuntary - prev.Involuntary,
		Interrupts:  m.Interrupts - prev.Interrupts,
		InterruptNS: m.InterruptNS - prev.InterruptNS,
		Samples:     m.Samples - prev.Samples,
		Period:      m.Period - prev.Period,
	}
}

// Reset starts the aggregates over (trueprof ctl reset): every node's
// and thread's totals become zero, the trees keep their shape and the
// calls open stay open, and a TreeReset mark at time now tells readers
// to do the same. The interval open on each thread counts after it.
func (l *Live) Reset(now uint64, w TreeWriter) error {
	for _, th := range l.threads() {
		for i := range th.nodes {
			n := &th.nodes[i]
			n.calls, n.closed, n.base, n.min, n.max, n.minCPU, n.maxCPU = 0, 0, Metrics{}, 0, 0, 0, 0
		}
		for i := range th.stack {
			th.stack[i].self, th.stack[i].selfCPU = 0, 0
		}
		th.events, th.repairs = 0, Repairs{}
		if lt := l.trees[th]; lt != nil {
			clear(lt.prev)
			lt.info.Events, lt.info.Popped, lt.info.Unmatched, lt.info.Unclosed, lt.info.Detached = 0, 0, 0, 0, 0
		}
	}
	for _, a := range l.replays() {
		a.dropped = 0
	}
	l.prunedNodes, l.prunedNS = 0, 0
	return w.Write(&trace.TreeMark{Time: now, Kind: trace.TreeReset, Switches: l.switches, Interrupts: l.irqs, Nodes: uint64(l.Nodes())})
}

// Finish ends the analysis as Build does at the end of a trace: the
// recording ended at end (the End record's time) and the probes came
// off at detached (0 if unknown); every thread's open interval and calls
// close, and the last snapshot is written at end.
func (l *Live) Finish(end, detached uint64, w TreeWriter) error {
	if len(l.batch) > 0 {
		l.flush()
	}
	for _, a := range l.replays() {
		a.end = max(end, l.last)
		for _, t := range l.p.Threads {
			a.end = max(a.end, t.Start, t.End)
		}
		a.detached = detached
		clear(a.recent)
		a.last = nil
		for _, os := range a.os {
			if os != nil {
				os.end = a.threadEnd(os.mt)
			}
		}
		a.sweep()
	}
	if err := l.Prune(end, w); err != nil {
		return err
	}
	return l.Snapshot(end, w)
}

// Nodes returns the number of nodes of every tree.
func (l *Live) Nodes() int {
	n := 0
	for _, a := range l.replays() {
		for _, th := range a.order {
			n += len(th.nodes)
		}
	}
	return n
}

// threads returns the trees of every replay of l.
func (l *Live) threads() []*thread {
	if l.g == nil {
		return l.a.order
	}
	return append(slices.Clip(l.a.order), l.g.order...)
}

// prunedFunc is the function of a "(pruned)" node.
var prunedFunc = Func{Name: "(pruned)"}

// fromTree returns the replay of an aggregated recording p (its trees
// already built: p.Tree), ready for result, or ErrAggregated when o asks
// for what only the events give.
func fromTree(p *model.Profile, o Options) (*replay, error) {
	switch {
	case o.Flow:
		return nil, fmt.Errorf("%w: a callflow lists every event", ErrAggregated)
	case o.Raw:
		return nil, fmt.Errorf("%w: its times were calibrated while recording (raw times are in the raw columns)", ErrAggregated)
	case o.Root != "" && o.Root != p.Header.Root:
		return nil, fmt.Errorf("%w: --root %s needs the events", ErrAggregated, o.Root)
	case o.ByGoroutine && (o.Filter.Filter().HasTID || o.Filter.Filter().Thread != ""):
		return nil, fmt.Errorf("%w: its trees by goroutine hold what every thread ran of each goroutine: a thread filter needs the events", ErrAggregated)
	case len(o.Filter.LabelMatcher()) > 0:
		return nil, fmt.Errorf("%w: a label filter needs the events", ErrAggregated)
	case o.ExcludeInterrupts:
		return nil, fmt.Errorf("%w: interrupts were not excluded while recording", ErrAggregated)
	}
	tr := p.Tree
	if tr == nil {
		tr = &model.Tree{} // no snapshot yet: every thread empty
	}
	var sum summary
	byG := false // the recorder followed goroutines
	for i := range tr.Threads {
		byG = byG || tr.Threads[i].ByGoroutine
		if tr.Threads[i].ByGoroutine == o.ByGoroutine {
			sum.counts[model.RecordEvent] += tr.Threads[i].Events
		}
	}
	if o.ByGoroutine {
		if !byG && len(p.GoIDs) > 0 {
			return nil, fmt.Errorf("%w: its trees are per thread (recorded before trees by goroutine were kept)", ErrAggregated)
		}
		sum.counts[model.RecordGoID] = uint64(len(p.GoIDs))
		if byG {
			sum.counts[model.RecordGoID] = max(sum.counts[model.RecordGoID], 1)
		}
	}
	if tr.Switches {
		sum.counts[model.RecordSwitch] = 1
	}
	if tr.Interrupts {
		sum.counts[model.RecordIRQ] = 1
	}
	a, err := newReplay(p, sum, o, false)
	if err != nil {
		return nil, err
	}
	a.dropped = tr.Dropped
	a.rootEntered = sum.counts[model.RecordEvent] > 0 // inside Root only
	pruned := FuncID(-1)
	for i := range tr.Threads {
		st := &tr.Threads[i]
		if st.ByGoroutine != o.ByGoroutine {
			continue
		}
		if st.Goroutine && !o.Filter.Thread(st.PID, 0, nil) || // a process filter: threads are refused above
			!st.Goroutine && !o.Filter.Thread(st.PID, st.TID, p.ThreadAt(st.PID, st.TID, st.Start)) {
			continue
		}
		th := &thread{key: threadKey{pid: st.PID, tid: st.TID, start: st.Start}, name: st.Name,
			root: fmt.Sprintf("%s_%d", st.Name, st.TID), begin: st.Begin, end: st.End,
			first: st.First, lastEvent: st.Last, events: st.Events,
			repairs: Repairs{Popped: st.Popped, Unmatched: st.Unmatched, Unclosed: st.Unclosed, Detached: st.Detached}}
		if st.Goroutine {
			th.key = threadKey{pid: st.PID, goid: st.GoID, goroutine: true}
			th.root, th.ran = st.Name, st.Ran
		}
		th.nodes = make([]node, len(st.Nodes))
		linked := make([]bool, len(st.Nodes))
		linked[0] = true
		for k := range st.Nodes {
			sn := &st.Nodes[k]
			n := &th.nodes[k]
			*n = node{fn: -1, rl: int(sn.Recursion), firstChild: -1, next: -1, calls: sn.Calls, closed: sn.Closed,
				base: Metrics(sn.Base), min: sn.MinSelfNS, max: sn.MaxSelfNS, minCPU: sn.MinSelfCPUNS, maxCPU: sn.MaxSelfCPUNS}
			if k == 0 || sn.Gone || !linked[sn.Parent] {
				continue
			}
			switch {
			case sn.Frame == model.PrunedFrame:
				if pruned < 0 {
					pruned = FuncID(len(a.t.funcs))
					a.t.funcs = append(a.t.funcs, prunedFunc)
				}
				n.fn = pruned
			case int(sn.Frame) < len(a.t.LocFuncs(sn.Location)):
				n.fn = a.t.LocFuncs(sn.Location)[sn.Frame]
			default:
				n.fn = UnknownID
			}
			pn := &th.nodes[sn.Parent]
			n.level, n.next = pn.level+1, pn.firstChild
			pn.firstChild = int32(k)
			pn.children++
			linked[k] = true
		}
		a.order = append(a.order, th)
	}
	return a, nil
}

// replayTree is replayRecords for an aggregated recording: the trees
// are p.Tree's, and the records next yields (samples and goroutine
// switches) only go to g, when not nil.
func replayTree(p *model.Profile, next func(*model.Record) error, o Options, g *grouper) (*replay, error) {
	a, err := fromTree(p, o)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return a, nil
	}
	var r model.Record
	for {
		err := next(&r)
		if errors.Is(err, io.EOF) {
			return a, nil
		}
		if err != nil {
			return nil, err
		}
		switch r.Kind {
		case model.RecordGoID:
			g.goSwitch(&r.GoID)
		case model.RecordSample:
			g.sample(&r.Sample)
		}
	}
}
