package trace

import (
	"iter"
	"strconv"
	"time"
)

// Version is the trace format version written by this package. Readers
// reject files with a greater version. Version 2 added runs of events
// and version 3 wide runs (docs/trace-format.md, Versioning), which an
// older reader would skip as unknown records, losing the events.
const Version = 3

// Header describes a recording. It is stored once at the start of the file
// (as JSON, so that fields can be added without a format change) and is
// what makes a trace self-describing.
type Header struct {
	Version   int       `json:"version"`
	Host      string    `json:"host"`
	Kernel    string    `json:"kernel"`
	Arch      string    `json:"arch"`
	Clock     string    `json:"clock"`            // clock of every record timestamp: "CLOCK_MONOTONIC"
	StartTime time.Time `json:"start_time"`       // wall clock when recording started
	StartNS   uint64    `json:"start_ns"`         // the same instant on Clock
	Event     string    `json:"event"`            // sampling event name, e.g. "cpu-clock"
	Freq      uint64    `json:"freq,omitempty"`   // samples per second, when frequency based
	Period    uint64    `json:"period,omitempty"` // events per sample, when period based
	Callchain string    `json:"callchain"`        // how user stacks were unwound: "fp" (frame pointers), "dwarf" (CFI over a stack copy) or "auto" (CFI, frame pointers where code has no CFI)
	// StackBytes is the size of the user stack copy each sample took for
	// the dwarf and auto call graphs; 0 for fp.
	StackBytes int      `json:"stack_bytes,omitempty"`
	UserOnly   bool     `json:"user_only"` // kernel samples and call chains were not permitted
	Mode       string   `json:"mode"`      // "normal", "wrap" or "continuous"
	SizeLimit  int64    `json:"size_limit,omitempty"`
	Command    []string `json:"command,omitempty"` // launched command line, if launched
	PIDs       []int    `json:"pids,omitempty"`    // attached processes, if attached

	// Instrument names the probe mechanism of an instrumented recording:
	// "hook" (compiled-in -finstrument-functions hooks) or "uprobe";
	// empty when only sampling.
	Instrument string `json:"instrument,omitempty"`
	// Calibration is the probe cost measured on the recording machine,
	// which reports subtract from instrumented times.
	Calibration *Calibration `json:"calibration,omitempty"`
	// Root is --root's function: the recording covers its subgraph
	// (Scheme B, docs/architecture.md), and reports show that subgraph by default.
	Root string `json:"root,omitempty"`
	// Aggregate is set for an aggregated recording (record --aggregate):
	// the function entries and exits were folded into call trees while
	// recording, and the trace holds tree snapshots (TreeThread, TreeNode,
	// TreeMark) instead of Event records.
	Aggregate *Aggregate `json:"aggregate,omitempty"`
}

// Aggregate describes how an aggregated recording was made.
type Aggregate struct {
	// SnapshotNS is the interval between tree snapshots.
	SnapshotNS uint64 `json:"snapshot_ns"`
	// TreeMemory is the bound on the trees' memory in bytes, past which
	// the smallest subtrees were pruned; 0 for none.
	TreeMemory int64 `json:"tree_memory,omitempty"`
}

// Transition kinds: the pair of consecutive events on a thread that a
// time interval lies between (EE, EX, XE, XX). Probe costs differ by kind.
const (
	EntryEntry = iota // entry, then the entry of a callee
	EntryExit         // entry, then the exit of the same function (a leaf)
	ExitEntry         // a callee's exit, then the next callee's entry
	ExitExit          // a callee's exit, then the caller's exit
	Transitions
)

