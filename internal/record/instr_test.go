package record

import (
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// countsFixture has functions with known call counts, recursion, and a
// call through a function pointer.
const countsFixture = `
#include <stdio.h>
#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) void leaf(long i) { sink += i; }
__attribute__((noinline)) long fib(int n) { leaf(n); return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) void indirect(void (*f)(long), long n) { for (long i = 0; i < n; i++) f(i); }
__attribute__((noinline)) void work(long n) { for (long i = 0; i < n; i++) leaf(i); }
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 1000;
	for (int r = 0; r < 10; r++) work(n);
	indirect(leaf, 77);
	printf("%ld %ld\n", fib(15), sink);
	return 0;
}
`

// entries counts function entries per name in an instrumented trace.
func entries(p *model.Profile) map[string]int {
	n := map[string]int{}
	for _, e := range p.Events {
		if e.Entry {
			f := p.Locations[e.Function].Frames
			n[f[len(f)-1].Function]++
		}
	}
	return n
}

// checkCounts compares trueprof's exact counts with callgrind's for fns,
// and checks that every entry has its exit.
func checkCounts(t *testing.T, p *model.Profile, want map[string]int, fns ...string) {
	t.Helper()
	got := entries(p)
	for _, fn := range fns {
		if got[fn] != want[fn] || want[fn] == 0 {
			t.Errorf("%s: trueprof counted %d calls, callgrind %d", fn, got[fn], want[fn])
		}
	}
	exits := 0
	for _, e := range p.Events {
		if !e.Entry {
			exits++
		}
	}
	if 2*exits != len(p.Events) {
		t.Errorf("%d exits for %d events", exits, len(p.Events))
	}
}

func TestHookCountsMatchCallgrind(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "counts", countsFixture, "-finstrument-functions")
	_, p := recordCmd(t, Config{Command: []string{bin, "5000"}, Mech: "hook", NoSampling: true})
	if p.Header.Instrument != "hook" {
		t.Fatalf("instrument %q", p.Header.Instrument)
	}
	want := testutil.Callgrind(t, nil, bin, "5000")
	checkCounts(t, p, want, "leaf", "fib", "work", "indirect")
}

// TestHookManyFunctionsMatchCallgrind: a program of 600 hooked
// functions, as a real program's hot code has (their location ids, over
// 255, go into wide runs of events), built at -O2 and called from two
// threads, counted exactly.
func TestHookManyFunctionsMatchCallgrind(t *testing.T) {
	const n = 600
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "many", testutil.ManyCallsC(n), "-O2", "-pthread", "-finstrument-functions")
	_, p := recordCmd(t, Config{Command: []string{bin, "40"}, Mech: "hook", NoSampling: true})
	want := testutil.Callgrind(t, nil, bin, "40")
	fns := make([]string, n)
	for i := range fns {
		fns[i] = fmt.Sprintf("f%d", i)
	}
	checkCounts(t, p, want, fns...)
	// Two threads, 40 rounds of 1,800 calls (n/5 × (1+2+3+4+5)), and
	// main and the threads' run.
	if got, calls := len(p.Events), 2*40*n/5*15+3; got != 2*calls {
		t.Errorf("%d events, want %d", got, 2*calls)
	}
}

