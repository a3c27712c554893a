package calltree

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// Build analyses the recording p (which must not be nil) as o selects:
// the traced calls of an instrumented recording (model.Event) with the
// context switches, interrupts, the time lost to the profiler
// (model.Adjust) and the samples taken alongside; and, of any recording,
// each thread's time, dispatches, interrupts and samples, which the
// threads view shows for sampling recordings too.
//
// It replays each thread's events through a shadow stack into a
// call-stack tree: per node the exact calls and callees, base
// and cum wall time (raw and calibrated), CPU time, dispatches (voluntary
// and involuntary), interrupts and samples, and the minimum and maximum
// self time of one call. It also aggregates per function (the
// function accumulator):
// calls, self, total, callers and callees, each with its exact share of
// the function's time. Callflow lists each thread's events in order with
// the metrics of the interval before each one (log-gen).
//
// Read-and-reset baselines: every thread incarnation (a
// reused tid is another thread) is measured from its creation, or the
// start of recording, to its exit, or the end of recording. Each event
// reads and resets the deltas pending since the previous one and charges
// them to the call then current; at the end every thread's pending
// deltas are applied (the "non-zero list" sweep), to the calls still
// open, so that a thread's tree adds up to its whole life (the river of
// time), even when the
// trace was cut short. A thread without events is measured all the same:
// a tree of its root and samples.
//
// With Options.ByGoroutine, a Go target's goroutines are what gets a tree:
// a thread's records belong to the goroutine it last switched to
// (model.GoID), so that a call that returns on another thread still
// matches; a goroutine's time parked counts as off CPU.
//
// Times are calibrated with the trace header's probe costs: every
// interval between two consecutive events of a thread loses the cost of
// its transition kind (entry→entry, entry→exit, exit→entry, exit→exit);
// a node's total and a call's self time never go below zero, single
// intervals may (closeInterval). docs/calibration.md shows that this is probe
// calibration's t_exact = t_rough − t_I − m·t_O, per transition. Options.ExcludeInterrupts
// also removes the interrupts' time (IN).
//
// The replay compares and indexes functions and nodes by number (a
// Table's FuncIDs, node indexes), never by name: see Table.
//
//	r, err := calltree.Build(prof, calltree.Options{Root: "handle_request"})
//	if err != nil { ... }
//	for _, pr := range r.Processes {
//		for _, th := range pr.Threads {
//			walk(&th.Root) // th.Root.Children, .Calls, .Base.WallNS, ...
//		}
//	}
//
// Everything in a Result marshals to JSON with the metric keys wall_ns,
// wall_ns_raw, delta_ns, cpu_ns, dispatches, dispatches_voluntary,
// dispatches_involuntary, interrupts, interrupt_ns and samples, and exact
// calls.
func Build(p *model.Profile, o Options) (*Result, error) {
	a, err := analyse(p, o, o.Flow, shardsFor(p, o), false)
	if err != nil {
		return nil, err
	}
	return a.result(), nil
}

// BuildSamples is Build that also groups the samples which pass
// o.Filter (o.Root aside), by goroutine when o.ByGoroutine, in the same
// pass over the records: the Samples GroupMatched gives, which the
// sampling views render beside the trees. BuildStreamSamples does the
// same over a trace it reads in two passes.
func BuildSamples(p *model.Profile, o Options) (*Result, *Samples, error) {
	a, err := analyse(p, o, o.Flow, shardsFor(p, o), true)
	if err != nil {
		return nil, nil, err
	}
	return a.result(), a.g.finish(), nil
}

// threadKey identifies what gets a tree: a thread incarnation (pid, tid,
// start) or, with Options.ByGoroutine, a goroutine (pid, goid).
type threadKey struct {
	pid, tid  uint32
	start     uint64
	goid      uint64
	goroutine bool
}

// node is a tree node while the tree is built; nodes live in their
// thread's slice and refer to each other by index. A node's children are
// a list through firstChild and next (-1 ends it), in no order: tree
// sorts them.
type node struct {
	fn               FuncID
	level            int
	rl               int
	firstChild, next int32
	children         int32 // how many
	// lastKid is the child that child found or made last (0: none yet): a
	// call repeats the same callee far more often than not, and this
	// spares the lookup in kids.
	lastKid  int32
	calls    uint64
	base     Metrics
	min, max float64 // self wall per call, valid when closed > 0
	// minCPU and maxCPU are the self CPU time per call, likewise.
	minCPU, maxCPU float64
	closed         uint64
}

// frame is an open call on a shadow stack.
type frame struct {
	node    int32
	loc     uint32  // the entry's location, which its exit must match
	self    float64 // calibrated wall time charged to this call so far
	selfCPU float64 // and CPU time
}

// pending accumulates what happens inside the open interval of a thread,
// charged when the interval closes at the next event or at the end.
// Its segments are the thread's offSegs. The zero pending is an interval
// in which nothing happened but time passing.
type pending struct {
	off               uint64 // closed off-CPU time
	adjWall, adjCPU   uint64
	adjEnd            uint64 // end of the last pause
	dispatches, invol uint64
	irqs, irqNS       uint64
	samples, period   uint64
}

// zero reports whether p is the zero pending: compared field by field,
// since == on the struct calls memequal, which cost more than the rest
// of an event's interval.
func (p *pending) zero() bool {
	return p.off|p.adjWall|p.adjCPU|p.adjEnd|p.dispatches|p.invol|p.irqs|p.irqNS|p.samples|p.period == 0
}

