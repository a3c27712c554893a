// Command attachpause measures whether placing uprobes on a running
// process (uprobe.Attach, BPF uprobe_multi: what trueprof does when it
// attaches with -p, on dlopen and for --root's callees) pauses the
// process, and whether removing them does.
//
// The target times a loop with CLOCK_MONOTONIC and keeps every gap above
// -gap between two iterations. Its loop either only reads the clock
// (spin: user space alone, as a computing thread) or maps, touches and
// unmaps a page each iteration (fault: the page faults and mmap calls
// that wait for the mm's lock, which placing a probe takes). The driver
// alternates windows of the same length: one in which it attaches
// probes to every function of the target (-n of them) and detaches them,
// and one in which it does nothing. It prints, per window kind, the
// voluntary context switches of each window and the
// median over -runs of the time the target was blocked (off a CPU without
// being preempted: from each such switch-out to the next switch-in, from
// its PERF_RECORD_SWITCH records), of the longest gap and of the gaps'
// sum.
//
// Usage (as root, from the repository root):
//
//	go run ./bench/attachpause [-n 2000] [-runs 10] [-gap 20us]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"trueprof/bench/internal/benchutil"
	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/perf"
	"trueprof/internal/uprobe"
)

// fixture is the target: n functions to probe, never called, and a
// timed loop; it prints "start gap" for every gap above the threshold
// (both in CLOCK_MONOTONIC ns) when it has run its seconds.
const fixture = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
FUNCTIONS
static long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
static long starts[1 << 20], gaps[1 << 20];
int main(int argc, char **argv) {
	int fault = strcmp(argv[1], "fault") == 0;
	long threshold = atol(argv[2]), end = now() + atol(argv[3]) * 1000000000L, n = 0;
	printf("ready\n");
	fflush(stdout);
	for (long prev = now(), t; prev < end; prev = t) {
		if (fault) {
			char *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			p[0] = 1;
			munmap(p, 4096);
		}
		t = now();
		if (t - prev > threshold && n < (1 << 20)) {
			starts[n] = prev;
			gaps[n++] = t - prev;
		}
	}
	for (long i = 0; i < n; i++)
		printf("%ld %ld\n", starts[i], gaps[i]);
	return 0;
}
`

// window is a span of the target's run in which the driver did one
// thing (kind: idle, attach or detach).
type window struct {
	kind       string
	start, end uint64
	// sleeps counts the target's voluntary context switches: a loop
	// that makes no blocking call has none unless something makes it
	// wait.
	sleeps uint64
	// blocked is the time the target neither ran nor waited for a CPU
	// (blockedSpans). On a loaded machine the loop's gaps are mostly
	// waits for a CPU; a pause the attach causes is time blocked.
	blocked time.Duration
	// longest and sum are of the loop's gaps in the window.
	longest, sum time.Duration
}

// windowKinds are the windows of each run, in order.
var windowKinds = []string{"idle", "attach", "detach"}

// voluntarySwitches reads voluntary_ctxt_switches of /proc/PID/status.
func voluntarySwitches(pid int) uint64 {
	st, err := benchutil.ProcStatus(pid)
	if err != nil {
		log.Fatal(err)
	}
	n, ok := st["voluntary_ctxt_switches"]
	if !ok {
		log.Fatalf("no voluntary_ctxt_switches in /proc/%d/status", pid)
	}
	return n
}

// blockedSpans collects the spans in which the target was blocked: from
// each switch-out that was not a preemption (the thread was not
// runnable) to its next switch-in, timed by the kernel on
// CLOCK_MONOTONIC as the windows are. (They were the wall time less the
// CPU time and the run-queue wait of its schedstat: the kernel adds to
// those only at scheduler events, so the difference of the three was off
// by up to a tick, and a spin loop with no voluntary switch came out
// hundreds of µs blocked, or less than not at all.)
type blockedSpans struct {
	fd    int
	ring  *perf.Ring
	since uint64      // when the blocked span under way began; 0 if none
	spans [][2]uint64 // start, end
	rec   perf.Record
}

// watchBlocked starts collecting the blocked spans of single-threaded
// process pid.
func watchBlocked(pid int) *blockedSpans {
	dummy, err := perf.ParseEvent("dummy")
	if err != nil {
		log.Fatal(err)
	}
	fd, err := perf.Open(perf.SamplingAttr(dummy, perf.SamplingOptions{Period: 1, ContextSwitch: true, Kernel: true}), pid, -1, 0)
	if err != nil {
		log.Fatal(err)
	}
	ring, err := perf.MapRing(fd, perf.RingPagesFor(4<<20))
	if err != nil {
		log.Fatal(err)
	}
	if err := perf.Enable(fd); err != nil {
		log.Fatal(err)
	}
	return &blockedSpans{fd: fd, ring: ring}
}

// read takes the switch records the ring holds. A lost record would
// lose a span: it stops the measurement.
func (b *blockedSpans) read() {
	b.ring.Read(func(raw []byte) {
		r := &b.rec
		if err := perf.Decode(raw, perf.SampleType, r); err != nil {
			log.Fatal(err)
		}
		switch {
		case r.Type == perf.RecordLost:
			log.Fatalf("the kernel lost %d context switch records of the target: enlarge the ring", r.Lost)
		case r.Type != perf.RecordSwitch:
		case r.SwitchOut() && !r.Preempted():
			b.since = r.Time
		case !r.SwitchOut() && b.since != 0:
			b.spans = append(b.spans, [2]uint64{b.since, r.Time})
			b.since = 0
		}
	})
}

// in returns how long the target was blocked between start and end.
func (b *blockedSpans) in(start, end uint64) time.Duration {
	var d uint64
	for _, s := range b.spans {
		if from, to := max(s[0], start), min(s[1], end); from < to {
			d += to - from
		}
	}
	return time.Duration(d)
}

// close stops collecting.
func (b *blockedSpans) close() {
	b.ring.Close()
	perf.Close(b.fd)
}

func main() {
	n := flag.Int("n", 2000, "functions probed in each attach window")
	runs := flag.Int("runs", 10, "runs of an idle, an attach and a detach window")
	gap := flag.Duration("gap", 20*time.Microsecond, "shortest gap of the loop counted")
	flag.Parse()
	log.SetFlags(0)

	dir, remove := benchutil.Workdir("trueprof-attachpause-")
	defer remove()
	var funcs strings.Builder
	for i := range *n {
		fmt.Fprintf(&funcs, "int f%d(int x) { return x + %d; }\n", i, i)
	}
	bin := filepath.Join(dir, "timed")
	src := benchutil.Source(dir, "timed.c", strings.Replace(fixture, "FUNCTIONS", funcs.String(), 1))
	benchutil.Run("gcc", "-O1", "-fno-omit-frame-pointer", "-o", bin, src)
	sites, err := uprobe.Plan(bin, []string{"f[0-9]*"})
	if err != nil {
		log.Fatal(err)
	}
	for _, mode := range []string{"spin", "fault"} {
		measure(bin, mode, sites, *runs, *gap)
	}
}

// measure runs the target in mode and prints its gaps per window kind.
func measure(bin, mode string, sites []uprobe.Site, runs int, gap time.Duration) {
	const windowLen = 200 * time.Millisecond
	seconds := int((time.Duration(len(windowKinds)*runs)*windowLen*3)/time.Second) + 2
	cmd := exec.Command(bin, mode, strconv.FormatInt(gap.Nanoseconds(), 10), strconv.Itoa(seconds))
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		log.Fatalf("target did not start: %q", sc.Text())
	}
	pid := cmd.Process.Pid
	spans := watchBlocked(pid)
	defer spans.close()
	time.Sleep(100 * time.Millisecond)
	var windows []window
	took := map[string][]time.Duration{}
	var set *uprobe.Set
	for range runs {
		for _, kind := range windowKinds {
			w := window{kind: kind, start: perf.Now()}
			sleeps0 := voluntarySwitches(pid)
			t := time.Now()
			switch kind {
			case "attach":
				if set, err = uprobe.Attach(pid, bin, sites); err != nil {
					log.Fatal(err)
				}
			case "detach":
				set.Close()
			}
			took[kind] = append(took[kind], time.Since(t))
			time.Sleep(windowLen - time.Duration(perf.Now()-w.start))
			w.end = perf.Now()
			w.sleeps = voluntarySwitches(pid) - sleeps0
			windows = append(windows, w)
			time.Sleep(windowLen) // between windows, so that neither spills into the next
			spans.read()
		}
	}
	var starts, gaps []uint64
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		s, _ := strconv.ParseUint(f[0], 10, 64)
		g, _ := strconv.ParseUint(f[1], 10, 64)
		starts, gaps = append(starts, s), append(gaps, g)
	}
	if err := cmd.Wait(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s loop, %d probes, %d runs of %v windows, gaps over %v:\n", mode, len(sites), runs, windowLen, gap)
	fmt.Printf("  attach %v, detach %v (medians)\n", calfit.Median(took["attach"]).Round(time.Microsecond), calfit.Median(took["detach"]).Round(time.Microsecond))
	for _, kind := range windowKinds {
		var sleeps []uint64
		var blocked, longest, sum []time.Duration
		for _, w := range windows {
			if w.kind != kind {
				continue
			}
			for i, s := range starts {
				if s+gaps[i] > w.start && s < w.end {
					w.longest = max(w.longest, time.Duration(gaps[i]))
					w.sum += time.Duration(gaps[i])
				}
			}
			w.blocked = spans.in(w.start, w.end)
			sleeps, blocked = append(sleeps, w.sleeps), append(blocked, w.blocked)
			longest, sum = append(longest, w.longest), append(sum, w.sum)
		}
		fmt.Printf("  %-6s windows: voluntary switches %v; blocked median %v (max %v); longest gap median %v, gaps' sum median %v\n",
			kind, sleeps, calfit.Median(blocked).Round(time.Microsecond), slices.Max(blocked).Round(time.Microsecond),
			calfit.Median(longest).Round(time.Microsecond), calfit.Median(sum).Round(time.Microsecond))
	}
}
