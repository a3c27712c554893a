package perf

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"trueprof/internal/testutil"

	"golang.org/x/sys/unix"
)

// TestSampleSelf samples this test's own thread with a real cpu-clock
// event and checks that records decode with sane pids and call chains.
func TestSampleSelf(t *testing.T) {
	testutil.RequirePerf(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ev, _ := ParseEvent("cpu-clock")
	attr := SamplingAttr(ev, SamplingOptions{Freq: 1000, Kernel: Paranoid() < 2 || os.Geteuid() == 0, SideRecords: true, UserStack: 256})
	tid := unix.Gettid()
	fd, err := Open(attr, tid, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ring := mapTest(t, fd, 8)
	if err := Enable(fd); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(end) {
		x++
	}
	Disable(fd)
	samples := 0
	ring.Read(func(rec []byte) {
		var r Record
		if err := Decode(rec, attr.Sample_type, &r); err != nil {
			t.Error(err)
			return
		}
		if r.Type != RecordSample {
			return
		}
		samples++
		if int(r.TID) != tid || int(r.PID) != os.Getpid() || len(r.Callchain) == 0 || r.Period == 0 {
			t.Errorf("sample %+v", r)
		}
		if r.UserABI == 0 || r.UserRegs[1] == 0 || len(r.UserStack) == 0 {
			t.Errorf("sample without user registers and stack: abi %d regs %#x stack %d bytes", r.UserABI, r.UserRegs, len(r.UserStack))
		}
	})
	if samples < 50 {
		t.Errorf("%d samples in 200 ms at 1000 Hz", samples)
	}
}

// TestRingAttrSharesItsRing maps a ring event on one CPU before anything
// writes to it, sends a sampling event of this thread (kept on that CPU)
// to its ring, and finds the thread's samples there: the kernel accepts
// the redirection (same CPU, same clock) and the ring event writes
// nothing of its own.
func TestRingAttrSharesItsRing(t *testing.T) {
	testutil.RequirePerf(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpus, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	cpu := cpus[0]
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	defer func() {
		var all unix.CPUSet
		for _, c := range cpus {
			all.Set(c)
		}
		unix.SchedSetaffinity(0, &all)
	}()
	owner, err := Open(RingAttr(4096), -1, cpu, 0)
	if errors.Is(err, ErrPermission) {
		testutil.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(owner)
	ring := mapTest(t, owner, 64)
	ev, _ := ParseEvent("cpu-clock")
	attr := SamplingAttr(ev, SamplingOptions{Freq: 1000, SideRecords: true})
	tid := unix.Gettid()
	fd, err := Open(attr, tid, cpu, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := SetOutput(fd, owner); err != nil {
		t.Fatalf("sending a sampling event's records to a ring event's ring: %v", err)
	}
	if err := Enable(fd); err != nil {
		t.Fatal(err)
	}
	// 100 ms on the CPU, whatever else runs there, nearly all of it in
	// user space, where the event samples: the thread's CPU clock is a
	// system call, which took four fifths of a loop that read it at
	// every iteration on one host (22 samples in 100 ms).
	cpuTime := func() time.Duration {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
	start, deadline := cpuTime(), time.Now().Add(5*time.Second)
	for cpuTime()-start < 100*time.Millisecond && time.Now().Before(deadline) {
		for x := 0; x < 1<<16; x++ {
			spinSink += x
		}
	}
	Disable(fd)
	samples, others := 0, 0
	ring.Read(func(rec []byte) {
		var r Record
		if err := Decode(rec, attr.Sample_type, &r); err != nil {
			t.Error(err)
			return
		}
		switch {
		case r.Type == RecordSample && int(r.TID) == tid:
			samples++
		case r.Type == RecordSample:
			others++
		}
	})
	if samples < 25 || others > 0 {
		t.Errorf("%d samples of this thread and %d of others in the ring event's ring after 100 ms of its CPU time at 1000 Hz: want this thread's alone", samples, others)
	}
}

func TestHardwareEventError(t *testing.T) {
	testutil.RequirePerf(t)
	ev, _ := ParseEvent("cycles")
	fd, err := Open(SamplingAttr(ev, SamplingOptions{Freq: 100}), 0, -1, 0)
	if err == nil {
		// This machine has a PMU: the hardware event works.
		unix.Close(fd)
		return
	}
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "PMU") {
		t.Errorf("cycles without a PMU: %v, want ErrNotSupported naming the missing PMU", err)
	}
}

func TestParseEvent(t *testing.T) {
	if _, err := ParseEvent("no-such"); err == nil {
		t.Error("unknown event accepted")
	}
	if e, err := ParseEvent("cs"); err != nil || e.Name != "context-switches" {
		t.Errorf("alias cs: %v %v", e, err)
	}
}

// spinSink keeps TestRingAttrSharesItsRing's loop from being optimised
// away.
var spinSink int