// TestHookExecLateEvents: a hooked program that calls a few functions
// and execs another hooked one, which runs on past the recorder's
// horizon: the first image's events reach the recorder after the exec
// record (a batch this sparse is handed over late), and still count
// as its functions, as the programs make them, rather than resolving in
// the new image, at whatever its code holds at those addresses.
func TestHookExecLateEvents(t *testing.T) {
	dir := t.TempDir()
	second := testutil.BuildC(t, dir, "second", `
#include <unistd.h>
__attribute__((noinline)) int pad0(int x) { return x + 1; }
__attribute__((noinline)) int pad1(int x) { return x + 2; }
__attribute__((noinline)) int pad2(int x) { return x + 3; }
__attribute__((noinline)) int beta(int x) { return x * 5 + 2; }
int main(void) { int s = 0; for (int i = 0; i < 7; i++) s += beta(i); usleep(300000); return s == 0; }
`, "-finstrument-functions")
	first := testutil.BuildC(t, dir, "first", `
#include <unistd.h>
__attribute__((noinline)) int alpha(int x) { return x * 3 + 1; }
__attribute__((noinline)) int alpha2(int x) { return alpha(x) + alpha(x + 1); }
int main(int argc, char **argv) {
	int s = 0;
	for (int i = 0; i < 20; i++) s += alpha2(i);
	execl(argv[1], argv[1], (char *)0);
	return s;
}
`, "-finstrument-functions")
	_, p := recordCmd(t, Config{Command: []string{first, second}, Mech: "hook", NoSampling: true})
	got := entries(p)
	want := map[string]int{"main": 2, "alpha2": 20, "alpha": 40, "beta": 7}
	if !maps.Equal(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
}

func TestUprobeCountsMatchCallgrind(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "counts", countsFixture)
	// Launched by a relative path, as users type it: the executable must
	// be probed once, not again when the kernel reports its mapping.
	t.Chdir(dir)
	_, p := recordCmd(t, Config{Command: []string{"./counts", "500"}, Trace: []string{"leaf", "fib", "work", "indirect"}, NoSampling: true})
	if p.Header.Instrument != "uprobe" || len(p.Probes) != 4 {
		t.Fatalf("instrument %q, %d probes", p.Header.Instrument, len(p.Probes))
	}
	want := testutil.Callgrind(t, nil, bin, "500")
	checkCounts(t, p, want, "leaf", "fib", "work", "indirect")
}

// TestUprobeGoCounts probes a Go binary (exits on RET instructions: a
// return probe would corrupt moving goroutine stacks) and checks exact
// counts and that the program's output is unharmed, panics included.
func TestUprobeGoCounts(t *testing.T) {
	goBin := testutil.RequireCommand(t, "go")
	dir := t.TempDir()
	src := `package main

import "fmt"

//go:noinline
func leaf(x int) int { return x*3 + 1 }

//go:noinline
func deep(n int) int {
	var buf [256]byte
	buf[n%256] = byte(n)
	if n == 0 {
		return int(buf[0])
	}
	return deep(n-1) + int(buf[n%256])
}

//go:noinline
func risky(i int) (r int) {
	defer func() {
		if recover() != nil {
			r = -1
		}
	}()
	if i%10 == 0 {
		panic("boom")
	}
	return leaf(i)
}

func main() {
	s := 0
	for i := 0; i < 1000; i++ {
		s += leaf(i)
	}
	done := make(chan int)
	go func() { done <- deep(2000) }()
	s += <-done
	for i := 0; i < 100; i++ {
		s += risky(i)
	}
	fmt.Println(s)
}
`
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gocounts\n\ngo 1.21\n"), 0o644)
	bin := filepath.Join(dir, "gocounts")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.txt")
	f, _ := os.Create(out)
	_, p := recordCmd(t, Config{Command: []string{bin}, Trace: []string{"main.leaf", "main.deep", "main.risky"}, NoSampling: true, Stdout: f})
	f.Close()
	got, _ := os.ReadFile(out)
	if string(got) != string(want) {
		t.Errorf("probed Go program printed %q, want %q", got, want)
	}
	n := entries(p)
	// leaf: 1000 direct + 90 from risky; deep: 2001; risky: 100.
	if n["main.leaf"] != 1090 || n["main.deep"] != 2001 || n["main.risky"] != 100 {
		t.Errorf("Go entries %v, want leaf 1090, deep 2001, risky 100", n)
	}
}

