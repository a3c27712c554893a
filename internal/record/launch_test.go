package record

import (
	"testing"

	"trueprof/internal/perf"
	"trueprof/internal/testutil"
)

// TestWrapperRunsBeforeTrack checks that once target.running returns,
// the wrapper's own exec is past the kernel's exec tracepoint: counting
// tracked from then on takes its base at the target's exec, after the
// wrapper's Go start-up (hundreds of page faults), never at the
// wrapper's exec (a fresh child, a few faults), which would count the
// wrapper's faults as the target's.
func TestWrapperRunsBeforeTrack(t *testing.T) {
	testutil.RequirePerf(t)
	tc, err := perf.NewThreadCounts()
	if err != nil {
		testutil.Missing(t, err.Error())
	}
	defer tc.Close()
	for round := 0; round < 20; round++ {
		tgt, err := launch([]string{"true"}, launchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tgt.running(); err != nil {
			t.Fatal(err)
		}
		if err := tc.Track(tgt.pid(), true); err != nil {
			t.Fatal(err)
		}
		if err := tgt.release(); err != nil {
			t.Fatal(err)
		}
		<-tgt.done
		if tgt.err != nil {
			t.Fatalf("target: %v", tgt.err)
		}
		execs, err := tc.Execs()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for k, n := range execs {
			if int(k.PID) != tgt.pid() {
				continue
			}
			found = true
			if n.PageFaults < 100 {
				t.Errorf("round %d: base at exec %d page faults: taken at the wrapper's exec, want the target's (after the wrapper's start-up)", round, n.PageFaults)
			}
			if err := tc.Delete(k); err != nil {
				t.Fatal(err)
			}
		}
		if !found {
			t.Errorf("round %d: no base at exec for process %d", round, tgt.pid())
		}
	}
}
