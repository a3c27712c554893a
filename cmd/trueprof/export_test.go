package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// TestExportHookRecording records testutil.CallsC built with
// -finstrument-functions (main calls mid n times, mid calls leaf twice)
// and holds the exports of the recording to the program and to trueprof's
// flat report: go tool pprof -top -sample_index=calls shows the exact
// calls (1, n, 2n), -sample_index=wall the flat report's calibrated self
// (flat) and total (cum) of each function, and the folded stacks the same
// self values per call path.
func TestExportHookRecording(t *testing.T) {
	testutil.RequirePerf(t)
	const mids = 20000
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	tr := filepath.Join(dir, "calls.trace")
	if out, err := exec.Command(trueprof(), "record", "-o", tr, "--", bin, strconv.Itoa(mids)).CombinedOutput(); err != nil {
		t.Fatalf("record: %v\n%s", err, out)
	}
	flat := reportInstrFlat(t, tr)
	pb := filepath.Join(dir, "calls.pb.gz")
	if out, err := exec.Command(trueprof(), "export", "-i", tr, "-o", pb).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	// name -> flat, cum of each sample type, as go tool pprof prints them.
	top := map[string]map[string][2]float64{}
	for _, index := range []string{"calls", "wall", "wall_raw"} {
		top[index] = map[string][2]float64{}
		for _, row := range pprofRows(t, pb, "-sample_index="+index, "-unit=ns") {
			f := strings.Fields(row)
			flatV, err1 := strconv.ParseFloat(strings.TrimSuffix(f[0], "ns"), 64)
			cumV, err2 := strconv.ParseFloat(strings.TrimSuffix(f[3], "ns"), 64)
			if len(f) != 6 || err1 != nil || err2 != nil {
				t.Fatalf("go tool pprof -sample_index=%s row %q", index, row)
			}
			top[index][f[5]] = [2]float64{flatV, cumV}
		}
	}
	wantCalls := map[string]float64{"main": 1, "mid": mids, "leaf": 2 * mids}
	for name, calls := range wantCalls {
		if got := top["calls"][name][0]; got != calls {
			t.Errorf("go tool pprof -sample_index=calls: %s %v calls, the program made %v", name, got, calls)
		}
	}
	for _, fn := range flat.Functions {
		if fn.Calls == 0 {
			continue // known from samples only: no calls, no time
		}
		if got := top["calls"][fn.Name][0]; got != float64(fn.Calls) {
			t.Errorf("%s: pprof %v calls, report %d", fn.Name, got, fn.Calls)
		}
		// One call path per function here: the export rounds its self to
		// whole ns.
		if got := top["wall"][fn.Name]; math.Abs(got[0]-fn.Self.WallNS) > 1 || math.Abs(got[1]-fn.Total.WallNS) > 3 {
			t.Errorf("%s: pprof wall flat %v cum %v, report self %v total %v", fn.Name, got[0], got[1], fn.Self.WallNS, fn.Total.WallNS)
		}
	}
	// mid and leaf take a few ns a call, below the calibration's
	// resolution: their calibrated wall may be 0 in the report and in
	// the export alike (so pprof lists no row), but never their raw one.
	if len(top["wall_raw"]) == 0 || flat.Total.WallNSRaw == 0 {
		t.Fatalf("no raw wall time: pprof %v, report %v", top["wall_raw"], flat.Total)
	}
	for _, fn := range flat.Functions {
		if got := top["wall_raw"][fn.Name]; fn.Calls > 0 && (got[0] != float64(fn.Self.WallNSRaw) || got[1] != float64(fn.Total.WallNSRaw)) {
			t.Errorf("%s: pprof wall_raw flat %v cum %v, report self %v total %v", fn.Name, got[0], got[1], fn.Self.WallNSRaw, fn.Total.WallNSRaw)
		}
	}

	folded := filepath.Join(dir, "calls.folded")
	for _, value := range []string{"wall", "calls"} {
		if out, err := exec.Command(trueprof(), "export", "-i", tr, "--format", "folded", "--value", value, "-o", folded).CombinedOutput(); err != nil {
			t.Fatalf("export folded: %v\n%s", err, out)
		}
		b, err := os.ReadFile(folded)
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]float64{}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			stack, n, ok := strings.Cut(l, " ")
			v, err := strconv.ParseFloat(n, 64)
			if !ok || err != nil {
				t.Fatalf("folded line %q: want flamegraph.pl's a;b;c N", l)
			}
			lines[stack] = v
		}
		for stack, fn := range map[string]string{"calls;main": "main", "calls;main;mid": "mid", "calls;main;mid;leaf": "leaf"} {
			if got, want := lines[stack], top[value][fn][0]; got != want {
				t.Errorf("folded --value %s: %s %v, go tool pprof's flat of %s %v", value, stack, got, fn, want)
			}
		}
	}
	if out, err := exec.Command(trueprof(), "export", "-i", tr, "--value", "calls", "-o", pb).CombinedOutput(); err == nil || !strings.Contains(string(out), "--value") {
		t.Errorf("export --format pprof --value: %v\n%s", err, out)
	}
}
