package record

import (
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"trueprof/internal/hook"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// chooseMech is where the probe mechanism is chosen, once per recording:
// hooks when the command was built with -finstrument-functions (unless
// uprobes are asked for), uprobes when functions are named to trace or
// uprobes asked for, and MechAuto, no probes, otherwise. An attached
// process gets uprobes only: hooks are loaded at exec.
func chooseMech(cfg Config) (Mech, error) {
	named := len(cfg.Trace) > 0 || cfg.Root != "" || cfg.Mech == MechUprobe
	if len(cfg.Command) == 0 || cfg.Mech == MechUprobe {
		if named {
			return MechUprobe, nil
		}
		return MechAuto, nil
	}
	path, err := targetPath(cfg.Command, 0)
	if err != nil {
		if cfg.Mech == MechHook {
			return MechAuto, err
		}
		// Launching says what is wrong with the command.
		return cfg.Mech, nil
	}
	ok, err := hook.Instrumented(path)
	switch {
	case ok:
		return MechHook, nil
	case cfg.Mech == MechHook && err != nil:
		return MechAuto, err
	case cfg.Mech == MechHook:
		return MechAuto, fmt.Errorf("mechanism hook: %s was not built with -finstrument-functions", path)
	case named:
		return MechUprobe, nil
	}
	return MechAuto, nil
}

// prepareProbes prepares mechanism mech (chooseMech) before the target
// runs: the hooks' shared memory, which the launched command inherits
// (lo says how), or the uprobe planner with the probes planned in the
// executable and its libraries.
func (s *session) prepareProbes(mech Mech, pid int) (lo launchOptions, err error) {
	s.mech = mech
	switch mech {
	case MechHook:
		if s.region, err = hook.NewRegion(hook.Options{}); err != nil {
			return lo, err
		}
		lo.files = []*os.File{s.region.File()}
		// The wrapper has the gate on descriptor 3; extra files follow.
		lo.env = s.region.Env(4)
	case MechUprobe:
		if s.uprobes, err = newUprobePlanner(s.cfg, pid, s.log); err != nil {
			return lo, err
		}
		s.planner = s.uprobes
	}
	return lo, nil
}

// startProbes starts the prepared mechanism once the target process
// exists (launched: stopped before exec): the hooks' drainer, or the
// planned uprobes.
func (s *session) startProbes(pid int, launched bool) error {
	switch s.mech {
	case MechHook:
		h, err := newHookSource(s.region)
		if err != nil {
			return err
		}
		s.region = nil // the source closes it
		s.sources = append(s.sources, h)
	case MechUprobe:
		return s.uprobes.start(pid, launched, s.res, s.w, s.pauses, func(src eventSource) { s.sources = append(s.sources, src) })
	}
	return nil
}

// detach removes the probes when recording stops and returns the detach
// time, 0 when no function was probed. Events count until then: an exit
// after it may be of a call whose entry came after it too (a return
// probe still catches the calls entered while the entry probes come off),
// so the calls still open then end there. Hooks cannot be removed: their
// detach time is when their last events were collected.
func (s *session) detach() uint64 {
	t := perf.Now()
	// Removing probes from a running target makes it wait as placing
	// them does.
	removed := s.pauses.placing()
	for _, src := range s.sources {
		if u, ok := src.(*uprobeSource); ok {
			u.end = t
		}
		src.finish()
	}
	removed()
	if s.planner != nil {
		s.planner.stop()
	}
	switch s.mech {
	case MechAuto:
		return 0
	case MechHook:
		return perf.Now()
	}
	return t
}

// hookSource drains the hook library's shared-memory rings. A thread
// fills its ring in a few milliseconds at full speed and then waits for
// space, so the rings are copied out by a goroutine of their own, which
// does nothing else; processing the events may lag behind by a bounded
// spool of chunks without stalling the target. Events go into fixed-size
// chunks recycled through a free list: a growing slice would stop the
// drainer for tens of milliseconds to reallocate, zero and copy millions
// of events. When the spool is full the drainer waits for processing to
// hand a chunk back, and so do the target's threads for ring space (each
// wait an adjust record): memory stays bounded and nothing is dropped
// unless processing stalls for the hook's whole MaxWait.
type hookSource struct {
	r      *hook.Region
	mu     sync.Mutex
	full   [][]instrEvent // filled chunks, oldest first
	cur    []instrEvent   // the chunk being filled
	since  time.Time      // when cur got its first event
	free   [][]instrEvent
	chunks int           // chunks allocated, at most hookSpool until stop
	freed  chan struct{} // signalled when drain hands chunks back
	// ready is signalled when the drainer hands a chunk over, so the
	// recording loop's poll wakes for it at once.
	ready  *perf.Wakeup
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// hookChunk is the number of events per chunk (2.5 MiB).
const hookChunk = 1 << 14

// hookSpool bounds the chunks waiting to be processed (40 MiB, 1M
// events, some 50 ms of the densest load): enough to ride out the
// processing loop's pauses, small enough that the recorder's memory does
// not grow with the target's event rate.
const hookSpool = 32

// hookHandOver is how long events may wait in a chunk that is not full:
// a slow target's events must reach the trace within the recorder's
// one-second flush, and a snapshot of a live trace must see them.
const hookHandOver = 100 * time.Millisecond

func newHookSource(r *hook.Region) (*hookSource, error) {
	ready, err := perf.NewWakeup()
	if err != nil {
		return nil, err
	}
	h := &hookSource{r: r, ready: ready, freed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go h.run()
	return h, nil
}

// handOver moves the chunk being filled to the full ones and wakes the
// recording loop; h.mu is held.
func (h *hookSource) handOver() {
	h.full = append(h.full, h.cur)
	h.cur = nil
	h.ready.Signal()
}

func (h *hookSource) run() {
	defer close(h.done)
	// The drainer must run as soon as it wakes, or threads wait for ring
	// space: on a machine with few CPUs it shares one with the event
	// processing. Its own thread, at a higher priority where permitted,
	// gets the CPU first.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), -10)
	// Drain on a period, never in a loop: the hook publishes each record
	// by storing its ring's head, and a reader polling those heads
	// continuously pulls their cache lines away from the writing threads
	// on every event. A ring lasts several milliseconds at full speed.
	// The thread sleeps in nanosleep rather than on a Go timer: a timer
	// fires only when its P reaches a scheduling point, which a P busy
	// processing events may not for a whole preemption quantum (10 ms).
	period := syscall.NsecToTimespec(int64(time.Millisecond))
	for {
		h.r.Drain(h.push)
		if len(h.cur) > 0 && time.Since(h.since) >= hookHandOver {
			h.mu.Lock()
			h.handOver()
			h.mu.Unlock()
		}
		select {
		case <-h.stop:
			return
		default:
		}
		syscall.Nanosleep(&period, nil)
	}
}

// push appends one event; only the drainer (or finish, after it stopped)
// calls it. With the spool full it waits for drain to free a chunk, and
// the target's threads wait for their rings meanwhile; once stopping it
// no longer waits (the target is done and the rings hold the rest).
func (h *hookSource) push(e hook.Event) {
	if len(h.cur) == cap(h.cur) {
		h.nextChunk()
	}
	if len(h.cur) == 0 {
		h.since = time.Now()
	}
	h.cur = append(h.cur, convertHook(e))
}

// nextChunk hands the full chunk over and takes a free one.
func (h *hookSource) nextChunk() {
	h.mu.Lock()
	if h.cur != nil {
		h.handOver()
	}
	for {
		if n := len(h.free); n > 0 {
			h.cur, h.free = h.free[n-1][:0], h.free[:n-1]
			break
		}
		if h.chunks < hookSpool || h.stopping() {
			h.chunks++
			h.cur = make([]instrEvent, 0, hookChunk)
			break
		}
		h.mu.Unlock()
		select {
		case <-h.freed:
		case <-h.stop:
		}
		h.mu.Lock()
	}
	h.mu.Unlock()
}

func (h *hookSource) stopping() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

func convertHook(e hook.Event) instrEvent {
	ev := instrEvent{time: e.Time, pid: e.PID, tid: e.TID, addr: e.Addr}
	switch e.Kind {
	case hook.KindEntry:
		ev.kind = trace.EventEntry
	case hook.KindExit:
		ev.kind = trace.EventExit
	case hook.KindAdjust:
		// The hook stamps a wait with its start (the event it delayed);
		// an Adjust record is stamped with the end of the pause.
		ev.time += e.Duration
		ev.addr, ev.dropped = e.Duration, e.Dropped
	}
	return ev
}

func (h *hookSource) fds() []int { return []int{h.ready.Fd()} }

// drain passes the events of drainChunks one at a time.
func (h *hookSource) drain(fn func(instrEvent)) {
	h.drainChunks(func(c []instrEvent) {
		for i := range c {
			fn(c[i])
		}
	})
}

// drainChunks hands over the filled chunks and returns them to the free
// list. The chunk being filled stays with the drainer until it is full
// or the drainer has stopped.
func (h *hookSource) drainChunks(fn func([]instrEvent)) {
	// Reset the wake-up before taking the chunks: a chunk handed over
	// after this signals again.
	h.ready.Clear()
	h.mu.Lock()
	full := h.full
	h.full = nil
	if h.closed && len(h.cur) > 0 {
		full = append(full, h.cur)
		h.cur = nil
	}
	h.mu.Unlock()
	for _, c := range full {
		fn(c)
	}
	h.mu.Lock()
	h.free = append(h.free, full...)
	h.mu.Unlock()
	if len(full) > 0 {
		select {
		case h.freed <- struct{}{}:
		default:
		}
	}
}

// finish stops the drainer once the target is done and collects what
// the rings still hold, including what threads that ended without their
// exit hook (exit, exec, a fatal signal) still owed.
func (h *hookSource) finish() {
	select {
	case <-h.stop:
		return
	default:
	}
	close(h.stop)
	<-h.done
	h.r.Drain(h.push)
	h.r.Flush(h.push)
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
}

func (h *hookSource) lost() uint64 { return 0 }

func (h *hookSource) close() error {
	h.finish()
	h.ready.Close()
	return h.r.Close()
}

// uprobeSource reads the events of a set of uprobes.
type uprobeSource struct {
	set    *uprobe.Set
	starts []uint64 // file offset of each site's function start
	module uint32   // string id of the probed file's path
	// Events count from when every probe was in place (from; until
	// accept, math.MaxUint64) until the detach began (end): every entry
	// counted then has its exit counted, or its call is open at end.
	// probes are the Probe records accept writes.
	from, end uint64
	probes    []trace.Probe
}

func (u *uprobeSource) fds() []int { return u.set.Fds() }

// drain passes the events that count. Exits of calls entered before
// from pass too; the analysis ignores an exit with no open call.
func (u *uprobeSource) drain(fn func(instrEvent)) {
	u.set.Read(func(e uprobe.Event) {
		if e.Time < u.from || e.Time >= u.end {
			return
		}
		kind := trace.EventExit
		if e.Entry {
			kind = trace.EventEntry
		}
		fn(instrEvent{time: e.Time, pid: e.PID, tid: e.TID, kind: kind, module: u.module, addr: u.starts[e.Site]})
	})
}

// finish removes the probes; the events they wrote stay to be drained.
func (u *uprobeSource) finish() { u.set.Detach() }

func (u *uprobeSource) lost() uint64 { return u.set.Lost() }
func (u *uprobeSource) close() error { return u.set.Close() }

// fileOffsets converts the sites' function start addresses (ELF virtual
// addresses) to file offsets, which is how the resolver names code: an
// event names the function's first instruction, wherever its probe sits.
func fileOffsets(path string, sites []uprobe.Site) ([]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([]uint64, len(sites))
	for i, s := range sites {
		out[i] = s.Entry
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && s.Start >= p.Vaddr && s.Start < p.Vaddr+p.Filesz {
				out[i] = s.Start - p.Vaddr + p.Off
				break
			}
		}
	}
	return out, nil
}
