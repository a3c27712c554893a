package record

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// TestHookDenseLoad records the dense load at full size, 10,000,000 mid
// calls (60,000,002 events, several times what the rings hold): every
// call is counted exactly, nothing is dropped, and the trace stays under
// half a byte per event. The trace is read as a stream, since holding 60M
// events would take gigabytes.
func TestHookDenseLoad(t *testing.T) {
	const mids = 10_000_000
	bin := testutil.BuildC(t, t.TempDir(), "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	out := filepath.Join(t.TempDir(), "trueprof.trace")
	stop := make(chan struct{})
	peak := make(chan uint64)
	go func() { peak <- peakHeap(stop) }()
	recordOnly(t, Config{Command: []string{bin, strconv.Itoa(mids)}, Mech: "hook", NoSampling: true, Output: out})
	close(stop)
	heap := <-peak
	calls, dropped, events := countHookCalls(t, out)
	t.Logf("%d events, %d dropped, calls %v, recorder heap at most %d MiB", events, dropped, calls, heap>>20)
	// The events pass through a bounded spool: processing that lags
	// makes the target wait, never the recorder's memory grow with the
	// event count (60M events held in memory are 2.4 GB).
	if heap > maxDenseHeap {
		t.Errorf("recorder heap reached %d MiB: want at most %d MiB", heap>>20, maxDenseHeap>>20)
	}
	if dropped != 0 {
		t.Errorf("%d events dropped", dropped)
	}
	if calls["mid"] != mids || calls["leaf"] != 2*mids || calls["main"] != 1 {
		t.Errorf("calls main %d, mid %d, leaf %d: want 1, %d, %d", calls["main"], calls["mid"], calls["leaf"], mids, 2*mids)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if per := float64(st.Size()) / float64(events); per >= 0.5 {
		t.Errorf("trace of %d bytes for %d events: %.3f bytes per event, want < 0.5", st.Size(), events, per)
	}
}

// maxDenseHeap bounds the recorder's Go heap on the dense load: the
// hook spool (40 MiB), the events within the reorder horizon and the
// trace writer's chunks.
const maxDenseHeap = 256 << 20

// peakHeap samples the Go heap's live objects every 10 ms until stop is
// closed and returns the largest value seen.
func peakHeap(stop <-chan struct{}) uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	// What earlier tests of the process left, garbage and live, is not
	// the recording's: collected first and subtracted (CI's full run of
	// the package measured 253 MiB where the test alone, even beside two
	// busy loops, measured 91-106).
	runtime.GC()
	metrics.Read(s)
	base := s[0].Value.Uint64()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var peak uint64
	for {
		metrics.Read(s)
		peak = max(peak, s[0].Value.Uint64()-min(base, s[0].Value.Uint64()))
		select {
		case <-stop:
			return peak
		case <-tick.C:
		}
	}
}

// recordOnly runs a recording without loading its trace.
func recordOnly(t *testing.T, cfg Config) *Result {
	t.Helper()
	testutil.RequirePerf(t)
	if cfg.Event.Name == "" {
		cfg.Event = cpuClock(t)
	}
	if cfg.Log == nil {
		cfg.Log = testWriter{t}
	}
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// countHookCalls reads the trace at path record by record and returns
// the entries per function name, the events adjustments report dropped,
// and the number of events.
func countHookCalls(t *testing.T, path string) (calls map[string]uint64, dropped, events uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	strs := map[uint32]string{}
	funcs := map[uint32]uint32{} // location -> function name's string id
	byLoc := map[uint32]uint64{}
	for {
		r, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch r := r.(type) {
		case *trace.String:
			strs[r.ID] = r.Text
		case *trace.Location:
			if n := len(r.Lines); n > 0 {
				funcs[r.ID] = r.Lines[n-1].Function
			}
		case *trace.Event:
			events++
			if r.Kind == trace.EventEntry {
				byLoc[r.Function]++
			}
		case *trace.Adjust:
			dropped += r.Dropped
		}
	}
	calls = map[string]uint64{}
	for loc, n := range byLoc {
		calls[strs[funcs[loc]]] += n
	}
	return calls, dropped, events
}
