package record

import (
	"fmt"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// samplingLoss holds what tells the sampling rings' losses: the kernel
// writes a PERF_RECORD_LOST only before the next record that fits in a
// ring, so when a ring overflows at the end of a recording (the target's
// last thousands of context switches while the recorder is descheduled,
// then its exit) nothing reports the loss, and the end of the run would
// be missing silently. Each sampling event counts its own lost records
// (PERF_FORMAT_LOST, perf.ReadLost); at the end their sum less what the
// LOST records said is the loss nothing reported.
type samplingLoss struct {
	fds      []int  // the sampling events, which count their losses
	reported uint64 // records the sampling rings' LOST records counted
}

// unreportedLoss writes, once the last records are processed, the
// sampling rings' losses that no LOST record reported, and says so.
func (s *session) unreportedLoss() {
	if !perf.LostSupported() {
		return
	}
	var counted uint64
	for _, fd := range s.loss.fds {
		n, err := perf.ReadLost(fd)
		if err != nil {
			return // an event the kernel no longer reads: nothing to compare
		}
		counted += n
	}
	if counted <= s.loss.reported {
		return
	}
	n := counted - s.loss.reported
	s.loss.reported = counted
	s.lost(trace.LostKernel, n, perf.Now())
	fmt.Fprintf(s.log, "trueprof: the kernel lost %d records at the end of the recording (its rings were full; samples, context switches or thread exits): counted as lost\n", n)
}

// switchBytes is the room a sampling ring keeps for context switches,
// which come at the target's rate, not the sampling rate: a
// PERF_RECORD_SWITCH with its sample_id is 32 bytes (header, pid/tid,
// time, cpu), and two threads passing a byte over pipes switch 100,000
// times a second on each CPU (bench: /tmp pingpong in
// docs/recording.md), twice as often as a busy server. ringSeconds of
// twice that rate is 12.8 MB: rings of --call-graph fp, sized to 999 Hz
// of call chains alone (2.3 MB, a 4 MiB ring), overflowed in a second.
const switchBytes = ringSeconds * 200_000 * 32
