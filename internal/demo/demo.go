// Package demo runs trueprof's main job on the bundled example: it builds
// examples/hotspots with gcc, records it, and prints the reports, so a new
// user sees real output with one command.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"trueprof/examples"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
	"trueprof/internal/report"
	"trueprof/internal/trace"
)

// Options configures the demo.
type Options struct {
	Dir    string // where to build the example and write the trace; a temporary directory if empty
	Rounds int    // work rounds of the example (about 1 ms each)
}

// Run builds, records and reports the example, writing to w.
func Run(ctx context.Context, w io.Writer, o Options) error {
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
	bin := filepath.Join(dir, "hotspots")
	if err := os.WriteFile(src, []byte(examples.Hotspots), 0o644); err != nil {
		return err
	}
	args := []string{"-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-inline", "-pthread", "-o", bin, src}
	fmt.Fprintf(w, "$ gcc %s\n", strings.Join(args, " "))
	if out, err := exec.CommandContext(ctx, "gcc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("building the example (gcc is required): %w\n%s", err, out)
	}
	rounds := o.Rounds
	if rounds == 0 {
		rounds = 1500
	}
	tracePath := filepath.Join(dir, "trueprof.trace")
	cmd := []string{bin, fmt.Sprint(rounds)}
	fmt.Fprintf(w, "$ trueprof record -o %s -- %s\n", tracePath, strings.Join(cmd, " "))
	ev, err := perf.ParseEvent("cpu-clock")
	if err != nil {
		return err
	}
	res, err := record.Run(ctx, record.Config{
		Output: tracePath, Event: ev, Freq: 999, Mode: trace.ModeNormal, SizeLimit: 256 << 20, Command: cmd, Log: w,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "trueprof: %d samples, %d lost, %d bytes written to %s\n", res.Samples, res.Lost, res.Bytes, tracePath)
	p, err := model.Open(tracePath)
	if err != nil {
		return err
	}
	for _, view := range []string{"tprof", "flat", "tree", "threads"} {
		fmt.Fprintf(w, "\n$ trueprof report -i %s --view %s\n", tracePath, view)
		if err := report.Write(w, p, report.Options{View: view, Format: "text"}); err != nil {
			return err
		}
	}
	if o.Dir != "" {
		fmt.Fprintf(w, "\nTo look rather than read: trueprof serve -i %s (or report --format html -o report.html)\n", tracePath)
	} else {
		fmt.Fprintf(w, "\nTo keep the trace and look at it in a browser: trueprof demo --dir DIR, then trueprof serve -i DIR/trueprof.trace\n")
	}
	return nil
}
