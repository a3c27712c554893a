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
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// Config selects what to record and how.
type Config struct {
	Output    string // trace file path
	Event     perf.Event
	Freq      uint64 // samples per second (used when Period is 0)
	Period    uint64 // events per sample
	Mode      trace.Mode
	SizeLimit int64         // bytes; for normal and wrap modes
	Command   []string      // command to launch, or
	PID       int           // process to attach to
	Duration  time.Duration // stop after this long; 0 means until the target exits
	Log       io.Writer     // warnings; os.Stderr if nil
	// RingPages is the number of data pages per CPU ring (power of two);
	// 0 sizes the rings to the sampling rate (ringPages).
	RingPages int
	// CallGraph is how user stacks are unwound: "fp" (the kernel's
	// frame-pointer walk), "dwarf" (each module's CFI over a copy of the
	// user stack, as perf --call-graph dwarf but at record time) or
	// "auto" (CFI, and frame pointers where code has none). Empty means
	// "auto".
	CallGraph string
	// StackBytes is the user stack copied per sample for dwarf and auto,
	// a multiple of 8 up to perf.MaxUserStack; 0 means the kernel's
	// largest (perf.MaxUserStack), or perf's 8192 without the right to
	// lock more than 512 KiB of ring per CPU (defaultStackBytes).
	StackBytes int

	// Trace lists glob patterns of functions to instrument ("name" or
	// "module:name"); with hooks, an empty list means every instrumented
	// function.
	Trace []string
	// Mech forces a probe mechanism: "hook" or "uprobe". Empty chooses
	// hooks when the target was built with -finstrument-functions.
	Mech string
	// Root instruments only the subgraph of this function (Scheme B).
	Root string
	// NoSampling records probes and side records but no samples.
	NoSampling bool
	// Calibration returns this machine's calibration of a probe
	// mechanism, measuring it if needed; it is called once the mechanism
	// is chosen, and its result is copied into the trace header. Nil
	// records without calibration (reports then show raw times).
	Calibration func(mech string) (*trace.Calibration, error)
	// Stdout receives the launched target's standard output; os.Stdout
	// if nil.
	Stdout io.Writer
	// NoGoroutines records a Go target's samples and events per thread
	// only. By default a uprobe on the Go scheduler records which
	// goroutine each thread runs (trace.GoID), at about a microsecond
	// of the target's time per goroutine switch.
	NoGoroutines bool
	// Aggregate folds the events into call trees while recording and
	// writes their snapshots, every Snapshot (DefaultSnapshot when 0),
	// instead of the events (aggregate.go); TreeMemory bounds the trees'
	// memory in bytes (0: unbounded).
	Aggregate  bool
	Snapshot   time.Duration
	TreeMemory int64
	// started is called once the events count (tests).
	started func()
}

// Instrumented reports whether the configuration asks for probes.
func (c *Config) Instrumented() bool {
	return len(c.Trace) > 0 || c.Mech != "" || c.Root != ""
}

// Result summarises a finished recording.
type Result struct {
	ExitCode int    // the launched target's exit status (128+signal if killed); 0 when attached
	Samples  uint64 // samples written
	Events   uint64 // function entries and exits written
	Lost     uint64 // samples lost in the kernel or dropped by a limit
	Bytes    int64  // trace file size
	Reason   string // why recording stopped: "exited", "signal", "duration", "size", "ctl"
	UserOnly bool   // kernel sampling was not permitted
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
	res     *resolver
	pending []perf.Record
	// sources are the probe mechanisms of an instrumented recording, and
	// pendingEvents their events not yet processed.
	sources       []eventSource
	pendingEvents []instrEvent
	// labelSets holds the label changes of pending eventLabels events,
	// by the event's addr.
	labelSets map[uint64]uprobe.LabelChange
	nextLabel uint64
	instr     *instrumentation // nil unless probing
	detached  uint64           // when the probes came off (probes.go detach)
	eventRec  trace.Event      // reused by processEvent
	sampleRec trace.Sample
	result    Result
	full      bool // the size limit was reached
	// sampleType is the events' PERF_SAMPLE_* set, which Decode needs.
	sampleType uint64
	// reader empties the sampling rings (ringreader.go); freed are the
	// stack buffers of processed samples, to give back to it.
	reader     ringReader
	freed      [][]byte
	warnedFull bool
	// threads, irq and counters follow the target's threads, their
	// interrupts and their per-thread counters (threads.go, irq.go,
	// counters.go), side reads the rings of the last two (siderings.go).
	threads  targetThreads
	irq      irqState
	counters counterState
	side     sideRings
	// ctl serves trueprof ctl (control.go); out is the trace file, which
	// a snapshot copies, and targetPID the target's process.
	ctl       controlState
	out       *os.File
	targetPID int
	agg       *aggregator // record --aggregate's trees; nil without
}

