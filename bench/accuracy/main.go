// Command accuracy measures how close trueprof's calibrated instrumented
// times come to the uninstrumented program, as the quality bars
// ask, prints the numbers beside callgrind's and uftrace's, and ends with
// the bars, each PASS or FAIL, measured in the same run:
//
//   - held-out program (held_loop -> outer -> short_fn x2, long_fn ->
//     short_fn; 0.13-1.5 µs functions), recorded with hooks and with
//     uprobes (both calibrated in the run; uprobes also with the stored
//     calibration, and on a build whose entries are all emulated): the
//     calibrated cum of the loop against the uninstrumented loop (bars:
//     within 5% with hooks, 10% with uprobes), and the self shares under
//     hooks and uprobes (plain build, in-run) against callgrind's
//     instruction shares (bar: within 3 points); uftrace's raw total
//     beside.
//   - hooks: a -finstrument-functions program dominated by ~1e6 calls of
//     tiny functions (a few ns each): the calibrated cum of the loop
//     against the uninstrumented build (goal: within 15%, below the
//     calibration's resolution), the self shares against callgrind's;
//     uftrace's raw figure beside.
//   - uprobes: a function of about 60 µs per call, probed in a plain
//     build, against its uninstrumented time (bar: within 5%; in-run
//     calibration, the stored one beside).
//
// Usage (root, from the repository root; run `trueprof calibrate` first or
// let record calibrate):
//
//	go run ./bench/accuracy [-runs 5]
package main

import (
	"bufio"
	"bytes"
	"cmp"
	_ "embed"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"trueprof/internal/record"

	"trueprof/bench/internal/benchutil"
	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/trace"
)

//go:embed fixture.c.txt
var fixture string

var (
	runs     = flag.Int("runs", 5, "repetitions (medians are reported)")
	tinyN    = flag.Int("tiny", 500000, "iterations of the tiny loop (two calls each)")
	coarseN  = flag.Int("coarse", 200, "calls of the coarse function")
	coarseIt = flag.Int("iters", 40000, "work iterations per coarse call (about 60 µs)")
	heldN    = flag.Int("held", 5000, "calls of outer in the held-out program (about 2 µs each)")
)

// bar is a quality bar of the issue and what this run measured for it.
type bar struct {
	name       string
	got, limit float64 // |error| and its bound, in % or points
	unit       string
}

// bars collects the run's bars, printed at the end.
var bars []bar

