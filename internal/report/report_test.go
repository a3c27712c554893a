package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenName names a golden file by the view and the options that produce
// it, the profile's aggregation last: testdata/instr-tree-raw-metric=cpu.text.golden,
// testdata/flat-granularity=files-no-inlines.json.golden.
func goldenName(prefix string, a model.Aggregation, o report.Options) string {
	name := prefix + o.View
	if o.HasPID {
		name += fmt.Sprintf("-pid=%d", o.PID)
	}
	if o.HasTID {
		name += fmt.Sprintf("-tid=%d", o.TID)
	}
	if o.Min != 0 {
		name += fmt.Sprintf("-min=%g", o.Min)
	}
	if o.Raw {
		name += "-raw"
	}
	if o.Metric != "" {
		name += "-metric=" + o.Metric
	}
	if o.Root != "" {
		name += "-root=" + o.Root
	}
	if o.Thread != "" {
		name += "-thread=" + o.Thread
	}
	if o.By != "" {
		name += "-by=" + o.By
	}
	if o.ExcludeInterrupts {
		name += "-exclude-interrupts"
	}
	if a.Granularity != model.Functions {
		name += "-granularity=" + a.Granularity.String()
	}
	if a.NoInlines {
		name += "-no-inlines"
	}
	return filepath.Join("testdata", name+"."+o.Format+".golden")
}

// runGolden renders p with each of opts and compares with the golden files.
func runGolden(t *testing.T, prefix string, p *model.Profile, opts []report.Options) {
	for _, o := range opts {
		file := goldenName(prefix, p.Aggregation, o)
		t.Run(strings.TrimPrefix(file, "testdata/"), func(t *testing.T) {
			var buf bytes.Buffer
			if err := report.Write(&buf, p, o); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, file, buf.Bytes(), *update)
			if o.Format == "json" && !json.Valid(buf.Bytes()) {
				t.Errorf("invalid JSON")
			}
		})
	}
}

func TestGolden(t *testing.T) {
	var opts []report.Options
	for _, view := range report.Views() {
		if view == "callflow" {
			continue // instrumented recordings only: TestInstrGolden
		}
		for _, format := range report.Formats() {
			opts = append(opts,
				report.Options{View: view, Format: format},
				report.Options{View: view, Format: format, Filter: model.Filter{PID: 100, HasPID: true}},
				report.Options{View: view, Format: format, Min: 5},
			)
		}
	}
	opts = append(opts, report.Options{View: "tree", Format: "text", Filter: model.Filter{PID: 100, TID: 101, HasPID: true, HasTID: true}})
	runGolden(t, "", modeltest.Fixture(), opts)
}

func TestWriteErrors(t *testing.T) {
	p := modeltest.Fixture()
	tests := []struct {
		name string
		o    report.Options
		is   error  // wrapped sentinel, if any
		want string // substring of the message
	}{
		{"unknown view", report.Options{View: "top", Format: "text"}, report.ErrUnknownView, "valid: arcflow, callflow, flat, threads, tprof, tree"},
		{"empty view", report.Options{Format: "text"}, report.ErrUnknownView, "valid: arcflow, callflow, flat, threads, tprof, tree"},
		{"unknown format", report.Options{View: "flat", Format: "xml"}, report.ErrUnknownFormat, "valid: json, text"},
		{"negative min", report.Options{View: "flat", Format: "text", Min: -1}, nil, "invalid minimum"},
		{"unknown metric", report.Options{View: "flat", Format: "text", Metric: "cycles"}, report.ErrUnknownMetric, "valid: wall, cpu, dispatches"},
		{"callflow of samples", report.Options{View: "callflow", Format: "text"}, report.ErrNotInstrumented,
			"callflow needs an instrumented recording (function entry/exit events, from trueprof record --trace or --root); this trace has only samples: use arcflow, flat, threads, tprof, tree"},
		{"callflow of samples, json", report.Options{View: "callflow", Format: "json"}, report.ErrNotInstrumented, "callflow needs an instrumented recording"},
		{"root of samples", report.Options{View: "tree", Format: "text", Root: "main"}, report.ErrNotInstrumented, "a root function needs an instrumented recording: this profile has only samples"},
		{"cpu metric of samples", report.Options{View: "flat", Format: "text", Metric: "cpu"}, report.ErrNotInstrumented, "metric cpu needs an instrumented recording: this profile has only samples"},
		{"cpu metric without switches", report.Options{View: "threads", Format: "text", Metric: "cpu"}, nil, "the recording has no context switches"},
		{"unknown grouping", report.Options{View: "tree", Format: "text", By: "process"}, report.ErrUnknownGrouping, "valid: thread, goroutine"},
		{"goroutines of C", report.Options{View: "tree", Format: "text", By: "goroutine"}, calltree.ErrNoGoroutines, "not a Go target"},
		{"bad thread glob", report.Options{View: "flat", Format: "text", Filter: model.Filter{Thread: "[a-"}}, path.ErrBadPattern, "thread pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := report.Write(&buf, p, tt.o)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes on error", buf.Len())
			}
		})
	}
}

