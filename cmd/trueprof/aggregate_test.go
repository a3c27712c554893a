package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// mapsProgram fills a map[string]int: the runtime's map code is mostly
// inlined into runtime.mapassign_faststr, whose self share therefore
// depends on --no-inlines.
const mapsProgram = `package main

import (
	"fmt"
	"strconv"
)

func main() {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i*7919)
	}
	total := 0
	for round := 0; round < 40; round++ {
		m := map[string]int{}
		for i, k := range keys {
			m[k] = i + round
		}
		total += len(m)
	}
	fmt.Println(total)
}
`

// pprofRows runs go tool pprof -top with options on file and returns its
// table rows: flat, flat%, sum%, cum, cum% and the name, as printed.
func pprofRows(t *testing.T, file string, options ...string) []string {
	t.Helper()
	args := append([]string{"tool", "pprof", "-top", "-nodecount=1000", "-nodefraction=0", "-sample_index=samples"}, options...)
	out, err := exec.Command("go", append(args, file)...).Output()
	if err != nil {
		t.Fatalf("go tool pprof %v: %v", options, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") {
			return lines[i+1:]
		}
	}
	t.Fatalf("no table in go tool pprof's output:\n%s", out)
	return nil
}

// flatReport is what the command tests read of the flat view's JSON.
type flatReport struct {
	Total     map[string]uint64 `json:"total"`
	NoInlines bool              `json:"no_inlines"`
	Functions []struct {
		Name string            `json:"name"`
		Self map[string]uint64 `json:"self"`
	} `json:"functions"`
}

// reportFlat runs trueprof report --view flat --format json with args and
// decodes its output, which must list functions.
func reportFlat(t *testing.T, args ...string) flatReport {
	t.Helper()
	out, err := exec.Command(trueprof(), append([]string{"report", "--view", "flat", "--format", "json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("report %v: %v", args, err)
	}
	var flat flatReport
	if err := json.Unmarshal(out, &flat); err != nil || len(flat.Functions) == 0 {
		t.Fatalf("flat JSON: %v", err)
	}
	return flat
}

// TestNoInlinesGoProgram records a real Go program and checks --no-inlines
// end to end: the export under --no-inlines shows what go tool pprof
// -noinlines shows on the default export (every row), and the flat report
// under --no-inlines agrees with it on the top function.
func TestNoInlinesGoProgram(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := testutil.BuildGo(t, dir, "mapfill", mapsProgram)
	tr := filepath.Join(dir, "maps.trace")
	if out, err := exec.Command(trueprof(), "record", "--no-goroutines", "-o", tr, "--", bin).CombinedOutput(); err != nil {
		t.Fatalf("record: %v\n%s", err, out)
	}
	def, noInl := filepath.Join(dir, "default.pb.gz"), filepath.Join(dir, "no-inlines.pb.gz")
	for _, args := range [][]string{{"-o", def}, {"--no-inlines", "-o", noInl}} {
		if out, err := exec.Command(trueprof(), append([]string{"export", "-i", tr}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("export %v: %v\n%s", args, err, out)
		}
	}
	want := pprofRows(t, def, "-noinlines")
	got := pprofRows(t, noInl)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("export --no-inlines, go tool pprof -top:\n%s\nwant go tool pprof -noinlines -top of the default export:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(pprofRows(t, def), "\n") == strings.Join(want, "\n") {
		t.Error("-noinlines changed nothing: the program has no inlined code in its samples")
	}

	flat := reportFlat(t, "-i", tr, "--no-inlines")
	if !flat.NoInlines {
		t.Error("the JSON header does not say no_inlines")
	}
	top := strings.Fields(want[0])
	if name := strings.Join(top[5:], " "); flat.Functions[0].Name != name {
		t.Errorf("flat --no-inlines top function %s, go tool pprof -noinlines %s", flat.Functions[0].Name, name)
	}
	text, err := exec.Command(trueprof(), "report", "-i", tr, "--no-inlines").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "Grouping:   each entry a function; inlined code charged to the function it was inlined into") {
		t.Errorf("the text header does not say how code was grouped:\n%.600s", text)
	}
	// The example: perf charges the inlined ctrlGroup.matchH2 to
	// runtime.mapassign_faststr; so must --no-inlines, when the default
	// shows it (it is inlined in every Go release since maps moved to
	// internal/runtime/maps, 1.24).
	defText, err := exec.Command(trueprof(), "report", "-i", tr).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(defText), "ctrlGroup.matchH2") {
		t.Logf("the default report does not show ctrlGroup.matchH2 (another Go release?):\n%.1500s", defText)
	} else if strings.Contains(string(text), "ctrlGroup.matchH2") {
		t.Errorf("the inlined ctrlGroup.matchH2 is an entry under --no-inlines:\n%s", text)
	}
}

// TestGranularityFlag: every command that reads a trace refuses a bad
// --granularity with the valid values, before reading the trace.
func TestGranularityFlag(t *testing.T) {
	for _, cmd := range [][]string{{"report"}, {"export", "-o", "-"}, {"serve"}} {
		args := append(cmd, "-i", "/nonexistent.trace", "--granularity", "bytes")
		out, err := exec.Command(trueprof(), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `unknown granularity "bytes": want functions, files, lines or addresses`) {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
}