// thread is the state during the replay of what gets a tree: a thread
// incarnation or, with Options.ByGoroutine, a goroutine.
type thread struct {
	key  threadKey
	name string
	// root names the thread's root node, which has no function id.
	root  string
	nodes []node // nodes[0] is the thread's root
	stack []frame
	// onLoc and onFunc count the open calls per entry location id and
	// per function id (grown on demand), so that an exit finds its call,
	// and a new node its recursion level, without walking a deep stack.
	onLoc  []int32
	onFunc []int32
	// kids finds the child of a node for a function: the key is the
	// parent's index << 32 | the function's id.
	kids map[uint64]int32

	// Read-and-reset baselines: the metrics are measured from the
	// thread's baseline (begin), and each event closes the open interval
	// since the previous one (last; lastEntry its kind when events > 0),
	// charging the pending deltas to the call then current. The end of
	// the recording closes the last interval. Outside the Root subgraph
	// no interval is open.
	open      bool
	begin     uint64
	last      uint64
	lastEntry bool
	// tail is the probe cost of the last event's site beyond the fitted
	// overheads (replay.siteTail), in the interval after it; the next
	// event adds its own part in the interval before it.
	tail      float64
	first     uint64 // the first event's time
	lastEvent uint64
	events    uint64
	// removal is the index of the next probe removal (replay.removals)
	// this thread has not applied.
	removal int
	latest  uint64 // the time of its latest record
	end     uint64 // where the sweep closed it

	off      bool // not running since offSince (switched out, or parked)
	offSince uint64
	// onCPU is the CPU of its last switch-in, at onSince (onKnown): where
	// a lost switch-out is bounded (boundLostSwitchOut).
	onCPU   uint32
	onSince uint64
	onKnown bool
	// after is what followed on onCPU since (switchBounds).
	after afterIn
	pend  pending
	// offSegs are the closed off-CPU segments of the open interval, as
	// start, end pairs.
	offSegs []uint64

	// os is the thread it belongs to or, for a goroutine, the thread
	// that ran it last; ran lists the tids of those that ran it. A
	// parked goroutine's thread switched to another one at parkedSince.
	os          *osThread
	ran         []uint32
	parked      bool
	parkedSince uint64

	repairs Repairs
	flow    flowLog

	// groups are its intervals for the switch cost (switchcost.go), by
	// node index × 4 + transition kind; switchCost is, by node, the cost
	// of its switches, once measured.
	groups     []groupCPU
	switchCost []float64
}

// osThread is the scheduling state of a thread incarnation: whether it
// is switched out, and which goroutine it runs.
type osThread struct {
	key threadKey
	mt  *model.Thread // nil when the trace does not know the thread
	own *thread       // its records while it runs no goroutine
	cur *thread       // the goroutine it runs (ByGoroutine); nil before its first
	off bool          // switched out
	end uint64        // its exit, or the end of the recording
}

// replay is the state of one pass over a profile.
type replay struct {
	p    *model.Profile
	sum  summary // of the records, which p may not hold (a Stream's)
	o    Options
	flow bool
	// lines keeps the callflow's lines when flow is set (shared by the
	// shards); nil otherwise.
	lines *flowStore
	ovh   [trace.Transitions]float64
	cal   *trace.Calibration
	// siteTail is, per probed location, the probe cost beyond the fitted
	// overheads that its entry ([0]) and exit ([1]) events leave in the
	// interval after them, and its entry ([2], the caller's) and exit
	// ([3], the callee's) in the interval before them: a single-stepped
	// entry instruction, a RET probe or an exit probed where a call
	// returns costs other than the emulated entries and return probes
	// the overheads were fitted on (Calibration.Sites).
	siteTail map[uint32][4]float64
	// withCaller holds the locations probed at their callers
	// (trace.Probe.CallSite). Some of their calls (those followed by
	// the caller's epilogue) have no exit of their own and end with
	// their caller's: closing such a call, directly under the exiting
	// frame, is then no repair. The events do not say which calls they
	// are: the planner moves no function that a longjmp or an exception
	// could leave (uprobe.Plan), so a call-site call with its own exit
	// is only left open when its exit was lost, which the loss counts
	// show. Any other open frame closed there is a repair.
	withCaller map[uint32]bool
	cpu        bool // the recording has context switches
	// switchCost says that the calibrated CPU times lose the switches'
	// cost (switchcost.go): calibrating, with context switches; sc is
	// that cost, once measured.
	switchCost bool
	sc         SwitchCost
	// bounds follows the switch-ins that bound lost switch-outs; nil
	// when the recording lost no kernel records.
	bounds *switchBounds
	// start and end bound the recording: the header's start (else its
	// first record), and its End (or last record).
	start, end uint64
	// detached is when the probes came off (the End record's); 0 if the
	// trace does not say. removals are the probes removed while the
	// target ran, by time (removal.go).
	detached uint64
	removals []model.Probe

	// t names the functions the replay knows by id; stacks holds the
	// function ids (Table.Stack) of each sample stack seen, by stack id,
	// up to maxStacks of them (samples share few stacks, and walking
	// each sample's cost a tenth of a sampling report); buf those of
	// the sample at hand past that.
	t      *Table
	stacks map[uint32][]FuncID
	buf    []FuncID

	os         map[threadKey]*osThread // nil for a filtered-out thread
	goroutines map[threadKey]*thread
	// recent is, per pid and tid, the incarnation of the latest record
	// and the times it stays so: records come in time order.
	// The key is pid<<32 | tid.
	recent map[uint64]*incarnation
	// last is the incarnation of recent whose key is lastKey, that of
	// the latest record: records of one thread come in runs.
	last    *incarnation
	lastKey uint64
	order   []*thread // in order of creation

	// rootLocs marks the locations in Options.Root's function, by id.
	rootLocs []bool

	dropped     uint64
	rootEntered bool
	labels      model.GoLabels
	// g, when not nil, groups the samples in the merge's order
	// (BuildSamples).
	g *grouper

	// shard and shards select the threads this replay analyses when
	// several share the work (shards > 1): see runShards.
	shard, shards uint32
}

// summary is what the replay needs to know of a recording's
// time-ordered records before it reads them: how many of each kind, and
// the first and last times.
type summary struct {
	counts      [model.RecordGoID + 1]uint64
	first, last uint64
}

// summarize returns the summary of p's records.
func summarize(p *model.Profile) summary {
	var s summary
	seen := false
	span := func(k model.RecordKind, n int, at func(int) uint64) {
		s.counts[k] = uint64(n)
		if n > 0 {
			if !seen || at(0) < s.first {
				s.first, seen = at(0), true
			}
			s.last = max(s.last, at(n-1))
		}
	}
	span(model.RecordEvent, len(p.Events), func(i int) uint64 { return p.Events[i].Time })
	span(model.RecordSwitch, len(p.Switches), func(i int) uint64 { return p.Switches[i].Time })
	span(model.RecordSample, len(p.Samples), func(i int) uint64 { return p.Samples[i].Time })
	span(model.RecordAdjust, len(p.Adjusts), func(i int) uint64 { return p.Adjusts[i].Time })
	span(model.RecordIRQ, len(p.IRQs), func(i int) uint64 { return p.IRQs[i].Time })
	span(model.RecordGoID, len(p.GoIDs), func(i int) uint64 { return p.GoIDs[i].Time })
	return s
}

