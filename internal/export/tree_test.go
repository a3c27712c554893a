package export

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
	"trueprof/internal/testutil"
)

// instrRow is a function of the flat report of an instrumented
// recording in one sample type of the export: self and total (total is
// NaN where the report has none: calls).
type instrRow struct{ self, total float64 }

// instrFlat runs trueprof's flat report of the instrumented recording p
// under f, by goroutine when p has goroutine switches (as the export),
// and returns its rows in each sample type of the export, keyed as the
// export names functions.
func instrFlat(t *testing.T, p *model.Profile, f model.Filter) (rows map[string]map[string]instrRow, total calltree.Metrics) {
	t.Helper()
	o := report.Options{View: "flat", Format: "json", Filter: f}
	if len(p.GoIDs) > 0 {
		o.By = "goroutine"
	}
	var r report.InstrFlatReport
	reportJSON(t, p, o, &r)
	names := names{}
	for _, fn := range r.Functions {
		names.add(calltree.Func{Name: fn.Name, Module: fn.Module})
	}
	rows = map[string]map[string]instrRow{}
	for _, fn := range r.Functions {
		name := names.export(calltree.Func{Name: fn.Name, Module: fn.Module})
		for typ, row := range map[string]instrRow{
			"calls":    {float64(fn.Calls), math.NaN()},
			"wall":     {fn.Self.WallNS, fn.Total.WallNS},
			"wall_raw": {float64(fn.Self.WallNSRaw), float64(fn.Total.WallNSRaw)},
			"cpu":      {fn.Self.CPUNS, fn.Total.CPUNS},
			"samples":  {float64(fn.Self.Samples), float64(fn.Total.Samples)},
		} {
			if rows[typ] == nil {
				rows[typ] = map[string]instrRow{}
			}
			rows[typ][name] = row
		}
	}
	return rows, r.Total
}

// nodesOf counts the nodes of r's trees per function name and in all:
// each node's exported value is rounded with an error under 1, so a
// function's flat is within its node count of the report's self, and a
// cum within the count of all nodes.
func nodesOf(r *calltree.Result) (perName map[string]int, all int) {
	perName = map[string]int{}
	walkPaths(r, func(_ *calltree.Process, _ *calltree.Thread, path []*calltree.Node, n *calltree.Node) {
		all++
		if len(path) > 0 {
			perName[n.Name]++
		}
	})
	return perName, all
}

// within reports whether pprof's integer value is the report's value v
// within tol (rounding); a report value without a counterpart (NaN)
// matches anything.
func within(got uint64, v float64, tol int) bool {
	return math.IsNaN(v) || math.Abs(float64(got)-v) <= float64(tol)+0.5
}

// TestTreePPROFMatchesFlat is the oracle of the export of instrumented
// recordings: `go tool pprof -top -sample_index=T` shows, function by
// function, the calls (flat), self (flat) and total (cum) of trueprof's
// flat report, for every sample type T of the export, on the fixture of
// the instrumented views (calibrated, switches, a reused tid, repairs,
// samples alongside) under thread filters, the Go fixture (by
// goroutine) and random recordings (fractional calibration clamped at
// zero, recursion, pauses, interrupts, goroutines).
func TestTreePPROFMatchesFlat(t *testing.T) {
	type input struct {
		name string
		p    func() *model.Profile
		f    model.Filter
	}
	inputs := []input{
		{"instr", modeltest.InstrFixture, model.Filter{}},
		{"instr/pid=3", modeltest.InstrFixture, model.Filter{PID: 3, HasPID: true}},
		{"instr/thread=io", modeltest.InstrFixture, model.Filter{Thread: "io"}},
		{"go", modeltest.GoFixture, model.Filter{}},
	}
	for i := range 3 {
		inputs = append(inputs, input{fmt.Sprint("random", i), func() *model.Profile {
			return modeltest.RandomHooks(rand.New(rand.NewPCG(21, uint64(i))), i != 2)
		}, model.Filter{}})
	}
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			p := in.p()
			src := loadedSource(p)
			prof, err := toPprof(src, in.f)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "profile.pb.gz")
			var buf bytes.Buffer
			if err := prof.Write(&buf); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			want, _ := instrFlat(t, p, in.f)
			r, err := src.tree(in.f)
			if err != nil {
				t.Fatal(err)
			}
			nodes, all := nodesOf(r)
			for _, st := range prof.SampleType {
				if st.Type == p.Header.Event {
					continue // the samples' period: samples times a fixed period here
				}
				got := pprofTop(t, file, "-sample_index="+st.Type, "-unit=ns")
				compared := 0
				for name, w := range want[st.Type] {
					g, ok := got[name]
					fn, _, _ := strings.Cut(name, " (") // nodesOf's key
					if !ok {
						// pprof leaves out functions whose every value is 0.
						if !within(0, w.self, nodes[fn]) || !within(0, w.total, all) {
							t.Errorf("%s %s: missing from pprof -top (self %v, total %v)", st.Type, name, w.self, w.total)
						}
						continue
					}
					compared++
					if !within(g.self, w.self, nodes[fn]) || !within(g.total, w.total, all) {
						t.Errorf("%s %s: pprof flat %d cum %d, trueprof self %v total %v", st.Type, name, g.self, g.total, w.self, w.total)
					}
				}
				for name := range got {
					if _, ok := want[st.Type][name]; !ok {
						t.Errorf("%s %s: in pprof -top only", st.Type, name)
					}
				}
				if compared == 0 && (st.Type == "calls" || st.Type == "wall") {
					t.Errorf("%s: no function compared", st.Type)
				}
			}
		})
	}
}

