// Command analysis benchmarks trueprof's analysis engine (internal/calltree)
// against issue 12's quality bars, with uftrace's and perf's reports of
// the same programs beside it, in the same run.
//
// Hook trace: a synthetic instrumented recording written with
// trace.Writer (modeltest.WriteCalls), one thread whose main calls mid n times and mid calls
// leaf twice (6 events per mid call, the shape of bench/hooks' fixture
// recorded with -finstrument-functions), so that the engine is measured
// apart from the recorder's drops. `trueprof report --view flat` and
// `--view tree` are timed on one core (GOMAXPROCS=1) and on two, with
// their peak RSS (wait4's ru_maxrss); then the other views (arcflow,
// threads), calltree.BuildStream on the trace read in two passes (this
// program run again with -stream; the reports stream the trace too)
// and, with -scale, the same trace with that many times the events, to
// check that memory stays flat. Beside them, uftrace records
// the same program built with -pg (n mid calls) and `uftrace report` is
// timed.
//
// Recorded hook trace: the same calls, built with -finstrument-functions
// and recorded by `trueprof record`, whose trace interleaves its kernel
// records ahead of the probe events (up to ~100 ms on this load): `report
// --view flat` of it is timed beside the synthetic trace's, under the
// peak-RSS and uftrace bars (its events/s column counts the synthetic
// trace's calls).
//
// Sampling: examples/hotspots (built as bench/sampling builds it) is
// recorded for about -seconds by `perf record -F 4000 -g` and by
// `trueprof record -F 4000`; `perf report --stdio` and `trueprof report --view
// tree` of those are timed.
//
// Every time is the median of -runs, with the median CPU time (user and
// system) of the runs beside it: on a shared machine the wall time of a run
// that waited for a CPU says little about the engine. The bars (issue 12): at least 20M
// events/s on one core for flat and tree; the report at most 0.5x
// uftrace report's time; peak RSS at most 512 MB, and within 1.2x at
// -scale times the events; the sampling tree at least 5x faster than
// perf report. Each is printed with PASS or FAIL.
//
// Usage (from the repository root):
//
//	go run ./bench/analysis [-events 60e6] [-scale 10] [-runs 3] [-seconds 10]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"trueprof/bench/internal/benchutil"
	"trueprof/examples"
	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
)

