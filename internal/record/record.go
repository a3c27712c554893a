// Package record runs a sampling session: it launches or attaches to a
// target, opens per-CPU perf events on it, drains their ring buffers in
// one poll loop, resolves addresses to names while the binaries are still
// there, and writes everything to a trace file.
//
//	res, err := record.Run(ctx, record.Config{
//		Output:  "trueprof.trace",
//		Event:   ev, // from perf.ParseEvent
//		Freq:    999,
//		Mode:    trace.ModeNormal,
//		Command: []string{"./prog", "arg"},
//	})
package record

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/hook"
	"trueprof/internal/perf"
	"trueprof/internal/resolve"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// Result summarises a finished recording.
type Result struct {
	ExitCode int    // the launched target's exit status (128+signal if killed); 0 when attached
	Samples  uint64 // samples written
	Events   uint64 // function entries and exits written
	Lost     uint64 // samples and events lost in the kernel or refused at the --size limit
	// Discarded counts, in wrap mode, the samples and events written and
	// then dropped, the oldest first, to keep the trace within --size.
	Discarded uint64
	Bytes     int64  // trace file size
	Reason    string // why recording stopped: "exited", "signal", "duration", "size", "ctl"
	UserOnly  bool   // kernel sampling was not permitted
	// Truncated counts the samples whose stack stops short of the
	// thread's entry, by reason.
	Truncated [trace.NumUnwindReasons]uint64
	// RecorderCPU is the CPU time of the recording process (user and
	// system, the launched target excluded).
	RecorderCPU time.Duration
}

// event is one opened perf event; ring is set on the events that own one.
type event struct {
	fd   int
	ring *perf.Ring
}

// session is the state of one recording.
type session struct {
	cfg     Config
	log     io.Writer
	events  []event
	rings   []*perf.Ring
	ringFDs []int // the events that own rings
	w       *trace.Writer
	res     *resolve.Resolver
	pending []perf.Record
	// sources are the probe mechanisms of an instrumented recording, and
	// pendingEvents their events not yet processed.
	sources       []eventSource
	pendingEvents []instrEvent
	// eventsDue is the earliest event of the slabs the batch sources
	// hold ready for a later horizon (collectEvents), 0 when none.
	eventsDue uint64
	// labelSets holds the label changes of pending eventLabels events,
	// by the event's module, a key from nextLabel (which wraps after
	// 2^32 changes, each processed within a drain or two).
	labelSets map[uint32]uprobe.LabelChange
	nextLabel uint32
	// The target: launched (tgt, until released held in the exec
	// wrapper) or attached, and its pid.
	tgt      *target
	released bool
	// releasedAt is when the launched target was released (perf.Now).
	releasedAt uint64
	pid        int
	// file is the trace file until finish closes it, hdr its header.
	file *os.File
	hdr  *trace.Header
	// mech is the probe mechanism chosen (chooseMech), MechAuto for none;
	// planner places probes as the data path reports what it sees (nil
	// unless uprobes are planned; uprobes is the same planner, for its
	// start); region is the hooks' shared memory until their source owns
	// it.
	mech      Mech
	notedFork bool // noteFork said that children are not probed
	planner   planner
	uprobes   *uprobePlanner
	region    *hook.Region
	// pauses finds the waits of the target's threads while probes are
	// placed in it (pauses.go); nil without uprobes.
	pauses *pauseWatch
	// poller is the loop's, while it runs: sources added then join it.
	poller   *perf.Poller
	detached uint64      // when the probes came off (probes.go detach)
	eventRec trace.Event // reused by processEvent
	// cal collects the in-run calibration bursts (Config.CalibrateInRun
	// with hooks); nil otherwise.
	cal       *calfit.Collector
	calBursts time.Duration // the uprobe calibration bursts' time (calibrationBurst)
	// gained says a sampling recording gained uprobes (ctl trace add,
	// root), and gainedCalibrated that it was calibrated for them
	// (calibrateGained).
	gained, gainedCalibrated bool
	sampleRec                trace.Sample
	result                   Result
	full                     bool // the size limit was reached
	// sampleType is the events' PERF_SAMPLE_* set, which Decode needs.
	sampleType uint64
	// reader empties the sampling rings (ringreader.go); freed are the
	// stack buffers of processed samples, to give back to it.
	reader ringReader
	freed  [][]byte
	// spare is the chunks of the reader's previous queue, cleared, which the
	// next take gives it back (ringReader.take).
	spare [][]perf.Record
	// sortBuf is sortByTime's other buffer.
	sortBuf    []perf.Record
	warnedFull bool
	// threads, irq and counters follow the target's threads, their
	// interrupts and their per-thread counters (threads.go, irq.go,
	// counters.go), side reads the rings of the last two (siderings.go).
	threads targetThreads
	irq     irqState
	// irqOpening is the interrupt tracepoints being opened, until
	// adoptIRQ takes them (irq.go).
	irqOpening *irqOpening
	// irqAbandoned: recording stopped before they were open.
	irqAbandoned bool
	// ringsOpening is the sampling rings being mapped, until openEvents
	// takes them (takeRings).
	ringsOpening *ringsOpening
	// tcOpening is the in-kernel counting being loaded, until the first
	// thread's counters take it (counters.go).
	tcOpening *threadCountsOpening
	counters  counterState
	side      sideRings
	loss      samplingLoss // the sampling rings' losses (lost.go)
	// ctl serves trueprof ctl (control.go); hooks filters the hooks'
	// events by function (ctl trace remove, liveprobes.go).
	ctl   controlState
	hooks hookFilter
	agg   *aggregator // record --aggregate's trees; nil without
}

// logOrStderr is where warnings go: w, or os.Stderr if nil.
func logOrStderr(w io.Writer) io.Writer {
	if w == nil {
		return os.Stderr
	}
	return w
}

// reorderSlack is how far behind the present the loop processes records.
// Records from different CPU rings and probe sources interleave in time,
// and every pass has the ring reader read all of them once more (take),
// so only records still being written when a pass starts can be missing:
// the kernel writes a record within microseconds of its time, with
// preemption off. Waiting this long before processing lets a mapping be
// known before the samples and events that need it; the hooks' events
// and the sources collected by goroutines come later than that anyway,
// which is the safe side (their mappings are in).
// It also bounds the backlog. 5 ms, as before, held back nearly every
// event of a short hooked run (bench/percall's default load: 400,000
// events in 5 ms of the target's clock) until the target had exited,
// when the loop, the decoder and zstd processed them on both cores; at
// 1 ms they start on the core the target leaves idle. Whole command,
// medians of 61 interleaved runs: 33.7 ms at 5 ms, 32.2 ms at 1 ms
// (uftrace 30.0 ms).
const reorderSlack = 1 * time.Millisecond

