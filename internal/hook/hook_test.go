package hook

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trueprof/internal/cachefile"
	"trueprof/internal/testutil"
)

// fixtureSrc is built by buildFixture with gcc -O1 -fno-inline
// -finstrument-functions -pthread (testutil.BuildC's flags). Its modes
// make known numbers of calls; it prints main's address so that the test
// can name this_fn values of a PIE.
const fixtureSrc = `
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

volatile int sink;
volatile long nsig;
int leaf(int x) { return x * 3 + 1; }
int mid(int x) { return leaf(x) + leaf(x ^ 1); }
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
void calls(long n) { for (long i = 0; i < n; i++) sink += mid((int)i); sink += fib(15); }
void *worker(void *arg) { long n = (long)arg; for (long i = 0; i < n; i++) sink += mid((int)i); return 0; }
void threads(int total, int batch, long per) {
	pthread_t t[64];
	for (int done = 0; done < total; done += batch) {
		int k = total - done < batch ? total - done : batch;
		for (int i = 0; i < k; i++) pthread_create(&t[i], 0, worker, (void *)per);
		for (int i = 0; i < k; i++) pthread_join(t[i], 0);
	}
}
void child(long n) { calls(n); }
void handler(int sig) { nsig++; sink += leaf(sig); }

int main(int argc, char **argv) {
	fprintf(stderr, "main=%p\n", (void *)main);
	const char *mode = argv[1];
	long n = atol(argv[2]);
	if (!strcmp(mode, "calls")) {
		calls(n);
	} else if (!strcmp(mode, "threads")) {
		threads(atoi(argv[3]), atoi(argv[4]), n);
	} else if (!strcmp(mode, "fork")) {
		calls(n);
		fflush(stderr);
		pid_t p = fork();
		if (p == 0) {
			child(2 * n);
			exit(0);
		}
		fprintf(stderr, "child=%d\n", (int)p);
		waitpid(p, 0, 0);
		calls(n);
	} else if (!strcmp(mode, "signals")) {
		signal(SIGALRM, handler);
		struct itimerval it = {{0, 50}, {0, 50}};
		setitimer(ITIMER_REAL, &it, 0);
		calls(n);
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, 0);
		fprintf(stderr, "signals=%ld\n", nsig);
	} else if (!strcmp(mode, "paced")) {
		for (int i = 0; i < atoi(argv[3]); i++) {
			calls(n);
			usleep(1000);
		}
	} else if (!strcmp(mode, "exec")) {
		calls(n);
		execl(argv[0], argv[0], "calls", argv[3], (char *)0);
		return 127;
	}
	return 0;
}
`

var fixture struct {
	sync.Once
	dir, bin string
}

// buildFixture builds fixtureSrc once per test binary.
func buildFixture(t *testing.T) string {
	t.Helper()
	testutil.RequireCommand(t, "gcc")
	fixture.Do(func() {
		dir, err := os.MkdirTemp("", "trueprof-hook-test-")
		if err != nil {
			t.Fatal(err)
		}
		fixture.dir = dir
		fixture.bin = testutil.BuildC(t, dir, "fixture", fixtureSrc, "-finstrument-functions", "-pthread")
	})
	if fixture.bin == "" {
		t.Fatal("fixture build failed earlier")
	}
	return fixture.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// run is one recording of the fixture.
type run struct {
	events     []Event
	start, end uint64 // CLOCK_MONOTONIC around the run
	stderr     string
	names      map[uint64]string // this_fn → function name
}

// record runs bin with args into a region made with opts. The recorder
// first waits delay, then drains every period (0: only after the target
// exited), then flushes.
func record(t *testing.T, opts Options, delay, period time.Duration, bin string, args ...string) *run {
	t.Helper()
	r, err := NewRegion(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out run
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{r.File()}
	cmd.Env = append(os.Environ(), r.Env(3)...)
	out.start = uint64(nanotime())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	collect := func(e *Event) { out.events = append(out.events, *e) }
	exited := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		select {
		case <-time.After(delay):
		case <-exited:
			return
		}
		if period == 0 {
			return
		}
		for {
			r.Drain(collect)
			select {
			case <-time.After(period):
			case <-exited:
				return
			}
		}
	}()
	werr := cmd.Wait()
	out.end = uint64(nanotime())
	close(exited)
	<-drained
	r.Flush(collect)
	out.stderr = stderr.String()
	if werr != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, werr, out.stderr)
	}
	out.names = symbols(t, bin, out.stderr)
	return &out
}