// Calibration is the measured cost of a probe mechanism (probe calibration,
// t_exact = t_rough − t_I − m·t_O): the
// part of each probe's time that lands inside the measured interval
// between two events of a thread, per transition kind, in nanoseconds.
// docs/calibration.md explains the model.
type Calibration struct {
	Mechanism string               `json:"mechanism"`
	Host      string               `json:"host"`
	Kernel    string               `json:"kernel"`
	Time      time.Time            `json:"time"`
	Statistic string               `json:"statistic"` // how the per-kind values were found: "fit" (fitted to validation shapes), or a statistic of empty intervals ("min", "median", "mean") in older traces
	Overhead  [Transitions]float64 `json:"overhead_ns"`
	PerCall   float64              `json:"per_call_ns"` // total cost of one instrumented call (entry and exit)
	Samples   int                  `json:"samples"`     // measurements behind each value
	// Fit is how the overheads reproduce each validation shape's
	// uninstrumented time (absent in traces recorded before fitting).
	Fit []FitShape `json:"fit,omitempty"`
	// Resolution is the shortest time per call from which up the
	// calibration was shown to measure every shape to within 10%, in ns,
	// or the longest it tried when not even that one (0 when unknown):
	// functions faster than it keep their exact counts, but their
	// calibrated times are estimates.
	Resolution float64 `json:"resolution_ns,omitempty"`
	// Source says where the calibration was measured: "in-run" (bursts
	// the hook library ran in the recorded process itself, fitted at
	// the end of the recording), or empty for a stored calibration
	// (`trueprof calibrate`, a separate run of a bundled target).
	Source string `json:"source,omitempty"`
	// Sites are the uprobe costs per hit of each probe-site class, which
	// reports apply per site on top of the fitted overheads (those are
	// measured on emulated entries and return probes); nil for hooks
	// and older traces.
	Sites *SiteCosts `json:"sites,omitempty"`
	// Bursts is how many in-run calibration bursts the fit used.
	Bursts int `json:"bursts,omitempty"`
	// Refused, when not empty, says why the fit was refused (e.g. "shape
	// mixed residual +7.2%"): its overheads are zero and reports show raw
	// times, saying so.
	Refused string `json:"refused,omitempty"`
}

// SiteCosts are the costs of one uprobe hit, in ns, per class of probe
// site: how the kernel handles the entry probe's instruction (emulated,
// or single-stepped out of line) and how the exit is probed (a return
// probe's trampoline, or a uprobe on each RET instruction, which is
// single-stepped).
type SiteCosts struct {
	EntryEmulated float64 `json:"entry_emulated_ns"`
	EntryStepped  float64 `json:"entry_stepped_ns"`
	// EntrySteppedCaller is the part of a stepped entry's cost beyond an
	// emulated one that lies in the caller's intervals (before the
	// entry's timestamp, or after the exit's), not in the callee's after
	// the entry; 0 when not measured (older traces: all in the callee).
	EntrySteppedCaller float64 `json:"entry_stepped_caller_ns,omitempty"`
	ExitReturn         float64 `json:"exit_return_ns"`
	ExitRetInsn        float64 `json:"exit_ret_insn_ns"`
	// ExitRetInsnBefore is the part of what a RET probe costs more than
	// a return probe that lies before its timestamp, in the callee's
	// interval (a trap's way into the kernel is longer than the
	// trampoline's); 0 when not measured: all after it.
	ExitRetInsnBefore float64 `json:"exit_ret_insn_before_ns,omitempty"`
	// ExitCallSite is the cost of an exit probed on the instruction a
	// call returns to (ProbeCallSite), an emulated uprobe, and
	// ExitCallSiteBefore the part of what it costs more than a return
	// probe that lies before its timestamp, in the callee's interval;
	// 0 when not measured (older traces).
	ExitCallSite       float64 `json:"exit_call_site_ns,omitempty"`
	ExitCallSiteBefore float64 `json:"exit_call_site_before_ns,omitempty"`
}

// FitShape is one validation shape of a calibration: a loop of calls
// with real work, timed without probes and recorded with them, and what
// the calibrated recording made of it.
type FitShape struct {
	Name           string  `json:"name"`              // e.g. "leaf-heavy"
	Calls          uint64  `json:"calls"`             // instrumented calls in the loop
	BodyNS         float64 `json:"body_ns"`           // uninstrumented time per leaf call
	Uninstrumented float64 `json:"uninstrumented_ns"` // the loop without probes (minimum over runs)
	Calibrated     float64 `json:"calibrated_ns"`     // the loop recorded with probes, calibrated
	Raw            float64 `json:"raw_ns"`            // the same, uncalibrated
}

