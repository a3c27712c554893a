// Command unwind benchmarks trueprof's stack unwinding against perf in the
// same run, on the C++ -O2 and Rust release fixtures of the record tests
// (built without frame pointers). For each program it interleaves, -runs
// times: no profiler, perf record -F 999 -g, perf record -F 999
// --call-graph dwarf, trueprof record --call-graph fp and trueprof record
// (auto, the default), and prints medians beside their goals:
//
//   - the target's wall time and its own CPU time (from
//     /proc/self/schedstat, printed by the fixtures), as overhead against
//     no profiler (goal: auto no worse than perf dwarf, within 10% of perf
//     -g);
//   - trueprof's own CPU time;
//   - trace bytes per sample (goal: at most perf dwarf's / 100 and 3x
//     trueprof fp's);
//   - complete stacks (goal: at least 99%): perf's are the perf script
//     stacks that reach _start, __libc_start_call_main, start_thread or
//     clone3; trueprof's are the samples not marked truncated;
//   - the inclusive (children) shares of perf dwarf's top functions
//     against trueprof auto's (goal: within 2 points; the runs differ, so
//     this carries sampling noise);
//   - lost records;
//
// and the time to build the unwind table of the largest library found
// (libLLVM), which is read lazily at the first lookup.
//
// Usage (as root, from the repository root):
//
//	go run ./bench/unwind [-runs 5]
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"trueprof/bench/internal/benchutil"
	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/symbolize"
	"trueprof/internal/testutil"
)

// program is one fixture and its command line.
type program struct {
	name string
	argv []string
}

// tool is one way of running a program.
type tool struct {
	name string
	argv func(out string, target []string) []string // nil: no profiler
	out  string                                     // file it writes, "" for none
	tp   bool                                       // trueprof
}

// measured is what the runs of one tool measured: each figure's list,
// a value a run, and the records lost in all.
type measured struct {
	wall, targetCPU, recorderCPU []time.Duration
	lost                         int
}

func main() {
	runs := flag.Int("runs", 5, "repetitions of each measurement (medians are reported)")
	flag.Parse()
	log.SetFlags(0)
	dir, cleanup := benchutil.Workdir("trueprof-unwind-")
	defer cleanup()
	trueprof := benchutil.BuildTrueprof(dir)
	fixtures := filepath.Join("internal", "record", "testdata", "unwind")
	cxx := filepath.Join(dir, "work")
	benchutil.Run("g++", "-O2", "-o", cxx, filepath.Join(fixtures, "work.cpp"))
	cargo := exec.Command("cargo", "build", "--release", "--offline", "-q")
	cargo.Dir = filepath.Join(fixtures, "rust")
	cargo.Env = append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(dir, "cargo"))
	if out, err := cargo.CombinedOutput(); err != nil {
		log.Fatalf("cargo build: %v\n%s", err, out)
	}
	programs := []program{
		{"c++ -O2 (work.cpp)", []string{cxx, "1500000"}},
		{"rust release (unwindwork)", []string{filepath.Join(dir, "cargo", "release", "unwindwork"), "6000"}},
	}
	perfData := func(name string) string { return filepath.Join(dir, name+".data") }
	tpTrace := func(name string) string { return filepath.Join(dir, name+".trace") }
	tools := []tool{
		{name: "no profiler"},
		{name: "perf -g", out: perfData("fp"), argv: func(out string, t []string) []string {
			return append([]string{"perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", out, "--"}, t...)
		}},
		{name: "perf dwarf", out: perfData("dwarf"), argv: func(out string, t []string) []string {
			return append([]string{"perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf", "-o", out, "--"}, t...)
		}},
		{name: "trueprof fp", out: tpTrace("fp"), tp: true, argv: func(out string, t []string) []string {
			return append([]string{trueprof, "record", "-F", "999", "--call-graph", "fp", "-o", out, "--"}, t...)
		}},
		{name: "trueprof auto", out: tpTrace("auto"), tp: true, argv: func(out string, t []string) []string {
			return append([]string{trueprof, "record", "-F", "999", "-o", out, "--"}, t...)
		}},
	}
	for _, p := range programs {
		results := make([]measured, len(tools))
		for range *runs {
			// Interleaved, so drift on a shared machine hits all alike.
			for i, tl := range tools {
				argv := p.argv
				if tl.argv != nil {
					argv = tl.argv(tl.out, p.argv)
				}
				results[i].run(argv)
			}
		}
		report(p, tools, results, trueprof)
	}
	cfiBuildTime()
}