// Run records until the target exits, the duration passes, the size limit
// is reached in normal mode, or ctx is cancelled (SIGINT/SIGTERM). The
// trace is complete and valid in every case. It reads as its phases:
// settle the configuration, launch the command or attach to the process,
// open the events and the trace, record, and finish.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	// The kernel's first per-task event after a second without any waits
	// for an RCU grace period (perf_sched_events, perf.RingAttr): 9-16 ms
	// here, in every recording started on its own. LostSupported's probe
	// is such an event: opened first, on a goroutine of its own, its wait
	// overlaps the start instead of delaying the sampling events.
	go perf.LostSupported()
	defer holdCollector(cfg.collectorPercent())()
	s, err := newSession(cfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	// What loads in the kernel on goroutines of its own (the BPF thread
	// counters, the sampling rings, the interrupt tracepoints: 2-3 ms of
	// CPU each) starts before the launch, the thread counters first: the
	// release waits for them last, and an idle P takes the goroutine
	// started first (the last one waits in runnext until this one
	// blocks). Started last, the counters began 2.7 ms late and the
	// release came 0.4 ms later (medians of 31 interleaved runs).
	s.startThreadCounts()
	if ringEvents {
		s.startRings()
	}
	s.startIRQ()
	if err := s.launchOrAttach(); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	if err := s.record(ctx); err != nil {
		return nil, err
	}
	// An interrupted recording still calibrates its end.
	s.calibrationBurst(context.WithoutCancel(ctx), "end")
	return s.finish()
}

// newSession settles cfg: validated (Config.Validate), the probe
// mechanism chosen (chooseMech), the stack copy and the rings sized to
// this machine, and a dummy event instead of samples when only probes
// and side records are wanted.
func newSession(cfg Config) (*session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mech, err := chooseMech(cfg, logOrStderr(cfg.Log))
	if err != nil {
		return nil, err
	}
	if err := checkAggregate(&cfg, mech); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if mech != MechAuto && cfg.ProbesAlone {
		cfg.NoSampling = true
	}
	unlimited := perf.UnlimitedRings()
	if cfg.StackBytes == 0 && cfg.CallGraph != CallGraphFP {
		cfg.StackBytes = defaultStackBytes(unlimited)
	}
	log := logOrStderr(cfg.Log)
	if cfg.RingPages == 0 {
		cpus, err := perf.OnlineCPUs()
		if err != nil {
			return nil, err
		}
		cfg.RingPages = ringPages(cfg, len(cpus), unlimited)
		if !unlimited && cfg.CallGraph != CallGraphFP && !cfg.NoSampling {
			held := float64(cfg.RingPages*os.Getpagesize()) / float64(maxSampleBytes(cfg))
			fmt.Fprintf(log, "trueprof: without CAP_PERFMON or CAP_IPC_LOCK the rings hold only about %.0f samples with %d-byte stack copies: records may be lost when the recorder cannot run for a few milliseconds (--call-graph fp or a lower -F avoid it)\n",
				held, cfg.StackBytes)
		}
	}
	if cfg.NoSampling {
		// Side records only: a dummy event never samples.
		dummy, err := perf.ParseEvent("dummy")
		if err != nil {
			return nil, err
		}
		cfg.Event, cfg.Freq, cfg.Period = dummy, 0, 1
	}
	return &session{cfg: cfg, log: log, mech: mech}, nil
}

// close releases whatever the session still holds, however Run ends: a
// launched target never released exits, the trace file closes, probes of
// every kind (planned, lazily placed, goroutine and label switches) come
// off, and the events close.
func (s *session) close() {
	if s.tgt != nil && !s.released {
		s.tgt.abort()
	}
	s.stopControl()
	if s.file != nil {
		s.file.Close()
	}
	s.closeSources()
	if o := s.irqOpening; o != nil {
		// Never adopted (still opening when recording stopped, or Run
		// failed first): what is open so far is closed with the rest.
		// The opening stops before its next tracepoint: each waits for
		// the kernel's event_mutex, which a previous recording's
		// teardown holds for 35-44 ms a tracepoint (closeEventFDs), and
		// waiting for all of them kept back-to-back recordings 3-86 ms
		// at their end (4 of 8 runs of bench/percall's default load
		// over 25 ms); one still waiting for the teardown to end is
		// not waited for.
		s.events = append(s.events, o.stopOpening()...)
	}
	s.dropThreadCounts()
	s.dropRings()
	s.closeEvents()
}

// launchOrAttach prepares the probes the target must start with, then
// launches the command, held in the exec wrapper until record releases
// it, or takes the process to attach to.
func (s *session) launchOrAttach() error {
	lo, err := s.prepareProbes(s.mech, s.cfg.PID)
	if err != nil {
		return err
	}
	lo.stdout = s.cfg.Stdout
	s.pid = s.cfg.PID
	if len(s.cfg.Command) == 0 {
		return nil
	}
	if s.tgt, err = launch(s.cfg.Command, lo); err != nil {
		return fmt.Errorf("launching %s: %w", s.cfg.Command[0], err)
	}
	s.pid = s.tgt.pid()
	return nil
}

// open opens what records, before the target counts: the perf events
// (kernel samples where permitted), the trace file with its header, the
// resolver, the probes, and the goroutine switches of a Go target.
func (s *session) open() error {
	launched := s.tgt != nil
	kernel := true
	counted, err := s.openEvents(kernel)
	if errors.Is(err, perf.ErrPermission) {
		s.closeEvents()
		kernel = false
		if counted, err = s.openEvents(kernel); err != nil {
			return err
		}
		fmt.Fprintf(s.log, "trueprof: kernel samples not permitted (kernel.perf_event_paranoid=%d, no CAP_PERFMON); recording user space only\n", perf.Paranoid())
	} else if err != nil {
		return err
	}
	s.result.UserOnly = !kernel
	s.openPauses()
	if err := s.openTrace(kernel); err != nil {
		return err
	}
	// The threads' counters wait for the in-kernel counting to load and
	// for the exec wrapper to run (trackCounts), the trace set up
	// meanwhile (0.5-1.3 ms, after the wait before).
	for _, o := range counted {
		s.openedThread(s.pid, o.tid, o.cpu, kernel, launched)
	}
	if err := s.startProbes(s.pid, launched); err != nil {
		return err
	}
	s.startGoroutines(s.pid)
	return nil
}