// logOrStderr is where warnings go: w, or os.Stderr if nil.
func logOrStderr(w io.Writer) io.Writer {
	if w == nil {
		return os.Stderr
	}
	return w
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

// Call graph modes (Config.CallGraph).
const (
	callGraphFP    = "fp"
	callGraphDWARF = "dwarf"
	callGraphAuto  = "auto"
)

// checkCallGraph fills in the defaults of cfg's call graph and rejects
// what the kernel cannot do.
func checkCallGraph(cfg *Config, unlimited bool) error {
	switch cfg.CallGraph {
	case "":
		cfg.CallGraph = callGraphAuto
	case callGraphFP, callGraphDWARF, callGraphAuto:
	default:
		return fmt.Errorf("call graph %q: want fp, dwarf or auto", cfg.CallGraph)
	}
	if cfg.StackBytes == 0 {
		cfg.StackBytes = defaultStackBytes(unlimited)
	}
	if cfg.StackBytes < 8 || cfg.StackBytes > perf.MaxUserStack || cfg.StackBytes%8 != 0 {
		return fmt.Errorf("stack copy of %d bytes: want a multiple of 8 from 8 to %d", cfg.StackBytes, perf.MaxUserStack)
	}
	return nil
}

// stackBytes is the user stack each sample copies under cfg.
func stackBytes(cfg Config) int {
	switch {
	case cfg.CallGraph == callGraphFP:
		return userStackBytes
	case cfg.StackBytes == 0:
		return defaultStackBytes(perf.UnlimitedRings())
	}
	return cfg.StackBytes
}

// reorderSlack is how far behind the present the loop processes records.
// Records from different CPU rings and probe sources interleave in time,
// and every pass reads all of them, so only records still being written
// when a pass starts can be missing; waiting this long before processing
// lets a mapping be known before the samples and events that need it.
// It also bounds the backlog: at tens of millions of hook events per
// second a longer wait means a backlog of millions.
const reorderSlack = 5 * time.Millisecond

// Run records until the target exits, the duration passes, the size limit
// is reached in normal mode, or ctx is cancelled (SIGINT/SIGTERM). The
// trace is complete and valid in every case.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if (len(cfg.Command) == 0) == (cfg.PID == 0) {
		return nil, errors.New("give either a command to launch or a pid to attach to")
	}
	if cfg.Freq == 0 && cfg.Period == 0 {
		cfg.Freq = 999
	}
	if cfg.Mode == "" {
		cfg.Mode = trace.ModeNormal
	}
	unlimited := perf.UnlimitedRings()
	if err := checkCallGraph(&cfg, unlimited); err != nil {
		return nil, err
	}
	if err := checkAggregate(&cfg); err != nil {
		return nil, err
	}
	if cfg.RingPages == 0 {
		cpus, err := perf.OnlineCPUs()
		if err != nil {
			return nil, err
		}
		cfg.RingPages = ringPages(cfg, len(cpus), unlimited)
		if !unlimited && cfg.CallGraph != callGraphFP && !cfg.NoSampling {
			held := float64(cfg.RingPages*os.Getpagesize()) / float64(maxSampleBytes(cfg))
			fmt.Fprintf(logOrStderr(cfg.Log), "trueprof: without CAP_PERFMON or CAP_IPC_LOCK the rings hold only about %.0f samples with %d-byte stack copies: records may be lost when the recorder cannot run for a few milliseconds (--call-graph fp or a lower -F avoid it)\n",
				held, cfg.StackBytes)
		}
	}
	s := &session{cfg: cfg, log: logOrStderr(cfg.Log)}
	defer s.closeEvents()
	// Probes of every kind (planned, lazily placed, goroutine and label
	// switches) are removed however Run returns.
	defer s.closeSources()

	if cfg.NoSampling {
		// Side records only: a dummy event never samples.
		dummy, err := perf.ParseEvent("dummy")
		if err != nil {
			return nil, err
		}
		s.cfg.Event, s.cfg.Freq, s.cfg.Period = dummy, 0, 1
	}
	var in *instrumentation
	lo := launchOptions{stdout: cfg.Stdout}
	if cfg.Instrumented() {
		var err error
		if in, lo, err = s.planInstrumentation(cfg.PID); err != nil {
			return nil, err
		}
		lo.stdout = cfg.Stdout
	}

	var tgt *target
	pid := cfg.PID
	if len(cfg.Command) > 0 {
		var err error
		if tgt, err = launch(cfg.Command, lo); err != nil {
			if in != nil && in.region != nil {
				in.region.Close()
			}
			return nil, fmt.Errorf("launching %s: %w", cfg.Command[0], err)
		}
		pid = tgt.pid()
	}
	fail := func(err error) (*Result, error) {
		if tgt != nil {
			tgt.abort()
		}
		return nil, err
	}

	kernel := true
	if err := s.open(pid, kernel, tgt != nil); errors.Is(err, perf.ErrPermission) {
		s.closeEvents()
		kernel = false
		if err2 := s.open(pid, kernel, tgt != nil); err2 != nil {
			return fail(err2)
		}
		fmt.Fprintf(s.log, "trueprof: kernel samples not permitted (kernel.perf_event_paranoid=%d, no CAP_PERFMON); recording user space only\n", perf.Paranoid())
	} else if err != nil {
		return fail(err)
	}
	s.result.UserOnly = !kernel
	s.openIRQ()

	f, err := os.OpenFile(cfg.Output, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	s.out = f
	hdr := s.header(kernel)
	if in != nil {
		hdr.Instrument = in.mech
		hdr.Root = cfg.Root
		if cfg.Calibration != nil {
			if hdr.Calibration, err = cfg.Calibration(in.mech); err != nil {
				return fail(err)
			}
		}
	}
	wopt, err := s.writerOptions(hdr)
	if err != nil {
		return fail(err)
	}
	s.w, err = trace.NewWriter(f, hdr, wopt)
	if err != nil {
		return fail(err)
	}
	s.res = newResolver(s.w, s.log)
	s.res.callGraph = s.cfg.CallGraph
	s.instr = in
	if in != nil {
		if err := s.startInstrumentation(in, pid, tgt != nil); err != nil {
			return fail(err)
		}
	}

	s.startGoroutines(pid, tgt != nil)

	if tgt != nil {
		if err := tgt.release(); err != nil {
			return fail(fmt.Errorf("starting the target: %w", err))
		}
	} else {
		if err := s.synthesize(pid); err != nil {
			return nil, err
		}
		for _, e := range s.events {
			if err := perf.Enable(e.fd); err != nil {
				return nil, err
			}
		}
		if err := s.baseCounters(pid); err != nil {
			return nil, err
		}
	}
	s.targetPID = pid
	s.startControl(pid, tgt != nil)
	defer s.stopControl()
	if cfg.started != nil {
		cfg.started()
	}

	s.result.Reason, err = s.loop(ctx, tgt, pid)
	if err != nil {
		return nil, err
	}
	if err := s.finishCounters(); err != nil {
		return nil, err
	}
	if in != nil && s.result.Events == 0 {
		fmt.Fprintf(s.log, "trueprof: no probe fired: the traced functions never ran (or were inlined away)\n")
	}
	if in != nil && hdr.Calibration != nil {
		s.warnHot(in.mech, hdr.Calibration.PerCall, time.Duration(perf.Now()-hdr.StartNS))
	}
	// Probes come off as soon as recording stops: an attached process
	// goes on unharmed. What they could not deliver is counted.
	for _, src := range s.sources {
		if n := src.lost(); n > 0 {
			s.lost(trace.LostKernel, n, perf.Now())
		}
	}
	s.closeSources()
	if tgt != nil {
		if s.result.Reason != "exited" {
			stopTarget(tgt)
		}
		s.result.ExitCode = tgt.exitCode()
	}
	if err := s.finish(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	s.result.Bytes = s.w.Size()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.result.RecorderCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return &s.result, nil
}

// warnHot says what the probes cost the target: each call costs perCall
// ns, which calibration removes from the report but not from the run.
// Uprobes on hot functions can slow a program several times over.
func (s *session) warnHot(mech string, perCall float64, elapsed time.Duration) {
	calls := float64(s.result.Events) / 2
	cost := time.Duration(calls * perCall)
	if elapsed <= 0 || cost < elapsed/20 {
		return
	}
	fmt.Fprintf(s.log, "trueprof: %s probes: %.0f calls at %.0f ns each cost the target about %v of %v; calibrated reports remove it",
		mech, calls, perCall, cost.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	if mech == "uprobe" {
		fmt.Fprintf(s.log, ", but functions this hot are better measured by sampling (-F) or compiled-in hooks")
	}
	fmt.Fprintln(s.log)
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
		Callchain: s.cfg.CallGraph,
		UserOnly:  !kernel,
		Mode:      string(s.cfg.Mode),
		SizeLimit: s.cfg.SizeLimit,
		Command:   s.cfg.Command,
	}
	if s.cfg.Period > 0 {
		h.Freq = 0
	}
	if s.cfg.CallGraph != callGraphFP {
		h.StackBytes = s.cfg.StackBytes
	}
	h.Host, _ = os.Hostname()
	h.Kernel = kernelRelease()
	if s.cfg.PID != 0 {
		h.PIDs = []int{s.cfg.PID}
	}
	return h
}

// open opens one sampling event per CPU. A launched target is followed
// from exec with inherit; an attached one needs an event per existing
// thread per CPU, which then inherit to threads created later.
func (s *session) open(pid int, kernel, launched bool) error {
	cpus, err := perf.OnlineCPUs()
	if err != nil {
		return err
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
		// dwarf mode unwinds the copy only, as perf does; auto keeps the
		// kernel's walk to splice in where code has no CFI.
		ExcludeCallchainUser: s.cfg.CallGraph == callGraphDWARF,
	})
	s.sampleType = attr.Sample_type
	s.counters = counterState{}
	tids := []int{pid}
	for _, cpu := range cpus {
		var owner = -1
		opened := map[int]bool{}
		for {
			if !launched {
				if tids, err = threads(pid); err != nil {
					return err
				}
			}
			added := false
			for _, tid := range tids {
				if opened[tid] {
					continue
				}
				e, err := s.openShared(attr, tid, cpu, owner)
				if err != nil {
					if !launched && errors.Is(err, syscall.ESRCH) {
						continue // the thread ended meanwhile
					}
					return err
				}
				opened[tid] = true
				added = true
				if e.ring != nil {
					owner = e.fd
					s.rings = append(s.rings, e.ring)
					s.ringFDs = append(s.ringFDs, e.fd)
				}
				s.events = append(s.events, e)
				s.openedThread(pid, tid, cpu, kernel, launched)
			}
			// Threads created while we opened had no event to inherit:
			// scan again until the set is stable.
			if launched || !added {
				break
			}
		}
	}
	return nil
}

