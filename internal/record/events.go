package record

import (
	"cmp"
	"errors"
	"slices"

	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/trace"
)

// eventSource is a probe mechanism (compiled-in hooks or uprobes) that
// delivers function entries and exits of the target.
type eventSource interface {
	// fds are descriptors the poll loop waits on; a source without any is
	// drained on every loop iteration.
	fds() []int
	// drain passes every available event to fn.
	drain(fn func(instrEvent))
	// finish collects the last events once the target is done or
	// recording stops.
	finish()
	// lost is the number of events the mechanism failed to deliver.
	lost() uint64
	// close removes the probes and releases the source.
	close() error
}

// batchSource is an eventSource that hands over its events in slabs,
// into the session's buffer: the hooks' tens of millions of events a
// second are not passed through a call per event. It hands over a slab
// at a time, also once finished, and only one the session can process:
// a slab whose events all come after the reorder horizon waits in the
// source (hookSource), not copied into the session's buffer.
type batchSource interface {
	eventSource
	// drainInto appends the events of its oldest ready slab to dst and
	// returns it, if one of its ready slabs has events before the time
	// before (or times too far past it to be real); then whether more
	// are available, whether the events it appended are in time order,
	// after dst's last, and the earliest event of the slabs still ready,
	// or 0 when none is.
	drainInto(dst []instrEvent, before uint64) (out []instrEvent, more, ordered bool, next uint64)
}

// instrEvent is one event of an eventSource. It is small and holds no
// pointers: hooks deliver tens of millions a second, which the decoder
// writes and the recording loop reads from another core: 32 bytes,
// half a cache line (at 40, the loop took 0.6 ns more an event,
// BenchmarkMergeEvents, and both stages 0.5 CPU ns, BenchmarkHookPath).
type instrEvent struct {
	time uint64
	// addr is the function: its address in the process (hooks, module
	// 0) or its file offset in module (uprobes); for an adjustment
	// (kind 0), the time the thread lost in the profiler; for an
	// eventDropped, the number of events lost.
	addr     uint64
	pid, tid uint32
	// module is the string id of a uprobe's module path, else 0; for
	// an eventLabels, the key of the change.
	module uint32
	kind   trace.EventKind
}

// eventDropped marks an instrEvent that is an adjustment for events
// lost, whose number is its addr: a hook reports a wait or lost events,
// never both at once, and an instrEvent has room for one of them.
const eventDropped trace.EventKind = 0xfd

// drainEvents collects the sources' events into s.pendingEvents, the
// batch sources' slabs with events before the time before; final
// detaches the probes and collects the last ones. It reports whether a
// source holds more than it handed over (collectEvents takes them).
func (s *session) drainEvents(final bool, before uint64) bool {
	if final {
		s.detached = s.detach()
	}
	n := len(s.pendingEvents)
	for _, src := range s.sources {
		if _, ok := src.(batchSource); !ok {
			src.drain(func(e instrEvent) { s.pendingEvents = append(s.pendingEvents, e) })
		}
	}
	return s.collectEvents(len(s.pendingEvents) > n, before)
}

// collectEvents takes the batch sources' events into s.pendingEvents, a
// slab with events before the time before from each, sorts them all by
// time and reports whether a source holds more; s.eventsDue becomes the
// earliest event of the slabs left ready in the sources (0: none), for
// the loop to come back for them once the horizon passes it. What the
// last merge left is in order; check says that other events were
// appended since, which are looked at. Each source delivers a thread's
// events in order and, with one busy thread, usually everything in
// order: the stable sort runs only when threads interleave.
func (s *session) collectEvents(check bool, before uint64) bool {
	more, ordered := false, true
	s.eventsDue = 0
	for _, src := range s.sources {
		if b, ok := src.(batchSource); ok {
			var left, ord bool
			var next uint64
			s.pendingEvents, left, ord, next = b.drainInto(s.pendingEvents, before)
			more, ordered = more || left, ordered && ord
			if next != 0 && (s.eventsDue == 0 || next < s.eventsDue) {
				s.eventsDue = next
			}
		}
	}
	byTime := func(a, b instrEvent) int { return cmp.Compare(a.time, b.time) }
	if !ordered || check && !slices.IsSortedFunc(s.pendingEvents, byTime) {
		slices.SortStableFunc(s.pendingEvents, byTime)
	}
	return more
}

