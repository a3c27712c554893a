package record

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// jvmFlags make the JVM write /tmp/perf-PID.map as it exits and keep
// frame pointers in compiled code (docs/recording.md, "JIT runtimes").
var jvmFlags = []string{"-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit", "-XX:+PreserveFramePointer"}

// TestJitJVM records a real JVM (testdata/jvm/Work.java: sorting,
// HashMap.merge, string building) under perf record, so that trueprof and
// perf sample the same execution. The JVM names its compiled methods only
// as it exits; trueprof must still name them: at most 2% of the samples
// stay in unnamed [jit] code, and perf's top JIT methods (perf names
// them at report time from the same map) have trueprof self shares
// within 3 points of perf's.
func TestJitJVM(t *testing.T) {
	testutil.RequirePerf(t)
	java := testutil.RequireCommand(t, "java")
	javac := testutil.RequireCommand(t, "javac")
	perfBin := testutil.RequireCommand(t, "perf")
	dir := t.TempDir()
	if out, err := exec.Command(javac, "-d", dir, filepath.Join("testdata", "jvm", "Work.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "perf.data")
	argv := append([]string{perfBin, "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", data, "--", java}, jvmFlags...)
	argv = append(argv, "-cp", dir, "Work", "3")
	log := &logBuffer{t: t}
	res, p := recordCmd(t, Config{Command: argv, Freq: 999, Log: log})
	var pid uint32
	for _, pr := range p.Processes {
		if pr.Name == "java" {
			pid = pr.PID
			t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid)) })
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