// openShared opens attr on pid (-1: every task) and cpu. With owner < 0
// the event maps a ring of its own (RingPages); otherwise its records go
// to the ring of event owner, on the same CPU.
func (s *session) openShared(attr *unix.PerfEventAttr, pid, cpu, owner int) (event, error) {
	fd, err := perf.Open(attr, pid, cpu, 0)
	if err != nil {
		return event{}, err
	}
	e := event{fd: fd}
	if owner >= 0 {
		err = perf.SetOutput(fd, owner)
	} else {
		e.ring, err = perf.MapRing(fd, s.cfg.RingPages)
	}
	if err != nil {
		perf.Close(fd)
		return event{}, err
	}
	return e, nil
}

// Ring sizes: the ring reader empties the rings while the loop reads a
// large module's symbols (2 to 3.5 s were seen on node, 100 MB, on a
// loaded machine), but it too can be descheduled on a loaded machine, so
// a ring holds up to ringSeconds of samples at the sampling rate, each as large as a full call chain and the user stack
// make it. Rings never get smaller than perf's default, 512 KiB, and
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
// is unknown: they get the largest rings.
func ringPages(cfg Config, cpus int, unlimited bool) int {
	if !unlimited {
		return minRingPages
	}
	most := min(int64(maxRingBytes), int64(maxRingsBytes/2/max(cpus, 1)))
	bytes := most // the rate of other events than clocks per period is unknown
	switch {
	case cfg.Period == 0:
		bytes = int64(cfg.Freq) * maxSampleBytes(cfg) * ringSeconds
	case cfg.Event.Clock():
		bytes = max(1, int64(time.Second)/int64(cfg.Period)) * maxSampleBytes(cfg) * ringSeconds
	}
	// Rounding up could pass most: the power of two below it is the
	// largest ring.
	pages := perf.RingPagesFor(min(bytes, most))
	if int64(pages*os.Getpagesize()) > most {
		pages /= 2
	}
	return max(pages, minRingPages)
}