var (
	targetCPU = regexp.MustCompile(`(?m)^target-cpu-ns (\d+)$`)
	tpLost    = regexp.MustCompile(`\((\d+) lost\)`)
)

// run runs argv, which must succeed, and adds what the target and
// trueprof print on stderr to m.
func (m *measured) run(argv []string) {
	_, stderr, wall := benchutil.Timed(argv...)
	var tcpu time.Duration
	if g := targetCPU.FindStringSubmatch(stderr); g != nil {
		ns, _ := strconv.ParseInt(g[1], 10, 64)
		tcpu = time.Duration(ns)
	}
	rcpu, _ := benchutil.RecorderCPU(stderr)
	m.wall, m.targetCPU, m.recorderCPU = append(m.wall, wall), append(m.targetCPU, tcpu), append(m.recorderCPU, rcpu)
	if g := tpLost.FindStringSubmatch(stderr); g != nil {
		lost, _ := strconv.Atoi(g[1])
		m.lost += lost
	}
}

// report prints one program's table and its share comparison.
func report(p program, tools []tool, results []measured, trueprof string) {
	comm := filepath.Base(p.argv[0])
	fmt.Printf("%s, %d runs each, medians\n\n", p.name, len(results[0].wall))
	fmt.Printf("  %-14s %9s %7s %10s %7s %10s %10s %10s %6s\n", "", "wall s", "wall%", "target s", "cpu%", "recorder s", "B/sample", "complete", "lost")
	baseWall := calfit.Median(results[0].wall)
	baseCPU := calfit.Median(results[0].targetCPU)
	bytesPer := map[string]float64{}
	over := map[string]float64{}
	complete := map[string]float64{}
	for i, tl := range tools {
		wall := calfit.Median(results[i].wall)
		tcpu := calfit.Median(results[i].targetCPU)
		rcpu := calfit.Median(results[i].recorderCPU)
		over[tl.name] = 100 * (tcpu.Seconds()/baseCPU.Seconds() - 1)
		line := fmt.Sprintf("  %-14s %9.3f %+6.1f%% %10.3f %+6.1f%%", tl.name, wall.Seconds(), 100*(wall.Seconds()/baseWall.Seconds()-1),
			tcpu.Seconds(), over[tl.name])
		if tl.out == "" {
			fmt.Println(line)
			continue
		}
		var n int
		if tl.tp {
			h := trueprofHeader(trueprof, tl.out)
			n = h.Total.Samples
			complete[tl.name] = 100 - h.TruncatedPercent
			line += fmt.Sprintf(" %10.3f", rcpu.Seconds())
		} else {
			var ok int
			n, ok = perfComplete(tl.out, comm)
			complete[tl.name] = 100 * float64(ok) / float64(max(n, 1))
			line += fmt.Sprintf(" %10s", "-")
		}
		st, err := os.Stat(tl.out)
		if err != nil || n == 0 {
			log.Fatalf("%s: %v (%d samples)", tl.out, err, n)
		}
		bytesPer[tl.name] = float64(st.Size()) / float64(n)
		lostText := "-"
		if tl.tp {
			lostText = strconv.Itoa(results[i].lost)
		}
		fmt.Printf("%s %10.1f %9.2f%% %6s\n", line, bytesPer[tl.name], complete[tl.name], lostText)
	}
	fmt.Println()
	auto, dwarf, pfp, tfp := "trueprof auto", "perf dwarf", "perf -g", "trueprof fp"
	goal := func(what string, ok bool) {
		verdict := "met"
		if !ok {
			verdict = "NOT met"
		}
		fmt.Printf("  goal %-58s %s\n", what, verdict)
	}
	goal(fmt.Sprintf("size <= perf dwarf/100 (%.1f <= %.1f B)", bytesPer[auto], bytesPer[dwarf]/100), bytesPer[auto] <= bytesPer[dwarf]/100)
	goal(fmt.Sprintf("size <= 3x trueprof fp (%.1f <= %.1f B)", bytesPer[auto], 3*bytesPer[tfp]), bytesPer[auto] <= 3*bytesPer[tfp])
	goal(fmt.Sprintf("target CPU overhead <= perf dwarf (%+.1f%% <= %+.1f%%)", over[auto], over[dwarf]), over[auto] <= over[dwarf])
	goal(fmt.Sprintf("target CPU overhead within 10%% of perf -g (%+.1f%% vs %+.1f%%)", over[auto], over[pfp]),
		100+over[auto] <= 1.1*(100+over[pfp]))
	goal(fmt.Sprintf("complete stacks >= 99%% (%.2f%%)", complete[auto]), complete[auto] >= 99)

	want, err := testutil.PerfChildren("perf", traceOf(tools, dwarf), comm, "")
	if err != nil {
		log.Fatal(err)
	}
	got := trueprofChildren(trueprof, traceOf(tools, auto))
	fns := slices.SortedFunc(maps.Keys(want), func(a, b string) int { return cmp.Or(cmp.Compare(want[b], want[a]), strings.Compare(a, b)) })
	worst := 0.0
	fmt.Printf("\n  children shares of perf dwarf's top 10 functions (no inlines; separate runs)\n")
	for _, fn := range fns[:min(10, len(fns))] {
		d := got[fn] - want[fn]
		worst = max(worst, d, -d)
		fmt.Printf("    perf %6.2f%%  trueprof %6.2f%%  %+5.2f  %s\n", want[fn], got[fn], d, short(fn))
	}
	goal(fmt.Sprintf("share delta <= 2 points (largest %.2f)", worst), worst <= 2)
	fmt.Println()
}

