package export

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/testutil"

	"github.com/google/pprof/profile"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// flatRow is one function's numbers.
type flatRow struct{ self, total uint64 }

// reportJSON writes trueprof's report o of p, in JSON, into v.
func reportJSON(t *testing.T, p *model.Profile, o report.Options, v any) {
	t.Helper()
	var buf bytes.Buffer
	if err := report.Write(&buf, p, o); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		t.Fatal(err)
	}
}

// trueprofFlat runs trueprof's flat report and keys its rows the way the
// pprof export names functions: a name that several modules define is
// qualified with the module.
func trueprofFlat(t *testing.T, p *model.Profile, f model.Filter) (rows map[string]flatRow, total uint64) {
	t.Helper()
	var r report.FlatReport
	reportJSON(t, p, report.Options{View: "flat", Format: "json", Filter: f}, &r)
	names := names{}
	for _, fn := range r.Functions {
		names.add(calltree.Func{Name: fn.Name, Module: fn.Module})
	}
	rows = map[string]flatRow{}
	for _, fn := range r.Functions {
		rows[names.export(calltree.Func{Name: fn.Name, Module: fn.Module})] = flatRow{fn.Self.Samples, fn.Total.Samples}
	}
	return rows, r.Total.Samples
}

// topRow matches a row of `go tool pprof -top`: flat flat% sum% cum cum%
// name, and the "(inline)" note pprof appends to inlined functions. The
// values may carry the unit "ns" (-unit=ns) and the percentages an
// exponent (3.3e-06%).
var topRow = regexp.MustCompile(`^\s*(\d+)(?:ns)?\s+[\d.e+-]+%\s+[\d.e+-]+%\s+(\d+)(?:ns)?\s+[\d.e+-]+%\s+(.*?)(?: \((?:partial-)?inline\))?$`)

// pprofTop runs `go tool pprof -top` with options on a profile file and
// returns its rows. -nodefraction=0 keeps pprof from dropping small
// functions.
func pprofTop(t *testing.T, file string, options ...string) map[string]flatRow {
	t.Helper()
	goBin := testutil.RequireCommand(t, "go")
	args := append([]string{"tool", "pprof", "-top", "-nodecount=1000", "-nodefraction=0"}, options...)
	cmd := exec.Command(goBin, append(args, file)...)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	rows := map[string]flatRow{}
	lines := strings.Split(string(out), "\n")
	header := -1
	for i, l := range lines {
		if strings.Contains(l, "flat%") && strings.Contains(l, "cum%") {
			header = i
			break
		}
	}
	if header < 0 {
		t.Fatalf("no table in pprof's output:\n%s", out)
	}
	for _, l := range lines[header+1:] {
		if l == "" {
			continue
		}
		m := topRow.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected pprof line %q in:\n%s", l, out)
		}
		flat, _ := strconv.ParseUint(m[1], 10, 64)
		cum, _ := strconv.ParseUint(m[2], 10, 64)
		if _, dup := rows[m[3]]; dup {
			t.Errorf("pprof shows %q twice", m[3])
		}
		rows[m[3]] = flatRow{flat, cum}
	}
	return rows
}

// TestPPROFMatchesFlat is the oracle: `go tool pprof -top` on the export
// must show the numbers of trueprof's flat report, function by function.
func TestPPROFMatchesFlat(t *testing.T) {
	tests := []struct {
		name string
		f    model.Filter
	}{
		{"all", model.Filter{}},
		{"pid 100", model.Filter{PID: 100, HasPID: true}},
		{"tid 101", model.Filter{TID: 101, HasTID: true}},
		{"pid 200", model.Filter{PID: 200, HasPID: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := modeltest.Fixture()
			file := filepath.Join(t.TempDir(), "profile.pb.gz")
			var buf bytes.Buffer
			if err := PPROF(&buf, p, tt.f); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			want, total := trueprofFlat(t, p, tt.f)
			got := pprofTop(t, file)
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					t.Errorf("%s: missing from pprof -top", name)
					continue
				}
				if g != w {
					t.Errorf("%s: pprof flat %d cum %d, trueprof self %d total %d", name, g.self, g.total, w.self, w.total)
				}
			}
			var sum uint64
			for name, g := range got {
				sum += g.self
				if _, ok := want[name]; !ok {
					t.Errorf("%s: in pprof -top only", name)
				}
			}
			if sum != total {
				t.Errorf("pprof flat adds up to %d, want %d", sum, total)
			}
		})
	}
}

// TestPPROFMatchesFlatRandom runs the oracle on random profiles, where
// names are shared by modules, recursion and inlining are everywhere.
func TestPPROFMatchesFlatRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 8 {
		p := modeltest.RandomSamples(r)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			file := pprofFile(t, p)
			want, _ := trueprofFlat(t, p, model.Filter{})
			got := pprofTop(t, file)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("pprof -top %v\ntrueprof flat %v", got, want)
			}
		})
	}
}

