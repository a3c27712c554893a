// Command percall measures what one instrumented call costs the target
// under each probe mechanism, beside uftrace and bpftrace, in the same
// run, on two loads:
//
//   - default: a loop calling one small function (-calls times);
//   - dense: testutil.CallsC's main -> mid -> leaf x2 (-mids mid calls,
//     three calls each), the load that floods the hook rings.
//
// Each fixture times its own loop (the target's own clock, so the tools'
// start-up is left out) and the whole command is timed too, and
// trueprof's recorder CPU time (from record's summary) is shown per
// call: its start and stop are included, so only on the dense load is it
// the cost of the events. Variants:
// trueprof hooks on a -finstrument-functions build beside uftrace record
// on a -pg build; on the default load also trueprof uprobes beside
// bpftrace uprobe+uretprobe on a plain build. Runs are interleaved
// within a group (hooks, uftrace and the uninstrumented base; uprobes and
// bpftrace), the groups run one after the other, and medians printed.
//
// Usage (root, from the repository root):
//
//	go run ./bench/percall [-runs 5] [-calls 200000] [-mids 500000] [-load default|dense]
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
	"trueprof/bench/internal/benchutil"
	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/record"
)

// fixture is the default load: one function called in a timed loop.
const fixture = `
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static volatile long sink;
__attribute__((noinline)) void target(long i) {
	volatile char frame[16]; /* a frame: its entry is an emulated push */
	frame[0] = (char)i;
	sink += i;
}
int main(int argc, char **argv) {
	long n = atol(argv[1]);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		target(i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
	return 0;
}
`

// dense is the dense load: testutil.CallsC's calls, with its loop timed.
const dense = `
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
volatile long sink;
long leaf(long x) { return x * 3 + 1; }
long mid(long x) { return leaf(x) + leaf(x + 1); }
int main(int argc, char **argv) {
	long n = atol(argv[1]), s = 0;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		s += mid(i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	sink = s;
	printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
	return 0;
}
`

// variant is one way of running a load's fixture.
type variant struct {
	name  string
	argv  []string
	group int // hookGroup or uprobeGroup: the runs compared with each other
}

// The groups of variants: trueprof hooks against uftrace (with the
// uninstrumented base), trueprof uprobes against bpftrace.
const (
	hookGroup = iota
	uprobeGroup
)

// load is a fixture built three ways and the variants that run it.
type load struct {
	name     string
	calls    int // instrumented calls the fixture makes
	variants []variant
	own      map[string][]float64 // the fixture's own loop time, ns
	whole    map[string][]float64 // the whole command's wall time, ns
	recorder map[string][]float64 // trueprof's recorder CPU time, ns
}

