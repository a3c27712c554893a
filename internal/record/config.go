package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
	"trueprof/internal/unwind"
)

// Config selects what to record and how. Run validates it (Validate)
// before anything starts.
type Config struct {
	Output    string // trace file path
	Event     perf.Event
	Freq      uint64 // samples per second (used when Period is 0); 0 with Period 0 means 999
	Period    uint64 // events per sample
	Mode      trace.Mode
	SizeLimit int64         // bytes; for normal and wrap modes, ignored in continuous mode
	Command   []string      // command to launch, or
	PID       int           // process to attach to
	Duration  time.Duration // stop after this long; 0 means until the target exits
	Log       io.Writer     // warnings; os.Stderr if nil
	// RingPages is the number of data pages per CPU ring (power of two);
	// 0 sizes the rings to the sampling rate (ringPages).
	RingPages int
	// CallGraph is how user stacks are unwound; empty means
	// CallGraphAuto.
	CallGraph CallGraph
	// StackBytes is the user stack copied per sample for dwarf and auto,
	// a multiple of 8 up to perf.MaxUserStack; 0 means the kernel's
	// largest (perf.MaxUserStack), or perf's 8192 without the right to
	// lock more than 512 KiB of ring per CPU (defaultStackBytes).
	StackBytes int

	// Trace lists glob patterns of functions to instrument ("name" or
	// "module:name"); with hooks, an empty list means every instrumented
	// function.
	Trace []string
	// Mech is the probe mechanism. MechAuto (empty) takes hooks when the
	// command was built with -finstrument-functions, uprobes when Trace
	// or Root name functions, and no probes otherwise.
	Mech Mech
	// Root instruments only the subgraph of this function (Scheme B).
	Root string
	// NoSampling records probes and side records but no samples.
	NoSampling bool
	// ProbesAlone sets NoSampling when the recording turns out to place
	// probes (hooks compiled into the command included): the command
	// line's default, where sampling beside probes is asked for by name.
	ProbesAlone bool
	// Calibration returns this machine's calibration of a probe
	// mechanism, measuring it if needed; it is called once the mechanism
	// is chosen, and its result is copied into the trace header. Nil
	// records without calibration (reports then show raw times).
	Calibration func(Mech) (*trace.Calibration, error)
	// CalibrateInRun makes a hooks recording calibrate itself: the hook
	// library runs calibration bursts in each process of the target when
	// it loads and when it exits, their events stay out of the profile
	// and their fit is written at the end of the trace, where reports
	// use it in place of the header's (docs/calibration.md, "In-run
	// calibration"). Calibration is then not called for hooks.
	CalibrateInRun bool
	// UprobeCalibration calibrates a uprobe recording in the run when
	// CalibrateInRun is set: a burst once the probes are in place and
	// another when recording ends, whose fit is written at the end of the
	// trace as for hooks (docs/calibration.md, "In-run calibration for
	// uprobes"); Calibration is then not called for uprobes. Nil: uprobe
	// recordings use Calibration.
	UprobeCalibration UprobeCalibrator
	// Aggregate folds the events into call trees while recording and
	// writes their snapshots, every Snapshot (DefaultSnapshot when 0),
	// instead of the events (aggregate.go); TreeMemory bounds the trees'
	// memory in bytes (0: unbounded).
	Aggregate  bool
	Snapshot   time.Duration
	TreeMemory int64
	// Stdout receives the launched target's standard output; os.Stdout
	// if nil.
	Stdout io.Writer
	// NoGoroutines records a Go target's samples and events per thread
	// only. By default a uprobe on the Go scheduler records which
	// goroutine each thread runs (trace.GoID), at about a microsecond
	// of the target's time per goroutine switch.
	NoGoroutines bool
	// started is called once the events count (tests).
	started func()
}

// Mech is a probe mechanism: how a recording sees function entries and
// exits.
type Mech string

// The probe mechanisms (Config.Mech).
const (
	// MechAuto lets Run choose (Config.Mech); as a chosen mechanism it
	// means that no function is probed.
	MechAuto Mech = ""
	// MechHook is the hook library, preloaded into a command built with
	// -finstrument-functions.
	MechHook Mech = "hook"
	// MechUprobe is uprobes placed on an unmodified binary.
	MechUprobe Mech = "uprobe"
)

// CallGraph is how user stacks are unwound.
type CallGraph string

// The call graph modes (Config.CallGraph).
const (
	// CallGraphAuto unwinds with each module's CFI, and with frame
	// pointers where code has none.
	CallGraphAuto CallGraph = "auto"
	// CallGraphDWARF unwinds each module's CFI over a copy of the user
	// stack, as perf --call-graph dwarf does but at record time.
	CallGraphDWARF CallGraph = "dwarf"
	// CallGraphFP is the kernel's frame-pointer walk.
	CallGraphFP CallGraph = "fp"
)

// maxRingPages bounds Config.RingPages (4 TiB of 4 KiB pages): perf -m
// takes no more either.
const maxRingPages = 1 << 30

// ErrConfig is wrapped by every error of Validate.
var ErrConfig = errors.New("record")

