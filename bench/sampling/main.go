// Command sampling benchmarks trueprof's sampling against perf in the same
// run on the bundled hotspots example, and prints medians and ratios:
//
//   - recording overhead: the target's wall time under `trueprof record
//     -F 999` and under `perf record -F 999 -g` (goal: ratio ≤ 1.0);
//   - trace bytes per sample against perf.data (goal: ≥ 3× smaller);
//   - report time: `trueprof report` against `perf report --stdio` on the
//     same workload's traces (goal: ≥ 5× faster).
//
// Usage (as root, from the repository root):
//
//	go run ./bench/sampling [-runs 5] [-rounds 3000]
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"trueprof/bench/internal/benchutil"
	"trueprof/examples"
	"trueprof/internal/calibrate/calfit"
)

func main() {
	runs := flag.Int("runs", 5, "repetitions of each measurement (medians are reported)")
	rounds := flag.Int("rounds", 3000, "work rounds of the hotspots example (about 1 ms each)")
	flag.Parse()
	log.SetFlags(0)

	dir, cleanup := benchutil.Workdir("trueprof-bench-")
	defer cleanup()
	trueprof := benchutil.BuildTrueprof(dir)
	src := benchutil.Source(dir, "hotspots.c", examples.Hotspots)
	bin := filepath.Join(dir, "hotspots")
	benchutil.Run("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-inline", "-pthread", "-o", bin, src)
	target := []string{bin, strconv.Itoa(*rounds)}
	perfData := filepath.Join(dir, "perf.data")
	trace := filepath.Join(dir, "trueprof.trace")

	var base, underPerf, underPerfB, underTP []time.Duration
	var perfBytes, tpBytes []float64
	for i := 0; i < *runs; i++ {
		// Interleave the three so drift on a shared machine hits all alike.
		base = append(base, benchutil.Time(target...))
		underPerf = append(underPerf, benchutil.Time(append([]string{"perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", perfData, "--"}, target...)...))
		underPerfB = append(underPerfB, benchutil.Time(append([]string{"perf", "record", "-q", "--no-buildid", "-e", "cpu-clock", "-F", "999", "-g", "-o", perfData + ".B", "--"}, target...)...))
		underTP = append(underTP, benchutil.Time(append([]string{trueprof, "record", "-F", "999", "-o", trace, "--"}, target...)...))
		perfBytes = append(perfBytes, perSample(perfData, perfSamples(perfData)))
		tpBytes = append(tpBytes, perSample(trace, trueprofSamples(trueprof, trace)))
	}
	var perfReport, tpFlat, tpTree []time.Duration
	for i := 0; i < *runs; i++ {
		perfReport = append(perfReport, benchutil.Time("perf", "report", "-i", perfData, "--stdio", "--no-children"))
		tpFlat = append(tpFlat, benchutil.Time(trueprof, "report", "-i", trace, "--view", "flat"))
		tpTree = append(tpTree, benchutil.Time(trueprof, "report", "-i", trace, "--view", "tree"))
	}

	mb, mp, mpb, mt := calfit.Median(base), calfit.Median(underPerf), calfit.Median(underPerfB), calfit.Median(underTP)
	fmt.Printf("hotspots %d rounds, %d runs each, medians\n\n", *rounds, *runs)
	fmt.Printf("recording overhead (target wall time)\n")
	fmt.Printf("  no profiler              %8.3f s\n", mb.Seconds())
	fmt.Printf("  perf record -F 999 -g    %8.3f s  (%+.1f%%)\n", mp.Seconds(), 100*(mp.Seconds()/mb.Seconds()-1))
	fmt.Printf("  perf record --no-buildid %8.3f s  (%+.1f%%; skips perf's exit-time build-id pass)\n", mpb.Seconds(), 100*(mpb.Seconds()/mb.Seconds()-1))
	fmt.Printf("  trueprof record -F 999   %8.3f s  (%+.1f%%)\n", mt.Seconds(), 100*(mt.Seconds()/mb.Seconds()-1))
	fmt.Printf("  ratio trueprof/perf      %8.3f   (goal <= 1.0)\n", mt.Seconds()/mp.Seconds())
	fmt.Printf("  ratio trueprof/perf -B   %8.3f\n\n", mt.Seconds()/mpb.Seconds())
	pb, tb := calfit.Median(perfBytes), calfit.Median(tpBytes)
	fmt.Printf("trace size per sample\n")
	fmt.Printf("  perf.data                %8.1f bytes\n", pb)
	fmt.Printf("  trueprof trace           %8.1f bytes\n", tb)
	fmt.Printf("  ratio perf/trueprof      %8.1f x  (goal >= 3)\n\n", pb/tb)
	pr, tf, tt := calfit.Median(perfReport), calfit.Median(tpFlat), calfit.Median(tpTree)
	fmt.Printf("report time\n")
	fmt.Printf("  perf report --stdio      %8.3f s\n", pr.Seconds())
	fmt.Printf("  trueprof report flat     %8.3f s  (%.1fx faster)\n", tf.Seconds(), pr.Seconds()/tf.Seconds())
	fmt.Printf("  trueprof report tree     %8.3f s  (%.1fx faster; goal >= 5)\n", tt.Seconds(), pr.Seconds()/tt.Seconds())
}

func perSample(path string, samples int) float64 {
	st, err := os.Stat(path)
	if err != nil || samples == 0 {
		log.Fatalf("%s: %v (%d samples)", path, err, samples)
	}
	return float64(st.Size()) / float64(samples)
}

var samplesLine = regexp.MustCompile(`(?m)^\s*SAMPLE events:\s*(\d+)`)

func perfSamples(data string) int {
	out, err := exec.Command("perf", "report", "-i", data, "--stats").Output()
	if err != nil {
		log.Fatalf("perf report --stats: %v", err)
	}
	m := samplesLine.FindSubmatch(out)
	if m == nil {
		log.Fatalf("no SAMPLE events line in perf report --stats")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

var totalSamples = regexp.MustCompile(`"samples":\s*(\d+)`)

func trueprofSamples(trueprof, trace string) int {
	out, err := exec.Command(trueprof, "report", "-i", trace, "--view", "flat", "--format", "json").Output()
	if err != nil {
		log.Fatalf("trueprof report: %v", err)
	}
	m := totalSamples.FindSubmatch(out)
	if m == nil {
		log.Fatalf("no samples total in trueprof's JSON")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
