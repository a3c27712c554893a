// Command hooks benchmarks trueprof's compiled-in hook mechanism
// (internal/hook) against uftrace in the same run, on the two loads of
// bench/percall:
//
//   - default: a loop calling one small function (a third of -calls
//     calls);
//   - dense: testutil.CallsC's main -> mid -> leaf x2 (-calls calls of
//     tiny functions), the load that floods the hook rings.
//
// For each load the program times (median of -runs) its wall time built
// without instrumentation, built with -finstrument-functions running
// glibc's no-op hooks, with trueprof's hooks while a goroutine drains the
// rings as the recorder does (timed with rdtsc, and with clock_gettime
// for comparison), and under `uftrace record --no-libcall` (when
// installed).
//
// The per-call overhead is a slope: each variant runs with a load's calls
// and with a tenth of them, and the difference of the two times over the
// difference of the calls cancels fixed costs (process start, uftrace's
// set-up and exit). The goal is at most 50 ns per call (entry and exit)
// for trueprof, and less than uftrace.
//
// Usage (from the repository root):
//
//	go run ./bench/hooks [-runs 7] [-calls 10000000]
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"trueprof/bench/internal/benchutil"

	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/hook"
	"trueprof/internal/testutil"
)

// defaultC is the default load: main calls target n times (n = argv[1]),
// so n+1 calls when built with -finstrument-functions.
const defaultC = `#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) void target(long i) {
	volatile char frame[16]; /* a frame, as most functions have */
	frame[0] = (char)i;
	sink += i;
}
int main(int argc, char **argv) {
	long n = atol(argv[1]);
	for (long i = 0; i < n; i++)
		target(i);
	return 0;
}
`

// load is a fixture and how many calls its argument makes.
type load struct {
	name, src string
	arg       func(calls int) int // the argument for about calls calls
	callsOf   func(arg int) int   // the calls an argument makes
}

func main() {
	runs := flag.Int("runs", 7, "repetitions of each measurement (medians are reported)")
	calls := flag.Int("calls", 10_000_000, "instrumented calls in the dense load's large run (the small run makes a tenth; the default load a third of them)")
	period := flag.Duration("drain", time.Millisecond, "how often trueprof's recorder side drains the rings")
	ringEvents := flag.Int("events", 0, "records per trueprof ring (0: the default)")
	flag.Parse()
	log.SetFlags(0)

	dir, cleanup := benchutil.Workdir("trueprof-bench-hooks-")
	defer cleanup()
	if _, err := hook.Library(); err != nil {
		log.Fatal(err)
	}
	uftrace, _ := exec.LookPath("uftrace")
	loads := []load{
		{"default", defaultC, func(c int) int { return c/3 - 1 }, func(n int) int { return n + 1 }},
		{"dense", testutil.CallsC, func(c int) int { return (c - 1) / 3 }, func(n int) int { return 3*n + 1 }},
	}
	for _, l := range loads {
		l.run(dir, uftrace, *runs, *calls, *period, *ringEvents)
	}
}