// watermark is the wakeup watermark of every ring: a quarter of it.
func (s *session) watermark() uint32 {
	return uint32(s.cfg.RingPages * os.Getpagesize() / 4)
}

// closeSources removes every probe; the target goes on unharmed.
func (s *session) closeSources() {
	for _, src := range s.sources {
		src.close()
	}
	s.sources = nil
	if s.instr != nil {
		for _, g := range s.instr.graphs {
			g.close()
		}
		s.instr.graphs = nil
	}
}

func (s *session) closeEvents() {
	s.stopSideRings()
	s.reader.stopReading()
	// Closing the last event of a tracepoint waits for an RCU grace
	// period (tens of ms in a VM): the descriptors close in parallel, so
	// that the waits overlap instead of adding up (the interrupt
	// tracepoints made `record` of a short program 140 ms longer).
	// At most closers at a time: an attached process with many threads
	// has an event per thread and CPU.
	const closers = 32
	var wg sync.WaitGroup
	sem := make(chan struct{}, closers)
	for _, e := range s.events {
		if e.ring != nil {
			e.ring.Close()
		}
		sem <- struct{}{}
		wg.Go(func() {
			perf.Close(e.fd)
			<-sem
		})
	}
	wg.Wait()
	s.events, s.rings, s.ringFDs = nil, nil, nil
	s.counters.close()
}

