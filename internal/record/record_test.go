package record

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"trueprof/examples"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// TestMain lets the test binary serve as the exec wrapper, as the
// trueprof binary does.
func TestMain(m *testing.M) {
	RunWrapper()
	os.Exit(m.Run())
}

func cpuClock(t testing.TB) perf.Event {
	ev, err := perf.ParseEvent("cpu-clock")
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// recordCmd records argv into a fresh trace and loads it.
func recordCmd(t *testing.T, cfg Config) (*Result, *model.Profile) {
	t.Helper()
	return recordCtx(t, context.Background(), cfg)
}

// recordCtx is recordCmd stopped early by cancelling ctx.
func recordCtx(t *testing.T, ctx context.Context, cfg Config) (*Result, *model.Profile) {
	t.Helper()
	testutil.RequirePerf(t)
	if cfg.Output == "" {
		cfg.Output = filepath.Join(t.TempDir(), "trueprof.trace")
	}
	if cfg.Event.Name == "" {
		cfg.Event = cpuClock(t)
	}
	if cfg.Log == nil {
		cfg.Log = testWriter{t}
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.Open(cfg.Output)
	if err != nil {
		t.Fatal(err)
	}
	if p.Err != nil {
		t.Fatalf("trace %s: %v", cfg.Output, p.Err)
	}
	return res, p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func buildHotspots(t *testing.T, dir string, flags ...string) string {
	return testutil.BuildC(t, dir, "hotspots", examples.Hotspots, append([]string{"-pthread"}, flags...)...)
}

// selfShares returns each physical function's share (in %) of the samples
// of processes named comm, as perf report --no-children --sort sym
// computes it.
func selfShares(p *model.Profile, comm string) map[string]float64 {
	counts := map[string]float64{}
	total := 0.0
	for _, s := range p.Samples {
		if pr := p.Process(s.PID); comm != "" && (pr == nil || pr.Name != comm) {
			continue
		}
		name := "[unknown]"
		if s.Stack != 0 {
			loc := p.Locations[p.Stacks[s.Stack].Location]
			name = loc.Frames[len(loc.Frames)-1].Function
		}
		counts[name]++
		total++
	}
	for k := range counts {
		counts[k] *= 100 / total
	}
	return counts
}

// perfReport returns the symbol shares perf report computes for the
// samples in perf.data file data that filter selects ("--comm", "NAME"
// or "--pid", "PID").
func perfReport(t *testing.T, perfBin, data string, filter ...string) map[string]float64 {
	args := append([]string{"report", "-i", data, "--no-children", "--stdio", "--sort", "sym", "--percent-limit", "0.5"}, filter...)
	out, err := exec.Command(perfBin, args...).Output()
	if err != nil {
		t.Fatalf("perf report: %v", err)
	}
	shares := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// "52.50%  [.] mix"
		if len(f) >= 3 && strings.HasSuffix(f[0], "%") && strings.HasPrefix(f[1], "[") {
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
			if err == nil {
				shares[strings.Join(f[2:], " ")] += v
			}
		}
	}
	return shares
}

// TestSharesMatchPerf is the sampling oracle: the top functions' self
// shares agree with perf report --no-children within 3 points. Both tools
// sample the same execution (trueprof records perf record running the
// fixture), so run-to-run variation cannot hide or fake a difference.
func TestSharesMatchPerf(t *testing.T) {
	perfBin := testutil.RequireCommand(t, "perf")
	dir := t.TempDir()
	bin := buildHotspots(t, dir)
	data := filepath.Join(dir, "perf.data")
	argv := []string{perfBin, "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", data, "--", bin, "3000"}
	res, p := recordCmd(t, Config{Command: argv, Freq: 999})
	if res.ExitCode != 0 || p.End == nil || p.End.Reason != "exited" {
		t.Fatalf("result %+v end %+v", res, p.End)
	}
	got := selfShares(p, "hotspots")
	want := perfReport(t, perfBin, data, "--comm", "hotspots")
	t.Logf("trueprof %v", top(got))
	t.Logf("perf     %v", top(want))
	for _, fn := range []string{"mix", "parse", "checksum", "transform"} {
		if want[fn] < 3 {
			t.Fatalf("perf shows %s at %.1f%%: fixture broken", fn, want[fn])
		}
		if d := math.Abs(got[fn] - want[fn]); d > 3 {
			t.Errorf("%s: trueprof %.1f%%, perf %.1f%% (differ by %.1f points)", fn, got[fn], want[fn], d)
		}
	}
}

// TestStacksAndThreads checks call chains, thread names and truncation on
// the fixture.
func TestStacksAndThreads(t *testing.T) {
	dir := t.TempDir()
	bin := buildHotspots(t, dir)
	res, p := recordCmd(t, Config{Command: []string{bin, "1000"}, Freq: 999})
	if res.ExitCode != 0 || p.End == nil || p.End.Reason != "exited" {
		t.Fatalf("result %+v end %+v", res, p.End)
	}
	if len(p.Samples) < 300 {
		t.Fatalf("only %d samples", len(p.Samples))
	}
	// Both threads are there with their names, and frame-pointer chains
	// reach the thread entry points.
	tids := map[uint32]bool{}
	for _, s := range p.Samples {
		tids[s.TID] = true
	}
	if len(tids) < 2 {
		t.Errorf("samples from %d threads, want 2", len(tids))
	}
	for _, th := range p.Threads {
		if th.Name != "hotspots" {
			t.Errorf("thread %d named %q (%v)", th.TID, th.Name, th.Names)
		}
	}
	if frac := float64(p.Truncated) / float64(len(p.Samples)); frac > 0.02 {
		t.Errorf("%.1f%% of samples truncated in a frame-pointer build", 100*frac)
	}
	// Every sample has its full path, leaves included: GCC leaves leaf
	// functions (mix, parse, transform) without a frame even with
	// -fno-omit-frame-pointer, so a bare frame-pointer walk (perf record
	// -g) skips their callers; the recorder repairs that from the CFI and
	// the top of the user stack.
	// CFI unwinding (the default) goes on past the frame-pointer chain's
	// end to _start and clone3: paths are counted by every prefix.
	paths := map[string]int{}
	for _, s := range p.Samples {
		var names []string
		for _, l := range p.Stack(s.Stack, nil) {
			fr := p.Locations[l].Frames
			names = append(names, fr[len(fr)-1].Function)
			paths[strings.Join(names, ";")]++
		}
	}
	for _, want := range []string{
		"mix;checksum;process_batch;main;__libc_start_call_main",
		"checksum;process_batch;main;__libc_start_call_main",
		"parse;process_batch;main;__libc_start_call_main",
		"mix;transform;worker;start_thread",
		"transform;worker;start_thread",
	} {
		if paths[want] == 0 {
			t.Errorf("no sample with stack %s", want)
		}
	}
	// Skipped callers would show as these.
	for _, bad := range []string{"mix;process_batch;main;__libc_start_call_main", "parse;main;__libc_start_call_main", "mix;worker;start_thread"} {
		if n := paths[bad]; n > len(p.Samples)/100 {
			t.Errorf("%d samples with a skipped caller: %s", n, bad)
		}
	}
}

func TestExitCodeAndChildren(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "forker", `
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
__attribute__((noinline)) unsigned long spin(unsigned long n) { volatile unsigned long s = 0; for (unsigned long i = 0; i < n; i++) s += i; return s; }
int main(void) {
	pid_t c = fork();
	if (c == 0) { spin(100000000); execl("/bin/true", "true", (char*)0); _exit(9); }
	spin(100000000);
	waitpid(c, 0, 0);
	return 3;
}`)
	res, p := recordCmd(t, Config{Command: []string{bin}})
	if res.ExitCode != 3 || p.End == nil || p.End.ExitCode != 3 {
		t.Errorf("exit code %d (trace %+v), want 3", res.ExitCode, p.End)
	}
	pids := map[uint32]bool{}
	for _, s := range p.Samples {
		pids[s.PID] = true
	}
	if len(pids) != 2 {
		t.Errorf("samples from %d processes, want parent and forked child", len(pids))
	}
	sawTrue := false
	for _, th := range p.Threads {
		for _, n := range th.Names {
			if n == "true" {
				sawTrue = true
			}
		}
	}
	if !sawTrue {
		t.Error("the child's exec of /bin/true left no comm record")
	}
}

// spawner starts a new short-lived busy thread every 50 ms, forever.
const spawner = `
#include <pthread.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long sink;
static long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
/* 30 ms a thread, by the clock: a count of iterations took 6 ms on one
 * host and 20 on another. */
__attribute__((noinline)) void spin_in_thread(void) {
	long long end = now_ns() + 30000000;
	while (now_ns() < end)
		for (unsigned long i = 0; i < 100000; i++) sink += i;
}
static void *run(void *arg) { spin_in_thread(); return arg; }
int main(void) {
	for (;;) {
		pthread_t t;
		pthread_create(&t, 0, run, 0);
		pthread_detach(t);
		usleep(50000);
	}
}
`

// startSpawner starts the spawner fixture and returns it with the threads
// it had before recording began; it is killed when the test ends.
func startSpawner(t *testing.T) (*exec.Cmd, map[uint32]bool) {
	t.Helper()
	testutil.RequirePerf(t)
	bin := testutil.BuildC(t, t.TempDir(), "spawner", spawner, "-pthread")
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(200 * time.Millisecond)
	tids, err := threads(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	existed := map[uint32]bool{}
	for _, tid := range tids {
		existed[uint32(tid)] = true
	}
	return cmd, existed
}

// TestAttach attaches to a running process that keeps creating threads:
// threads that exist at attach time and threads created later are both
// sampled, symbols resolve from /proc, and the target survives detach.
func TestAttach(t *testing.T) {
	cmd, existed := startSpawner(t)
	res, p := recordCmd(t, Config{PID: cmd.Process.Pid, Duration: time.Second})
	if res.Reason != "duration" || res.Samples < 200 {
		t.Fatalf("result %+v", res)
	}
	if n := newThreads(p, existed); n < 5 {
		t.Errorf("samples from %d threads created after attach, want about 20", n)
	}
	if shares := selfShares(p, ""); shares["spin_in_thread"] < 50 {
		t.Errorf("attached shares %v: symbols of a running process not resolved", top(shares))
	}
	if p.Process(uint32(cmd.Process.Pid)) == nil || p.Process(uint32(cmd.Process.Pid)).Name != "spawner" {
		t.Errorf("process name not synthesized from /proc: %+v", p.Processes)
	}
	time.Sleep(100 * time.Millisecond)
	if !processAlive(cmd.Process.Pid) {
		t.Error("target died after detach")
	}
}

func TestSignalStopsCleanly(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := buildHotspots(t, dir)
	out := filepath.Join(dir, "t.trace")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	res, err := Run(ctx, Config{Output: out, Event: cpuClock(t), Command: []string{bin, "1000000"}, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != "signal" || res.ExitCode != 128+15 {
		t.Errorf("result %+v: want reason signal and the target terminated by SIGTERM", res)
	}
	p, err := model.Open(out)
	if err != nil || p.Err != nil || p.End == nil || len(p.Samples) < 100 {
		t.Fatalf("trace after signal: %v %v end=%v samples=%d", err, p.Err, p.End, len(p.Samples))
	}
}

func TestModes(t *testing.T) {
	dir := t.TempDir()
	bin := buildHotspots(t, dir)
	t.Run("normal", func(t *testing.T) {
		res, p := recordCmd(t, Config{Command: []string{bin, "1500"}, Mode: trace.ModeNormal, SizeLimit: 16 << 10, Freq: 4000})
		if res.Reason != "size" && p.Lost.Size == 0 {
			t.Errorf("normal mode with a 16 KiB limit: reason %q, lost %+v", res.Reason, p.Lost)
		}
		if res.Lost != p.Lost.Size+p.Lost.Kernel || res.Discarded != 0 {
			t.Errorf("record's result says %d lost, %d discarded; the trace %+v", res.Lost, res.Discarded, p.Lost)
		}
	})
	t.Run("wrap", func(t *testing.T) {
		// Enough rounds for several times the limit's samples even when
		// the machine is busy and the target gets less CPU.
		res, p := recordCmd(t, Config{Command: []string{bin, "4000"}, Mode: trace.ModeWrap, SizeLimit: 16 << 10, Freq: 4000})
		if p.Lost.Wrap == 0 || res.Reason != "exited" {
			t.Errorf("wrap mode with a 16 KiB limit: reason %q, lost %+v", res.Reason, p.Lost)
		}
		// record's summary counts what the report's header shows.
		if res.Discarded != p.Lost.Wrap || res.Lost != p.Lost.Kernel {
			t.Errorf("record's result says %d lost, %d discarded; the trace %+v", res.Lost, res.Discarded, p.Lost)
		}
		// The newest samples are kept: the last one is near the target's
		// exit (the recorder's own end may come later on a busy machine).
		var exited uint64
		for _, th := range p.Threads {
			exited = max(exited, th.End)
		}
		if n := len(p.Samples); n == 0 || exited-p.Samples[n-1].Time > uint64(200*time.Millisecond) {
			t.Errorf("wrap mode kept %d samples, not the most recent", n)
		}
		if shares := selfShares(p, ""); shares["mix"] == 0 {
			t.Errorf("wrap mode lost module records: %v", shares)
		}
	})
}

// TestTruncatedChains: with --call-graph fp, code without frame pointers
// cuts chains short, and the trace says so and why.
func TestTruncatedChains(t *testing.T) {
	dir := t.TempDir()
	src := examples.Hotspots
	bin := filepath.Join(dir, "nofp")
	if err := os.WriteFile(bin+".c", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-pthread", "-o", bin, bin+".c").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	_, p := recordCmd(t, Config{Command: []string{bin, "1000"}, CallGraph: "fp"})
	if p.Truncated == 0 || p.Header.Callchain != "fp" || p.Header.StackBytes != 0 {
		t.Errorf("no truncated samples among %d without frame pointers (call graph %q, %d stack bytes)",
			len(p.Samples), p.Header.Callchain, p.Header.StackBytes)
	}
	if n := p.TruncatedBy[trace.UnwindFPEnded] + p.TruncatedBy[trace.UnwindMaxDepth]; n != p.Truncated {
		t.Errorf("truncated by %v, want every one fp-ended or max-depth", p.TruncatedBy)
	}
}

func TestGoTarget(t *testing.T) {
	testutil.RequirePerf(t)
	goBin := testutil.RequireCommand(t, "go")
	dir := t.TempDir()
	src := `package main

import "fmt"

//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

func main() { fmt.Println(fib(34)) }
`
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fib\n\ngo 1.21\n"), 0o644)
	bin := filepath.Join(dir, "fib")
	build := exec.Command(goBin, "build", "-ldflags=-s -w", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	_, p := recordCmd(t, Config{Command: []string{bin}})
	shares := selfShares(p, "")
	if shares["main.fib"] < 50 {
		t.Errorf("stripped Go binary: main.fib has %.1f%% (%v)", shares["main.fib"], top(shares))
	}
	if frac := float64(p.Truncated) / float64(len(p.Samples)); frac > 0.05 {
		t.Errorf("%.1f%% of Go samples truncated", 100*frac)
	}
}

func top(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var s []kv
	for k, v := range m {
		s = append(s, kv{k, v})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].v > s[j].v })
	var b strings.Builder
	for i, e := range s {
		if i == 8 {
			break
		}
		fmt.Fprintf(&b, "%s=%.1f ", e.k, e.v)
	}
	return b.String()
}

// TestContextSwitches: a thread that blocks is switched out voluntarily
// each time, and the trace says so.
func TestContextSwitches(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "sleeper", `
#include <unistd.h>
int main(void) { for (int i = 0; i < 200; i++) usleep(1000); return 0; }`)
	_, p := recordCmd(t, Config{Command: []string{bin}})
	var out, in, preempted int
	for _, s := range p.Switches {
		switch {
		case s.Out && s.Preempt:
			preempted++
		case s.Out:
			out++
		default:
			in++
		}
	}
	if out < 200 || in < 200 {
		t.Errorf("%d voluntary switch-outs, %d switch-ins (%d preempted) for 200 sleeps", out, in, preempted)
	}
}

// TestRingPages checks that rings hold the sampling rate's records and
// room for context switches (switchBytes: 12.8 MB, so 16 MiB rings on
// two CPUs whatever the rate), or side records alone when nothing
// samples (sideOnlyBytes), within perf's default and the largest ring,
// and stay at the default without the right to lock more memory.
func TestRingPages(t *testing.T) {
	clock, _ := perf.ParseEvent("cpu-clock")
	faults, _ := perf.ParseEvent("page-faults")
	page := os.Getpagesize()
	for _, c := range []struct {
		name      string
		cfg       Config
		cpus      int
		unlimited bool
		want      int // bytes
	}{
		{"default rate, fp", Config{Event: clock, CallGraph: "fp", Freq: 999}, 2, true, 16 << 20},
		{"low rate", Config{Event: clock, CallGraph: "fp", Freq: 10}, 2, true, 16 << 20},
		{"high rate", Config{Event: clock, CallGraph: "fp", Freq: 20000}, 2, true, 16 << 20},
		{"clock period", Config{Event: clock, CallGraph: "fp", Period: 1000000}, 2, true, 16 << 20},
		{"other period", Config{Event: faults, CallGraph: "fp", Period: 1}, 2, true, 16 << 20},
		{"many CPUs", Config{Event: clock, CallGraph: "fp", Freq: 999}, 64, true, 1 << 20},
		{"more CPUs", Config{Event: clock, CallGraph: "fp", Freq: 999}, 1024, true, 512 << 10},
		{"limited", Config{Event: clock, CallGraph: "fp", Freq: 999}, 2, false, 512 << 10},
		// An 8 KiB stack copy per sample: 999 Hz for 2 s is 18.8 MB.
		{"default rate, auto 8 KiB", Config{Event: clock, Freq: 999, StackBytes: 8192}, 2, true, 16 << 20},
		{"low rate, dwarf 8 KiB", Config{Event: clock, Freq: 100, CallGraph: "dwarf", StackBytes: 8192}, 2, true, 16 << 20},
		// The largest copy: 100 Hz for 2 s is 13.3 MB.
		{"low rate, dwarf 64 KiB", Config{Event: clock, Freq: 100, CallGraph: "dwarf", StackBytes: perf.MaxUserStack}, 2, true, 16 << 20},
		{"limited, auto", Config{Event: clock, Freq: 999, StackBytes: 8192}, 2, false, 512 << 10},
		// Nothing samples: side records alone, whatever the rate.
		{"no sampling", Config{Event: clock, Freq: 999, NoSampling: true}, 2, true, 4 << 20},
		{"no sampling, many CPUs", Config{Event: clock, Freq: 999, NoSampling: true}, 64, true, 1 << 20},
		{"no sampling, limited", Config{Event: clock, Freq: 999, NoSampling: true}, 2, false, 512 << 10},
	} {
		if got := ringPages(c.cfg, c.cpus, c.unlimited) * page; got != c.want {
			t.Errorf("%s: rings of %d bytes, want %d", c.name, got, c.want)
		}
	}
}

// TestRingsWithoutRingEvents records a launched and an attached process
// without ring events (ringEvents), as a user without CAP_PERFMON does:
// each CPU's first sampling event maps its ring, and the samples of
// every thread, those created after the attach included, arrive with
// nothing lost.
func TestRingsWithoutRingEvents(t *testing.T) {
	defer func(old bool) { ringEvents = old }(ringEvents)
	ringEvents = false
	bin := buildHotspots(t, t.TempDir())
	res, p := recordCmd(t, Config{Command: []string{bin, "1000"}, Freq: 999})
	if res.ExitCode != 0 || res.Lost != 0 || len(p.Samples) < 300 {
		t.Fatalf("launched: result %+v, %d samples", res, len(p.Samples))
	}
	tids := map[uint32]bool{}
	for _, s := range p.Samples {
		tids[s.TID] = true
	}
	if len(tids) < 2 {
		t.Errorf("launched: samples from %d threads, want 2", len(tids))
	}
	cmd, existed := startSpawner(t)
	res, p = recordCmd(t, Config{PID: cmd.Process.Pid, Duration: time.Second})
	if res.Reason != "duration" || res.Lost != 0 || res.Samples < 200 {
		t.Fatalf("attached: result %+v", res)
	}
	if n := newThreads(p, existed); n < 5 {
		t.Errorf("attached: samples from %d threads created after the attach, want about 20", n)
	}
}

// newThreads is the number of threads with samples in p that are not in
// existed (the threads of an attached process before the attach).
func newThreads(p *model.Profile, existed map[uint32]bool) int {
	tids := map[uint32]bool{}
	for _, s := range p.Samples {
		if !existed[s.TID] {
			tids[s.TID] = true
		}
	}
	return len(tids)
}