// Validate fills in the defaults of c that need no look at the machine
// (Freq, Mode, CallGraph) and reports the first setting that is wrong or
// contradicts another, as an error wrapping ErrConfig. Run calls it;
// callers may too, to report a bad setting before anything starts.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case c.Output == "":
		return bad("no trace file to write")
	case len(c.Command) > 0 && c.PID != 0:
		return bad("give a command to launch or a pid to attach to, not both")
	case len(c.Command) == 0 && c.PID == 0:
		return bad("give a command to launch or a pid to attach to")
	case c.PID < 0:
		return bad("pid %d: want a process id", c.PID)
	case c.Duration < 0:
		return bad("duration %v: want a positive duration, or 0 to record until the target exits", c.Duration)
	}
	if c.Freq == 0 && c.Period == 0 {
		c.Freq = 999
	}
	switch c.Mode {
	case "":
		c.Mode = trace.ModeNormal
	case trace.ModeNormal, trace.ModeWrap:
	case trace.ModeContinuous:
		c.SizeLimit = 0
	default:
		return bad("mode %q: want normal, wrap or continuous", c.Mode)
	}
	if c.SizeLimit < 0 {
		return bad("size limit %d: want a number of bytes, or 0 for none", c.SizeLimit)
	}
	switch c.Mech {
	case MechAuto, MechUprobe:
	case MechHook:
		if len(c.Command) == 0 {
			return bad("mechanism hook needs a launched command: hooks are loaded at exec; attach with uprobes")
		}
	default:
		return bad("mechanism %q: want hook or uprobe", c.Mech)
	}
	if c.Mech == MechUprobe && len(c.Trace) == 0 && c.Root == "" {
		return bad("uprobes need patterns to trace (or a root): probing every function of an unmodified binary is what sampling is for")
	}
	switch c.CallGraph {
	case "":
		c.CallGraph = CallGraphAuto
	case CallGraphAuto, CallGraphDWARF:
	case CallGraphFP:
		if c.StackBytes != 0 {
			return bad("call graph fp copies no stack to size (%d bytes)", c.StackBytes)
		}
	default:
		return bad("call graph %q: want fp, dwarf or auto", c.CallGraph)
	}
	if c.StackBytes != 0 && (c.StackBytes < 8 || c.StackBytes > perf.MaxUserStack || c.StackBytes%8 != 0) {
		return bad("stack copy of %d bytes: want a multiple of 8 from 8 to %d", c.StackBytes, perf.MaxUserStack)
	}
	if c.RingPages < 0 || c.RingPages > maxRingPages || bits.OnesCount(uint(c.RingPages)) > 1 {
		return bad("%d ring pages: want a power of two up to %d, or 0 to size the rings to the sampling rate", c.RingPages, maxRingPages)
	}
	return nil
}

// ParseCallGraph reads a call graph as perf --call-graph writes it: a
// mode, for dwarf and auto with ",SIZE", the stack bytes copied per
// sample. Validate checks the values.
func ParseCallGraph(s string) (CallGraph, int, error) {
	mode, size, sized := strings.Cut(s, ",")
	if !sized {
		return CallGraph(mode), 0, nil
	}
	n, err := strconv.Atoi(size)
	if err != nil || n <= 0 {
		return "", 0, fmt.Errorf("%w: call graph %q: want MODE or MODE,BYTES", ErrConfig, s)
	}
	return CallGraph(mode), n, nil
}

// userStackBytes is how much of the user stack each sample copies with
// --call-graph fp, so the resolver can find the caller of a function
// sampled before it set up its frame: enough for the return address of
// leaves with modest locals.
const userStackBytes = 512

// defaultStackBytes is the stack copy of the dwarf and auto call graphs:
// the kernel's largest, with which Debian's sqlite3 (a 6.3 KB frame in
// its main) and gcc's cc1 (deep recursion) reach their entry in 99.8% of
// their samples, against 0.1% and 94% with perf's 8 KiB. The kernel
// copies only the stack in use, so a larger copy costs ring space, not
// time; the ring reader (ringreader.go) keeps the rings empty. Without
// the right to lock rings beyond 512 KiB (unlimited false), a ring holds
// only 8 such samples and as user nobody python3 lost 2% of its
// records: there the copy stays at perf's 8 KiB (no losses).
func defaultStackBytes(unlimited bool) int {
	if unlimited {
		return perf.MaxUserStack
	}
	return 8192
}

// unwindMode is how the resolver walks user stacks where code has no CFI
// (g is not CallGraphFP, whose stacks the kernel walks).
func (g CallGraph) unwindMode() unwind.Mode {
	if g == CallGraphDWARF {
		return unwind.ModeDWARF
	}
	return unwind.ModeAuto
}

// stackBytes is the user stack each sample copies under cfg.
func stackBytes(cfg Config) int {
	switch {
	case cfg.CallGraph == CallGraphFP:
		return userStackBytes
	case cfg.StackBytes == 0:
		return defaultStackBytes(perf.UnlimitedRings())
	}
	return cfg.StackBytes
}

// UprobeCalibrator runs a uprobe recording's in-run calibration bursts
// and fits them (calibrate.UprobeInRun).
type UprobeCalibrator interface {
	// Burst runs one calibration burst; an error says why it failed,
	// and the recording goes on.
	Burst(ctx context.Context) error
	// Calibration returns the fit of the bursts, refused (with the
	// reason) when none completed or the fit is bad.
	Calibration() *trace.Calibration
}
