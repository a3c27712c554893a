package record

import (
	"cmp"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// checkNoLoss checks a recording at default settings: no record lost,
// page faults counted, and counting them cost the target nothing it can
// see: no perf_swevent_* function (where the kernel handles each
// occurrence of a software event, as a period-1 counter event did at
// every fault: 2 to 6% of these programs' samples, 5th to 11th) among
// its 20 functions of most self samples.
func checkNoLoss(t *testing.T, res *Result, p *model.Profile, comm string) {
	t.Helper()
	t.Logf("result %+v, lost %+v", res, p.Lost)
	if res.Lost != 0 || p.Lost != (model.LostCounts{}) {
		t.Errorf("lost %d records: %+v", res.Lost, p.Lost)
	}
	shares := selfShares(p, comm)
	top := slices.SortedFunc(maps.Keys(shares), func(a, b string) int {
		return cmp.Or(cmp.Compare(shares[b], shares[a]), strings.Compare(a, b))
	})
	top = top[:min(20, len(top))]
	for i, fn := range top {
		t.Logf("%2d %5.2f%% %s", i+1, shares[fn], fn)
		if strings.HasPrefix(fn, "perf_swevent_") {
			t.Errorf("%s is the target's function %d of most self samples (%.2f%%): counting costs it per event", fn, i+1, shares[fn])
		}
	}
	var faults uint64
	for _, th := range p.Threads {
		faults += th.Counters[trace.CounterPageFaults]
	}
	t.Logf("%d page faults in %d threads", faults, len(p.Threads))
	if faults == 0 {
		t.Error("no page faults counted")
	}
}

// TestNoLossNode records node --perf-basic-prof allocating for two
// seconds (testutil's node fixture), hundreds of thousands of page
// faults.
func TestNoLossNode(t *testing.T) {
	testutil.RequirePerf(t)
	res, p := recordCmd(t, Config{Command: testutil.NodeProgram(t, testutil.Alloc, "2s"), Stdout: io.Discard})
	checkNoLoss(t, res, p, "node")
}

// TestNoLossJVM records a JVM allocating for two seconds (testutil's JVM
// fixture).
func TestNoLossJVM(t *testing.T) {
	testutil.RequirePerf(t)
	res, p := recordCmd(t, Config{Command: testutil.JVMProgram(t, testutil.Alloc, "2s"), Stdout: io.Discard})
	checkNoLoss(t, res, p, "java")
}

// TestNoLossFaults records four threads taking 50,000 page faults each
// as fast as they can: no record is lost, and each thread's count is
// its own pages, with its stack's few.
func TestNoLossFaults(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "loss", "faulty.c"))
	if err != nil {
		t.Fatal(err)
	}
	bin := testutil.BuildC(t, t.TempDir(), "faulty", string(src), "-pthread")
	res, p := recordCmd(t, Config{Command: []string{bin}, Stdout: io.Discard})
	checkNoLoss(t, res, p, "faulty")
	workers := 0
	for _, th := range p.Threads {
		if th.TID == th.PID {
			continue
		}
		workers++
		if n := th.Counters[trace.CounterPageFaults]; n < 50000 || n > 50000+200 {
			t.Errorf("thread %d: %d page faults, want 50,000 to 50,200", th.TID, n)
		}
	}
	if workers != 4 {
		t.Errorf("%d worker threads, want 4", workers)
	}
}