// traceOf is the file the tool called name writes.
func traceOf(tools []tool, name string) string {
	for _, t := range tools {
		if t.name == name {
			return t.out
		}
	}
	log.Fatalf("no tool %s", name)
	return ""
}

func short(fn string) string {
	if len(fn) > 70 {
		return fn[:67] + "..."
	}
	return fn
}

// header is the part of trueprof's JSON report the bench reads.
type header struct {
	Total struct {
		Samples int `json:"samples"`
	} `json:"total"`
	TruncatedPercent float64 `json:"truncated_percent"`
	Functions        []struct {
		Name         string  `json:"name"`
		TotalPercent float64 `json:"total_percent"`
	} `json:"functions"`
}

func trueprofHeader(trueprof, trace string) header {
	var h header
	out := benchutil.Output(trueprof, "report", "-i", trace, "--view", "flat", "--format", "json", "--no-inlines")
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		log.Fatalf("trueprof report: %v", err)
	}
	return h
}

func trueprofChildren(trueprof, trace string) map[string]float64 {
	m := map[string]float64{}
	for _, f := range trueprofHeader(trueprof, trace).Functions {
		m[testutil.PerfName(f.Name)] += f.TotalPercent
	}
	return m
}

// perfComplete counts comm's samples in a perf.data file and those whose
// stack reaches a thread entry.
func perfComplete(data, comm string) (samples, complete int) {
	out := benchutil.Output("perf", "script", "-i", data, "--comm", comm, "-F", "comm,ip,sym")
	for _, block := range strings.Split(out, "\n\n") {
		if strings.TrimSpace(block) == "" {
			continue
		}
		samples++
		for _, entry := range []string{" _start", " __libc_start_call_main", " start_thread", " clone3"} {
			if strings.Contains(block, entry+"\n") || strings.HasSuffix(block, entry) {
				complete++
				break
			}
		}
	}
	return samples, complete
}

// cfiBuildTime times the lazy unwind table build of the largest libLLVM
// found: the first row looked up in a module pays for it.
func cfiBuildTime() {
	paths, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libLLVM*.so.1")
	var best string
	var size int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Size() > size {
			best, size = p, st.Size()
		}
	}
	if best == "" {
		fmt.Println("no libLLVM found: unwind table build time not measured")
		return
	}
	var open, build []time.Duration
	for range 5 {
		t0 := time.Now()
		f, err := symbolize.OpenFile(best)
		if err != nil {
			log.Fatal(err)
		}
		t1 := time.Now()
		f.UnwindRow(0x1000) // builds the FDE index
		t2 := time.Now()
		f.Close()
		open, build = append(open, t1.Sub(t0)), append(build, t2.Sub(t1))
	}
	fmt.Printf("unwind table of %s (%.0f MB): open %.0f ms, FDE index %.1f ms (medians of 5; goal: start delayed < 1 s)\n",
		filepath.Base(best), float64(size)/1e6, benchutil.MS(calfit.Median(open)), benchutil.MS(calfit.Median(build)))
}