// writeJSON runs a JSON report into v.
func writeJSON(t *testing.T, p *model.Profile, o report.Options, v any) {
	t.Helper()
	o.Format = "json"
	var buf bytes.Buffer
	if err := report.Write(&buf, p, o); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		t.Fatalf("unmarshal: %v\n%s", err, buf.Bytes())
	}
}

// TestFlatJSONSchema checks the fields that consumers of the flat JSON
// rely on, by name, without going through the report's own types.
func TestFlatJSONSchema(t *testing.T) {
	var buf bytes.Buffer
	if err := report.Write(&buf, modeltest.Fixture(), report.Options{View: "flat", Format: "json"}); err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	total, ok := r["total"].(map[string]any)
	if !ok || total["samples"] != 102.0 {
		t.Errorf("total = %v, want {samples: 102, ...}", r["total"])
	}
	if r["lost"] != 4.0 {
		t.Errorf("lost = %v, want 4", r["lost"])
	}
	for _, k := range []string{"event", "span_ns", "processes", "threads", "throttled", "truncated", "lost_by_kind", "warnings"} {
		if _, ok := r[k]; !ok {
			t.Errorf("header field %q missing", k)
		}
	}
	funcs, ok := r["functions"].([]any)
	if !ok || len(funcs) == 0 {
		t.Fatalf("functions = %v", r["functions"])
	}
	for _, f := range funcs {
		f := f.(map[string]any)
		for _, k := range []string{"name", "module", "calls", "self", "total"} {
			if _, ok := f[k]; !ok {
				t.Errorf("function %v: field %q missing", f["name"], k)
			}
		}
		if f["calls"] != nil {
			t.Errorf("function %v: calls = %v, want null", f["name"], f["calls"])
		}
		for _, k := range []string{"self", "total"} {
			if m, ok := f[k].(map[string]any); !ok || m["samples"] == nil {
				t.Errorf("function %v: %s = %v, want {samples: N}", f["name"], k, f[k])
			}
		}
	}
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name                string
		f                   model.Filter
		samples             uint64
		processes, threads  int
		truncated           uint64
		firstFunction       string // flat's top function
		firstSelf, firstTot uint64
	}{
		{"none", model.Filter{}, 102, 2, 3, 4, "inl_helper", 42, 42},
		{"pid 100", model.Filter{PID: 100, HasPID: true}, 76, 1, 2, 0, "inl_helper", 42, 42},
		{"pid 100 tid 101", model.Filter{PID: 100, TID: 101, HasPID: true, HasTID: true}, 19, 1, 1, 0, "inl_helper", 12, 12},
		{"tid 200", model.Filter{TID: 200, HasTID: true}, 26, 1, 1, 4, "hash", 15, 15},
		{"no such pid", model.Filter{PID: 7, HasPID: true}, 0, 0, 0, 0, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r report.FlatReport
			writeJSON(t, modeltest.Fixture(), report.Options{View: "flat", Filter: tt.f}, &r)
			if r.Total.Samples != tt.samples || r.Processes != tt.processes || r.Threads != tt.threads || r.Truncated != tt.truncated {
				t.Errorf("header: samples %d processes %d threads %d truncated %d, want %d %d %d %d",
					r.Total.Samples, r.Processes, r.Threads, r.Truncated, tt.samples, tt.processes, tt.threads, tt.truncated)
			}
			if r.Lost != 4 || r.Throttled != 2 {
				t.Errorf("lost %d throttled %d, want the whole trace's 4 and 2", r.Lost, r.Throttled)
			}
			if tt.firstFunction == "" {
				if len(r.Functions) != 0 {
					t.Errorf("functions = %v, want none", r.Functions)
				}
				return
			}
			if len(r.Functions) == 0 {
				t.Fatal("no functions")
			}
			f := r.Functions[0]
			if f.Name != tt.firstFunction || f.Self.Samples != tt.firstSelf || f.Total.Samples != tt.firstTot {
				t.Errorf("top function %s self %d total %d, want %s %d %d", f.Name, f.Self.Samples, f.Total.Samples, tt.firstFunction, tt.firstSelf, tt.firstTot)
			}
			var sum uint64
			for _, f := range r.Functions {
				sum += f.Self.Samples
			}
			if sum != tt.samples {
				t.Errorf("self adds up to %d, want %d", sum, tt.samples)
			}
		})
	}
}