// symbols maps the fixture's function addresses in its processes to names,
// from the main=%p line it prints.
func symbols(t *testing.T, bin, stderr string) map[uint64]string {
	t.Helper()
	var mains []uint64 // one per process image
	for _, line := range strings.Split(stderr, "\n") {
		if v, ok := strings.CutPrefix(line, "main="); ok {
			a, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			mains = append(mains, a)
		}
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var mainSym uint64
	for _, s := range syms {
		if s.Name == "main" && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			mainSym = s.Value
		}
	}
	names := map[uint64]string{}
	for _, m := range mains {
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				names[s.Value+m-mainSym] = s.Name
			}
		}
	}
	return names
}

// counts are entries and exits per function, per process.
type counts map[uint32]map[string][2]int

func (r *run) counts(t *testing.T) (c counts, dropped uint64, adjusts []Event) {
	t.Helper()
	c = counts{}
	for _, e := range r.events {
		switch e.Kind {
		case KindEntry, KindExit:
			name, ok := r.names[e.Addr]
			if !ok {
				t.Fatalf("event for unknown function %#x", e.Addr)
			}
			if c[e.PID] == nil {
				c[e.PID] = map[string][2]int{}
			}
			v := c[e.PID][name]
			v[e.Kind-1]++
			c[e.PID][name] = v
		case KindAdjust:
			dropped += e.Dropped
			adjusts = append(adjusts, e)
		default:
			t.Fatalf("bad kind %d", e.Kind)
		}
	}
	return c, dropped, adjusts
}

// checkThreads checks each thread's events: times monotonic and within
// the run; with strict, every exit closes the innermost open entry and
// at most open[tid] calls stay open at the end (a thread that called
// exec leaves its frames open).
func (r *run) checkThreads(t *testing.T, strict bool, open map[uint32]int) map[uint32]bool {
	t.Helper()
	type thread struct {
		last  uint64
		stack []uint64
	}
	threads := map[uint32]*thread{}
	tids := map[uint32]bool{}
	for _, e := range r.events {
		if e.TID == 0 {
			continue
		}
		tids[e.TID] = true
		th := threads[e.TID]
		if th == nil {
			th = &thread{}
			threads[e.TID] = th
		}
		if e.Time < th.last {
			t.Fatalf("tid %d: time went back from %d to %d", e.TID, th.last, e.Time)
		}
		if e.Time < r.start || e.Time > r.end {
			t.Fatalf("tid %d: time %d outside the run [%d, %d]", e.TID, e.Time, r.start, r.end)
		}
		th.last = e.Time
		if !strict {
			continue
		}
		switch e.Kind {
		case KindEntry:
			th.stack = append(th.stack, e.Addr)
		case KindExit:
			if n := len(th.stack); n == 0 || th.stack[n-1] != e.Addr {
				t.Fatalf("tid %d: exit of %s does not close the innermost call", e.TID, r.names[e.Addr])
			}
			th.stack = th.stack[:len(th.stack)-1]
		}
	}
	if strict {
		for tid, th := range threads {
			if len(th.stack) != open[tid] {
				t.Errorf("tid %d: %d calls left open, want %d", tid, len(th.stack), open[tid])
			}
		}
	}
	return tids
}

// fibCalls is the number of calls fib(n) makes, itself included.
func fibCalls(n int) int {
	if n < 2 {
		return 1
	}
	return 1 + fibCalls(n-1) + fibCalls(n-2)
}

