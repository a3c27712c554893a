package record

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
)

// reuseFixture runs thread "first" (calling work_a), joins it, then makes
// the kernel give the next thread the same id by writing ns_last_pid (root,
// in its own PID namespace) and runs thread "second" (calling work_b)
// under that id. It prints both ids.
const reuseFixture = `
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static volatile long sink;
static pid_t want, got;
__attribute__((noinline)) void work_a(long i) { sink += i; }
__attribute__((noinline)) void work_b(long i) { sink += 2 * i; }
__attribute__((noinline)) void run_a(long n) { for (long i = 0; i < n; i++) work_a(i); }
__attribute__((noinline)) void run_b(long n) { for (long i = 0; i < n; i++) work_b(i); }
__attribute__((no_instrument_function)) static void *first(void *x) {
	prctl(PR_SET_NAME, "first");
	want = syscall(SYS_gettid);
	run_a(1000);
	return 0;
}
__attribute__((no_instrument_function)) static void *second(void *x) {
	got = syscall(SYS_gettid);
	if (got != want)
		return 0; /* not the reused id: try again, without events */
	prctl(PR_SET_NAME, "second");
	run_b(2000);
	return 0;
}
__attribute__((no_instrument_function)) int main(void) {
	pthread_t t;
	pthread_create(&t, 0, first, 0);
	pthread_join(t, 0);
	for (int try = 0; try < 50 && got != want; try++) {
		struct timespec ts = {0, 20000000}; /* the id is freed just after join */
		nanosleep(&ts, 0);
		int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
		if (fd < 0) { perror("ns_last_pid"); return 2; }
		dprintf(fd, "%d", want - 1);
		close(fd);
		pthread_create(&t, 0, second, 0);
		pthread_join(t, 0);
	}
	printf("%d %d\n", want, got);
	return got == want ? 0 : 3;
}
`

// nsInnerEnv names the trace an inner test run writes from inside a new
// PID namespace.
const nsInnerEnv = "TRUEPROF_TEST_NS_TRACE"

// TestThreadIDReuse forces the kernel to reuse a thread id inside a new
// PID namespace, where trueprof records too (perf reports ids in the
// recorder's namespace), and checks that the two threads' trees and
// totals never mix.
func TestThreadIDReuse(t *testing.T) {
	if out := os.Getenv(nsInnerEnv); out != "" {
		// Inside the namespace: record the fixture, leave the checks to
		// the outer run.
		bin := os.Getenv(nsInnerEnv + "_BIN")
		if _, err := Run(context.Background(), Config{Output: out, Event: cpuClock(t), Command: []string{bin},
			Mech: "hook", NoSampling: true, Log: testWriter{t}}); err != nil {
			t.Fatal(err)
		}
		return
	}
	testutil.RequirePerf(t)
	unshare := testutil.RequireCommand(t, "unshare")
	if os.Geteuid() != 0 {
		testutil.Missing(t, "writing ns_last_pid in a new PID namespace needs root")
	}
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "reuse", reuseFixture, "-pthread", "-finstrument-functions")
	out := filepath.Join(dir, "reuse.trace")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", self, "-test.run=^TestThreadIDReuse$", "-test.v")
	cmd.Env = append(os.Environ(), nsInnerEnv+"="+out, nsInnerEnv+"_BIN="+bin)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("recording in a new PID namespace: %v\n%s", err, b)
	}
	p, err := model.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Err != nil {
		t.Fatal(p.Err)
	}

	// The model: two incarnations of one thread id, named apart.
	byTID := map[uint32][]*model.Thread{}
	for _, th := range p.Threads {
		byTID[th.TID] = append(byTID[th.TID], th)
	}
	var reused []*model.Thread
	for _, ths := range byTID {
		if len(ths) > 1 {
			reused = append(reused, ths...)
		}
	}
	if len(reused) < 2 || reused[0].Name != "first" || reused[len(reused)-1].Name != "second" {
		var desc []string
		for _, th := range p.Threads {
			desc = append(desc, fmt.Sprintf("%d/%d %q start %d end %d", th.PID, th.TID, th.Names, th.Start, th.End))
		}
		t.Fatalf("want incarnations first and second of one tid, got threads:\n%s", strings.Join(desc, "\n"))
	}
	first, second := reused[0], reused[len(reused)-1]
	t.Logf("tid %d: %q from %d to %d, then %q from %d", first.TID, first.Names, first.Start, first.End, second.Names, second.Start)
	if first.End == 0 || second.Start < first.End {
		t.Errorf("first ended at %d, second started at %d: incarnations overlap", first.End, second.Start)
	}

	// The analysis: each incarnation's tree has only its own calls.
	res, err := calltree.Build(p, calltree.Options{Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[uint64]map[string]uint64{} // by incarnation start
	var wall = map[uint64]uint64{}
	for _, pr := range res.Processes {
		for _, th := range pr.Threads {
			if th.TID != first.TID {
				continue
			}
			c := map[string]uint64{}
			var walk func(n *calltree.Node)
			walk = func(n *calltree.Node) {
				c[n.Name] += n.Calls
				for i := range n.Children {
					walk(&n.Children[i])
				}
			}
			walk(&th.Root)
			calls[th.Start] = c
			wall[th.Start] = th.Root.Cum.WallNSRaw
		}
	}
	want := map[uint64]map[string]uint64{
		first.Start:  {"run_a": 1, "work_a": 1000},
		second.Start: {"run_b": 1, "work_b": 2000},
	}
	for start, w := range want {
		got := calls[start]
		for name, n := range w {
			if got[name] != n {
				t.Errorf("incarnation started at %d: %s called %d times, want %d (all: %v)", start, name, got[name], n, got)
			}
		}
		for _, other := range []string{"work_a", "work_b", "run_a", "run_b"} {
			if _, mine := w[other]; !mine && got[other] != 0 {
				t.Errorf("incarnation started at %d has %d calls of %s, which the other thread made", start, got[other], other)
			}
		}
	}
	if wall[first.Start] == 0 || wall[second.Start] == 0 || wall[first.Start] > first.End-first.Start {
		t.Errorf("wall times %v do not fit the incarnations (first lived %d ns)", wall, first.End-first.Start)
	}
}