func TestMin(t *testing.T) {
	p := modeltest.Fixture() // 102 samples
	tests := []struct {
		name string
		min  float64
		// rows each view keeps
		flat, arcflow, tprof, tree int
	}{
		{"zero keeps all", 0, 18, 18, 21, 27},
		{"5%", 5, 6, 13, 15, 21},
		// inl_helper's leaf node in app's tree has exactly 30 samples.
		{"a row at exactly min is kept", 100 * 30.0 / 102, 1, 3, 4, 4},
		{"above everything", 101, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := report.Options{Min: tt.min}

			var flat report.FlatReport
			o.View = "flat"
			writeJSON(t, p, o, &flat)
			if len(flat.Functions) != tt.flat {
				t.Errorf("flat: %d functions, want %d", len(flat.Functions), tt.flat)
			}
			for _, f := range flat.Functions {
				if f.SelfPercent < tt.min-0.005 {
					t.Errorf("flat: %s self %.2f%% < min", f.Name, f.SelfPercent)
				}
			}

			var arc report.ArcflowReport
			o.View = "arcflow"
			writeJSON(t, p, o, &arc)
			if len(arc.Functions) != tt.arcflow {
				t.Errorf("arcflow: %d stanzas, want %d", len(arc.Functions), tt.arcflow)
			}

			var tp report.TprofReport
			o.View = "tprof"
			writeJSON(t, p, o, &tp)
			if n := countTprof(tp.Processes); n != tt.tprof {
				t.Errorf("tprof: %d rows, want %d", n, tt.tprof)
			}

			var tree report.TreeReport
			o.View = "tree"
			writeJSON(t, p, o, &tree)
			n := 0
			for _, pr := range tree.Processes {
				for _, th := range pr.Threads {
					n += countTree(th.Root, tt.min, t)
				}
			}
			if n != tt.tree {
				t.Errorf("tree: %d nodes, want %d", n, tt.tree)
			}
		})
	}
}

func countTprof(rows []report.TprofRow) int {
	n := len(rows)
	for _, r := range rows {
		n += countTprof(r.Children)
	}
	return n
}

func countTree(n report.TreeNode, min float64, t *testing.T) int {
	if n.CumPercent < min-0.005 {
		t.Errorf("tree: node %s cum %.2f%% < min", n.Name, n.CumPercent)
	}
	c := 1
	for _, ch := range n.Children {
		c += countTree(ch, min, t)
	}
	return c
}