// callsOf is what calls(n) makes.
func callsOf(n int) map[string]int {
	return map[string]int{"calls": 1, "mid": n, "leaf": 2 * n, "fib": fibCalls(15)}
}

func add(dst map[string]int, src map[string]int) map[string]int {
	for k, v := range src {
		dst[k] += v
	}
	return dst
}

// checkCounts compares entries and exits of one process with want, where
// exitsShort names functions with one exit fewer (exec).
func checkCounts(t *testing.T, got map[string][2]int, want map[string]int, exitsShort ...string) {
	t.Helper()
	for name, n := range want {
		wantExit := n
		for _, s := range exitsShort {
			if s == name {
				wantExit--
			}
		}
		if g := got[name]; g[0] != n || g[1] != wantExit {
			t.Errorf("%s: %d entries, %d exits; want %d, %d", name, g[0], g[1], n, wantExit)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected function %s: %v", name, got[name])
		}
	}
}

func TestCallCounts(t *testing.T) {
	bin := buildFixture(t)
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"tsc", Options{}},
		{"monotonic", Options{Monotonic: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 100000
			r := record(t, tc.opts, 0, time.Millisecond, bin, "calls", strconv.Itoa(n))
			c, dropped, adj := r.counts(t)
			if dropped != 0 {
				t.Errorf("%d dropped", dropped)
			}
			t.Logf("%d events, %d waits for ring space", len(r.events), len(adj))
			if len(c) != 1 {
				t.Fatalf("events from %d processes, want 1", len(c))
			}
			for _, got := range c {
				checkCounts(t, got, add(map[string]int{"main": 1}, callsOf(n)))
			}
			if tids := r.checkThreads(t, true, nil); len(tids) != 1 {
				t.Errorf("events from %d threads, want 1", len(tids))
			}
		})
	}
}

// TestCallgrindCounts checks the hook counts against valgrind's.
func TestCallgrindCounts(t *testing.T) {
	bin := buildFixture(t)
	const n = 3000
	cg := testutil.Callgrind(t, nil, bin, "calls", strconv.Itoa(n))
	r := record(t, Options{}, 0, time.Millisecond, bin, "calls", strconv.Itoa(n))
	c, _, _ := r.counts(t)
	for _, got := range c {
		for name, v := range got {
			if cg[name] != v[0] || v[0] != v[1] {
				t.Errorf("%s: hooks saw %d entries, %d exits; callgrind %d calls", name, v[0], v[1], cg[name])
			}
		}
		if len(got) != 5 {
			t.Errorf("hooks saw %d functions, want 5: %v", len(got), got)
		}
	}
}

func TestThreads(t *testing.T) {
	bin := buildFixture(t)
	const total, batch, per = 200, 4, 1000
	// Fewer slots than threads: slots of exited threads must be reused.
	r := record(t, Options{Threads: 8, Events: 1 << 14}, 0, time.Millisecond, bin, "threads", strconv.Itoa(per), strconv.Itoa(total), strconv.Itoa(batch))
	c, dropped, adj := r.counts(t)
	if dropped != 0 {
		t.Errorf("%d dropped", dropped)
	}
	t.Logf("%d adjusts (waits for a slot or ring space)", len(adj))
	for _, got := range c {
		checkCounts(t, got, map[string]int{"main": 1, "threads": 1, "worker": total, "mid": total * per, "leaf": 2 * total * per})
	}
	if tids := r.checkThreads(t, true, nil); len(tids) != total+1 {
		t.Errorf("events from %d threads, want %d", len(tids), total+1)
	}
}

