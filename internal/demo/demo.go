// Package demo runs trueprof's main jobs on the bundled example, so a new
// user sees real output with one command. It builds examples/hotspots
// with gcc, samples it and prints the sampling reports; then it builds
// the same example with -finstrument-functions, traces it with the
// compiled-in hooks (calibrated in the run, as record does) and
// prints exact call counts with calibrated and raw times.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"trueprof/examples"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
	"trueprof/internal/report"
	"trueprof/internal/trace"
)

// Options configures the demo.
type Options struct {
	Dir    string // where to build the example and write the traces; a temporary directory if empty
	Rounds int    // work rounds of the example (about 1 ms each); 0 means 1500
}

// Files the demo writes in Options.Dir.
const (
	SamplingTrace = "trueprof.trace" // the sampled recording
	HooksTrace    = "hooks.trace"    // the instrumented recording of the hooks build
)

// buildFlags are gcc's flags for the example: frame pointers everywhere
// for complete call chains, and no inlining so that each of its
// functions is one.
var buildFlags = []string{"-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-inline", "-pthread"}

// hookFlags make the hooks build. mix is left out: checksum and
// transform call it 200,000 times a batch, a few nanoseconds each,
// which is what sampling is for (docs/calibration.md, "Tiny functions
// have no separable time"); tracing it would cost more than the
// recording it is part of.
var hookFlags = []string{"-finstrument-functions", "-finstrument-functions-exclude-function-list=mix"}

// Run builds, records and reports the example, writing to w.
func Run(ctx context.Context, w io.Writer, o Options) error {
	rounds := o.Rounds
	if rounds == 0 {
		rounds = 1500
	}
	if rounds < 0 {
		return fmt.Errorf("rounds %d: want a positive number", rounds)
	}
	w = &lockedWriter{w: w}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "trueprof-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src := filepath.Join(dir, "hotspots.c")
	if err := os.WriteFile(src, []byte(examples.Hotspots), 0o644); err != nil {
		return err
	}
	if err := sampling(ctx, w, src, dir, rounds); err != nil {
		return err
	}
	if err := hooks(ctx, w, src, dir, rounds); err != nil {
		return err
	}
	samples, instrumented := filepath.Join(dir, SamplingTrace), filepath.Join(dir, HooksTrace)
	if o.Dir != "" {
		fmt.Fprintf(w, "\nTo look rather than read: trueprof serve -i %s (or -i %s; or report --format html -o report.html)\n", samples, instrumented)
	} else {
		fmt.Fprintf(w, "\nTo keep the traces and look at them in a browser: trueprof demo --dir DIR, then trueprof serve -i DIR/%s (or DIR/%s)\n", SamplingTrace, HooksTrace)
	}
	return nil
}

// sampling builds the example plainly, samples it and prints the
// sampling reports.
func sampling(ctx context.Context, w io.Writer, src, dir string, rounds int) error {
	bin := filepath.Join(dir, "hotspots")
	if err := build(ctx, w, src, bin); err != nil {
		return err
	}
	ev, err := perf.ParseEvent("cpu-clock")
	if err != nil {
		return err
	}
	tracePath := filepath.Join(dir, SamplingTrace)
	res, p, err := recordExample(ctx, w, record.Config{Output: tracePath, Command: []string{bin, fmt.Sprint(rounds)}, Event: ev, Freq: 999})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "trueprof: %d samples, %d lost, %d bytes written to %s\n", res.Samples, res.Lost, res.Bytes, tracePath)
	return show(w, p, tracePath, []view{
		{"tprof", "Where the samples fell, by process, thread, module and symbol: the main thread in mix, parse and checksum, the worker thread in mix and transform."},
		{"flat", "Per function, its own samples (SELF) and those with it anywhere on the stack (TOTAL): mix, called by checksum and by transform, is the hottest."},
		{"tree", "The same samples as one call tree per thread, which splits mix's time by caller; CALLS is '-': sampling cannot count calls."},
		{"threads", "Each thread's life: wall and CPU time, dispatches, migrations, page faults and interrupts, measured per thread."},
	})
}

