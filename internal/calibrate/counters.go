package calibrate

import (
	"errors"
	"fmt"
	"syscall"

	"trueprof/internal/perf"
)

// ErrNoCounters is returned by CounterSupport when this machine cannot
// count instructions per thread: no hardware PMU (common in virtual
// machines), or no permission.
var ErrNoCounters = errors.New("per-call hardware counters are not available")

// CounterSupport reports whether per-call hardware counters (instructions
// retired per node, calibrated per transition with calfit.CounterOverheads)
// can be measured here, by opening an instructions counter on this
// thread. Its error wraps ErrNoCounters and says what is missing.
func CounterSupport() error {
	ev, err := perf.ParseEvent("instructions")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoCounters, err)
	}
	fd, err := perf.Open(perf.CounterAttr(ev, perf.CounterOptions{}), 0, -1, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoCounters, err)
	}
	return syscall.Close(fd)
}
