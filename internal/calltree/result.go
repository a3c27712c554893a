package calltree

import (
	"errors"
	"fmt"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// Errors returned by Build and Callflow.
var (
	// ErrRootNotFound: Options.Root names no function seen in the events.
	// It is wrapped with the name.
	ErrRootNotFound = errors.New("root function not found in the events")
	// ErrBadCalibration: the header's calibration has a negative or
	// non-finite overhead. It is wrapped with the offending value.
	ErrBadCalibration = errors.New("bad calibration")
	// ErrNoGoroutines: Options.ByGoroutine on a recording without
	// goroutine switches (not a Go target, or recorded without them).
	ErrNoGoroutines = errors.New("the recording has no goroutine switches (GoID records)")
)

// Options select what Build and Callflow analyse. The zero Options
// analyse every thread, calibrated.
type Options struct {
	// Raw reports unadjusted times: neither the calibrated probe costs
	// nor the Adjust records are subtracted, so wall_ns equals
	// wall_ns_raw and delta_ns is zero.
	Raw bool
	// Root restricts the analysis to the call subgraph of the function
	// of that name (Scheme B): a thread's events, samples,
	// switches and adjustments count only while at least one activation
	// of Root is on its shadow stack. Empty means every event.
	Root string
	// Filter keeps the records of the processes and threads it selects
	// (model.Filter's PID, TID, Thread) and, with label patterns, only
	// the records of goroutines that carry the labels it matches at the
	// time (model.FilterLabels), and only the goroutines that ever
	// carried them (ByGoroutine), or the threads left with a record:
	// labels say which request or job a goroutine serves, and it serves
	// others before and after. Nil keeps everything. The caller compiles
	// its filter once, for every analysis and view of one report.
	Filter *model.Matcher
	// ByGoroutine analyses each goroutine of a Go target as a thread of
	// its own: a goroutine moves between OS threads, so only a shadow
	// stack per goroutine sees its calls return. A thread's records
	// belong to the goroutine it last switched to (model.GoID); those
	// from before its first switch stay the thread's. Build fails with
	// ErrNoGoroutines when the recording has no goroutine switches.
	ByGoroutine bool
	// ExcludeInterrupts removes the time of the interrupts handled while
	// a thread ran (model.IRQ) from its wall and CPU time, as it removes
	// the profiler's pauses: they land at random, so repeatable
	// measurements leave them out. Removing them from both
	// keeps wall − CPU the time the thread was blocked or waiting.
	ExcludeInterrupts bool
	// Flow keeps, in Result.Flows, every event of the analysed threads
	// with the metrics of the interval before it (a callflow), from the
	// same replay that builds the trees: compactly, and past 16 MiB in
	// a temporary file (flowStore).
	Flow bool
}

// Metrics are the values measured over a set of intervals and samples.
// Every field adds up: a node's cum is its base plus its children's cum,
// field by field. Calibrated times are fractional nanoseconds because
// the measured probe costs are.
type Metrics struct {
	// WallNS is the elapsed time, calibrated: each interval's raw time
	// minus the profiler's lost time (Adjust records) and the probe cost
	// of its transition kind, summed per node and never below zero there
	// (a single interval of a callflow may be). With Options.Raw, or
	// without calibration and adjustments, it equals WallNSRaw.
	WallNS float64 `json:"wall_ns"`
	// WallNSRaw is the elapsed time between the events, as recorded.
	WallNSRaw uint64 `json:"wall_ns_raw"`
	// DeltaNS is WallNSRaw − WallNS: what calibration removed (log-rt's
	// DELTA column).
	DeltaNS float64 `json:"delta_ns"`
	// CPUNS is the part of the time the thread was on a CPU, calibrated
	// like WallNS. Zero when the recording has no context switches
	// (Result.CPUMeasured).
	CPUNS float64 `json:"cpu_ns"`
	// Dispatches counts the times the thread was switched out of its CPU
	// (log-rt's DS): Voluntary when it blocked, Involuntary when it was
	// preempted. Together with wall − CPU they tell blocking from
	// waiting for a CPU.
	Dispatches  uint64 `json:"dispatches"`
	Voluntary   uint64 `json:"dispatches_voluntary"`
	Involuntary uint64 `json:"dispatches_involuntary"`
	// Interrupts counts the hardware interrupts and softirqs handled
	// while the thread ran (log-rt's IN), InterruptNS their time: the
	// CPU time they took from the thread, which
	// Options.ExcludeInterrupts removes from WallNS and CPUNS. Zero when
	// the recording has none (Result.InterruptsMeasured).
	Interrupts  uint64 `json:"interrupts"`
	InterruptNS uint64 `json:"interrupt_ns"`
	// Samples counts the samples merged into the tree.
	Samples uint64 `json:"samples"`
	// Period is the sum of those samples' periods (the event's unit:
	// nanoseconds of cpu-clock, or events): the sampling views' second
	// metric. Not in the instrumented views' JSON, which count samples.
	Period uint64 `json:"-"`
}

// Add adds n to m, field by field.
func (m *Metrics) Add(n Metrics) {
	m.WallNS += n.WallNS
	m.WallNSRaw += n.WallNSRaw
	m.DeltaNS += n.DeltaNS
	m.CPUNS += n.CPUNS
	m.Dispatches += n.Dispatches
	m.Voluntary += n.Voluntary
	m.Involuntary += n.Involuntary
	m.Interrupts += n.Interrupts
	m.InterruptNS += n.InterruptNS
	m.Samples += n.Samples
	m.Period += n.Period
}

// sub subtracts n from m, field by field; n must be part of m.
func (m *Metrics) sub(n Metrics) {
	m.WallNS -= n.WallNS
	m.WallNSRaw -= n.WallNSRaw
	m.DeltaNS -= n.DeltaNS
	m.CPUNS -= n.CPUNS
	m.Dispatches -= n.Dispatches
	m.Voluntary -= n.Voluntary
	m.Involuntary -= n.Involuntary
	m.Interrupts -= n.Interrupts
	m.InterruptNS -= n.InterruptNS
	m.Samples -= n.Samples
	m.Period -= n.Period
}

// Node is a node of a thread's call-stack tree: one distinct path of
// calls from the thread's root.
type Node struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	// Level is the depth from the thread's root, which is 0 (log-rt's
	// LV).
	Level int `json:"level"`
	// Recursion is how many times this node's function occurs among its
	// ancestors.
	Recursion int `json:"recursion"`
	// Sampled marks a node known only from samples: a function that was
	// not traced, found in the call stack of a sample taken below a
	// traced one (or outside any). It has no calls and no time.
	Sampled bool `json:"sampled"`
	// Calls is the number of entries into this node (CALLS); Callees the
	// number of calls it made to its children (CEE).
	Calls   uint64 `json:"calls"`
	Callees uint64 `json:"callees"`
	// Base is what was measured while this node was the current one
	// (its self time); Cum adds its descendants.
	Base Metrics `json:"base"`
	Cum  Metrics `json:"cum"`
	// MinSelfNS and MaxSelfNS are the smallest and largest self wall time
	// (calibrated) of one call; zero when Calls is zero.
	MinSelfNS float64 `json:"min_self_ns"`
	MaxSelfNS float64 `json:"max_self_ns"`
	// MinSelfCPUNS and MaxSelfCPUNS are the same for the self CPU time
	// (calibrated; zero when the recording has no context switches).
	MinSelfCPUNS float64 `json:"min_self_cpu_ns"`
	MaxSelfCPUNS float64 `json:"max_self_cpu_ns"`
	// Children are sorted by cum wall time, largest first, then by cum
	// samples, name and module. Never null.
	Children []Node `json:"children"`
}