// TestTreePPROF parses the export of the fixture of the instrumented
// views back and checks what pprof's reports do not show: the sample
// types by what the recording holds, the totals against the analysis's,
// the thread labels, the span and the comments.
func TestTreePPROF(t *testing.T) {
	tests := []struct {
		name  string
		p     func() *model.Profile
		types string
	}{
		{"instr", modeltest.InstrFixture, "calls/count wall/nanoseconds wall_raw/nanoseconds cpu/nanoseconds samples/count cpu-clock/nanoseconds"},
		{"hooks", func() *model.Profile {
			return modeltest.NewHooks().Thread(1, 1, "app").Run(1, 1, "0 +main 10 +f 30 -f 45 -main").Profile()
		}, "calls/count wall/nanoseconds wall_raw/nanoseconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p()
			prof := roundTrip(t, p)
			var types []string
			for _, st := range prof.SampleType {
				types = append(types, st.Type+"/"+st.Unit)
			}
			if strings.Join(types, " ") != tt.types {
				t.Errorf("sample types %q, want %q", types, tt.types)
			}
			if prof.DefaultSampleType != "wall" {
				t.Errorf("default sample type %q", prof.DefaultSampleType)
			}
			r, err := calltree.Build(p, calltree.Options{})
			if err != nil {
				t.Fatal(err)
			}
			sums := map[string]int64{}
			for _, s := range prof.Sample {
				for i, st := range prof.SampleType {
					sums[st.Type] += s.Value[i]
				}
			}
			want := map[string]float64{"calls": float64(r.Calls), "wall": r.Total.WallNS, "wall_raw": float64(r.Total.WallNSRaw),
				"cpu": r.Total.CPUNS, "samples": float64(r.Total.Samples), "cpu-clock": float64(r.Total.Period)}
			for typ, sum := range sums {
				if float64(sum) != math.Round(want[typ]) {
					t.Errorf("%s adds up to %d, want %v rounded", typ, sum, want[typ])
				}
			}
			var first, last uint64
			for i, pr := range r.Processes {
				for j, th := range pr.Threads {
					if i+j == 0 || th.BeginNS < first {
						first = th.BeginNS
					}
					last = max(last, th.EndNS)
				}
			}
			if prof.DurationNanos != int64(last-first) || prof.TimeNanos != p.Header.StartTime.UnixNano() {
				t.Errorf("duration %d at %d, want %d at %d", prof.DurationNanos, prof.TimeNanos, last-first, p.Header.StartTime.UnixNano())
			}
			comments := strings.Join(prof.Comments, "\n")
			for _, w := range r.Warnings {
				if !strings.Contains(comments, w) {
					t.Errorf("comments lack the analysis's warning %q:\n%s", w, comments)
				}
			}
		})
	}

	// Each thread incarnation's paths carry its labels: the reused tid 2
	// is two threads, told apart by their names and creation.
	prof, err := toPprof(loadedSource(modeltest.InstrFixture()), model.Filter{PID: 1, HasPID: true})
	if err != nil {
		t.Fatal(err)
	}
	wall := map[string]int64{}
	for _, s := range prof.Sample {
		wall[fmt.Sprint(s.Label["thread"], s.NumLabel["pid"], s.NumLabel["tid"], s.NumLabel["thread_start"])] += s.Value[1]
	}
	got := fmt.Sprint(wall)
	for _, th := range []string{"[app] [1] [1] []", "[worker] [1] [2] []", "[io] [1] [2] [1400000]"} {
		if !strings.Contains(got, th+":") {
			t.Errorf("wall by thread labels %s: no %s", got, th)
		}
	}
}