// openTrace creates the trace file, writes its header (with the probes'
// calibration) and sets up the resolver that names what it records.
func (s *session) openTrace(kernel bool) error {
	var err error
	if s.file, err = os.OpenFile(s.cfg.Output, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
		return err
	}
	s.hdr = s.header(kernel)
	if s.mech != MechAuto {
		s.hdr.Instrument = string(s.mech)
		s.hdr.Root = s.cfg.Root
		if s.mech == MechHook && s.cfg.CalibrateInRun {
			s.cal = calfit.NewCollector()
		} else if s.uprobeInRun() {
			// Fitted from the bursts at the end (calibrationBurst).
		} else if s.cfg.Calibration != nil {
			if s.hdr.Calibration, err = s.cfg.Calibration(s.mech); err != nil {
				return err
			}
		}
	}
	wopt, err := s.writerOptions(s.hdr)
	if err != nil {
		return err
	}
	if s.w, err = trace.NewWriter(s.file, s.hdr, wopt); err != nil {
		return err
	}
	s.res = resolve.New(s.w, s.log, resolve.Options{Unwind: s.cfg.CallGraph != CallGraphFP, Mode: s.cfg.CallGraph.unwindMode()})
	return nil
}

// record makes the target count, a launched one by letting it exec, an
// attached one by writing its threads and mappings so far and enabling
// the events, and drains the rings until recording stops.
func (s *session) record(ctx context.Context) error {
	// The probes are in place; a launched target has not started yet.
	s.calibrationBurst(ctx, "start")
	if s.tgt != nil {
		if err := s.tgt.release(); err != nil {
			return fmt.Errorf("starting the target: %w", err)
		}
		s.released = true
		// The target starts while the interrupt tracepoints may still
		// be opening (irqOpening): the loop takes them when they are.
		s.releasedAt = perf.Now()
	} else {
		s.adoptIRQ(0, true)
		if err := s.synthesize(s.pid); err != nil {
			return err
		}
		for _, e := range s.events {
			if err := perf.Enable(e.fd); err != nil {
				return err
			}
		}
		if err := s.baseCounters(s.pid); err != nil {
			return err
		}
	}
	s.startControl(s.pid, s.tgt != nil)
	if s.cfg.started != nil {
		s.cfg.started()
	}
	var err error
	s.result.Reason, err = s.loop(ctx)
	return err
}

// finish ends the recording: the threads' last counters, the probes off
// (what they could not deliver counted), a launched target that
// outlived the recording stopped, the End record written, the trace
// closed and the result complete.
func (s *session) finish() (*Result, error) {
	if err := s.finishCounters(); err != nil {
		return nil, err
	}
	if s.mech != MechAuto && s.result.Events == 0 {
		fmt.Fprintf(s.log, "trueprof: no probe fired: the traced functions never ran (or were inlined away)\n")
	}
	cal := s.hdr.Calibration
	if s.cal != nil {
		if cal = s.cal.Calibration(string(s.mech)); cal != nil {
			cal.Host, cal.Kernel, cal.Time = s.hdr.Host, s.hdr.Kernel, time.Now().UTC()
			if err := s.w.Write(&trace.CalibrationRecord{Calibration: cal}); err != nil {
				return nil, err
			}
			if cal.Refused != "" {
				fmt.Fprintf(s.log, "trueprof: in-run calibration refused: %s; reports show raw times\n", cal.Refused)
			}
		} else if s.result.Events > 0 {
			fmt.Fprintf(s.log, "trueprof: no in-run calibration burst completed (the target never loaded the hook library's constructor, or was killed); reports show raw times\n")
		}
	}
	if s.uprobeInRun() {
		cal = s.cfg.UprobeCalibration.Calibration()
		cal.Host, cal.Kernel, cal.Time = s.hdr.Host, s.hdr.Kernel, time.Now().UTC()
		if err := s.w.Write(&trace.CalibrationRecord{Calibration: cal}); err != nil {
			return nil, err
		}
		if cal.Refused != "" {
			fmt.Fprintf(s.log, "trueprof: in-run calibration refused: %s; reports show raw times\n", cal.Refused)
		}
	}
	if s.mech != MechAuto && cal != nil {
		s.warnHot(s.mech, cal, time.Duration(perf.Now()-s.hdr.StartNS)-s.calBursts)
	}
	// Probes come off as soon as recording stops: an attached process
	// goes on unharmed. What they could not deliver is counted.
	for _, src := range s.sources {
		if n := src.lost(); n > 0 {
			s.lost(trace.LostKernel, n, perf.Now())
		}
	}
	s.closeSources()
	if s.tgt != nil {
		if s.result.Reason != "exited" {
			stopTarget(s.tgt)
		}
		s.result.ExitCode = s.tgt.exitCode()
		select {
		case <-s.tgt.done:
			if s.tgt.execErr != nil {
				fmt.Fprintf(s.log, "trueprof: %v\n", s.tgt.execErr)
			}
		default:
		}
	}
	if err := s.writeEnd(); err != nil {
		return nil, err
	}
	f := s.file
	s.file = nil
	if err := f.Close(); err != nil {
		return nil, err
	}
	s.result.Bytes = s.w.Size()
	s.result.Discarded = s.w.Stats().Discarded
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.result.RecorderCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return &s.result, nil
}

// uprobeInRun reports whether the recording calibrates uprobes in the
// run (Config.UprobeCalibration).
func (s *session) uprobeInRun() bool {
	return s.mech == MechUprobe && s.cfg.CalibrateInRun && s.cfg.UprobeCalibration != nil
}

// calibrationBurst runs a uprobe recording's in-run calibration burst
// (when, "start" or "end", names it in a failure's warning): a failed
// burst does not stop the recording.
func (s *session) calibrationBurst(ctx context.Context, when string) {
	if !s.uprobeInRun() {
		return
	}
	start := time.Now()
	defer func() { s.calBursts += time.Since(start) }()
	if err := s.cfg.UprobeCalibration.Burst(ctx); err != nil {
		fmt.Fprintf(s.log, "trueprof: uprobe calibration burst at the %s failed: %s\n", when, strings.TrimSpace(err.Error()))
	}
}

