// Command aggregate measures record --aggregate on the dense hook load
// (testutil.CallsC: main calls mid -mids times, mid calls leaf twice):
// it runs `trueprof record --aggregate` as a process of its own, prints
// the recorder's resident memory (VmRSS) and its peak so far (VmHWM)
// every -every, and at the end its peak (the kernel's rusage), the
// trace's size and the calls its trees hold.
//
// By default it makes 10,000,000 mid calls (60,000,002 events) and checks
// the quality bars: calls exact, trace under 1 MB, recorder peak at most
// 150 MB. With -duration it runs the target for that long instead (the
// calls program with more calls than it can make, stopped by record -d)
// to show that the recorder's memory stays flat over time: the last RSS
// read against the first one read after -warmup, within 10%.
//
// Usage (from the repository root):
//
//	go run ./bench/aggregate [-mids 10000000] [-duration 10m] [-every 30s] [-warmup 30s] [-snapshot 1s]
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
	warmup := flag.Duration("warmup", 30*time.Second, "the RSS is flat when the last reading is within 10% of the first one from this time on")
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
	var rss []uint64 // the readings from -warmup on
	tick := time.NewTicker(*every)
	defer tick.Stop()
	fmt.Printf("%10s %12s %12s\n", "ELAPSED", "RECORDER RSS", "PEAK (HWM)")
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
			// A process that has exited but not been waited for has
			// no VmRSS: no reading then.
			st, err := benchutil.ProcStatus(rec.Process.Pid)
			r, rssOK := st["VmRSS"]
			hwm, hwmOK := st["VmHWM"]
			if err == nil && rssOK && hwmOK {
				if time.Since(start) >= *warmup {
					rss = append(rss, r)
				}
				fmt.Printf("%10s %9.1f MB %9.1f MB\n", time.Since(start).Round(time.Second), float64(r)/1e6, float64(hwm)/1e6)
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
	if len(rss) >= 2 {
		first, last := float64(rss[0]), float64(rss[len(rss)-1])
		ratio := last / first
		check(ratio >= 0.9 && ratio <= 1.1, "RSS flat: last %.1f MB / first after %v %.1f MB = %.3f (range of %d readings %.1f-%.1f MB)",
			last/1e6, *warmup, first/1e6, ratio, len(rss), float64(slices.Min(rss))/1e6, float64(slices.Max(rss))/1e6)
	}
	if !ok {
		os.Exit(1)
	}
}