func TestHeaderWarnings(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(p *model.Profile)
		want  []string // substrings of the text header, in order
		avoid []string
	}{
		{"fixture", func(*model.Profile) {},
			[]string{"Lost:       4 records", "Throttled:  2", "Truncated:  4 samples (3.92%)",
				"WARNING: 4 records LOST (kernel 3, wrap 0, size 0, unparsed 1)",
				"WARNING: the kernel THROTTLED sampling 2 times",
				"WARNING: 4 samples (3.92%) have a TRUNCATED call chain: the tree is incomplete"},
			[]string{"damaged", "end record"}},
		{"clean", func(p *model.Profile) {
			p.Lost, p.Throttled = model.LostCounts{}, 0
			for i := range p.Samples {
				p.Samples[i].Truncated = false
			}
		}, []string{"Lost:       0 records", "Truncated:  0 samples (0.00%)\n\n"}, []string{"WARNING"}},
		{"truncation reasons, by count then name", func(p *model.Profile) {
			p.Header.Callchain, p.Header.StackBytes = "auto", 8192
			n := 0
			for i := range p.Samples {
				if p.Samples[i].Truncated {
					p.Samples[i].Unwind = []trace.UnwindReason{trace.UnwindStackShort, trace.UnwindNoCFI, trace.UnwindStackShort, trace.UnwindBadFrame}[n%4]
					n++
				}
			}
		}, []string{"Callchain:  auto (8192-byte stack copies)", "Truncated:  4 samples (3.92%): stack-short 2, bad-frame 1, no-cfi 1\n"}, nil},
		{"damaged with offset", func(p *model.Profile) {
			p.End = nil
			p.Err = &trace.FormatError{Offset: 4096, Err: trace.ErrTruncated}
		}, []string{"WARNING: trace damaged at byte offset 4096: showing everything before it (" + trace.ErrTruncated.Error() + ")"}, []string{"end record"}},
		{"damaged", func(p *model.Profile) {
			p.End = nil
			p.Err = errors.New("unexpected EOF")
		}, []string{"WARNING: trace damaged: showing everything before the error (unexpected EOF)"}, nil},
		{"no end record", func(p *model.Profile) { p.End = nil },
			[]string{"WARNING: the trace has no end record"}, []string{"damaged"}},
		{"no end record, as loaded", func(p *model.Profile) { p.End, p.Err = nil, model.ErrNoEnd },
			[]string{"WARNING: the trace has no end record"}, []string{"damaged"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := modeltest.Fixture()
			tt.edit(p)
			var buf bytes.Buffer
			if err := report.Write(&buf, p, report.Options{View: "flat", Format: "text"}); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			rest := out
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("header lacks %q (in order):\n%s", w, out)
					continue
				}
				rest = rest[i+len(w):]
			}
			for _, a := range tt.avoid {
				if strings.Contains(out, a) {
					t.Errorf("header has %q:\n%s", a, out)
				}
			}

			var h report.Header
			writeJSON(t, p, report.Options{View: "flat"}, &h)
			if p.Err != nil && h.Error == "" {
				t.Errorf("JSON error field empty")
			}
			if (len(h.Warnings) == 0) != !strings.Contains(out, "WARNING") {
				t.Errorf("JSON warnings %q disagree with the text", h.Warnings)
			}
		})
	}
}

// TestEmpty checks that a profile without samples gives well-formed,
// empty reports rather than errors or nulls.
func TestEmpty(t *testing.T) {
	p := modeltest.New().Profile()
	for _, view := range report.Views() {
		for _, format := range report.Formats() {
			var buf bytes.Buffer
			err := report.Write(&buf, p, report.Options{View: view, Format: format})
			if view == "callflow" {
				if !errors.Is(err, report.ErrNotInstrumented) || buf.Len() != 0 {
					t.Errorf("callflow %s of samples: %v, %d bytes", format, err, buf.Len())
				}
				continue
			}
			if err != nil {
				t.Errorf("%s %s: %v", view, format, err)
			}
			if format == "json" && bytes.Contains(buf.Bytes(), []byte("null,")) && view != "flat" && view != "threads" {
				t.Errorf("%s json has a null: %s", view, buf.Bytes())
			}
		}
	}
}