// check records a bar: |got| within limit.
func check(name string, got, limit float64, unit string) {
	bars = append(bars, bar{name, got, limit, unit})
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, cleanup := benchutil.Workdir("trueprof-accuracy-")
	defer cleanup()
	trueprof := benchutil.BuildTrueprof(dir)
	src := benchutil.Source(dir, "fixture.c", fixture)
	plain := filepath.Join(dir, "plain")
	hooked := filepath.Join(dir, "hooked")
	benchutil.Run("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", plain, src)
	benchutil.Run("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-finstrument-functions", "-o", hooked, src)
	nopped := filepath.Join(dir, "nopped")
	benchutil.Run("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-fpatchable-function-entry=1", "-o", nopped, src)
	tinyArgs := []string{"tiny", strconv.Itoa(*tinyN)}
	coarseArgs := []string{"coarse", strconv.Itoa(*coarseN), strconv.Itoa(*coarseIt)}

	heldLoop(trueprof, dir, plain, hooked, nopped)

	// Hooks on tiny functions.
	var ref, cal, calCPU, raw, progUnder, uft []float64
	var shares []map[string]float64
	for i := 0; i < *runs; i++ {
		ref = append(ref, programTime(append([]string{plain}, tinyArgs...)))
		tr := filepath.Join(dir, "tiny.trace")
		out := benchutil.Output(append([]string{trueprof, "record", "-o", tr, "--"}, append([]string{hooked}, tinyArgs...)...)...)
		progUnder = append(progUnder, parseNS(out))
		res, _ := analyse(tr)
		f := function(res, "tiny_loop")
		cal = append(cal, f.Total.WallNS)
		calCPU = append(calCPU, onCPU(res, f.Total))
		raw = append(raw, float64(f.Total.WallNSRaw))
		shares = append(shares, selfShares(res, "tiny_loop", "tiny_loop", "tiny_a", "tiny_b"))
		if u, ok := uftraceTotal(dir, hooked, tinyArgs, "tiny_loop"); ok {
			uft = append(uft, u)
		}
	}
	cg := callgrindShares(dir, plain, tinyArgs, "tiny_loop", "tiny_loop", "tiny_a", "tiny_b")
	fmt.Printf("hooks: tiny functions, %d iterations (%d calls), %d runs, medians\n", *tinyN, 2**tinyN+1, *runs)
	fmt.Printf("  uninstrumented loop              %10.3f ms\n", medianOrNaN(ref)/1e6)
	fmt.Printf("  instrumented program (its clock) %10.3f ms  (%.1fx)\n", medianOrNaN(progUnder)/1e6, medianOrNaN(progUnder)/medianOrNaN(ref))
	fmt.Printf("  trueprof raw cum of tiny_loop    %10.3f ms  (%+.1f%%)\n", medianOrNaN(raw)/1e6, pct(medianOrNaN(raw), medianOrNaN(ref)))
	fmt.Printf("  trueprof calibrated cum (wall)   %10.3f ms  (%+.1f%%; includes time the target was descheduled)\n", medianOrNaN(cal)/1e6, pct(medianOrNaN(cal), medianOrNaN(ref)))
	fmt.Printf("  trueprof calibrated cum (on CPU) %10.3f ms  (%+.1f%%; goal within 15%%, below the resolution)\n", medianOrNaN(calCPU)/1e6, pct(medianOrNaN(calCPU), medianOrNaN(ref)))
	if len(uft) > 0 {
		fmt.Printf("  uftrace total of tiny_loop       %10.3f ms  (%+.1f%%, uncompensated)\n", medianOrNaN(uft)/1e6, pct(medianOrNaN(uft), medianOrNaN(ref)))
	} else {
		fmt.Printf("  uftrace                          not installed (apt-get install uftrace)\n")
	}
	fmt.Printf("  self shares          trueprof  callgrind (instructions)\n")
	for _, fn := range []string{"tiny_loop", "tiny_a", "tiny_b"} {
		var v []float64
		for _, s := range shares {
			v = append(v, s[fn])
		}
		fmt.Printf("    %-12s        %6.1f%%   %6.1f%%   (%+.1f points; goal within 3)\n", fn, medianOrNaN(v), cg[fn], medianOrNaN(v)-cg[fn])
	}

	// The same loop with calibration bursts in it: what is left of the
	// tiny functions once the probe cost measured in the same run, on the
	// same rings and caches, is taken out of their intervals.
	var inrun []float64
	for i := 0; i < *runs; i++ {
		tr := filepath.Join(dir, "tinycal.trace")
		benchutil.Output(trueprof, "record", "-o", tr, "--", hooked, "tinycal", strconv.Itoa(*tinyN))
		inrun = append(inrun, sameRunEstimate(tr))
	}
	fmt.Printf("  same-run calibration: tiny loop  %10.3f ms  (%+.1f%%; bursts of the calibration functions inside the loop)\n",
		medianOrNaN(inrun)/1e6, pct(medianOrNaN(inrun), medianOrNaN(ref)))

	// Uprobes on a coarse function, calibrated in the run (the bar) and
	// by the stored calibration.
	var cref, ccal, cstored, craw []float64
	var cfits []string
	for i := 0; i < *runs; i++ {
		cref = append(cref, programTime(append([]string{plain}, coarseArgs...))/float64(*coarseN))
		for _, stored := range []bool{false, true} {
			tr := filepath.Join(dir, "coarse.trace")
			argv := []string{trueprof, "record", "-o", tr, "--trace", "coarse"}
			if stored {
				argv = append(argv, "--stored-calibration")
			}
			benchutil.Output(append(append(argv, "--", plain), coarseArgs...)...)
			res, fit := analyse(tr)
			f := function(res, "coarse")
			// On CPU, as the fixture times it: a probe hit invites the
			// scheduler, and descheduled time is not the program's.
			if stored {
				cstored = append(cstored, onCPU(res, f.Total)/float64(f.Calls))
				continue
			}
			ccal = append(ccal, onCPU(res, f.Total)/float64(f.Calls))
			craw = append(craw, float64(f.Total.WallNSRaw)/float64(f.Calls))
			cfits = append(cfits, fit)
		}
	}
	fmt.Printf("\nuprobes: coarse function, %d calls, %d runs, medians\n", *coarseN, *runs)
	fmt.Printf("  uninstrumented per call (CPU)    %10.2f µs\n", medianOrNaN(cref)/1e3)
	fmt.Printf("  trueprof raw per call (wall)     %10.2f µs  (%+.1f%%)\n", medianOrNaN(craw)/1e3, pct(medianOrNaN(craw), medianOrNaN(cref)))
	fmt.Printf("  trueprof calibrated on CPU       %10.2f µs  (%+.1f%%; in-run; goal within 5%%)\n", medianOrNaN(ccal)/1e3, pct(medianOrNaN(ccal), medianOrNaN(cref)))
	fmt.Printf("  trueprof calibrated on CPU       %10.2f µs  (%+.1f%%; stored calibration)\n", medianOrNaN(cstored)/1e3, pct(medianOrNaN(cstored), medianOrNaN(cref)))
	for _, f := range cfits {
		fmt.Printf("      %s\n", f)
	}
	check("uprobes, >= 50 µs function: calibrated (on CPU) vs uninstrumented", pct(medianOrNaN(ccal), medianOrNaN(cref)), 5, "%")

	fmt.Printf("\nbars (this run)\n")
	for _, b := range bars {
		verdict := "PASS"
		if !(math.Abs(b.got) <= b.limit) {
			verdict = "FAIL"
		}
		fmt.Printf("  %-4s %-62s %+6.1f%s (within %g%s)\n", verdict, b.name, b.got, b.unit, b.limit, b.unit)
	}
}

