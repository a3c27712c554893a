package record

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// TestJitJVM records a real JVM (testutil's JVM fixture, compute
// workload: sorting, HashMap.merge, string building) under perf record,
// so that trueprof and perf sample the same execution. The JVM names its
// compiled methods only as it exits; trueprof must still name them: at
// most 2% of the samples stay in unnamed [jit] code, and perf's top JIT
// methods (perf names them at report time from the same map) have
// trueprof self shares within 3 points of perf's.
func TestJitJVM(t *testing.T) {
	testutil.RequirePerf(t)
	perfBin := testutil.RequireCommand(t, "perf")
	data := filepath.Join(t.TempDir(), "perf.data")
	argv := append([]string{perfBin, "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", data, "--"},
		testutil.JVMProgram(t, testutil.Compute, "3s")...)
	log := &logBuffer{t: t}
	res, p := recordCmd(t, Config{Command: argv, Freq: 999, Log: log})
	var pid uint32
	for _, pr := range p.Processes {
		if pr.Name == "java" {
			pid = pr.PID
		}
	}
	if res.ExitCode != 0 || p.End == nil || p.End.Reason != "exited" || pid == 0 {
		t.Fatalf("result %+v end %+v, java pid %d", res, p.End, pid)
	}
	if p.Lost.Total() != 0 {
		t.Logf("%d records lost", p.Lost.Total())
	}

	got := selfShares(p, "java")
	want := perfReport(t, perfBin, data, "--pid", fmt.Sprint(pid))
	t.Logf("trueprof %v", top(got))
	t.Logf("perf     %v", top(want))
	if got["[jit]"] > 2 {
		t.Errorf("%.1f%% of the JVM's samples in unnamed [jit] code, want 2%% or less", got["[jit]"])
	}
	// perf's top JIT methods: compiled Java methods are named with their
	// signature, "RET CLASS.METHOD(ARGS)".
	var methods []string
	for fn := range want {
		if strings.Contains(fn, ".") && strings.HasSuffix(fn, ")") && strings.Contains(fn, "(") {
			methods = append(methods, fn)
		}
	}
	sort.Slice(methods, func(i, j int) bool { return want[methods[i]] > want[methods[j]] })
	if len(methods) < 3 {
		t.Fatalf("perf names %d JIT methods, want 3 or more: fixture broken", len(methods))
	}
	for _, fn := range methods[:3] {
		if d := got[fn] - want[fn]; d > 3 || d < -3 {
			t.Errorf("%s: trueprof %.1f%%, perf %.1f%%", fn, got[fn], want[fn])
		}
	}
}