// hooks builds the example with -finstrument-functions, traces it with
// trueprof's hook library and prints the instrumented reports.
func hooks(ctx context.Context, w io.Writer, src, dir string, rounds int) error {
	fmt.Fprintf(w, "\n%s", comment("Sampling estimates shares but cannot count calls, and a tracer's raw times include its probes. "+
		"Now the same example built with -finstrument-functions, traced by trueprof's compiled-in hooks, whose cost is measured "+
		"in the same run (calibration bursts in the process at its start and end) and removed. mix is not instrumented (see the gcc flags): its 200,000 calls a batch "+
		"of a few ns each are for sampling, and its time is in its callers' self time."))
	bin := filepath.Join(dir, "hotspots-hooks")
	if err := build(ctx, w, src, bin, hookFlags...); err != nil {
		return err
	}
	tracePath := filepath.Join(dir, HooksTrace)
	// As `trueprof record` does for a -finstrument-functions build: the
	// hooks, no sampling, and calibration bursts in the run itself.
	res, p, err := recordExample(ctx, w, record.Config{
		Output: tracePath, Command: []string{bin, fmt.Sprint(rounds)}, Mech: "hook", NoSampling: true,
		CalibrateInRun: true,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "trueprof: %d events, %d lost, %d bytes written to %s\n", res.Events, res.Lost, res.Bytes, tracePath)
	perCall := ""
	if c := p.Header.Calibration; c != nil && c.Refused != "" {
		perCall = fmt.Sprintf(" (here nothing: this run's calibration was refused, %s)", c.Refused)
	} else if c != nil {
		perCall = fmt.Sprintf(" (%.1f ns a call, measured in this run)", c.PerCall)
	}
	return show(w, p, tracePath, []view{
		{"tree", fmt.Sprintf("Exact calls (CALLS) and calls made (CEE): main called process_batch %d times, which called parse and checksum once each, "+
			"and the worker called transform %d times; BASE is self time less the probes' cost%s, and DELTA what that removed: raw = BASE + DELTA.",
			rounds, rounds/2, perCall)},
		{"flat", "Per function, exact CALLS and calibrated SELF and TOTAL time, with the fastest and slowest single call (MIN/CALL, MAX/CALL), which sampling cannot measure."},
	})
}

// recordExample records cfg's command into cfg.Output, showing the
// command line that does the same, and opens the trace.
func recordExample(ctx context.Context, w io.Writer, cfg record.Config) (*record.Result, *model.Profile, error) {
	cfg.Mode, cfg.SizeLimit, cfg.Log, cfg.Stdout = trace.ModeNormal, 256<<20, w, w
	fmt.Fprintf(w, "$ trueprof record -o %s -- %s\n", cfg.Output, strings.Join(cfg.Command, " "))
	res, err := record.Run(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	p, err := model.Open(cfg.Output)
	if err != nil {
		return nil, nil, err
	}
	return res, p, nil
}

// build compiles the example's source into bin with buildFlags and
// extra, showing the command.
func build(ctx context.Context, w io.Writer, src, bin string, extra ...string) error {
	args := append(append(append([]string{}, buildFlags...), extra...), "-o", bin, src)
	fmt.Fprintf(w, "$ gcc %s\n", strings.Join(args, " "))
	if out, err := exec.CommandContext(ctx, "gcc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("building the example (gcc is required): %w\n%s", err, out)
	}
	return nil
}

// view is a report to show and a sentence that says what the reader
// sees in it.
type view struct{ name, says string }

// show prints text reports of p.
func show(w io.Writer, p *model.Profile, tracePath string, views []view) error {
	for _, v := range views {
		fmt.Fprintf(w, "\n%s$ trueprof report -i %s --view %s\n", comment(v.says), tracePath, v.name)
		if err := report.Write(w, p, report.Options{View: v.name, Format: "text"}); err != nil {
			return err
		}
	}
	return nil
}

// comment formats text as shell comment lines of at most about 100
// columns, like the commands it explains.
func comment(text string) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		if n > 0 && n+1+len(word) > 100 {
			b.WriteString("\n")
			n = 0
		}
		if n == 0 {
			b.WriteString("#")
			n = 1
		}
		b.WriteString(" " + word)
		n += 1 + len(word)
	}
	b.WriteString("\n")
	return b.String()
}

// lockedWriter serialises writes to the demo's output, to which the
// recorder and the demo write their lines while another goroutine copies
// the target's standard output. It also hides the writer's ReadFrom: a
// bytes.Buffer's holds on to the buffer while it waits for the target,
// then overwrites what was written meanwhile.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
