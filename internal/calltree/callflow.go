package calltree

// FlowKind says what a callflow line is.
type FlowKind string

// Callflow line kinds.
const (
	FlowEntry FlowKind = "entry" // a function entry
	FlowExit  FlowKind = "exit"  // the exit of the call on top of the shadow stack
	// FlowPopped is a call closed without its exit, because the exit of
	// a caller further down the shadow stack arrived (a repair). It is
	// synthesised: its Delta is zero and the exit line follows it.
	FlowPopped FlowKind = "exit-missing"
	// FlowUnmatched is an exit that matched no open call and was ignored
	// (its Delta still ends the interval before it).
	FlowUnmatched FlowKind = "exit-unmatched"
	// FlowUnclosed is a call still open when the thread ended, closed
	// then (synthesised, zero Delta; the FlowEnd line before it has the
	// interval).
	FlowUnclosed FlowKind = "exit-end"
	// FlowDetach is when the probes came off, on a thread with calls
	// still open: its Delta is the interval since the last event, and a
	// FlowDetached line (synthesised, zero Delta) follows for each call.
	FlowDetach   FlowKind = "detach"
	FlowDetached FlowKind = "exit-detach"
	// FlowEnd is the thread's end (its exit, or the end of the
	// recording): its Delta is the interval since the last event, which
	// would otherwise be lost; Level, Name and Module are those of the
	// call then current (the thread's root outside any call).
	FlowEnd FlowKind = "end"
)

// FlowEvent is one line of a callflow (log-gen): an event of a
// thread with the metrics of the interval since the thread's previous
// event.
type FlowEvent struct {
	TimeNS uint64   `json:"time_ns"`
	Kind   FlowKind `json:"kind"`
	// Level is the depth of the call entered or exited (1 for a thread's
	// outermost calls); for an unmatched exit, the current depth plus 1.
	Level  int    `json:"level"`
	Name   string `json:"name"`
	Module string `json:"module"`
	// Delta is the interval that ended at this event: raw and calibrated
	// wall time, CPU time, dispatches, interrupts and samples taken in
	// it; for the thread's first event, since its baseline (its creation
	// or the start of recording). Zero for synthesised lines.
	Delta Metrics `json:"delta"`
}

// FlowThread is the callflow of one thread incarnation or, with
// Options.ByGoroutine, goroutine (Goroutine set, TID 0).
type FlowThread struct {
	PID       uint32      `json:"pid"`
	TID       uint32      `json:"tid"`
	Start     uint64      `json:"start_ns"` // as Thread.Start
	Name      string      `json:"name"`
	Goroutine *uint64     `json:"goroutine,omitempty"`
	Events    []FlowEvent `json:"events"` // in time order; never null
}

// flows returns the callflows of a's threads, Result.Flows when
// Options.Flow is set: per thread (sorted by PID, then goroutines by id,
// then TID and Start), the ordered entries and exits the replay
// analyses, each with the metrics of the interval before it, and the
// thread's end. Repairs appear as synthesised lines. Threads without
// events are left out.
func (a *replay) flows(threads []*thread) []FlowThread {
	out := []FlowThread{}
	for _, th := range threads {
		if len(th.flow) == 0 {
			continue
		}
		ft := FlowThread{PID: th.key.pid, TID: th.key.tid, Start: th.key.start, Name: th.name, Events: th.flow}
		if th.key.goroutine {
			ft.Goroutine = &th.key.goid
		}
		out = append(out, ft)
	}
	return out
}