// TestUprobeLibraries probes a function of a library the program needs
// (placed before it runs: counted exactly), named by a glob (libm*), and
// of a plugin it loads with dlopen (placed when the mapping is seen),
// named by its soname while the kernel names the mapping by the real
// file, libplugin.so.1.0.0 (an exact match on that name never fired).
func TestUprobeLibraries(t *testing.T) {
	dir := t.TempDir()
	real := testutil.BuildC(t, dir, "libplugin.so.1.0.0", `
static volatile long sink;
__attribute__((noinline)) void plugin_work(long i) { sink += i; }
`, "-shared", "-fPIC", "-Wl,-soname,libplugin.so.1")
	plugin := filepath.Join(dir, "libplugin.so.1")
	if err := os.Symlink(filepath.Base(real), plugin); err != nil {
		t.Fatal(err)
	}
	bin := testutil.BuildC(t, dir, "host", `
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
	volatile double x = 0;
	for (int i = 0; i < 1000; i++) x += cbrt((double)i);
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	void (*work)(long) = (void (*)(long))dlsym(h, "plugin_work");
	sleep(1); /* the recorder sees the mapping and probes it (ms; a second under heavy load) */
	for (long i = 0; i < 500; i++) work(i);
	printf("%f\n", x);
	return 0;
}`, "-lm", "-ldl")
	_, p := recordCmd(t, Config{Command: []string{bin, plugin}, Trace: []string{"libm*:cbrt", "libplugin.so.1:plugin_work"}, NoSampling: true, Stdout: io.Discard})
	n := entries(p)
	if n["cbrt"] != 1000 || n["plugin_work"] != 500 {
		t.Errorf("entries %v, want cbrt 1000 (needed library) and plugin_work 500 (dlopen)", n)
	}
	var late bool
	for _, pr := range p.Probes {
		f := p.Locations[pr.Function].Frames
		if f[len(f)-1].Function == "plugin_work" && pr.Time > p.Header.StartNS {
			late = true
		}
	}
	if !late {
		t.Error("no Probe record saying when plugin_work was probed")
	}
}

// TestUprobeDlopenHold: a library loaded with dlopen, and the library it
// needs, are probed while the dynamic linker holds the target, before
// any of their code runs (watchLoads): the constructor's call and every
// call made at once after dlopen are counted, with no repair. Probed
// when the mapping was seen, a few milliseconds later, the constructor's
// call and thousands of the first calls were missed (a Python program's
// zlib calls: 13,484 of 20,000, and 3 unmatched exits).
func TestUprobeDlopenHold(t *testing.T) {
	dir := t.TempDir()
	testutil.BuildC(t, dir, "libdep.so", `
static volatile long sink;
__attribute__((noinline)) void dep_work(long i) { sink += i; }
`, "-shared", "-fPIC")
	plugin := testutil.BuildC(t, dir, "libplug.so", `
void dep_work(long);
__attribute__((noinline)) void plug_work(long i) { dep_work(i); }
__attribute__((constructor)) static void init(void) { plug_work(-1); }
`, "-shared", "-fPIC", "-L"+dir, "-ldep", "-Wl,-rpath,$ORIGIN")
	const calls = 200000
	bin := testutil.BuildC(t, dir, "host", `
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	void (*work)(long) = (void (*)(long))dlsym(h, "plug_work");
	for (long i = 0; i < 200000; i++) work(i); /* at once: no time to see the mapping */
	dlclose(h);
	return 0;
}`, "-ldl")
	res, p := recordCmd(t, Config{Command: []string{bin, plugin}, Trace: []string{"libplug*:plug_work", "libdep*:dep_work"}, NoSampling: true, Stdout: io.Discard})
	n := entries(p)
	if n["plug_work"] != calls+1 || n["dep_work"] != calls+1 {
		t.Errorf("entries %v, want plug_work and dep_work %d each (the constructor's and the loop's)", n, calls+1)
	}
	if res.Events != 4*(calls+1) {
		t.Errorf("%d events, want %d", res.Events, 4*(calls+1))
	}
	tree, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := tree.Repairs; r.Popped+r.Unmatched+r.Unclosed != 0 {
		t.Errorf("repairs %+v, want none", r)
	}
	if len(p.Pauses) == 0 {
		t.Error("no Pause record for the dynamic linker's holds")
	}
}