// Error returns the shape's residual, calibrated minus uninstrumented,
// as a fraction of the uninstrumented time.
func (f FitShape) Error() float64 {
	if f.Uninstrumented == 0 {
		return 0
	}
	return (f.Calibrated - f.Uninstrumented) / f.Uninstrumented
}

// Major is a record's major code: what kind of record it is (the classic trace
// record layout). Values are part of the file format and never change meaning.
type Major uint8

// Major codes.
const (
	MajorString   Major = 1  // *String: an interned string
	MajorModule   Major = 2  // *Module: a mapping of a file into a process (PERF_RECORD_MMAP2)
	MajorComm     Major = 3  // *Comm: a thread's name (PERF_RECORD_COMM)
	MajorFork     Major = 4  // *Fork: a thread or process was created (PERF_RECORD_FORK)
	MajorExit     Major = 5  // *Exit: a thread or process ended (PERF_RECORD_EXIT)
	MajorLocation Major = 6  // *Location: a resolved code address
	MajorStack    Major = 7  // *StackNode: a node of the shared-prefix stack tree
	MajorSample   Major = 8  // *Sample: one sample
	MajorLost     Major = 9  // *Lost: records that were lost, counted
	MajorThrottle Major = 10 // *Throttle: the kernel throttled or unthrottled sampling
	MajorEnd      Major = 11 // *End: the recording ended normally
	MajorEvent    Major = 12 // *Event: a function entry or exit
	MajorSwitch   Major = 13 // *Switch: a target thread went on or off a CPU (PERF_RECORD_SWITCH)
	MajorProbe    Major = 14 // *Probe: a probe was placed on a function
	MajorAdjust   Major = 15 // *Adjust: time a thread lost to the profiler, or events it dropped
	MajorIRQ      Major = 16 // *IRQ: an interrupt handled while a target thread was on its CPU
	MajorGoID     Major = 17 // *GoID: a thread began running a goroutine
	MajorCounter  Major = 18 // *Counter: a thread's total of a per-thread counter
	MajorLabels   Major = 19 // *Labels: a goroutine's runtime/pprof labels changed
	MajorRename   Major = 20 // *Rename: an already written Location got its names late
	MajorPause    Major = 21 // *Pause: recording was paused (trueprof ctl pause) and resumed
	// MajorCalibration: *CalibrationRecord, the in-run calibration fitted
	// at the end of the recording.
	MajorCalibration Major = 22
	// The records of an aggregated recording (tree.go).
	MajorTreeThread Major = 23 // *TreeThread: a thread incarnation's tree
	MajorTreeNode   Major = 24 // *TreeNode: a tree node's deltas since its previous record
	MajorTreeMark   Major = 25 // *TreeMark: the end of a tree snapshot, or a reset
)

// Record is implemented by every record type of this package. Readers
// return pointers to the concrete types listed with the Major codes.
type Record interface {
	Major() Major
}

// String interns a string: later records refer to it by ID. ID 0 is the
// empty string and is never written.
type String struct {
	ID   uint32
	Text string
}

// Module records that a file (or anonymous/JIT memory) was mapped
// executable into process PID: addresses in [Start, Start+Len) come from
// file offset PgOff onwards. It mirrors PERF_RECORD_MMAP2.
type Module struct {
	Time    uint64
	PID     uint32
	TID     uint32
	Start   uint64
	Len     uint64
	PgOff   uint64
	Prot    uint32
	Flags   uint32
	Path    uint32 // string id of the file name, e.g. "/usr/lib/x86_64-linux-gnu/libc.so.6"
	BuildID []byte // GNU build id, when known
}

// Comm records a thread's name (PERF_RECORD_COMM). Exec is set when the
// name changed because the process called exec.
type Comm struct {
	Time uint64
	PID  uint32
	TID  uint32
	Name uint32 // string id
	Exec bool
}

// Fork records the creation of thread TID in process PID by thread PTID of
// process PPID (PERF_RECORD_FORK). A new process has PID == TID.
type Fork struct {
	Time uint64
	PID  uint32
	PPID uint32
	TID  uint32
	PTID uint32
}