func main() {
	events := flag.Float64("events", 60e6, "events of the hook trace")
	scale := flag.Int("scale", 0, "also analyse a trace with this many times the events, to compare peak memory (0: skip)")
	runs := flag.Int("runs", 3, "repetitions of each measurement (medians are reported)")
	seconds := flag.Float64("seconds", 10, "length of the sampled run (0: skip the sampling benchmark)")
	stream := flag.String("stream", "", "(internal) analyse this trace with calltree.BuildStream and exit")
	synth := flag.String("synthesize", "", "(internal) write the hook trace of -mids mid calls to this file and exit")
	synthMids := flag.Int("mids", 0, "(internal) mid calls of -synthesize")
	flag.Parse()
	log.SetFlags(0)
	if *stream != "" {
		buildStream(*stream)
		return
	}
	if *synth != "" {
		benchutil.WriteCallsTrace(*synth, *synthMids)
		return
	}
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	// The traces are written by this program run again: a child's peak
	// RSS (wait4) is at least its parent's when it forked, and writing
	// a trace of 60M events in this process would make that the figure
	// measured for every report.
	synthesizeApart := func(path string, mids int) {
		benchutil.Run(self, "-synthesize", path, "-mids", strconv.Itoa(mids))
	}

	dir, cleanup := benchutil.Workdir("trueprof-bench-analysis-")
	defer cleanup()
	bin := benchutil.BuildTrueprof(dir)
	mids := int(*events) / 6
	tr := filepath.Join(dir, "hooks.trace")
	synthesizeApart(tr, mids)
	n := float64(6*mids + 2)
	fmt.Printf("hook trace: %d mid calls, %.0f events (synthesized with trace.Writer)\n\n", mids, n)
	fmt.Printf("%-34s %10s %12s %10s %10s\n", "measurement", "time (ms)", "events/s", "peak RSS", "CPU (ms)")
	type row struct {
		name      string
		wall, cpu time.Duration
		rss       int64 // KiB
	}
	// measure runs argv (with env) -runs times over a trace of events
	// events.
	measure := func(name string, events float64, env []string, argv ...string) row {
		var walls, cpus []time.Duration
		var rsss []int64
		for range *runs {
			u := benchutil.Measure(env, argv...)
			walls, cpus, rsss = append(walls, u.Wall), append(cpus, u.CPU()), append(rsss, u.PeakKiB)
		}
		rw := row{name, calfit.Median(walls), calfit.Median(cpus), calfit.Median(rsss)}
		fmt.Printf("%-34s %10.0f %12.3g %8d MB %10.0f\n", name, benchutil.MS(rw.wall), events/rw.wall.Seconds(), rw.rss/1024, benchutil.MS(rw.cpu))
		return rw
	}
	one := []string{"GOMAXPROCS=1"}
	flat1 := measure("report --view flat (1 core)", n, one, bin, "report", "-i", tr, "--view", "flat", "-o", os.DevNull)
	tree1 := measure("report --view tree (1 core)", n, one, bin, "report", "-i", tr, "--view", "tree", "-o", os.DevNull)
	flat := measure("report --view flat (2 cores)", n, nil, bin, "report", "-i", tr, "--view", "flat", "-o", os.DevNull)
	measure("report --view tree (2 cores)", n, nil, bin, "report", "-i", tr, "--view", "tree", "-o", os.DevNull)
	measure("report --view arcflow (2 cores)", n, nil, bin, "report", "-i", tr, "--view", "arcflow", "-o", os.DevNull)
	measure("report --view threads (2 cores)", n, nil, bin, "report", "-i", tr, "--view", "threads", "-o", os.DevNull)
	// The engine alone over the trace read in two passes, as the
	// reports read it: this program again, analysing with BuildStream.
	streamed := measure("calltree.BuildStream (2 cores)", n, nil, self, "-stream", tr)
	var big, bigStreamed row
	if *scale > 1 {
		large := filepath.Join(dir, "hooks-large.trace")
		synthesizeApart(large, mids**scale)
		big = measure(fmt.Sprintf("report --view flat, %dx events", *scale), n*float64(*scale), nil, bin, "report", "-i", large, "--view", "flat", "-o", os.DevNull)
		bigStreamed = measure(fmt.Sprintf("calltree.BuildStream, %dx events", *scale), n*float64(*scale), nil, self, "-stream", large)
		os.Remove(large)
	}

	// The program as users record it: its trace out of time order.
	src := benchutil.Source(dir, "calls.c", testutil.CallsC)
	hooked := filepath.Join(dir, "calls-hooked")
	benchutil.Run("gcc", "-O1", "-fno-inline", "-finstrument-functions", "-o", hooked, src)
	recorded := filepath.Join(dir, "recorded.trace")
	benchutil.Run(bin, "record", "-o", recorded, "--", hooked, strconv.Itoa(mids))
	recFlat := measure("recorded: report --view flat", n, nil, bin, "report", "-i", recorded, "--view", "flat", "-o", os.DevNull)
	os.Remove(recorded)

	var uftraceReport time.Duration
	if _, err := exec.LookPath("uftrace"); err == nil {
		pg := filepath.Join(dir, "calls-pg")
		benchutil.Run("gcc", "-O1", "-fno-inline", "-pg", "-o", pg, src)
		data := filepath.Join(dir, "uftrace.data")
		benchutil.Run("uftrace", "record", "--no-libcall", "-d", data, pg, strconv.Itoa(mids))
		var walls []time.Duration
		for range *runs {
			walls = append(walls, benchutil.Time("uftrace", "report", "-d", data))
		}
		uftraceReport = calfit.Median(walls)
		fmt.Printf("%-34s %10.0f %12.3g\n", "uftrace report (same calls, -pg)", benchutil.MS(uftraceReport), n/uftraceReport.Seconds())
		os.RemoveAll(data)
	} else {
		fmt.Println("uftrace report: not measured (uftrace is not installed)")
	}

	fmt.Println()
	bar := func(ok bool, format string, args ...any) {
		verdict := "FAIL"
		if ok {
			verdict = "PASS"
		}
		fmt.Printf("%s  %s\n", verdict, fmt.Sprintf(format, args...))
	}
	rate := func(r row) float64 { return n / r.wall.Seconds() / 1e6 }
	cpuRate := func(r row) float64 { return n / r.cpu.Seconds() / 1e6 }
	bar(rate(flat1) >= 20 && rate(tree1) >= 20, "flat and tree on one core: %.1fM and %.1fM events/s (bar: 20M; per second of CPU %.1fM and %.1fM)",
		rate(flat1), rate(tree1), cpuRate(flat1), cpuRate(tree1))
	bar(flat.rss <= 512*1024, "peak RSS of flat: %d MB (bar: 512 MB)", flat.rss/1024)
	bar(streamed.rss <= 512*1024, "peak RSS of BuildStream: %d MB (bar: 512 MB)", streamed.rss/1024)
	bar(recFlat.rss <= 512*1024, "peak RSS of flat on the recorded trace: %d MB (bar: 512 MB)", recFlat.rss/1024)
	if big.wall > 0 {
		bar(float64(big.rss) <= 1.2*float64(flat.rss), "peak RSS of flat at %dx the events: %d MB, %.2fx (bar: 1.2x)", *scale, big.rss/1024, float64(big.rss)/float64(flat.rss))
		bar(float64(bigStreamed.rss) <= 1.2*float64(streamed.rss), "peak RSS of BuildStream at %dx the events: %d MB, %.2fx (bar: 1.2x)",
			*scale, bigStreamed.rss/1024, float64(bigStreamed.rss)/float64(streamed.rss))
	}
	if uftraceReport > 0 {
		bar(flat.wall <= uftraceReport/2, "flat report %.0f ms vs uftrace report %.0f ms: %.2fx (bar: 0.5x)",
			benchutil.MS(flat.wall), benchutil.MS(uftraceReport), float64(flat.wall)/float64(uftraceReport))
		bar(recFlat.wall <= uftraceReport/2, "flat report of the recorded trace %.0f ms vs uftrace report %.0f ms: %.2fx (bar: 0.5x)",
			benchutil.MS(recFlat.wall), benchutil.MS(uftraceReport), float64(recFlat.wall)/float64(uftraceReport))
	}
	if *seconds > 0 {
		sampling(dir, bin, *seconds, *runs, bar)
	}
}