func main() {
	runs := flag.Int("runs", 5, "repetitions (medians are reported)")
	calls := flag.Int("calls", 200000, "calls of the probed function (default load)")
	mids := flag.Int("mids", 500000, "mid calls of the dense load (3 calls each)")
	only := flag.String("load", "", "run only this load (default or dense); both if empty")
	flag.Parse()
	log.SetFlags(0)
	dir, cleanup := benchutil.Workdir("trueprof-percall-")
	defer cleanup()
	trueprof := benchutil.BuildTrueprof(dir)
	tr := filepath.Join(dir, "t.trace")
	uft := filepath.Join(dir, "uftrace.data")
	build := func(name, text string) (plain, hooked, pg string) {
		src := benchutil.Source(dir, name+".c", text)
		plain, hooked, pg = filepath.Join(dir, name), filepath.Join(dir, name+"-hooked"), filepath.Join(dir, name+"-pg")
		flags := []string{"gcc", "-O1", "-fno-inline", "-fno-omit-frame-pointer"}
		benchutil.Run(append(flags, "-o", plain, src)...)
		benchutil.Run(append(flags, "-finstrument-functions", "-o", hooked, src)...)
		benchutil.Run(append(flags, "-pg", "-o", pg, src)...)
		return plain, hooked, pg
	}
	plain, hooked, pg := build("default", fixture)
	n := strconv.Itoa(*calls)
	def := &load{name: "default", calls: *calls, variants: []variant{
		{"uninstrumented", []string{plain, n}, hookGroup},
		{"trueprof hooks", []string{trueprof, "record", "-o", tr, "--", hooked, n}, hookGroup},
		{"uftrace", []string{"uftrace", "record", "-d", uft, pg, n}, hookGroup},
		{"trueprof uprobes", []string{trueprof, "record", "-o", tr, "--trace", "target", "--", plain, n}, uprobeGroup},
		{"bpftrace uprobes", []string{"bpftrace", "-q", "-e",
			"uprobe:" + plain + ":target { @c = count(); } uretprobe:" + plain + ":target { @r = count(); }",
			"-c", plain + " " + n}, uprobeGroup},
	}}
	plain, hooked, pg = build("dense", dense)
	m := strconv.Itoa(*mids)
	den := &load{name: "dense", calls: 3 * *mids, variants: []variant{
		{"uninstrumented", []string{plain, m}, hookGroup},
		{"trueprof hooks", []string{trueprof, "record", "-o", tr, "--", hooked, m}, hookGroup},
		{"uftrace", []string{"uftrace", "record", "-d", uft, pg, m}, hookGroup},
	}}
	var loads []*load
	for _, l := range []*load{def, den} {
		if *only == "" || *only == l.name {
			loads = append(loads, l)
		}
	}
	if len(loads) == 0 {
		log.Fatalf("-load %q: want default or dense", *only)
	}
	for _, l := range loads {
		l.own, l.whole, l.recorder = map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	}
	// The runs of a group are interleaved, so that drift on a shared
	// machine hits all alike; the groups run one after the other, so that
	// the kernel's teardown of the uprobes (RCU grace periods after the
	// tool exited) does not land on the next hooks or uftrace run: a
	// hooks recording right after a uprobe one took 196 ms instead of 66.
	for _, g := range []int{hookGroup, uprobeGroup} {
		for r := 0; r < *runs; r++ {
			for _, l := range loads {
				for _, v := range l.variants {
					if v.group != g {
						continue
					}
					if _, err := exec.LookPath(v.argv[0]); err != nil {
						continue
					}
					// Each command starts after the kernel has torn down
					// the previous recording's events, which it does after
					// record exits and which slows whatever runs meanwhile.
					record.WaitTeardowns()
					out, stderr, wall := benchutil.Timed(v.argv...)
					l.whole[v.name] = append(l.whole[v.name], float64(wall))
					if cpu, ok := benchutil.RecorderCPU(stderr); ok {
						l.recorder[v.name] = append(l.recorder[v.name], float64(cpu))
					}
					if ns, ok := firstNumber(out); ok {
						l.own[v.name] = append(l.own[v.name], ns)
					}
					os.RemoveAll(uft)
				}
			}
		}
	}
	for _, l := range loads {
		l.print(*runs)
	}
}

// print reports a load's medians: the fixture's own loop time and the
// overhead per call (entry and exit) over the uninstrumented loop, the
// whole command's time, and the ratios to the competing tools.
func (l *load) print(runs int) {
	base := calfit.Median(l.own["uninstrumented"])
	fmt.Printf("%s load: %d calls, %d runs, medians; overhead per call (entry and exit) over the uninstrumented loop, on the fixture's own clock\n", l.name, l.calls, runs)
	fmt.Printf("  %-18s %12s %14s %14s %16s\n", "variant", "own clock", "ns/call", "whole command", "recorder CPU/call")
	for _, v := range l.variants {
		t, ok := l.own[v.name]
		if !ok {
			fmt.Printf("  %-18s not installed\n", v.name)
			continue
		}
		rec := ""
		if r, ok := l.recorder[v.name]; ok {
			rec = fmt.Sprintf("%13.1f ns", calfit.Median(r)/float64(l.calls))
		}
		fmt.Printf("  %-18s %9.2f ms %+14.1f %11.2f ms %16s\n", v.name, calfit.Median(t)/1e6,
			(calfit.Median(t)-base)/float64(l.calls), calfit.Median(l.whole[v.name])/1e6, rec)
	}
	per := func(name string) float64 { return (calfit.Median(l.own[name]) - base) / float64(l.calls) }
	whole := func(name string) float64 { return calfit.Median(l.whole[name]) }
	if _, ok := l.own["uftrace"]; ok {
		fmt.Printf("  ratio trueprof hooks / uftrace:    %.2f per call (goal <= 0.6), %.2f whole command (goal <= 1)\n",
			per("trueprof hooks")/per("uftrace"), whole("trueprof hooks")/whole("uftrace"))
	}
	if _, ok := l.own["bpftrace uprobes"]; ok {
		fmt.Printf("  ratio trueprof uprobes / bpftrace: %.2f per call\n", per("trueprof uprobes")/per("bpftrace uprobes"))
	}
	fmt.Println()
}

// firstNumber finds the fixture's output line (the tools print their own
// lines around it).
func firstNumber(out string) (float64, bool) {
	for _, line := range strings.Split(out, "\n") {
		if v, err := strconv.ParseFloat(strings.TrimSpace(line), 64); err == nil {
			return v, true
		}
	}
	return 0, false
}
