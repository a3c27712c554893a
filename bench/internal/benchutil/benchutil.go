// Package benchutil holds what the benchmark programs under bench/ share:
// running commands that must succeed and measuring what they cost,
// building trueprof, and medians.
// Benchmarks print medians because absolute times on shared machines are
// noisy.
package benchutil

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"trueprof/internal/model/modeltest"
)

// Workdir creates a temporary directory; call the returned function to
// remove it.
func Workdir(prefix string) (string, func()) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		log.Fatal(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// Source writes a fixture's source text to dir/name and returns its path.
func Source(dir, name, text string) string {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		log.Fatal(err)
	}
	return path
}

// MS is d in milliseconds, as the benchmarks print durations.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BuildTrueprof builds ./cmd/trueprof (run from the repository root) into
// dir as the README installs it (CGO_ENABLED=0) and returns its path.
func BuildTrueprof(dir string) string {
	bin := filepath.Join(dir, "trueprof")
	Run("env", "CGO_ENABLED=0", "go", "build", "-o", bin, "./cmd/trueprof")
	return bin
}

// Run runs a command that must succeed, its output discarded; on failure
// it exits with the command's error output.
func Run(argv ...string) {
	Output(argv...)
}

// Output runs a command that must succeed and returns its standard output.
func Output(argv ...string) string {
	out, _, _ := Timed(argv...)
	return out
}

// Time runs a command that must succeed and returns its wall time.
func Time(argv ...string) time.Duration {
	_, _, wall := Timed(argv...)
	return wall
}

// Timed runs a command that must succeed and returns its standard
// output, its error output (where trueprof record prints its summary)
// and its wall time; on failure it exits with the error output.
func Timed(argv ...string) (stdout, stderr string, wall time.Duration) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	start := time.Now()
	out, err := cmd.Output()
	wall = time.Since(start)
	if err != nil {
		log.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, errOut.Bytes())
	}
	return string(out), errOut.String(), wall
}

// recorderCPU finds the recorder's CPU time in trueprof record's summary.
var recorderCPU = regexp.MustCompile(`recorder CPU ([0-9.]+) s`)

// RecorderCPU returns the recorder's CPU time that trueprof record's
// summary (its error output) shows, if it shows one.
func RecorderCPU(stderr string) (time.Duration, bool) {
	m := recorderCPU.FindStringSubmatch(stderr)
	if m == nil {
		return 0, false
	}
	sec, err := strconv.ParseFloat(m[1], 64)
	return time.Duration(sec * float64(time.Second)), err == nil
}

// Usage is what a command cost: its wall time, its CPU time split as
// the kernel accounts it, and its peak resident set (wait4's
// ru_maxrss). On a shared machine the CPU time says more of the command
// than its wall time, which waiting for a CPU inflates.
type Usage struct {
	Wall, User, System time.Duration
	PeakKiB            int64 // 0 where the platform has no rusage
}

// CPU is the user and system time together.
func (u Usage) CPU() time.Duration { return u.User + u.System }

// Measure runs a command that must succeed, with env added to the
// environment, its output discarded and its error output passed on,
// and returns what it cost.
func Measure(env []string, argv ...string) Usage {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		log.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	u := Usage{Wall: time.Since(start), User: cmd.ProcessState.UserTime(), System: cmd.ProcessState.SystemTime()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.PeakKiB = ru.Maxrss
	}
	return u
}

// WriteCallsTrace writes to path the hook trace of modeltest.WriteCalls:
// main calls mid mids times, and mid calls leaf twice (6·mids+2 events).
// Writing 10M mid calls peaks at about 32 MB of RSS, which the peak RSS
// (wait4) of every command this process runs afterwards includes.
func WriteCallsTrace(path string, mids int) {
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	if err := modeltest.WriteCalls(f, mids); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}

// ProcStatus reads the numeric fields of /proc/PID/status (VmRSS,
// voluntary_ctxt_switches, ...), those in kB as bytes.
func ProcStatus(pid int) (map[string]uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	fields := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		num, kb := strings.CutSuffix(strings.TrimSpace(v), " kB")
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			continue
		}
		if kb {
			n <<= 10
		}
		fields[name] = n
	}
	return fields, nil
}
