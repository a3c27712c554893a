// Package model holds a recorded profile in memory, as the reports,
// exports and the web UI see it: processes, threads, resolved locations,
// the shared-prefix stack tree and the samples.
package model

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"trueprof/internal/trace"
)

// Profile is everything a trace holds, with string ids replaced by strings.
type Profile struct {
	Header trace.Header

	// Locations is indexed by trace location id; Locations[0] is unused.
	Locations []Location
	// Stacks is indexed by trace stack node id; Stacks[0] is the root.
	Stacks []StackNode

	Samples []Sample
	// Events are the function entries and exits of an instrumented
	// recording, Switches its target threads' context switches, Probes the
	// probes placed and Adjusts the time threads lost to the profiler. All
	// are sorted by time (stable: the file order of equal times is kept).
	Events   []Event
	Switches []Switch
	Probes   []Probe
	Adjusts  []Adjust
	// IRQs are the interrupts handled while target threads ran, GoIDs the
	// goroutine switches of a Go target's threads; both sorted by time.
	IRQs  []IRQ
	GoIDs []GoID
	// Labels are the changes of goroutines' runtime/pprof labels, sorted
	// by time: reports keep the goroutines that carry given labels
	// (GoLabels finds a goroutine's labels at a time).
	Labels    []Labels
	Processes []*Process // sorted by PID
	// Threads are thread incarnations, sorted by PID, TID, Start: a
	// thread id the kernel reused after its thread exited is another
	// Thread. Records name a thread by PID and TID only; ThreadAt finds
	// the incarnation they belong to.
	Threads []*Thread

	Lost      LostCounts
	Throttled uint64 // number of throttle records
	// Pauses are the intervals in which recording was paused (trueprof
	// ctl pause), in file order: no samples or events fall inside them.
	Pauses    []Pause
	Truncated uint64 // samples whose call chain was cut short (trace.SampleTruncated)
	// TruncatedBy splits Truncated by the reason the recorder gave
	// (index trace.UnwindReason; UnwindNone for traces without reasons).
	TruncatedBy [trace.NumUnwindReasons]uint64

	// Aggregation is how the locations' frames group code (Aggregate);
	// the zero value, as recorded.
	Aggregation Aggregation

	// Tree holds the call trees of an aggregated recording (record
	// --aggregate), which has them instead of Events; nil otherwise.
	Tree *Tree

	// End is the trace's End record, nil if the recorder did not stop cleanly.
	End *End
	// Err is the error that ended reading early (a truncated or corrupt
	// file); everything before it is loaded. Nil for a complete trace.
	// A *trace.DamageError says the reader skipped damaged chunks and
	// loaded the intact ones after them too.
	Err error
	// Inconsistent counts the records after skipped damage that referred
	// to a location or stack node the damage lost beyond any later one:
	// they are dropped. Definitions lost in the damage are replaced by
	// placeholders (DamagedName), so the records after them that refer
	// to them are kept.
	Inconsistent uint64

	// events is set when the trace held function entry or exit events,
	// which a Stream's Profile counts but does not hold (HasCalls).
	events bool
}

// HasCalls reports whether p is an instrumented recording, one with
// exact call counts (and the views of calls: trees of calls, calibrated
// times), rather than a sampling one. Its trace holds function entry and
// exit events, loaded in p.Events or, for a Stream's Profile, only
// counted; or it is an aggregated recording (record --aggregate), which
// has no Event records but has calls, summed in p.Tree. Every view asks
// this one question, so that an aggregated or streamed recording is not
// taken for a sampling one by some view and not by others.
func (p *Profile) HasCalls() bool { return p.events || len(p.Events) > 0 || p.Aggregated() }

// DamagedName names the strings, and the function of the locations, that
// were lost in a damaged chunk of the trace.
const DamagedName = "[lost in damaged trace]"

// LostCounts counts lost records by cause.
type LostCounts struct {
	Kernel   uint64 // kernel ring buffer overflows
	Wrap     uint64 // discarded by wrap mode
	Size     uint64 // dropped after the size limit
	Unparsed uint64 // malformed kernel records
}

// Total is the sum of all lost counts.
func (l LostCounts) Total() uint64 { return l.Kernel + l.Wrap + l.Size + l.Unparsed }

// Frame is a function at a source position. Function is never empty: an
// address without a symbol is named "module+0xoffset".
type Frame struct {
	Function string
	File     string
	Line     int
}

// Location is a resolved code address.
type Location struct {
	Address uint64
	Module  string // file path, "[kernel.kallsyms]", "[jit]", ...
	Offset  uint64
	// Frames are innermost (inlined) first; the physical function is last.
	// Never empty.
	Frames []Frame
	// symbol is the physical function's name when Aggregate renamed the
	// frames, else "" (see Symbol).
	symbol string
}

