package instr

import (
	"cmp"
	"slices"

	"trueprof/internal/model"
)

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
	// FlowUnclosed is a call still open when the thread's events ended,
	// closed at its last event (synthesised, zero Delta).
	FlowUnclosed FlowKind = "exit-end"
)

// FlowEvent is one line of a callflow (seed 004's log-gen): an event of a
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
	// wall time, CPU time, dispatches and samples taken in it. Zero for
	// the thread's first event (nothing was measured before it) and for
	// synthesised lines.
	Delta Metrics `json:"delta"`
}

// FlowThread is the callflow of one thread incarnation.
type FlowThread struct {
	PID    uint32      `json:"pid"`
	TID    uint32      `json:"tid"`
	Start  uint64      `json:"start_ns"` // as Thread.Start
	Name   string      `json:"name"`
	Events []FlowEvent `json:"events"` // in time order; never null
}

// Callflow returns, per thread (sorted by PID, TID and Start), the ordered
// entries and exits that Build would analyse with the same Options, each
// with the metrics of the interval before it. Repairs appear as
// synthesised lines. Threads without events are left out.
func Callflow(p *model.Profile, o Options) ([]FlowThread, error) {
	a, err := analyse(p, o, true)
	if err != nil {
		return nil, err
	}
	out := []FlowThread{}
	for _, th := range a.order {
		if len(th.flow) == 0 {
			continue
		}
		out = append(out, FlowThread{PID: th.key.pid, TID: th.key.tid, Start: th.key.start, Name: th.name, Events: th.flow})
	}
	slices.SortFunc(out, func(x, y FlowThread) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.TID, y.TID), cmp.Compare(x.Start, y.Start))
	})
	return out, nil
}
