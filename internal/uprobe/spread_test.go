package uprobe

import (
	"encoding/binary"
	"testing"

	"trueprof/internal/testutil"
)

// TestSpreadRecords: the probe program writes its records in four sizes
// (spreadOutput), each often, and each record still reads as its event:
// the process's pid and a cookie of one of the sites. Fails when the
// records are of one size, as they were when a program's fixed number of
// records a call made the ring's cost fall at the same events each call.
func TestSpreadRecords(t *testing.T) {
	requireUprobes(t)
	bin := testutil.BuildC(t, t.TempDir(), "calls", cFixture)
	sites, err := Plan(bin, []string{"fib"})
	if err != nil {
		t.Fatal(err)
	}
	set, run := launchPlanned(t, bin, sites)
	if _, err := run(); err != nil {
		t.Fatal(err)
	}
	sizes := map[int]int{}
	n, entries := 0, 0
	for {
		b, ok := set.next(recordSize)
		if !ok {
			break
		}
		n++
		sizes[len(b)]++
		pid := binary.NativeEndian.Uint64(b[8:]) >> 32
		cookie := binary.NativeEndian.Uint64(b[16:])
		if pid == 0 || cookie>>2 != 0 || cookie&3 > kindExit {
			t.Fatalf("record %d: pid %d, cookie %#x: not an event of site 0", n, pid, cookie)
		}
		if cookie&3 == kindEntry {
			entries++
		}
	}
	// fib(15): 1973 calls, an entry and an exit each.
	if want := 2 * cWant["fib"]; n != want || entries != cWant["fib"] {
		t.Fatalf("read %d records, %d entries, want %d and %d", n, entries, want, cWant["fib"])
	}
	for _, size := range []int{recordSize, recordSize + 8, recordSize + 16, recordSize + 24} {
		if sizes[size] < n/10 {
			t.Errorf("%d of %d records of %d bytes, want about a quarter (sizes %v)", sizes[size], n, size, sizes)
		}
	}
}