// StackNode is a node of the stack tree: Location called from Parent's
// stack. The root (index 0) has Parent 0 and Location 0.
type StackNode struct {
	Parent   uint32
	Location uint32
}

// Sample is one sample.
type Sample struct {
	Time      uint64
	PID       uint32
	TID       uint32
	CPU       uint32
	Period    uint64
	Stack     uint32 // leaf stack node; 0 if the sample has no stack
	Truncated bool
	Kernel    bool
	// Unwind is why a truncated sample's stack stops short.
	Unwind trace.UnwindReason
}

// Event is a function entry (Entry) or exit on a thread. Function is the
// Location of the function's first instruction.
type Event struct {
	Time     uint64
	PID      uint32
	TID      uint32
	Entry    bool
	Function uint32
}

// Switch is a context switch of a target thread: switched out of CPU
// (Out; Preempt when involuntary) or back in.
type Switch struct {
	Time    uint64
	PID     uint32
	TID     uint32
	CPU     uint32
	Out     bool
	Preempt bool
}

// Probe is a probe placed on Function (a Location) at Address of PID.
type Probe struct {
	Time     uint64
	PID      uint32
	Function uint32
	Address  uint64
	Mech     trace.ProbeMech
	Stepped  bool // the entry probe's instruction is single-stepped (trace.Probe)
	CallSite bool // probed at its callers (trace.Probe)
	RetInsn  bool // exits by RET-instruction probes (trace.Probe)
}

// Adjust is time a thread spent in the profiler rather than its own code,
// and events it dropped.
type Adjust struct {
	Time     uint64
	PID      uint32
	TID      uint32
	Duration uint64
	Dropped  uint64
}

// Pause is an interval in which recording was paused, from
// Time-Duration to Time; Dropped counts the samples and events the
// recorder threw away in it.
type Pause struct {
	Time     uint64
	Duration uint64
	Dropped  uint64
}

// IRQ is an interrupt handled on CPU while thread TID ran there: from
// Time-Duration to Time.
type IRQ struct {
	Time     uint64
	PID      uint32
	TID      uint32
	CPU      uint32
	Soft     bool // a softirq rather than a hardware interrupt handler
	Vector   uint32
	Duration uint64
}

// GoID is a goroutine switch: from Time, thread TID runs goroutine GoID.
type GoID struct {
	Time uint64
	PID  uint32
	TID  uint32
	GoID uint64
}

// Labels is a change of a goroutine's runtime/pprof labels: from Time,
// goroutine GoID of process PID carries Pairs (none: no labels).
type Labels struct {
	Time      uint64
	PID       uint32
	GoID      uint64
	Pairs     []LabelPair
	Truncated bool // the recorder copied only part of the set (trace.Labels)
}

// LabelPair is one label.
type LabelPair struct {
	Key, Value string
}

// GoLabels finds a goroutine's labels at a time: it indexes a profile's
// label changes by goroutine, since a report asks for every sample and
// event.
type GoLabels map[goKey][]*Labels

// goKey names a goroutine of a process.
type goKey struct {
	pid  uint32
	goid uint64
}

// GoLabels indexes p.Labels by goroutine.
func (p *Profile) GoLabels() GoLabels {
	idx := GoLabels{}
	for i := range p.Labels {
		l := &p.Labels[i]
		k := goKey{l.PID, l.GoID}
		idx[k] = append(idx[k], l)
	}
	return idx
}

// Changes returns the label changes of goroutine goid of process pid, in
// time order.
func (idx GoLabels) Changes(pid uint32, goid uint64) []*Labels {
	return idx[goKey{pid, goid}]
}

// At returns the labels goroutine goid of process pid carries at time t:
// those of its last change at or before t, nil if none (or if it had
// none then).
func (idx GoLabels) At(pid uint32, goid uint64, t uint64) []LabelPair {
	changes := idx[goKey{pid, goid}]
	i, _ := slices.BinarySearchFunc(changes, t+1, func(l *Labels, t uint64) int { return cmp.Compare(l.Time, t) })
	if i == 0 {
		return nil
	}
	return changes[i-1].Pairs
}