// Exit records the end of thread TID of process PID (PERF_RECORD_EXIT).
type Exit struct {
	Time uint64
	PID  uint32
	PPID uint32
	TID  uint32
	PTID uint32
}

// Line is one frame of a resolved address. A Location holds several when
// functions were inlined.
type Line struct {
	Function uint32 // string id of the (demangled) function name; 0 if unknown
	File     uint32 // string id of the source file; 0 if unknown
	Line     uint32 // source line; 0 if unknown
}

// Location is a code address resolved when the trace was recorded, so that
// reports work after the binaries are gone. Several processes may share a
// Location when they map the same file.
type Location struct {
	ID      uint32 // 1-based; 0 means "no location"
	Address uint64 // the address in the process that first produced it
	Module  uint32 // string id of the module: a file path, "[kernel.kallsyms]", "[jit]", ...
	Offset  uint64 // address relative to the module (file offset for files)
	Lines   []Line // innermost (inlined) first, the physical function last; empty if unresolved
}

// StackNode is a node of the shared-prefix stack tree: the call
// stack made of Location, called from the stack of node Parent. Parent 0 is
// the root (the outermost frame). Each node is written once, before use.
type StackNode struct {
	ID       uint32 // 1-based
	Parent   uint32
	Location uint32
}

// Sample flags. They are stored in the low five bits of a Sample
// record's minor code; the Writer uses the top three bits for its
// encoding and rejects flags that use them.
const (
	// SampleTruncated: the call chain did not reach a thread entry point
	// (code without frame pointers, or a chain longer than the kernel's
	// limit), so the stack lacks its outermost callers.
	SampleTruncated uint8 = 1 << iota
	// SampleKernel: the sampled instruction was in the kernel.
	SampleKernel
)

// Bits 2-4 of Sample.Flags hold the UnwindReason of a truncated sample:
// Reason returns it. Readers that predate them ignore them.
const (
	SampleReasonShift = 2
	SampleReasonMask  = 0x1c
)

// UnwindReason says why a sample's user stack stops short of the thread's
// entry. Its values fit SampleReasonMask.
type UnwindReason uint8

// Unwind reasons, in the order of their codes.
const (
	UnwindNone        UnwindReason = iota // complete, or no reason recorded (older traces)
	UnwindFPEnded                         // the frame-pointer chain ended before an entry
	UnwindNoCFI                           // code with neither CFI nor a usable frame pointer
	UnwindStackShort                      // the stack copy ended before the entry
	UnwindStackSwitch                     // the stack moved (sigaltstack, coroutines)
	UnwindBadFrame                        // a frame or its return address was corrupt
	UnwindUnmapped                        // the walk reached an address no mapping covers
	UnwindMaxDepth                        // the walk hit its frame limit
	// NumUnwindReasons is the number of reasons, for arrays indexed by them.
	NumUnwindReasons = 8
)

var unwindReasonNames = [NumUnwindReasons]string{"", "fp-ended", "no-cfi", "stack-short", "stack-switch", "bad-frame", "unmapped", "max-depth"}

// String returns the reason's name as reports show it: "" for
// UnwindNone, "fp-ended", "no-cfi", "stack-short", "stack-switch",
// "bad-frame", "unmapped" or "max-depth".
func (r UnwindReason) String() string {
	if int(r) < len(unwindReasonNames) {
		return unwindReasonNames[r]
	}
	return "reason-" + strconv.Itoa(int(r))
}

// Truncations yields the reasons of by, counts of truncated samples
// indexed by UnwindReason, whose counts are not zero, in the order of the
// reasons, with their counts; UnwindNone (traces without reasons) is
// left out. Every summary of truncations names them this way: the
// reports' header and record's summary.
func Truncations(by *[NumUnwindReasons]uint64) iter.Seq2[UnwindReason, uint64] {
	return func(yield func(UnwindReason, uint64) bool) {
		for r, n := range by {
			if n > 0 && r != int(UnwindNone) && !yield(UnwindReason(r), n) {
				return
			}
		}
	}
}