// loop drains the rings until recording should stop and returns why.
func (s *session) loop(ctx context.Context, tgt *target, pid int) (string, error) {
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
	if s.instr != nil && s.instr.root != "" {
		// --root places probes when a function first runs: look at its
		// events soon, so its callees miss as few calls as possible.
		timeout = 5
	}
	poller, err := perf.NewPoller(fds)
	if err != nil {
		return "", err
	}
	defer poller.Close()
	var deadline <-chan time.Time
	if s.cfg.Duration > 0 {
		t := time.NewTimer(s.cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	var targetDone <-chan struct{}
	if tgt != nil {
		targetDone = tgt.done
	}
	lastFlush := time.Now()
	reason := ""
	for reason == "" {
		if err := poller.Wait(timeout); err != nil {
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
			if tgt == nil && !processAlive(pid) {
				reason = "exited"
			}
		}
		if reason == "" {
			if reason, err = s.serveControl(); err != nil {
				return "", err
			}
		}
		if err := s.drain(reason != ""); err != nil {
			return "", err
		}
		if s.full && reason == "" {
			reason = "size"
			fmt.Fprintf(s.log, "trueprof: trace reached --size %d bytes; sampling stopped\n", s.cfg.SizeLimit)
			// As for every other stop: the events off, the ring reader
			// stopped, the probes detached, what is left processed.
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
	var unparsed uint64
	var derr error
	s.pending, unparsed, derr = s.reader.take(s.pending, s.freed)
	clear(s.freed)
	s.freed = s.freed[:0]
	if unparsed > 0 {
		s.lost(trace.LostUnparsed, unparsed, perf.Now())
		fmt.Fprintf(s.log, "trueprof: skipped %d malformed kernel records: %v\n", unparsed, derr)
	}
	s.warnFull()
	s.readOtherRings(final)
	slices.SortStableFunc(s.pending, func(a, b perf.Record) int {
		switch {
		case a.Time < b.Time:
			return -1
		case a.Time > b.Time:
			return 1
		}
		return 0
	})
	n := len(s.pending)
	if !final {
		n, _ = slices.BinarySearchFunc(s.pending, horizon, func(r perf.Record, t uint64) int {
			if r.Time < t {
				return -1
			}
			return 1
		})
	}
	// Merge the kernel's records with the probes' events by time, so
	// every event is resolved against the mappings of its moment.
	s.drainEvents(final)
	m := len(s.pendingEvents)
	if !final {
		m, _ = slices.BinarySearchFunc(s.pendingEvents, horizon, func(e instrEvent, t uint64) int {
			if e.time < t {
				return -1
			}
			return 1
		})
	}
	i, j := 0, 0
	for i < n || j < m {
		if j == m || (i < n && s.pending[i].Time <= s.pendingEvents[j].time) {
			err := s.process(&s.pending[i])
			if b := s.pending[i].UserStack; b != nil {
				s.freed = append(s.freed, b)
				s.pending[i].UserStack = nil
			}
			if err != nil {
				return err
			}
			i++
			continue
		}
		if err := s.processEvent(&s.pendingEvents[j]); err != nil {
			return err
		}
		j++
	}
	s.pending = append(s.pending[:0], s.pending[n:]...)
	// The backlog after the horizon is small; moving it keeps the buffer
	// from growing.
	s.pendingEvents = append(s.pendingEvents[:0], s.pendingEvents[m:]...)
	return nil
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
		stack, truncated, reason, err := s.res.stack(r)
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
		s.res.mmap(r.PID, mapping{start: r.Addr, end: r.Addr + r.Len, pgoff: r.PgOff, path: r.Filename, buildID: r.BuildID, time: r.Time})
		if err := s.moduleMapped(r.PID, r.Filename); err != nil {
			return err
		}
		path, err := w.Intern(r.Filename)
		if err != nil {
			return err
		}
		return w.Write(&trace.Module{Time: r.Time, PID: r.PID, TID: r.TID, Start: r.Addr, Len: r.Len, PgOff: r.PgOff,
			Prot: r.Prot, Flags: r.Flags, Path: path, BuildID: r.BuildID})
	case perf.RecordComm:
		if r.Exec() {
			if err := s.res.exec(r.PID); err != nil {
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
			s.res.fork(r.PID, r.PPID)
		}
		return w.Write(&trace.Fork{Time: r.Time, PID: r.PID, PPID: r.PPID, TID: r.TID, PTID: r.PTID})
	case perf.RecordExit:
		if r.PID == r.TID {
			if err := s.res.exit(r.PID); err != nil {
				return err
			}
		}
		return w.Write(&trace.Exit{Time: r.Time, PID: r.PID, PPID: r.PPID, TID: r.TID, PTID: r.PTID})
	case perf.RecordSwitch:
		return w.Write(&trace.Switch{Time: r.Time, PID: r.PID, TID: r.TID, CPU: r.CPU, Out: r.SwitchOut(), Preempt: r.Preempted()})
	case perf.RecordLost, perf.RecordLostSamples:
		s.lost(trace.LostKernel, r.Lost, r.Time)
	case perf.RecordThrottle, perf.RecordUnthrottle:
		return w.Write(&trace.Throttle{Time: r.Time, Unthrottle: r.Type == perf.RecordUnthrottle})
	}
	return nil
}

// finish writes the End record and closes the trace.
func (s *session) finish() error {
	reason, err := s.w.Intern(s.result.Reason)
	if err != nil {
		return err
	}
	// JIT runtimes may write their symbol files last (at exit) or on
	// demand: what is still unnamed is looked up once more.
	if err := s.res.finish(); err != nil {
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