// analyse replays p as o selects, its threads split between shards
// replays run in parallel (see shardsFor), and with group groups its
// samples too (a.g).
func analyse(p *model.Profile, o Options, flow bool, shards int, group bool) (*replay, error) {
	if p.Aggregated() {
		o.Flow = o.Flow || flow
		a, err := fromTree(p, o)
		if err == nil && group {
			// Its samples are in the trees; the grouping is of none.
			a.g = newGrouper(p, o.Filter, o.ByGoroutine)
		}
		return a, err
	}
	p = model.FilterLabels(p, o.Filter.LabelMatcher())
	a, err := newReplay(p, summarize(p), o, flow)
	if err != nil {
		return nil, err
	}
	if group {
		a.g = newGrouper(p, o.Filter, o.ByGoroutine)
	}
	if o.Root != "" {
		found := false
		for i := range p.Events {
			if a.isRoot(p.Events[i].Function) {
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: %q", ErrRootNotFound, o.Root)
		}
	}
	a.runShards(shards)
	return a, nil
}

// newReplay prepares the replay of a recording whose tables p holds and
// whose records sum summarizes.
func newReplay(p *model.Profile, sum summary, o Options, flow bool) (*replay, error) {
	if o.ByGoroutine && sum.counts[model.RecordGoID] == 0 {
		return nil, ErrNoGoroutines
	}
	a := &replay{
		p:          p,
		sum:        sum,
		o:          o,
		flow:       flow,
		cpu:        sum.counts[model.RecordSwitch] > 0,
		t:          NewTable(p),
		os:         map[threadKey]*osThread{},
		goroutines: map[threadKey]*thread{},
		recent:     map[uint64]*incarnation{},
		labels:     p.GoLabels(),
		bounds:     newSwitchBounds(p),
	}
	if flow {
		a.lines = &flowStore{limit: flowMemory}
	}
	if o.Root != "" {
		a.rootLocs = make([]bool, len(p.Locations))
		for id := 1; id < len(p.Locations); id++ {
			a.rootLocs[id] = p.Locations[id].Symbol() == o.Root
		}
	}
	a.start, a.end = bounds(p, sum)
	if p.End != nil {
		a.detached = p.End.Detached
	}
	a.removals = removals(p)
	if c := p.Header.Calibration; c != nil && !o.Raw && !a.mismatched() {
		if err := checkCalibration(c); err != nil {
			return nil, err
		}
		a.cal, a.ovh = c, c.Overhead
		a.siteTail = siteTails(c.Sites, p.Probes)
		a.switchCost = a.cpu && c.Refused == ""
	}
	for _, pr := range p.Probes {
		if pr.CallSite {
			if a.withCaller == nil {
				a.withCaller = map[uint32]bool{}
			}
			a.withCaller[pr.Function] = true
		}
	}
	return a, nil
}

// siteTails returns the extra probe cost of each probed location whose
// sites cost other than those the calibration was fitted on: the
// single-step of an entry instruction the kernel cannot emulate, of a
// RET instruction probed instead of a return probe, and the emulated
// uprobe where a call returns (Probe.CallSite) instead of a return
// probe's trampoline. Steps come after the probe's timestamp, so they
// lie in the interval after the event, but for the part of a stepped
// entry's that the calibration measured in the caller's intervals
// (SiteCosts.EntrySteppedCaller), which the interval before the entry
// loses; a RET probe's and a call site's exits cost ExitRetInsnBefore
// and ExitCallSiteBefore in the interval before them, the rest after.
// Nil without site costs.
func siteTails(c *trace.SiteCosts, probes []model.Probe) map[uint32][4]float64 {
	if c == nil {
		return nil
	}
	tails := map[uint32][4]float64{}
	for _, pr := range probes {
		t := tails[pr.Function]
		if pr.Stepped && pr.Mech != trace.ProbeHook {
			extra := max(c.EntryStepped-c.EntryEmulated, 0)
			t[2] = min(max(c.EntrySteppedCaller, 0), extra)
			t[0] = extra - t[2]
		}
		if pr.Mech == trace.ProbeRetInsn || pr.RetInsn {
			extra := max(c.ExitRetInsn-c.ExitReturn, 0)
			t[3] = min(max(c.ExitRetInsnBefore, 0), extra)
			t[1] = extra - t[3]
		}
		if pr.CallSite {
			exit, before := c.ExitCallSite, c.ExitCallSiteBefore
			if exit <= 0 {
				// A calibration from before call sites: the exit is an
				// emulated hit, as an emulated entry.
				exit, before = c.EntryEmulated, 0
			}
			// Cheaper than a trampoline or dearer: either way.
			t[3] = before
			t[1] = exit - c.ExitReturn - before
		}
		if t != ([4]float64{}) {
			tails[pr.Function] = t
		}
	}
	return tails
}

// bounds returns when the recording of p, whose records sum summarizes,
// started and ended: the header's start and the End record, else the
// first and last records (a trace cut short has no End).
func bounds(p *model.Profile, sum summary) (start, end uint64) {
	start, end = sum.first, sum.last
	if p.Header.StartNS > 0 {
		start = p.Header.StartNS
	}
	if p.End != nil {
		end = max(end, p.End.Time)
	}
	for _, t := range p.Threads {
		end = max(end, t.Start, t.End)
	}
	return start, end
}

// stream is one of the time-sorted record slices run merges.
type stream struct {
	n int
	// at returns the time of record i and its thread's pid^tid, which
	// says what shard it goes to (replay.mine).
	at func(i int) (uint64, uint32)
	do func(i int)
}

// streamOf makes the stream of records rs: of record r, key returns the
// time, pid and tid; do handles it.
func streamOf[R any](rs []R, key func(r *R) (t uint64, pid, tid uint32), do func(r *R)) stream {
	return stream{
		n:  len(rs),
		at: func(i int) (uint64, uint32) { t, pid, tid := key(&rs[i]); return t, pid ^ tid },
		do: func(i int) { do(&rs[i]) },
	}
}

// run replays the records: it merges them in time order (merge) and
// hands each to its thread or goroutine (the streams' do).
func (a *replay) run() {
	ss := a.streams()
	if a.g == nil {
		merge(ss, func(k, i int, _ uint32) { ss[k].do(i) })
		return
	}
	merge(ss, func(k, i int, _ uint32) {
		a.group(k, i)
		ss[k].do(i)
	})
}

// group hands record i of stream k (in recordOrder) to the grouper when
// it is a goroutine switch or a sample.
func (a *replay) group(k, i int) {
	switch recordOrder[k] {
	case model.RecordGoID:
		a.g.goSwitch(&a.p.GoIDs[i])
	case model.RecordSample:
		a.g.sample(&a.p.Samples[i])
	}
}

// streams returns the time-sorted record slices of a.p, each handled by
// a's thread or goroutine states, in the order merge gives equal times
// (recordOrder).
func (a *replay) streams() []stream {
	p := a.p
	var goids []model.GoID // by thread, goroutine switches change nothing
	if a.o.ByGoroutine {
		goids = p.GoIDs
	}
	return []stream{
		streamOf(p.Adjusts, func(r *model.Adjust) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID }, a.onAdjust),
		streamOf(p.Switches, func(r *model.Switch) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID }, a.onSwitch),
		streamOf(goids, func(r *model.GoID) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID }, a.onGoID),
		streamOf(p.IRQs, func(r *model.IRQ) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID }, a.onIRQ),
		streamOf(p.Events, func(r *model.Event) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID }, a.onEvent),
		streamOf(p.Samples, func(r *model.Sample) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID }, a.onSample),
	}
}