// sampling records examples/hotspots with perf and with trueprof and
// compares the time of their tree reports.
func sampling(dir, bin string, seconds float64, runs int, bar func(bool, string, ...any)) {
	if _, err := exec.LookPath("perf"); err != nil {
		fmt.Println("sampling: not measured (perf is not installed)")
		return
	}
	src := benchutil.Source(dir, "hotspots.c", examples.Hotspots)
	prog := filepath.Join(dir, "hotspots")
	benchutil.Run("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-inline", "-pthread", "-o", prog, src)
	rounds := strconv.Itoa(int(seconds * 1000)) // about 1 ms each
	pdata := filepath.Join(dir, "perf.data")
	tr := filepath.Join(dir, "hotspots.trace")
	benchutil.Run("perf", "record", "-q", "-F", "4000", "-g", "-o", pdata, prog, rounds)
	benchutil.Run(bin, "record", "-F", "4000", "-o", tr, "--", prog, rounds)
	samples := benchutil.Output(bin, "report", "-i", tr, "--format", "json", "--view", "flat")
	// Interleaved, so that both see the same load; the CPU time of each
	// run beside its wall time, which waiting for a CPU inflates more
	// for a run of a few milliseconds.
	var perfWalls, ourWalls, perfCPUs, ourCPUs []time.Duration
	for range runs {
		p := benchutil.Measure(nil, "perf", "report", "--stdio", "-i", pdata)
		perfWalls, perfCPUs = append(perfWalls, p.Wall), append(perfCPUs, p.CPU())
		o := benchutil.Measure(nil, bin, "report", "-i", tr, "--view", "tree")
		ourWalls, ourCPUs = append(ourWalls, o.Wall), append(ourCPUs, o.CPU())
	}
	pw, ow := calfit.Median(perfWalls), calfit.Median(ourWalls)
	pc, oc := calfit.Median(perfCPUs), calfit.Median(ourCPUs)
	fmt.Printf("\nsampling: examples/hotspots, %s rounds (about 1 ms each) at 4000 Hz (%d samples)\n", rounds, sampleCount(samples))
	fmt.Printf("%-34s %10s %10s\n", "measurement", "time (ms)", "CPU (ms)")
	fmt.Printf("%-34s %10.1f %10.1f\n%-34s %10.1f %10.1f\n", "perf report --stdio", benchutil.MS(pw), benchutil.MS(pc),
		"trueprof report --view tree", benchutil.MS(ow), benchutil.MS(oc))
	bar(ow*5 <= pw, "sampling tree %.1f ms vs perf report %.1f ms: %.1fx faster (bar: 5x; per second of CPU %.1fx)",
		benchutil.MS(ow), benchutil.MS(pw), float64(pw)/float64(ow), float64(pc)/float64(oc))
}

// sampleCount returns the samples of a flat JSON report.
func sampleCount(flatJSON string) uint64 {
	var h struct{ Total struct{ Samples uint64 } }
	if err := json.Unmarshal([]byte(flatJSON), &h); err != nil {
		log.Fatalf("flat report: %v", err)
	}
	return h.Total.Samples
}

// buildStream analyses the trace at path as a report's instrumented
// views do, but reading it in two passes (model.OpenStream and
// calltree.BuildStream).
func buildStream(path string) {
	s, err := model.OpenStream(path)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := calltree.BuildStream(s, calltree.Options{}); err != nil {
		log.Fatal(err)
	}
}