// TestSamplingIncarnations: a reused tid's two threads are two trees and
// two tprof threads, and --thread selects them by name.
func TestSamplingIncarnations(t *testing.T) {
	p := modeltest.New().Thread(1, 1, "app").Thread(1, 2, "pool").ThreadAt(1, 2, "pool", 1_003_500_000).
		Add(1, 2, "main;work", 3).
		Add(1, 2, "main;rest", 2).
		Add(1, 1, "main", 1).
		Profile()
	p.Threads[2].Names = []string{"pool", "io"}
	p.Threads[2].Name = "io"
	var tree report.TreeReport
	writeJSON(t, p, report.Options{View: "tree"}, &tree)
	var got []string
	for _, th := range tree.Processes[0].Threads {
		leaf := &th.Root
		for len(leaf.Children) > 0 {
			leaf = &leaf.Children[0]
		}
		got = append(got, fmt.Sprint(th.Name, " ", th.Start, " ", th.Root.Cum.Samples, " ", leaf.Name))
	}
	if want := "[pool_2 0 3 work io_2 1003500000 2 rest app_1 0 1 main]"; fmt.Sprint(got) != want {
		t.Errorf("trees %v, want %s", got, want)
	}
	out := writeText(t, p, report.Options{View: "tprof"})
	if !strings.Contains(out, "TID          3   50.00  pool_2\n") || !strings.Contains(out, "TID          2   33.33  io_2\n") {
		t.Errorf("tprof:\n%s", out)
	}
	for pattern, want := range map[string]uint64{"pool": 5, "io": 2, "2": 5, "a*": 1} {
		var flat report.FlatReport
		writeJSON(t, p, report.Options{View: "flat", Filter: model.Filter{Thread: pattern}}, &flat)
		if flat.Total.Samples != want || flat.Filter == nil || flat.Filter.Thread != pattern {
			t.Errorf("--thread %s: %d samples, want %d", pattern, flat.Total.Samples, want)
		}
	}
	if out := writeText(t, p, report.Options{View: "flat", Filter: model.Filter{Thread: "io"}}); !strings.Contains(out, "Filter:     thread \"io\"\nSamples:    2") ||
		!strings.Contains(out, "Processes:  1, threads 1") {
		t.Errorf("filtered header:\n%s", out)
	}
}

// TestSamplingGoroutines: by goroutine, a thread's samples go to the
// goroutine it last switched to, before that to the thread.
func TestSamplingGoroutines(t *testing.T) {
	p := modeltest.New().Thread(1, 1, "app").
		Add(1, 1, "rt0", 1).    // 1.001s
		Add(1, 1, "main", 2).   // 1.002s, 1.003s
		Add(1, 1, "worker", 1). // 1.004s
		Profile()
	p.GoIDs = []model.GoID{{Time: 1_002_000_000, PID: 1, TID: 1, GoID: 1}, {Time: 1_003_500_000, PID: 1, TID: 1, GoID: 9}}
	var tree report.TreeReport
	writeJSON(t, p, report.Options{View: "tree", By: "goroutine"}, &tree)
	var got []string
	for _, th := range tree.Processes[0].Threads {
		got = append(got, fmt.Sprint(th.Name, " ", th.Root.Cum.Samples))
	}
	if want := "[goroutine 1 2 app_1 1 goroutine 9 1]"; fmt.Sprint(got) != want {
		t.Errorf("trees %v, want %s", got, want)
	}
}