// warnHot says what the probes cost the target, which calibration
// removes from the report but not from the run: each call costs the
// calibration's per-call cost, and with uprobe site costs each probed
// site what its class costs (the numbers reports subtract), naming the
// costliest sites. Uprobes on hot functions can slow a program several
// times over.
func (s *session) warnHot(mech Mech, cal *trace.Calibration, elapsed time.Duration) {
	calls := float64(s.result.Events) / 2
	cost := time.Duration(calls * cal.PerCall)
	var hot []uprobe.Hot
	if sc := cal.Sites; mech == MechUprobe && sc != nil {
		cost = 0
		for _, src := range s.sources {
			if u, ok := src.(*uprobeSource); ok {
				for _, h := range u.set.Hot(*sc, elapsed, 0) {
					cost += h.Cost
					if h.Share > 0.05 {
						hot = append(hot, h)
					}
				}
			}
		}
	}
	if elapsed <= 0 || cost < elapsed/20 {
		return
	}
	fmt.Fprintf(s.log, "trueprof: %s probes: %.0f calls cost the target about %v of %v (%.0f ns a call); calibrated reports remove it",
		mech, calls, cost.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(cost)/max(calls, 1))
	if mech == MechUprobe {
		fmt.Fprintf(s.log, ", but functions this hot are better measured by sampling (-F) or compiled-in hooks")
	}
	fmt.Fprintln(s.log)
	for _, h := range hot {
		fmt.Fprintf(s.log, "trueprof: %s\n", h)
	}
}

// stopTarget ends a launched target when recording stopped first, as perf
// record does: SIGTERM, then SIGKILL if it does not exit.
func stopTarget(t *target) {
	select {
	case <-t.done:
		return
	default:
	}
	t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
		t.cmd.Process.Kill()
		<-t.done
	}
}

func (s *session) header(kernel bool) *trace.Header {
	h := &trace.Header{
		Arch:      runtime.GOARCH,
		Clock:     "CLOCK_MONOTONIC",
		StartTime: time.Now(),
		StartNS:   perf.Now(),
		Event:     s.cfg.Event.Name,
		Freq:      s.cfg.Freq,
		Period:    s.cfg.Period,
		Callchain: string(s.cfg.CallGraph),
		UserOnly:  !kernel,
		Mode:      string(s.cfg.Mode),
		SizeLimit: s.cfg.SizeLimit,
		Command:   s.cfg.Command,
	}
	if s.cfg.Period > 0 {
		h.Freq = 0
	}
	if s.cfg.CallGraph != CallGraphFP {
		h.StackBytes = s.cfg.StackBytes
	}
	h.Host, _ = os.Hostname()
	h.Kernel = perf.KernelRelease()
	if s.cfg.PID != 0 {
		h.PIDs = []int{s.cfg.PID}
	}
	return h
}

// threadOpening is a thread an event was opened on, and its CPU.
type threadOpening struct{ tid, cpu int }

// openEvents opens one sampling event per CPU on the target. A launched
// target is followed from exec with inherit; an attached one needs an
// event per existing thread per CPU, which then inherit to threads
// created later. It returns the threads and CPUs it opened events on,
// for their counters (openedThread).
func (s *session) openEvents(kernel bool) ([]threadOpening, error) {
	pid, launched := s.pid, s.tgt != nil
	cpus, err := perf.OnlineCPUs()
	if err != nil {
		return nil, err
	}
	attr := perf.SamplingAttr(s.cfg.Event, perf.SamplingOptions{
		Freq:          s.cfg.Freq,
		Period:        s.cfg.Period,
		Kernel:        kernel,
		SideRecords:   true,
		EnableOnExec:  launched,
		Inherit:       true,
		Watermark:     s.watermark(),
		BuildID:       true,
		UserStack:     uint32(stackBytes(s.cfg)),
		ContextSwitch: true,
		CountLost:     true,
		// dwarf mode unwinds the copy only, as perf does; auto keeps the
		// kernel's walk to splice in where code has no CFI.
		ExcludeCallchainUser: s.cfg.CallGraph == CallGraphDWARF,
	})
	s.sampleType = attr.Sample_type
	s.counters = counterState{}
	tids := []int{pid}
	var counted []threadOpening
	owners := s.takeRings(cpus)
	var pre []preopened
	if launched && owners == nil {
		pre = s.openPerCPU(attr, pid, cpus)
		defer func() {
			for _, p := range pre {
				p.close() // left by an error
			}
		}()
	}
	for i, cpu := range cpus {
		var owner = -1
		if owners != nil {
			owner = owners[i].fd
			s.rings = append(s.rings, owners[i].ring)
			s.ringFDs = append(s.ringFDs, owner)
		}
		opened := map[int]bool{}
		for {
			if !launched {
				if tids, err = threads(pid); err != nil {
					return nil, err
				}
			}
			added := false
			for _, tid := range tids {
				if opened[tid] {
					continue
				}
				var e event
				if pre != nil {
					e, err = pre[i].e, pre[i].err
					pre[i] = preopened{}
				} else {
					e, err = s.openShared(attr, tid, cpu, owner, s.cfg.RingPages)
				}
				if err != nil {
					if !launched && errors.Is(err, syscall.ESRCH) {
						continue // the thread ended meanwhile
					}
					return nil, err
				}
				opened[tid] = true
				added = true
				s.loss.fds = append(s.loss.fds, e.fd)
				if e.ring != nil {
					owner = e.fd
					s.rings = append(s.rings, e.ring)
					s.ringFDs = append(s.ringFDs, e.fd)
				}
				s.events = append(s.events, e)
				counted = append(counted, threadOpening{tid, cpu})
			}
			// Threads created while we opened had no event to inherit:
			// scan again until the set is stable.
			if launched || !added {
				break
			}
		}
	}
	return counted, nil
}

// ringEvents says whether Run maps the sampling rings with ring events
// before the launch (startRings). Tests turn it off to take, as root,
// the path of every user without CAP_PERFMON, whose ring events the
// kernel refuses: each CPU's first sampling event maps its ring.
var ringEvents = true

// ringsOpening is startRings' ring events, one a CPU, being opened and
// mapped.
type ringsOpening struct {
	done   chan struct{}
	cpus   []int
	owners []event // by CPU, as cpus
	err    error
}

// startRings starts mapping each CPU's sampling ring, held by a ring
// event (perf.RingAttr), on a goroutine, for takeRings to give the
// sampling events: mapping the rings then overlaps the launch and the
// wait for the kernel's grace period that the first per-task event can
// take (perf.RingAttr). The rings are mapped one after the other: the
// kernel allocates a ring's pages holding the process's mmap_lock for
// write, so a second mapping at once only spins on the lock (two 8 MiB
// rings in a fresh process: 3.4-4.0 ms of wall and CPU one after the
// other, 3.5-4.5 ms of wall and 4.2-7.0 ms of CPU at once).
func (s *session) startRings() {
	o := &ringsOpening{done: make(chan struct{})}
	s.ringsOpening = o
	go func() {
		defer close(o.done)
		if o.cpus, o.err = perf.OnlineCPUs(); o.err != nil {
			return
		}
		attr := perf.RingAttr(s.watermark())
		o.owners = make([]event, 0, len(o.cpus))
		for _, cpu := range o.cpus {
			e, err := s.openShared(attr, -1, cpu, -1, s.cfg.RingPages)
			if err != nil {
				o.err = err
				closeOwners(o.owners)
				o.owners = nil
				return
			}
			o.owners = append(o.owners, e)
		}
	}()
}

