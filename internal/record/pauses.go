package record

import (
	"fmt"
	"slices"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// pauseWatch finds the time the target's threads lose while the recorder
// places or removes uprobes in a running process (attaching with -p, a
// dlopen'ed library, --root's callees, ctl trace add|remove and root, the
// detach at the end). Writing a probe into a process's code takes its
// mm's lock, once per probe: a thread that computes never notices, but
// one that needs the lock (a page fault, mmap, munmap, a new thread)
// waits, for up to tens of milliseconds over 2,000 probes (go run
// ./bench/attachpause). The kernel's lock:contention_begin and
// lock:contention_end tracepoints, enabled only while probes are placed
// or removed, give each wait, and a target thread's wait during such a
// window is written as an Adjust record, which the analysis removes from
// the calls it falls in.
type pauseWatch struct {
	fds   []int // the tracepoint events, disabled outside the windows
	rings []*perf.Ring
	// common is the raw data's event type field; begin and end the
	// tracepoints' ids; flags the contention's kind.
	common, flags perf.TracepointField
	begin, end    uint64
	// windows are the spans in which probes were placed or removed;
	// enabled says the tracepoints are on: from a window's start until no
	// wait begun by then is left open, at least pauseGrace after its end.
	windows [][2]uint64
	enabled bool
	// waiting are the waits begun, by tid, whose end is not yet read.
	waiting map[uint32]uint64
	pending []perf.Record
	rec     trace.Adjust // reused
}

// pauseGrace is how long the tracepoints stay on after a window: a
// thread woken when the recorder releases the lock for the last time
// ends its wait once it runs again, which on a loaded machine takes
// milliseconds.
const pauseGrace = 100 * time.Millisecond

// pauseGiveUp is how long a wait may stay open after the last window
// before it is forgotten (its end lost).
const pauseGiveUp = time.Second

// contentionSpin is the contention flag of a spinning waiter, which
// never leaves its CPU (LCB_F_SPIN in include/trace/events/lock.h).
const contentionSpin = 1

// openPauses opens the lock contention tracepoints on every CPU, for all
// tasks and disabled, when probes may be placed while the target runs.
// Without them (an older kernel, no permission) recording goes on and
// the pauses are said to be left in.
func (s *session) openPauses() {
	if s.mech != MechUprobe {
		return
	}
	if err := s.openPauseEvents(); err != nil {
		fmt.Fprintf(s.log, "trueprof: waits for probes being placed in the running target are not measured (no Adjust records for them): %v\n", err)
	}
}

func (s *session) openPauseEvents() error {
	pw := &pauseWatch{waiting: map[uint32]uint64{}}
	var tps []*perf.Tracepoint
	for _, name := range []string{"contention_begin", "contention_end"} {
		tp, err := perf.LookupTracepoint("lock", name)
		if err != nil {
			return err
		}
		tps = append(tps, tp)
	}
	pw.begin, pw.end = tps[0].ID, tps[1].ID
	pw.common = tps[0].Fields["common_type"]
	var ok bool
	if pw.flags, ok = tps[0].Fields["flags"]; !ok {
		return fmt.Errorf("tracepoint lock:contention_begin has no field flags")
	}
	opened, rings, _, err := s.openTracepoints(tps, perf.TracepointOptions{Disabled: true}, "", nil)
	if err != nil {
		return err
	}
	pw.rings = rings
	for _, e := range opened {
		pw.fds = append(pw.fds, e.fd)
	}
	// closeEvents closes them with the others. They stay out of
	// drain's disable-all: they are off but for the windows.
	s.events = append(s.events, opened...)
	s.pauses = pw
	return nil
}

// placing opens a window in which probes are placed or removed; the
// function it returns closes it. A nil watch does nothing.
func (pw *pauseWatch) placing() func() {
	if pw == nil {
		return func() {}
	}
	// Always: drain's final pass disables every event before the detach.
	pw.enable(true)
	start := perf.Now()
	return func() { pw.windows = append(pw.windows, [2]uint64{start, perf.Now()}) }
}

func (pw *pauseWatch) enable(on bool) {
	for _, fd := range pw.fds {
		if on {
			perf.Enable(fd)
		} else {
			perf.Disable(fd)
		}
	}
	pw.enabled = on
}

// writePauses reads the contention rings and writes an Adjust record for
// each wait of a target thread that began before a window ended and
// ended after it began, from the later of its start and the window's to
// its end. A wait whose end is not read yet waits for a later call;
// final waits up to pauseGrace for them, the recording being over.
func (s *session) writePauses(final bool) error {
	pw := s.pauses
	if pw == nil || !pw.enabled {
		return nil
	}
	for {
		if err := s.readPauses(); err != nil {
			return err
		}
		since := time.Duration(perf.Now() - pw.windows[len(pw.windows)-1][1])
		settled := len(pw.waiting) == 0 && (final || since >= pauseGrace)
		if settled || since >= pauseGiveUp || (final && since >= pauseGrace) {
			pw.enable(false)
			// What came in before the events went off.
			err := s.readPauses()
			clear(pw.waiting)
			return err
		}
		if !final {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}

// readPauses pairs the contention records read so far; see writePauses.
func (s *session) readPauses() error {
	pw := s.pauses
	pw.pending = pw.pending[:0]
	var unparsed uint64
	for _, ring := range pw.rings {
		ring.Read(func(rec []byte) {
			var r perf.Record
			if err := perf.Decode(rec, perf.TracepointSampleType, &r); err != nil {
				unparsed++
				return
			}
			switch r.Type {
			case perf.RecordSample:
				pw.pending = append(pw.pending, r)
			case perf.RecordLost:
				s.lost(trace.LostKernel, r.Lost, perf.Now())
			}
		})
	}
	if unparsed > 0 {
		s.lost(trace.LostUnparsed, unparsed, perf.Now())
	}
	// A wait may begin on one CPU and end on another.
	slices.SortFunc(pw.pending, byTime)
	for i := range pw.pending {
		r := &pw.pending[i]
		typ, ok := pw.common.Uint(r.Raw)
		if !ok || !s.threads.target(r.PID, r.TID) {
			continue
		}
		switch typ {
		case pw.begin:
			flags, _ := pw.flags.Uint(r.Raw)
			if _, nested := pw.waiting[r.TID]; !nested && flags&contentionSpin == 0 {
				pw.waiting[r.TID] = r.Time
			}
		case pw.end:
			start, ok := pw.waiting[r.TID]
			if !ok {
				continue
			}
			delete(pw.waiting, r.TID)
			if d := pw.overlap(start, r.Time); d > 0 {
				pw.rec = trace.Adjust{Time: r.Time, PID: r.PID, TID: r.TID, Duration: d}
				if err := s.w.Write(&pw.rec); err != nil {
					return err
				}
			}
		}
	}
	clear(pw.pending) // raw data the collector may free
	return nil
}

// overlap is how much of the wait [start, end] falls after the start of a
// window that began before the wait ended and ended after the wait
// began: the wait's end is the window's doing even past the window, when
// the lock's last holder was the recorder.
func (pw *pauseWatch) overlap(start, end uint64) uint64 {
	for _, w := range slices.Backward(pw.windows) {
		if w[0] <= end && start <= w[1] {
			return end - max(start, w[0])
		}
	}
	return 0
}
