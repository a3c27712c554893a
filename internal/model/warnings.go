package model

import (
	"errors"
	"fmt"

	"trueprof/internal/trace"
)

// Warnings are the sentences every report and export of p carries about
// what the whole trace lacks: damage, a missing end record, lost records
// and throttling. Nil when it lacks nothing.
func (p *Profile) Warnings() []string {
	var w []string
	if de, ok := errors.AsType[*trace.DamageError](p.Err); ok {
		w = append(w, fmt.Sprintf("trace damaged at byte offset %d: skipped %d damaged chunk(s), %d bytes, and read every intact chunk after them (%v)",
			de.First.Offset, de.Chunks, de.Bytes, de.First.Err))
		if de.End != nil {
			w = append(w, fmt.Sprintf("then the trace ended early: %v", de.End))
		}
		if p.Inconsistent > 0 {
			w = append(w, fmt.Sprintf("%d records referred to definitions lost in the damage and were DROPPED; names lost in it show as %s", p.Inconsistent, DamagedName))
		}
	} else if fe, ok := errors.AsType[*trace.FormatError](p.Err); ok {
		w = append(w, fmt.Sprintf("trace damaged at byte offset %d: showing everything before it (%v)", fe.Offset, fe.Err))
	} else if p.Err != nil && !errors.Is(p.Err, ErrNoEnd) {
		w = append(w, fmt.Sprintf("trace damaged: showing everything before the error (%v)", p.Err))
	} else if p.End == nil || errors.Is(p.Err, ErrNoEnd) {
		w = append(w, "the trace has no end record: the recorder did not stop cleanly (or is still running) and the last records may be missing")
	}
	if l := p.Lost; l.Total() > 0 {
		w = append(w, fmt.Sprintf("%d records LOST (kernel %d, wrap %d, size %d, unparsed %d): the counts below are too low",
			l.Total(), l.Kernel, l.Wrap, l.Size, l.Unparsed))
	}
	if p.Throttled > 0 {
		w = append(w, fmt.Sprintf("the kernel THROTTLED sampling %d times: samples are missing while it was", p.Throttled))
	}
	return w
}

// PeriodUnit returns the unit of a sample's Period for a sampling event:
// the clock events count nanoseconds, the others count events.
func PeriodUnit(event string) string {
	switch event {
	case "cpu-clock", "task-clock":
		return "nanoseconds"
	}
	return "events"
}

// PeriodAdapts reports whether the samples of a recording with header h
// have periods the kernel adapts to the event's rate, so that a sample
// stands for its period's events and not for a fixed amount: a non-clock
// event sampled at a frequency (-e page-faults -F 999 took samples of 1
// and of 700 faults in one run). A clock event's period is fixed at
// 1e9/F ns, and -c fixes any event's. Views weigh samples by period
// where it adapts, as perf report's Overhead does.
func PeriodAdapts(h trace.Header) bool {
	return h.Period == 0 && h.Freq != 0 && PeriodUnit(h.Event) == "events"
}