// TestSharesByPeriod: an event whose period the kernel adapts (a
// non-clock event sampled at a frequency) weighs each sample by its
// period in every view's shares, order and --min, as perf report's
// Overhead does; a clock event's samples, of a fixed period, count as
// samples. Eight samples of 1 fault at the start and two of 1,000 later
// are 0.40% and 99.60% of the faults, not 80% and 20%.
func TestSharesByPeriod(t *testing.T) {
	profile := func(event string, freq, period uint64) *model.Profile {
		p := modeltest.New().Thread(1, 1, "app").
			Add(1, 1, "main;startup", 8).
			Add(1, 1, "main;fill;memset", 2).
			Profile()
		p.Header.Event, p.Header.Freq, p.Header.Period = event, freq, period
		for i := range p.Samples {
			p.Samples[i].Period = 1
			if i >= 8 {
				p.Samples[i].Period = 1000
			}
		}
		return p
	}
	for _, tt := range []struct {
		name                string
		p                   *model.Profile
		shareBy             string
		startup, memset     float64
		firstFlat, firstKid string // flat's first row, main's first child
	}{
		{"page-faults -F", profile("page-faults", 999, 0), "period", 0.40, 99.60, "memset", "fill"},
		// -c fixes the period (the samples' periods here only test the rule).
		{"page-faults -c", profile("page-faults", 0, 1), "samples", 80, 20, "startup", "startup"},
		{"cpu-clock -F", profile("cpu-clock", 999, 0), "samples", 80, 20, "startup", "startup"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var flat report.FlatReport
			writeJSON(t, tt.p, report.Options{View: "flat"}, &flat)
			if flat.ShareBy != tt.shareBy {
				t.Errorf("share_by %q, want %q", flat.ShareBy, tt.shareBy)
			}
			pct := map[string]float64{}
			for _, f := range flat.Functions {
				pct[f.Name] = f.SelfPercent
			}
			if pct["startup"] != tt.startup || pct["memset"] != tt.memset || flat.Functions[0].Name != tt.firstFlat {
				t.Errorf("flat: startup %.2f%%, memset %.2f%%, first %s; want %.2f%%, %.2f%%, %s",
					pct["startup"], pct["memset"], flat.Functions[0].Name, tt.startup, tt.memset, tt.firstFlat)
			}
			var tree report.TreeReport
			writeJSON(t, tt.p, report.Options{View: "tree"}, &tree)
			main := tree.Processes[0].Threads[0].Root.Children[0]
			if first := main.Children[0]; first.Name != tt.firstKid {
				t.Errorf("tree: main's first child %s, want %s", first.Name, tt.firstKid)
			}
			for _, c := range main.Children {
				if want := map[string]float64{"startup": tt.startup, "fill": tt.memset}[c.Name]; c.CumPercent != want {
					t.Errorf("tree: %s %.2f%%, want %.2f%%", c.Name, c.CumPercent, want)
				}
			}
			var tprof report.TprofReport
			writeJSON(t, tt.p, report.Options{View: "tprof"}, &tprof)
			for _, sym := range tprof.Processes[0].Children[0].Children[0].Children {
				if want := map[string]float64{"startup": tt.startup, "memset": tt.memset}[sym.Name]; sym.Percent != want {
					t.Errorf("tprof: %s %.2f%%, want %.2f%%", sym.Name, sym.Percent, want)
				}
			}
			var arc report.ArcflowReport
			writeJSON(t, tt.p, report.Options{View: "arcflow", Min: 50}, &arc)
			if len(arc.Functions) == 0 || arc.Functions[0].Name != "main" {
				t.Errorf("arcflow --min 50: %+v", arc.Functions)
			}
			for _, f := range arc.Functions {
				if f.Name == "startup" && tt.shareBy == "period" {
					t.Errorf("arcflow --min 50 kept startup (%.2f%% of the faults)", f.CumPercent)
				}
			}
			var text bytes.Buffer
			if err := report.Write(&text, tt.p, report.Options{View: "flat", Format: "text"}); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(text.String(), "Shares:     of the period sum"); got != (tt.shareBy == "period") {
				t.Errorf("text header says shares by period: %v, want %v\n%s", got, tt.shareBy == "period", text.String())
			}
		})
	}
}