// TestUprobeRootExpands: with --root, the root is probed from the start
// and its callees when it first runs (Scheme B), so later calls of the
// callees are counted; functions outside the subgraph are never probed.
func TestUprobeRootExpands(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "rooted", `
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void helper(long i) { sink += i; }
__attribute__((noinline)) void step(long i) { helper(i); helper(i + 1); }
__attribute__((noinline)) void outside(long i) { sink -= i; }
__attribute__((noinline)) void handle(long n) { for (long i = 0; i < n; i++) step(i); }
int main(void) {
	for (int r = 0; r < 60; r++) {
		handle(100);
		outside(r);
		usleep(20000); /* requests arrive over time */
	}
	return 0;
}`)
	_, p := recordCmd(t, Config{Command: []string{bin}, Root: "handle", NoSampling: true})
	if p.Header.Root != "handle" {
		t.Errorf("header root %q", p.Header.Root)
	}
	n := entries(p)
	if n["handle"] != 60 {
		t.Errorf("handle: %d calls, want 60", n["handle"])
	}
	// step is probed while handle's first entry holds the program,
	// helper while step's does: all of their 6000 and 12000 calls are
	// seen (before the hold, 70-100% of them were, as the recorder got to
	// handle's first event).
	if n["step"] != 6000 || n["helper"] != 12000 {
		t.Errorf("step %d (of 6000), helper %d (of 12000): lazy probes not placed before the first calls", n["step"], n["helper"])
	}
	if n["outside"] != 0 {
		t.Errorf("outside the root's subgraph, but %d calls recorded", n["outside"])
	}
	dynamic := 0
	for _, pr := range p.Probes {
		if pr.Mech == trace.ProbeDynamic {
			dynamic++
		}
	}
	if dynamic != 2 {
		t.Errorf("%d probes placed lazily, want step and helper", dynamic)
	}
}