// recordOrder is the order of the kinds of records at equal times: an
// adjustment comes first, then a switch, a goroutine switch, an
// interrupt, an event and a sample: the profiler's pause, a switch-in and
// an interrupt that ended then precede the event that follows them.
var recordOrder = [...]model.RecordKind{model.RecordAdjust, model.RecordSwitch, model.RecordGoID,
	model.RecordIRQ, model.RecordEvent, model.RecordSample}

// onRecord handles record r (of any kind) with its thread's state.
func (a *replay) onRecord(r *model.Record) {
	switch r.Kind {
	case model.RecordAdjust:
		a.onAdjust(&r.Adjust)
	case model.RecordSwitch:
		a.onSwitch(&r.Switch)
	case model.RecordGoID:
		if a.o.ByGoroutine { // by thread, goroutine switches change nothing
			a.onGoID(&r.GoID)
		}
	case model.RecordIRQ:
		a.onIRQ(&r.IRQ)
	case model.RecordEvent:
		a.onEvent(&r.Event)
	case model.RecordSample:
		a.onSample(&r.Sample)
	}
}

// The handlers of each kind of record: each finds the state of the
// record's thread incarnation (nil when filtered out) and its owner.

func (a *replay) onAdjust(r *model.Adjust) {
	if os := a.osThread(r.PID, r.TID, r.Time, false); os != nil {
		a.adjust(a.owner(os, r.Time), r)
	}
}

func (a *replay) onSwitch(r *model.Switch) {
	if a.bounds != nil && !r.Out {
		a.bounds.in(r) // before the filter: any thread's bounds
	}
	if os := a.osThread(r.PID, r.TID, r.Time, !r.Out); os != nil {
		th := a.owner(os, r.Time)
		os.off = r.Out
		a.switched(th, r)
	}
}

func (a *replay) onGoID(r *model.GoID) {
	if os := a.osThread(r.PID, r.TID, r.Time, false); os != nil {
		a.goSwitch(os, r)
	}
}

func (a *replay) onIRQ(r *model.IRQ) {
	if os := a.osThread(r.PID, r.TID, r.Time, false); os != nil {
		a.irq(a.owner(os, r.Time), r)
	}
}

func (a *replay) onEvent(r *model.Event) {
	if os := a.osThread(r.PID, r.TID, r.Time, false); os != nil {
		th := a.owner(os, r.Time)
		os.off = false // the thread runs the probe
		a.event(th, r)
	}
}

func (a *replay) onSample(r *model.Sample) {
	if os := a.osThread(r.PID, r.TID, r.Time, false); os != nil {
		a.sample(a.owner(os, r.Time), r)
	}
}

// merge visits the records of streams in time order (the first stream
// first at equal times): visit gets the stream's index, the record's and
// its thread's pid^tid.
func merge(streams []stream, visit func(k, i int, key uint32)) {
	// next is each stream's next record, head its time: a stream's time
	// is read once per record, not once per comparison.
	next := make([]int, len(streams))
	head := make([]uint64, len(streams))
	live := make([]bool, len(streams))
	key := make([]uint32, len(streams))
	for k := range streams {
		if live[k] = streams[k].n > 0; live[k] {
			head[k], key[k] = streams[k].at(0)
		}
	}
	for {
		best := -1
		for k := range streams {
			if live[k] && (best < 0 || head[k] < head[best]) {
				best = k
			}
		}
		if best < 0 {
			return
		}
		s := &streams[best]
		visit(best, next[best], key[best])
		if next[best]++; next[best] < s.n {
			head[best], key[best] = s.at(next[best])
		} else {
			live[best] = false
		}
	}
}

// incarnation is the state of a thread incarnation, which records of
// its tid from time from until time until belong to.
type incarnation struct {
	os          *osThread
	from, until uint64
}

// osThread returns the state of the incarnation of pid/tid that a record
// at time t belongs to, creating it (switched out when in: its first
// record is a switch-in), or nil if o filters it out.
func (a *replay) osThread(pid, tid uint32, t uint64, in bool) *osThread {
	k := uint64(pid)<<32 | uint64(tid)
	c := a.last
	if c == nil || a.lastKey != k {
		if c = a.recent[k]; c == nil {
			c = &incarnation{}
			a.recent[k] = c
		}
		a.last, a.lastKey = c, k
	}
	if c.from <= t && t < c.until {
		return c.os
	}
	mt, from, until := a.p.ThreadSpan(pid, tid, t)
	*c = incarnation{os: a.osThreadOf(pid, tid, mt, in), from: from, until: until}
	return c.os
}

// osThreadOf is osThread for incarnation mt (nil when the trace lacks
// the thread).
func (a *replay) osThreadOf(pid, tid uint32, mt *model.Thread, in bool) *osThread {
	k := threadKey{pid: pid, tid: tid}
	if mt != nil {
		k.start = mt.Start
	}
	os, ok := a.os[k]
	if !ok {
		if a.o.Filter.Thread(pid, tid, mt) && a.mine(pid, tid) {
			os = &osThread{key: k, mt: mt, off: in, end: a.threadEnd(mt)}
		}
		a.os[k] = os
	}
	return os
}

// threadEnd is when incarnation mt (nil if unknown) ended: its exit,
// else the creation of the next incarnation of its tid (its exit was
// lost), else the end of the recording.
func (a *replay) threadEnd(mt *model.Thread) uint64 {
	if mt == nil {
		return a.end
	}
	if mt.End > 0 {
		return mt.End
	}
	if _, _, next := a.p.ThreadSpan(mt.PID, mt.TID, mt.Start); next != math.MaxUint64 {
		return next // the next incarnation's creation
	}
	if a.p.Lost.Kernel > 0 {
		return a.lostExitEnd(mt)
	}
	return a.end
}

