package uprobe

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"

	"trueprof/internal/perf"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// requireUprobes requires BPF uprobe_multi links, which Attach uses.
func requireUprobes(t testing.TB) {
	t.Helper()
	testutil.RequirePerf(t)
	if err := features.HaveBPFLinkUprobeMulti(); err != nil {
		testutil.Missing(t, "BPF uprobe_multi: "+err.Error())
	}
}

// counts are per-function entry and exit counts.
type counts map[string][2]int

// collector drains a Set into counts while the probed process runs.
type collector struct {
	set   *Set
	sites []Site
	mu    sync.Mutex
	n     counts
	tids  map[uint32]int
	pids  map[uint32]bool
	stop  chan struct{}
	done  chan struct{}
}

func collect(t *testing.T, set *Set, sites []Site) *collector {
	c := &collector{set: set, sites: sites, n: counts{}, tids: map[uint32]int{}, pids: map[uint32]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	p, err := perf.NewPoller(set.Fds())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		defer p.Close()
		for {
			select {
			case <-c.stop:
				c.drain()
				return
			default:
			}
			p.Wait(20)
			c.drain()
		}
	}()
	return c
}

func (c *collector) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set.Read(func(e Event) {
		v := c.n[c.sites[e.Site].Function]
		if e.Entry {
			v[0]++
		} else {
			v[1]++
		}
		c.n[c.sites[e.Site].Function] = v
		c.tids[e.TID]++
		c.pids[e.PID] = true
	})
}

// finish stops collecting after the events already in the ring.
func (c *collector) finish() counts {
	close(c.stop)
	<-c.done
	return c.n
}

// cFixture has functions with known call counts, recursion included. It
// waits for a byte (or EOF) on stdin before working, so probes can be
// attached to it while it runs.
const cFixture = `#include <stdio.h>
#include <unistd.h>

int leaf(int x) { return x * 3 + 1; }
int mid(int x) { int s = 0; for (int i = 0; i < 3; i++) s += leaf(x + i); return s; }
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int never(int x) { return x - 1; }

int main(void) {
	char c;
	if (read(0, &c, 1) < 0)
		return 1;
	long s = 0;
	for (int i = 0; i < 100; i++)
		s += mid(i);
	s += fib(15);
	printf("%ld\n", s);
	return 0;
}
`

// cWant are cFixture's exact call counts: fib(15) makes 2*F(16)-1 calls.
var cWant = map[string]int{"main": 1, "mid": 100, "leaf": 300, "fib": 1973, "never": 0}