// TestUprobeCxxExceptions: exceptions unwind through probed functions
// without returning, so their exits never fire; the analysis pops the
// shadow stack to the catching frame, counts the repairs, and the counts
// and the tree stay exact.
func TestUprobeCxxExceptions(t *testing.T) {
	gxx := testutil.RequireCommand(t, "g++")
	dir := t.TempDir()
	src := filepath.Join(dir, "throw.cc")
	os.WriteFile(src, []byte(`
#include <cstdio>
#include <stdexcept>
static volatile long sink;
__attribute__((noinline)) void deepest(int i) { if (i % 3 == 0) throw std::runtime_error("x"); sink += i; }
__attribute__((noinline)) void middle(int i) { deepest(i); sink++; }
__attribute__((noinline)) void guarded(int i) { try { middle(i); } catch (const std::exception &) { sink--; } }
int main() { for (int i = 0; i < 300; i++) guarded(i); std::printf("%ld\n", sink); return 0; }
`), 0o644)
	bin := filepath.Join(dir, "throw")
	if out, err := exec.Command(gxx, "-O1", "-fno-omit-frame-pointer", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	_, p := recordCmd(t, Config{Command: []string{bin}, Trace: []string{"deepest*", "middle*", "guarded*"}, NoSampling: true, Stdout: io.Discard})
	n := entries(p)
	if n["deepest(int)"] != 300 || n["middle(int)"] != 300 || n["guarded(int)"] != 300 {
		t.Fatalf("entries %v, want 300 each", n)
	}
	res, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 100 throws each skip the exits of deepest and middle.
	if res.Repairs.Popped != 200 {
		t.Errorf("repairs %+v, want 200 frames popped by exceptions", res.Repairs)
	}
	for _, f := range res.Functions {
		if f.Name == "guarded(int)" && (f.Calls != 300 || len(f.Callees) != 1 || f.Callees[0].Calls != 300) {
			t.Errorf("guarded: %+v", f)
		}
		if f.Name == "deepest(int)" && (len(f.Callers) != 1 || f.Callers[0].Name != "middle(int)") {
			t.Errorf("deepest's callers %+v: the tree was corrupted", f.Callers)
		}
	}
}

// TestUprobeColdParts probes a function with a cold part (gcc -O2's
// work.cold, testutil.ColdPartsC), by name and as --root main's lazily
// probed subgraph: the jumps into the part and back are no calls and no
// returns, so the counts are the program's own, with report (called from
// the part only) a callee of work, and the tree needs no repair. Probed
// as a function, the part counted each jump into it as a call of
// work.cold and 10 of work's exits were missing; and --root never probed
// report, since work's callees did not include its part's.
func TestUprobeColdParts(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "cold", testutil.ColdPartsC, "-O2")
	for _, cfg := range []Config{
		{Trace: []string{"work*", "leaf", "report", "main"}},
		{Root: "main"},
	} {
		t.Run(fmt.Sprintf("trace %q root %q", cfg.Trace, cfg.Root), func(t *testing.T) {
			var out strings.Builder
			cfg.Command, cfg.NoSampling, cfg.Stdout = []string{bin, "1000"}, true, &out
			_, p := recordCmd(t, cfg)
			want := map[string]int{}
			for _, kv := range strings.Fields(out.String()) {
				name, n, ok := strings.Cut(kv, "=")
				c, err := strconv.Atoi(n)
				if !ok || err != nil {
					t.Fatalf("program output %q", out.String())
				}
				want[name] = c
			}
			got := entries(p)
			for _, fn := range []string{"work", "leaf", "report"} {
				if got[fn] != want[fn] || want[fn] == 0 {
					t.Errorf("%s: %d calls recorded, the program counted %d", fn, got[fn], want[fn])
				}
			}
			if got["work.cold"] != 0 {
				t.Errorf("work.cold: %d calls, want none: it is work's code", got["work.cold"])
			}
			res, err := calltree.Build(p, calltree.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r := res.Repairs; r.Popped+r.Unmatched+r.Unclosed != 0 {
				t.Errorf("repairs %+v, want none", r)
			}
			for _, f := range res.Functions {
				if f.Name == "report" && (len(f.Callers) != 1 || f.Callers[0].Name != "work" || f.Callers[0].Calls != uint64(want["report"])) {
					t.Errorf("report's callers %+v, want work, %d calls", f.Callers, want["report"])
				}
			}
		})
	}
}

// TestUprobeIndirectTailCalls probes functions that end with a tail
// call through a function pointer or a register, in a module that exits
// by RET probes (testutil.TailCallsCXX): the jumps are their exits, so
// target, where they jump, runs at main's level, the counts are the
// program's own, and the one exit the analysis repairs is helper's
// throw. Before, the 3,000 jumps' exits were missing, and target nested
// under via_slot, via_reg and via_obj until main's next call.
func TestUprobeIndirectTailCalls(t *testing.T) {
	bin := testutil.BuildCXX(t, t.TempDir(), "tails", testutil.TailCallsCXX, "-O2", "-g")
	var out strings.Builder
	_, p := recordCmd(t, Config{Command: []string{bin, "1000"}, Trace: []string{"target", "helper", "via_*", "table", "main"}, NoSampling: true, Stdout: &out})
	got := entries(p)
	for _, kv := range strings.Fields(out.String()) {
		name, n, _ := strings.Cut(kv, "=")
		if c, err := strconv.Atoi(n); err != nil || got[name] != c {
			t.Errorf("%s: %d calls recorded, the program counted %s", name, got[name], n)
		}
	}
	res, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Repairs; r.Popped != 1 || r.Unmatched != 0 {
		t.Errorf("repairs %+v, want helper's throw alone", r)
	}
	for _, f := range res.Functions {
		if f.Name == "target" && (len(f.Callers) != 1 || f.Callers[0].Name != "main" || f.Callers[0].Calls != 3000) {
			t.Errorf("target's callers %+v, want main, 3000 calls", f.Callers)
		}
	}

	// Placed lazily under --root, the probes say that they exit by RET
	// probes, which calibration charges as such.
	_, p = recordCmd(t, Config{Command: []string{bin, "1000"}, Root: "main", NoSampling: true, Stdout: io.Discard})
	lazy := 0
	for _, pr := range p.Probes {
		if pr.Mech == trace.ProbeDynamic {
			lazy++
			if !pr.RetInsn {
				t.Errorf("lazy probe of %s: %+v, want RetInsn", p.Locations[pr.Function].Frames[0].Function, pr)
			}
		}
	}
	if lazy == 0 {
		t.Error("--root main placed no probe lazily")
	}
}

// TestUprobeAttachRunning attaches uprobes to a running process that keeps
// creating threads, records for a second and detaches: calls from threads
// created after the attach are counted, every call that began under the
// probes ends under them, and the process goes on unharmed.
func TestUprobeAttachRunning(t *testing.T) {
	cmd, existed := startSpawner(t)
	res, p := recordCmd(t, Config{PID: cmd.Process.Pid, Duration: time.Second, Trace: []string{"spin_in_thread"}, NoSampling: true})
	if res.Reason != "duration" || p.Header.Instrument != "uprobe" {
		t.Fatalf("result %+v, instrument %q", res, p.Header.Instrument)
	}
	newThreads := map[uint32]bool{}
	for _, e := range p.Events {
		if e.Entry && !existed[e.TID] {
			newThreads[e.TID] = true
		}
	}
	if len(newThreads) < 5 {
		t.Errorf("calls from %d threads created after the attach, want about 20", len(newThreads))
	}
	time.Sleep(200 * time.Millisecond)
	if !processAlive(cmd.Process.Pid) {
		t.Fatal("target died after detach")
	}
	// Still running normally: it keeps creating threads without probes.
	after, err := threads(cmd.Process.Pid)
	if err != nil || len(after) == 0 {
		t.Errorf("target threads after detach: %v %v", after, err)
	}
}

// TestUprobeRelativePath launches the target by a relative path and lets
// it work after its mapping has been seen: the executable is probed once,
// so every call is counted once.
func TestUprobeRelativePath(t *testing.T) {
	dir := t.TempDir()
	testutil.BuildC(t, dir, "late", `
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void leaf(long i) { sink += i; }
int main(void) {
	usleep(200000); /* the recorder sees the executable's mapping meanwhile */
	for (long i = 0; i < 1000; i++) leaf(i);
	return 0;
}`)
	t.Chdir(dir)
	_, p := recordCmd(t, Config{Command: []string{"./late"}, Trace: []string{"leaf"}, NoSampling: true})
	if n := entries(p)["leaf"]; n != 1000 {
		t.Errorf("leaf: %d calls counted, want 1000", n)
	}
}

// TestUprobeRootLazyCallSites: under --root, a callee planned lazily
// (f, with B's expansion) places no call-site probe on an instruction
// that a set placed earlier probes (g's and h's call sites in B: `call
// g; call f; call g` shares g's exit and f's entry, f's exit and g's
// entry): the kernel would run the two sets' probes of an instruction in
// either order. The tree and its counts are eager --trace's, and no exit
// is unmatched (before: B -> g -> f, "4 unmatched exits").
func TestUprobeRootLazyCallSites(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "lazy", `
volatile long sink;
#define LEAF(n) __attribute__((noinline)) void n(void) { for (int i = 0; i < 20000; i++) sink += i; }
LEAF(f) LEAF(g) LEAF(h)
__attribute__((noinline)) void A(void) { sink++; g(); g(); h(); }
__attribute__((noinline)) void B(void) { sink++; g(); f(); g(); h(); }
__attribute__((noinline)) void R(void) { sink++; A(); B(); B(); A(); h(); }
int main(void) { R(); R(); return 0; }
`, "-O2", "-fno-optimize-sibling-calls")
	edges := func(cfg Config) string {
		_, p := recordCmd(t, cfg)
		res, err := calltree.Build(p, calltree.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Repairs.Unmatched != 0 {
			t.Errorf("--trace %v --root %q: repairs %+v, want no unmatched exit", cfg.Trace, cfg.Root, res.Repairs)
		}
		var out []string
		for _, f := range res.Functions {
			for _, c := range f.Callees {
				out = append(out, fmt.Sprintf("%s->%s %d", f.Name, c.Name, c.Calls))
			}
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	eager := edges(Config{Command: []string{bin}, Trace: []string{"R", "A", "B", "f", "g", "h"}, NoSampling: true})
	want := "A->g 8, A->h 4, B->f 4, B->g 8, B->h 4, R->A 4, R->B 4, R->h 2"
	if eager != want {
		t.Fatalf("eager --trace: %s, want %s", eager, want)
	}
	if root := edges(Config{Command: []string{bin}, Root: "R", NoSampling: true}); root != eager {
		t.Errorf("--root R: %s\neager --trace: %s", root, eager)
	}
}