// ReasonFlags returns the flags of a truncated sample with reason
// r in bits 2-4.
func ReasonFlags(r UnwindReason) uint8 {
	return uint8(r) << SampleReasonShift & SampleReasonMask
}

// Reason returns the UnwindReason stored in a sample's flags.
func (s *Sample) Reason() UnwindReason {
	return UnwindReason(s.Flags & SampleReasonMask >> SampleReasonShift)
}

// Sample is one sample of the sampling event. Stack is the leaf
// StackNode: the frames from the sampled instruction to the outermost
// caller are found by following Parent links.
type Sample struct {
	Time   uint64
	PID    uint32
	TID    uint32
	CPU    uint32
	Period uint64 // event count this sample stands for (ns for cpu-clock)
	Stack  uint32
	Flags  uint8
}

// LostKind says where records were lost; it is the Lost record's minor code.
type LostKind uint8

// Lost kinds.
const (
	LostKernel   LostKind = 1 // the kernel ring buffer was full (PERF_RECORD_LOST)
	LostWrap     LostKind = 2 // wrap mode discarded the oldest samples
	LostSize     LostKind = 3 // normal mode reached its size limit
	LostUnparsed LostKind = 4 // malformed kernel records that were skipped
)

// Lost counts records that were lost. Reports show the sums.
type Lost struct {
	Time  uint64
	Kind  LostKind
	Count uint64
}

// Throttle records that the kernel throttled (or, with Unthrottle,
// resumed) sampling because interrupts took too long (PERF_RECORD_THROTTLE).
type Throttle struct {
	Time       uint64
	Unthrottle bool
}

// End is the last record of a trace whose recorder stopped cleanly.
type End struct {
	Time     uint64
	ExitCode int32  // the launched target's exit status, or -1
	Reason   uint32 // string id: why recording stopped ("exited", "signal", "duration", "size", "ctl"; "snapshot" in a ctl snapshot)
	// Detached is when the probes came off (at most Time): the calls
	// still open then never showed their exit. 0 when nothing was probed
	// or the recorder predates the field.
	Detached uint64
}

// Major returns MajorString. The Major methods give each record type
// its major code, the first byte of its encoding (docs/trace-format.md).
func (*String) Major() Major { return MajorString }

// Major returns MajorModule.
func (*Module) Major() Major { return MajorModule }

// Major returns MajorComm.
func (*Comm) Major() Major { return MajorComm }

// Major returns MajorFork.
func (*Fork) Major() Major { return MajorFork }

// Major returns MajorExit.
func (*Exit) Major() Major { return MajorExit }

// Major returns MajorLocation.
func (*Location) Major() Major { return MajorLocation }

// Major returns MajorStack.
func (*StackNode) Major() Major { return MajorStack }

// Major returns MajorSample.
func (*Sample) Major() Major { return MajorSample }

// Major returns MajorLost.
func (*Lost) Major() Major { return MajorLost }

// Major returns MajorThrottle.
func (*Throttle) Major() Major { return MajorThrottle }

// Major returns MajorEnd.
func (*End) Major() Major { return MajorEnd }

// String returns the name of the record type of major code m, or
// "major N" for codes this version does not know.
func (m Major) String() string {
	switch m {
	case MajorString:
		return "String"
	case MajorModule:
		return "Module"
	case MajorComm:
		return "Comm"
	case MajorFork:
		return "Fork"
	case MajorExit:
		return "Exit"
	case MajorLocation:
		return "Location"
	case MajorStack:
		return "StackNode"
	case MajorSample:
		return "Sample"
	case MajorLost:
		return "Lost"
	case MajorThrottle:
		return "Throttle"
	case MajorEnd:
		return "End"
	case MajorEvent:
		return "Event"
	case MajorSwitch:
		return "Switch"
	case MajorProbe:
		return "Probe"
	case MajorAdjust:
		return "Adjust"
	case MajorIRQ:
		return "IRQ"
	case MajorGoID:
		return "GoID"
	case MajorCounter:
		return "Counter"
	case MajorLabels:
		return "Labels"
	case MajorCalibration:
		return "Calibration"
	case MajorRename:
		return "Rename"
	case MajorPause:
		return "Pause"
	case MajorTreeThread:
		return "TreeThread"
	case MajorTreeNode:
		return "TreeNode"
	case MajorTreeMark:
		return "TreeMark"
	}
	return "major " + strconv.Itoa(int(m))
}

