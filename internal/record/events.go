package record

import (
	"cmp"
	"slices"

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
	// lost is the number of events the mechanism failed to deliver.
	lost() uint64
	// close removes the probes and releases the source.
	close() error
}

// instrEvent is one event of an eventSource.
type instrEvent struct {
	time     uint64
	pid, tid uint32
	kind     trace.EventKind // 0 for an adjustment
	// The function is known either by its address in the process
	// (hooks), or by module path and file offset (uprobes).
	addr uint64
	path string
	off  uint64
	// adjustments: time the thread lost in the profiler, events dropped.
	duration, dropped uint64
}

// drainEvents collects the sources' events into s.pendingEvents.
func (s *session) drainEvents() {
	for _, src := range s.sources {
		src.drain(func(e instrEvent) { s.pendingEvents = append(s.pendingEvents, e) })
	}
	slices.SortStableFunc(s.pendingEvents, func(a, b instrEvent) int { return cmp.Compare(a.time, b.time) })
}

// processEvent writes the trace record of one event. The function is
// resolved against the process's mappings as they are at the event's
// time, which the merge with the kernel records guarantees.
func (s *session) processEvent(e *instrEvent) error {
	if e.kind == 0 {
		return s.w.Write(&trace.Adjust{Time: e.time, PID: e.pid, TID: e.tid, Duration: e.duration, Dropped: e.dropped})
	}
	var fn uint32
	var err error
	if e.path != "" {
		fn, err = s.res.fileLocation(e.pid, e.path, e.off)
	} else {
		fn, err = s.res.functionLocation(e.pid, e.addr, e.time)
	}
	if err != nil {
		return err
	}
	s.result.Events++
	return s.w.Write(&trace.Event{Time: e.time, PID: e.pid, TID: e.tid, Kind: e.kind, Function: fn})
}
