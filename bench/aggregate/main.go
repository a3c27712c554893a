// Command aggregate measures record --aggregate on the dense hook load
// (testutil.CallsC: main calls mid -mids times, mid calls leaf twice):
// it runs `trueprof record --aggregate` as a process of its own, prints
// the recorder's resident memory every -every, and at the end its peak
// (the kernel's rusage), the trace's size and the calls its trees hold.
//
// By default it makes 10,000,000 mid calls (60,000,002 events) and checks
// the quality bars: calls exact, trace under 1 MB, recorder peak at most
// 150 MB. With -duration it runs the target for that long instead (the
// calls program with more calls than it can make, stopped by record -d)
// to show that the recorder's memory stays flat over time: the RSS of
// the last quarter of the run against that of its first quarter.
//
// Usage (from the repository root):
//
//	go run ./bench/aggregate [-mids 10000000] [-duration 10m] [-every 1s] [-snapshot 1s]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"trueprof/bench/internal/benchutil"
	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
)

// The quality bars of an aggregated recording of 60M events.
const (
	maxTraceBytes = 1 << 20
	maxPeakBytes  = 150 << 20
)

func main() {
	mids := flag.Int("mids", 10_000_000, "mid calls of the calls program (6 events each)")
	duration := flag.Duration("duration", 0, "run the target this long instead of -mids calls (e.g. 10m)")
	every := flag.Duration("every", time.Second, "how often the recorder's RSS is printed")
	snapshot := flag.String("snapshot", "1s", "record --snapshot")
	flag.Parse()
	log.SetFlags(0)

	dir, cleanup := benchutil.Workdir("trueprof-bench-aggregate-")
	defer cleanup()
	tp := benchutil.BuildTrueprof(dir)
	bin := filepath.Join(dir, "calls")
	benchutil.Run("gcc", "-O1", "-fno-inline", "-finstrument-functions", "-o", bin, benchutil.Source(dir, "calls.c", testutil.CallsC))
	out := filepath.Join(dir, "agg.trace")

	n := *mids
	args := []string{"record", "--aggregate", "--snapshot", *snapshot, "-o", out}
	if *duration > 0 {
		n = 1 << 62 // more than it can make: record -d stops it
		args = append(args, "-d", duration.String())
	}
	args = append(args, "--", bin, strconv.Itoa(n))
	rec := exec.Command(tp, args...)
	rec.Stderr = os.Stderr
	if err := rec.Start(); err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rec.Wait() }()

	start := time.Now()
	var rss []uint64
	tick := time.NewTicker(*every)
	defer tick.Stop()
	fmt.Printf("%10s %12s\n", "ELAPSED", "RECORDER RSS")
wait:
	for {
		select {
		case err := <-done:
			// record exits with the target's status: SIGTERM's when -d
			// stopped it.
			if ee, ok := err.(*exec.ExitError); err != nil && !(ok && *duration > 0 && ee.ExitCode() == 128+int(syscall.SIGTERM)) {
				log.Fatalf("record: %v", err)
			}
			break wait
		case <-tick.C:
			if r, ok := residentBytes(rec.Process.Pid); ok {
				rss = append(rss, r)
				fmt.Printf("%10s %9.1f MB\n", time.Since(start).Round(time.Second), float64(r)/1e6)
			}
		}
	}
	peak := uint64(rec.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) << 10

	st, err := os.Stat(out)
	if err != nil {
		log.Fatal(err)
	}
	p, err := model.Open(out)
	if err != nil || p.Err != nil {
		log.Fatalf("reading %s: %v %v", out, err, p.Err)
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		log.Fatal(err)
	}
	calls := map[string]uint64{}
	for _, f := range r.Functions {
		calls[f.Name] = f.Calls
	}
	fmt.Printf("events %d, calls main %d, mid %d, leaf %d; %d snapshots; trace %d bytes; recorder peak RSS %.1f MB (rusage)\n",
		r.Events, calls["main"], calls["mid"], calls["leaf"], p.Tree.Snapshots, st.Size(), float64(peak)/1e6)

	ok := true
	check := func(good bool, format string, a ...any) {
		verdict := "ok  "
		if !good {
			verdict, ok = "FAIL", false
		}
		fmt.Printf("%s %s\n", verdict, fmt.Sprintf(format, a...))
	}
	if *duration == 0 {
		check(calls["main"] == 1 && calls["mid"] == uint64(n) && calls["leaf"] == 2*uint64(n),
			"calls exact: main 1, mid %d, leaf %d", n, 2*n)
	} else {
		check(calls["leaf"] == 2*calls["mid"] || calls["leaf"]+1 == 2*calls["mid"] || calls["leaf"]+2 == 2*calls["mid"],
			"leaf twice mid (the calls open at the end aside)")
	}
	if *duration == 0 {
		// The bars are those of 60M events; a long run's trace grows
		// with its context switches, and its peak with the recorder's
		// event backlog at the end (docs/aggregate.md).
		check(st.Size() < maxTraceBytes, "trace under %d bytes", maxTraceBytes)
		check(peak <= maxPeakBytes, "recorder peak RSS at most %d MB", maxPeakBytes>>20)
	}
	if q := len(rss) / 4; q >= 1 {
		first, last := mean(rss[:q]), mean(rss[len(rss)-q:])
		check(last <= first*1.1+8<<20, "RSS flat: last quarter %.1f MB, first quarter %.1f MB", last/1e6, first/1e6)
	}
	if !ok {
		os.Exit(1)
	}
}

// residentBytes returns the resident set of process pid (VmRSS).
func residentBytes(pid int) (uint64, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// mean is the average of v.
func mean(v []uint64) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}