// Func returns the function of n.
func (n *Node) Func() Func { return Func{Name: n.Name, Module: n.Module} }

// Repairs counts what the shadow stack had to repair. The tree is never
// corrupted by them, but the times around a repair are approximate.
type Repairs struct {
	// Popped counts calls whose exit was missing (a C++ exception,
	// longjmp, a Go panic, a tail call): they ended when the exit of a
	// caller further down the shadow stack arrived.
	Popped uint64 `json:"popped"`
	// Unmatched counts exits of a function with no open call on the
	// thread (recording started inside it, before an attach placed its
	// probes, or its entry was lost); they are ignored, apart from ending
	// an interval.
	Unmatched uint64 `json:"unmatched"`
	// Unclosed counts calls still open when their thread ended (it
	// exited, or the recording stopped or was cut short, with no detach
	// time known); they end then.
	Unclosed uint64 `json:"unclosed"`
	// Detached counts calls still open when the probes came off (a
	// recording that stopped, or detached, while they ran): their exit
	// was never seen, and they end then. Not a repair: the tree is
	// exact, it only ends early. Absent from JSON when zero.
	Detached uint64 `json:"open_at_detach,omitempty"`
	// Switches counts context switches of the thread whose record the
	// kernel lost (a switch-in or switch-out missing from the pair): its
	// CPU time is bounded by the other threads' switches on the same CPU,
	// not measured. Absent from JSON when zero.
	Switches uint64 `json:"lost_switches,omitempty"`
}

