package record

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trueprof/internal/testutil"
)

// faultLoopFixture has 2,000 functions it never calls, to be probed, and
// a loop that maps, touches and unmaps a page, so that it needs its mm's
// lock all the time, as placing a probe does. It times the loop with
// CLOCK_MONOTONIC (the trace's clock) and, once its standard input
// closes, prints every gap over 2 µs between two iterations as "start
// gap" in ns.
var faultLoopFixture = func() string {
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "int f%d(int x) { return x + %d; }\n", i, i)
	}
	return `#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
` + b.String() + `
static long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
static long starts[1 << 20], gaps[1 << 20];
int main(void) {
	long n = 0;
	char c;
	fcntl(0, F_SETFL, O_NONBLOCK);
	printf("ready\n");
	fflush(stdout);
	for (long prev = now(), t, i = 0;; prev = t, i++) {
		char *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		p[0] = 1;
		munmap(p, 4096);
		if (i % 4096 == 0 && read(0, &c, 1) == 0)
			break;
		t = now();
		if (t - prev > 2000 && n < (1 << 20)) {
			starts[n] = prev;
			gaps[n++] = t - prev;
		}
	}
	for (long i = 0; i < n; i++)
		printf("%ld %ld\n", starts[i], gaps[i]);
	return 0;
}
`
}()

// TestAdjustsForProbePlacement attaches to a process whose loop needs its
// mm's lock while 2,000 probes go in and come out: the waits this causes
// are Adjust records of its thread, each inside a gap of the loop as the
// target's own clock saw it (the oracle). The waits depend on the target
// running while the probes go in, which a loaded machine may not let it
// (about half the recordings here, at load 15 on 2 CPUs): up to six
// recordings are made until one has Adjust records.
func TestAdjustsForProbePlacement(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.BuildC(t, t.TempDir(), "faultloop", faultLoopFixture)
	for attempt := 1; ; attempt++ {
		cmd := exec.Command(bin)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("fixture did not start: %q", sc.Text())
		}
		_, p := recordCmd(t, Config{PID: cmd.Process.Pid, Duration: 200 * time.Millisecond, Trace: []string{"f*"}, NoSampling: true,
			Output: filepath.Join(t.TempDir(), "t.trace")})
		in.Close()
		var gaps [][2]uint64
		for sc.Scan() {
			var start, gap uint64
			if _, err := fmt.Sscan(sc.Text(), &start, &gap); err == nil {
				gaps = append(gaps, [2]uint64{start, start + gap})
			}
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		var total time.Duration
		for _, a := range p.Adjusts {
			total += time.Duration(a.Duration)
			if a.PID != uint32(cmd.Process.Pid) || a.TID != a.PID {
				t.Errorf("adjust of %d/%d, want the target's thread %d", a.PID, a.TID, cmd.Process.Pid)
			}
			inside := false
			for _, g := range gaps {
				inside = inside || (g[0] <= a.Time-a.Duration && a.Time <= g[1])
			}
			if !inside {
				t.Errorf("adjust [%d, %d] (%v) is not inside a gap of the target's loop: it says the target waited when it ran",
					a.Time-a.Duration, a.Time, time.Duration(a.Duration))
			}
		}
		t.Logf("attempt %d: %d adjusts, %v, %d gaps of the loop", attempt, len(p.Adjusts), total, len(gaps))
		if len(p.Adjusts) > 0 || t.Failed() {
			return
		}
		if attempt == 6 {
			t.Fatal("six attaches of 2,000 probes to a process faulting pages gave no Adjust record")
		}
	}
}