// Carried returns every label goroutine goid of process pid carried
// during the recording, by key, a key's values in the order it carried
// them: what names a goroutine in a report, since its labels at any one
// time (say at its end, when pprof.Do has restored none) may say less.
func (idx GoLabels) Carried(pid uint32, goid uint64) []LabelPair {
	var out []LabelPair
	for _, l := range idx[goKey{pid, goid}] {
		for _, pair := range l.Pairs {
			if !slices.Contains(out, pair) {
				out = append(out, pair)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b LabelPair) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// LabelString formats labels as reports show them, "{k=v, k=w}", or
// "" for none.
func LabelString(pairs []LabelPair) string {
	if len(pairs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range pairs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(l.Key + "=" + l.Value)
	}
	b.WriteByte('}')
	return b.String()
}

// Process is one process seen in the trace.
type Process struct {
	PID  uint32
	Name string // the main thread's last name
}

// Thread is one thread incarnation seen in the trace.
type Thread struct {
	PID   uint32
	TID   uint32
	Name  string   // last name
	Names []string // every name, in order
	// Start is the fork time; for the first thread of a launched command,
	// the time it exec'd the command (recording of it begins there); 0
	// if it existed before recording (attached).
	Start uint64
	End   uint64 // exit time, or 0 if still running when recording ended
	// Counters are the thread's totals of per-thread kernel counters
	// (Counter records); nil if none were recorded.
	Counters map[trace.CounterKind]uint64
}

// End is how recording ended.
type End struct {
	Time     uint64
	ExitCode int
	Reason   string
	Detached uint64 // when the probes came off; 0 if nothing was probed
}

// Stack appends to buf the location ids of stack node id, leaf first, and
// returns the extended buffer.
func (p *Profile) Stack(id uint32, buf []uint32) []uint32 {
	for id != 0 && int(id) < len(p.Stacks) {
		n := p.Stacks[id]
		buf = append(buf, n.Location)
		id = n.Parent
	}
	return buf
}

// Process returns the process with the given pid, or nil.
func (p *Profile) Process(pid uint32) *Process {
	for _, pr := range p.Processes {
		if pr.PID == pid {
			return pr
		}
	}
	return nil
}

// Thread returns the first incarnation of the thread with the given pid
// and tid, or nil.
func (p *Profile) Thread(pid, tid uint32) *Thread {
	if i, ok := p.firstThread(pid, tid); ok {
		return p.Threads[i]
	}
	return nil
}

// ThreadAt returns the incarnation of thread pid/tid that a record at
// time t belongs to: the last one created at or before t (the first one
// if t is earlier), or nil if the trace has no such thread.
func (p *Profile) ThreadAt(pid, tid uint32, t uint64) *Thread {
	th, _, _ := p.ThreadSpan(pid, tid, t)
	return th
}

// ThreadLookup answers ThreadAt for records visited in time order,
// searching p.Threads once per incarnation rather than once per record:
// reports and the web UI look up every sample's thread.
type ThreadLookup struct {
	p      *Profile
	recent map[[2]uint32]threadSpan
}

// threadSpan is an incarnation and the times its answer holds for.
type threadSpan struct {
	th          *Thread
	from, until uint64
}

// NewThreadLookup returns a ThreadLookup over p's threads.
func (p *Profile) NewThreadLookup() *ThreadLookup {
	return &ThreadLookup{p: p, recent: map[[2]uint32]threadSpan{}}
}

// At is p.ThreadAt(pid, tid, t).
func (l *ThreadLookup) At(pid, tid uint32, t uint64) *Thread {
	k := [2]uint32{pid, tid}
	c, ok := l.recent[k]
	if !ok || t < c.from || t >= c.until {
		c.th, c.from, c.until = l.p.ThreadSpan(pid, tid, t)
		l.recent[k] = c
	}
	return c.th
}

// ThreadSpan is ThreadAt that also returns the times from (inclusive) to
// until (exclusive) over which ThreadAt of pid/tid gives the same answer,
// so that a pass over records in time order can look each incarnation up
// once. until is math.MaxUint64 for the last incarnation (or none).
func (p *Profile) ThreadSpan(pid, tid uint32, t uint64) (th *Thread, from, until uint64) {
	until = math.MaxUint64
	i, ok := p.firstThread(pid, tid)
	if !ok {
		return nil, 0, until
	}
	th = p.Threads[i]
	for _, next := range p.Threads[i+1:] {
		if next.PID != pid || next.TID != tid {
			break
		}
		if next.Start > t {
			until = next.Start
			break
		}
		th, from = next, next.Start
	}
	return th, from, until
}

// firstThread is the index in p.Threads of pid/tid's first incarnation.
func (p *Profile) firstThread(pid, tid uint32) (int, bool) {
	return slices.BinarySearchFunc(p.Threads, [2]uint32{pid, tid}, func(t *Thread, k [2]uint32) int {
		return cmp.Or(cmp.Compare(t.PID, k[0]), cmp.Compare(t.TID, k[1]))
	})
}
