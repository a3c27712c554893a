// Package testutil holds helpers shared by trueprof's tests: capability
// requirements that skip locally but fail in CI, and fixture builders.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireEnv is the environment variable that turns missing capabilities
// into test failures; .ci/run sets it so perf tests never silently skip.
const RequireEnv = "TRUEPROF_REQUIRE_PERF"

// Missing skips the test with reason, or fails it when RequireEnv is set.
func Missing(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("required capability missing (%s=1): %s", RequireEnv, reason)
	}
	t.Skip(reason)
}

var perfOnce struct {
	sync.Once
	err error
}

// RequirePerf requires that this process may open a cpu-clock sampling
// event on itself.
func RequirePerf(t testing.TB) {
	t.Helper()
	perfOnce.Do(func() {
		attr := &unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Sample: 1000,
			Bits:   unix.PerfBitDisabled | unix.PerfBitFreq | unix.PerfBitExcludeKernel,
		}
		fd, err := unix.PerfEventOpen(attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		perfOnce.err = err
	})
	if perfOnce.err != nil {
		Missing(t, "perf_event_open: "+perfOnce.err.Error())
	}
}

// RequireCommand requires an executable on PATH and returns its path.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name+" not installed")
	}
	return p
}

// RequireFile requires the file at path, installed by the Debian package
// pkg, and returns path.
func RequireFile(t testing.TB, path, pkg string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, path+" missing (Debian package "+pkg+")")
	}
	return path
}

// BuildCXX compiles C++ source with g++ and flags (nothing else: the
// flags say how) into dir and returns the binary path.
func BuildCXX(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	gxx := RequireCommand(t, "g++")
	path := filepath.Join(dir, name+".cc")
	bin := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gxx, append(flags, "-o", bin, path)...).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	return bin
}

// BuildC compiles C source with gcc into dir and returns the binary path.
// Fixtures keep frame pointers so frame-pointer call chains are complete.
func BuildC(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	gcc := RequireCommand(t, "gcc")
	srcPath := filepath.Join(dir, name+".c")
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	args := append([]string{"-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-inline", "-o", bin, srcPath}, flags...)
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// Golden compares got with the golden file at path, or rewrites the file
// when update is set (the -update flag of the calling package's tests).
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("output differs from %s (run go test -update if the change is intended):\n%s", path, got)
	}
}