func (r *Repairs) add(s Repairs) {
	r.Popped += s.Popped
	r.Unmatched += s.Unmatched
	r.Unclosed += s.Unclosed
	r.Detached += s.Detached
	r.Switches += s.Switches
}

// Thread is the call-stack tree of one thread incarnation: a thread id
// reused after the first thread exited is another Thread (Start tells
// them apart). With Options.ByGoroutine it is a goroutine's (Goroutine
// set), or a thread's records from before it ran any goroutine.
type Thread struct {
	PID uint32 `json:"pid"`
	// TID is the thread's id; 0 for a goroutine.
	TID uint32 `json:"tid"`
	// Start is the incarnation's creation time (model.Thread.Start); 0 if
	// it existed before recording started, is not in the trace, or is a
	// goroutine.
	Start uint64 `json:"start_ns"`
	Name  string `json:"name"`
	// Goroutine is the goroutine's id; nil for a thread.
	Goroutine *uint64 `json:"goroutine,omitempty"`
	// Labels are the runtime/pprof labels the goroutine carried during
	// the recording (the values of a key it carried several of joined
	// by commas); its Name and its root's name end with them ("goroutine
	// 17 {worker=3}"). Nil for a thread, or a goroutine without labels.
	Labels map[string]string `json:"labels,omitempty"`
	// OSThreads are the tids of the threads a goroutine ran on, in the
	// order it first ran on them; nil for a thread.
	OSThreads []uint32 `json:"os_threads,omitempty"`
	// BeginNS and EndNS bound the time the thread's metrics cover (a
	// per-thread baseline, then every delta up to the end): from
	// its creation, the start of recording or its first record, to its
	// exit or the end of the recording. A goroutine's run from the
	// first time a thread ran it to the last time one stopped.
	BeginNS uint64 `json:"begin_ns"`
	EndNS   uint64 `json:"end_ns"`
	// FirstNS and LastNS are the times of the thread's first and last
	// analysed events; zero if it has none.
	FirstNS uint64  `json:"first_ns"`
	LastNS  uint64  `json:"last_ns"`
	Events  uint64  `json:"events"` // events analysed
	Repairs Repairs `json:"repairs"`
	// Root is the thread itself ("name_tid", or "goroutine N", level 0):
	// its base is the time outside its outermost calls (before the first,
	// between them, after the last) and the samples outside any call; its
	// cum is the thread's total.
	Root Node `json:"root"`
}

// Process groups the threads of a process.
type Process struct {
	PID     uint32   `json:"pid"`
	Name    string   `json:"name"`
	Total   Metrics  `json:"total"`   // sum of its threads' root cum
	Threads []Thread `json:"threads"` // goroutines first, by id; then by TID and Start
}

// Arc is a caller or callee row of a Function: the calls between the two
// functions and the part of the function's time they account for.
type Arc struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	// Calls is the exact number of calls along the arc.
	Calls uint64 `json:"calls"`
	// For a caller, Base is the part of the function's self measured in
	// calls from this caller, and Cum the part of its total: the callers'
	// Base add up to the function's Self and their Cum to its Total.
	// For a callee, Cum is the part of the function's total spent in
	// calls to the callee and Base the callee's own self within it.
	Base Metrics `json:"base"`
	Cum  Metrics `json:"cum"`
}

// Function is the accumulated view of one function over all analysed
// threads (the function accumulator).
type Function struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	Calls  uint64 `json:"calls"`
	// Self is measured while the function was the current one; Total
	// while it was anywhere on the stack, counting a recursive function
	// once (the cum of its outermost activations).
	Self  Metrics `json:"self"`
	Total Metrics `json:"total"`
	// MinSelfNS and MaxSelfNS are the smallest and largest self wall
	// time (calibrated) of one call; zero when Calls is zero.
	MinSelfNS float64 `json:"min_self_ns"`
	MaxSelfNS float64 `json:"max_self_ns"`
	// MinSelfCPUNS and MaxSelfCPUNS are the same for the self CPU time
	// (calibrated; zero when the recording has no context switches).
	MinSelfCPUNS float64 `json:"min_self_cpu_ns"`
	MaxSelfCPUNS float64 `json:"max_self_cpu_ns"`
	// Callers are the functions that called it (Root for a thread's
	// outermost calls): a caller's Calls and Base are those of the calls
	// it made, its Cum the total of the function's outermost activations
	// it called (a recursive caller has Base, no Cum: the time of the
	// calls it made is in the outermost call's caller's Cum), so they add
	// up to Calls, Self and Total. Callees are the functions it called:
	// Calls from every activation; Cum the time, under the function's
	// outermost activations, of the calls to the callee that was not
	// spent in the function again (that is its Self), Base the callee's
	// self in those calls. So the callees' Cum adds up to Total minus
	// Self, recursion included, as the arcflow of samples counts
	// (report's arcflow). Both are sorted by cum wall time, largest
	// first, then calls, name and module; never null.
	Callers []Arc `json:"callers"`
	Callees []Arc `json:"callees"`
}

