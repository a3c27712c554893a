package calfit

import (
	"errors"
	"fmt"

	"trueprof/internal/calltree"
	"trueprof/internal/trace"
)

// CounterRead is a hardware counter's value (instructions retired by the
// thread, say) read by the probe of one event: Performance Inspector's
// per-thread metric at each entry and exit.
type CounterRead struct {
	Value uint64
	Entry bool // the event is an entry (else an exit)
}

// ErrCounterOrder is returned for counter reads that go backwards: a
// per-thread counter only counts up.
var ErrCounterOrder = errors.New("counter reads go backwards")

// CounterOverheads returns, per transition kind, what the probes
// themselves add to a counter in an interval: the smallest count over the
// intervals of a calibration loop's empty calls, read in order on one
// thread. Unlike time, a count of retired instructions does not vary
// from one run of the same probe code to the next, so the minimum is the
// probe's exact cost and anything more is the loop's own. A kind with no
// interval is an error.
func CounterOverheads(reads []CounterRead) ([trace.Transitions]float64, error) {
	var oh [trace.Transitions]float64
	var seen [trace.Transitions]bool
	for i := 1; i < len(reads); i++ {
		a, b := reads[i-1], reads[i]
		if b.Value < a.Value {
			return oh, fmt.Errorf("%w: read %d is %d after %d", ErrCounterOrder, i, b.Value, a.Value)
		}
		k := calltree.Transition(a.Entry, b.Entry)
		if d := float64(b.Value - a.Value); !seen[k] || d < oh[k] {
			oh[k], seen[k] = d, true
		}
	}
	for k, ok := range seen {
		if !ok {
			return oh, fmt.Errorf("no %s interval among the calibration reads", calltree.TransitionName(k))
		}
	}
	return oh, nil
}

// CalibratedCounts returns the counts of the intervals between
// consecutive reads less their transition kind's overhead oh, never below
// zero: what the program itself retired in each interval, to be charged
// to the call current in it as calibrated time is.
func CalibratedCounts(reads []CounterRead, oh [trace.Transitions]float64) ([]float64, error) {
	out := make([]float64, 0, max(len(reads)-1, 0))
	for i := 1; i < len(reads); i++ {
		a, b := reads[i-1], reads[i]
		if b.Value < a.Value {
			return nil, fmt.Errorf("%w: read %d is %d after %d", ErrCounterOrder, i, b.Value, a.Value)
		}
		k := calltree.Transition(a.Entry, b.Entry)
		out = append(out, max(0, float64(b.Value-a.Value)-oh[k]))
	}
	return out, nil
}
