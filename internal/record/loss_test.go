package record

import (
	"cmp"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// checkNoLoss checks a recording at default settings: no record lost,
// and page faults counted. It logs the target's 20 functions of most
// self samples: perf_swevent_event, where the kernel handles each
// occurrence of a counter event (and runs the counting program), is
// still among them on these fault-heavy programs (2 to 6%; see
// docs/recording.md, "Per-thread counters").
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
// seconds, hundreds of thousands of page faults.
func TestNoLossNode(t *testing.T) {
	testutil.RequirePerf(t)
	node := testutil.RequireCommand(t, "node")
	src, err := filepath.Abs(filepath.Join("testdata", "loss", "work.js"))
	if err != nil {
		t.Fatal(err)
	}
	// --perf-basic-prof also writes a V8 log, by default into the
	// working directory.
	logfile := "--logfile=" + filepath.Join(t.TempDir(), "v8.log")
	res, p := recordCmd(t, Config{Command: []string{node, "--perf-basic-prof", "--no-logfile-per-isolate", logfile, src, "2"}, Stdout: io.Discard})
	checkNoLoss(t, res, p, "node")
}

// TestNoLossJVM records a JVM allocating for two seconds.
func TestNoLossJVM(t *testing.T) {
	testutil.RequirePerf(t)
	javac := testutil.RequireCommand(t, "javac")
	java := testutil.RequireCommand(t, "java")
	dir := t.TempDir()
	if out, err := exec.Command(javac, "-d", dir, filepath.Join("testdata", "loss", "Work.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	res, p := recordCmd(t, Config{Command: []string{java, "-XX:+PreserveFramePointer", "-cp", dir, "Work", "2"}, Stdout: io.Discard})
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
