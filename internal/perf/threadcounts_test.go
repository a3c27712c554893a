package perf

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"trueprof/internal/testutil"
)

// TestThreadCounts counts the page faults and migrations of a shell and
// of the children it forks, one of which allocates an 8 MiB buffer,
// with CounterAttr events whose samples a ThreadCounts program takes
// instead of their rings. The events' own counts, which the kernel keeps
// whatever the program does, are the oracle: the entries add up to them
// exactly, and the rings stay empty.
func TestThreadCounts(t *testing.T) {
	testutil.RequirePerf(t)
	cmd, stdin := startFaulting(t)
	tc, err := NewThreadCounts(2)
	if errors.Is(err, ErrNoBPF) {
		testutil.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fds, rings := openCounterKinds(t, cmd.Process.Pid)
	for kind, kfds := range fds {
		for _, fd := range kfds {
			if err := tc.Attach(fd, kind); err != nil {
				t.Fatal(err)
			}
		}
	}
	enableAll(t, fds)
	runFaulting(t, cmd, stdin)

	counts, err := tc.Counts()
	if err != nil {
		t.Fatal(err)
	}
	var sum [2]uint64
	most := uint64(0)
	pids := map[uint32]bool{}
	for k, v := range counts {
		t.Logf("thread %d of %d started at %d: %d page faults, %d migrations", k.TID, k.PID, k.Start, v[0], v[1])
		if k.Start == 0 {
			t.Errorf("thread %+v has no start time", k)
		}
		pids[k.PID] = true
		sum[0] += v[0]
		sum[1] += v[1]
		most = max(most, v[0])
	}
	for kind, kfds := range fds {
		var total uint64
		for _, fd := range kfds {
			var b [8]byte
			if _, err := unix.Read(fd, b[:]); err != nil {
				t.Fatal(err)
			}
			total += binary.LittleEndian.Uint64(b[:])
		}
		if sum[kind] != total {
			t.Errorf("kind %d: the threads' entries add up to %d, the events counted %d", kind, sum[kind], total)
		}
	}
	if len(pids) < 2 {
		t.Errorf("entries of processes %v, want the shell and its children", pids)
	}
	// dd touches its 8 MiB buffer: 2048 pages.
	if most < 2048 {
		t.Errorf("no thread has the 2048 page faults of dd's buffer: %v", counts)
	}
	for _, ring := range rings {
		if n := ring.Read(func([]byte) {}); n != 0 {
			t.Errorf("%d records in a ring: the program should suppress them", n)
		}
	}
	if n, err := tc.Dropped(); err != nil || n != 0 {
		t.Errorf("dropped %d, %v", n, err)
	}
	for k := range counts {
		if err := tc.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := tc.Counts(); err != nil || len(left) != 0 {
		t.Errorf("after deleting every entry: %v, %v", left, err)
	}
}
