package perf

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"trueprof/internal/testutil"
)

// TestThreadCounts tracks a shell, blocked until runFaulting, that forks
// a subshell which execs dd with an 8 MiB buffer. Two oracles the
// kernel keeps apart from the exit counts check them exactly: the
// faults of the shell's whole tree in its life, which its rusage holds
// once it has reaped its children, and the migrations an inherited
// counting event saw since it was opened, when the shell's were its
// base, read from /proc.
func TestThreadCounts(t *testing.T) {
	testutil.RequirePerf(t)
	cmd, stdin := startFaulting(t)
	pid := cmd.Process.Pid
	tc, err := NewThreadCounts()
	if errors.Is(err, ErrNoBPF) {
		testutil.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := tc.Track(pid, false); err != nil {
		t.Fatal(err)
	}
	base, err := ReadTaskCounts(pid, pid)
	if err != nil {
		t.Fatal(err)
	}
	attr := &unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_MIGRATIONS, Bits: unix.PerfBitInherit}
	attr.Size = uint32(unsafe.Sizeof(*attr))
	migrations := openTest(t, attr, pid, -1)
	runFaulting(t, cmd, stdin)

	exits, err := tc.Exits()
	if err != nil {
		t.Fatal(err)
	}
	var sum TaskCounts
	var most uint64
	pids := map[uint32]bool{}
	for k, c := range exits {
		t.Logf("thread %d of %d started at %d: %+v", k.TID, k.PID, k.Start, c)
		if k.Start == 0 {
			t.Errorf("thread %+v has no start time", k)
		}
		pids[k.PID] = true
		sum.PageFaults += c.PageFaults
		sum.Migrations += c.Migrations
		most = max(most, c.PageFaults)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if want := uint64(ru.Minflt + ru.Majflt); sum.PageFaults != want {
		t.Errorf("the threads' page faults add up to %d, the shell's rusage says %d", sum.PageFaults, want)
	}
	sum = sum.Sub(base)
	var b [8]byte
	if _, err := unix.Read(migrations, b[:]); err != nil {
		t.Fatal(err)
	}
	// A migration after a thread's exit tracepoint (late in its exit,
	// docs/recording.md) is the event's only, and a forked child's first
	// placement on a CPU can be its se.nr_migrations' only (a CI run: 2
	// against the event's 1): at most one a thread either way.
	want := binary.LittleEndian.Uint64(b[:])
	if d := max(sum.Migrations, want) - min(sum.Migrations, want); d > uint64(len(exits)) {
		t.Errorf("the threads' migrations since tracked add up to %d, the cpu-migrations event counted %d (at most one a thread apart)", sum.Migrations, want)
	}
	if len(pids) < 2 {
		t.Errorf("exits of processes %v, want the shell and its children", pids)
	}
	// dd touches its 8 MiB buffer: 2048 pages.
	if most < 2048 {
		t.Errorf("no thread has the 2048 page faults of dd's buffer: %v", exits)
	}
	if n, err := tc.Dropped(); err != nil || n != 0 {
		t.Errorf("dropped %d, %v", n, err)
	}
	var state uint64
	if err := tc.procs.Lookup(uint32(pid), &state); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("the shell's process is still tracked after its last thread exited (%d, %v)", state, err)
	}
	for k := range exits {
		if err := tc.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := tc.Exits(); err != nil || len(left) != 0 {
		t.Errorf("after deleting every entry: %v, %v", left, err)
	}
}

// TestReadTaskCounts reads this thread's counts from /proc between two
// getrusage(RUSAGE_THREAD) calls, which count its faults the same way.
func TestReadTaskCounts(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
		t.Fatal(err)
	}
	c, err := ReadTaskCounts(os.Getpid(), unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
		t.Fatal(err)
	}
	lo, hi := uint64(before.Minflt+before.Majflt), uint64(after.Minflt+after.Majflt)
	t.Logf("rusage %d..%d, /proc %+v", lo, hi, c)
	if c.PageFaults < lo || c.PageFaults > hi || lo == 0 {
		t.Errorf("/proc says %d page faults, rusage %d before and %d after", c.PageFaults, lo, hi)
	}
	if _, err := ReadTaskCounts(os.Getpid(), 1<<30); err == nil {
		t.Error("counts of a thread that does not exist")
	}
}

// TestCachedTaskOffsets: the offsets read once from the kernel's BTF
// come back from the cache, and a cache entry with an impossible offset
// is read again from the BTF rather than trusted.
func TestCachedTaskOffsets(t *testing.T) {
	want, err := readTaskOffsets()
	if err != nil {
		testutil.Missing(t, "kernel BTF: "+err.Error())
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	_, path := taskOffsetsKey()
	for _, step := range []string{"from BTF", "from the cache", "after a corrupted entry"} {
		got, err := cachedTaskOffsets()
		if err != nil || got != want {
			t.Fatalf("%s: %+v, %v; want %+v", step, got, err, want)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if step == "from the cache" {
			b = []byte(strings.Replace(string(b), `"Offsets":[`, `"Offsets":[99999999,`, 1))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}
