package record

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"trueprof/internal/perf"
	"trueprof/internal/testutil"
)

// TestWrapperRunsBeforeTrack checks that once target.running returns,
// the wrapper's own exec is past the kernel's exec tracepoint: counting
// tracked from then on takes its base at the target's exec, after the
// wrapper's Go start-up (hundreds of page faults), never at the
// wrapper's exec (a fresh child, a few faults), which would count the
// wrapper's faults as the target's. The wrapper is trueprof re-executed,
// whose start-up faults tell the two execs apart; the tiny wrapper runs
// the same protocol (TestTinyWrapper) but faults too little for that.
func TestWrapperRunsBeforeTrack(t *testing.T) {
	testutil.RequirePerf(t)
	defer func(old func() string) { tinyWrapper = old }(tinyWrapper)
	tinyWrapper = func() string { return "" }
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

// TestTinyWrapper launches commands through the tiny exec wrapper: it
// says it runs once its own exec is complete (its executable is the
// memfd then, no longer trueprof, which the child was before), execs
// the target with its arguments and the environment given once released
// (also when released before it said it runs), and exits with 127
// without running the target when the recorder gives up on it.
func TestTinyWrapper(t *testing.T) {
	if tinyWrapper() == "" {
		testutil.Missing(t, "no tiny exec wrapper here (tiny.go: x86-64, an executable memfd, a dumpable process)")
	}
	out := filepath.Join(t.TempDir(), "out")
	script := `echo "$0|$1|$TINY_TEST" > ` + out + `; exit 3`
	tgt, err := launch([]string{"sh", "-c", script, "a b", "c"}, launchOptions{env: []string{"TINY_TEST=set"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.running(); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", tgt.pid()))
	if err != nil || !strings.Contains(exe, "memfd:trueprof-exec") {
		t.Errorf("the wrapper runs as %q (%v): want the tiny wrapper's memfd", exe, err)
	}
	if err := tgt.release(); err != nil {
		t.Fatal(err)
	}
	<-tgt.done
	if got := tgt.exitCode(); got != 3 {
		t.Errorf("exit code %d, want the target's 3", got)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "a b|c|set\n" {
		t.Errorf("the target wrote %q (%v), want its arguments and environment: %q", b, err, "a b|c|set\n")
	}
	// Released at once, before it says it runs (a recorder that does
	// not wait for it): its word comes before the exec's outcome.
	os.Remove(out)
	if got := runLaunched(t, []string{"sh", "-c", script, "x"}, false).exitCode(); got != 3 {
		t.Errorf("exit code %d when released at once, want the target's 3", got)
	}
	os.Remove(out)
	tgt, err = launch([]string{"sh", "-c", script}, launchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.running(); err != nil {
		t.Fatal(err)
	}
	tgt.abort()
	if got := tgt.exitCode(); got != 127 {
		t.Errorf("exit code %d after the recorder gave up, want 127", got)
	}
	// Given up at once, before it says it runs: its word may meet a
	// closed socket, which must not kill it (SIGPIPE, exit code 141).
	for range 5 {
		tgt, err = launch([]string{"sh", "-c", script}, launchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tgt.abort()
		if got := tgt.exitCode(); got != 127 {
			t.Errorf("exit code %d after the recorder gave up at once, want 127", got)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the target ran after the recorder gave up")
	}
}

// runLaunched launches argv, waits for the wrapper to say it runs when
// wait is set, releases it and waits for the target's end.
func runLaunched(t *testing.T, argv []string, wait bool) *target {
	t.Helper()
	tgt, err := launch(argv, launchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if wait {
		if err := tgt.running(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tgt.release(); err != nil {
		t.Fatal(err)
	}
	<-tgt.done
	return tgt
}

// TestWrapperExecFails launches a file that cannot be executed (a script
// without "#!"), through the tiny wrapper where there is one and through
// trueprof re-executed, released after and before the wrapper says it
// runs: the exit code is 127 and the target's execErr names the path and
// the kernel's error, as the Go wrapper printed them before the tiny
// one, which cannot, existed.
func TestWrapperExecFails(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "noshebang")
	if err := os.WriteFile(bin, []byte("echo never\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrappers := map[string]func() string{"re-executed": func() string { return "" }}
	if tinyWrapper() != "" {
		wrappers["tiny"] = tinyWrapper
	}
	for name, wrapper := range wrappers {
		for _, wait := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/waited=%v", name, wait), func(t *testing.T) {
				defer func(old func() string) { tinyWrapper = old }(tinyWrapper)
				tinyWrapper = wrapper
				tgt := runLaunched(t, []string{bin}, wait)
				if got := tgt.exitCode(); got != 127 {
					t.Errorf("exit code %d, want 127", got)
				}
				var pe *os.PathError
				if !errors.As(tgt.execErr, &pe) || pe.Path != bin || !errors.Is(pe.Err, syscall.ENOEXEC) {
					t.Errorf("execErr %v, want exec %s: %v", tgt.execErr, bin, syscall.ENOEXEC)
				}
			})
		}
	}
}