// TestSlotsExhausted runs more threads than slots without draining: the
// threads that find no slot wait, then drop and count every event.
func TestSlotsExhausted(t *testing.T) {
	bin := buildFixture(t)
	const total, batch, per = 40, 4, 100
	r := record(t, Options{Threads: 4, Events: 1 << 14, MaxWait: 5 * time.Millisecond}, 0, 0, bin, "threads", strconv.Itoa(per), strconv.Itoa(total), strconv.Itoa(batch))
	c, dropped, _ := r.counts(t)
	if dropped == 0 {
		t.Error("no drops although slots ran out")
	}
	events := 0
	for _, got := range c {
		for _, v := range got {
			events += v[0] + v[1]
		}
	}
	want := 2 * (2 + total + 3*total*per)
	if events+int(dropped) != want {
		t.Errorf("%d events + %d dropped = %d, want %d", events, dropped, events+int(dropped), want)
	}
	r.checkThreads(t, false, nil)
}

func TestFork(t *testing.T) {
	bin := buildFixture(t)
	const n = 5000
	r := record(t, Options{}, 0, time.Millisecond, bin, "fork", strconv.Itoa(n))
	var child uint32
	for _, line := range strings.Split(r.stderr, "\n") {
		if v, ok := strings.CutPrefix(line, "child="); ok {
			p, _ := strconv.Atoi(v)
			child = uint32(p)
		}
	}
	c, dropped, _ := r.counts(t)
	if dropped != 0 {
		t.Errorf("%d dropped", dropped)
	}
	if len(c) != 2 || c[child] == nil {
		t.Fatalf("events from processes %v, want the parent and child %d", keys(c), child)
	}
	for pid, got := range c {
		if pid == child {
			checkCounts(t, got, add(map[string]int{"child": 1}, callsOf(2*n)))
		} else {
			checkCounts(t, got, add(add(map[string]int{"main": 1}, callsOf(n)), callsOf(n)))
		}
	}
	r.checkThreads(t, true, nil)
}

func keys(c counts) []uint32 {
	var k []uint32
	for p := range c {
		k = append(k, p)
	}
	return k
}

func TestExec(t *testing.T) {
	bin := buildFixture(t)
	const n, m = 3000, 7000
	r := record(t, Options{}, 0, time.Millisecond, bin, "exec", strconv.Itoa(n), strconv.Itoa(m))
	c, dropped, _ := r.counts(t)
	if dropped != 0 {
		t.Errorf("%d dropped", dropped)
	}
	if len(c) != 1 {
		t.Fatalf("events from processes %v, want 1", keys(c))
	}
	for pid, got := range c {
		// The first image's main never returns: exec replaced it.
		checkCounts(t, got, add(add(map[string]int{"main": 2}, callsOf(n)), callsOf(m)), "main")
		r.checkThreads(t, true, map[uint32]int{pid: 1})
	}
}

// TestFullRingWaits stalls the recorder: the thread waits for space and
// says how long, and nothing is lost.
func TestFullRingWaits(t *testing.T) {
	bin := buildFixture(t)
	const n = 20000
	r := record(t, Options{Events: 1024, MaxWait: 10 * time.Second}, 100*time.Millisecond, time.Millisecond, bin, "calls", strconv.Itoa(n))
	c, dropped, adj := r.counts(t)
	if dropped != 0 {
		t.Errorf("%d dropped", dropped)
	}
	var longest uint64
	for _, a := range adj {
		longest = max(longest, a.Duration)
	}
	if longest < uint64(50*time.Millisecond) {
		t.Errorf("longest wait %v, want about the recorder's 100ms stall", time.Duration(longest))
	}
	for _, got := range c {
		checkCounts(t, got, add(map[string]int{"main": 1}, callsOf(n)))
	}
	r.checkThreads(t, true, nil)
}

// TestPopulateAdjust checks that the time a thread spends mapping fresh
// ring pages is reported as an adjust, like a wait: the uninstrumented
// program would not spend it. The ring never fills here.
func TestPopulateAdjust(t *testing.T) {
	bin := buildFixture(t)
	const n = 10000 // 20,000 records: populated in chunks of 512, 1024, ... records
	r := record(t, Options{Events: 1 << 16}, 0, 0, bin, "calls", strconv.Itoa(n))
	c, dropped, adj := r.counts(t)
	if dropped != 0 {
		t.Errorf("%d dropped", dropped)
	}
	var total uint64
	for _, a := range adj {
		if a.Duration == 0 {
			t.Errorf("adjust without a duration: %+v", a)
		}
		total += a.Duration
	}
	if len(adj) < 5 {
		t.Errorf("%d adjusts for mapping ring pages, want one per chunk (at least 5)", len(adj))
	}
	if total >= r.end-r.start {
		t.Errorf("adjusts total %v, more than the run's %v", time.Duration(total), time.Duration(r.end-r.start))
	}
	for _, got := range c {
		checkCounts(t, got, add(map[string]int{"main": 1}, callsOf(n)))
	}
	r.checkThreads(t, true, nil)
}