// takeRings returns startRings' ring events for cpus once mapped; they
// are the session's events from then on. It returns nil when none were
// started or they were taken already, and when they could not be opened
// (an event on every task of a CPU needs CAP_PERFMON) or the CPUs
// changed meanwhile: each CPU's first sampling event then maps its ring.
func (s *session) takeRings(cpus []int) []event {
	o := s.ringsOpening
	if o == nil {
		return nil
	}
	s.ringsOpening = nil
	<-o.done
	if o.err != nil || !slices.Equal(o.cpus, cpus) {
		closeOwners(o.owners)
		return nil
	}
	s.events = append(s.events, o.owners...)
	return o.owners
}

// dropRings releases startRings' ring events when openEvents never took
// them (Run failed before).
func (s *session) dropRings() {
	if o := s.ringsOpening; o != nil {
		s.ringsOpening = nil
		<-o.done
		closeOwners(o.owners)
	}
}

// closeOwners unmaps and closes ring events.
func closeOwners(owners []event) {
	for _, e := range owners {
		if e.ring != nil {
			e.ring.Close()
			perf.Close(e.fd)
		}
	}
}

// preopened is an event openPerCPU opened (held until the session takes
// it), or why it could not.
type preopened struct {
	e    event
	held bool
	err  error
}

// close releases p's event, if it holds one.
func (p preopened) close() {
	if p.held {
		if p.e.ring != nil {
			p.e.ring.Close()
		}
		perf.Close(p.e.fd)
	}
}

// openPerCPU opens attr on pid on each of cpus, each with a ring of its
// own, when there are no ring events (takeRings). One CPU after the
// other, as startRings maps the ring events: the kernel allocates a
// ring's pages with the mmap_lock held for write, so mappings at once
// take the same time and spin on it.
func (s *session) openPerCPU(attr *unix.PerfEventAttr, pid int, cpus []int) []preopened {
	pre := make([]preopened, len(cpus))
	for i, cpu := range cpus {
		pre[i].e, pre[i].err = s.openShared(attr, pid, cpu, -1, s.cfg.RingPages)
		pre[i].held = pre[i].err == nil
	}
	return pre
}

// openShared opens attr on pid (-1: every task) and cpu. With owner < 0
// the event maps a ring of its own of pages data pages; otherwise its
// records go to the ring of event owner, on the same CPU.
func (s *session) openShared(attr *unix.PerfEventAttr, pid, cpu, owner, pages int) (event, error) {
	fd, err := perf.Open(attr, pid, cpu, 0)
	if err != nil {
		return event{}, err
	}
	e := event{fd: fd}
	if owner >= 0 {
		err = perf.SetOutput(fd, owner)
	} else {
		e.ring, err = perf.MapRing(fd, pages)
	}
	if err != nil {
		perf.Close(fd)
		return event{}, err
	}
	return e, nil
}

// errOpeningStopped says that openTracepoints gave up, told to stop.
var errOpeningStopped = errors.New("tracepoints: opening stopped")

// openTracepoints opens tps on every CPU for all tasks, each CPU's events
// writing to the ring of its first (rings, owned by the events owners),
// with filter (when not empty) set on each; on error it closes what it
// opened. The rings are of sideRingPages, o's watermark a quarter of
// them. The caller adds the events to s.events, which closeEvents
// closes.
//
// Once stop is closed (nil: never) it opens no further tracepoint and
// returns those it opened with errOpeningStopped: the caller closes them
// with its other events.
func (s *session) openTracepoints(tps []*perf.Tracepoint, o perf.TracepointOptions, filter string, stop <-chan struct{}) (opened []event, rings []*perf.Ring, owners []int, err error) {
	cpus, err := perf.OnlineCPUs()
	if err != nil {
		return nil, nil, nil, err
	}
	pages := s.sideRingPages()
	o.Watermark = uint32(pages * os.Getpagesize() / 4)
	for _, cpu := range cpus {
		owner := -1
		for _, tp := range tps {
			select {
			case <-stop:
				return opened, rings, owners, errOpeningStopped
			default:
			}
			e, err := s.openShared(perf.TracepointAttr(tp, o), -1, cpu, owner, pages)
			if err != nil {
				for _, e := range opened {
					if e.ring != nil {
						e.ring.Close()
					}
					perf.Close(e.fd)
				}
				return nil, nil, nil, err
			}
			if filter != "" {
				// Without the filter only the volume grows.
				perf.SetFilter(e.fd, filter)
			}
			if e.ring != nil {
				owner = e.fd
				rings, owners = append(rings, e.ring), append(owners, e.fd)
			}
			opened = append(opened, e)
		}
	}
	return opened, rings, owners, nil
}

// byTime orders kernel records by time.
func byTime(a, b perf.Record) int { return cmp.Compare(a.Time, b.Time) }

// Ring sizes: the ring reader empties the rings while the loop reads a
// large module's symbols (2 to 3.5 s were seen on node, 100 MB, on a
// loaded machine), but it too can be descheduled on a loaded machine, so
// a ring holds up to ringSeconds of samples at the sampling rate, each as
// large as a full call chain and the user stack make it. Rings never get
// smaller than perf's default, 512 KiB, and
// without the right to lock more memory (UnlimitedRings) never larger;
// the sampling and interrupt rings of all CPUs together stay within
// maxRingsBytes.
const (
	minRingPages  = 128
	maxRingBytes  = 16 << 20
	maxRingsBytes = 128 << 20
	ringSeconds   = 2
)

// maxSampleBytes is the size of a sample with a full kernel and user
// call chain and cfg's user stack copy: 66.6 KB with the default copy,
// so 999 Hz fills maxRingBytes in a quarter of a second.
func maxSampleBytes(cfg Config) int64 {
	return int64(8*(8+127) + stackBytes(cfg) + 8*8)
}

