package record

import (
	"fmt"
	"sync"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// Interrupts (log-rt's IN metric) come from the irq tracepoints, opened
// for all tasks on each CPU: an interrupt runs on whatever task was
// current, and the samples name it. Handler entries and exits are paired
// per CPU; an IRQ record is written at the exit when the interrupted
// task is a target thread.
//
// Nesting: softirqs run with interrupts enabled, so a hardware interrupt
// can land inside one. Each record's Duration is the handler's own time:
// a softirq's excludes the hard interrupts nested in it, so that the
// durations of a thread's IRQs add up to the time interrupts took from
// it, with nothing counted twice. Hard interrupt handlers do not nest
// (Linux runs them with interrupts disabled) and softirqs never run
// inside either.
//
// Losses: an entry whose exit was lost is dropped when the next entry on
// its CPU shows it cannot still be running, or at a lost-records notice
// of its ring; an exit without its entry (lost, or begun before
// recording) is ignored. Either way the interrupt is missing, never
// given a wrong duration.

// irqPoint is what a tracepoint of the irq system marks.
type irqPoint struct {
	kind   trace.IRQKind
	exit   bool
	vector perf.TracepointField // "irq" or "vec"
}

// irqTracepoints are the tracepoints recorded, with their vector field.
var irqTracepoints = []struct {
	name, field string
	point       irqPoint
}{
	{"irq_handler_entry", "irq", irqPoint{kind: trace.IRQHard}},
	{"irq_handler_exit", "irq", irqPoint{kind: trace.IRQHard, exit: true}},
	{"softirq_entry", "vec", irqPoint{kind: trace.IRQSoft}},
	{"softirq_exit", "vec", irqPoint{kind: trace.IRQSoft, exit: true}},
}

// irqRunning is a handler that has entered and not yet exited.
type irqRunning struct {
	kind     trace.IRQKind
	vector   uint32
	start    uint64
	pid, tid uint32
	nested   uint64 // time of the handlers nested in this one
}

// irqState is the interrupt recording of a session.
type irqState struct {
	points map[uint64]irqPoint // by tracepoint id
	common perf.TracepointField
	rings  []*perf.Ring
	fds    []int // of the events that own the rings
	// running are the handlers running on each CPU, innermost last.
	running map[uint32][]irqRunning
	rec     trace.IRQ // reused by processIRQ
}

// irqLost marks a lost-records notice of an interrupt ring, so that
// process passes it to processIRQ with the tracepoint samples: a record
// has Raw only when it comes from an interrupt ring.
var irqLost = []byte{}

// irqFilter drops in the kernel the interrupts of idle CPUs (the idle
// task has pid 0), which are most of them on a quiet machine and never
// a target's.
const irqFilter = "common_pid != 0"

// irqOpening is the interrupt tracepoints being opened on a goroutine of
// their own (startIRQ) while the rest of the recording is set up and the
// target starts: opening a tracepoint waits for the kernel's event_mutex,
// which a previous recording's teardown holds for 35-44 ms per
// tracepoint in a VM (closeEventFDs), so recordings started one after
// another waited 40-120 ms here before their target could start. The
// goroutine first waits for such teardowns to end (WaitTeardowns), and
// only then opens.
type irqOpening struct {
	done chan struct{}
	// stop, closed by the session's close (stopOpening), makes the
	// opening give up before its next tracepoint (errOpeningStopped).
	stop chan struct{}
	// mu orders stop against opening, which is set once the goroutine
	// has begun opening: before, it waits for teardowns and opens
	// nothing once stopped.
	mu      sync.Mutex
	opening bool
	st      irqState
	opened  []event
	err     error
	at      uint64 // when the tracepoints were enabled (perf.Now)
}

// startIRQ starts opening the interrupt tracepoints on every CPU,
// enabled: their records count only once a target thread is known, which
// a launched target becomes at its exec. adoptIRQ takes the result.
func (s *session) startIRQ() {
	o := &irqOpening{done: make(chan struct{}), stop: make(chan struct{})}
	s.irqOpening = o
	go func() {
		defer close(o.done)
		WaitTeardowns()
		o.mu.Lock()
		select {
		case <-o.stop:
			o.err = errOpeningStopped
		default:
			o.opening = true
		}
		o.mu.Unlock()
		if o.opening {
			o.st, o.opened, o.err = s.openIRQEvents(o.stop)
			o.at = perf.Now()
		}
	}()
}

// stopOpening stops the opening and returns what it opened, to close
// with the session's other events. It waits for a tracepoint being
// opened, never for the teardowns the opening waits for before
// (WaitTeardowns): that goroutine is left to return, opening nothing.
func (o *irqOpening) stopOpening() []event {
	o.mu.Lock()
	close(o.stop)
	opening := o.opening
	o.mu.Unlock()
	if !opening {
		return nil
	}
	<-o.done
	return o.opened
}

// adoptIRQ makes startIRQ's tracepoints the session's once they are
// open, waiting for them when wait is set (before an attached process's
// events are enabled); without wait it returns at once while they are
// still opening, so the loop processes the target's events meanwhile
// (abandonIRQ when it stops first). Interrupts before the tracepoints were
// enabled are not recorded: when that was after the target was released
// (since, 0 when it was not), it says from when they are. When the
// tracepoints or the permission to trace every task are missing it says
// so in one line and recording goes on without interrupts.
func (s *session) adoptIRQ(since uint64, wait bool) {
	o := s.irqOpening
	if o == nil {
		return
	}
	if !wait {
		select {
		case <-o.done:
		default:
			return
		}
	}
	s.irqOpening = nil
	<-o.done
	if o.err != nil {
		fmt.Fprintf(s.log, "trueprof: interrupts not recorded: %v\n", o.err)
		return
	}
	// closeEvents closes them with the others; the side rings' reader
	// (siderings.go) reads their rings, under its lock.
	s.events = append(s.events, o.opened...)
	s.side.mu.Lock()
	s.irq = o.st
	s.side.mu.Unlock()
	if since > 0 && o.at > since+uint64(irqLate) {
		fmt.Fprintf(s.log, "trueprof: interrupts recorded from %.0f ms after the target started: their tracepoints waited for the kernel (a previous recording's teardown)\n",
			float64(o.at-since)/1e6)
	}
}

// abandonIRQ says, when recording stops while the interrupt tracepoints
// are still opening, that no interrupt was recorded: none of the
// target's could be. Waiting for them (a previous recording's teardown
// held them up to 200 ms) would only delay the end; session.close
// closes them once open.
func (s *session) abandonIRQ() {
	if s.irqOpening != nil && !s.irqAbandoned {
		s.irqAbandoned = true
		fmt.Fprintf(s.log, "trueprof: interrupts not recorded: their tracepoints waited for the kernel (a previous recording's teardown) until recording stopped\n")
	}
}

// irqLate is how long after the target's release the interrupt
// tracepoints may be enabled without a word: the exec wrapper takes
// longer than that to exec the target.
const irqLate = time.Millisecond

// openIRQEvents opens the interrupt tracepoints. It runs on startIRQ's
// goroutine: it reads the session's settings and changes nothing of it.
// Stopped (stop closed), it returns what it opened so far with
// errOpeningStopped, for the caller to close.
func (s *session) openIRQEvents(stop <-chan struct{}) (irqState, []event, error) {
	st := irqState{points: map[uint64]irqPoint{}, running: map[uint32][]irqRunning{}}
	var tps []*perf.Tracepoint
	for _, t := range irqTracepoints {
		tp, err := perf.LookupTracepoint("irq", t.name)
		if err != nil {
			return st, nil, err
		}
		p := t.point
		var ok bool
		if p.vector, ok = tp.Fields[t.field]; !ok {
			return st, nil, fmt.Errorf("tracepoint irq:%s has no field %q", t.name, t.field)
		}
		st.points[tp.ID] = p
		st.common = tp.Fields["common_type"]
		tps = append(tps, tp)
	}
	opened, rings, owners, err := s.openTracepoints(tps, perf.TracepointOptions{}, irqFilter, stop)
	if err != nil {
		return st, opened, err
	}
	st.rings, st.fds = rings, owners
	return st, opened, nil
}

// readIRQ moves the records of the interrupt rings to s.side.irqs, from
// where they are merged by time with the sampling rings' records. The
// caller holds s.side.mu.
func (s *session) readIRQ() {
	for _, ring := range s.irq.rings {
		ring.Read(func(rec []byte) {
			var r perf.Record
			if err := perf.Decode(rec, perf.TracepointSampleType, &r); err != nil {
				s.side.unparsed++
				return
			}
			switch r.Type {
			case perf.RecordSample:
			case perf.RecordLost:
				r.Raw = irqLost
			default:
				return
			}
			s.side.irqs = append(s.side.irqs, r)
		})
	}
}

// processIRQ pairs interrupt entries and exits on r's CPU and writes an
// IRQ record for each interrupt of a target thread.
func (s *session) processIRQ(r *perf.Record) error {
	st := &s.irq
	run := st.running[r.CPU]
	if r.Type == perf.RecordLost {
		st.running[r.CPU] = run[:0]
		s.lost(trace.LostKernel, r.Lost, r.Time)
		return nil
	}
	typ, ok := st.common.Uint(r.Raw)
	p, known := st.points[typ]
	vec, ok2 := p.vector.Uint(r.Raw)
	if !ok || !known || !ok2 {
		return nil
	}
	if !p.exit {
		if p.kind == trace.IRQSoft {
			// Nothing we trace can be running under a softirq's start.
			run = run[:0]
		}
		for len(run) > 0 && run[len(run)-1].kind == trace.IRQHard {
			run = run[:len(run)-1] // its exit was lost
		}
		st.running[r.CPU] = append(run, irqRunning{kind: p.kind, vector: uint32(vec), start: r.Time, pid: r.PID, tid: r.TID})
		return nil
	}
	i := len(run) - 1
	for i >= 0 && (run[i].kind != p.kind || run[i].vector != uint32(vec)) {
		i--
	}
	if i < 0 {
		return nil // its entry was lost or came before recording began
	}
	h := run[i]
	run = run[:i] // handlers above it lost their exits
	st.running[r.CPU] = run
	if r.Time < h.start {
		return nil
	}
	span := r.Time - h.start
	if i > 0 {
		run[i-1].nested += span
	}
	if s.full || h.pid != r.PID || h.tid != r.TID || !s.threads.target(r.PID, r.TID) {
		return nil
	}
	st.rec = trace.IRQ{Time: r.Time, PID: r.PID, TID: r.TID, CPU: r.CPU, Kind: p.kind, Vector: uint32(vec), Duration: span - min(h.nested, span)}
	return s.w.Write(&st.rec)
}