// heldLoop measures the held-out program of 0.1-3 µs functions under
// hooks and uprobes against its uninstrumented loop, and the self shares
// against callgrind's; uftrace's raw figure beside. Uprobes record the
// plain build with in-run calibration (the bar) and with the stored one,
// and a build whose functions all begin with a nop
// (-fpatchable-function-entry=1), where every entry probe is emulated:
// the plain build's short_fn begins with a mov, which the kernel
// single-steps, so trueprof probes it at its callers (its calls, and the
// calls or epilogue they return to).
func heldLoop(trueprof, dir, plain, hooked, nopped string) {
	args := []string{"held", strconv.Itoa(*heldN)}
	fns := []string{"outer", "short_fn", "long_fn"}
	var ref, refNop []float64
	hooks := &heldRuns{}
	uprobes := map[string]*heldRuns{"in-run": {}, "stored": {}, "emulated": {}}
	uprobeArgs := []string{"--mech", "uprobe", "--trace", "held_loop", "--trace", "outer", "--trace", "short_fn", "--trace", "long_fn"}
	for range *runs {
		ref = append(ref, programTime(append([]string{plain}, args...)))
		refNop = append(refNop, programTime(append([]string{nopped}, args...)))
		hooks.record(trueprof, dir, nil, hooked, args, fns)
		uprobes["in-run"].record(trueprof, dir, uprobeArgs, plain, args, fns)
		uprobes["stored"].record(trueprof, dir, append([]string{"--stored-calibration"}, uprobeArgs...), plain, args, fns)
		uprobes["emulated"].record(trueprof, dir, uprobeArgs, nopped, args, fns)
	}
	cg := callgrindShares(dir, plain, args, "held_loop", fns...)
	r, rn := medianOrNaN(ref), medianOrNaN(refNop)
	fmt.Printf("held-out program: %d calls of outer (short_fn x2, long_fn -> short_fn), %d runs, medians\n", *heldN, *runs)
	fmt.Printf("  uninstrumented loop (CPU)        %10.3f ms (nop-entry build %.3f ms)\n", r/1e6, rn/1e6)
	if u, ok := uftraceTotal(dir, hooked, args, "held_loop"); ok {
		fmt.Printf("  uftrace total of held_loop       %10.3f ms  (%+.1f%%, uncompensated, hooks)\n", u/1e6, pct(u, r))
	}
	// Each probe hit is a point where a busy machine deschedules the
	// target: the bars use the on-CPU cum, as the tiny loop's goal does.
	hooks.print("hooks (in-run)", r, 5)
	uprobes["in-run"].print("uprobes (in-run)", r, 10)
	uprobes["stored"].print("uprobes (stored)", r, 10)
	uprobes["emulated"].print("uprobes, nop entries (in-run)", rn, 10)
	check("hooks, 0.1-3 µs functions: calibrated cum (on CPU) vs uninstrumented", pct(medianOrNaN(hooks.cpu), r), 5, "%")
	check("uprobes, 0.1-3 µs functions: calibrated cum (on CPU) vs uninstrumented", pct(medianOrNaN(uprobes["in-run"].cpu), r), 10, "%")
	fmt.Printf("  self shares          callgrind  hooks  uprobes  uprobes, nop entries\n")
	for _, fn := range fns {
		up := uprobes["in-run"].share(fn)
		fmt.Printf("    %-12s        %6.1f%%  %6.1f%%  %6.1f%%  %6.1f%%   (hooks %+.1f, uprobes %+.1f points; bar within 3)\n", fn, cg[fn],
			hooks.share(fn), up, uprobes["emulated"].share(fn), hooks.share(fn)-cg[fn], up-cg[fn])
		check("hooks, self share of "+fn+" vs callgrind", hooks.share(fn)-cg[fn], 3, " points")
		check("uprobes, self share of "+fn+" vs callgrind", up-cg[fn], 3, " points")
	}
	fmt.Println()
}

