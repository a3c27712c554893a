// Command percall measures what one instrumented call costs the target
// under each probe mechanism, beside uftrace and bpftrace, in the same
// run. The fixture times its own loop of calls, so the tools' start-up
// is left out:
//
//   - trueprof hooks vs uftrace, on a -finstrument-functions build;
//   - trueprof uprobes vs bpftrace uprobe+uretprobe, on a plain build.
//
// Usage (root, from the repository root):
//
//	go run ./bench/percall [-runs 5] [-calls 200000]
package main

import (
	"flag"
	"fmt"
	"log"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"trueprof/bench/internal/benchutil"
)

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

func main() {
	runs := flag.Int("runs", 5, "repetitions (medians are reported)")
	calls := flag.Int("calls", 200000, "calls of the probed function")
	flag.Parse()
	log.SetFlags(0)
	dir, cleanup := benchutil.Workdir("trueprof-percall-")
	defer cleanup()
	trueprof := benchutil.BuildTrueprof(dir)
	src := benchutil.Source(dir, "f.c", fixture)
	plain, hooked := filepath.Join(dir, "plain"), filepath.Join(dir, "hooked")
	benchutil.Run("gcc", "-O1", "-fno-omit-frame-pointer", "-o", plain, src)
	benchutil.Run("gcc", "-O1", "-fno-omit-frame-pointer", "-finstrument-functions", "-o", hooked, src)
	n := strconv.Itoa(*calls)
	tr := filepath.Join(dir, "t.trace")
	variants := []struct {
		name string
		argv []string
	}{
		{"uninstrumented", []string{plain, n}},
		{"trueprof hooks", []string{trueprof, "record", "-o", tr, "--", hooked, n}},
		{"uftrace", []string{"uftrace", "record", "-d", filepath.Join(dir, "uftrace.data"), hooked, n}},
		{"trueprof uprobes", []string{trueprof, "record", "-o", tr, "--trace", "target", "--", plain, n}},
		{"bpftrace uprobes", []string{"bpftrace", "-q", "-e",
			"uprobe:" + plain + ":target { @c = count(); } uretprobe:" + plain + ":target { @r = count(); }",
			"-c", plain + " " + n}},
	}
	times := map[string][]float64{}
	for r := 0; r < *runs; r++ {
		for _, v := range variants {
			if _, err := exec.LookPath(v.argv[0]); err != nil && !strings.Contains(v.argv[0], "/") {
				continue
			}
			out, err := exec.Command(v.argv[0], v.argv[1:]...).Output()
			if err != nil {
				log.Fatalf("%s: %v", v.name, err)
			}
			if ns, ok := firstNumber(string(out)); ok {
				times[v.name] = append(times[v.name], ns)
			}
		}
	}
	base := benchutil.Median(times["uninstrumented"])
	fmt.Printf("%d calls, %d runs, medians; overhead per call (entry and exit) over the uninstrumented loop\n", *calls, *runs)
	for _, v := range variants {
		t, ok := times[v.name]
		if !ok {
			fmt.Printf("  %-18s not installed\n", v.name)
			continue
		}
		fmt.Printf("  %-18s %10.2f ms   %+9.1f ns/call\n", v.name, benchutil.Median(t)/1e6, (benchutil.Median(t)-base)/float64(*calls))
	}
	per := func(name string) float64 { return (benchutil.Median(times[name]) - base) / float64(*calls) }
	if _, ok := times["uftrace"]; ok {
		fmt.Printf("  ratio trueprof hooks / uftrace:    %.2f\n", per("trueprof hooks")/per("uftrace"))
	}
	if _, ok := times["bpftrace uprobes"]; ok {
		fmt.Printf("  ratio trueprof uprobes / bpftrace: %.2f\n", per("trueprof uprobes")/per("bpftrace uprobes"))
	}
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