func TestCExactCounts(t *testing.T) {
	requireUprobes(t)
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "calls", cFixture)
	sites, err := Plan(bin, []string{"calls:main", "mid", "leaf", "fib", "never"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		if !s.Return || len(s.Exits) != 0 {
			t.Errorf("%s: %+v, want a uretprobe", s.Function, s)
		}
		// gcc gives leaves no frame, even with -mno-omit-leaf-frame-pointer:
		// their first instruction must be single-stepped.
		if frame := s.Function != "leaf" && s.Function != "never"; s.Emulated != frame {
			t.Errorf("%s: emulated entry %v, want %v (push %%rbp)", s.Function, s.Emulated, frame)
		}
	}
	oracle := testutil.Callgrind(t, strings.NewReader("go\n"), bin)
	for name, n := range cWant {
		if name != "main" && oracle[name] != n {
			t.Errorf("callgrind counts %d calls of %s, the fixture makes %d", oracle[name], name, n)
		}
	}
	for _, mode := range []string{"launched", "running"} {
		t.Run(mode, func(t *testing.T) {
			var cmd *exec.Cmd
			if mode == "launched" {
				// Like trueprof's exec wrapper: a process stopped before
				// exec of bin, released by a byte on stdin.
				cmd = exec.Command("/bin/sh", "-c", `read x; exec "$0"`, bin)
			} else {
				cmd = exec.Command(bin)
			}
			runs := ""
			if mode == "running" {
				runs = bin
			}
			in, _ := testutil.StartGated(t, cmd, runs)
			set, err := Attach(cmd.Process.Pid, bin, sites)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			c := collect(t, set, sites)
			io.WriteString(in, "go\n")
			in.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			got := c.finish()
			for name, n := range cWant {
				want := [2]int{n, n}
				if name == "main" && mode == "running" {
					// Already running when the probes came: its return
					// address was never replaced.
					want = [2]int{0, 0}
				}
				if got[name] != want {
					t.Errorf("%s: %d entries, %d exits, want %v", name, got[name][0], got[name][1], want)
				}
			}
			if set.Lost() != 0 {
				t.Errorf("%d events lost", set.Lost())
			}
			if len(c.pids) != 1 || !c.pids[uint32(cmd.Process.Pid)] {
				t.Errorf("events from pids %v, want only %d", c.pids, cmd.Process.Pid)
			}
			if err := set.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// goFixture has noinline functions with known call counts, deep recursion
// with large frames in fresh goroutines (their stacks are copied as they
// grow, which a uretprobe's return address would break), and panics
// recovered by a deferred function.
const goFixture = `package main

import (
	"fmt"
	"os"
)

//go:noinline
func leaf(x int) int { return x*3 + 1 }

//go:noinline
func grow(n int) int {
	var buf [512]byte
	buf[n%512] = byte(n)
	if n == 0 {
		return int(buf[0])
	}
	return grow(n-1) + int(buf[n%512])
}

//go:noinline
func mayPanic(i int) int {
	if i%10 == 0 {
		panic(i)
	}
	return leaf(i)
}

//go:noinline
func safe(i int) (r int) {
	defer func() {
		if e := recover(); e != nil {
			r = -1
		}
	}()
	return mayPanic(i)
}

func main() {
	var b [1]byte
	os.Stdin.Read(b[:])
	s := 0
	for i := 0; i < 1000; i++ {
		s += leaf(i)
	}
	for i := 0; i < 100; i++ {
		s += safe(i)
	}
	done := make(chan int)
	for g := 0; g < 10; g++ {
		go func() { done <- grow(200) }()
	}
	for g := 0; g < 10; g++ {
		s += <-done
	}
	fmt.Println(s)
}
`

func TestGoRetProbes(t *testing.T) {
	requireUprobes(t)
	goTool := testutil.RequireCommand(t, "go")
	dir := t.TempDir()
	src := filepath.Join(dir, "gofix.go")
	if err := os.WriteFile(src, []byte(goFixture), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gofix")
	build := exec.Command(goTool, "build", "-o", bin, src)
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GO111MODULE=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	want, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	sites, err := Plan(bin, []string{"main.leaf", "main.grow", "main.mayPanic", "main.safe", "main.safe.func*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		t.Logf("%s: entry %#x (emulated %v), %d RET probes", s.Function, s.Entry, s.Emulated, len(s.Exits))
		if s.Return || len(s.Exits) == 0 {
			t.Errorf("%s: %+v, want RET probes and no uretprobe", s.Function, s)
		}
		if s.Function != "main.leaf" && !s.Emulated {
			t.Errorf("%s: entry not on an emulated instruction (push %%rbp after the stack check)", s.Function)
		}
	}
	cmd := exec.Command(bin)
	in, out := testutil.StartGated(t, cmd, bin)
	set, err := Attach(cmd.Process.Pid, bin, sites)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	c := collect(t, set, sites)
	in.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	got := c.finish()
	if out.String() != string(want) {
		t.Errorf("probed output %q, unprobed %q", out.String(), want)
	}
	// mayPanic panics on every tenth call: those calls never return.
	for name, w := range map[string][2]int{
		"main.leaf":       {1000 + 90, 1000 + 90},
		"main.grow":       {10 * 201, 10 * 201},
		"main.mayPanic":   {100, 90},
		"main.safe":       {100, 100},
		"main.safe.func1": {100, 100},
	} {
		if got[name] != w {
			t.Errorf("%s: %d entries, %d exits, want %v", name, got[name][0], got[name][1], w)
		}
	}
	if set.Lost() != 0 {
		t.Errorf("%d events lost", set.Lost())
	}
}

// threadsFixture keeps two threads calling work for 3 s and meanwhile
// creates a short-lived thread every 20 ms that calls it too.
const threadsFixture = `#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

volatile long sink;

int work(int x) { return x * 7 + 3; }

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
	double end = now() + (long)arg / 1000.0;
	while (now() < end) {
		for (int i = 0; i < 100; i++)
			sink += work(i);
		usleep(1000);
	}
	return 0;
}

int main(void) {
	pthread_t old[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&old[i], 0, worker, (void *)3000L);
	printf("ready\n");
	fflush(stdout);
	double end = now() + 3;
	while (now() < end) {
		pthread_t t;
		pthread_create(&t, 0, worker, (void *)20L);
		pthread_join(t, 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(old[i], 0);
	printf("done\n");
	return 0;
}
`

func TestAttachRunningThreads(t *testing.T) {
	requireUprobes(t)
	bin := testutil.BuildC(t, t.TempDir(), "threads", threadsFixture, "-pthread")
	sites, err := Plan(bin, []string{"work"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("fixture said %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	old := map[uint32]bool{}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		old[uint32(tid)] = true
	}
	start := time.Now()
	set, err := Attach(pid, bin, sites)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attached in %v", time.Since(start))
	c := collect(t, set, sites)
	time.Sleep(time.Second)
	got := c.finish()
	// Events the rings lost (a starved reader on a loaded machine: 254
	// more exits than entries once at load 200) are counted, not hidden:
	// each may unbalance the count by one.
	lost := int(set.Lost())
	if b := codeByte(t, pid, bin, sites[0].Entry); b != 0xcc {
		t.Errorf("probed instruction starts with %#x, want the breakpoint 0xcc", b)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if b, want := codeByte(t, pid, bin, sites[0].Entry), fileByte(t, bin, sites[0].Entry); b != want {
		t.Errorf("after Close the probed instruction starts with %#x, want %#x as in the file", b, want)
	}
	var oldEvents, newEvents, newThreads int
	for tid, n := range c.tids {
		if old[tid] {
			oldEvents += n
		} else {
			newEvents += n
			newThreads++
		}
	}
	t.Logf("work: %v; %d events from %d old threads, %d from %d new threads", got["work"], oldEvents, len(old), newEvents, newThreads)
	// work is a frameless leaf: its probes are single-stepped.
	hot := set.Hot(trace.SiteCosts{EntryEmulated: 600, EntryStepped: 11000, ExitReturn: 600, ExitRetInsn: 11000}, time.Second, 0.05)
	if len(hot) != 1 || hot[0].Function != "work" || !hot[0].Stepped {
		t.Errorf("hot sites %v, want work", hot)
	} else {
		t.Log(hot[0])
	}
	if oldEvents == 0 || newThreads < 10 {
		t.Errorf("want events from the old threads and from at least 10 new ones")
	}
	// Exit probes are placed before the entry probes (no entry without
	// its exit): a thread inside work meanwhile returns through an exit
	// without an entry, at most one call for each thread running at the
	// attach (twice once here at CI's load). A call in flight when
	// collecting stops has its entry without its exit.
	if d := got["work"][0] - got["work"][1]; d < -len(old)-lost || d > 3+lost {
		t.Errorf("work: %d entries, %d exits, %d events lost, %d threads at the attach: at most one call per thread may straddle the attach or the end", got["work"][0], got["work"][1], lost, len(old))
	}
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil || string(rest) != "done\n" {
		t.Errorf("after detach the process ended with %v, output %q; want a normal exit and done", err, rest)
	}
}

// TestAttach5000 attaches 5,000 entry probes and 5,000 uretprobes and
// counts one call of each function.
func TestAttach5000(t *testing.T) {
	requireUprobes(t)
	const n = 5000
	bin := testutil.BuildC(t, t.TempDir(), "many", testutil.ManyFunctionsC(n))
	t0 := time.Now()
	sites, err := Plan(bin, []string{"f[0-9]*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) != n {
		t.Fatalf("%d sites, want %d", len(sites), n)
	}
	planned := time.Since(t0)
	cmd := exec.Command(bin)
	in, _ := testutil.StartGated(t, cmd, bin)
	t1 := time.Now()
	set, err := Attach(cmd.Process.Pid, bin, sites)
	if err != nil {
		t.Fatal(err)
	}
	attached := time.Since(t1)
	c := collect(t, set, sites)
	in.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	got := c.finish()
	t2 := time.Now()
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	detached := time.Since(t2)
	t.Logf("%d functions: plan %v, attach %v (entry + uretprobe each), detach %v", n, planned, attached, detached)
	if attached > 2*time.Second {
		t.Errorf("attaching %d probes took %v, want under 2 s", 2*n, attached)
	}
	for _, s := range sites {
		if got[s.Function] != [2]int{1, 1} {
			t.Errorf("%s: %v, want one entry and one exit", s.Function, got[s.Function])
			break
		}
	}
}

// codeByte reads the byte of process pid's memory at file offset off of
// its mapping of bin.
func codeByte(t *testing.T, pid int, bin string, off uint64) byte {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != bin {
			continue
		}
		var start, end, pgoff uint64
		fmt.Sscanf(f[0], "%x-%x", &start, &end)
		fmt.Sscanf(f[2], "%x", &pgoff)
		if off < pgoff || off >= pgoff+end-start {
			continue
		}
		mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		var b [1]byte
		if _, err := mem.ReadAt(b[:], int64(start+off-pgoff)); err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	t.Fatalf("pid %d does not map offset %#x of %s", pid, off, bin)
	return 0
}

// fileByte reads the byte at offset off of file path.
func fileByte(t *testing.T, path string, off uint64) byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(off)); err != nil {
		t.Fatal(err)
	}
	return b[0]
}
