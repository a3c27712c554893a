package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// shortThreads creates and joins argv[1] threads, eight at a time, each
// spinning for about a millisecond of CPU time. It prints the CPU time the
// kernel charged its worker threads, each read by the thread itself at its
// end, and its main thread's since main began: the counts that
// /proc/PID/task/TID/schedstat shows while a thread lives.
const shortThreads = `
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
static volatile long sink;
static long long cpu_ns(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
__attribute__((noinline)) void spin(void) {
	long long end = cpu_ns(CLOCK_THREAD_CPUTIME_ID) + 1000000;
	while (cpu_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 1000; i++) sink += i;
}
static void *worker(void *arg) {
	char name[16];
	snprintf(name, sizeof name, "worker-%ld", (long)arg);
	prctl(PR_SET_NAME, name);
	spin();
	return 0;
}
int main(int argc, char **argv) {
	long long start = cpu_ns(CLOCK_THREAD_CPUTIME_ID), pstart = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
	long n = atol(argv[1]);
	for (long i = 0; i < n; i += 8) {
		pthread_t t[8];
		int k = 0;
		for (; k < 8 && i + k < n; k++) pthread_create(&t[k], 0, worker, (void *)(i + k));
		while (k-- > 0) pthread_join(t[k], 0);
	}
	long long main_ns = cpu_ns(CLOCK_THREAD_CPUTIME_ID) - start;
	printf("%lld %lld\n", cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - pstart - main_ns, main_ns);
	return 0;
}
`

// threadRow is the part of --view threads JSON these tests read.
type threadRow struct {
	PID         uint32   `json:"pid"`
	TID         uint32   `json:"tid"`
	Name        string   `json:"name"`
	Names       []string `json:"names"`
	StartNS     uint64   `json:"start_ns"`
	EndNS       uint64   `json:"end_ns"`
	CPUNS       float64  `json:"cpu_ns"`
	WallNS      float64  `json:"wall_ns"`
	Voluntary   uint64   `json:"dispatches_voluntary"`
	Involuntary uint64   `json:"dispatches_involuntary"`
	Samples     uint64   `json:"samples"`
	Events      uint64   `json:"events"`
}