// heldRuns are the recordings of the held-out program under one set of
// options: held_loop's calibrated cum (wall and on CPU) and raw cum, and
// the functions' self shares.
type heldRuns struct {
	wall, cpu, raw []float64
	shares         []map[string]float64
	fits           []string // each recording's calibration, as its header says
}

// record records bin args with trueprof's record options opts and adds
// the run.
func (h *heldRuns) record(trueprof, dir string, opts []string, bin string, args, fns []string) {
	tr := filepath.Join(dir, "held.trace")
	argv := append(append([]string{trueprof, "record", "-o", tr}, opts...), "--", bin)
	benchutil.Output(append(argv, args...)...)
	res, cal := analyse(tr)
	f := function(res, "held_loop")
	h.wall, h.cpu, h.raw = append(h.wall, f.Total.WallNS), append(h.cpu, onCPU(res, f.Total)), append(h.raw, float64(f.Total.WallNSRaw))
	h.shares = append(h.shares, selfShares(res, "held_loop", fns...))
	h.fits = append(h.fits, cal)
}

// print prints the runs' medians against the uninstrumented loop r, with
// the bar (within limit %).
func (h *heldRuns) print(name string, r, limit float64) {
	fmt.Printf("  %-30s raw %8.3f ms (%+.1f%%), calibrated %8.3f ms (%+.1f%%), on CPU %8.3f ms (%+.1f%%; bar within %g%%)\n", name,
		medianOrNaN(h.raw)/1e6, pct(medianOrNaN(h.raw), r), medianOrNaN(h.wall)/1e6, pct(medianOrNaN(h.wall), r),
		medianOrNaN(h.cpu)/1e6, pct(medianOrNaN(h.cpu), r), limit)
	for _, f := range h.fits {
		fmt.Printf("      %s\n", f)
	}
}

// share is fn's median self share.
func (h *heldRuns) share(fn string) float64 {
	var v []float64
	for _, s := range h.shares {
		v = append(v, s[fn])
	}
	return medianOrNaN(v)
}

func pct(a, b float64) float64 { return 100 * (a - b) / b }