// TestFullRingDrops stalls the recorder past MaxWait: the thread drops
// events and counts them, and when the recorder catches up it resumes
// with an adjust that says how many it dropped.
func TestFullRingDrops(t *testing.T) {
	bin := buildFixture(t)
	const n, rounds = 1000, 60
	for _, tc := range []struct {
		name   string
		period time.Duration
	}{
		{"resumes", time.Millisecond},
		{"never drained", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := record(t, Options{Events: 1 << 14, MaxWait: 2 * time.Millisecond}, 30*time.Millisecond, tc.period, bin, "paced", strconv.Itoa(n), strconv.Itoa(rounds))
			c, dropped, adj := r.counts(t)
			if dropped == 0 {
				t.Fatal("no drops")
			}
			var waited uint64
			resumed := false
			for _, a := range adj {
				waited += a.Duration
				resumed = resumed || (a.Dropped != 0 && a != r.events[len(r.events)-1])
			}
			if waited < uint64(2*time.Millisecond) {
				t.Errorf("waited %v before dropping, want at least MaxWait", time.Duration(waited))
			}
			if tc.period != 0 && !resumed {
				t.Error("no events after the drops")
			}
			events := 0
			for _, got := range c {
				for _, v := range got {
					events += v[0] + v[1]
				}
			}
			want := 2 * (1 + rounds*(1+3*n+fibCalls(15)))
			if events+int(dropped) != want {
				t.Errorf("%d events + %d dropped = %d, want %d", events, dropped, events+int(dropped), want)
			}
			t.Logf("%d events, %d dropped, %d adjusts, waited %v", events, dropped, len(adj), time.Duration(waited))
			r.checkThreads(t, false, nil)
		})
	}
}

// TestSignals interrupts the hooks with an instrumented signal handler:
// events of a handler that interrupted a hook are dropped and counted,
// and the rest stay well nested.
func TestSignals(t *testing.T) {
	bin := buildFixture(t)
	const n = 500000
	// No drops from a full ring: only nested events may be dropped.
	r := record(t, Options{MaxWait: time.Minute}, 0, time.Millisecond, bin, "signals", strconv.Itoa(n))
	var signals int
	for _, line := range strings.Split(r.stderr, "\n") {
		if v, ok := strings.CutPrefix(line, "signals="); ok {
			signals, _ = strconv.Atoi(v)
		}
	}
	if signals == 0 {
		t.Fatal("the fixture received no SIGALRM: the signal test tested nothing")
	}
	c, dropped, _ := r.counts(t)
	events := 0
	for _, got := range c {
		for _, v := range got {
			events += v[0] + v[1]
		}
	}
	want := 2 * (1 + 1 + 3*n + fibCalls(15) + 2*signals)
	if events+int(dropped) != want {
		t.Errorf("%d events + %d dropped = %d, want %d", events, dropped, events+int(dropped), want)
	}
	t.Logf("%d signals, %d events dropped as nested", signals, dropped)
	r.checkThreads(t, true, nil)
}