// owner returns what the records of os at time t belong to: the
// goroutine it runs or, before it ran any, the thread itself, whose
// state is created then with its baseline.
func (a *replay) owner(os *osThread, t uint64) *thread {
	th := os.cur
	if th == nil {
		if th = os.own; th == nil {
			th = a.own(os, t)
		}
	}
	th.latest = max(th.latest, t)
	if th.removal < len(a.removals) && a.removals[th.removal].Time <= t {
		a.removeProbes(th, t)
	}
	return th
}

// own returns the state of thread os itself, creating it at t with its
// baseline.
func (a *replay) own(os *osThread, t uint64) *thread {
	if os.own == nil {
		name := "[unknown]"
		if os.mt != nil && os.mt.Name != "" {
			name = os.mt.Name
		}
		os.own = a.newThread(os.key, name, fmt.Sprintf("%s_%d", name, os.key.tid), a.baseline(os.mt, t))
		os.own.os = os
		os.own.off = os.off
	}
	return os.own
}

// baseline is when the metrics of incarnation mt (nil if unknown),
// whose first record is at t, start to count: its creation, else the
// start of recording.
func (a *replay) baseline(mt *model.Thread, t uint64) uint64 {
	b := a.start
	if mt != nil && mt.Start > 0 {
		b = mt.Start
	}
	return min(b, t)
}

// newThread creates the state of what gets a tree, measured from begin.
func (a *replay) newThread(k threadKey, name, root string, begin uint64) *thread {
	th := &thread{key: k, name: name, root: root, kids: map[uint64]int32{},
		open: a.o.Root == "", begin: begin, last: begin, offSince: begin}
	th.nodes = append(th.nodes, node{fn: -1, firstChild: -1, next: -1})
	a.order = append(a.order, th)
	return th
}

// goSwitch handles thread os switching to goroutine g: the goroutine (or
// the thread's own records) it ran before is parked, and g runs, on CPU
// or not as the thread is.
func (a *replay) goSwitch(os *osThread, g *model.GoID) {
	k := threadKey{pid: os.key.pid, goid: g.GoID, goroutine: true}
	next := a.goroutines[k]
	if next == nil {
		name := fmt.Sprintf("goroutine %d", g.GoID)
		next = a.newThread(k, name, name, g.Time)
		a.goroutines[k] = next
	}
	prev := os.cur
	if prev == nil {
		prev = os.own
	}
	if prev == next {
		return
	}
	if prev != nil {
		prev.stop(g.Time)
		prev.parked, prev.parkedSince = true, g.Time
	}
	os.cur, next.os, next.parked = next, os, false
	if !slices.Contains(next.ran, os.key.tid) {
		next.ran = append(next.ran, os.key.tid)
	}
	if os.off {
		next.stop(g.Time)
	} else {
		next.resume(g.Time)
	}
}

// fn returns the function of node n of th.
func (a *replay) fn(th *thread, n int32) Func {
	if n == 0 {
		return Func{Name: th.root}
	}
	return a.t.Func(th.nodes[n].fn)
}