func threadsView(t *testing.T, tr string, args ...string) []threadRow {
	t.Helper()
	out, err := exec.Command(trueprof(), append([]string{"report", "-i", tr, "--view", "threads", "--format", "json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("report --view threads: %v", err)
	}
	var v struct {
		Threads []threadRow `json:"threads"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("threads JSON: %v\n%s", err, out)
	}
	return v.Threads
}

// TestHundredsOfShortThreads records a program that creates and joins
// 300 short threads: each is its own row with its own name and times, and
// the rows' CPU time adds up to what the kernel charged the threads within
// 2%. The program reads the kernel's charge from its process CPU clock
// from main's start (the exec wrapper's time before is not the target's),
// which counts each thread's exit path as trueprof's switch records do;
// a thread's own clock, read before it returns, missed 11-22 us of it per
// thread at a load of 15.
//
// In a virtual machine the bar widens by the time the hypervisor took the
// CPUs away meanwhile (steal time, /proc/stat): the kernel's clocks leave
// it out, trueprof's on-CPU time between switches cannot (perf's
// task-clock neither). Under a loaded host one thread of 1 ms was seen on
// CPU for 2.47 ms between two switches.
func TestHundredsOfShortThreads(t *testing.T) {
	testutil.RequirePerf(t)
	const n = 300
	bin := testutil.BuildC(t, t.TempDir(), "short", shortThreads, "-pthread")
	tr := filepath.Join(t.TempDir(), "short.trace")
	stealBefore := stealNS(t)
	out, err := exec.Command(trueprof(), "record", "-o", tr, "--", bin, strconv.Itoa(n)).Output()
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	steal := stealNS(t) - stealBefore
	var kernelWorkers, kernelMain float64
	if _, err := fmt.Sscan(string(out), &kernelWorkers, &kernelMain); err != nil {
		t.Fatalf("fixture printed %q", out)
	}
	rows := threadsView(t, tr)
	var cpu, cpuWorkers float64
	workers := map[string]bool{}
	for _, r := range rows {
		cpu += r.CPUNS
		if strings.HasPrefix(r.Name, "worker-") {
			cpuWorkers += r.CPUNS
			if workers[r.Name] {
				t.Errorf("two rows named %s", r.Name)
			}
			workers[r.Name] = true
			// Each spins for 1 ms of its own CPU clock. One thread of 300
			// was once seen at 0.76 ms under CI load (the sum still within
			// 0.6%), so the bound per thread is loose; the sum is the bar.
			if r.StartNS == 0 || r.EndNS <= r.StartNS || r.CPUNS < 0.5e6 || r.CPUNS > r.WallNS+1 {
				t.Errorf("%s: start %d end %d cpu %.0f wall %.0f: want a created and ended thread with about 1 ms on CPU",
					r.Name, r.StartNS, r.EndNS, r.CPUNS, r.WallNS)
			}
		}
	}
	if len(workers) != n {
		t.Errorf("%d worker rows, want %d", len(workers), n)
	}
	for _, c := range []struct {
		what        string
		got, kernel float64
	}{{"worker threads", cpuWorkers, kernelWorkers}, {"all threads (main's since main began)", cpu, kernelWorkers + kernelMain}} {
		d := (c.got - c.kernel) / c.kernel
		t.Logf("%s: trueprof %.2f ms, kernel %.2f ms (%+.2f%%), steal time meanwhile %.0f ms", c.what, c.got/1e6, c.kernel/1e6, 100*d, steal/1e6)
		if lo, hi := 0.98*c.kernel, 1.02*c.kernel+steal; c.got < lo || c.got > hi {
			t.Errorf("%s: CPU time adds up to %.2f ms, the kernel charged %.2f ms: %+.1f%% apart, limit 2%% (above, plus %.0f ms of steal time)",
				c.what, c.got/1e6, c.kernel/1e6, 100*d, steal/1e6)
		}
	}
	if filtered := threadsView(t, tr, "--thread", "worker-1?"); len(filtered) != 10 {
		t.Errorf("--thread worker-1? gives %d rows, want 10", len(filtered))
	}
}

// stealNS returns the machine's steal time so far (/proc/stat's eighth
// cpu column, in USER_HZ ticks of 10 ms): the time a hypervisor ran
// something else on this machine's CPUs.
func stealNS(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		t.Fatalf("/proc/stat begins %q", line)
	}
	ticks, err := strconv.ParseFloat(f[8], 64)
	if err != nil {
		t.Fatalf("/proc/stat steal %q: %v", f[8], err)
	}
	return ticks * 1e7
}

// pingPong passes a byte between its main thread and a second thread
// over two pipes argv[1] times, with a little work per message: about
// 200,000 context switches a second on two CPUs. Each thread prints its
// tid and the CPU time the kernel charged it (its own thread clock, read
// at its end).
const pingPong = `
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static int a2b[2], b2a[2], n;
static volatile unsigned long sink;
static void work(int k) { unsigned long s = 0; for (int i = 0; i < k; i++) s += i * 2654435761u; sink += s; }
static void report(void) {
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	printf("%ld %lld\n", (long)syscall(SYS_gettid), t.tv_sec * 1000000000LL + t.tv_nsec);
	fflush(stdout);
}
static void *other(void *x) {
	char c;
	for (int i = 0; i < n; i++) { if (read(a2b[0], &c, 1) != 1) break; work(2000); write(b2a[1], &c, 1); }
	report();
	return 0;
}
int main(int argc, char **argv) {
	n = atoi(argv[1]);
	if (pipe(a2b) || pipe(b2a)) return 1;
	pthread_t t;
	pthread_create(&t, 0, other, 0);
	char c = 'x';
	for (int i = 0; i < n; i++) { write(a2b[1], &c, 1); work(2000); read(b2a[0], &c, 1); }
	pthread_join(t, 0);
	report();
	return 0;
}
`

// TestPingPongThreads records two threads switching about 200,000 times
// a second, three times: no record lost (the kernel's own count of the
// rings' losses included, which a LOST record never reports when the
// rings overflow at the end), both threads end at their exit, none has a
// lost switch, the samples are the kernel's CPU time at 999 Hz within
// 15%, and each thread's CPU time is the kernel's within the bar below.
//
// The bar is loose below: trueprof's on-CPU time runs from a thread's
// switch-in record to its switch-out record, and the kernel charges the
// incoming thread from the moment the scheduler picks it, before the
// switch and the perf work of both records (writing them, swapping the
// threads' event contexts). At 100,000 switch-ins a thread that is
// 300-350 ns each: trueprof showed 167-200 ms where the kernel charged
// 200-210 ms (-15 to -17%) in runs without loss, at load 20-50, and
// -16.6 to -25.2% in runs of 50,000 round trips at load 3: the bar is
// -30%. Above it
// widens by the steal time, as TestHundredsOfShortThreads says.
// perf's own switch records give the same gap (86 ms against 105 ms of
// rusage, summed from perf script). Before the loss was fixed, runs
// showed 2.5-3.3 s (a lost switch-out running to the end) or half the
// time, which this bar catches.
//
// It records with --call-graph fp: what it tests is the switches, and
// with the default 64 KiB stack copies every sample takes 64 KiB of ring
// (the kernel pads the copy to its size), 128 MB/s at 999 Hz on two
// CPUs, so a run at load 3 still lost 36,978 records near its end
// (counted and shown; docs/recording.md says when to lower the copy).
func TestPingPongThreads(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.BuildC(t, t.TempDir(), "pingpong", pingPong, "-O2", "-pthread")
	for run := range 3 {
		tr := filepath.Join(t.TempDir(), "pp.trace")
		stealBefore := stealNS(t)
		out, err := exec.Command(trueprof(), "record", "--call-graph", "fp", "-o", tr, "--", bin, "150000").Output()
		if err != nil {
			t.Fatalf("record: %v", err)
		}
		steal := stealNS(t) - stealBefore
		kernel := map[uint32]float64{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var tid uint32
			var ns float64
			if _, err := fmt.Sscan(line, &tid, &ns); err != nil {
				t.Fatalf("fixture printed %q", out)
			}
			kernel[tid] = ns
		}
		hdr, err := exec.Command(trueprof(), "report", "-i", tr, "--view", "threads", "--format", "json").Output()
		if err != nil {
			t.Fatalf("report: %v", err)
		}
		var h struct {
			Lost    uint64 `json:"lost"`
			Freq    float64
			Threads []struct {
				TID          uint32  `json:"tid"`
				EndNS        uint64  `json:"end_ns"`
				CPUNS        float64 `json:"cpu_ns"`
				Samples      uint64  `json:"samples"`
				LostSwitches uint64  `json:"lost_switches"`
			} `json:"threads"`
		}
		if err := json.Unmarshal(hdr, &h); err != nil {
			t.Fatal(err)
		}
		if h.Lost != 0 {
			t.Errorf("run %d: %d records lost", run, h.Lost)
		}
		if len(h.Threads) != 2 || len(kernel) != 2 {
			t.Fatalf("run %d: %d thread rows, the fixture printed %d threads", run, len(h.Threads), len(kernel))
		}
		for _, r := range h.Threads {
			k, ok := kernel[r.TID]
			if !ok {
				t.Errorf("run %d: row of tid %d, which the fixture did not print", run, r.TID)
				continue
			}
			d := (r.CPUNS - k) / k
			t.Logf("run %d: tid %d: trueprof %.1f ms, kernel %.1f ms (%+.1f%%), %d samples, steal %.0f ms", run, r.TID, r.CPUNS/1e6, k/1e6, 100*d, r.Samples, steal/1e6)
			if r.EndNS == 0 || r.LostSwitches != 0 {
				t.Errorf("run %d: tid %d: end %d, %d lost switches: want its exit and none", run, r.TID, r.EndNS, r.LostSwitches)
			}
			if lo, hi := 0.70*k, 1.05*k+steal; r.CPUNS < lo || r.CPUNS > hi {
				t.Errorf("run %d: tid %d: CPU %.1f ms, the kernel charged %.1f ms: want %.1f-%.1f ms", run, r.TID, r.CPUNS/1e6, k/1e6, lo/1e6, hi/1e6)
			}
			// Sampling noise: a count of about n samples varies by
			// sqrt(n); 3 sigma of it, and 5% for the timer's own drift.
			want := k / 1e9 * 999
			if dev := 3*math.Sqrt(want) + 0.05*want; math.Abs(float64(r.Samples)-want) > dev+steal/1e9*999 {
				t.Errorf("run %d: tid %d: %d samples, want %.0f (its CPU time at 999 Hz) within %.0f", run, r.TID, r.Samples, want, dev)
			}
		}
	}
}