// Result is the analysis of an instrumented recording.
type Result struct {
	// Calibration is the probe cost that was subtracted: the trace
	// header's, or nil with Options.Raw or when the trace has none.
	Calibration *trace.Calibration `json:"calibration"`
	Raw         bool               `json:"raw"`            // Options.Raw
	Root        string             `json:"root,omitempty"` // Options.Root
	// CPUMeasured tells whether the recording has context switches:
	// without them cpu_ns and dispatches are zero, not measured.
	CPUMeasured bool `json:"cpu_measured"`
	// InterruptsMeasured tells whether the recording has interrupts
	// (IRQ records): without them interrupts are zero, not measured.
	InterruptsMeasured bool `json:"interrupts_measured"`
	// ExcludeInterrupts and ByGoroutine are the Options'.
	ExcludeInterrupts bool `json:"exclude_interrupts"`
	ByGoroutine       bool `json:"by_goroutine"`

	// SwitchCost is what a context switch cost the threads on CPU,
	// measured in the recording and removed from their calibrated CPU
	// time; nil when not calibrating, without context switches or with
	// too few switched intervals to measure it, and for trees built live
	// (aggregated recordings).
	SwitchCost *SwitchCost `json:"switch_cost,omitempty"`

	Total Metrics `json:"total"` // sum of every thread's root cum
	Calls uint64  `json:"calls"` // entries analysed
	// Events counts the analysed events; Dropped the events the recorder
	// reported lost (Adjust records), which make the tree around them
	// wrong.
	Events  uint64  `json:"events"`
	Dropped uint64  `json:"dropped"`
	Repairs Repairs `json:"repairs"`

	Processes []Process  `json:"processes"` // by PID; never null
	Functions []Function `json:"functions"` // by self wall time, largest first, then total, name, module; never null

	// Warnings are sentences about missing or repaired data. Never null.
	Warnings []string `json:"warnings"`

	// Flows are the callflows of the threads with events when
	// Options.Flow is set, their lines read with FlowThread.Each; nil
	// otherwise.
	Flows []FlowThread `json:"-"`
	// lines is where the Flows' lines are kept, for Close.
	lines *flowStore
}

// Close releases what the Flows' lines hold beyond memory: the
// temporary file a long callflow's lines spill to, which would otherwise
// keep its disk space until the collector finalizes it. The Flows cannot
// be read after it. It does nothing for a Result without Flows.
func (r *Result) Close() error {
	if r.lines == nil {
		return nil
	}
	return r.lines.close()
}

// checkCalibration rejects overheads no measurement can produce.
func checkCalibration(c *trace.Calibration) error {
	for k, v := range c.Overhead {
		if !(v >= 0) || v > 1e12 { // also NaN; +Inf
			return fmt.Errorf("%w: %s overhead %v ns", ErrBadCalibration, TransitionName(k), v)
		}
	}
	return nil
}

// TransitionName names a transition kind (trace.EntryEntry...):
// "entry->entry", "entry->exit", "exit->entry" or "exit->exit".
func TransitionName(kind int) string {
	switch kind {
	case trace.EntryEntry:
		return "entry->entry"
	case trace.EntryExit:
		return "entry->exit"
	case trace.ExitEntry:
		return "exit->entry"
	case trace.ExitExit:
		return "exit->exit"
	}
	return fmt.Sprintf("transition %d", kind)
}

// Transition returns the kind of the interval between an event (an entry
// when prevEntry) and the next event of the same thread (an entry when
// entry).
func Transition(prevEntry, entry bool) int {
	switch {
	case prevEntry && entry:
		return trace.EntryEntry
	case prevEntry:
		return trace.EntryExit
	case entry:
		return trace.ExitEntry
	}
	return trace.ExitExit
}