// run measures load l's variants and prints their overheads per call.
func (l load) run(dir, uftrace string, runs, calls int, period time.Duration, ringEvents int) {
	src := benchutil.Source(dir, l.name+".c", l.src)
	plain := filepath.Join(dir, l.name+"-plain")
	instr := filepath.Join(dir, l.name+"-instr")
	benchutil.Run("gcc", "-O1", "-fno-inline", "-o", plain, src)
	benchutil.Run("gcc", "-O1", "-fno-inline", "-finstrument-functions", "-o", instr, src)

	large := l.arg(calls)
	small := large / 10
	callsOf := func(n int) float64 { return float64(l.callsOf(n)) }
	sizes := []int{small, large}

	waits := 0
	type variant struct {
		name string
		time func(n int) time.Duration
	}
	variants := []variant{
		{"uninstrumented", func(n int) time.Duration { return benchutil.Time(plain, strconv.Itoa(n)) }},
		{"glibc no-op hooks", func(n int) time.Duration { return benchutil.Time(instr, strconv.Itoa(n)) }},
		{"trueprof hooks", func(n int) time.Duration {
			d, events, adjusts := timeTrueprof(instr, n, period, hook.Options{Events: ringEvents})
			waits += adjusts
			if want := 2 * l.callsOf(n); events != want {
				log.Fatalf("trueprof: %d events, want %d (%d adjusts)", events, want, adjusts)
			}
			return d
		}},
	}
	variants = append(variants, variant{"trueprof monotonic", func(n int) time.Duration {
		d, _, adjusts := timeTrueprof(instr, n, period, hook.Options{Events: ringEvents, Monotonic: true})
		waits += adjusts
		return d
	}})
	if uftrace != "" {
		data := filepath.Join(dir, "uftrace.data")
		variants = append(variants, variant{"uftrace record", func(n int) time.Duration {
			defer os.RemoveAll(data)
			return benchutil.Time(uftrace, "record", "--no-libcall", "-d", data, instr, strconv.Itoa(n))
		}})
	}

	times := make([][2][]time.Duration, len(variants))
	for i := 0; i < runs; i++ {
		// Interleaved, so that drift on a shared machine hits all alike.
		for v := range variants {
			for s, n := range sizes {
				times[v][s] = append(times[v][s], variants[v].time(n))
			}
		}
	}

	fmt.Printf("%s load: %d and %d calls, %d runs each, medians; trueprof drains every %v\n\n", l.name, int(callsOf(small)), int(callsOf(large)), runs, period)
	fmt.Printf("%-20s %12s %12s %14s %16s\n", "variant", "small", "large", "ns/call", "overhead ns/call")
	slope := make([]float64, len(variants))
	for v := range variants {
		ts, tl := calfit.Median(times[v][0]), calfit.Median(times[v][1])
		slope[v] = float64(tl-ts) / (callsOf(large) - callsOf(small))
		fmt.Printf("%-20s %10.1fms %10.1fms %14.2f %16.2f\n", variants[v].name,
			benchutil.MS(ts), benchutil.MS(tl), slope[v], slope[v]-slope[0])
	}
	fmt.Printf("\ntrueprof: every event drained; the target waited for ring space %d times in all runs\n", waits)
	tp := slope[2] - slope[0]
	fmt.Printf("trueprof per call (entry+exit) over uninstrumented: %.1f ns (goal <= 50)\n", tp)
	fmt.Printf("trueprof per call over glibc's no-op hooks:        %.1f ns\n", slope[2]-slope[1])
	fmt.Printf("trueprof with clock_gettime instead of rdtsc:      %.1f ns\n", slope[3]-slope[0])
	if uftrace != "" {
		uf := slope[4] - slope[0]
		fmt.Printf("uftrace per call over uninstrumented:              %.1f ns\n", uf)
		fmt.Printf("ratio trueprof/uftrace:                            %.3f (goal < 1)\n", tp/uf)
	} else {
		fmt.Println("uftrace not installed: no comparison")
	}
	fmt.Println()
}

// timeTrueprof runs bin with trueprof's hooks and a concurrent drain, and
// returns the target's wall time, the events drained and the adjusts.
func timeTrueprof(bin string, n int, period time.Duration, opts hook.Options) (time.Duration, int, int) {
	r, err := hook.NewRegion(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	events, adjusts := 0, 0
	count := func(e *hook.Event) {
		if e.Kind == hook.KindAdjust {
			adjusts++
			return
		}
		events++
	}
	cmd := exec.Command(bin, strconv.Itoa(n))
	cmd.ExtraFiles = []*os.File{r.File()}
	cmd.Env = append(os.Environ(), r.Env(3)...)
	done := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.Drain(count)
			case <-done:
				return
			}
		}
	}()
	d := timeCmd(cmd)
	close(done)
	<-drained
	r.Flush(count)
	return d, events, adjusts
}

// timeCmd runs cmd, prepared with the files and environment
// benchutil.Time cannot pass, with its output discarded and returns its
// wall time.
func timeCmd(cmd *exec.Cmd) time.Duration {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		log.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return time.Since(start)
}