func TestInstrumented(t *testing.T) {
	testutil.RequireCommand(t, "gcc")
	dir := t.TempDir()
	src := "int f(int x) { return x + 1; }\nint main(void) { return f(0) - 1; }\n"
	own := src + `__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *f, void *s) {}
__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *f, void *s) {}
`
	for _, tc := range []struct {
		name  string
		src   string
		flags []string
		want  bool
		err   bool
	}{
		{"plain", src, nil, false, false},
		{"instrumented", src, []string{"-finstrument-functions"}, true, false},
		{"instrumented-nopie", src, []string{"-finstrument-functions", "-no-pie"}, true, false},
		{"static-plain", src, []string{"-static"}, false, false},
		{"static-instrumented", src, []string{"-finstrument-functions", "-static"}, false, true},
		{"own-hooks", own, []string{"-finstrument-functions"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := testutil.BuildC(t, dir, tc.name, tc.src, tc.flags...)
			got, err := Instrumented(bin)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), "uprobes") {
					t.Fatalf("Instrumented = %v, %v; want an error saying to use uprobes", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Instrumented = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestLibrary(t *testing.T) {
	testutil.RequireCommand(t, "gcc")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	libOnce.Lock()
	libOnce.path = ""
	libOnce.Unlock()
	defer func() {
		libOnce.Lock()
		libOnce.path = ""
		libOnce.Unlock()
	}()
	// Concurrent first builds (one process here, but each builds its own
	// temporary file and renames it).
	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, err := cachefile.Dir()
			if err == nil {
				paths[i] = filepath.Join(dir, fmt.Sprintf("race-%d.so", i))
				errs[i] = build("gcc", dir, paths[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
	}
	p, err := Library()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p, os.Getenv("XDG_CACHE_HOME")) {
		t.Errorf("Library() = %s, not under XDG_CACHE_HOME", p)
	}
	if err := checkLibrary(p); err != nil {
		t.Error(err)
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) == elf.STB_GLOBAL && s.Name != hookEnter && s.Name != hookExit {
			t.Errorf("library exports %s", s.Name)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "build-") {
			t.Errorf("temporary %s left behind", e.Name())
		}
	}
	t.Setenv("PATH", t.TempDir())
	libOnce.Lock()
	libOnce.path = ""
	libOnce.Unlock()
	if _, err := Library(); err != ErrNoCompiler {
		t.Errorf("Library() without a compiler: %v, want ErrNoCompiler", err)
	}
}

// TestBurstLeavesOutWaits runs the in-run calibration burst (lib/calib.c)
// with a ring smaller than what its recorded call-heavy loop writes
// (2,500 events a loop) and a recorder that drains it every 200 µs, so
// that the loop waits for ring space in most repetitions, for a varying
// time. The burst must time each loop without the waits, as the recorder
// does (calfit.Collector subtracts the adjusts): its events give each
// loop's time less the waits inside it, and the burst must have stopped
// where those times first became steady (calSteady, as cal_steady), or
// run all its repetitions when they never did. Whether it stops early
// depends on the machine's load (at CI's, bursts ran 22-64 repetitions);
// where it stops does not. Timed with the waits, the call-heavy loop was
// within 5% of its fastest only in repetitions without one: at least one
// burst must have stopped where the times with the waits would not have
// been steady. A loaded machine may run every burst to its end, which
// tells nothing: up to 20 recordings run until one tells.
func TestBurstLeavesOutWaits(t *testing.T) {
	bin := buildFixture(t)
	t.Setenv(EnvCalibrate, "1")
	const minReps, maxReps = 8, 32 // lib/calib.c's cal_min_reps, cal_max_reps
	telling := 0
	for n := 0; n < 5 || telling == 0 && n < 20; n++ {
		r := record(t, Options{Events: 4096, MaxWait: 10 * time.Second}, 0, 200*time.Microsecond, bin, "calls", "0")
		bursts := burstLoops(t, r.events)
		waits := 0
		for _, e := range r.events {
			if e.Kind == KindAdjust && e.Duration > 0 {
				waits++
			}
		}
		if waits < 8 {
			t.Errorf("%d waits: want one in most repetitions (the ring is too small for a loop)", waits)
		}
		var reps []int
		for _, b := range bursts {
			reps = append(reps, len(b.without))
		}
		t.Logf("bursts of %v repetitions, %d waits", reps, waits)
		for i, b := range bursts {
			reps := len(b.without)
			// The events time a loop a few ns off the library's clock
			// reads: each decision is checked with the 5% band half a
			// point wider or narrower, never on its edge.
			if reps < minReps || reps > maxReps {
				t.Errorf("burst %d ran %d repetitions, want %d to %d", i, reps, minReps, maxReps)
				continue
			}
			for n := minReps; n < reps; n++ {
				if calSteady(b.without, n, 1.045) {
					t.Errorf("burst %d ran %d repetitions: its times without the waits were steady after %d", i, reps, n)
					break
				}
			}
			if reps < maxReps {
				if !calSteady(b.without, reps, 1.055) {
					t.Errorf("burst %d stopped after %d repetitions: its times without the waits were not steady", i, reps)
				}
				if !calSteady(b.with, reps, 1.055) {
					telling++
				}
			}
		}
	}
	if telling == 0 {
		t.Errorf("no burst stopped where its times with the waits were unsteady: the waits told nothing apart")
	}
}

// burstLoop is one calibration burst's loop times (ns) by repetition and
// loop kind (reference and recorded loop of each shape, cal_loops'
// order), without and with the waits inside each loop.
type burstLoop struct {
	without, with [][calKinds]float64
}

// calKinds is lib/calib.c's cal_kinds, the loops of one repetition.
const calKinds = 8

// burstLoops returns the calibration bursts in events, of one thread:
// the first entry is the burst's, the second its empty shape's, and the
// burst's other direct callees are its loops. A loop's time is from its
// entry to its exit less the adjusts between them: a hook that waits
// writes its event, timed before the wait, then the wait's adjust.
func burstLoops(t *testing.T, events []Event) []burstLoop {
	t.Helper()
	var first []Event // the first two entries or exits
	for _, e := range events {
		if e.Kind != KindAdjust && len(first) < 2 {
			first = append(first, e)
		}
	}
	if len(first) < 2 || first[0].Kind != KindEntry || first[1].Kind != KindEntry {
		t.Fatalf("%d events: want the burst's first", len(events))
	}
	burst, empty := first[0].Addr, first[1].Addr
	var out []burstLoop
	var b *burstLoop
	var row [calKinds][2]float64 // without, with
	k, depth := 0, 0
	var start uint64
	var waited float64
	for _, e := range events {
		switch {
		case e.Kind == KindAdjust:
			waited += float64(e.Duration)
		case e.Kind == KindEntry && depth == 0 && e.Addr == burst:
			out = append(out, burstLoop{})
			b, k, depth = &out[len(out)-1], 0, 1
		case b == nil:
		case e.Kind == KindEntry:
			if depth == 1 {
				start, waited = e.Time, 0
			}
			depth++
		case e.Kind == KindExit:
			depth--
			switch {
			case depth == 0:
				if k != 0 {
					t.Fatalf("burst %d ends inside a repetition, after %d of its loops", len(out)-1, k)
				}
				b = nil
			case depth == 1 && e.Addr != empty:
				with := float64(e.Time - start)
				row[k] = [2]float64{with - waited, with}
				if k++; k == calKinds {
					var without, with [calKinds]float64
					for i := range row {
						without[i], with[i] = row[i][0], row[i][1]
					}
					b.without, b.with = append(b.without, without), append(b.with, with)
					k = 0
				}
			}
		}
	}
	if b != nil {
		t.Fatalf("%d bursts, the last not ended", len(out))
	}
	return out
}

// calSteady is lib/calib.c's cal_steady with the band a parameter: each
// kind's first n times hold 6 within band times the kind's fastest.
func calSteady(times [][calKinds]float64, n int, band float64) bool {
	for k := range calKinds {
		fastest := times[0][k]
		for _, r := range times[:n] {
			fastest = min(fastest, r[k])
		}
		fast := 0
		for _, r := range times[:n] {
			if r[k] <= fastest*band {
				fast++
			}
		}
		if fast < 6 {
			return false
		}
	}
	return true
}