// EventKind is an Event's minor code.
type EventKind uint8

// Event kinds.
const (
	EventEntry EventKind = 1
	EventExit  EventKind = 2
)

// Event is a function entry or exit on thread TID, from a compiled-in
// hook or a uprobe. Function is the Location of the function's first
// instruction (also for exits, whatever instruction was probed).
type Event struct {
	Time     uint64
	PID      uint32
	TID      uint32
	Kind     EventKind
	Function uint32
}

// Switch records that thread TID was switched out of (Out) or into CPU;
// Preempt tells an involuntary switch-out from a blocking one.
type Switch struct {
	Time    uint64
	PID     uint32
	TID     uint32
	CPU     uint32
	Out     bool
	Preempt bool
}

// ProbeMech is how a function is probed: a Probe's minor code.
type ProbeMech uint8

// Probe mechanisms.
const (
	ProbeHook    ProbeMech = 1 // -finstrument-functions hooks
	ProbeEntry   ProbeMech = 2 // uprobe at the function's entry
	ProbeReturn  ProbeMech = 3 // uretprobe (return address hijack)
	ProbeRetInsn ProbeMech = 4 // uprobe on a RET instruction (Go)
	ProbeDynamic ProbeMech = 5 // entry uprobe placed lazily under --root
	// ProbeRemoved says the function's probe came off at Time while the
	// target ran (trueprof ctl trace remove, root): its calls open then
	// end then, and its later calls are not recorded.
	ProbeRemoved ProbeMech = 6
	// ProbeCallSite: uprobes at the function's callers, on its call
	// instructions (entries) and on the instructions they return to
	// (exits), or, for a call its caller's epilogue follows, no exit
	// probe: the caller's exit ends the call (uprobe.CallSite).
	ProbeCallSite ProbeMech = 7
)

// Probe records that a probe of kind Mech was placed at Address of
// process PID for Function (a Location id) at Time.
type Probe struct {
	Time     uint64
	PID      uint32
	Function uint32
	Address  uint64
	Mech     ProbeMech
	// Stepped: the kernel single-steps the entry probe's instruction out
	// of line instead of emulating it, which costs several times more
	// (Calibration.Sites). An appended field: older traces read false.
	Stepped bool
	// CallSite: the function is probed at its callers (ProbeCallSite;
	// a lazy probe, ProbeDynamic, may be too): its exits cost
	// Calibration.Sites' call-site exit, and its calls that its caller's
	// exit ends are no repair. Appended after Stepped; older traces read
	// false.
	CallSite bool
	// RetInsn: the function's exits are uprobes on its RET instructions
	// and tail jumps (ProbeRetInsn; a lazy probe, ProbeDynamic, may be
	// too), each single-stepped: they cost Calibration.Sites' RET-probe
	// exit. Appended after CallSite; older traces read false (their
	// lazy probes' exits were taken as return probes).
	RetInsn bool
}

// Adjust records time thread TID spent in the profiler rather than in its
// own code (a full ring, attaching probes), to be removed from every open
// call, and events it could not record (adjust-time events).
// Time is when the pause ended: it lasted from Time-Duration to Time.
type Adjust struct {
	Time     uint64
	PID      uint32
	TID      uint32
	Duration uint64 // ns
	Dropped  uint64 // events lost
}

// Major returns MajorEvent.
func (*Event) Major() Major { return MajorEvent }

// Major returns MajorSwitch.
func (*Switch) Major() Major { return MajorSwitch }

// Major returns MajorProbe.
func (*Probe) Major() Major { return MajorProbe }

// Major returns MajorAdjust.
func (*Adjust) Major() Major { return MajorAdjust }

// IRQKind is an IRQ's minor code.
type IRQKind uint8

