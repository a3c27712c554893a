package perf

import (
	"runtime"
	"testing"
	"time"

	"trueprof/internal/testutil"
)

// TestReadLost fills a one-page ring with context switch records of the
// calling thread and never reads it while it fills: the event's own lost
// count (ReadLost) is at least what the ring's LOST records say, and
// more than zero.
func TestReadLost(t *testing.T) {
	testutil.RequirePerf(t)
	if !LostSupported() {
		testutil.Missing(t, "the kernel has no PERF_FORMAT_LOST (Linux 6.0)")
	}
	ev, err := ParseEvent("cpu-clock")
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	attr := SamplingAttr(ev, SamplingOptions{Freq: 99, ContextSwitch: true, CountLost: true})
	fd, err := Open(attr, 0, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	ring, err := MapRing(fd, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	if err := Enable(fd); err != nil {
		t.Fatal(err)
	}
	// 1,000 sleeps are 2,000 switch records of 32 bytes: 64 KB for a
	// 4 KiB ring.
	for range 1000 {
		time.Sleep(10 * time.Microsecond)
	}
	Disable(fd)
	counted, err := ReadLost(fd)
	if err != nil {
		t.Fatal(err)
	}
	var reported uint64
	ring.Read(func(rec []byte) {
		var r Record
		if Decode(rec, attr.Sample_type, &r) == nil && r.Type == RecordLost {
			reported += r.Lost
		}
	})
	t.Logf("lost: %d counted by the event, %d in LOST records", counted, reported)
	if counted == 0 || counted < reported {
		t.Errorf("the event counted %d lost records, its LOST records %d: want more than 0, and at least as many", counted, reported)
	}
}
