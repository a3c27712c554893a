package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// TestFilterMatchesNothing: a report or export filter that keeps nothing
// of the trace is an error naming what the trace has, for every view and
// format, streamed or loaded (--label), and writes no file; an empty
// report would look like an idle program.
func TestFilterMatchesNothing(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.trace")
	if out, err := exec.Command(trueprof(), "record", "-o", tr, "--", hotspots(t), "200").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, filter := range []struct {
		args []string
		says string
	}{
		{[]string{"--thread", "nomatch*"}, `no thread of the trace matches thread "nomatch*"; threads: hotspots (pid `},
		{[]string{"--pid", "1"}, "no thread of the trace matches pid 1; threads: hotspots (pid "},
		{[]string{"--tid", "1"}, "no thread of the trace matches tid 1; threads: "},
		{[]string{"--label", "tenant=acme"}, `no goroutine of the trace carries label "tenant=acme"; labels carried: none`},
	} {
		var runs [][]string
		for _, view := range []string{"tprof", "flat", "tree", "arcflow", "callflow", "threads"} {
			for _, format := range []string{"text", "json", "html"} {
				runs = append(runs, []string{"report", "--view", view, "--format", format})
			}
		}
		runs = append(runs, []string{"export", "--format", "pprof"}, []string{"export", "--format", "folded"})
		for _, run := range runs {
			file := filepath.Join(dir, "out")
			args := append(append(run, "-i", tr, "-o", file), filter.args...)
			out, err := exec.Command(trueprof(), args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), filter.says) {
				t.Errorf("%v: %v, want an error saying %q:\n%s", args, err, filter.says, out)
			}
			if _, err := os.Stat(file); err == nil {
				t.Errorf("%v wrote a file", args)
				os.Remove(file)
			}
		}
	}
	// A filter that keeps something still reports.
	if out, err := exec.Command(trueprof(), "report", "-i", tr, "--thread", "hotspots").CombinedOutput(); err != nil {
		t.Errorf("--thread hotspots: %v\n%s", err, out)
	}
}

// TestRecordScript: probing a #! script is an error naming it and its
// interpreter; sampling it works.
func TestRecordScript(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "s.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ni=0; while [ $i -lt 20000 ]; do i=$((i+1)); done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(trueprof(), "record", "-o", filepath.Join(dir, "p.trace"), "--trace", "main", "--", script).CombinedOutput()
	if err == nil || !strings.Contains(string(out), script+": not an ELF executable: a script run by /bin/sh;") {
		t.Errorf("--trace on a script: %v\n%s", err, out)
	}
	tr := filepath.Join(dir, "s.trace")
	if out, err := exec.Command(trueprof(), "record", "-o", tr, "--", script).CombinedOutput(); err != nil {
		t.Fatalf("sampling a script: %v\n%s", err, out)
	}
	if out, err := exec.Command(trueprof(), "report", "-i", tr, "--thread", "s.sh").CombinedOutput(); err != nil {
		t.Errorf("report of the script's thread: %v\n%s", err, out)
	}
}