// ringPages is the number of data pages per ring for cfg's sampling
// rate: per CPU, a frequency is the rate of each CPU's samples; a period
// of a clock event gives it too. The rate of other events per period
// is unknown: they get the largest rings. A recording that samples
// nothing gets rings for its side records alone.
func ringPages(cfg Config, cpus int, unlimited bool) int {
	if !unlimited {
		return minRingPages
	}
	most := min(int64(maxRingBytes), int64(maxRingsBytes/2/max(cpus, 1)))
	bytes := most // the rate of other events than clocks per period is unknown
	// The context switches come on top of the samples (switchBytes).
	switch {
	case cfg.NoSampling:
		// Side records alone (sideOnlyBytes).
		bytes = sideOnlyBytes
	case cfg.Period == 0:
		bytes = int64(cfg.Freq)*maxSampleBytes(cfg)*ringSeconds + switchBytes
	case cfg.Event.Clock():
		bytes = max(1, int64(time.Second)/int64(cfg.Period))*maxSampleBytes(cfg)*ringSeconds + switchBytes
	}
	// Rounding up could pass most: the power of two below it is the
	// largest ring.
	pages := perf.RingPagesFor(min(bytes, most))
	if int64(pages*os.Getpagesize()) > most {
		pages /= 2
	}
	return max(pages, minRingPages)
}

// sideOnlyBytes is the ring of each CPU when nothing samples (a hooks or
// uprobes recording: NoSampling): it carries only side records, the most
// frequent a context switch of 32 bytes. 4 MiB is 120-240 ms of the
// fastest switching seen, 1.0-1.3 million switch records a second over
// two CPUs (a token passed around four threads by pipes:
// TestProbeRingsHoldSwitches, lossless in 30 of 30 runs with the
// collector on and 30 of 30 with GOGC=off). Mapping the rings is on the
// start's critical path: two rings of 8 MiB took 3.6 ms (median) to map
// in a fresh process, of 4 MiB 1.8, and the recording of a hooked
// program returning at once took 2.3-2.7 ms less wall time and 4.1-4.4
// ms less CPU with these rings and sideRingBytes' (medians of 31 and 51
// interleaved runs; docs/recording.md, "Start and stop"). What
// overflows a ring at that rate is the reader's wait for a P once woken,
// up to 277 ms in an execution trace: the loop ran 256 ms with no
// scheduling point while the collector's worker, waiting to scan the
// loop's stack, held the other P. So at 120,000 rounds of that test
// (three times its own) 4 MiB rings lost 2,383 and 10,884 records in 2
// of 8 runs (the reader before, decoding every record itself: 77,326 and
// 127,458 in 2 of 8), 8 MiB none in 8 of 8 (both readers).
const sideOnlyBytes = 4 << 20

// sideRingBytes is the ring of each CPU's tracepoints (interrupts, lock
// waits): 512 KiB, perf's default, half a second of 9,000 interrupts a
// second per CPU (an entry and an exit, about 56 bytes each; idle CPUs'
// are filtered out in the kernel), beyond the longest wait of a reader
// for a P seen (277 ms, sideOnlyBytes). The lock-wait rings, read by the
// loop itself around a probe's placing (pauses.go), take the whole
// system's contentions: 3,240 of each kind in 1.7 s of
// TestAdjustsForProbePlacement (perf stat -a), seconds of them. Two
// rings of 2 MiB took 1.0 ms to map, of 512 KiB 0.3; what overflows is
// counted lost as for every ring.
const sideRingBytes = 512 << 10

// sideRingPages is the number of data pages of a tracepoint ring: for
// sideRingBytes, and never more than the sampling rings'.
func (s *session) sideRingPages() int {
	return min(s.cfg.RingPages, perf.RingPagesFor(sideRingBytes))
}

// watermark is the wakeup watermark of a sampling ring: a quarter of it.
func (s *session) watermark() uint32 {
	return uint32(s.cfg.RingPages * os.Getpagesize() / 4)
}

// closeSources removes every probe; the target goes on unharmed.
func (s *session) closeSources() {
	for _, src := range s.sources {
		src.close()
	}
	s.sources = nil
	if s.planner != nil {
		s.planner.close()
	}
	if s.region != nil {
		s.region.Close()
		s.region = nil
	}
}

func (s *session) closeEvents() {
	s.stopSideRings()
	s.reader.stopReading()
	fds := make([]int, 0, len(s.events))
	for _, e := range s.events {
		if e.ring != nil {
			e.ring.Close()
		}
		fds = append(fds, e.fd)
	}
	closeEventFDs(fds)
	s.events, s.rings, s.ringFDs = nil, nil, nil
	s.loss = samplingLoss{}
	s.counters.close()
}

