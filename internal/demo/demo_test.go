package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/record"
	"trueprof/internal/testutil"
)

// TestMain lets the test binary serve as the exec wrapper, as the
// trueprof binary does.
func TestMain(m *testing.M) {
	record.RunWrapper()
	os.Exit(m.Run())
}

// TestDemoCountsEveryCall runs the demo on a machine without a stored
// calibration (its first run) and checks the instrumented recording
// against the example's design: main calls process_batch once a round,
// which calls parse and checksum once each; the worker thread calls
// transform rounds/2 times; mix is built without hooks.
func TestDemoCountsEveryCall(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireCommand(t, "gcc")
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // no calibration yet
	dir := t.TempDir()
	const rounds = 101 // odd: the worker's rounds/2 rounds down
	var out bytes.Buffer
	if err := Run(context.Background(), &out, Options{Dir: dir, Rounds: rounds}); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()

	p, err := model.Open(filepath.Join(dir, HooksTrace))
	if err != nil {
		t.Fatal(err)
	}
	if p.Err != nil {
		t.Fatal(p.Err)
	}
	res, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"main": 1, "process_batch": rounds, "parse": rounds, "checksum": rounds, "worker": 1, "transform": rounds / 2}
	got := map[string]uint64{}
	for _, f := range res.Functions {
		got[f.Name] = f.Calls
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d calls, want %d", name, got[name], n)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s traced (%d calls): only the example's functions but mix have hooks", name, got[name])
		}
	}
	if r := res.Repairs; res.Dropped != 0 || r.Popped != 0 || r.Unmatched != 0 || r.Unclosed != 0 {
		t.Errorf("dropped %d events, repairs %+v: the example's calls all return", res.Dropped, r)
	}

	// The recording calibrated itself (no stored calibration was
	// measured or needed) and the calibration was applied: calibrated
	// times are below the raw ones by what it removed. A refused fit
	// subtracts nothing and says so.
	c := res.Calibration
	if c == nil || c.Mechanism != "hook" || c.Source != "in-run" || c.Bursts < 1 || c.Bursts > 2 {
		t.Fatalf("calibration %+v, want the hooks' in-run one from one burst, or two when the first was not steady", c)
	}
	if _, err := os.Stat(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "trueprof", "calibration-"+runtime.GOARCH+".json")); err == nil {
		t.Error("the demo stored a calibration: it needs none")
	}
	tot := res.Total
	switch {
	case c.Refused != "":
		t.Logf("the machine was too busy for a good fit: %s", c.Refused)
		if c.PerCall != 0 || !strings.Contains(text, "calibration was refused, shape ") {
			t.Errorf("refused calibration %+v not shown as such:\n%s", c, text)
		}
	case c.PerCall <= 0 || c.Overhead[0] <= 0 || c.Overhead[1] <= 0:
		t.Errorf("calibration %+v: a fit that is not refused has positive overheads", c)
	case !(tot.DeltaNS > 0 && tot.WallNS < float64(tot.WallNSRaw)):
		t.Errorf("total wall %.0f ns calibrated, %d ns raw, delta %.0f ns: calibration removed nothing", tot.WallNS, tot.WallNSRaw, tot.DeltaNS)
	}

	// Both reports of the instrumented recording were printed, after the
	// sampling ones, and the sampled recording has samples.
	for _, s := range []string{"--view tprof", "--view threads", HooksTrace + " --view tree", HooksTrace + " --view flat", "DELTA", "MIN/CALL"} {
		if !strings.Contains(text, s) {
			t.Errorf("output lacks %q:\n%s", s, text)
		}
	}
	if i, j := strings.Index(text, "--view threads"), strings.Index(text, HooksTrace+" --view tree"); i > j {
		t.Errorf("the instrumented reports come before the sampling ones")
	}
	sp, err := model.Open(filepath.Join(dir, SamplingTrace))
	if err != nil {
		t.Fatal(err)
	}
	if len(sp.Samples) == 0 {
		t.Error("the sampled recording has no samples")
	}
}

// TestDemoRefusesNegativeRounds: bad input is an error before anything
// is built.
func TestDemoRefusesNegativeRounds(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := Run(context.Background(), &out, Options{Dir: dir, Rounds: -3}); err == nil || !strings.Contains(err.Error(), "rounds -3") {
		t.Errorf("rounds -3: error %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q before refusing", out.String())
	}
}

// TestComment wraps a sentence into comment lines.
func TestComment(t *testing.T) {
	long := strings.Repeat("word ", 30) // 150 columns
	got := comment(long)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), got)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "# word") || len(l) > 100 {
			t.Errorf("line %q: want a comment of words of at most 100 columns", l)
		}
	}
	if n := strings.Count(got, "word"); n != 30 {
		t.Errorf("%d words, want 30", n)
	}
}