// isRoot reports whether location id is in the Root function: its
// physical function as recorded, whatever grouping of code renamed the
// frames to (a --root names a function even when the reports show files).
func (a *replay) isRoot(id uint32) bool {
	return int(id) < len(a.rootLocs) && a.rootLocs[id]
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
func (th *thread) child(parent int32, f FuncID, rl int) int32 {
	if c, ok := th.kid(parent, f); ok {
		return c
	}
	pn := &th.nodes[parent]
	k := uint64(parent)<<32 | uint64(f)
	c := int32(len(th.nodes))
	th.nodes = append(th.nodes, node{fn: f, level: pn.level + 1, rl: rl, firstChild: -1, next: pn.firstChild})
	pn = &th.nodes[parent]
	pn.firstChild = c
	pn.children++
	pn.lastKid = c
	th.kids[k] = c
	return c
}

// kid returns the child of node parent for f, if it has one.
func (th *thread) kid(parent int32, f FuncID) (int32, bool) {
	pn := &th.nodes[parent]
	if c := pn.lastKid; c > 0 && th.nodes[c].fn == f {
		return c, true
	}
	c, ok := th.kids[uint64(parent)<<32|uint64(f)]
	if ok {
		pn.lastKid = c
	}
	return c, ok
}

// count returns a pointer to the counter of index i in *cs, growing the
// slice as needed.
func count(cs *[]int32, i int) *int32 {
	if i >= len(*cs) {
		*cs = append(*cs, make([]int32, i+1-len(*cs))...)
	}
	return &(*cs)[i]
}

// onFn returns the number of open calls of function f on th.
func (th *thread) onFn(f FuncID) int {
	if int(f) < len(th.onFunc) {
		return int(th.onFunc[f])
	}
	return 0
}

// inside reports whether th's records count: always without Root, and
// while an activation of Root is on the shadow stack with it.
func (a *replay) inside(th *thread) bool {
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
func (a *replay) switched(th *thread, s *model.Switch) {
	if !s.Out {
		// A switch-in while on a CPU: its switch-out was lost.
		if a.p.Lost.Kernel > 0 {
			a.boundLostSwitchOut(th, s.Time)
			if !th.off && th.onKnown {
				th.repairs.Switches++ // nothing bounds it: it ran all along
			}
		}
		th.resume(s.Time)
		th.onCPU, th.onSince, th.onKnown = s.CPU, s.Time, true
		if a.bounds != nil {
			a.bounds.wait(th)
		}
		return
	}
	if th.off {
		// A switch-in was lost; the first switch-out stands, and the
		// time it ran before this one is not counted.
		if a.p.Lost.Kernel > 0 {
			th.repairs.Switches++
		}
		return
	}
	th.stop(s.Time)
	if th.open {
		th.pend.dispatches++
		if s.Preempt {
			th.pend.invol++
		}
	}
}

// stop marks th as not running from t, if it was.
func (th *thread) stop(t uint64) {
	if !th.off {
		th.off, th.offSince = true, t
	}
}

// resume marks th as running again at t: the off-CPU segment that ends
// then leaves its open interval's CPU time.
func (th *thread) resume(t uint64) {
	if !th.off {
		return
	}
	if th.open {
		if b, e := th.offSegment(t); e > b {
			th.pend.off += e - b
			th.offSegs = append(th.offSegs, b, e)
		}
	}
	th.off = false
}

// irq handles an interrupt handled while th ran: counted in the open
// interval, with the part of its time inside it.
func (a *replay) irq(th *thread, q *model.IRQ) {
	if !th.open {
		return
	}
	th.pend.irqs++
	if b := max(th.last, q.Time-min(q.Duration, q.Time)); q.Time > b {
		th.pend.irqNS += q.Time - b
	}
}

// adjust handles time th lost in the profiler: the pause ended at r.Time
// and lasted r.Duration. The part of it inside the open interval is
// removed from that interval's wall time, and its on-CPU part from the
// CPU time.
func (a *replay) adjust(th *thread, r *model.Adjust) {
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
	for i := 0; i < len(th.offSegs); i += 2 {
		overlap(th.offSegs[i], th.offSegs[i+1])
	}
	if b, e := th.offSegment(we); e > b {
		overlap(b, e)
	}
	th.pend.adjWall += we - ws
	th.pend.adjCPU += we - ws - off
}

// closeInterval ends th's open interval at time t and charges it to the
// current node. kind is the transition between the events at its ends,
// whose probe cost calibration removes, or -1 when one end is not an
// event (the thread's baseline, its end). It returns the interval's
// metrics, samples included, in d when d is not nil (a callflow wants
// them).
//
// The calibrated interval may be negative: the probe cost removed is a
// mean, and an interval whose true length is below the cost's jitter
// comes out above or below it. Clamping each interval at zero kept the
// upper half of that noise and added it up (+0.12 µs a call to a 0.14 µs
// function behind a single-stepped entry, with a perfect calibration:
// docs/calibration.md). The clamp is where the noise has averaged out: a
// call's self time for its minimum and maximum (pop), a node's total
// (tree).
func (a *replay) closeInterval(th *thread, t uint64, kind int, d *Metrics) {
	t = max(t, th.last) // records out of order (the model sorts them) count as simultaneous
	raw := t - th.last
	var ovh float64
	if !a.o.Raw && kind >= 0 {
		ovh = a.ovh[kind] + th.tail
	}
	var wall, cpu float64
	var irq uint64
	quiet := th.pend.zero() && !th.off
	if quiet {
		// Nothing happened in the interval but time passing on a CPU,
		// as between most events: the sums below without their zero
		// terms (the same float operations, so the same bits), at a
		// third of their cost.
		wall = float64(raw) - ovh
		cpu = wall
	} else {
		off := th.pend.off
		if b, e := th.offSegment(t); e > b {
			off += e - b
		}
		off = min(off, raw)
		cpuRaw := raw - off
		irq = min(th.pend.irqNS, raw)
		var adjWall, adjCPU uint64
		if !a.o.Raw {
			adjWall, adjCPU = th.pend.adjWall, th.pend.adjCPU
		}
		if a.o.ExcludeInterrupts {
			adjWall += irq
			adjCPU += irq
		}
		wall = float64(raw-min(adjWall, raw)) - ovh
		cpu = float64(cpuRaw-min(adjCPU, cpuRaw)) - ovh
	}
	if a.switchCost && kind >= 0 {
		th.noteSwitchCost(kind, cpu)
	}
	// Charged field by field, in the order of Metrics.Add: this runs at
	// every event.
	b := &th.nodes[th.current()].base
	b.WallNS += wall
	b.WallNSRaw += raw
	b.DeltaNS += float64(raw) - wall
	if a.cpu {
		b.CPUNS += cpu
		b.Dispatches += th.pend.dispatches
		b.Voluntary += th.pend.dispatches - th.pend.invol
		b.Involuntary += th.pend.invol
	}
	b.Interrupts += th.pend.irqs
	b.InterruptNS += irq
	if n := len(th.stack); n > 0 {
		th.stack[n-1].self += wall
		if a.cpu {
			th.stack[n-1].selfCPU += cpu
		}
	}
	if d != nil {
		*d = Metrics{
			WallNS:      wall,
			WallNSRaw:   raw,
			DeltaNS:     float64(raw) - wall,
			Interrupts:  th.pend.irqs,
			InterruptNS: irq,
			Samples:     th.pend.samples,
			Period:      th.pend.period,
		}
		if a.cpu {
			d.CPUNS = cpu
			d.Dispatches, d.Voluntary, d.Involuntary = th.pend.dispatches, th.pend.dispatches-th.pend.invol, th.pend.invol
		}
	}
	if !quiet {
		th.pend, th.offSegs = pending{}, th.offSegs[:0]
	}
	th.last = t
}

// delta returns d when a callflow wants the metrics of each interval,
// else nil.
func (a *replay) delta(d *Metrics) *Metrics {
	if a.flow {
		return d
	}
	return nil
}

// event handles a function entry or exit of th.
func (a *replay) event(th *thread, e *model.Event) {
	f := a.t.LocFunc(e.Function)
	if !a.inside(th) {
		if !e.Entry || !a.isRoot(e.Function) {
			return // outside the Root subgraph
		}
		a.rootEntered = true
	}
	var d Metrics
	if th.open {
		kind := -1
		if th.events > 0 {
			kind = Transition(th.lastEntry, e.Entry)
			if e.Entry && !th.lastEntry && e.Time == th.lastEvent && a.withCaller[e.Function] {
				// A call site's exit and the next call's entry on one
				// instruction: one probe hit wrote both, and no probe
				// cost lies between them.
				kind = -1
			}
			if a.siteTail != nil {
				// The site's part before its timestamp.
				before := 3
				if e.Entry {
					before = 2
				}
				th.tail += a.siteTail[e.Function][before]
			}
		}
		a.closeInterval(th, e.Time, kind, a.delta(&d))
	} else {
		th.pend, th.offSegs = pending{}, th.offSegs[:0]
		th.last = max(e.Time, th.last)
	}
	if th.events == 0 {
		th.first = e.Time
	}
	th.events++
	th.open, th.lastEntry, th.lastEvent = true, e.Entry, th.last
	th.off = false // the thread runs the probe
	th.tail = 0
	if a.siteTail != nil {
		k := 1
		if e.Entry {
			k = 0
		}
		th.tail = a.siteTail[e.Function][k]
	}

	if e.Entry {
		n := th.child(th.current(), f, th.onFn(f))
		th.nodes[n].calls++
		th.stack = append(th.stack, frame{node: n, loc: e.Function})
		*count(&th.onLoc, int(e.Function))++
		*count(&th.onFunc, int(f))++
		a.line(th, e.Time, FlowEntry, n, &d)
	} else {
		i := th.match(e.Function, f)
		if i < 0 {
			th.repairs.Unmatched++
			if a.flow {
				th.flow.add(a.lines, e.Time, FlowUnmatched, len(th.stack)+1, f, &d)
			}
		} else {
			for len(th.stack)-1 > i {
				if len(th.stack)-2 == i && a.withCaller[th.stack[i+1].loc] {
					a.pop(th, e.Time, FlowExit, nil) // its exit is this one
					continue
				}
				th.repairs.Popped++
				a.pop(th, e.Time, FlowPopped, nil)
			}
			a.pop(th, e.Time, FlowExit, &d)
		}
	}
	if !a.inside(th) {
		th.open = false // left the Root subgraph
	}
}

// match returns the index of the innermost open call of th entered at
// location loc or, failing that, of function f; -1 if there is none.
func (th *thread) match(loc uint32, f FuncID) int {
	if int(loc) < len(th.onLoc) && th.onLoc[loc] > 0 {
		for i := len(th.stack) - 1; i >= 0; i-- {
			if th.stack[i].loc == loc {
				return i
			}
		}
	}
	if th.onFn(f) > 0 {
		for i := len(th.stack) - 1; i >= 0; i-- {
			if th.nodes[th.stack[i].node].fn == f {
				return i
			}
		}
	}
	return -1
}

// pop closes the call on top of th's shadow stack at time t, with the
// metrics d of the interval that ended then for a callflow (nil: zero).
func (a *replay) pop(th *thread, t uint64, kind FlowKind, d *Metrics) {
	fr := th.stack[len(th.stack)-1]
	th.stack = th.stack[:len(th.stack)-1]
	n := &th.nodes[fr.node]
	th.onLoc[fr.loc]--
	th.onFunc[n.fn]--
	// A call's self time, a sum of calibrated intervals, is never
	// negative (closeInterval).
	self, selfCPU := max(0, fr.self), max(0, fr.selfCPU)
	if n.closed == 0 {
		n.min, n.max, n.minCPU, n.maxCPU = self, self, selfCPU, selfCPU
	}
	n.min, n.max = min(n.min, self), max(n.max, self)
	n.minCPU, n.maxCPU = min(n.minCPU, selfCPU), max(n.maxCPU, selfCPU)
	n.closed++
	a.line(th, t, kind, fr.node, d)
}

// line appends a callflow line for node n, with the metrics d of the
// interval that ended then (nil: zero), when a callflow is wanted.
func (a *replay) line(th *thread, t uint64, kind FlowKind, n int32, d *Metrics) {
	if !a.flow {
		return
	}
	th.flow.add(a.lines, t, kind, th.nodes[n].level, a.flowFunc(th, n), d)
}

// flowFunc is the function of node n of th for a callflow line: -1 for
// the thread's root, which has no function id (see fn).
func (a *replay) flowFunc(th *thread, n int32) FuncID {
	if n == 0 {
		return -1
	}
	return th.nodes[n].fn
}

// maxStacks bounds the sample stacks whose functions a replay keeps
// (replay.stacks): a few MiB, however many distinct stacks a long
// recording samples.
const maxStacks = 1 << 16

// sample merges a sample of th into its tree: below the
// innermost open traced call whose function the sample's stack holds, the
// frames deeper than it; outside any call, its whole stack below the
// thread's root. A sample a few microseconds off its call's edges (taken
// in a uretprobe's trampoline, after the function's frame is gone but
// before its exit is written) goes below the caller it was really in,
// never below the call it left, where it would look recursive.
func (a *replay) sample(th *thread, s *model.Sample) {
	if !a.inside(th) {
		return
	}
	fs, ok := a.stacks[s.Stack]
	switch {
	case ok:
	case len(a.stacks) < maxStacks:
		if a.stacks == nil {
			a.stacks = map[uint32][]FuncID{}
		}
		fs, _ = a.t.Stack(s.Stack, nil)
		a.stacks[s.Stack] = fs
	default:
		a.buf, _ = a.t.Stack(s.Stack, a.buf[:0])
		fs = a.buf
	}
	n, depth, chain := int32(0), 0, fs
	for depth = len(th.stack); depth > 0; depth-- {
		cur := th.nodes[th.stack[depth-1].node].fn
		i := len(fs) - 1
		for i >= 0 && fs[i] != cur {
			i--
		}
		if i >= 0 {
			n, chain = th.stack[depth-1].node, fs[i+1:]
			break
		}
	}
	if depth == 0 && len(th.stack) > 0 {
		if a.o.Root != "" {
			// Under Root the calls outside the subgraph are unknown: the
			// sample may belong to one of them, as it does in the whole.
			return
		}
		// No open call is in the stack (cut short, or the traced
		// function's frame not yet set up): attach the leaf.
		n, depth, chain = th.current(), len(th.stack), fs[len(fs)-1:]
	}
	for i, f := range chain {
		if c, ok := th.kid(n, f); ok {
			n = c
			continue
		}
		rl := th.onFn(f)
		if depth < len(th.stack) {
			rl = 0
			for _, fr := range th.stack[:depth] {
				if th.nodes[fr.node].fn == f {
					rl++
				}
			}
		}
		for _, g := range chain[:i] {
			if g == f {
				rl++
			}
		}
		n = th.child(n, f, rl)
	}
	th.nodes[n].base.Samples++
	th.nodes[n].base.Period += s.Period
	if th.open {
		th.pend.samples++
		th.pend.period += s.Period
	}
}

// sweep applies, at the end of the recording, every thread's pending
// deltas (the non-zero list): each open interval closes at its
// thread's end, charged to the call then current, and the calls still
// open end there. A thread the recording saw no record of has its
// lifetime, off CPU: nothing says it ran.
func (a *replay) sweep() {
	if !a.o.ByGoroutine {
		for _, mt := range a.p.Threads {
			if os := a.osThreadOf(mt.PID, mt.TID, mt, true); os != nil && os.own == nil {
				a.own(os, os.end)
			}
		}
	}
	for _, th := range a.order {
		th.end = a.endOf(th)
		a.boundAtEnd(th)
		a.removeProbes(th, th.end)
		if a.detached > 0 && len(th.stack) > 0 && th.end >= a.detached {
			// The thread outlived the probes: its open calls end when
			// they came off, the last moment their exit could be seen,
			// and the rest of its time is its own.
			t := max(a.detached, th.last)
			a.closeAll(th, t, FlowDetach, FlowDetached, &th.repairs.Detached)
		}
		a.closeAll(th, th.end, FlowEnd, FlowUnclosed, &th.repairs.Unclosed)
		th.open = false
	}
}

// closeAll closes th's open interval at t (a flow line of kind end) and
// its open calls (lines of kind unclosed, counted in n).
func (a *replay) closeAll(th *thread, t uint64, end, unclosed FlowKind, n *uint64) {
	a.closeDownTo(th, 0, t, end, unclosed, n)
}

// closeDownTo is closeAll for the open calls from stack index depth up.
func (a *replay) closeDownTo(th *thread, depth int, t uint64, end, unclosed FlowKind, n *uint64) {
	if th.open {
		var d Metrics
		a.closeInterval(th, t, -1, a.delta(&d))
		if th.events > 0 {
			a.line(th, t, end, th.current(), &d)
		}
	}
	for len(th.stack) > depth {
		*n++
		a.pop(th, t, unclosed, nil)
	}
	if !a.inside(th) {
		th.open = false // left the Root subgraph
	}
}

// endOf is when th's metrics stop counting: when its thread exited or
// the recording ended or, for a parked goroutine (or a thread's records
// before its goroutines), when its thread last switched away from it;
// never before its last record.
func (a *replay) endOf(th *thread) uint64 {
	end := th.os.end
	if th.parked {
		end = th.parkedSince
	}
	return max(end, th.last, th.latest)
}

// result turns the replay into a Result.
func (a *replay) result() *Result {
	r := &Result{
		Calibration:        a.cal,
		Raw:                a.o.Raw,
		Root:               a.o.Root,
		CPUMeasured:        a.cpu,
		InterruptsMeasured: a.sum.counts[model.RecordIRQ] > 0,
		ExcludeInterrupts:  a.o.ExcludeInterrupts,
		ByGoroutine:        a.o.ByGoroutine,
		Dropped:            a.dropped,
		Processes:          []Process{},
		Warnings:           []string{},
	}
	threads := a.sorted()
	if a.switchCost {
		a.sc = measureSwitchCost(threads)
		if a.sc.NS > 0 {
			r.SwitchCost = &a.sc
		}
		for _, th := range threads {
			th.switchCost = switchCosts(th, &a.sc)
		}
	}
	if a.flow {
		r.Flows, r.lines = a.flows(threads), a.lines
	}
	for _, th := range threads {
		if th.events == 0 && len(th.nodes) == 1 && th.nodes[0].base == (Metrics{}) {
			continue // nothing of it was measured (outside Root, or no time)
		}
		if a.unlabelled(th) {
			continue
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
			BeginNS: th.begin,
			EndNS:   th.end,
			Events:  th.events,
			Repairs: th.repairs,
			Root:    a.tree(th, 0),
		}
		if th.key.goroutine {
			t.Goroutine, t.OSThreads = &th.key.goid, th.ran
			carried := a.labels.Carried(th.key.pid, th.key.goid)
			if t.Labels = model.LabelMap(carried); t.Labels != nil {
				t.Name += " " + model.LabelString(carried)
				t.Root.Name = t.Name
			}
		}
		if th.events > 0 {
			t.FirstNS, t.LastNS = th.first, th.lastEvent
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

// sorted returns the threads by PID, goroutines (TID 0) first by id,
// then threads by TID and Start.
func (a *replay) sorted() []*thread {
	threads := slices.Clone(a.order)
	slices.SortFunc(threads, func(x, y *thread) int {
		return cmp.Or(cmp.Compare(x.key.pid, y.key.pid), cmp.Compare(x.key.tid, y.key.tid),
			cmp.Compare(x.key.start, y.key.start), cmp.Compare(x.key.goid, y.key.goid))
	})
	return threads
}

// tree converts node i of th and its descendants to a Node.
func (a *replay) tree(th *thread, i int32) Node {
	nd := &th.nodes[i]
	f := a.fn(th, i)
	n := Node{
		Name:      f.Name,
		Module:    f.Module,
		Level:     nd.level,
		Recursion: nd.rl,
		Sampled:   i != 0 && nd.calls == 0,
		Calls:     nd.calls,
		Base:      nd.base,
		Children:  make([]Node, 0, nd.children),
	}
	// The node's total of calibrated intervals is where their noise has
	// averaged out: clamped at zero here, not per interval
	// (closeInterval). What the clamp adds, calibration did not remove.
	if n.Base.WallNS < 0 {
		n.Base.DeltaNS += n.Base.WallNS
		n.Base.WallNS = 0
	}
	if th.switchCost != nil {
		// What its preemptions cost is not the program's (switchcost.go).
		removed := min(th.switchCost[i], max(0, n.Base.CPUNS))
		n.Base.CPUNS -= removed
		a.sc.Removed += removed
	}
	n.Base.CPUNS = max(0, n.Base.CPUNS)
	n.Cum = n.Base
	if nd.closed > 0 {
		// No call's self time exceeds the total of all of them.
		n.MaxSelfNS, n.MaxSelfCPUNS = min(nd.max, n.Base.WallNS), min(nd.maxCPU, n.Base.CPUNS)
		n.MinSelfNS, n.MinSelfCPUNS = min(nd.min, n.MaxSelfNS), min(nd.minCPU, n.MaxSelfCPUNS)
	}
	for c := nd.firstChild; c >= 0; c = th.nodes[c].next {
		n.Children = append(n.Children, a.tree(th, c))
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
func (a *replay) mismatched() bool {
	c, h := a.p.Header.Calibration, &a.p.Header
	return c != nil && c.Mechanism != "" && h.Instrument != "" && c.Mechanism != h.Instrument
}

// warnings returns the sentences about what is missing or repaired.
func (a *replay) warnings(r *Result) []string {
	w := []string{}
	if c := a.p.Header.Calibration; a.sum.counts[model.RecordEvent] > 0 && !a.o.Raw {
		if c == nil {
			w = append(w, "the trace has no calibration: times include the probes' own cost (run `trueprof calibrate` before recording)")
		} else if a.mismatched() {
			w = append(w, fmt.Sprintf("the calibration was measured for mechanism %q but the recording used %q: it is not applied, times include the probes' own cost",
				c.Mechanism, a.p.Header.Instrument))
		}
	}
	if !a.cpu {
		w = append(w, "the trace has no context switches: cpu_ns and dispatches are not measured")
	}
	if a.lines != nil && a.lines.err != nil {
		w = append(w, a.lines.err.Error()+"; the rest of the lines stayed in memory")
	}
	if a.o.ExcludeInterrupts && a.sum.counts[model.RecordIRQ] == 0 {
		w = append(w, "the trace has no interrupt records: excluding interrupts removed nothing")
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
		w = append(w, fmt.Sprintf("%d calls were still open at the end and end when their thread did (exit or end of recording)", n))
	}
	if a.o.Root != "" && !a.rootEntered {
		w = append(w, fmt.Sprintf("the root function %q was never entered by a selected thread", a.o.Root))
	}
	return w
}