// loop drains the rings until recording should stop and returns why.
func (s *session) loop(ctx context.Context) (string, error) {
	var fds []int
	for _, e := range s.events {
		if e.ring != nil && !slices.Contains(s.ringFDs, e.fd) {
			fds = append(fds, e.fd)
		}
	}
	s.reader.rings, s.reader.sampleType, s.reader.stackBytes = s.rings, s.sampleType, stackBytes(s.cfg)
	if err := s.reader.start(s.ringFDs); err == nil {
		fds = append(fds, s.reader.wake.Fd())
	} else {
		// The loop reads the rings alone, woken by them.
		fds = append(fds, s.ringFDs...)
	}
	fds = append(fds, s.controlFds()...)
	timeout := 100
	for _, src := range s.sources {
		fds = append(fds, src.fds()...)
		if len(src.fds()) == 0 {
			// Sources without a descriptor are collected by goroutines
			// of their own; process what they gathered often enough to
			// keep the backlog small.
			timeout = 20
		}
	}
	if s.tgt != nil {
		// The poll wakes when the target exits, not at its timeout (up
		// to 100 ms after the end of every launched recording).
		exited, err := perf.NewWakeup()
		if err != nil {
			return "", err
		}
		quit := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-s.tgt.done:
				exited.Signal()
			case <-quit:
			}
		})
		defer func() {
			close(quit)
			wg.Wait()
			exited.Close()
		}()
		fds = append(fds, exited.Fd())
	}
	poller, err := perf.NewPoller(fds)
	if err != nil {
		return "", err
	}
	s.poller = poller
	defer func() {
		s.poller = nil
		poller.Close()
	}()
	var deadline <-chan time.Time
	if s.cfg.Duration > 0 {
		t := time.NewTimer(s.cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	var targetDone <-chan struct{}
	if s.tgt != nil {
		targetDone = s.tgt.done
	}
	lastFlush := time.Now()
	reason := ""
	for reason == "" {
		wait := timeout
		if s.eventsDue != 0 {
			// A slab held back for the horizon is processed once it
			// passes: no wake-up comes for it. One with a time too far
			// ahead to wait for is taken at once (slabsDue), woken.
			switch now, due := perf.Now(), s.eventsDue; {
			case due <= now-uint64(reorderSlack):
				wait = 0 // due since the drain's horizon
			case due-(now-uint64(reorderSlack)) < uint64(hookAhead):
				wait = min(wait, int((due-(now-uint64(reorderSlack)))/uint64(time.Millisecond))+1)
			}
		}
		if err := poller.Wait(wait); err != nil {
			return "", err
		}
		if s.reader.wake != nil {
			s.reader.wake.Clear()
		}
		select {
		case <-ctx.Done():
			reason = "signal"
		case <-deadline:
			reason = "duration"
		case <-targetDone:
			reason = "exited"
		default:
			if s.tgt == nil && !processAlive(s.pid) {
				reason = "exited"
			}
		}
		if reason == "" {
			if reason, err = s.serveControl(); err != nil {
				return "", err
			}
		}
		s.adoptIRQ(s.releasedAt, false)
		if reason != "" {
			s.abandonIRQ()
		}
		if err := s.drain(reason != ""); err != nil {
			return "", err
		}
		if s.full && reason == "" {
			reason = "size"
			fmt.Fprintf(s.log, "trueprof: trace reached --size %d bytes; sampling stopped\n", s.cfg.SizeLimit)
			// As for every other stop: the events off, the ring reader
			// stopped, the probes detached, what is left processed.
			s.abandonIRQ()
			if err := s.drain(true); err != nil {
				return "", err
			}
		}
		if err := s.tick(); err != nil {
			return "", err
		}
		if time.Since(lastFlush) >= time.Second {
			// A recorder killed with SIGKILL loses at most the last second.
			if err := s.w.Flush(); err != nil {
				return "", err
			}
			lastFlush = time.Now()
		}
	}
	return reason, nil
}

// drain reads every ring and processes the records that are old enough
// to be in time order; final processes all of them.
func (s *session) drain(final bool) error {
	if final {
		for _, e := range s.events {
			perf.Disable(e.fd)
		}
	}
	horizon := perf.Now() - uint64(reorderSlack)
	if final {
		s.reader.stopReading()
	}
	taken, unparsed, derr := s.reader.take(s.spare, s.freed)
	clear(s.freed)
	s.freed = s.freed[:0]
	// Copied here, with the reader free to go on.
	kept := len(s.pending)
	for _, c := range taken {
		s.pending = append(s.pending, c...)
		clear(c) // the pending copies own the stack buffers now
	}
	s.spare = taken
	if unparsed > 0 {
		s.lost(trace.LostUnparsed, unparsed, perf.Now())
		fmt.Fprintf(s.log, "trueprof: skipped %d malformed kernel records: %v\n", unparsed, derr)
	}
	s.warnFull()
	s.readOtherRings(final)
	s.sortBuf = sortByTime(s.pending, kept, s.sortBuf)
	if cap(s.sortBuf) > maxFreeChunks*chunkRecords {
		s.sortBuf = nil // a burst's buffer goes back to the collector
	}
	// Merge the kernel's records with the probes' events by time, so
	// every event is resolved against the mappings of its moment.
	due := horizon // the slabs the drain can process
	if final {
		due = math.MaxUint64
	}
	more := s.drainEvents(final, due) && final
	if err := s.releaseHolds(); err != nil {
		return err
	}
	if err := s.writePauses(final); err != nil {
		return err
	}
	// done counts the kernel records processed: the final drain's
	// passes go on from there, and the rest is moved to the buffer's
	// start once, not after every pass (moving 1.7 million records of
	// 272 bytes after each of a backlog's 120 slabs made the final drain
	// of the switch test take 6.4-7.7 s).
	done := 0
	for {
		n, m := len(s.pending), len(s.pendingEvents)
		switch {
		case !final:
			n, m = before(s.pending, horizon), beforeEvent(s.pendingEvents, horizon)
		case more && m > 0:
			// The final drain takes the hooks' backlog a slab at a time
			// (its events at once would take 40 bytes each, for up to
			// the spool's 2M): the kernel's records up to the last of
			// these events now, the rest with the next slabs.
			n = before(s.pending, s.pendingEvents[m-1].time+1)
		case more:
			n = done
		}
		n = max(n, done)
		if err := s.merge(done, n, m); err != nil {
			return err
		}
		done = n
		if !more {
			break
		}
		more = s.collectEvents(false, math.MaxUint64)
	}
	s.pending = keepRest(s.pending, done, pendingKeep)
	if final {
		s.unreportedLoss()
	}
	return nil
}

// before returns the number of records of the time-ordered recs earlier
// than t.
func before(recs []perf.Record, t uint64) int {
	n, _ := slices.BinarySearchFunc(recs, t, func(r perf.Record, t uint64) int {
		if r.Time < t {
			return -1
		}
		return 1
	})
	return n
}

// beforeEvent returns the number of events of the time-ordered evs
// earlier than t.
func beforeEvent(evs []instrEvent, t uint64) int {
	n, _ := slices.BinarySearchFunc(evs, t, func(e instrEvent, t uint64) int {
		if e.time < t {
			return -1
		}
		return 1
	})
	return n
}

// merge processes the kernel records s.pending[from:to] and the first m
// events in time order, and keeps the rest of the events for the next
// drain; the caller moves the kernel records left.
func (s *session) merge(from, to, m int) error {
	i, j, n := from, 0, to
	evs := s.pendingEvents[:m]
	plain := s.plainEvents()
	untilTick := tickCheck // records and events until the next tick
	for {
		// The events before kernel record i (all that are left after
		// the last), in one loop: a kernel record goes first at a tie.
		next := uint64(math.MaxUint64)
		if i < n {
			next = s.pending[i].Time
		}
		for ; j < len(evs) && (evs[j].time < next || i == n); j++ {
			if untilTick--; untilTick == 0 {
				untilTick = tickCheck
				if err := s.tick(); err != nil {
					return err
				}
			}
			e := &evs[j]
			// processEvent's commonest case, its checks hoisted, the
			// cache lookup inlined and the writing one call: a hook's
			// entry or exit of a function in the resolver's cache, of
			// no calibration burst, that joins the writer's open run.
			if plain && e.module == 0 && e.kind-trace.EventEntry <= trace.EventExit-trace.EventEntry {
				if fn, ok := s.res.RecentFunction(e.pid, e.addr, e.time); ok && s.res.CalibrationFunction(fn) == nil &&
					s.w.AppendRunEvent(e.time, e.pid, e.tid, e.kind, fn) {
					s.result.Events++
					continue
				}
			}
			if err := s.processEvent(e); err != nil {
				return err
			}
			plain = s.plainEvents()
		}
		if i == n {
			break
		}
		if untilTick--; untilTick == 0 {
			untilTick = tickCheck
			if err := s.tick(); err != nil {
				return err
			}
		}
		err := s.process(&s.pending[i])
		if b := s.pending[i].UserStack; b != nil {
			s.freed = append(s.freed, b)
			s.pending[i].UserStack = nil
		}
		if err != nil {
			return err
		}
		i++
		plain = s.plainEvents()
	}
	if m == len(s.pendingEvents) && cap(s.pendingEvents) > 2*eventsKeep {
		// A burst's buffer, all processed (the final drain's backlog):
		// dropped, not replaced with a fresh one of eventsKeep, into
		// which the hook source would copy its next slabs, faulting in
		// new memory, where an empty small buffer is swapped for a
		// slab's events.
		s.pendingEvents = nil
		return nil
	}
	// The backlog after the horizon is small; moving it keeps the buffer
	// from growing.
	s.pendingEvents = keepRest(s.pendingEvents, m, eventsKeep)
	return nil
}

// plainEvents reports whether processEvent writes a hook's entry or
// exit as it is, once resolved (but for calibration functions): no
// pause of the recording, no --trace filter, not aggregating. merge
// looks again after every record it does not write itself.
func (s *session) plainEvents() bool {
	return s.ctl.pausedAt == 0 && len(s.ctl.closed) == 0 && s.hooks.off == nil && s.agg == nil
}

// pendingKeep is the capacity, in records, that the loop's buffers keep
// between drains: a burst (a storm of context switches, a backlog of
// hook batches) grows them far past it, and a buffer that kept the
// burst's capacity would hold its memory for the rest of the recording,
// a step in the recorder's memory at every larger burst.
const pendingKeep = 1 << 14 // kernel records, 272 bytes each: 4.25 MiB

// eventsKeep is pendingKeep for probe events (32 bytes each: 4 MiB): the
// hook source hands over a slab of up to hookChunk events at every pass,
// which must not allocate anew each time.
const eventsKeep = 1 << 17

// keepRest returns the records of buf after the first n, moved to its
// start, in a buffer of at most max(keep, 2*their number) capacity.
func keepRest[T any](buf []T, n, keep int) []T {
	rest := buf[n:]
	if c := max(keep, 2*len(rest)); cap(buf) > 2*c {
		// A burst is over: give its memory back.
		return append(make([]T, 0, c), rest...)
	}
	return append(buf[:0], rest...)
}

func (s *session) lost(kind trace.LostKind, n, time uint64) {
	s.result.Lost += n
	s.w.Write(&trace.Lost{Time: time, Kind: kind, Count: n})
}

// process writes the trace records for one kernel record.
func (s *session) process(r *perf.Record) error {
	if done, err := s.track(r); done || err != nil {
		return err
	}
	w := s.w
	switch r.Type {
	case perf.RecordSample:
		if s.drop(r.Time) {
			return nil
		}
		if s.full {
			s.lost(trace.LostSize, 1, r.Time)
			return nil
		}
		stack, truncated, reason, err := s.res.Stack(r)
		if err != nil {
			return err
		}
		s.sampleRec = trace.Sample{Time: r.Time, PID: r.PID, TID: r.TID, CPU: r.CPU, Period: r.Period, Stack: stack}
		smp := &s.sampleRec
		if truncated {
			smp.Flags |= trace.SampleTruncated | trace.ReasonFlags(reason)
			s.result.Truncated[reason]++
		}
		if r.KernelIP() {
			smp.Flags |= trace.SampleKernel
		}
		switch err := w.Write(smp); {
		case errors.Is(err, trace.ErrSizeLimit):
			s.full = true
			s.lost(trace.LostSize, 1, r.Time)
		case err != nil:
			return err
		default:
			s.result.Samples++
		}
	case perf.RecordMmap2, perf.RecordMmap:
		if r.Prot&syscall.PROT_EXEC == 0 {
			return nil
		}
		s.res.Mmap(r.PID, resolve.Mapping{Start: r.Addr, End: r.Addr + r.Len, PgOff: r.PgOff, Path: r.Filename, BuildID: r.BuildID, Time: r.Time})
		if s.planner != nil {
			if err := s.planner.moduleMapped(r.PID, r.Filename, r.Time); err != nil {
				return err
			}
		}
		path, err := w.Intern(r.Filename)
		if err != nil {
			return err
		}
		return w.Write(&trace.Module{Time: r.Time, PID: r.PID, TID: r.TID, Start: r.Addr, Len: r.Len, PgOff: r.PgOff,
			Prot: r.Prot, Flags: r.Flags, Path: path, BuildID: r.BuildID})
	case perf.RecordComm:
		if r.Exec() {
			if err := s.res.Exec(r.PID, r.Time); err != nil {
				return err
			}
		}
		name, err := w.Intern(r.Comm)
		if err != nil {
			return err
		}
		return w.Write(&trace.Comm{Time: r.Time, PID: r.PID, TID: r.TID, Name: name, Exec: r.Exec()})
	case perf.RecordFork:
		if r.PID == r.TID && r.PID != r.PPID {
			s.res.Fork(r.PID, r.PPID, r.Time)
			s.noteFork()
		}
		return w.Write(&trace.Fork{Time: r.Time, PID: r.PID, PPID: r.PPID, TID: r.TID, PTID: r.PTID})
	case perf.RecordExit:
		if r.PID == r.TID {
			if err := s.res.Exit(r.PID); err != nil {
				return err
			}
		}
		return w.Write(&trace.Exit{Time: r.Time, PID: r.PID, PPID: r.PPID, TID: r.TID, PTID: r.PTID})
	case perf.RecordSwitch:
		return w.Write(&trace.Switch{Time: r.Time, PID: r.PID, TID: r.TID, CPU: r.CPU, Out: r.SwitchOut(), Preempt: r.Preempted()})
	case perf.RecordLost, perf.RecordLostSamples:
		s.loss.reported += r.Lost
		s.lost(trace.LostKernel, r.Lost, r.Time)
	case perf.RecordThrottle, perf.RecordUnthrottle:
		return w.Write(&trace.Throttle{Time: r.Time, Unthrottle: r.Type == perf.RecordUnthrottle})
	}
	return nil
}

// writeEnd writes the End record and closes the trace.
func (s *session) writeEnd() error {
	reason, err := s.w.Intern(s.result.Reason)
	if err != nil {
		return err
	}
	// JIT runtimes may write their symbol files last (at exit) or on
	// demand: what is still unnamed is looked up once more.
	if err := s.res.Finish(); err != nil {
		return err
	}
	if err := s.endPause(perf.Now()); err != nil {
		return err
	}
	code := int32(-1)
	if len(s.cfg.Command) > 0 {
		code = int32(s.result.ExitCode)
	}
	end := perf.Now()
	if err := s.finishTrees(end); err != nil {
		return err
	}
	if err := s.w.Write(&trace.End{Time: end, ExitCode: code, Reason: reason, Detached: s.detached}); err != nil {
		return err
	}
	return s.w.Close()
}