// foldedLine is a line of folded stacks as flamegraph.pl reads it: the
// frames, separated by ';', a space and a whole number.
var foldedLine = regexp.MustCompile(`^([^;\n]+(?:;[^;\n]+)*) (\d+)$`)

// TestTreeFolded reads the folded export of the fixture of the
// instrumented views by flamegraph.pl's conventions, for each value: the
// lines add up to the report's total, the lines that end in a function
// to its self in the flat report, the process names' own lines to the
// time outside traced calls; and it compares the default and the calls
// with golden files.
func TestTreeFolded(t *testing.T) {
	p := modeltest.InstrFixture()
	want, total := instrFlat(t, p, model.Filter{})
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, all := nodesOf(r)
	totals := map[string]float64{"calls": float64(r.Calls), "wall": total.WallNS, "wall_raw": float64(total.WallNSRaw),
		"cpu": total.CPUNS, "samples": float64(total.Samples)}
	for _, value := range []string{"", "calls", "wall", "wall_raw", "cpu", "samples"} {
		var buf bytes.Buffer
		if err := Folded(&buf, p, model.Filter{}, value); err != nil {
			t.Fatal(err)
		}
		typ := cmp.Or(value, "wall")
		var sum uint64
		self := map[string]uint64{}
		var outside uint64
		for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
			m := foldedLine.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("%s: line %q is not flamegraph.pl's frames;... N", typ, l)
			}
			n, _ := strconv.ParseUint(m[2], 10, 64)
			sum += n
			frames := strings.Split(m[1], ";")
			if len(frames) == 1 {
				outside += n
				continue
			}
			self[frames[len(frames)-1]] += n
		}
		if float64(sum) != math.Round(totals[typ]) {
			t.Errorf("%s: the lines add up to %d, want %v", typ, sum, totals[typ])
		}
		var functions float64
		for name, w := range want[typ] {
			functions += w.self
			if strings.Contains(name, " (") {
				continue // folded lines do not name modules
			}
			if !within(self[name], w.self, nodes[name]) {
				t.Errorf("%s %s: folded %d, flat self %v", typ, name, self[name], w.self)
			}
		}
		if !within(outside, totals[typ]-functions, all) {
			t.Errorf("%s: process lines %d, want the time outside traced calls %v", typ, outside, totals[typ]-functions)
		}
		if value == "" || value == "calls" {
			name := "folded-instr"
			if value != "" {
				name += "-value=" + value
			}
			testutil.Golden(t, filepath.Join("testdata", name+".golden"), buf.Bytes(), *update)
		}
	}
	var buf bytes.Buffer
	for _, tt := range []struct {
		p     *model.Profile
		value string
	}{{p, "x"}, {p, "cpu-clock-period"}, {modeltest.Fixture(), "wall"}} {
		if err := Folded(&buf, tt.p, model.Filter{}, tt.value); !errors.Is(err, ErrUnknownValue) {
			t.Errorf("value %q: %v, want ErrUnknownValue", tt.value, err)
		}
	}
	if buf.Len() > 0 {
		t.Errorf("refused values wrote %q", buf.String())
	}
}

// TestAggregatedExportsTrees: an aggregated recording (record --aggregate
// of calls 20000 with the hook: main calls mid 20,000 times, mid calls
// leaf twice; testdata/aggregated.trace) exports its trees' call paths,
// with the calls calltree counts in them, loaded and streamed alike; its
// samples alone would export nothing.
func TestAggregatedExportsTrees(t *testing.T) {
	p, s := modeltest.OpenBoth(t, "testdata/aggregated.trace")
	if !p.Aggregated() || len(p.Events) != 0 {
		t.Fatalf("fixture: aggregated %v, %d events", p.Aggregated(), len(p.Events))
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	for _, f := range r.Functions {
		calls[f.Name] = f.Calls
	}
	want := fmt.Sprintf("calls;main %d\ncalls;main;mid %d\ncalls;main;mid;leaf %d\n", calls["main"], calls["mid"], calls["leaf"])
	if want != "calls;main 1\ncalls;main;mid 20000\ncalls;main;mid;leaf 40000\n" {
		t.Fatalf("calltree counts\n%s", want)
	}
	var loaded, streamed bytes.Buffer
	if err := Folded(&loaded, p, model.Filter{}, "calls"); err != nil {
		t.Fatal(err)
	}
	if err := FoldedStream(&streamed, s, model.Filter{}, "calls"); err != nil {
		t.Fatal(err)
	}
	if loaded.String() != want || streamed.String() != want {
		t.Errorf("folded calls, loaded:\n%s\nstreamed:\n%s\nwant:\n%s", loaded.String(), streamed.String(), want)
	}
}