// IRQ kinds.
const (
	IRQHard IRQKind = 1 // a hardware interrupt handler (irq:irq_handler_entry/exit)
	IRQSoft IRQKind = 2 // a softirq (irq:softirq_entry/exit)
)

// IRQ records an interrupt that was handled on CPU while thread TID of
// PID was running there (the IN metric). Time is when the handler
// ended; it ran for Duration ns before that. Vector is the IRQ number or
// the softirq vector.
type IRQ struct {
	Time     uint64
	PID      uint32
	TID      uint32
	CPU      uint32
	Kind     IRQKind
	Vector   uint32
	Duration uint64
}

// GoID records that thread TID of PID began running goroutine GoID at
// Time (Go's scheduler switched to it); it runs it until the thread's
// next GoID record or until it is switched to another goroutine.
type GoID struct {
	Time uint64
	PID  uint32
	TID  uint32
	GoID uint64
}

// CounterKind is a Counter's minor code: which counter.
type CounterKind uint8

// Counter kinds.
const (
	CounterPageFaults CounterKind = 1 // page faults, minor and major (PERF_COUNT_SW_PAGE_FAULTS)
	CounterMigrations CounterKind = 2 // moves to another CPU (PERF_COUNT_SW_CPU_MIGRATIONS)
)

// Counter records thread TID's total of counter Kind at Time, counted by
// the kernel for that thread alone since recording began (or since the
// thread was created).
type Counter struct {
	Time  uint64
	PID   uint32
	TID   uint32
	Kind  CounterKind
	Value uint64
}

// Major returns MajorIRQ.
func (*IRQ) Major() Major { return MajorIRQ }

// Major returns MajorGoID.
func (*GoID) Major() Major { return MajorGoID }

// Major returns MajorCounter.
func (*Counter) Major() Major { return MajorCounter }

// Labels records that from Time, goroutine GoID of process PID carries
// the runtime/pprof labels Pairs (an empty list clears them), until its
// next Labels record: a goroutine's labels say which request or job its
// samples and calls served, and reports filter on them.
type Labels struct {
	Time uint64
	PID  uint32
	GoID uint64
	// Pairs are the labels in the order the program's label set holds
	// them (sorted by key).
	Pairs []LabelPair
	// Truncated says the recorder copied only part of the set: some
	// labels, or the ends of long keys or values, are missing.
	Truncated bool
}

// LabelPair is one label, Key=Value, as String ids.
type LabelPair struct {
	Key, Value uint32
}

// Major returns MajorLabels.
func (*Labels) Major() Major { return MajorLabels }

// Rename gives the already written Location ID the frames Lines, which
// the recorder learned only after writing it: JIT code named by a perf
// map or jitdump that its runtime wrote late (at exit, or on demand). The
// location's Address, Module and Offset stay. A reader applies it to every
// use of the location, before and after the record; a reader that does
// not know it (or a trace cut off before it) keeps the location as first
// written, so the stack tree and the samples never depend on it.
type Rename struct {
	ID    uint32
	Lines []Line // innermost (inlined) first, the physical function last
}

// Major returns MajorRename.
func (*Rename) Major() Major { return MajorRename }

// CalibrationRecord carries a calibration measured during the recording
// (the in-run calibration, fitted from the bursts the hook library ran in
// the target), written once at its end. Readers use it in place of the
// header's Calibration. It is stored as the Calibration's JSON, so that
// fields can be added without a format change.
type CalibrationRecord struct {
	Calibration *Calibration
}

// Major returns MajorCalibration.
func (*CalibrationRecord) Major() Major { return MajorCalibration }

// Pause records an interval in which recording was paused (trueprof ctl
// pause, then resume, stop or snapshot): no samples or events were
// written in it, and Dropped counts those the recorder threw away. Time
// is when the pause ended: it lasted from Time-Duration to Time, as for
// Adjust. Module, thread and switch records go on while paused, so
// the addresses of samples after it still resolve.
type Pause struct {
	Time     uint64
	Duration uint64 // ns
	Dropped  uint64 // samples and events not written
}

// Major returns MajorPause.
func (*Pause) Major() Major { return MajorPause }