// processEvent writes the trace record of one event. The function is
// resolved against the process's mappings as they are at the event's
// time, which the merge with the kernel records guarantees.
func (s *session) processEvent(e *instrEvent) error {
	switch e.kind {
	case eventGoID:
		return s.writeGoID(e)
	case eventLabels:
		return s.writeLabels(e)
	case eventDropped:
		return s.writeAdjust(e, 0, e.addr)
	case 0:
		return s.writeAdjust(e, e.addr, 0)
	}
	if s.drop(e.time) {
		return nil
	}
	var fn uint32
	var err error
	if e.module != 0 {
		fn, err = s.res.FileLocation(e.pid, e.module, e.addr)
		if err == nil && e.kind == trace.EventEntry && s.planner != nil {
			err = s.planner.entered(e.pid, e.module, e.addr, e.time)
		}
	} else {
		fn, err = s.res.FunctionLocation(e.pid, e.addr, e.time)
	}
	if err != nil {
		return err
	}
	if s.cal != nil {
		if f := s.res.CalibrationFunction(fn); f != nil {
			return s.calibrationEvent(e, f)
		}
	}
	if s.hooks.off != nil && s.hooks.drops(fn, e.time) {
		return nil
	}
	// One record, reused: the writer encodes it at once, and millions of
	// allocated ones would keep the collector and the page allocator busy.
	// Its fields are stored one by one: a composite literal is built on
	// the stack with narrow stores and copied with a wide load, which
	// stalls on store forwarding (6 ns an event, an eighth of the
	// recorder's CPU on the dense load).
	r := &s.eventRec
	r.Time, r.PID, r.TID, r.Kind, r.Function = e.time, e.pid, e.tid, e.kind, fn
	if s.agg != nil {
		s.result.Events++
		return s.aggregateEvent(&s.eventRec) // folded into the trees, not written
	}
	switch err := s.w.WriteEvent(&s.eventRec); {
	case err == nil: // first: errors.Is is a call for every event
	case errors.Is(err, trace.ErrSizeLimit):
		// Events count against --size like samples; the writer counts
		// the refused ones in a Lost record at Close, and the recording
		// goes on with its other records.
		s.result.Lost++
		return nil
	default:
		return err
	}
	s.result.Events++
	return nil
}

// writeAdjust writes the Adjust record of an adjustment event: the
// thread lost the time duration in the profiler, or dropped events.
func (s *session) writeAdjust(e *instrEvent, duration, dropped uint64) error {
	if s.cal != nil && s.cal.Active(e.pid, e.tid) {
		// A pause inside a calibration burst is part of the burst's
		// own pause; dropped events are still counted.
		s.cal.Adjust(e.pid, e.tid, duration, dropped)
		if dropped == 0 {
			return nil
		}
		return s.w.Write(&trace.Adjust{Time: e.time, PID: e.pid, TID: e.tid, Dropped: dropped})
	}
	return s.w.Write(&trace.Adjust{Time: e.time, PID: e.pid, TID: e.tid, Duration: duration, Dropped: dropped})
}

// calibrationEvent passes an event of an in-run calibration burst to the
// collector instead of the profile. A finished burst becomes an Adjust:
// the thread spent that time calibrating, not running the program.
func (s *session) calibrationEvent(e *instrEvent, f *calfit.Function) error {
	start, done := s.cal.Event(e.pid, e.tid, e.time, e.kind == trace.EventEntry, f)
	if !done || e.time < start {
		return nil
	}
	return s.w.Write(&trace.Adjust{Time: e.time, PID: e.pid, TID: e.tid, Duration: e.time - start})
}