// sameRunEstimate is the tiny loop's time in a tinycal recording: the sum,
// over the intervals between two events of tiny_a and tiny_b, of each
// interval less the mean interval of the same transition kind between
// events of the calibration functions. Intervals with a profiler pause or
// a context switch in them, or longer than 200 ns (an interrupt), are
// left out of both.
func sameRunEstimate(path string) float64 {
	p, err := model.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	if p.Err != nil {
		log.Fatalf("%s: %v", path, p.Err)
	}
	var pauses []uint64
	for _, a := range p.Adjusts {
		pauses = append(pauses, a.Time)
	}
	for _, s := range p.Switches {
		pauses = append(pauses, s.Time)
	}
	slices.Sort(pauses)
	clean := func(t0, t1 uint64) bool {
		i, _ := slices.BinarySearch(pauses, t0)
		return i == len(pauses) || pauses[i] > t1
	}
	name := func(id uint32) string {
		fr := p.Locations[id].Frames
		return fr[len(fr)-1].Function
	}
	var calSum, calN, tinySum, tinyN [4]float64
	ev := p.Events
	for i := 1; i < len(ev); i++ {
		a, b := ev[i-1], ev[i]
		d := b.Time - a.Time
		if a.TID != b.TID || d > 200 || !clean(a.Time, b.Time) {
			continue
		}
		k := calltree.Transition(a.Entry, b.Entry)
		na, nb := name(a.Function), name(b.Function)
		switch {
		case strings.HasPrefix(na, "cal_") && strings.HasPrefix(nb, "cal_") && na != "cal_burst" && nb != "cal_burst":
			calSum[k] += float64(d)
			calN[k]++
		case strings.HasPrefix(na, "tiny_") && strings.HasPrefix(nb, "tiny_") && na != "tiny_loop_cal" && nb != "tiny_loop_cal":
			tinySum[k] += float64(d)
			tinyN[k]++
		}
	}
	est := 0.0
	for k := range tinySum {
		if tinyN[k] == 0 {
			continue
		}
		if calN[k] == 0 {
			log.Fatalf("%s: no calibration intervals of kind %s", path, calltree.TransitionName(k))
		}
		est += tinySum[k] - tinyN[k]*calSum[k]/calN[k]
	}
	return est
}

// parseNS reads the fixture's output: the loop's time in ns.
func parseNS(out string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		log.Fatalf("fixture printed %q", out)
	}
	return v
}

// programTime runs the uninstrumented fixture and returns its loop's
// time. It first waits for the teardown of the recordings before it (their
// events closed by a helper after record exits): a compute loop run
// during one took 44.7 µs a call instead of 39.3 on its own CPU clock,
// and the coarse bar read -12.6% against such references.
func programTime(argv []string) float64 {
	record.WaitTeardowns()
	return parseNS(benchutil.Output(argv...))
}

// analyse builds the calibrated call tree of the trace at path, and says
// in a line what calibration it applied and what switch cost it removed.
func analyse(path string) (*calltree.Result, string) {
	p, err := model.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	if p.Err != nil {
		log.Fatalf("%s: %v", path, p.Err)
	}
	res, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		log.Fatal(err)
	}
	line := calibrationLine(p.Header.Calibration)
	if sc := res.SwitchCost; sc != nil {
		line += fmt.Sprintf("; switches %.1f µs of CPU each over %d intervals, %.2f ms removed", sc.NS/1e3, sc.Intervals, sc.Removed/1e6)
	}
	return res, line
}

// calibrationLine sums up a calibration: where it was measured, its cost
// per call and per stepped entry, its fit's residuals, or why it was
// refused.
func calibrationLine(c *trace.Calibration) string {
	if c == nil {
		return "no calibration"
	}
	src := cmp.Or(c.Source, "stored")
	if c.Refused != "" {
		return src + ": refused: " + c.Refused
	}
	line := fmt.Sprintf("%s: %.0f ns per call", src, c.PerCall)
	if sc := c.Sites; sc != nil {
		line += fmt.Sprintf(", stepped entry %.0f ns (%.0f in the caller), RET probe %.0f ns, call-site exit %.0f ns (%.0f before it)",
			sc.EntryStepped, sc.EntrySteppedCaller, sc.ExitRetInsn, sc.ExitCallSite, sc.ExitCallSiteBefore)
	}
	var fit []string
	for _, f := range c.Fit {
		fit = append(fit, fmt.Sprintf("%s %+.1f%%", f.Name, 100*f.Error()))
	}
	return line + "; fit " + strings.Join(fit, ", ")
}