// pprofFile exports p to a pprof file in a temporary directory and
// returns its path.
func pprofFile(t *testing.T, p *model.Profile) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "profile.pb.gz")
	var buf bytes.Buffer
	if err := PPROF(&buf, p, model.Filter{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// roundTrip exports p to pprof and parses the export back.
func roundTrip(t *testing.T, p *model.Profile) *profile.Profile {
	t.Helper()
	var buf bytes.Buffer
	if err := PPROF(&buf, p, model.Filter{}); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return prof
}

// TestPPROFRoundTrip parses the export back and checks what pprof's
// reports do not show: types, period, times, labels, inline order.
func TestPPROFRoundTrip(t *testing.T) {
	p := modeltest.Fixture()
	prof := roundTrip(t, p)
	types := fmt.Sprint(prof.SampleType[0].Type, "/", prof.SampleType[0].Unit, " ", prof.SampleType[1].Type, "/", prof.SampleType[1].Unit)
	if types != "samples/count cpu/nanoseconds" {
		t.Errorf("sample types %s", types)
	}
	if prof.DefaultSampleType != "samples" {
		t.Errorf("default sample type %q", prof.DefaultSampleType)
	}
	if prof.PeriodType.Type != "cpu" || prof.Period != 1_000_000 {
		t.Errorf("period %d %s", prof.Period, prof.PeriodType.Type)
	}
	if want := p.Header.StartTime.UnixNano(); prof.TimeNanos != want {
		t.Errorf("TimeNanos %d, want %d", prof.TimeNanos, want)
	}
	if prof.DurationNanos != 101_000_000 {
		t.Errorf("DurationNanos %d, want 101ms (first to last sample)", prof.DurationNanos)
	}
	if prof.Mapping[0].File != modeltest.DefaultModule {
		t.Errorf("first mapping %s, want the most sampled program %s", prof.Mapping[0].File, modeltest.DefaultModule)
	}
	if len(prof.Comments) != 3 || !strings.Contains(prof.Comments[0], "LOST") {
		t.Errorf("comments %q, want the 3 header warnings", prof.Comments)
	}

	var count, period int64
	byThread := map[string]int64{}
	for _, s := range prof.Sample {
		count += s.Value[0]
		period += s.Value[1]
		key := fmt.Sprintf("%s pid=%v tid=%v", s.Label["thread"], s.NumLabel["pid"], s.NumLabel["tid"])
		byThread[key] += s.Value[0]
	}
	if count != 102 || period != 102_000_000 {
		t.Errorf("samples %d period %d, want 102 and 102ms", count, period)
	}
	wantThreads := map[string]int64{
		"[app] pid=[100] tid=[100]":    57,
		"[worker] pid=[100] tid=[101]": 19,
		"[db] pid=[200] tid=[200]":     26,
	}
	if fmt.Sprint(byThread) != fmt.Sprint(wantThreads) {
		t.Errorf("samples by thread label %v, want %v", byThread, wantThreads)
	}

	// compute>inl_helper: inl_helper (inlined) first, compute last.
	var found bool
	for _, l := range prof.Location {
		if len(l.Line) == 2 && l.Line[1].Function.Name == "compute" {
			found = true
			if l.Line[0].Function.Name != "inl_helper" {
				t.Errorf("inlined location lines %s, %s", l.Line[0].Function.Name, l.Line[1].Function.Name)
			}
			if l.Mapping == nil || l.Mapping.File != modeltest.DefaultModule || !l.Mapping.HasInlineFrames {
				t.Errorf("mapping %+v", l.Mapping)
			}
		}
	}
	if !found {
		t.Error("no location with compute and an inlined function")
	}
}

// TestPPROFEmpty exports a profile without samples.
func TestPPROFEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := PPROF(&buf, modeltest.New().Profile(), model.Filter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := profile.Parse(&buf); err != nil {
		t.Fatal(err)
	}
}

func TestFoldedGolden(t *testing.T) {
	tests := []struct {
		file string
		f    model.Filter
	}{
		{"folded.golden", model.Filter{}},
		{"folded-tid=101.golden", model.Filter{TID: 101, HasTID: true}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Folded(&buf, modeltest.Fixture(), tt.f, ""); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join("testdata", tt.file)
			testutil.Golden(t, file, buf.Bytes(), *update)
		})
	}
}

func TestFoldedEscapes(t *testing.T) {
	p := modeltest.New().Thread(1, 1, "java").
		Add(1, 1, "run;indexOf", 2).
		Add(1, 1, "", 1).
		Profile()
	// The builder's syntax cannot spell a ';' in a name: rename afterwards.
	p.Locations[1].Frames[0].Function = "Main.run(Ljava/lang/String;)V"
	p.Locations[2].Frames[0].Function = "String.indexOf(II)I\nx"
	var buf bytes.Buffer
	if err := Folded(&buf, p, model.Filter{}, ""); err != nil {
		t.Fatal(err)
	}
	want := "java;Main.run(Ljava/lang/String:)V;String.indexOf(II)I x 2\njava;[unknown] 1\n"
	if buf.String() != want {
		t.Errorf("got\n%swant\n%s", buf.String(), want)
	}
}

// TestIncarnations: a reused tid's two threads are two pprof samples,
// told apart by their names and creation; --thread selects by name.
func TestIncarnations(t *testing.T) {
	p := modeltest.New().Thread(1, 1, "app").Thread(1, 2, "pool").ThreadAt(1, 2, "io", 1_003_500_000).
		Add(1, 2, "main;work", 3). // 1.001s to 1.003s: pool
		Add(1, 2, "main;work", 2). // 1.004s and 1.005s: io
		Add(1, 1, "main", 1).
		Profile()
	prof, err := toPprof(loadedSource(p), model.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range prof.Sample {
		got = append(got, fmt.Sprint(s.Label["thread"], s.NumLabel["tid"], s.NumLabel["thread_start"], s.NumUnit["thread_start"], s.Value[0]))
	}
	if want := "[[app] [1] [] [] 1 [pool] [2] [] [] 3 [io] [2] [1003500000] [nanoseconds] 2]"; fmt.Sprint(got) != want {
		t.Errorf("samples %v, want %s", got, want)
	}
	var buf bytes.Buffer
	if err := Folded(&buf, p, model.Filter{Thread: "i?"}, ""); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "app;main;work 2\n" {
		t.Errorf("folded io: %q", buf.String())
	}
}

// TestGoroutineLabels: a Go target's samples are per goroutine, tagged
// with the goroutine and the runtime/pprof labels it carried when each
// sample was taken (not those it carried later).
func TestGoroutineLabels(t *testing.T) {
	p := modeltest.GoFixture()
	p.Events = nil // its samples alone: a sampling recording
	// Goroutine 1 gets its labels between its two samples (1011 µs and
	// 1030 µs); goroutine 7 has them from the start.
	p.Labels = []model.Labels{
		{Time: 1_000_000, PID: 5, GoID: 7, Pairs: []model.LabelPair{{Key: "req", Value: "b"}}},
		{Time: 1_020_000, PID: 5, GoID: 1, Pairs: []model.LabelPair{{Key: "req", Value: "a"}, {Key: "user", Value: "x"}}},
	}
	prof, err := toPprof(loadedSource(p), model.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range prof.Sample {
		var fns []string
		for i := len(s.Location) - 1; i >= 0; i-- {
			fns = append(fns, s.Location[i].Line[0].Function.Name)
		}
		got = append(got, fmt.Sprintf("g%v %v %v %s", s.NumLabel["goroutine"], s.Label, s.NumLabel["tid"], strings.Join(fns, ";")))
	}
	want := []string{
		"g[1] map[] [] main;recv",
		"g[1] map[req:[a] user:[x]] [] main;recv;copy",
		"g[7] map[req:[b]] [] handle;parse",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestExportsWeighAdaptedPeriods: for an event whose period adapts
// (page-faults sampled at a frequency), pprof's default sample type and
// the folded export's default value are the faults, the sum of the
// periods, which the reports' shares weigh by: go tool pprof -top shows
// the flat report's period sums.
func TestExportsWeighAdaptedPeriods(t *testing.T) {
	p := modeltest.New().Thread(1, 1, "app").Add(1, 1, "main;startup", 8).Add(1, 1, "main;fill;memset", 2).Profile()
	p.Header.Event, p.Header.Freq, p.Header.Period = "page-faults", 999, 0
	for i := range p.Samples {
		p.Samples[i].Period = uint64(1 + 999*(i/8)) // 8 of 1 fault, 2 of 1000
	}
	if prof := roundTrip(t, p); prof.DefaultSampleType != "page-faults" {
		t.Errorf("default sample type %q, want page-faults", prof.DefaultSampleType)
	}
	file := pprofFile(t, p)
	var r report.FlatReport
	reportJSON(t, p, report.Options{View: "flat", Format: "json"}, &r)
	want := map[string]flatRow{}
	for _, fn := range r.Functions {
		want[fn.Name] = flatRow{fn.Self.Period, fn.Total.Period}
	}
	if got := pprofTop(t, file); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pprof -top %v\ntrueprof flat's periods %v", got, want)
	}
	var buf bytes.Buffer
	if err := Folded(&buf, p, model.Filter{}, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "app;main;fill;memset 2000\n") || !strings.Contains(buf.String(), "app;main;startup 8\n") {
		t.Errorf("folded, default value:\n%s", buf.String())
	}
}