func function(res *calltree.Result, name string) calltree.Function {
	for _, f := range res.Functions {
		if f.Name == name {
			return f
		}
	}
	log.Fatalf("no function %s in the profile", name)
	return calltree.Function{}
}

// selfShares are the functions' calibrated self times as shares of the
// loop's calibrated cum: on-CPU times when the recording measured them,
// since a busy machine's descheduling lands mostly in the longest calls
// and is not the program's.
func selfShares(res *calltree.Result, root string, fns ...string) map[string]float64 {
	total := onCPU(res, function(res, root).Total)
	out := map[string]float64{}
	for _, fn := range fns {
		out[fn] = 100 * onCPU(res, function(res, fn).Self) / total
	}
	return out
}

// onCPU returns m's calibrated on-CPU time, or its calibrated wall time
// when the recording has no context switch records: then the target was
// never descheduled, and the analysis leaves CPUNS at 0 (a recording of
// a few ms on a quiet CPU: the coarse bar read -100% in 2 of 3 runs).
func onCPU(res *calltree.Result, m calltree.Metrics) float64 {
	if res.CPUMeasured {
		return m.CPUNS
	}
	return m.WallNS
}

var annotateLine = regexp.MustCompile(`^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+\S*:(\S+)`)

// callgrindShares are the functions' self instruction counts as shares of
// the loop's inclusive count, from callgrind on the plain build.
func callgrindShares(dir, bin string, args []string, root string, fns ...string) map[string]float64 {
	out := filepath.Join(dir, "callgrind.out")
	benchutil.Run(append([]string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, bin}, args...)...)
	self := annotate(out, false)
	incl := annotate(out, true)
	shares := map[string]float64{}
	for _, fn := range fns {
		shares[fn] = 100 * self[fn] / incl[root]
	}
	return shares
}

func annotate(out string, inclusive bool) map[string]float64 {
	text := benchutil.Output("callgrind_annotate", "--inclusive="+map[bool]string{true: "yes", false: "no"}[inclusive], out)
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if g := annotateLine.FindStringSubmatch(sc.Text()); g != nil {
			v, _ := strconv.ParseFloat(strings.ReplaceAll(g[1], ",", ""), 64)
			name := strings.TrimSuffix(g[2], "'2")
			m[name] += v
		}
	}
	return m
}

// uftraceTotal records the hooked build with uftrace and returns its
// total time of fn (uftrace reports raw, uncompensated times).
func uftraceTotal(dir, bin string, args []string, fn string) (float64, bool) {
	if _, err := exec.LookPath("uftrace"); err != nil {
		return 0, false
	}
	d := filepath.Join(dir, "uftrace.data")
	os.RemoveAll(d)
	if err := exec.Command("uftrace", append([]string{"record", "-d", d, bin}, args...)...).Run(); err != nil {
		return 0, false
	}
	out, err := exec.Command("uftrace", "report", "-d", d, "-f", "total,self,call").Output()
	if err != nil {
		return 0, false
	}
	total := regexp.MustCompile(`^\s*([\d.]+)\s+(ns|us|ms|s)\s+[\d.]+\s+(?:ns|us|ms|s)\s+\d+\s+` + regexp.QuoteMeta(fn) + `\s*$`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if g := total.FindStringSubmatch(sc.Text()); g != nil {
			v, _ := strconv.ParseFloat(g[1], 64)
			return v * map[string]float64{"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[g[2]], true
		}
	}
	return 0, false
}

// medianOrNaN is the median, or NaN when a tool was not measured.
func medianOrNaN(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return calfit.Median(v)
}
